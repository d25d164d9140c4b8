"""View metadata: a commit's requirements checked and its updates applied to the view's metadata JSON
the way Iceberg Java's ``ViewMetadata.Builder`` and ``build()`` do (1.9.0; the version-log timestamp of
a re-activated version is the commit's time, as Java 1.10 fixed it).

Pure and copy-on-write like ``tables``: ``base`` is never mutated, untouched lists are shared, and a
commit that Java would record no change for returns ``base`` itself.
"""

from __future__ import annotations

import uuid as uuids
from typing import Any, NamedTuple

from catalog import errors
from catalog.metadata import parsing, schemas
from catalog.metadata import reading as r
from catalog.metadata.builder import REUSE_INDEX_AFTER, Reuse, frozen, java_int, schema_key
from catalog.metadata.parsing import Update

SUPPORTED_VIEW_FORMAT_VERSION = 1
VERSION_HISTORY_SIZE = "version.history.num-entries"
VERSION_HISTORY_SIZE_DEFAULT = 10
REPLACE_DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"


class Version(NamedTuple):
    json: dict  # as Java writes it
    version_id: int
    schema_id: int


def _version(node: Any, *, defer: bool = False) -> Version:
    """Java's ``ViewVersionParser.fromJson``; only SQL representations can be written back. Java reads
    another type as an unknown representation and fails only when it writes the metadata: ``defer``
    keeps it as ``{"type": ...}`` for the commit to refuse after its updates (``_unwritable``)."""
    node = r.obj(node, "view version")
    version_id = r.int_(node, "version-id")
    schema_id = r.int_(node, "schema-id")
    timestamp_ms = r.long_(node, "timestamp-ms")
    summary = r.str_map(node, "summary")
    representations = []
    for item in r.array(node, "representations"):
        item = r.obj(item, "view representation")
        kind = r.str_(item, "type").lower()
        if kind != "sql":
            if not defer:
                raise errors.BadRequest(_UNWRITABLE + r.show(kind))
            representations.append({"type": kind})
            continue
        representations.append({"type": "sql", "sql": r.str_(item, "sql"), "dialect": r.str_(item, "dialect")})
    default_catalog = r.str_or_none(node, "default-catalog")
    if node.get("default-namespace") is None:
        raise errors.BadRequest("Cannot parse missing field: default-namespace")
    namespace = r.str_list(node, "default-namespace")
    out: dict[str, Any] = {"version-id": version_id, "timestamp-ms": timestamp_ms, "schema-id": schema_id}
    out["summary"] = summary
    if default_catalog is not None:
        out["default-catalog"] = default_catalog
    out["default-namespace"] = namespace
    out["representations"] = representations
    return Version(out, version_id, schema_id)


def _view_version(node: dict) -> Version:
    if node.get("view-version") is None:
        raise errors.BadRequest("Cannot parse missing field: view-version")
    return _version(node["view-version"], defer=True)


_UNWRITABLE = "Cannot serialize unsupported view representation: "


def _unwritable(result: dict, added: set[int]) -> str | None:
    """The first representation type of a version the commit added that cannot be written (a base's
    versions are carried over as they are, see ``tables``; the versions are few)."""
    for version in result.get("versions") or ():
        if version["version-id"] not in added:
            continue
        for rep in version.get("representations") or ():
            kind = str(rep.get("type")).lower()
            if kind != "sql":
                return kind
    return None


def _view_version_id(node: dict) -> int:
    return r.int_(node, "view-version-id")


UPDATE_PARSERS = {
    "assign-uuid": parsing.uuid_,
    "upgrade-format-version": parsing.format_version,
    "add-schema": parsing.schema,
    "set-location": parsing.location,
    "set-properties": parsing.set_properties,
    "remove-properties": parsing.remove_properties,
    "add-view-version": _view_version,
    "set-current-view-version": _view_version_id,
}


def new_view(
    *,
    location: str,
    schema: dict,
    version: dict,
    properties: dict[str, str],
    now_ms: int,
    view_uuid: str | None = None,
) -> dict:
    """createView: Java's ``ViewMetadata.builder()`` with the properties, the location and the version as
    current (schema id 0, version id 1). The version keeps the client's timestamp and summary."""
    r.str_map({"properties": properties}, "properties")
    parsed = _version(version)
    builder = _Builder(None, now_ms)
    builder.uuid = view_uuid or str(uuids.uuid4())
    builder.set_properties(properties)
    builder.set_location(location)
    schema_id = builder.add_schema(schemas.parse_schema(schema))
    first = {**parsed.json, "version-id": 1, "schema-id": schema_id}
    builder.set_current_version(builder.add_version(Version(first, 1, schema_id)))
    return builder.build()


