"""Metadata files the server did not write (register, register-view): checked the way Iceberg Java's
``TableMetadataParser`` / ``ViewMetadataParser`` read them, before a catalog entry points at one.

What is checked: the fields those parsers require, for the file's format version; every schema;
every number within the Java type it is read into (orjson reads integers beyond 64 bits as floats:
Java refuses them). A file that passes can be committed to like any other. Errors are 400s that name
the field, never the file's content.
"""

from __future__ import annotations

from typing import Any

from catalog import errors
from catalog.metadata import reading as r
from catalog.metadata import schemas
from catalog.metadata.builder import read_schemas, read_specs


def check_table(doc: dict[str, Any]) -> dict[str, Any]:
    version = r.int_(doc, "format-version")
    if not 1 <= version <= 3:
        raise errors.ValidationFailed(f"Unsupported format version: v{version}")
    r.str_(doc, "location")
    r.long_(doc, "last-updated-ms")
    r.int_(doc, "last-column-id")
    if version >= 2:
        r.str_(doc, "table-uuid")
        r.long_(doc, "last-sequence-number")
        for key in ("current-schema-id", "default-spec-id", "last-partition-id", "default-sort-order-id"):
            r.int_(doc, key)
        for key in ("schemas", "partition-specs", "sort-orders"):
            r.array(doc, key)
    if version >= 3:
        r.long_(doc, "next-row-id")
    r.str_map(doc, "properties", {})
    _numbers_fit(doc, "metadata")
    all_schemas, current = read_schemas(doc)
    for schema in all_schemas:
        schemas.parse_schema(schema)
    if not any(s.get("schema-id") == current for s in all_schemas):
        raise errors.ValidationFailed(f"Cannot find schema with current-schema-id={current} from schemas")
    specs, default_spec, _ = read_specs(doc)
    if not any(s.get("spec-id") == default_spec for s in specs):
        raise errors.ValidationFailed(f"Cannot find spec with default-spec-id={default_spec} from partition-specs")
    for snapshot in r.array(doc, "snapshots", []):
        r.long_(r.obj(snapshot, "snapshot"), "snapshot-id")
    return doc


def check_view(doc: dict[str, Any]) -> dict[str, Any]:
    version = r.int_(doc, "format-version")
    if version != 1:
        raise errors.ValidationFailed(f"Unsupported view format version: {version}")
    r.str_(doc, "view-uuid")
    r.str_(doc, "location")
    current = r.int_(doc, "current-version-id")
    r.str_map(doc, "properties", {})
    _numbers_fit(doc, "view metadata")
    for schema in r.array(doc, "schemas"):
        schemas.parse_schema(schema)
    versions = [r.int_(r.obj(v, "view version"), "version-id") for v in r.array(doc, "versions")]
    if current not in versions:
        raise errors.ValidationFailed(f"Cannot find current version {current} in view versions")
    r.array(doc, "version-log")
    return doc


def _numbers_fit(value: Any, where: str) -> None:
    """Every number is an integer within a Java long (ids, timestamps, counters), except a column's
    default value. orjson reads integers beyond 64 bits as floats: no other float belongs here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(v for k, v in item.items() if k not in _DEFAULTS)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float) or (
            isinstance(item, int) and not isinstance(item, bool) and not r.LONG_MIN <= item <= r.LONG_MAX
        ):
            raise errors.ValidationFailed(f"Cannot parse {where}: a number does not fit a long")


_DEFAULTS = frozenset({"initial-default", "write-default"})
