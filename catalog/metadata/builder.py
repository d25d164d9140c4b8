"""Java's ``TableMetadata.Builder`` and ``build()`` over the metadata JSON, copy-on-write.

Lists and dicts start as the base's own objects and are copied the first time they change (``_own``);
``changes`` records what Java's builder records, so an update Java treats as a no-op leaves the base
untouched. ``build`` runs the checks of ``build()`` and of the ``TableMetadata`` constructor on what
the commit changed (the base already passed them), then writes the JSON in Java's field order.
"""

from __future__ import annotations

import heapq
import re
import uuid as uuids
from collections.abc import Callable, Hashable, Iterable
from operator import itemgetter
from typing import Any

from catalog import errors
from catalog.metadata import parsing, partitioning, schemas
from catalog.metadata import reading as r
from catalog.metadata.parsing import Update

MAIN = "main"
SUPPORTED_FORMAT_VERSION = 3
ROW_LINEAGE_FORMAT_VERSION = 3
ONE_MINUTE_MS = 60_000
PREVIOUS_VERSIONS_MAX = "write.metadata.previous-versions-max"
PREVIOUS_VERSIONS_MAX_DEFAULT = 100
_JAVA_INT = re.compile(r"[+-]?\d+", re.ASCII)


class JavaHashOrder:
    """The iteration order of Java's ``HashMap`` over the same puts and removes: the order in which
    Java's builder (``refs = Maps.newHashMap(base.refs)``, then ``put``/``remove``) writes ``refs``.
    Entries go by bucket (the key's ``String.hashCode``, spread, masked by the table's capacity), then by
    when they were first put (a dict's order, which a re-put after a remove moves to the end, as Java's
    bucket chain does). Only the capacity is to be tracked: it grows with the largest size reached."""

    def __init__(self, base_size: int) -> None:
        # HashMap(Map m): threshold = tableSizeFor(m.size() / 0.75 + 1), the capacity at the first put;
        # an empty copy (or new HashMap()) gets the default 16 at its first put.
        self.capacity = 16 if base_size == 0 else _table_size_for(int(base_size / 0.75 + 1.0))
        self.threshold = int(self.capacity * 0.75)

    def grown_to(self, size: int) -> None:
        """After a put that made the map ``size`` entries (HashMap.putVal: ``if (++size > threshold) resize()``)."""
        while size > self.threshold:
            old = self.capacity
            self.capacity = old << 1
            self.threshold = self.threshold << 1 if old >= 16 else int(self.capacity * 0.75)

    def ordered(self, entries: dict[str, Any]) -> dict[str, Any]:
        mask = self.capacity - 1
        keys = sorted(enumerate(entries), key=lambda ik: (_spread(_java_hash(ik[1])) & mask, ik[0]))
        return {k: entries[k] for _, k in keys}


def _table_size_for(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around), unsigned."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _spread(h: int) -> int:
    return h ^ (h >> 16)  # HashMap.hash: h ^ (h >>> 16)


def current_snapshot_id(base: dict) -> int:
    current = base.get("current-snapshot-id")
    return -1 if current is None else current


def read_schemas(base: dict) -> tuple[list[dict], int]:
    """The schema list and current schema id, also of a v1 file that has only ``schema``."""
    if "schemas" in base:
        return base["schemas"], base["current-schema-id"]
    schema = schemas.parse_schema(base["schema"]).json
    return [schema], schema["schema-id"]


def read_specs(base: dict) -> tuple[list[dict], int, int]:
    """The specs, default spec id and last partition id, also of a v1 file with only ``partition-spec``."""
    if "partition-specs" in base:
        specs, default = base["partition-specs"], base["default-spec-id"]
    else:
        fields = [
            {**field, "field-id": field.get("field-id", partitioning.PARTITION_DATA_ID_START + i)}
            for i, field in enumerate(base.get("partition-spec") or [])
        ]
        specs, default = [{"spec-id": 0, "fields": fields}], 0
    last = base.get("last-partition-id")
    if last is None:
        last = max(partitioning.spec_last_assigned(spec["fields"]) for spec in specs)
    return specs, default, last


def java_int(value: str, what: str) -> int:
    """Java's ``Integer.parseInt`` of a property value."""
    if not _JAVA_INT.fullmatch(value) or not r.INT_MIN <= int(value) <= r.INT_MAX:
        raise errors.ValidationFailed(f'Invalid value for {what}: For input string: "{r.show(value)}"')
    return int(value)


class SnapshotIds:
    """The snapshot ids of a metadata's ``snapshots`` list, read-only: a large set shared from commit to
    commit plus a small set of the ids added since. A commit that appends a snapshot extends the index
    instead of rebuilding it, so checking a new id against 10,000 existing ones costs the same as
    against one. The extras are folded into a new large set when they pass ``FOLD`` (amortised)."""

    FOLD = 256
    __slots__ = ("bulk", "extra")

    def __init__(self, bulk: set[int] | frozenset[int], extra: frozenset[int] = frozenset()) -> None:
        self.bulk, self.extra = bulk, extra

    def __contains__(self, snapshot_id: object) -> bool:
        return snapshot_id in self.extra or snapshot_id in self.bulk

    def plus(self, added: set[int]) -> SnapshotIds:
        extra = self.extra | added
        if len(extra) > self.FOLD:
            return SnapshotIds(self.bulk | extra)
        return SnapshotIds(self.bulk, extra)