def apply(
    base: dict | None, requirements: list[dict], updates: list[dict], *, base_location: str | None, now_ms: int
) -> dict:
    """Check ``requirements`` (only ``assert-view-uuid`` applies to a view), then apply ``updates`` like
    Java's ``ViewMetadata.Builder``; returns ``base`` itself when nothing changed. Views keep no log of
    metadata files, so ``base_location`` is not used."""
    checks = parsing.parse_requirements(requirements)
    changes = parsing.parse_updates(updates, UPDATE_PARSERS, parsing.TABLE_UPDATE_PARSERS)
    if base is None:
        raise errors.BadRequest("A view commit needs an existing view")
    for check in checks:
        if check.type not in parsing.VIEW_REQUIREMENTS:
            raise parsing.wrong_kind(check, "a view")
        actual = base.get("view-uuid")
        if actual is None or check.value.lower() != actual.lower():
            raise errors.RequirementFailed(
                f"Requirement failed: view UUID does not match: expected {actual} != {check.value}"
            )
    builder = _Builder(base, now_ms)
    for update in changes:
        if update.action not in UPDATE_PARSERS:
            raise parsing.not_applicable(update, "a view")
        builder.apply(update)
    result = builder.build()
    # Java fails writing the new metadata, after every other check
    added = {change[1] for change in builder.changes if change[0] == "add-view-version"}
    unwritable = _unwritable(result, added) if added else None
    if unwritable is not None:
        raise errors.BadRequest(_UNWRITABLE + r.show(unwritable))
    return result


