"""Parsing the requirements and updates of a commit request, as Java's ``UpdateRequirementParser`` and
``MetadataUpdateParser`` read them: every field checked, the objects they carry (snapshots, refs,
statistics, encryption keys) turned into the JSON Java would write for them.

A request is parsed whole before anything is applied, as Java parses the whole request body first:
a malformed last update is a 400 even when an earlier requirement would fail. Parsing checks only what
Java's parsers check (the JSON's shape, and what the parsed objects' constructors check); the rest is
checked where Java checks it, in order: a requirement of the other kind of entity when the requirements
are validated, a ref's retention values when its ``set-snapshot-ref`` is applied, an update of the other
kind of entity when it is applied.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

from catalog import errors
from catalog.metadata import partitioning, schemas
from catalog.metadata import reading as r

TABLE_REQUIREMENTS = frozenset(
    {
        "assert-create",
        "assert-table-uuid",
        "assert-ref-snapshot-id",
        "assert-last-assigned-field-id",
        "assert-current-schema-id",
        "assert-last-assigned-partition-id",
        "assert-default-spec-id",
        "assert-default-sort-order-id",
    }
)
VIEW_REQUIREMENTS = frozenset({"assert-view-uuid"})
# Java's class names, for its "Cannot validate <class> against a table / view"
REQUIREMENT_CLASSES = {
    "assert-create": "AssertTableDoesNotExist",
    "assert-table-uuid": "AssertTableUUID",
    "assert-view-uuid": "AssertViewUUID",
    "assert-ref-snapshot-id": "AssertRefSnapshotID",
    "assert-last-assigned-field-id": "AssertLastAssignedFieldId",
    "assert-current-schema-id": "AssertCurrentSchemaID",
    "assert-last-assigned-partition-id": "AssertLastAssignedPartitionId",
    "assert-default-spec-id": "AssertDefaultSpecID",
    "assert-default-sort-order-id": "AssertDefaultSortOrderID",
}


class Requirement(NamedTuple):
    type: str
    value: Any = None  # the asserted value (uuid, id, ...)
    ref: str | None = None  # assert-ref-snapshot-id


class Update(NamedTuple):
    action: str
    value: Any = None


def parse_requirements(items: Any) -> list[Requirement]:
    """Requirements of either kind of entity: one that does not apply to the entity fails when it is
    validated (``wrong_kind``), in order, as Java's ``UpdateRequirement.validate`` does."""
    if not isinstance(items, list):
        raise errors.BadRequest(f"Cannot parse requirements from non-array: {r.show(items)}")
    return [_requirement(item) for item in items]


def wrong_kind(check: Requirement, what: str) -> errors.BadRequest:
    """A requirement validated against the other kind of entity: a 400 with Java's message (Java: a
    ValidationException; the server answers such misdirected requests as BadRequest, see
    ``not_applicable``)."""
    return errors.BadRequest(f"Cannot validate {REQUIREMENT_CLASSES[check.type]} against {what}")


def _requirement(node: Any) -> Requirement:
    node = r.obj(node, "update requirement")
    kind = r.str_(node, "type").lower()
    if kind not in REQUIREMENT_CLASSES:
        raise errors.BadRequest(f"Cannot parse update requirement. Invalid type: {r.show(kind)}")
    if kind == "assert-create":
        return Requirement(kind)
    if kind in ("assert-table-uuid", "assert-view-uuid"):
        return Requirement(kind, r.str_(node, "uuid"))
    if kind == "assert-ref-snapshot-id":
        return Requirement(kind, r.long_or_none(node, "snapshot-id"), r.str_(node, "ref"))
    key = kind.removeprefix("assert-")
    return Requirement(kind, r.int_(node, key))


def parse_updates(items: Any, parsers: dict[str, Any], foreign: dict[str, Any]) -> list[Update]:
    """``parsers``: the entity's updates; ``foreign``: the other kind's, parsed all the same (Java's
    parser knows every action) and refused when applied (``not_applicable``), in order."""
    if not isinstance(items, list):
        raise errors.BadRequest(f"Cannot parse updates from non-array: {r.show(items)}")
    out = []
    for item in items:
        node = r.obj(item, "metadata update")
        if node.get("action") is None:
            raise errors.BadRequest("Cannot parse metadata update. Missing field: action")
        action = r.str_(node, "action").lower()
        parser = parsers.get(action) or foreign.get(action)
        if parser is None:
            raise errors.BadRequest(f"Cannot parse metadata update. Unknown action: {r.show(action)}")
        out.append(Update(action, parser(node)))
    return out