# Memoised indexes of long snapshot lists, by the list's identity. An entry keeps its list alive (so
# the id cannot be reused); a few entries suffice for the tables being committed to right now, and
# the lists are mostly shared with the metadata the server caches anyway. Short lists are not worth it.
_INDEXES: dict[int, tuple[list, int, SnapshotIds]] = {}
_INDEXES_SIZE = 8
_INDEXED_FROM = 1000


def snapshot_index(snapshots: list[dict]) -> SnapshotIds:
    """The ids of a ``snapshots`` list (its length guards against a list changed in place)."""
    hit = _INDEXES.get(id(snapshots))
    if hit is not None and hit[0] is snapshots and hit[1] == len(snapshots):
        return hit[2]
    index = SnapshotIds(set(map(itemgetter("snapshot-id"), snapshots)))
    remember_index(snapshots, index)
    return index


def remember_index(snapshots: list[dict], index: SnapshotIds) -> None:
    if len(snapshots) < _INDEXED_FROM:
        return
    _INDEXES.pop(id(snapshots), None)
    if len(_INDEXES) >= _INDEXES_SIZE:
        _INDEXES.pop(next(iter(_INDEXES)))
    _INDEXES[id(snapshots)] = (snapshots, len(snapshots), index)


class Rows:
    """A list attribute of the builder once a commit removes or replaces in it by id: each removal or
    replacement costs O(1) whatever the list's length, where filtering the list per update made a commit
    of N one-id removals O(N²). Order and duplicates stay the list's: the items in their order, new ones
    at the end, a removal drops every item of its id, a replacement takes the place of the first."""

    __slots__ = ("field", "origin", "changed", "items", "slots", "next")

    def __init__(self, items: list[dict], field: str) -> None:
        self.field, self.origin, self.changed = field, items, False
        self.items: dict[int, dict] = {}  # slot -> item, in list order
        self.slots: dict[Any, list[int]] = {}  # id -> its items' slots
        self.next = 0
        for item in items:
            self.add(item)
        self.changed = False

    def add(self, item: dict) -> None:
        self.changed = True
        slot, self.next = self.next, self.next + 1
        self.items[slot] = item
        self.slots.setdefault(item[self.field], []).append(slot)

    def __contains__(self, key: object) -> bool:
        return key in self.slots

    def __len__(self) -> int:
        return len(self.items)

    def get(self, key: Any) -> dict | None:
        slots = self.slots.get(key)
        return self.items[slots[0]] if slots else None

    def remove(self, key: Any) -> list[dict]:
        """The items of ``key``, removed."""
        removed = [self.items.pop(slot) for slot in self.slots.pop(key, ())]
        self.changed = self.changed or bool(removed)
        return removed

    def replace(self, item: dict) -> None:
        """Java's ``put`` into a map by id: in place of the first item of its id, the others dropped."""
        slots = self.slots.get(item[self.field])
        if not slots:
            self.add(item)
            return
        self.changed = True
        self.items[slots[0]] = item
        for slot in slots[1:]:
            del self.items[slot]
        del slots[1:]

    def values(self) -> list[dict]:
        """The list: the original one itself when nothing changed."""
        return list(self.items.values()) if self.changed else self.origin


class Reuse:
    """Java's ``reuseOrCreateNew*Id`` indexed: the id of the first item (in list order) equal to a new one
    by ``key``, else one more than the highest id (at least ``start``). Java scans the list per added
    item, O(N²) for a commit adding N; the builder scans too for its first few adds of a commit, then
    builds this index once (``REUSE_INDEX_AFTER``)."""

    __slots__ = ("id_field", "key", "first", "heap", "live")

    def __init__(self, items: Iterable[dict], id_field: str, key: Callable[[dict], Hashable]) -> None:
        self.id_field, self.key = id_field, key
        self.first: dict[Hashable, list[int]] = {}  # key -> ids of the items with it, in list order
        self.heap: list[int] = []  # negated ids; removed ones are dropped lazily
        self.live: dict[int, int] = {}  # id -> how many items have it
        for item in items:
            self.add(item)

    def add(self, item: dict) -> None:
        item_id = item[self.id_field]
        self.first.setdefault(self.key(item), []).append(item_id)
        heapq.heappush(self.heap, -item_id)
        self.live[item_id] = self.live.get(item_id, 0) + 1

    def remove(self, item: dict) -> None:
        item_id = item[self.id_field]
        ids = self.first.get(self.key(item))
        if ids is not None and item_id in ids:
            ids.remove(item_id)
        self.live[item_id] -= 1

    def find(self, key: Hashable, start: int) -> int:
        ids = self.first.get(key)
        if ids:
            return ids[0]
        while self.heap and not self.live.get(-self.heap[0]):
            heapq.heappop(self.heap)
        return max(start, 1 - self.heap[0]) if self.heap else start


