"""Request bodies the server parses: their envelopes. Response bodies are built directly as JSON.

Schemas, partition specs, sort orders, view versions, requirements and updates stay JSON objects
here: the metadata engine (``catalog.metadata``) validates them, with the Java reference's rules,
for every format version (a malformed one is a 400 there).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

JSONObject = dict[str, Any]


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
    table_schema: JSONObject = Field(alias="schema")
    partition_spec: JSONObject | None = Field(default=None, alias="partition-spec")
    write_order: JSONObject | None = Field(default=None, alias="write-order")
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


class CommitRequest(Body):
    """updateTable, replaceView, and each table change of a transaction."""

    identifier: TableIdentifier | None = None
    requirements: list[JSONObject] = Field(default_factory=list)
    updates: list[JSONObject] = Field(default_factory=list)


class CommitTransactionRequest(Body):
    table_changes: list[CommitRequest] = Field(alias="table-changes", min_length=1)


class ReportMetricsRequest(Body):
    report_type: str = Field(alias="report-type")


class CreateViewRequest(Body):
    name: str
    location: str | None = None
    view_schema: JSONObject = Field(alias="schema")
    view_version: JSONObject = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)

    @field_validator("properties", mode="before")
    @classmethod
    def _as_strings(cls, v: object) -> object:
        return _str_values(v) if v is not None else {}


class RegisterViewRequest(Body):
    name: str
    metadata_location: str = Field(alias="metadata-location")
