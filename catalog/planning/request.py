"""A ``PlanTableScanRequest`` read and checked: every field's type, the snapshots it names, the
columns of ``select`` and ``stats-fields``; anything wrong is a 400 naming the field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pyiceberg.expressions import BooleanExpression
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata

from catalog import errors
from catalog.planning import filters

MAX_NAMES = 10_000  # select / stats-fields entries
KNOWN = frozenset(
    {
        "snapshot-id",
        "select",
        "filter",
        "min-rows-requested",
        "case-sensitive",
        "use-snapshot-schema",
        "start-snapshot-id",
        "end-snapshot-id",
        "stats-fields",
    }
)


@dataclass(frozen=True)
class ScanRequest:
    snapshot_id: int | None  # the point-in-time scan's snapshot (None: the table's current one)
    start_snapshot_id: int | None  # incremental: exclusive start
    end_snapshot_id: int | None  # incremental: inclusive end
    filter_json: Any  # as sent (its canonical bytes go into plan-task tokens)
    select: tuple[str, ...] | None
    stats_fields: tuple[str, ...] | None
    case_sensitive: bool
    use_snapshot_schema: bool
    min_rows_requested: int | None

    @property
    def incremental(self) -> bool:
        return self.end_snapshot_id is not None

    def canonical(self) -> bytes:
        """What identifies the request in a token: filter, case sensitivity, schema choice, stats."""
        return orjson.dumps(
            [self.filter_json, self.case_sensitive, self.use_snapshot_schema, self.stats_fields],
            option=orjson.OPT_SORT_KEYS,
        )


def parse(body: bytes) -> ScanRequest:
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Invalid PlanTableScanRequest: malformed JSON") from None
    if not isinstance(doc, dict):
        raise errors.BadRequest("Invalid PlanTableScanRequest: expected a JSON object")
    start, end = _long(doc, "start-snapshot-id"), _long(doc, "end-snapshot-id")
    snapshot = _long(doc, "snapshot-id")
    if start is not None and end is None:
        raise errors.BadRequest("Invalid PlanTableScanRequest: start-snapshot-id needs end-snapshot-id")
    if end is not None and snapshot is not None:
        raise errors.BadRequest("Invalid PlanTableScanRequest: snapshot-id with an incremental range")
    min_rows = _long(doc, "min-rows-requested")
    if min_rows is not None and min_rows < 0:
        raise errors.BadRequest("Invalid PlanTableScanRequest: min-rows-requested must not be negative")
    return ScanRequest(
        snapshot_id=snapshot,
        start_snapshot_id=start,
        end_snapshot_id=end,
        filter_json=doc.get("filter"),
        select=_names(doc, "select"),
        stats_fields=_names(doc, "stats-fields"),
        case_sensitive=_bool(doc, "case-sensitive", True),
        use_snapshot_schema=_bool(doc, "use-snapshot-schema", False),
        min_rows_requested=min_rows,
    )


def from_token(canonical: Any) -> tuple[Any, bool, bool, tuple[str, ...] | None]:
    """The parts of ``ScanRequest.canonical`` back from a token's payload."""
    filter_json, case_sensitive, use_snapshot_schema, stats = canonical
    return filter_json, bool(case_sensitive), bool(use_snapshot_schema), tuple(stats) if stats is not None else None


def bound_filter(req_filter: Any, schema: Schema, case_sensitive: bool) -> BooleanExpression:
    return filters.parse(req_filter, schema, case_sensitive)


def check_columns(names: tuple[str, ...] | None, schema: Schema, case_sensitive: bool, what: str) -> list[int]:
    """The field ids of ``names`` in ``schema``; 400 naming the first that is not there."""
    if names is None:
        return []
    ids = []
    for name in names:
        try:
            ids.append(schema.find_field(name, case_sensitive).field_id)
        except ValueError:
            shown = name if len(name) <= 64 else name[:64] + "..."
            raise errors.BadRequest(f"Invalid {what}: no column {shown!r} in the table's schema") from None
    return ids


def schema_for(metadata: TableMetadata, snapshot_schema_id: int | None, use_snapshot_schema: bool) -> Schema:
    """The schema filters and names bind to: the snapshot's when asked (time travel), else the table's."""
    if use_snapshot_schema and snapshot_schema_id is not None:
        for schema in metadata.schemas:
            if schema.schema_id == snapshot_schema_id:
                return schema
    return metadata.schema()


def _long(doc: dict, key: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise errors.BadRequest(f"Invalid PlanTableScanRequest: {key} must be a 64-bit integer")
    return value


def _bool(doc: dict, key: str, default: bool) -> bool:
    value = doc.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise errors.BadRequest(f"Invalid PlanTableScanRequest: {key} must be a boolean")
    return value


def _names(doc: dict, key: str) -> tuple[str, ...] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise errors.BadRequest(f"Invalid PlanTableScanRequest: {key} must be a list of column names")
    if len(value) > MAX_NAMES:
        raise errors.BadRequest(f"Invalid PlanTableScanRequest: {key} lists more than {MAX_NAMES} names")
    return tuple(value)