# A commit scans the existing schemas, specs or sort orders for this many of its adds of each (as Java
# does, and cheapest for the usual one or two), then indexes them (``Reuse``) for the rest.
REUSE_INDEX_AFTER = 8


def frozen(value: Any) -> Hashable:
    """A JSON value as a hashable one that is equal exactly when the JSON values are (``==``)."""
    if isinstance(value, dict):
        return ("{", *sorted((k, frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("[", *(frozen(v) for v in value))
    return value


def schema_key(json: dict) -> Hashable:
    """What ``Schema.same`` (Java's ``sameSchema``) compares."""
    return frozen(json.get("fields")), frozenset(json.get("identifier-field-ids") or ())


def spec_key(json: dict) -> Hashable:
    return partitioning.spec_key(json["fields"])


def order_key(json: dict) -> Hashable:
    return partitioning.order_key(json["fields"])


_KEYS = {
    "schemas": "schema-id",
    "specs": "spec-id",
    "sort_orders": "order-id",
    "snapshots": "snapshot-id",
    "statistics": "snapshot-id",
    "partition_statistics": "snapshot-id",
    "encryption_keys": "key-id",
}
_REUSE = {"schemas": schema_key, "specs": spec_key, "sort_orders": order_key}


class Builder:
    """Java's ``TableMetadata.Builder`` over JSON. Lists start as the base's own objects and are
    copied the first time they change (``_own``); ``changes`` records what Java records."""

    def __init__(self, base: dict | None, format_version: int, now_ms: int) -> None:
        self.base = base
        self.now_ms = now_ms
        self.changes: list[tuple] = []
        self.owned: set[str] = set()
        self.last_updated_ms: int | None = None
        self.last_added_schema: int | None = None
        self.last_added_spec: int | None = None
        self.last_added_order: int | None = None
        self.added_snapshots: dict[int, parsing.Snapshot] = {}
        self.added_log_entries = 0
        self._index: SnapshotIds | None = None  # the base's ids, read-only
        self._new_ids: set[int] = set()  # ids added by this commit
        self._schemas: dict[int, dict] | None = None
        self._rows: dict[str, Rows] = {}  # list attributes being removed from or replaced in by id
        self._reuse: dict[str, Reuse] = {}  # indexes of schemas, specs, sort orders for many adds
        self._scans: dict[str, int] = {}  # adds that scanned the list, per list
        self._added: dict[str, set[int]] = {"add-schema": set(), "add-spec": set(), "add-sort-order": set()}
        self._refs_at: dict[int, list[str]] | None = None  # ref names by snapshot id, once a removal needs it
        if base is None:
            if not 1 <= format_version <= SUPPORTED_FORMAT_VERSION:
                raise errors.ValidationFailed(
                    f"Unsupported format version: v{format_version} (supported: v{SUPPORTED_FORMAT_VERSION})"
                )
            self.format_version, self.uuid, self.location = format_version, None, None
            self.last_sequence_number, self.last_column_id, self.next_row_id = 0, 0, 0
            self.schemas, self.current_schema_id = [], 0
            self.specs, self.default_spec_id, self.last_partition_id = [], 0, 0
            self.sort_orders, self.default_sort_order_id = [], 0
            self.properties, self.refs, self.current_snapshot_id = {}, {}, -1
            self.ref_order = JavaHashOrder(0)
            self.snapshots, self.statistics, self.partition_statistics = [], [], []
            self.snapshot_log, self.metadata_log, self.encryption_keys = [], [], []
            self.owned = {"schemas", "specs", "sort_orders", "properties", "refs", "snapshots", "statistics",
                          "partition_statistics", "snapshot_log", "encryption_keys"}  # fmt: skip
            return
        if not 1 <= format_version <= SUPPORTED_FORMAT_VERSION:
            raise errors.ValidationFailed(f"Cannot read unsupported version {format_version}")
        self.format_version = format_version
        self.uuid = base.get("table-uuid")
        self.location = base.get("location")
        self.last_sequence_number = base.get("last-sequence-number", 0) if format_version > 1 else 0
        self.last_column_id = base["last-column-id"]
        self.schemas, self.current_schema_id = read_schemas(base)
        self.specs, self.default_spec_id, self.last_partition_id = read_specs(base)
        self.sort_orders = base.get("sort-orders") or [{"order-id": 0, "fields": []}]
        self.default_sort_order_id = base.get("default-sort-order-id", 0)
        self.properties = base.get("properties") or {}
        self.current_snapshot_id = current_snapshot_id(base)
        self.next_row_id = base.get("next-row-id", 0) if format_version >= ROW_LINEAGE_FORMAT_VERSION else 0
        refs = base.get("refs")
        if refs is None:
            refs = (
                {MAIN: {"snapshot-id": self.current_snapshot_id, "type": "branch"}}
                if self.current_snapshot_id != -1
                else {}
            )
        self.refs = refs
        self.ref_order = JavaHashOrder(len(refs))
        self.snapshots = base.get("snapshots") or []
        self.statistics = base.get("statistics") or []
        self.partition_statistics = base.get("partition-statistics") or []
        self.snapshot_log = base.get("snapshot-log") or []
        self.metadata_log = base.get("metadata-log") or []
        self.encryption_keys = base.get("encryption-keys") or []

    # -- helpers --

    def _own(self, name: str) -> Any:
        """The builder's own copy of a list or dict attribute, made on its first change."""
        if name not in self.owned:
            value = getattr(self, name)
            setattr(self, name, value.copy())
            self.owned.add(name)
        return getattr(self, name)

    def _append(self, name: str, item: dict) -> None:
        """Append to a list attribute; the first append copies the base's list once, item included."""
        rows = self._rows.get(name)
        if rows is not None:
            rows.add(item)
        elif name in self.owned:
            getattr(self, name).append(item)
        else:
            setattr(self, name, [*getattr(self, name), item])
            self.owned.add(name)

    def _keyed(self, name: str) -> Rows:
        """The list attribute as ``Rows``, for removals and replacements by id (made once per commit)."""
        rows = self._rows.get(name)
        if rows is None:
            rows = self._rows[name] = Rows(getattr(self, name), _KEYS[name])
            self.owned.add(name)
        return rows

    def _items(self, name: str) -> Iterable[dict]:
        rows = self._rows.get(name)
        return rows.items.values() if rows is not None else getattr(self, name)

    def _size(self, name: str) -> int:
        rows = self._rows.get(name)
        return len(rows) if rows is not None else len(getattr(self, name))

    def _reused_id(self, name: str, new: dict, start: int, same: Callable[[dict], bool]) -> int:
        """Java's ``reuseOrCreateNew*Id`` for ``new`` (JSON with the fields ``_REUSE`` compares): a scan
        for the commit's first few adds, then an index."""
        index = self._reuse.get(name)
        if index is None and self._scans.get(name, 0) >= REUSE_INDEX_AFTER:
            index = self._reuse[name] = Reuse(self._items(name), _KEYS[name], _REUSE[name])
        if index is not None:
            return index.find(_REUSE[name](new), start)
        self._scans[name] = self._scans.get(name, 0) + 1
        new_id = start
        for existing in self._items(name):
            if same(existing):
                return existing[_KEYS[name]]
            if existing[_KEYS[name]] >= new_id:
                new_id = existing[_KEYS[name]] + 1
        return new_id

    def _add_reusable(self, name: str, item: dict) -> None:
        self._append(name, item)
        index = self._reuse.get(name)
        if index is not None:
            index.add(item)

    def _remove_reusable(self, name: str, ids: Iterable[int]) -> None:
        rows = self._keyed(name)
        index = self._reuse.get(name)
        for item_id in ids:
            for item in rows.remove(item_id):
                if index is not None:
                    index.remove(item)

    def has_snapshot(self, snapshot_id: int) -> bool:
        rows = self._rows.get("snapshots")
        if rows is not None:
            return snapshot_id in rows
        if snapshot_id in self._new_ids:
            return True
        if self._index is None:
            self._index = snapshot_index(self.snapshots) if self.snapshots else SnapshotIds(frozenset())
        return snapshot_id in self._index

    def schemas_by_id(self) -> dict[int, dict]:
        if self._schemas is None:
            self._schemas = {schema["schema-id"]: schema for schema in self._items("schemas")}
        return self._schemas

    def current_schema(self) -> schemas.Schema | None:
        json = self.schemas_by_id().get(self.current_schema_id)
        return schemas.schema_of(json) if json is not None else None

    def changed(self, *kinds: str) -> bool:
        return any(change[0] in kinds for change in self.changes)

    # -- updates --

    def apply(self, update: Update) -> None:
        getattr(self, "u_" + update.action.replace("-", "_"))(update.value)

    def u_assign_uuid(self, value: str) -> None:
        if value == self.uuid:
            return
        if self.base is not None:  # deliberate: Java 1.9's table builder allows it; a uuid is an identity
            raise errors.ValidationFailed(f"Cannot reassign uuid: {self.uuid} to {value}")
        self.uuid = value
        self.changes.append(("assign-uuid",))

    def u_upgrade_format_version(self, version: int) -> None:
        if version > SUPPORTED_FORMAT_VERSION:
            raise errors.ValidationFailed(
                f"Cannot upgrade table to unsupported format version: v{version} "
                f"(supported: v{SUPPORTED_FORMAT_VERSION})"
            )
        if version < self.format_version:
            raise errors.ValidationFailed(f"Cannot downgrade v{self.format_version} table to v{version}")
        if version != self.format_version:
            self.format_version = version
            self.changes.append(("upgrade-format-version",))

    def u_add_schema(self, schema: schemas.Schema) -> None:
        new_last = max(self.last_column_id, schema.highest_field_id)
        schemas.check_compatibility(schema, self.format_version)
        new_id = self._reused_id("schemas", schema.json, self.current_schema_id, schema.same)
        found = new_id in self.schemas_by_id()
        if found and new_last == self.last_column_id:
            is_new = self.last_added_schema is not None and new_id in self._added["add-schema"]
            self.last_added_schema = new_id if is_new else None
            return
        self.last_column_id = new_last
        if not found:
            added = schema.with_id(new_id).json
            self._add_reusable("schemas", added)
            self.schemas_by_id()[new_id] = added
        self.changes.append(("add-schema", new_id))
        self._added["add-schema"].add(new_id)
        self.last_added_schema = new_id

    def u_set_current_schema(self, schema_id: int) -> None:
        self.set_current_schema(schema_id)

    def set_current_schema(self, schema_id: int) -> None:
        if schema_id == -1:
            if self.last_added_schema is None:
                raise errors.ValidationFailed("Cannot set last added schema: no schema has been added")
            schema_id = self.last_added_schema
        if schema_id == self.current_schema_id:
            return
        if schema_id not in self.schemas_by_id():
            raise errors.ValidationFailed(f"Cannot set current schema to unknown schema: {schema_id}")
        self.current_schema_id = schema_id
        self.changes.append(("set-current-schema",))

    def u_add_spec(self, spec: partitioning.UnboundSpec) -> None:
        schema = self.current_schema()
        if schema is None:
            raise errors.ValidationFailed("Cannot add a partition spec before a schema is added")
        bound = partitioning.bind_spec(spec, schema, self.format_version)
        key = partitioning.spec_key(bound.json["fields"])
        new_id = self._reused_id("specs", bound.json, 0, lambda existing: spec_key(existing) == key)
        if new_id in self._keyed("specs"):
            is_new = self.last_added_spec is not None and self.last_added_spec in self._added["add-spec"]
            self.last_added_spec = new_id if is_new else None
            return
        if self.format_version == 1 and not partitioning.has_sequential_ids(bound.json["fields"]):
            raise errors.ValidationFailed(
                f"Spec does not use sequential IDs that are required in v1: {r.show(bound.json['fields'])}"
            )
        self.last_partition_id = max(self.last_partition_id, bound.last_assigned_field_id)
        self._add_reusable("specs", {"spec-id": new_id, "fields": bound.json["fields"]})
        self.changes.append(("add-spec", new_id))
        self._added["add-spec"].add(new_id)
        self.last_added_spec = new_id

    def u_set_default_spec(self, spec_id: int) -> None:
        self.set_default_spec(spec_id)

    def set_default_spec(self, spec_id: int) -> None:
        if spec_id == -1:
            if self.last_added_spec is None:
                raise errors.ValidationFailed("Cannot set last added spec: no spec has been added")
            spec_id = self.last_added_spec
        if spec_id == self.default_spec_id:
            return
        self.default_spec_id = spec_id
        self.changes.append(("set-default-spec",))

    def u_add_sort_order(self, order: partitioning.UnboundOrder) -> None:
        schema = self.current_schema()
        if schema is None:
            raise errors.ValidationFailed("Cannot add a sort order before a schema is added")
        bound = partitioning.bind_order(order, schema, self.format_version)
        new_id = 0
        if bound["fields"]:
            key = partitioning.order_key(bound["fields"])
            new_id = self._reused_id("sort_orders", bound, 1, lambda existing: order_key(existing) == key)
        if new_id in self._keyed("sort_orders"):
            is_new = self.last_added_order is not None and self.last_added_order in self._added["add-sort-order"]
            self.last_added_order = new_id if is_new else None
            return
        self._add_reusable("sort_orders", {"order-id": new_id, "fields": bound["fields"]} if bound["fields"] else bound)
        self.changes.append(("add-sort-order", new_id))
        self._added["add-sort-order"].add(new_id)
        self.last_added_order = new_id

    def u_set_default_sort_order(self, order_id: int) -> None:
        self.set_default_sort_order(order_id)

    def set_default_sort_order(self, order_id: int) -> None:
        if order_id == -1:
            if self.last_added_order is None:
                raise errors.ValidationFailed("Cannot set last added sort order: no sort order has been added")
            order_id = self.last_added_order
        if order_id == self.default_sort_order_id:
            return
        self.default_sort_order_id = order_id
        self.changes.append(("set-default-sort-order",))

    def u_add_snapshot(self, snapshot: parsing.Snapshot) -> None:
        if not self._size("schemas"):
            raise errors.ValidationFailed("Attempting to add a snapshot before a schema is added")
        if not self._size("specs"):
            raise errors.ValidationFailed("Attempting to add a snapshot before a partition spec is added")
        if not self._size("sort_orders"):
            raise errors.ValidationFailed("Attempting to add a snapshot before a sort order is added")
        if self.has_snapshot(snapshot.snapshot_id):
            raise errors.ValidationFailed(f"Snapshot already exists for id: {snapshot.snapshot_id}")
        stale = snapshot.sequence_number <= self.last_sequence_number and snapshot.parent_id is not None
        if self.format_version != 1 and stale:
            raise errors.RetryableValidation(
                f"Validation failed, please retry: Cannot add snapshot with sequence number "
                f"{snapshot.sequence_number} older than last sequence number {self.last_sequence_number}"
            )
        if self.format_version >= ROW_LINEAGE_FORMAT_VERSION:
            if snapshot.first_row_id is None:
                raise errors.ValidationFailed("Cannot add a snapshot: first-row-id is null")
            if snapshot.first_row_id < self.next_row_id:
                raise errors.RetryableValidation(
                    f"Validation failed, please retry: Cannot add a snapshot, first-row-id is behind table "
                    f"next-row-id: {snapshot.first_row_id} < {self.next_row_id}"
                )
            self.next_row_id += snapshot.added_rows
        self.last_updated_ms = snapshot.timestamp_ms
        self.last_sequence_number = snapshot.sequence_number
        self._append("snapshots", snapshot.json)
        self._new_ids.add(snapshot.snapshot_id)
        self.added_snapshots[snapshot.snapshot_id] = snapshot
        self.changes.append(("add-snapshot", snapshot.snapshot_id))

    def u_set_snapshot_ref(self, ref: parsing.Ref) -> None:
        parsing.check_ref(ref.json)  # Java builds the SnapshotRef first, then setRef
        existing = self.refs.get(ref.name)
        if existing is not None and parsing.ref_key(existing) == parsing.ref_key(ref.json):
            return
        if not self.has_snapshot(ref.snapshot_id):
            raise errors.ValidationFailed(f"Cannot set {ref.name} to unknown snapshot: {ref.snapshot_id}")
        added = self.added_snapshots.get(ref.snapshot_id)
        if added is not None:
            self.last_updated_ms = added.timestamp_ms
        if ref.name == MAIN:
            self.current_snapshot_id = ref.snapshot_id
            if self.last_updated_ms is None:
                self.last_updated_ms = self.now_ms
            self._append("snapshot_log", {"timestamp-ms": self.last_updated_ms, "snapshot-id": ref.snapshot_id})
            self.added_log_entries += 1
        self._own("refs")[ref.name] = ref.json
        if existing is None:
            self.ref_order.grown_to(len(self.refs))
        if self._refs_at is not None:
            self._refs_at.setdefault(ref.snapshot_id, []).append(ref.name)
        self.changes.append(("set-snapshot-ref", ref.name, ref.snapshot_id))

    def u_remove_snapshot_ref(self, name: str) -> None:
        if name == MAIN:
            self.current_snapshot_id = -1
        if name in self.refs:
            del self._own("refs")[name]
            self.changes.append(("remove-snapshot-ref",))

    def u_remove_snapshots(self, snapshot_ids: list[int]) -> None:
        """Java's ``removeSnapshots``: the snapshots, their statistics, then every ref left dangling. Each
        costs what it removes: a commit of N one-id removals is O(N), not N list filters."""
        removed = [snapshot_id for snapshot_id in dict.fromkeys(snapshot_ids) if self.has_snapshot(snapshot_id)]
        if removed:
            snapshots = self._keyed("snapshots")
            for snapshot_id in removed:
                snapshots.remove(snapshot_id)
                self.added_snapshots.pop(snapshot_id, None)  # added and removed in one commit: not checked
            self.changes.append(("remove-snapshots",))
            self._drop_statistics("statistics", removed)
            self._drop_statistics("partition_statistics", removed)
        if self._refs_at is None:  # the commit's first removal: every ref (a base's may dangle already)
            self._refs_at = {}
            for name, ref in self.refs.items():
                self._refs_at.setdefault(ref["snapshot-id"], []).append(name)
            candidates: Iterable[str] = list(self.refs)
        else:  # since then only a removal makes a ref dangle: the refs of what it removed
            candidates = [name for snapshot_id in removed for name in self._refs_at.pop(snapshot_id, ())]
        for name in candidates:
            ref = self.refs.get(name)
            if ref is not None and not self.has_snapshot(ref["snapshot-id"]):
                self.u_remove_snapshot_ref(name)

    def _drop_statistics(self, name: str, snapshot_ids: Iterable[int]) -> None:
        if not self._size(name):
            return
        files = self._keyed(name)
        if sum(len(files.remove(snapshot_id)) for snapshot_id in snapshot_ids):
            self.changes.append(("remove-" + name.replace("_", "-"),))

    def _set_statistics(self, name: str, file: dict) -> None:
        """Java keeps statistics in a map by snapshot id: a file replaces the snapshot's others."""
        self._keyed(name).replace(file)
        self.changes.append(("set-" + name.replace("_", "-"),))

    def u_set_statistics(self, file: dict) -> None:
        self._set_statistics("statistics", file)

    def u_remove_statistics(self, snapshot_id: int) -> None:
        self._drop_statistics("statistics", (snapshot_id,))

    def u_set_partition_statistics(self, file: dict) -> None:
        self._set_statistics("partition_statistics", file)

    def u_remove_partition_statistics(self, snapshot_id: int) -> None:
        self._drop_statistics("partition_statistics", (snapshot_id,))

    def u_remove_partition_specs(self, spec_ids: list[int]) -> None:
        if self.default_spec_id in spec_ids:
            raise errors.ValidationFailed("Cannot remove the default partition spec")
        if spec_ids:
            self._remove_reusable("specs", spec_ids)
            self.changes.append(("remove-partition-specs",))

    def u_remove_schemas(self, schema_ids: list[int]) -> None:
        if self.current_schema_id in schema_ids:
            raise errors.ValidationFailed("Cannot remove the current schema")
        if schema_ids:
            self._remove_reusable("schemas", schema_ids)
            by_id = self.schemas_by_id()
            for schema_id in schema_ids:
                by_id.pop(schema_id, None)
            self.changes.append(("remove-schemas",))

    def u_set_location(self, location: str) -> None:
        if location != self.location:
            self.location = location
            self.changes.append(("set-location",))

    def u_set_properties(self, updates: dict[str, str]) -> None:
        if updates:
            self._own("properties").update(updates)
            self.changes.append(("set-properties",))

    def u_remove_properties(self, removals: list[str]) -> None:
        if removals:  # Java records the change even when none of the keys exists
            properties = self._own("properties")
            for key in removals:
                properties.pop(key, None)
            self.changes.append(("remove-properties",))

    def u_add_encryption_key(self, key: dict) -> None:
        if key["key-id"] not in self._keyed("encryption_keys"):
            self._append("encryption_keys", key)
            self.changes.append(("add-encryption-key",))

    def u_remove_encryption_key(self, key_id: str) -> None:
        if self._keyed("encryption_keys").remove(key_id):
            self.changes.append(("remove-encryption-key",))

    # -- build --

    def build(self, base_location: str | None) -> dict:
        """Java's ``build()`` and the ``TableMetadata`` constructor's checks, then the JSON as
        ``TableMetadataParser.toJson`` writes it. The base itself when no change was recorded."""
        base = self.base
        if not self.changes:
            if base is None:
                raise errors.ValidationFailed("Invalid table metadata: a create must add a schema, spec and order")
            return base
        snapshot_rows = self._rows.get("snapshots")
        if snapshot_rows is not None and snapshot_rows.changed:  # the index of what is left, for the next commit
            self._index, self._new_ids = SnapshotIds(set(snapshot_rows.slots)), set()
        for name, rows in self._rows.items():
            setattr(self, name, rows.values())
        self._rows = {}
        version = self.format_version
        last_updated = self.last_updated_ms if self.last_updated_ms is not None else self.now_ms
        location = self._location()
        schema_json = self.schemas_by_id().get(self.current_schema_id)
        if schema_json is None:
            raise errors.ValidationFailed(
                f"Invalid table metadata: cannot find current schema {self.current_schema_id}"
            )
        if not self.specs:
            raise errors.ValidationFailed("Partition specs cannot be null or empty")
        if not self.sort_orders:
            raise errors.ValidationFailed("Sort orders cannot be null or empty")
        spec = next((s for s in self.specs if s["spec-id"] == self.default_spec_id), None)
        if spec is None:
            raise errors.ValidationFailed(f"Invalid table metadata: cannot find default spec {self.default_spec_id}")
        order = next((o for o in self.sort_orders if o["order-id"] == self.default_sort_order_id), None)
        if order is None:
            raise errors.ValidationFailed(
                f"Invalid table metadata: cannot find default sort order {self.default_sort_order_id}"
            )
        if base is None or self.changed("set-current-schema", "set-default-spec", "set-default-sort-order"):
            schema = schemas.schema_of(schema_json)
            partitioning.check_spec(spec["fields"], schema)
            partitioning.check_order(order["fields"], schema)
        self._check_sequence_numbers()
        self._check_refs()
        snapshot_log = self._snapshot_log(last_updated)
        metadata_log = self._metadata_log(base_location, last_updated)
        current = self.current_snapshot_id
        if current < 0 and not (self.snapshots and current != -1 and self.has_snapshot(current)):
            current = None if version >= 3 else -1
        out: dict[str, Any] = {"format-version": version, "table-uuid": self.uuid or str(uuids.uuid4())}
        out["location"] = location
        if version > 1:
            out["last-sequence-number"] = self.last_sequence_number
        out["last-updated-ms"] = last_updated
        out["last-column-id"] = self.last_column_id
        if version == 1:
            out["schema"] = schema_json
        out["current-schema-id"] = self.current_schema_id
        out["schemas"] = self.schemas
        if version == 1:
            out["partition-spec"] = spec["fields"]
        out["default-spec-id"] = self.default_spec_id
        out["partition-specs"] = self.specs
        out["last-partition-id"] = self.last_partition_id
        out["default-sort-order-id"] = self.default_sort_order_id
        out["sort-orders"] = self.sort_orders
        out["properties"] = self.properties
        out["current-snapshot-id"] = current
        if version >= ROW_LINEAGE_FORMAT_VERSION:
            out["next-row-id"] = self.next_row_id
        if self.encryption_keys:
            out["encryption-keys"] = self.encryption_keys
        out["refs"] = self.ref_order.ordered(self.refs)  # as Java's HashMap iterates them
        out["snapshots"] = self.snapshots
        out["statistics"] = self.statistics
        out["partition-statistics"] = self.partition_statistics
        out["snapshot-log"] = snapshot_log
        out["metadata-log"] = metadata_log
        if self.snapshots is not (base or {}).get("snapshots") and self._index is not None:
            remember_index(self.snapshots, self._index.plus(self._new_ids) if self._new_ids else self._index)
        return out

    def _location(self) -> str:
        location = self.location
        if location is None:  # deliberate: Java 1.9 would write "location": null
            raise errors.ValidationFailed("Invalid table metadata: a table needs a location (set-location)")
        if not location:
            raise errors.ValidationFailed("path must not be null or empty")
        while location.endswith("/") and not location.endswith("://"):
            location = location[:-1]
        return location

    def _check_sequence_numbers(self) -> None:
        last = self.last_sequence_number
        if self.format_version == 1 and last != 0:
            raise errors.ValidationFailed(f"Sequence number must be 0 in v1: {last}")
        base_last = self.base.get("last-sequence-number", 0) if self.base is not None else 0
        # Only a snapshot added without a parent can lower it; then every snapshot must be checked.
        snapshots = self.snapshots if last < base_last else [s.json for s in self.added_snapshots.values()]
        for snapshot in snapshots:
            if snapshot.get("sequence-number", 0) > last:
                raise errors.ValidationFailed(
                    f"Invalid snapshot with sequence number {snapshot.get('sequence-number', 0)} "
                    f"greater than last sequence number {last}"
                )

    def _check_refs(self) -> None:
        main = self.refs.get(MAIN)
        current = self.current_snapshot_id
        if current != -1:
            if main is not None and main["snapshot-id"] != current:
                raise errors.ValidationFailed(
                    f"Current snapshot ID does not match main branch ({current} != {main['snapshot-id']})"
                )
        elif main is not None:
            raise errors.ValidationFailed(f"Current snapshot is not set, but main branch exists: {main['snapshot-id']}")

    def _metadata_log(self, base_location: str | None, last_updated: int) -> list[dict]:
        log = self.metadata_log
        if self.base is not None and base_location is not None:
            value = self.properties.get(PREVIOUS_VERSIONS_MAX)
            limit = java_int(value, PREVIOUS_VERSIONS_MAX) if value is not None else PREVIOUS_VERSIONS_MAX_DEFAULT
            limit = max(1, limit)
            kept = log[len(log) - limit + 1 :] if len(log) >= limit else log
            entry = {"timestamp-ms": self.base["last-updated-ms"], "metadata-file": base_location}
            if kept and entry["timestamp-ms"] - kept[-1]["timestamp-ms"] < -ONE_MINUTE_MS:
                raise errors.ValidationFailed("[BUG] Expected sorted previous metadata log entries.")
            log = [*kept, entry]
        if log and last_updated - log[-1]["timestamp-ms"] < -ONE_MINUTE_MS:
            raise errors.ValidationFailed(
                f"Invalid update timestamp {last_updated}: before the latest metadata log entry timestamp "
                f"{log[-1]['timestamp-ms']}"
            )
        return log

    def _snapshot_log(self, last_updated: int) -> list[dict]:
        """Java's ``updateSnapshotLog``: intermediate snapshots of this commit are dropped from the log,
        and a removed snapshot drops the history before it."""
        log, new_entries = self.snapshot_log, self.added_log_entries
        added: set[int] = set()
        intermediate: set[int] = set()
        for change in self.changes:
            if change[0] == "add-snapshot":
                added.add(change[1])
            elif change[0] == "set-snapshot-ref" and change[1] == MAIN and change[2] in added:
                intermediate.add(change[2])
        intermediate.discard(self.current_snapshot_id)
        removed = self.changed("remove-snapshots")
        if intermediate or removed:
            first_new = len(log) - new_entries
            rebuilt: list[dict] = []
            new_entries = 0
            for i, entry in enumerate(log):
                snapshot_id = entry["snapshot-id"]
                if self.has_snapshot(snapshot_id):
                    if snapshot_id not in intermediate:
                        rebuilt.append(entry)
                        new_entries += i >= first_new
                elif removed:
                    rebuilt.clear()
                    new_entries = 0
            if self.has_snapshot(self.current_snapshot_id) and (
                not rebuilt or rebuilt[-1]["snapshot-id"] != self.current_snapshot_id
            ):
                raise errors.ValidationFailed(
                    "Cannot set invalid snapshot log: latest entry is not the current snapshot"
                )
            log = rebuilt
        for i in range(len(log) - new_entries, len(log)):
            if i > 0 and log[i]["timestamp-ms"] - log[i - 1]["timestamp-ms"] < -ONE_MINUTE_MS:
                raise errors.ValidationFailed("[BUG] Expected sorted snapshot log entries.")
        if log and last_updated - log[-1]["timestamp-ms"] < -ONE_MINUTE_MS:
            raise errors.ValidationFailed(
                f"Invalid update timestamp {last_updated}: before last snapshot log entry at {log[-1]['timestamp-ms']}"
            )
        return log
