"""Metadata invariants every commit and create must keep, as Iceberg's Java ``TableMetadata`` checks them.

The update engine (pyiceberg today) applies a commit's updates; this module then checks the result
against its base, independently of how it was built: ids in their Java ranges (a long or an int),
added specs and sort orders bound to the schema that was current when they were added, refs on
existing snapshots, sequence numbers and row ids consistent, and the snapshot / metadata log and
last-updated-ms in time order within Java's one-minute tolerance for clock skew.

A commit checks only what changed relative to its (already valid) base, so a table with 10,000
snapshots commits as fast as a new one; a create checks its whole, small, result. Messages are Java's
where Java has one. Where Java 1.9 accepts something (a snapshot whose parent is gone, a ``last-column-id``
lower than the current one, which both engines raise to the maximum) it is accepted here too. One
exception: a table's uuid never changes (Java 1.9's table builder lets ``assign-uuid`` replace it,
its view builder refuses), because clients' ``assert-table-uuid`` is only as good as that identity.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from pydantic import BaseModel
from pyiceberg.exceptions import ValidationError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    TableUpdate,
)

from . import errors

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
ONE_MINUTE_MS = 60_000

# Fields Java reads as an ``int`` (by the pydantic field name); every other integer field is a ``long``.
_INT_FIELDS = frozenset(
    {
        "format_version",
        "schema_id",
        "schema_ids",
        "current_schema_id",
        "field_id",
        "element_id",
        "key_id",
        "value_id",
        "identifier_field_ids",
        "last_column_id",
        "spec_id",
        "spec_ids",
        "default_spec_id",
        "source_id",
        "last_partition_id",
        "order_id",
        "sort_order_id",
        "default_sort_order_id",
        "min_snapshots_to_keep",
        "fields",  # a statistics blob's field ids (a schema's fields are models, walked instead)
    }
)
# bucket[N] and truncate[W] transforms: Java parses N and W as ints.
_TRANSFORM_INTS = {"num_buckets": "bucket", "width": "truncate"}
# Literal default values are typed data, not ids: their range follows the column type.
_NOT_IDS = frozenset({"initial_default", "write_default"})
# The top-level numbers of the metadata (its lists are checked element by element where they changed).
_SCALARS = (
    "format_version",
    "last_sequence_number",
    "last_updated_ms",
    "last_column_id",
    "current_schema_id",
    "default_spec_id",
    "last_partition_id",
    "default_sort_order_id",
    "current_snapshot_id",
    "next_row_id",
)


def check_ranges(items: Iterable[object]) -> None:
    """Raise a 400 when a number in a request's models (its updates; a create's schema, spec and order)
    does not fit the Java type it is parsed into: Java refuses such a request before applying it."""
    for item in items:
        _walk(item, "", "")


def check_commit(base: TableMetadata, new: TableMetadata, updates: Sequence[TableUpdate]) -> None:
    """Raise a 400 (or a retryable 409) when ``new``, built from ``base`` by ``updates``, is invalid.

    The updates' own numbers were checked by ``check_ranges`` before they were applied."""
    if new.table_uuid != base.table_uuid:  # the identity every assert-table-uuid relies on
        raise errors.ValidationFailed(f"Cannot reassign uuid: {base.table_uuid} to {new.table_uuid}")
    _check_scalars(new)
    _check_specs_and_orders(base, new, updates)
    added = _added_snapshots(base, new)
    _check_snapshots(new, added, _last_sequence_number(base))
    if _last_sequence_number(new) < _last_sequence_number(base):  # rare: only then can an old snapshot be ahead
        _check_sequence_bound(new, new.snapshots)
    _check_refs(base, new, added)
    _check_logs(base, new)
    if new.last_column_id < base.last_column_id:
        raise errors.ValidationFailed(
            f"Invalid last column ID: {new.last_column_id} < {base.last_column_id} (previous last column ID)"
        )
    if (new.last_partition_id or 0) < (base.last_partition_id or 0):
        raise errors.ValidationFailed(
            f"Invalid last partition ID: {new.last_partition_id} < {base.last_partition_id} "
            "(previous last partition ID)"
        )


def check_create(new: TableMetadata, updates: Sequence[TableUpdate] = ()) -> None:
    """Raise a 400 when a new table's metadata (built by a staged create's ``updates``, or directly) is invalid."""
    check_ranges([new])
    _check_specs_and_orders(None, new, updates)
    if not any(isinstance(u, AddPartitionSpecUpdate) for u in updates):  # a direct create: bind to its schema
        for spec in new.partition_specs:
            _compatible(spec, new.schema())
    if not any(isinstance(u, AddSortOrderUpdate) for u in updates):
        for order in new.sort_orders:
            _compatible(order, new.schema())
    _check_snapshots(new, new.snapshots, 0)
    _check_refs(None, new, new.snapshots)
    _check_logs(None, new)


# --- id ranges -------------------------------------------------------------------------------------


