"""Request bodies the server parses. Response bodies are built directly as JSON.

pyiceberg's own request models are client-side (some fields required that the spec makes optional),
so the server defines its own, reusing pyiceberg's Schema/PartitionSpec/SortOrder and its discriminated
unions of TableRequirement and TableUpdate (an unknown ``action`` or ``type`` fails to parse: 400).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.view.metadata import ViewVersion

from ..views import AssertViewUUID, ViewUpdate


class Body(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


def _str_values(value: object) -> object:
    if isinstance(value, dict):
        return {
            k: v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()
        }
    return value


class CreateNamespaceRequest(Body):
    namespace: list[str] = Field(min_length=1)
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("properties", mode="before")
    @classmethod
    def _no_null(cls, v: object) -> object:
        return {} if v is None else v


class UpdateNamespacePropertiesRequest(Body):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)

    @field_validator("removals", "updates", mode="before")
    @classmethod
    def _no_null(cls, v: object, info: object) -> object:
        if v is None:
            return [] if getattr(info, "field_name", "") == "removals" else {}
        return v


class TableIdentifier(Body):
    namespace: list[str]
    name: str


class CreateTableRequest(Body):
    name: str
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(default=None, alias="partition-spec")
    write_order: SortOrder | None = Field(default=None, alias="write-order")
    stage_create: bool = Field(default=False, alias="stage-create")
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("properties", mode="before")
    @classmethod
    def _as_strings(cls, v: object) -> object:
        return _str_values(v) if v is not None else {}


class RegisterTableRequest(Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class RenameTableRequest(Body):
    source: TableIdentifier
    destination: TableIdentifier


class CommitTableRequest(Body):
    identifier: TableIdentifier | None = None
    requirements: list[TableRequirement] = Field(default_factory=list)
    updates: list[TableUpdate] = Field(default_factory=list)


class CommitTransactionRequest(Body):
    table_changes: list[CommitTableRequest] = Field(alias="table-changes", min_length=1)


class ReportMetricsRequest(Body):
    report_type: str = Field(alias="report-type")


class CreateViewRequest(Body):
    name: str
    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("properties", mode="before")
    @classmethod
    def _as_strings(cls, v: object) -> object:
        return _str_values(v) if v is not None else {}


class CommitViewRequest(Body):
    identifier: TableIdentifier | None = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate] = Field(default_factory=list)


class RegisterViewRequest(Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