def not_applicable(update: Update, what: str) -> errors.BadRequest:
    """An update of the other kind of entity, reached in order (Java: UnsupportedOperationException)."""
    return errors.BadRequest(f"Cannot apply update {update.action} to {what}")


# --- the payloads ----------------------------------------------------------------------------------


def uuid_(node: dict) -> str:
    return r.str_(node, "uuid")


def format_version(node: dict) -> int:
    return r.int_(node, "format-version")


def schema(node: dict) -> schemas.Schema:
    # Java ignores the request's last-column-id: the builder keeps max(last, highest field id).
    if node.get("schema") is None:
        raise errors.BadRequest("Cannot parse missing field: schema")
    return schemas.parse_schema(node["schema"])


def schema_id(node: dict) -> int:
    return r.int_(node, "schema-id")


def spec(node: dict) -> partitioning.UnboundSpec:
    if node.get("spec") is None:
        raise errors.BadRequest("Cannot parse missing field: spec")
    # Java's parser requires the spec's id here, and its clients and pyiceberg's always send it
    return partitioning.parse_spec(node["spec"], require_id=True)


def spec_id(node: dict) -> int:
    return r.int_(node, "spec-id")


def sort_order(node: dict) -> partitioning.UnboundOrder:
    if node.get("sort-order") is None:
        raise errors.BadRequest("Cannot parse missing field: sort-order")
    return partitioning.parse_order(node["sort-order"])


def sort_order_id(node: dict) -> int:
    return r.int_(node, "sort-order-id")


def location(node: dict) -> str:
    return r.str_(node, "location")


def set_properties(node: dict) -> dict[str, str]:
    key = "updated" if "updated" in node and "updates" not in node else "updates"
    return r.str_map(node, key)


def remove_properties(node: dict) -> list[str]:
    key = "removed" if "removed" in node and "removals" not in node else "removals"
    return r.str_list(node, key)


def snapshot_ids(node: dict) -> list[int]:
    if node.get("snapshot-ids") is None:
        raise errors.BadRequest("Invalid set of snapshot ids to remove: must be non-null")
    return r.long_list(node, "snapshot-ids")


def snapshot_id(node: dict) -> int:
    return r.long_(node, "snapshot-id")


def int_set(key: str):
    def parse(node: dict) -> list[int]:
        return list(dict.fromkeys(r.int_list(node, key)))

    return parse


def ref_name(node: dict) -> str:
    return r.str_(node, "ref-name")


def key_id(node: dict) -> str:
    return r.str_(node, "key-id")


class Snapshot(NamedTuple):
    json: dict  # as Java writes it
    snapshot_id: int
    parent_id: int | None
    sequence_number: int
    timestamp_ms: int
    first_row_id: int | None
    added_rows: int | None