def _walk(value: object, name: str, alias: str) -> None:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        _in_range(value, name, alias)
    elif isinstance(value, BaseModel):
        for field, info in type(value).model_fields.items():
            if field not in _NOT_IDS:
                _walk(getattr(value, field, None), field, info.alias or field)
        for attribute, transform in _TRANSFORM_INTS.items():
            number = getattr(value, attribute, None)
            if isinstance(number, int) and not isinstance(number, bool):
                _in_range(number, attribute, transform)
    elif isinstance(value, (list, tuple)):
        for element in value:
            _walk(element, name, alias)
    elif isinstance(value, dict):
        for element in value.values():
            _walk(element, name, alias)


def _in_range(value: int, name: str, alias: str) -> None:
    if name in _INT_FIELDS or name in _TRANSFORM_INTS:
        if not INT_MIN <= value <= INT_MAX:
            raise errors.ValidationFailed(f"Cannot parse to an integer value: {alias}: {value}")
    elif not LONG_MIN <= value <= LONG_MAX:
        raise errors.ValidationFailed(f"Cannot parse to a long value: {alias}: {value}")


def _check_scalars(new: TableMetadata) -> None:
    fields = type(new).model_fields
    for name in _SCALARS:
        value = getattr(new, name, None)
        if isinstance(value, int):
            _in_range(value, name, (fields[name].alias or name) if name in fields else name)


def _appended(before: list, after: list) -> list | None:
    """What ``after`` appends to ``before`` (a commit's usual change), or None when it is not an append.

    List equality compares identity first, element by element in C: on the elements a commit shares
    with its base it costs microseconds for 10,000 snapshots."""
    n = len(before)
    if len(after) >= n and after[:n] == before:
        return after[n:]
    return None


# --- partition specs and sort orders ---------------------------------------------------------------


def _check_specs_and_orders(base: TableMetadata | None, new: TableMetadata, updates: Sequence[object]) -> None:
    """An added spec or order must bind to the schema current when it is added (Java binds each add to
    the builder's current schema); the default spec and order to the final current schema."""
    schemas = {schema.schema_id: schema for schema in base.schemas} if base is not None else {}
    current = schemas.get(base.current_schema_id) if base is not None else None
    last_added: Schema | None = None
    for update in updates:
        if isinstance(update, AddSchemaUpdate):
            schemas[update.schema_.schema_id] = last_added = update.schema_
        elif isinstance(update, SetCurrentSchemaUpdate):
            current = last_added if update.schema_id == -1 else schemas.get(update.schema_id, current)
        elif isinstance(update, AddPartitionSpecUpdate):
            existing = base.partition_specs if base is not None else []
            _bind_added(update.spec, existing, current)
        elif isinstance(update, AddSortOrderUpdate):
            _bind_added(update.sort_order, base.sort_orders if base is not None else [], current)
    schema = new.schema()
    _compatible(new.spec(), schema)
    _compatible(new.sort_order(), schema)


def _bind_added(
    added: PartitionSpec | SortOrder, existing: Sequence[PartitionSpec | SortOrder], current: Schema | None
) -> None:
    # Java reuses a spec or order that already exists without binding it again; before any schema
    # (a staged create's first updates) there is nothing to bind to yet: the defaults are checked at the end.
    if current is not None and not any(known.fields == added.fields for known in existing):
        _compatible(added, current)


def _compatible(spec_or_order: PartitionSpec | SortOrder, schema: Schema) -> None:
    try:
        spec_or_order.check_compatible(schema)
    except (ValidationError, ValueError) as e:
        raise errors.ValidationFailed(str(e)) from e


# --- snapshots, sequence numbers, row ids ----------------------------------------------------------


def _added_snapshots(base: TableMetadata, new: TableMetadata) -> list[Snapshot]:
    added = _appended(base.snapshots, new.snapshots)
    if added is not None:
        return added
    # Snapshots were also removed (or rebuilt): decide by id, not by identity.
    before = {snapshot.snapshot_id for snapshot in base.snapshots}
    return [snapshot for snapshot in new.snapshots if snapshot.snapshot_id not in before]


def _check_snapshots(new: TableMetadata, added: Sequence[Snapshot], last_sequence_number: int) -> None:
    """Java's snapshot parser and ``Builder.addSnapshot``, for the snapshots this commit added."""
    for snapshot in added:
        if snapshot.first_row_id is not None:
            if snapshot.first_row_id < 0:
                raise errors.ValidationFailed(f"Invalid first-row-id (cannot be negative): {snapshot.first_row_id}")
            if snapshot.added_rows is None:
                raise errors.ValidationFailed("Invalid added-rows (required when first-row-id is set): null")
        if snapshot.added_rows is not None and snapshot.added_rows < 0:
            raise errors.ValidationFailed(f"Invalid added-rows (cannot be negative): {snapshot.added_rows}")
        sequence_number = snapshot.sequence_number or 0
        stale = sequence_number <= last_sequence_number and snapshot.parent_snapshot_id is not None
        if stale and new.format_version > 1:
            # Retryable in the spec (the client rebuilds its snapshot on the new base): a 409.
            raise errors.CommitFailed(
                f"Cannot add snapshot with sequence number {sequence_number} "
                f"older than last sequence number {last_sequence_number}"
            )
        last_sequence_number = sequence_number
    _check_sequence_bound(new, added)