class _Builder:
    """Java's ``ViewMetadata.Builder``. Each update costs what it changes, whatever the commit's length:
    lists and the properties are copied once, on their first change; ids are looked up in sets; the
    reuse of an equal schema or version is a scan for the first few adds, then an index (``Reuse``)."""

    def __init__(self, base: dict | None, now_ms: int) -> None:
        self.base, self.now_ms = base, now_ms
        self.changes: list[tuple] = []
        self.owned: set[str] = set()
        self.added_versions: set[int] = set()
        self._versions_by_id: dict[int, dict] | None = None
        self._schema_ids: set[int] | None = None
        self._reuse: dict[str, Reuse] = {}
        self._scans: dict[str, int] = {}
        self.last_added_version: int | None = None
        self.last_added_schema: int | None = None
        self.history_entry: dict | None = None
        if base is None:
            self.uuid, self.format_version, self.location = None, 1, None
            self.properties: dict[str, str] = {}
            self.schemas: list[dict] = []
            self.versions: list[dict] = []
            self.history: list[dict] = []
            self.current_version_id = 0
            self.previous: dict | None = None
            return
        self.uuid = base.get("view-uuid")
        self.format_version = base.get("format-version", 1)
        self.location = base.get("location")
        self.properties = base.get("properties") or {}
        self.schemas = base.get("schemas") or []
        self.versions = base.get("versions") or []
        self.history = base.get("version-log") or []
        self.current_version_id = base["current-version-id"]
        self.previous = next((v for v in self.versions if v["version-id"] == self.current_version_id), None)

    def apply(self, update: Update) -> None:
        action, value = update
        if action == "assign-uuid":
            if self.uuid is not None and value != self.uuid:
                raise errors.ValidationFailed("Cannot reassign uuid")
            if value != self.uuid:
                self.uuid = value
                self.changes.append((action,))
        elif action == "upgrade-format-version":
            if value < self.format_version:
                raise errors.ValidationFailed(f"Cannot downgrade v{self.format_version} view to v{value}")
            if value != self.format_version:
                self.format_version = value
                self.changes.append((action,))
        elif action == "add-schema":
            self.add_schema(value)
        elif action == "set-location":
            self.set_location(value)
        elif action == "set-properties":
            self.set_properties(value)
        elif action == "remove-properties":
            if value:
                properties = self._own("properties")
                for key in value:
                    properties.pop(key, None)
                self.changes.append((action,))
        elif action == "add-view-version":
            self.add_version(value)
        else:
            self.set_current_version(value)

    def set_properties(self, updates: dict[str, str]) -> None:
        if updates:
            self._own("properties").update(updates)
            self.changes.append(("set-properties",))

    def set_location(self, location: str | None) -> None:
        if location is None:
            raise errors.ValidationFailed("Invalid location: null")
        if location != self.location:
            self.location = location
            self.changes.append(("set-location",))

    def _own(self, name: str) -> Any:
        """The builder's own copy of a list or dict attribute, made on its first change."""
        if name not in self.owned:
            setattr(self, name, getattr(self, name).copy())
            self.owned.add(name)
        return getattr(self, name)

    def _reused_id(self, name: str, id_field: str, key: Any, start: int, same: Any) -> int:
        """Java's reuse of an equal schema's or version's id, else one more than the highest (at least
        ``start``): a scan for the commit's first few adds, then an index of the list."""
        index = self._reuse.get(name)
        if index is None and self._scans.get(name, 0) >= REUSE_INDEX_AFTER:
            keys = {"schemas": schema_key, "versions": _version_key}
            index = self._reuse[name] = Reuse(getattr(self, name), id_field, keys[name])
        if index is not None:
            return index.find(key(), start)
        self._scans[name] = self._scans.get(name, 0) + 1
        new_id = start
        for existing in getattr(self, name):
            if same(existing):
                return existing[id_field]
            if existing[id_field] >= new_id:
                new_id = existing[id_field] + 1
        return new_id

    def _add(self, name: str, item: dict) -> None:
        self._own(name).append(item)
        index = self._reuse.get(name)
        if index is not None:
            index.add(item)

    def schema_ids(self) -> set[int]:
        if self._schema_ids is None:
            self._schema_ids = {schema["schema-id"] for schema in self.schemas}
        return self._schema_ids

    def versions_by_id(self) -> dict[int, dict]:
        if self._versions_by_id is None:
            self._versions_by_id = {}
            for version in self.versions:
                self._versions_by_id.setdefault(version["version-id"], version)
        return self._versions_by_id

    def add_schema(self, schema: schemas.Schema) -> int:
        new_id = self._reused_id("schemas", "schema-id", lambda: schema_key(schema.json), 0, schema.same)
        if new_id in self.schema_ids():  # reused
            return new_id
        self._add("schemas", schema.with_id(new_id).json)
        self.schema_ids().add(new_id)
        self.changes.append(("add-schema", new_id))
        self.last_added_schema = new_id
        return new_id

    def add_version(self, version: Version) -> int:
        new_id = self._reused_id(
            "versions",
            "version-id",
            lambda: _version_key(version.json),
            version.version_id,
            lambda existing: _same_version(existing, version.json),
        )
        if new_id in self.versions_by_id():
            self.last_added_version = new_id if new_id in self.added_versions else None
            return new_id
        schema_id = version.schema_id
        if schema_id == -1:
            if self.last_added_schema is None:
                raise errors.ValidationFailed("Cannot set last added schema: no schema has been added")
            schema_id = self.last_added_schema
        if schema_id not in self.schema_ids():
            raise errors.ValidationFailed(f"Cannot add version with unknown schema: {schema_id}")
        dialects: set[str] = set()
        for representation in version.json["representations"]:
            if representation["type"] != "sql":  # Java checks SQL representations' dialects only
                continue
            dialect = representation["dialect"].lower()
            if dialect in dialects:
                raise errors.ValidationFailed(
                    f"Invalid view version: Cannot add multiple queries for dialect {dialect}"
                )
            dialects.add(dialect)
        added = {**version.json, "version-id": new_id, "schema-id": schema_id}
        self._add("versions", added)
        self.versions_by_id().setdefault(new_id, added)
        self.added_versions.add(new_id)
        self.changes.append(("add-view-version", new_id))
        self.last_added_version = new_id
        return new_id

    def set_current_version(self, version_id: int) -> None:
        if version_id == -1:
            if self.last_added_version is None:
                raise errors.ValidationFailed("Cannot set last version id: no current version id has been set")
            version_id = self.last_added_version
        if version_id == self.current_version_id:
            return
        version = self.versions_by_id().get(version_id)
        if version is None:
            raise errors.ValidationFailed(f"Cannot set current version to unknown version: {version_id}")
        self.current_version_id = version_id
        self.changes.append(("set-current-view-version",))
        added = version_id in self.added_versions
        timestamp = version["timestamp-ms"] if added else self.now_ms
        self.history_entry = {"timestamp-ms": timestamp, "version-id": version_id}

    def build(self) -> dict:
        if not self.changes and self.base is not None:
            return self.base
        if self.location is None:
            raise errors.ValidationFailed("Invalid location: null")
        if not self.versions:
            raise errors.ValidationFailed("Invalid view: no versions were added")
        if not 0 < self.format_version <= SUPPORTED_VIEW_FORMAT_VERSION:
            raise errors.ValidationFailed(f"Unsupported format version: {self.format_version}")
        history = self.history if self.history_entry is None else [*self.history, self.history_entry]
        current = next((v for v in self.versions if v["version-id"] == self.current_version_id), None)
        if current is None:
            raise errors.ValidationFailed(f"Cannot find current version {self.current_version_id} in view versions")
        allowed = str(self.properties.get(REPLACE_DROP_DIALECT_ALLOWED, "false")).lower() == "true"
        if self.previous is not None and not allowed:
            before, after = _dialects(self.previous), _dialects(current)
            if not before <= after:
                raise errors.ValidationFailed(
                    f"Cannot replace view due to loss of view dialects ({REPLACE_DROP_DIALECT_ALLOWED}=false):\n"
                    f"Previous dialects: [{', '.join(sorted(before))}]\nNew dialects: [{', '.join(sorted(after))}]"
                )
        value = self.properties.get(VERSION_HISTORY_SIZE)
        history_size = java_int(value, VERSION_HISTORY_SIZE) if value is not None else VERSION_HISTORY_SIZE_DEFAULT
        if history_size <= 0:
            raise errors.ValidationFailed(f"{VERSION_HISTORY_SIZE} must be positive but was {history_size}")
        added = {change[1] for change in self.changes if change[0] == "add-view-version"}
        keep = max(len(added | {self.current_version_id}), history_size)
        versions = self.versions
        if len(versions) > keep:
            versions = _expire(versions, keep, current)
            retained = {v["version-id"] for v in versions}
            kept_history: list[dict] = []
            for entry in history:
                if entry["version-id"] in retained:
                    kept_history.append(entry)
                else:  # history before a version that is gone is dropped
                    kept_history.clear()
            history = kept_history
        out: dict[str, Any] = {"view-uuid": self.uuid or str(uuids.uuid4()), "format-version": self.format_version}
        out["location"] = self.location
        if self.properties:
            out["properties"] = self.properties
        out["schemas"] = self.schemas
        out["current-version-id"] = self.current_version_id
        out["versions"] = versions
        out["version-log"] = history
        return out