def snapshot(node: dict) -> Snapshot:
    """Java's ``SnapshotParser.fromJson`` and ``BaseSnapshot``'s checks; 1.10 adds ``key-id``."""
    if node.get("snapshot") is None:
        raise errors.BadRequest("Cannot parse missing field: snapshot")
    node = r.obj(node["snapshot"], "snapshot")
    sequence_number = r.long_(node, "sequence-number") if "sequence-number" in node else 0
    snapshot_id = r.long_(node, "snapshot-id")
    parent_id = r.long_or_none(node, "parent-snapshot-id")
    timestamp_ms = r.long_(node, "timestamp-ms")
    operation, summary = None, None
    if "summary" in node:
        given = node["summary"]
        if not isinstance(given, dict):
            raise errors.BadRequest(f"Cannot parse summary from non-object value: {r.show(given)}")
        if given:
            r.str_map(node, "summary")
            operation = given.get("operation", "overwrite")
            summary = {"operation": operation, **{k: v for k, v in given.items() if k != "operation"}}
    schema_id = r.int_or_none(node, "schema-id")
    first_row_id = r.long_or_none(node, "first-row-id")
    added_rows = r.long_or_none(node, "added-rows")
    key_id = r.str_or_none(node, "key-id")
    manifest_list = r.str_(node, "manifest-list") if "manifest-list" in node else None
    manifests = None if manifest_list is not None else r.str_list(node, "manifests")
    if manifest_list is not None:
        if first_row_id is not None and first_row_id < 0:
            raise errors.ValidationFailed(f"Invalid first-row-id (cannot be negative): {first_row_id}")
        if added_rows is not None and added_rows < 0:
            raise errors.ValidationFailed(f"Invalid added-rows (cannot be negative): {added_rows}")
        if first_row_id is not None and added_rows is None:
            raise errors.ValidationFailed("Invalid added-rows (required when first-row-id is set): null")
        if first_row_id is None:
            added_rows = None
    else:  # Java's v1 embedded-manifests snapshot carries no row lineage
        first_row_id = added_rows = None
    out: dict[str, Any] = {}
    if sequence_number > 0:
        out["sequence-number"] = sequence_number
    out["snapshot-id"] = snapshot_id
    if parent_id is not None:
        out["parent-snapshot-id"] = parent_id
    out["timestamp-ms"] = timestamp_ms
    if summary is not None:
        out["summary"] = summary
    if manifest_list is not None:
        out["manifest-list"] = manifest_list
    else:
        out["manifests"] = manifests
    if schema_id is not None:
        out["schema-id"] = schema_id
    if first_row_id is not None:
        out["first-row-id"] = first_row_id
        out["added-rows"] = added_rows
    if key_id is not None:
        out["key-id"] = key_id
    return Snapshot(out, snapshot_id, parent_id, sequence_number, timestamp_ms, first_row_id, added_rows)


class Ref(NamedTuple):
    name: str
    snapshot_id: int
    json: dict


def snapshot_ref(node: dict) -> Ref:
    """Java's ``readSetSnapshotRef``: the fields' types only (the type must be a branch or a tag); the
    ref's values are checked when the update is applied (``check_ref``)."""
    name = r.str_(node, "ref-name")
    return Ref(name, r.long_(node, "snapshot-id"), ref_json(node))


def ref_json(node: dict) -> dict:
    """The ref as Java writes it (not checked: ``check_ref``)."""
    snapshot_id = r.long_(node, "snapshot-id")
    kind = r.str_(node, "type").lower()
    if kind not in ("branch", "tag"):
        raise errors.BadRequest(f"Invalid snapshot ref type: {r.show(kind)}")
    min_snapshots = r.int_or_none(node, "min-snapshots-to-keep")
    max_snapshot_age = r.long_or_none(node, "max-snapshot-age-ms")
    max_ref_age = r.long_or_none(node, "max-ref-age-ms")
    out: dict[str, Any] = {"snapshot-id": snapshot_id, "type": kind}
    if min_snapshots is not None:
        out["min-snapshots-to-keep"] = min_snapshots
    if max_snapshot_age is not None:
        out["max-snapshot-age-ms"] = max_snapshot_age
    if max_ref_age is not None:
        out["max-ref-age-ms"] = max_ref_age
    return out


def check_ref(ref: dict) -> None:
    """Java's ``SnapshotRef.Builder`` checks, in its order (run when ``set-snapshot-ref`` is applied)."""
    kind = ref["type"]
    min_snapshots = ref.get("min-snapshots-to-keep")
    max_snapshot_age = ref.get("max-snapshot-age-ms")
    max_ref_age = ref.get("max-ref-age-ms")
    if kind == "tag" and min_snapshots is not None:
        raise errors.ValidationFailed("Tags do not support setting minSnapshotsToKeep")
    if min_snapshots is not None and min_snapshots <= 0:
        raise errors.ValidationFailed("Min snapshots to keep must be greater than 0")
    if kind == "tag" and max_snapshot_age is not None:
        raise errors.ValidationFailed("Tags do not support setting maxSnapshotAgeMs")
    if max_snapshot_age is not None and max_snapshot_age <= 0:
        raise errors.ValidationFailed("Max snapshot age must be greater than 0 ms")
    if max_ref_age is not None and max_ref_age <= 0:
        raise errors.ValidationFailed("Max reference age must be greater than 0")


