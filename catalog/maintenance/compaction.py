"""Data compaction (``rewrite-data-files``): a table's small data files rewritten, per partition, into
files of the table's target size, committed as a ``replace`` snapshot through the commit engine, as
Iceberg's ``RewriteDataFiles`` with its bin-pack (or, where the table has a sort order, sort) strategy.

What it does, after Java (``SizeBasedFileRewritePlanner``, ``BinPackRewriteFilePlanner``,
``RewriteDataFilesCommitManager``, ``BaseRewriteFiles``):

* the plan: the main branch's live data files of the table's default partition spec whose size is
  below ``min-file-size`` (75% of ``write.target-file-size-bytes``), grouped by partition. A group is
  rewritten when it has at least ``MIN_INPUT_FILES`` (5) files, or more than one file and more bytes
  than the target, or more than one file and position deletes that apply to them (Java's
  ``hasEnoughInputFiles || hasEnoughContent || hasDeleteIssues``). Files an equality delete applies
  to are left alone (the in-process reader does not apply equality deletes; Java's would), and so
  are files outside the table's own location (never read, never deleted). One run reads at most
  ``CATALOG_MAINTENANCE_COMPACTION_MAX_BYTES``; the next run takes the rest;
* the rewrite, in process: each file read with pyiceberg's Arrow reader (projected onto the current
  schema), its position deletes and deletion vectors applied; the rows of a group, sorted by the
  table's sort order when it has one on top-level columns with identity transforms, written by
  pyiceberg's writer into files of about the target size under the table's data location. In v3 the
  rows keep their lineage: ``_row_id`` and ``_last_updated_sequence_number`` are written as columns,
  each row's value as a reader inherits it (the file's ``first_row_id`` plus the row's position, the
  file's data sequence number), as the spec requires of a rewrite;
* the commit: operation ``replace``; the new files ADDED with the data sequence number of the
  snapshot the plan started from (Java's ``use-starting-sequence-number``, its default: equality
  deletes committed after the start still apply to the new files), the rewritten files DELETED in
  copies of the manifests that held them, and the position delete files whose every referenced row
  lies in a rewritten file DELETED too (their rows are applied, nothing refers to them any more).

Writers do not pay for it. The commit asserts the branch is still at the head it planned on. When a
writer landed first, the job, not the writer, gets the engine's 409, and it validates its rewrite
against the new head as ``BaseRewriteFiles.validate`` does: every file it replaces must still be
live, and no position delete or deletion vector committed since the start may point at one of them.
If so it lands on the new head; otherwise it **yields**: it deletes what it wrote and plans again
(``REPLANS``, then the task ends ``yielded``). Appends that come after it landed are rebased over its
snapshot by the server whatever the table's rebase setting (``commit/rebase.py``), and a row-level
writer whose base is older than it gets its commit landed by rolling the compaction back
(``commit/rebase.rollback_candidate``): the catalog's snapshot is the one that loses. Every snapshot
it makes carries ``catalog.maintenance-job`` in its summary, which is how the engine tells it apart.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.io.pyarrow import ArrowScan, _combine_positional_deletes, _read_deletes, write_file
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, ManifestContent, ManifestEntry, ManifestFile
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, WriteTask
from pyiceberg.table.delete_file_index import DeleteFileIndex, _referenced_data_file_path
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from catalog import errors, metrics
from catalog.commit.changes import MAINTENANCE_JOB, TABLE, Change
from catalog.commit.engine import CommitEngine
from catalog.commit.rebase import with_totals
from catalog.locations import is_within, normalise
from catalog.maintenance.manifests import (
    ident,
    listed,
    live_entries,
    main_head,
    manifest_writer,
    metadata_dir,
    new_snapshot_id,
    spec_and_schema,
)
from catalog.maintenance.spark import SparkEngine
from catalog.storage.backends import Storage
from catalog.storage.manifests import ENTRY_READ, FILE_ROW_ID, BufferOutput, BytesInput, list_writer, read_records
from catalog.store.pointers import Entry

log = logging.getLogger("catalog.maintenance")

KIND = "rewrite-data-files"
TARGET, TARGET_DEFAULT = "write.target-file-size-bytes", 512 * 2**20  # Java's TableProperties
MIN_RATIO = 0.75  # Java: min-file-size-bytes = 75% of the target
MIN_INPUT_FILES = 5  # Java: min-input-files
QUIET = "catalog.compaction.quiet-seconds"
ENABLED = "catalog.compaction.enabled"
REPLANS = 5
LANDINGS = 20
READ_THREADS = 8
ROW_ID, LAST_UPDATED = 2147483540, 2147483539  # the spec's reserved field ids of row lineage
LINEAGE = (
    NestedField(ROW_ID, "_row_id", LongType(), required=False),
    NestedField(LAST_UPDATED, "_last_updated_sequence_number", LongType(), required=False),
)
V3_FIELDS = len(DATA_FILE_TYPE[3].fields)
STATS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds")


def target_bytes(metadata: dict[str, Any]) -> int:
    try:
        return max(1, int((metadata.get("properties") or {}).get(TARGET, TARGET_DEFAULT)))
    except (TypeError, ValueError):
        return TARGET_DEFAULT


def quiet_ms(metadata: dict[str, Any], default_seconds: float) -> int:
    """The table's quiet period (``catalog.compaction.quiet-seconds``, else the server's setting)."""
    value = (metadata.get("properties") or {}).get(QUIET)
    try:
        seconds = float(value) if value is not None else default_seconds
    except (TypeError, ValueError):
        seconds = default_seconds
    return int(max(0.0, seconds) * 1000)


def row_level(snapshot: dict[str, Any]) -> bool:
    """A writer's commit that changes rows in place (what a compaction can make fail): ``overwrite``,
    ``delete``, or a ``replace`` that is not the catalog's own (a user's own rewrite)."""
    summary = snapshot.get("summary") or {}
    operation = summary.get("operation")
    return operation in ("overwrite", "delete") or (operation == "replace" and MAINTENANCE_JOB not in summary)


def deferred(metadata: dict[str, Any], now_ms: int, quiet: int) -> str:
    """Why compaction leaves the table alone now ('' when it does not): a row-level commit on main
    within the quiet period. Walks main back from its head only as far as the period reaches."""
    if quiet <= 0:
        return ""
    by_id = {s.get("snapshot-id"): s for s in metadata.get("snapshots") or []}
    at = main_head(metadata)
    while at is not None and int(at.get("timestamp-ms", 0)) >= now_ms - quiet:
        if row_level(at):
            ago = max(0, now_ms - int(at["timestamp-ms"])) // 1000
            return (
                f"a row-level commit (snapshot {at['snapshot-id']}, {at['summary']['operation']}) landed "
                f"{ago} s ago, within the quiet period of {quiet // 1000} s"
            )
        at = by_id.get(at.get("parent-snapshot-id"))
    return ""


def scheduled(metadata: dict[str, Any], default: bool) -> bool:
    """Whether the scheduler may compact this table by itself (``catalog.compaction.enabled``, else
    the server's ``CATALOG_MAINTENANCE_COMPACTION_ENABLED``)."""
    value = (metadata.get("properties") or {}).get(ENABLED)
    return default if value is None else str(value).strip().lower() == "true"


def due(metadata: dict[str, Any], default: bool = True) -> bool:
    """A cheap look at the head's summary: enough data files whose average size is small. The job
    itself plans on the manifests (and may find nothing to do)."""
    if not scheduled(metadata, default):
        return False
    head = main_head(metadata)
    summary = (head or {}).get("summary") or {}
    try:
        files, size = int(summary["total-data-files"]), int(summary["total-files-size"])
    except (KeyError, TypeError, ValueError):
        return False
    return files >= MIN_INPUT_FILES and size / files < MIN_RATIO * target_bytes(metadata)


# -- the plan ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Group:
    """Small files of one partition (of the default spec), rewritten together."""

    partition: Record
    files: list[ManifestEntry]
    deletes: dict[str, set[DataFile]]  # data file path -> position deletes that apply to it

    @property
    def bytes(self) -> int:
        return sum(e.data_file.file_size_in_bytes for e in self.files)


@dataclass(slots=True)
class Plan:
    groups: list[Group]
    left: dict[str, int] = field(default_factory=dict)  # why files were left alone -> how many


@dataclass(slots=True)
class Live:
    """The live entries of a snapshot, by content, with what they inherit made explicit."""

    manifests: tuple[ManifestFile, ...]
    data: list[ManifestEntry]
    deletes: list[ManifestEntry]


def plan(metadata: dict[str, Any], live: Live, max_bytes: int | None, added_before_ms: int | None = None) -> Plan:
    """The groups to rewrite (pure: no I/O), at most ``max_bytes`` of them (None: all).
    ``added_before_ms``: only files whose snapshot is older (a snapshot expired since is older still)."""
    spec_id = metadata.get("default-spec-id", 0)
    added_ms = {s.get("snapshot-id"): int(s.get("timestamp-ms", 0)) for s in metadata.get("snapshots") or []}
    target = target_bytes(metadata)
    index, equality = DeleteFileIndex(), []
    for e in live.deletes:
        if e.data_file.content == DataFileContent.POSITION_DELETES:
            index.add_delete_file(e, partition_key=e.data_file.partition)
        else:
            equality.append(e)
    roots = _roots(metadata)
    left: dict[str, int] = {}
    by_partition: dict[Any, Group] = {}
    for e in live.data:
        f = e.data_file
        if f.spec_id != spec_id or f.file_size_in_bytes >= MIN_RATIO * target:
            continue
        if added_before_ms is not None and added_ms.get(e.snapshot_id, 0) >= added_before_ms:
            left["added-within-quiet-period"] = left.get("added-within-quiet-period", 0) + 1
            continue
        if not _inside(f.file_path, roots):
            left["outside-table-location"] = left.get("outside-table-location", 0) + 1
            continue
        if any(_equality_applies(d, e, f) for d in equality):
            left["equality-deletes"] = left.get("equality-deletes", 0) + 1
            continue
        key = tuple(f.partition) if f.partition is not None else ()
        group = by_partition.setdefault(key, Group(f.partition or Record(), [], {}))
        group.files.append(e)
        deletes = index.for_data_file(e.sequence_number or 0, f, partition_key=f.partition)
        if deletes:
            group.deletes[f.file_path] = deletes
    groups, budget = [], max_bytes if max_bytes is not None else float("inf")
    for group in by_partition.values():
        many = len(group.files) >= MIN_INPUT_FILES
        content = len(group.files) > 1 and group.bytes > target
        deletes = len(group.files) > 1 and bool(group.deletes)
        if not (many or content or deletes):
            continue
        if group.bytes + _delete_bytes(group) > budget:
            left["next-run"] = left.get("next-run", 0) + len(group.files)
            continue
        budget -= group.bytes + _delete_bytes(group)
        groups.append(group)
    return Plan(groups, left)


def _delete_bytes(group: Group) -> int:
    return sum(d.file_size_in_bytes for ds in group.deletes.values() for d in ds)


def _equality_applies(delete: ManifestEntry, data: ManifestEntry, f: DataFile) -> bool:
    """Whether an equality delete applies to a data file (spec: its data sequence number is larger,
    and it is in the same partition, or its spec is unpartitioned)."""
    if (delete.sequence_number or 0) <= (data.sequence_number or 0):
        return False
    d = delete.data_file
    return not len(d.partition or ()) or (d.spec_id == f.spec_id and tuple(d.partition) == tuple(f.partition or ()))


def _roots(metadata: dict[str, Any]) -> list[str]:
    props = metadata.get("properties") or {}
    out = [normalise(metadata["location"])]
    for key in ("write.data.path", "write.object-storage.path", "write.folder-storage.path"):
        if props.get(key):
            try:
                out.append(normalise(props[key]))
            except errors.IcebergError:
                pass
    return out


def _inside(path: str, roots: list[str]) -> bool:
    try:
        normal = normalise(path)
    except errors.IcebergError:
        return False
    return any(is_within(normal, root) for root in roots)


# -- reading and writing through the server's storage ----------------------------------------------


class StorageIO(FileIO):
    """pyiceberg's FileIO over the server's storage: reads confined and capped, writes kept in memory
    and written create-only by the job (``written``)."""

    def __init__(self, storage: Storage, limit: int) -> None:
        super().__init__({})
        self.storage = storage
        self.limit = limit
        self.cache: dict[str, bytes] = {}
        self.outputs: dict[str, BufferOutput] = {}

    def new_input(self, location: str) -> InputFile:
        if location not in self.cache:
            self.cache[location] = self.storage.read(location, self.limit)
        return BytesInput(location, self.cache[location])

    def new_output(self, location: str) -> OutputFile:
        out = BufferOutput(location)
        self.outputs[location] = out
        return out

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise NotImplementedError("compaction deletes through the storage, never through the FileIO")


@dataclass(slots=True)
class Rewritten:
    """What one run wrote (not yet committed) and what it replaces."""

    added: list[DataFile] = field(default_factory=list)
    replaced: dict[str, ManifestEntry] = field(default_factory=dict)  # data file path -> entry
    removed_deletes: set[tuple[str, str | None]] = field(default_factory=set)  # (path, referenced file)
    paths: list[str] = field(default_factory=list)  # every file written
    strategy: str = "binpack"


class _Key:
    """A partition key for pyiceberg's writer: the group's partition as the manifests hold it."""

    def __init__(self, partition: Record, spec: PartitionSpec, schema: Schema) -> None:
        self.partition, self._spec, self._schema = partition, spec, schema

    def to_path(self) -> str:
        return self._spec.partition_to_path(self.partition, self._schema)


class Compactor:
    """Compacts one table's small data files (``run``), through the server's storage and engine."""

    def __init__(
        self,
        storage: Storage,
        engine: CommitEngine,
        max_bytes: int,
        quiet_seconds: float,
        spark: SparkEngine | None = None,
    ) -> None:
        self.storage = storage
        self.engine = engine
        self.max_bytes = max_bytes
        self.quiet_seconds = quiet_seconds
        self.spark = spark

    def run(self, entry: Entry, file: Any, dry: bool, reread: Any) -> tuple[dict[str, Any], str | None]:
        """Compact ``entry`` (at ``file``); ``reread()`` gives the table as it is now. The task's result
        and the pointer the table was left at (None when deferred: looked at again at the next scan)."""
        replans = landed_on_moved = 0
        for _ in range(REPLANS):
            metadata = file.data
            head = main_head(metadata)
            if head is None or not head.get("manifest-list"):
                return {"skipped": "the table has no snapshot with a manifest list on main"}, file.location
            quiet, now = quiet_ms(metadata, self.quiet_seconds), int(time.time() * 1000)
            if reason := deferred(metadata, now, quiet):
                metrics.MAINTENANCE_COMPACTIONS.labels("deferred").inc()
                return {"engine": "in-process", "deferred": reason}, None
            live = self._live(head)
            before = now - quiet if quiet else None
            if self.spark is not None and self.spark.configured:
                whole = plan(metadata, live, None, before)
                size = sum(g.bytes + _delete_bytes(g) for g in whole.groups)
                if size > self.max_bytes:  # beyond the in-process bound: Spark's rewrite_data_files
                    return self._on_spark(entry, file, dry, reread, size, len(live.data))
            the_plan = plan(metadata, live, self.max_bytes, before)
            result: dict[str, Any] = {"engine": "in-process", "data-files-before": len(live.data)}
            if the_plan.left:
                result["left"] = the_plan.left
            if not the_plan.groups:
                return {**result, "rewritten-data-files": 0, "added-data-files": 0, "replanned": replans}, file.location
            if dry:
                return {
                    **result,
                    "dry-run": True,
                    "groups": len(the_plan.groups),
                    "data-files-to-rewrite": sum(len(g.files) for g in the_plan.groups),
                    "bytes-to-rewrite": sum(g.bytes for g in the_plan.groups),
                }, file.location
            start = head
            snapshot_id = new_snapshot_id(metadata)
            started = time.process_time()
            written = self._rewrite(metadata, the_plan.groups, snapshot_id)
            cpu = time.process_time() - started
            try:
                for _ in range(LANDINGS):
                    outcome = self._land(entry, metadata, head, start, written, snapshot_id)
                    if isinstance(outcome, str):
                        log.info("compaction of %s yields: %s", ident(entry), outcome)
                        break
                    if outcome is not None:
                        after, summary = outcome
                        written.paths.clear()
                        metrics.MAINTENANCE_COMPACTIONS.labels("landed").inc()
                        return {
                            **result,
                            "strategy": written.strategy,
                            "snapshot-id": snapshot_id,
                            "rewritten-data-files": len(written.replaced),
                            "added-data-files": len(written.added),
                            "removed-delete-files": len(written.removed_deletes),
                            "rewritten-bytes": int(summary.get("removed-files-size", 0)),
                            "added-bytes": int(summary.get("added-files-size", 0)),
                            "records": int(summary.get("added-records", 0)),
                            "cpu-seconds": round(cpu, 3),
                            "landed-on-moved-head": landed_on_moved,
                            "replanned": replans,
                            "metadata-location": after.location,
                        }, after.location
                    entry, file = reread()
                    version, metadata = metadata["format-version"], file.data
                    head = main_head(metadata)
                    if head is None or not head.get("manifest-list") or metadata["format-version"] != version:
                        break
                    if writer := _row_level_since(metadata, head, start):
                        reason = f"a row-level writer committed while it ran (snapshot {writer})"
                        metrics.MAINTENANCE_COMPACTIONS.labels("yielded").inc()
                        log.info("compaction of %s yields: %s", ident(entry), reason)
                        return {"engine": "in-process", "yielded": reason, "replanned": replans}, file.location
                    landed_on_moved += 1
                    metrics.MAINTENANCE_COMPACTIONS.labels("landed-on-moved-head").inc()
            finally:
                self._delete(written.paths)
            replans += 1
            metrics.MAINTENANCE_COMPACTIONS.labels("replanned").inc()
        metrics.MAINTENANCE_COMPACTIONS.labels("yielded").inc()
        log.warning("compaction of %s yielded after %d plans: writers kept changing its files", ident(entry), replans)
        return {
            "engine": "in-process",
            "yielded": "writers changed the files it was rewriting; nothing was committed",
            "replanned": replans,
            "landed-on-moved-head": landed_on_moved,
        }, file.location

    def _on_spark(
        self, entry: Entry, file: Any, dry: bool, reread: Any, size: int, files: int
    ) -> tuple[dict[str, Any], str | None]:
        result: dict[str, Any] = {"engine": "spark", "data-files-before": files, "bytes-to-rewrite": size}
        if dry:
            return {**result, "dry-run": True}, file.location
        assert self.spark is not None
        try:
            out = self.spark.rewrite(entry.namespace, entry.name, {"min-input-files": str(MIN_INPUT_FILES)})
        except errors.IcebergError:
            raise
        except Exception as e:  # noqa: BLE001 - Spark's (py4j's) errors: its validation failing is a yield
            text = str(e)
            if "ValidationException" in text or "CommitFailedException" in text:
                metrics.MAINTENANCE_COMPACTIONS.labels("yielded").inc()
                first = next((line for line in text.splitlines() if "Exception" in line), text[:200])
                return {**result, "yielded": f"Spark's commit met a writer: {first.strip()[:300]}"}, file.location
            raise
        metrics.MAINTENANCE_COMPACTIONS.labels("landed").inc()
        _, after = reread()
        return {**result, **out, "metadata-location": after.location}, after.location

    # -- reading the snapshot --------------------------------------------------------------------

    def _live(self, head: dict[str, Any]) -> Live:
        manifests, _ = read_records(self.storage.read(head["manifest-list"]))
        entries = self._entries(manifests)
        data = [e for e in entries if e.data_file.content == DataFileContent.DATA]
        deletes = [e for e in entries if e.data_file.content != DataFileContent.DATA]
        return Live(manifests, data, deletes)

    def _entries(self, manifests: Iterable[ManifestFile]) -> list[ManifestEntry]:
        manifests = list(manifests)
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="compaction") as pool:
            raws = list(pool.map(lambda m: self.storage.read(m.manifest_path), manifests))
        out: list[ManifestEntry] = []
        for m, raw in zip(manifests, raws, strict=True):
            out.extend(live_entries(m, read_records(raw, ENTRY_READ)[0]))
        return out

    # -- the rewrite -----------------------------------------------------------------------------

    def _rewrite(self, metadata: dict[str, Any], groups: list[Group], snapshot_id: int) -> Rewritten:
        table = TableMetadataUtil.parse_obj(metadata)
        version = table.format_version
        schema = table.schema()
        spec = table.spec()
        io = StorageIO(self.storage, self.max_bytes)
        written = Rewritten()
        order = _sort_keys(table, schema)
        written.strategy = "sort" if order else "binpack"
        write_schema = Schema(*schema.fields, *LINEAGE, schema_id=schema.schema_id) if version >= 3 else schema
        write_meta = table.model_copy(
            update={"schemas": [write_schema if s.schema_id == schema.schema_id else s for s in table.schemas]}
        )
        target = target_bytes(metadata)
        try:
            for n, group in enumerate(groups):
                rows, referenced = self._read_group(table, schema, io, group, version)
                if order:
                    rows = rows.take(pc.sort_indices(rows, sort_keys=order[0], null_placement=order[1]))
                input_bytes = max(1, group.bytes)
                per_file = max(1, -(-rows.num_rows * target // input_bytes)) if rows.num_rows else 1
                tasks = [
                    WriteTask(
                        write_uuid=uuid.uuid4(),
                        task_id=n * 1000 + i,
                        schema=write_schema,
                        record_batches=rows.slice(offset, per_file).to_batches(),
                        partition_key=_Key(group.partition, spec, schema) if spec.fields else None,  # type: ignore[arg-type]
                    )
                    for i, offset in enumerate(range(0, rows.num_rows, per_file))
                ]
                for data_file in write_file(io, write_meta, iter(tasks)):
                    out = io.outputs.pop(data_file.file_path)
                    self.storage.write_new(data_file.file_path, out.value)
                    written.paths.append(data_file.file_path)
                    if version >= 3:  # pyiceberg's DataFile is v2's: v3's fields, unassigned (the list assigns)
                        data_file._data.extend([None] * (V3_FIELDS - len(data_file._data)))
                        for name in STATS:  # no metrics for the lineage columns (not table columns)
                            values = getattr(data_file, name) or {}
                            values.pop(ROW_ID, None)
                            values.pop(LAST_UPDATED, None)
                    written.added.append(data_file)
                for e in group.files:
                    written.replaced[e.data_file.file_path] = e
                rewritten = set(written.replaced)
                for path_deletes in group.deletes.values():
                    for d in path_deletes:
                        key = _delete_key(d)
                        if referenced.get(key, set()) <= rewritten:
                            written.removed_deletes.add(key)
                io.cache.clear()
        except BaseException:
            self._delete(written.paths)
            raise
        return written

    def _read_group(
        self, table: Any, schema: Schema, io: StorageIO, group: Group, version: int
    ) -> tuple[pa.Table, dict[tuple[str, str | None], set[str]]]:
        """The group's rows (deletes applied; v3 with their lineage) and, for each delete file that
        applies, every data file it points at (read from the file: exact)."""
        referenced: dict[tuple[str, str | None], set[str]] = {}
        positions: dict[str, list[pa.ChunkedArray]] = {}
        for deletes in group.deletes.values():
            for d in deletes:
                key = _delete_key(d)
                if key in referenced:
                    continue
                by_path = _read_deletes(io, d)
                if d.file_format.name == "PUFFIN" and key[1] is not None:
                    by_path = {key[1]: by_path[key[1]]} if key[1] in by_path else {}
                referenced[key] = set(by_path)
                for path, pos in by_path.items():
                    positions.setdefault(path, []).append(pos)
        scan = ArrowScan(table, io, schema, AlwaysTrue())
        parts = []
        for e in group.files:
            f = e.data_file
            rows = scan.to_table([FileScanTask(f)])
            if rows.num_rows != f.record_count:
                raise errors.BadRequest(
                    f"Data file {f.file_path} holds {rows.num_rows} rows, its manifest says {f.record_count}"
                )
            if version >= 3:
                rows = _with_lineage(rows, io.cache[f.file_path], e)
            if f.file_path in positions:
                rows = rows.take(_combine_positional_deletes(positions[f.file_path], 0, rows.num_rows))
            parts.append(rows)
        return pa.concat_tables(parts, promote_options="default"), referenced

    # -- the commit ------------------------------------------------------------------------------

    def _land(
        self,
        entry: Entry,
        metadata: dict[str, Any],
        head: dict[str, Any],
        start: dict[str, Any],
        written: Rewritten,
        snapshot_id: int,
    ) -> tuple[Any, dict[str, str]] | str | None:
        """Commit on ``head``: (the committed file, the summary); a reason to yield (the rewrite no
        longer holds on this head); or None when the branch moved meanwhile (look again)."""
        version = metadata["format-version"]
        manifests, _ = read_records(self.storage.read(head["manifest-list"]))
        start_seq = start.get("sequence-number", 0)
        reason = self._validate(manifests, head, start, written)
        if reason:
            return reason
        spec_by_id = {}
        sequence = metadata.get("last-sequence-number", 0) + 1
        codec = (metadata.get("properties") or {}).get("write.avro.compression-codec", "gzip")
        directory, commit_id = metadata_dir(metadata), uuid.uuid4()
        new: list[ManifestFile] = []
        kept: list[ManifestFile] = []
        removed_rows = removed_bytes = removed_delete_files = removed_positions = 0
        suffix = 0

        def manifest(content: ManifestContent, spec_id: int) -> tuple[Any, BufferOutput]:
            nonlocal suffix
            if spec_id not in spec_by_id:
                spec_by_id[spec_id] = spec_and_schema(metadata, spec_id)
            spec, schema = spec_by_id[spec_id]
            out = BufferOutput(f"{directory}/{commit_id}-c{suffix}.avro")
            suffix += 1
            return manifest_writer(version, content, spec, schema, out, snapshot_id, codec), out

        touched = [m for m in manifests if self._may_hold(m, written)]
        untouched = [m for m in manifests if not self._may_hold(m, written)]
        for m, raw in zip(touched, self._reads(touched), strict=True):
            entries = live_entries(m, read_records(raw, ENTRY_READ)[0])
            hits = [e for e in entries if _removed(e, written)]
            if not hits:
                kept.append(listed(m, version))
                continue
            writer, out = manifest(m.content, m.partition_spec_id)
            with writer:
                for e in entries:
                    if _removed(e, written):
                        writer.delete(e)
                        if e.data_file.content == DataFileContent.DATA:
                            removed_rows += e.data_file.record_count
                            removed_bytes += e.data_file.file_size_in_bytes
                        else:
                            removed_delete_files += 1
                            removed_positions += e.data_file.record_count
                    else:
                        writer.existing(e)
            self.storage.write_new(out.location, out.value)
            written.paths.append(out.location)
            new.append(listed(writer.to_manifest_file(), version))
        kept.extend(listed(m, version) for m in untouched)
        if written.added:
            writer, out = manifest(ManifestContent.DATA, metadata.get("default-spec-id", 0))
            with writer:
                for f in written.added:
                    writer.add(ManifestEntry.from_args(sequence_number=start_seq, data_file=f))
            self.storage.write_new(out.location, out.value)
            written.paths.append(out.location)
            new.insert(0, listed(writer.to_manifest_file(), version))
        location = f"{directory}/snap-{snapshot_id}-1-{commit_id}.avro"
        out = BufferOutput(location)
        first_row_id = metadata.get("next-row-id", 0)
        lw = list_writer(version, out, snapshot_id, head["snapshot-id"], sequence, first_row_id, codec)
        with lw:
            lw.add_manifests([*new, *kept])
        self.storage.write_new(location, out.value)
        written.paths.append(location)
        added_rows = sum(f.record_count for f in written.added)
        added_bytes = sum(f.file_size_in_bytes for f in written.added)
        changes = {
            "added-data-files": str(len(written.added)),
            "deleted-data-files": str(len(written.replaced)),
            "added-records": str(added_rows),
            "deleted-records": str(removed_rows),
            "added-files-size": str(added_bytes),
            "removed-files-size": str(removed_bytes),
            "changed-partition-count": str(len({tuple(f.partition or ()) for f in written.added})),
        }
        if removed_delete_files:
            changes["removed-delete-files"] = str(removed_delete_files)
            changes["removed-position-deletes"] = str(removed_positions)
        summary = {"operation": "replace", **with_totals(changes, head.get("summary") or {}), MAINTENANCE_JOB: KIND}
        snapshot: dict[str, Any] = {
            "snapshot-id": snapshot_id,
            "parent-snapshot-id": head["snapshot-id"],
            "timestamp-ms": max(int(time.time() * 1000), int(head.get("timestamp-ms", 0))),
            "manifest-list": location,
            "summary": summary,
        }
        if head.get("schema-id") is not None:
            snapshot["schema-id"] = head["schema-id"]
        if version >= 2:
            snapshot["sequence-number"] = sequence
        if version >= 3:
            snapshot["first-row-id"] = first_row_id
            snapshot["added-rows"] = lw.next_row_id - first_row_id
        change = Change(
            TABLE,
            entry.namespace,
            entry.name,
            requirements=[
                {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head["snapshot-id"]},
            ],
            updates=[
                {"action": "add-snapshot", "snapshot": snapshot},
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
            ],
            maintenance=True,
        )
        mine = [p for p in written.paths if p.startswith(f"{directory}/{commit_id}-") or p == location]
        try:
            committed = self.engine.commit([change])
        except errors.CommitFailed as e:  # a writer moved main: never its 409
            log.info("compaction of %s met a moved head: %s", ident(entry), e.message)
            for p in mine:
                written.paths.remove(p)
            self._delete(mine)
            return None
        except errors.ServiceUnavailable:
            raise
        except BaseException:  # the commit may have landed (CommitStateUnknown): its files are kept
            written.paths.clear()
            raise
        return committed.files[0], summary  # type: ignore[union-attr]

    def _validate(self, manifests: tuple[ManifestFile, ...], head: dict, start: dict, written: Rewritten) -> str:
        """Java's ``BaseRewriteFiles.validate`` on the head it would land on: '' when it holds."""
        if head["snapshot-id"] == start["snapshot-id"]:
            return ""
        live = self._entries(manifests)
        data = {e.data_file.file_path for e in live if e.data_file.content == DataFileContent.DATA}
        if missing := [p for p in written.replaced if p not in data]:
            return f"{len(missing)} of the files it rewrites were removed meanwhile (e.g. {missing[0]})"
        deletes = {_delete_key(e.data_file) for e in live}
        if missing := [k for k in written.removed_deletes if k not in deletes]:
            return f"{len(missing)} of the delete files it applied were removed meanwhile"
        start_seq = start.get("sequence-number", 0)
        for e in live:
            f = e.data_file
            if f.content != DataFileContent.POSITION_DELETES or (e.sequence_number or 0) <= start_seq:
                continue
            target = _referenced_data_file_path(f) or _dv_target(f)
            if target is not None and target not in written.replaced:
                continue
            if target is None and not any(
                tuple(f.partition or ()) == tuple(r.data_file.partition or ()) for r in written.replaced.values()
            ):
                continue
            return f"a position delete committed since it started may point at a file it rewrites ({f.file_path})"
        return ""

    def _may_hold(self, m: ManifestFile, written: Rewritten) -> bool:
        if m.content == ManifestContent.DELETES:
            return bool(written.removed_deletes)
        return True

    def _reads(self, manifests: list[ManifestFile]) -> list[bytes]:
        with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="compaction") as pool:
            return list(pool.map(lambda m: self.storage.read(m.manifest_path), manifests))

    def _delete(self, paths: list[str]) -> None:
        for path in paths:
            try:
                self.storage.delete(path)
            except Exception as e:  # noqa: BLE001 - an orphan; orphan removal takes it later
                log.warning("compaction: could not delete %s: %s", path, e)
        paths.clear()


def _removed(e: ManifestEntry, written: Rewritten) -> bool:
    f = e.data_file
    if f.content == DataFileContent.DATA:
        return f.file_path in written.replaced
    return _delete_key(f) in written.removed_deletes


def _row_level_since(metadata: dict[str, Any], head: dict[str, Any], start: dict[str, Any]) -> int | None:
    """A row-level commit on main between ``start`` (excluded) and ``head``: its id, else None."""
    by_id = {s.get("snapshot-id"): s for s in metadata.get("snapshots") or []}
    at: dict[str, Any] | None = head
    while at is not None and at.get("snapshot-id") != start.get("snapshot-id"):
        if row_level(at):
            return at["snapshot-id"]
        at = by_id.get(at.get("parent-snapshot-id"))
    return None


def _delete_key(f: DataFile) -> tuple[str, str | None]:
    """A delete file's entry: its path and, for a deletion vector, the data file it is for (one
    Puffin file holds the vectors of several data files, each its own entry)."""
    return f.file_path, _referenced_data_file_path(f) or _dv_target(f)


def _dv_target(f: DataFile) -> str | None:
    try:
        return f.referenced_data_file
    except (AttributeError, IndexError):
        return None


def _sort_keys(table: Any, schema: Schema) -> tuple[list[tuple[str, str]], str] | None:
    """The table's default sort order as pyarrow sort keys, when every field is an identity transform
    of a top-level column (else None: bin-pack only)."""
    order = table.sort_order()
    if order is None or not order.fields:
        return None
    keys = []
    for f in order.fields:
        if str(f.transform) != "identity":
            return None
        try:
            name = schema.find_column_name(f.source_id)
        except ValueError:
            return None
        if name is None or "." in name:
            return None
        keys.append((name, "ascending" if f.direction.name == "ASC" else "descending"))
    nulls = "at_start" if order.fields[0].null_order.name == "NULLS_FIRST" else "at_end"
    return keys, nulls


def _with_lineage(rows: pa.Table, raw: bytes, e: ManifestEntry) -> pa.Table:
    """``rows`` (one data file's, in file order) with its lineage columns: the file's own values where
    it has them (a file rewritten before), else what a reader inherits (spec: "Row Lineage")."""
    f = e.data_file
    n = rows.num_rows
    physical = _lineage_columns(raw)
    first = f[FILE_ROW_ID] if len(f._data) > FILE_ROW_ID else None
    inherited_ids = pa.array(range(first, first + n), pa.int64()) if first is not None else pa.nulls(n, pa.int64())
    row_id = physical.get(ROW_ID)
    row_id = inherited_ids if row_id is None else pc.coalesce(row_id, inherited_ids)
    seq = pa.array([e.sequence_number] * n, pa.int64())
    updated = physical.get(LAST_UPDATED)
    updated = seq if updated is None else pc.coalesce(updated, seq)
    return rows.append_column(_arrow_field(LINEAGE[0]), row_id).append_column(_arrow_field(LINEAGE[1]), updated)


def _lineage_columns(raw: bytes) -> dict[int, pa.ChunkedArray]:
    parquet = pq.ParquetFile(pa.BufferReader(raw))
    out = {}
    for i, name in enumerate(parquet.schema_arrow.names):
        meta = parquet.schema_arrow.field(i).metadata or {}
        fid = meta.get(b"PARQUET:field_id")
        if fid is not None and int(fid) in (ROW_ID, LAST_UPDATED):
            out[int(fid)] = parquet.read(columns=[name]).column(0).cast(pa.int64())
    return out


def _arrow_field(f: NestedField) -> pa.Field:
    return pa.field(f.name, pa.int64(), nullable=True, metadata={b"PARQUET:field_id": str(f.field_id).encode()})