def _expire(versions: list[dict], keep: int, current: dict) -> list[dict]:
    """Java's ``expireVersions``: the current version, then the newest others (by id) up to ``keep``."""
    newest = sorted(versions, key=lambda v: v["version-id"], reverse=True)[:keep]
    retained = [current]
    for version in newest:
        if len(retained) == keep:
            break
        if version["version-id"] != current["version-id"]:
            retained.append(version)
    return retained


def _same_version(one: dict, two: dict) -> bool:
    """Java's ``sameViewVersion``: all but the version id, timestamp and operation."""
    return (
        one.get("summary") == two.get("summary")
        and _representations(one) == _representations(two)
        and one.get("default-catalog") == two.get("default-catalog")
        and one.get("default-namespace") == two.get("default-namespace")
        and one.get("schema-id") == two.get("schema-id")
    )


def _version_key(version: dict) -> Any:
    """What ``_same_version`` compares, hashable."""
    return (
        frozen(version.get("summary")),
        tuple(_representations(version)),
        version.get("default-catalog"),
        frozen(version.get("default-namespace")),
        version.get("schema-id"),
    )


def _representations(version: dict) -> list[tuple]:
    return [(str(rep.get("type")).lower(), rep.get("sql"), rep.get("dialect")) for rep in version["representations"]]


def _dialects(version: dict) -> set[str]:
    return {rep["dialect"].lower() for rep in version["representations"] if str(rep.get("type")).lower() == "sql"}