def ref_key(ref: dict) -> tuple:
    """What Java's ``SnapshotRef.equals`` compares (a stored ref may spell absent values as null)."""
    return (
        ref.get("snapshot-id"),
        str(ref.get("type", "branch")).lower(),
        ref.get("min-snapshots-to-keep"),
        ref.get("max-snapshot-age-ms"),
        ref.get("max-ref-age-ms"),
    )


def statistics(node: dict) -> dict:
    """Java's ``StatisticsFileParser`` (the update's own ``snapshot-id`` is ignored, as Java does)."""
    if node.get("statistics") is None:
        raise errors.BadRequest("Cannot parse missing field: statistics")
    node = r.obj(node["statistics"], "statistics file")
    out = {
        "snapshot-id": r.long_(node, "snapshot-id"),
        "statistics-path": r.str_(node, "statistics-path"),
        "file-size-in-bytes": r.long_(node, "file-size-in-bytes"),
        "file-footer-size-in-bytes": r.long_(node, "file-footer-size-in-bytes"),
    }
    blobs = node.get("blob-metadata")
    if not isinstance(blobs, list):
        raise errors.BadRequest(f"Cannot parse blob metadata from non-array: {r.show(blobs)}")
    out["blob-metadata"] = [_blob(blob) for blob in blobs]
    return out


def _blob(node: Any) -> dict:
    node = r.obj(node, "blob metadata")
    out = {
        "type": r.str_(node, "type"),
        "snapshot-id": r.long_(node, "snapshot-id"),
        "sequence-number": r.long_(node, "sequence-number"),
        "fields": r.int_list(node, "fields"),
    }
    properties = r.str_map(node, "properties", {})
    if properties:
        out["properties"] = properties
    return out


def partition_statistics(node: dict) -> dict:
    if node.get("partition-statistics") is None:
        raise errors.BadRequest("Cannot parse missing field: partition-statistics")
    node = r.obj(node["partition-statistics"], "partition statistics file")
    return {
        "snapshot-id": r.long_(node, "snapshot-id"),
        "statistics-path": r.str_(node, "statistics-path"),
        "file-size-in-bytes": r.long_(node, "file-size-in-bytes"),
    }


def encryption_key(node: dict) -> dict:
    """Java 1.10's ``EncryptedKeyParser``: the key metadata is base64, written back padded."""
    key = node.get("encryption-key")
    if not isinstance(key, dict):
        raise errors.BadRequest(f"Invalid encryption key, must be non-null object: {r.show(key)}")
    key_id = r.str_(key, "key-id")
    metadata = r.str_(key, "encrypted-key-metadata")
    try:
        raw = base64.b64decode(metadata + "=" * (-len(metadata) % 4), validate=True)
    except (binascii.Error, ValueError) as e:
        raise errors.BadRequest(f"Invalid encrypted-key-metadata (not base64): {r.show(metadata)}") from e
    out = {"key-id": key_id, "encrypted-key-metadata": base64.b64encode(raw).decode()}
    encrypted_by = r.str_or_none(key, "encrypted-by-id")
    if encrypted_by is not None:
        out["encrypted-by-id"] = encrypted_by
    properties = r.str_map(key, "properties", {})
    if properties:
        out["properties"] = properties
    return out


# the actions of a table commit (a view's: ``views.UPDATE_PARSERS``)
TABLE_UPDATE_PARSERS = {
    "assign-uuid": uuid_,
    "upgrade-format-version": format_version,
    "add-schema": schema,
    "set-current-schema": schema_id,
    "add-spec": spec,
    "set-default-spec": spec_id,
    "add-sort-order": sort_order,
    "set-default-sort-order": sort_order_id,
    "add-snapshot": snapshot,
    "set-snapshot-ref": snapshot_ref,
    "remove-snapshots": snapshot_ids,
    "remove-snapshot-ref": ref_name,
    "set-location": location,
    "set-properties": set_properties,
    "remove-properties": remove_properties,
    "set-statistics": statistics,
    "remove-statistics": snapshot_id,
    "set-partition-statistics": partition_statistics,
    "remove-partition-statistics": snapshot_id,
    "remove-partition-specs": int_set("spec-ids"),
    "remove-schemas": int_set("schema-ids"),
    "add-encryption-key": encryption_key,
    "remove-encryption-key": key_id,
}
