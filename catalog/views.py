"""The pure part of a view commit: view requirements + updates -> new ViewMetadata. No I/O.

pyiceberg models view metadata but not its updates, so the update semantics (Java's
``ViewMetadata.Builder``) are here: ids are assigned by the server, ``-1`` means "the last one added
in this commit", an identical schema or version is reused instead of added twice, and switching the
current version appends to the version log.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from . import errors


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class AssertViewUUID(_Model):
    type: Literal["assert-view-uuid"]
    uuid: str


class AssignUUID(_Model):
    action: Literal["assign-uuid"]
    uuid: str


class UpgradeFormatVersion(_Model):
    action: Literal["upgrade-format-version"]
    format_version: int = Field(alias="format-version")


class AddSchema(_Model):
    action: Literal["add-schema"]
    schema_: Schema = Field(alias="schema")
    last_column_id: int | None = Field(default=None, alias="last-column-id")


class SetLocation(_Model):
    action: Literal["set-location"]
    location: str


class SetProperties(_Model):
    action: Literal["set-properties"]
    updates: dict[str, str]


class RemoveProperties(_Model):
    action: Literal["remove-properties"]
    removals: list[str]


class AddViewVersion(_Model):
    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersion(_Model):
    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUID
    | UpgradeFormatVersion
    | AddSchema
    | SetLocation
    | SetProperties
    | RemoveProperties
    | AddViewVersion
    | SetCurrentViewVersion,
    Field(discriminator="action"),
]


def new_view(location: str, schema: Schema, version: ViewVersion, properties: dict[str, str]) -> ViewMetadata:
    """A view's first metadata: schema id 0, version id 1, that version current."""
    schema = schema.model_copy(update={"schema_id": 0})
    version = version.model_copy(update={"version_id": 1, "schema_id": 0})
    return ViewMetadata(
        view_uuid=str(uuid.uuid4()),
        format_version=1,
        location=location,
        schemas=[schema],
        current_version_id=1,
        versions=[version],
        version_log=[ViewHistoryEntry(timestamp_ms=version.timestamp_ms, version_id=1)],
        properties=properties,
    )


def check_requirements(requirements: Sequence[AssertViewUUID], base: ViewMetadata) -> None:
    for requirement in requirements:
        if requirement.uuid != base.view_uuid:
            raise errors.CommitFailed(
                f"Requirement failed: view UUID does not match: expected {requirement.uuid} != {base.view_uuid}"
                " (assert-view-uuid)"
            )


def apply_updates(base: ViewMetadata, updates: Sequence[ViewUpdate]) -> ViewMetadata:
    """Apply the updates in order; returns ``base`` itself when there are none."""
    if not updates:
        return base
    builder = _Builder(base)
    for update in updates:
        builder.apply(update)
    return builder.build()


class _Builder:
    def __init__(self, base: ViewMetadata) -> None:
        self.md = {"view_uuid": base.view_uuid, "location": base.location, "properties": dict(base.properties)}
        self.schemas: list[Schema] = list(base.schemas)
        self.versions: list[ViewVersion] = list(base.versions)
        self.log: list[ViewHistoryEntry] = list(base.version_log)
        self.current = base.current_version_id
        self.last_schema: int | None = None
        self.last_version: int | None = None
        self.added_versions: set[int] = set()

    def apply(self, update: ViewUpdate) -> None:  # noqa: C901 - one branch per action, by design
        if isinstance(update, AssignUUID):
            if update.uuid != self.md["view_uuid"]:
                raise errors.ValidationFailed(f"Cannot reassign view UUID {self.md['view_uuid']} to {update.uuid}")
        elif isinstance(update, UpgradeFormatVersion):
            if update.format_version != 1:
                raise errors.ValidationFailed(f"Unsupported view format version: {update.format_version}")
        elif isinstance(update, AddSchema):
            self.last_schema = self._add_schema(update.schema_)
        elif isinstance(update, SetLocation):
            self.md["location"] = update.location.rstrip("/")
        elif isinstance(update, SetProperties):
            self.md["properties"] = {**self.md["properties"], **update.updates}
        elif isinstance(update, RemoveProperties):
            self.md["properties"] = {k: v for k, v in self.md["properties"].items() if k not in update.removals}
        elif isinstance(update, AddViewVersion):
            self.last_version = self._add_version(update.view_version)
        elif isinstance(update, SetCurrentViewVersion):
            self._set_current(update.view_version_id)

    def _add_schema(self, schema: Schema) -> int:
        for existing in self.schemas:
            if existing.fields == schema.fields and existing.identifier_field_ids == schema.identifier_field_ids:
                return existing.schema_id
        new_id = max((s.schema_id for s in self.schemas), default=-1) + 1
        self.schemas.append(schema.model_copy(update={"schema_id": new_id}))
        return new_id

    def _add_version(self, version: ViewVersion) -> int:
        schema_id = version.schema_id
        if schema_id == -1:
            if self.last_schema is None:
                raise errors.ValidationFailed("Cannot set last added schema: no schema has been added")
            schema_id = self.last_schema
        if not any(s.schema_id == schema_id for s in self.schemas):
            raise errors.ValidationFailed(f"Cannot add version with unknown schema: {schema_id}")
        for existing in self.versions:
            if _same_version(existing, version, schema_id):
                return existing.version_id
        new_id = max((v.version_id for v in self.versions), default=0) + 1
        self.versions.append(version.model_copy(update={"version_id": new_id, "schema_id": schema_id}))
        self.added_versions.add(new_id)
        return new_id

    def _set_current(self, version_id: int) -> None:
        if version_id == -1:
            if self.last_version is None:
                raise errors.ValidationFailed("Cannot set last version: no version has been added")
            version_id = self.last_version
        version = next((v for v in self.versions if v.version_id == version_id), None)
        if version is None:
            raise errors.ValidationFailed(f"Cannot set current version to unknown version: {version_id}")
        if version_id != self.current:
            stamp = version.timestamp_ms if version_id in self.added_versions else int(time.time() * 1000)
            self.log.append(ViewHistoryEntry(timestamp_ms=stamp, version_id=version_id))
        self.current = version_id

    def build(self) -> ViewMetadata:
        return ViewMetadata(
            view_uuid=self.md["view_uuid"],
            format_version=1,
            location=self.md["location"],
            schemas=self.schemas,
            current_version_id=self.current,
            versions=self.versions,
            version_log=self.log,
            properties=self.md["properties"],
        )


def _same_version(a: ViewVersion, b: ViewVersion, schema_id: int) -> bool:
    return (
        a.schema_id == schema_id
        and a.representations == b.representations
        and a.default_catalog == b.default_catalog
        and tuple(a.default_namespace) == tuple(b.default_namespace)
        and a.summary == b.summary
    )
