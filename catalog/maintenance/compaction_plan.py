"""Which data files a compaction rewrites, and when (pure: no I/O), after Java's bin-pack planner
(``SizeBasedFileRewritePlanner``, ``BinPackRewriteFilePlanner``) and the catalog's own rule for
writers: a table is left alone while a writer's row-level commit is recent (``deferred``).
``compaction.py`` is the job that uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntry, ManifestFile
from pyiceberg.table.delete_file_index import DeleteFileIndex, _referenced_data_file_path
from pyiceberg.typedef import Record

from catalog import errors
from catalog.commit.changes import MAINTENANCE_JOB
from catalog.locations import is_within, normalise
from catalog.maintenance.replace import main_head

TARGET, TARGET_DEFAULT = "write.target-file-size-bytes", 512 * 2**20  # Java's TableProperties
MIN_RATIO = 0.75  # Java: min-file-size-bytes = 75% of the target
MIN_INPUT_FILES = 5  # Java: min-input-files
QUIET = "catalog.compaction.quiet-seconds"
ENABLED = "catalog.compaction.enabled"


def target_bytes(metadata: dict[str, Any]) -> int:
    try:
        return max(1, int((metadata.get("properties") or {}).get(TARGET, TARGET_DEFAULT)))
    except (TypeError, ValueError):
        return TARGET_DEFAULT


def quiet_ms(metadata: dict[str, Any], default_seconds: float, override: float | None = None) -> int:
    """The table's quiet period: ``override`` (an operator's run), else the table's
    ``catalog.compaction.quiet-seconds``, else the server's setting."""
    value = override if override is not None else (metadata.get("properties") or {}).get(QUIET)
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


@dataclass(slots=True)
class FileGroup:
    """Small files of one partition (of the default spec), rewritten together."""

    partition: Record
    files: list[ManifestEntry]
    deletes: dict[str, set[DataFile]]  # data file path -> position deletes that apply to it

    @property
    def bytes(self) -> int:
        return sum(e.data_file.file_size_in_bytes for e in self.files)


@dataclass(slots=True)
class CompactionPlan:
    groups: list[FileGroup]
    left: dict[str, int] = field(default_factory=dict)  # why files were left alone -> how many


@dataclass(slots=True)
class Live:
    """The live entries of a snapshot, by content, with what they inherit made explicit."""

    manifests: tuple[ManifestFile, ...]
    data: list[ManifestEntry]
    deletes: list[ManifestEntry]


def plan(
    metadata: dict[str, Any], live: Live, max_bytes: int | None, added_before_ms: int | None = None
) -> CompactionPlan:
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
    by_partition: dict[Any, FileGroup] = {}
    for e in live.data:
        f = e.data_file
        if f.file_size_in_bytes >= MIN_RATIO * target:
            left["near-target-size"] = left.get("near-target-size", 0) + 1
            continue
        if f.spec_id != spec_id:
            left["older-partition-spec"] = left.get("older-partition-spec", 0) + 1
            continue
        if added_before_ms is not None and added_ms.get(e.snapshot_id, 0) >= added_before_ms:
            left["added-within-quiet-period"] = left.get("added-within-quiet-period", 0) + 1
            continue
        if not inside(f.file_path, roots):
            left["outside-table-location"] = left.get("outside-table-location", 0) + 1
            continue
        if any(_equality_applies(d, e, f) for d in equality):
            left["equality-deletes"] = left.get("equality-deletes", 0) + 1
            continue
        key = tuple(f.partition) if f.partition is not None else ()
        group = by_partition.setdefault(key, FileGroup(f.partition or Record(), [], {}))
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
            left["too-few-in-partition"] = left.get("too-few-in-partition", 0) + len(group.files)
            continue
        if group.bytes + delete_bytes(group) > budget:
            left["next-run"] = left.get("next-run", 0) + len(group.files)
            continue
        budget -= group.bytes + delete_bytes(group)
        groups.append(group)
    return CompactionPlan(groups, left)


def estimated_outputs(metadata: dict[str, Any], groups: list[FileGroup]) -> int:
    """About how many files a rewrite of ``groups`` writes: each group's bytes over the target
    size, at least one (what a dry run can say without reading a row)."""
    target = target_bytes(metadata)
    return sum(max(1, -(-g.bytes // target)) for g in groups)


def delete_bytes(group: FileGroup) -> int:
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


def inside(path: str, roots: list[str]) -> bool:
    try:
        normal = normalise(path)
    except errors.IcebergError:
        return False
    return any(is_within(normal, root) for root in roots)


def row_level_since(metadata: dict[str, Any], head: dict[str, Any], start: dict[str, Any]) -> int | None:
    """A row-level commit on main between ``start`` (excluded) and ``head``: its id, else None."""
    by_id = {s.get("snapshot-id"): s for s in metadata.get("snapshots") or []}
    at: dict[str, Any] | None = head
    while at is not None and at.get("snapshot-id") != start.get("snapshot-id"):
        if row_level(at):
            return at["snapshot-id"]
        at = by_id.get(at.get("parent-snapshot-id"))
    return None


def delete_key(f: DataFile) -> tuple[str, str | None]:
    """A delete file's entry: its path and, for a deletion vector, the data file it is for (one
    Puffin file holds the vectors of several data files, each its own entry)."""
    return f.file_path, _referenced_data_file_path(f) or dv_target(f)


def dv_target(f: DataFile) -> str | None:
    try:
        return f.referenced_data_file
    except (AttributeError, IndexError):
        return None