def _check_sequence_bound(new: TableMetadata, snapshots: Iterable[Snapshot]) -> None:
    last = _last_sequence_number(new)
    for snapshot in snapshots:
        if (snapshot.sequence_number or 0) > last:
            raise errors.ValidationFailed(
                f"Invalid snapshot with sequence number {snapshot.sequence_number} "
                f"greater than last sequence number {last}"
            )


def _last_sequence_number(metadata: TableMetadata) -> int:
    return getattr(metadata, "last_sequence_number", 0) or 0  # a v1 model has no such field: always 0


# --- refs and the current snapshot -----------------------------------------------------------------


def _check_refs(base: TableMetadata | None, new: TableMetadata, added: Sequence[Snapshot]) -> None:
    removed = base is not None and len(new.snapshots) - len(added) < len(base.snapshots)
    changed = {name: ref for name, ref in new.refs.items() if removed or base is None or base.refs.get(name) != ref}
    current = new.current_snapshot_id if new.current_snapshot_id is not None else -1
    base_current = base.current_snapshot_id if base is not None and base.current_snapshot_id is not None else -1
    if not changed and current == base_current and not removed:
        return
    new_ids = {snapshot.snapshot_id for snapshot in added}
    all_ids: set[int] | None = None

    def exists(snapshot_id: int) -> bool:
        nonlocal all_ids
        if snapshot_id in new_ids:
            return True
        if all_ids is None:  # a ref moved to an older snapshot: one pass over the history
            all_ids = {snapshot.snapshot_id for snapshot in new.snapshots}
        return snapshot_id in all_ids

    for name, ref in changed.items():
        if not exists(ref.snapshot_id):
            raise errors.ValidationFailed(
                f"Snapshot for reference {name} does not exist in the existing snapshots list"
            )
    main = new.refs.get(MAIN_BRANCH)
    if current != -1:
        if main is not None and main.snapshot_id != current:
            raise errors.ValidationFailed(
                f"Current snapshot ID does not match main branch ({current} != {main.snapshot_id})"
            )
    elif main is not None:
        raise errors.ValidationFailed(f"Current snapshot is not set, but main branch exists: {main.snapshot_id}")
    if current >= 0 and not exists(current):
        raise errors.ValidationFailed("Invalid table metadata: Cannot find current version")


# --- time order ------------------------------------------------------------------------------------


def _check_logs(base: TableMetadata | None, new: TableMetadata) -> None:
    """Log entries in time order and last-updated-ms not before the last of each, give or take a
    minute: commits come from machines whose clocks differ a little, never by much.

    Only the entries this commit added are compared with their predecessors: a table whose older
    history broke the rule (written before it was enforced) can still commit and expire snapshots."""
    log = new.snapshot_log
    _check_order(log, _new_positions(base.snapshot_log if base is not None else [], log), "snapshot log entries")
    if log and new.last_updated_ms - log[-1].timestamp_ms < -ONE_MINUTE_MS:
        raise errors.ValidationFailed(
            f"Invalid update timestamp {new.last_updated_ms}: before last snapshot log entry at {log[-1].timestamp_ms}"
        )
    files = new.metadata_log
    _check_order(
        files, _new_positions(base.metadata_log if base is not None else [], files), "previous metadata log entries"
    )
    if files and new.last_updated_ms - files[-1].timestamp_ms < -ONE_MINUTE_MS:
        raise errors.ValidationFailed(
            f"Invalid update timestamp {new.last_updated_ms}: "
            f"before the latest metadata log entry timestamp {files[-1].timestamp_ms}"
        )


def _new_positions(before: list, after: list) -> Iterable[int]:
    """Where ``after`` holds entries that ``before`` did not: its tail when appended to (the usual
    commit, in microseconds); else found by value (expiry, or the metadata log trimmed at its head)."""
    appended = _appended(before, after)
    if appended is not None:
        return range(len(after) - len(appended), len(after))
    known = set(map(_log_key, before))
    return [i for i, entry in enumerate(after) if _log_key(entry) not in known]


def _log_key(entry: object) -> tuple:
    return entry.timestamp_ms, getattr(entry, "snapshot_id", None) or getattr(entry, "metadata_file", None)


def _check_order(log: list, positions: Iterable[int], what: str) -> None:
    for i in positions:
        if i > 0 and log[i].timestamp_ms - log[i - 1].timestamp_ms < -ONE_MINUTE_MS:
            raise errors.ValidationFailed(f"[BUG] Expected sorted {what}.")
