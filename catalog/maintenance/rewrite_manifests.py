"""Manifest rewrite (``rewrite-manifests``): a table's many small manifests merged into a few, as
Iceberg's ``RewriteManifests`` does, committed as a ``replace`` snapshot through the commit engine.

Every fast append (and every append the catalog rebases) adds one manifest; planning a scan reads
them all. When the main branch's snapshot has more than ``commit.manifest.min-count-to-merge``
(100) manifests, the scheduler queues this job; an operator's ``run`` does it whatever the count.

What it does, after Java (``RewriteManifestsSparkAction`` + ``BaseRewriteManifests``):

* the current snapshot's manifests are grouped by content (data, then deletes: Java rewrites the
  two kinds separately, never mixing them) and partition spec. A group is rewritten into
  ``ceil(total bytes / commit.manifest.target-size-bytes)`` manifests (8 MB by default), unless it
  already is one manifest that would stay one (Java: ``targetNumManifests == 1 && size == 1``).
  Java's Spark action rewrites only the current spec's manifests (its ``spec_id`` argument picks
  another); this job does every spec, one after the other, as ``BaseRewriteManifests`` keeps a writer
  per spec;
* only live entries are kept (Java: ``status < 2``), each written EXISTING with its own snapshot id,
  data and file sequence numbers made explicit (those an ADDED entry inherited from its manifest),
  and, v3, its ``first_row_id`` made explicit as Java's ``ManifestReader`` assigns it (the manifest's
  ``first_row_id`` plus the records of the live files before it that had none): rows keep their ids;
* entries of partitioned specs are sorted by partition and cut into contiguous runs, as Java's
  ``repartitionByRange(n, partition).sortWithinPartitions(partition)``, so each manifest covers a
  narrow range of partitions and scan planning prunes it by its partition summaries;
* the snapshot: operation ``replace``, parent the head, the next sequence number, the new manifests
  first then the kept ones (Java's ``apply``), the head's totals carried (nothing was added or
  removed), and ``manifests-created``/``manifests-kept``/``manifests-replaced``/``entries-processed``.
  The new manifests carry the new snapshot id as ``added_snapshot_id`` and its sequence number; v3
  lists give them fresh ``first_row_id`` ranges (``added-rows`` = their rows), as Java's V3 writer does.

Writers never fail because of it. The commit asserts the branch is still at the head it rewrote;
when a writer landed in between, the engine answers 409 to this job only, and the job lands on the
new head: when every manifest it replaced is still in the new head's list (appends, including the
catalog's rebased ones, only add manifests), its new manifests replace them there and the rest is
kept, as Java's ``BaseRewriteManifests.apply`` does on a retry; otherwise (something rewrote or
removed them) it deletes what it wrote and plans again on the new head, and after ``REPLANS`` it
yields (the task ends with ``yielded``, nothing committed). Appends arriving after it landed are
rebased over its ``replace`` snapshot by the server (``commit/rebase.py``) like over any other head.
Files are written create-only before the commit; a commit that is refused deletes them, a crash
leaves orphans for orphan removal.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import (
    ManifestContent,
    ManifestEntry,
    ManifestFile,
)

from catalog import metrics
from catalog.commit.changes import MAINTENANCE_JOB
from catalog.commit.engine import CommitEngine
from catalog.database.pointers import Entry
from catalog.maintenance.replace import (
    commit_replace,
    listed,
    main_head,
    metadata_dir,
    new_snapshot_id,
    read_live_entries,
    replace_on_main,
)
from catalog.storage.backends import Storage, delete_quietly
from catalog.storage.manifests import (
    BufferOutput,
    body_of,
    list_writer,
    manifest_writer,
    read_records,
    spec_and_schema,
)

log = logging.getLogger("catalog.maintenance")

KIND = "rewrite-manifests"
MIN_COUNT, MIN_COUNT_DEFAULT = "commit.manifest.min-count-to-merge", 100  # Java's TableProperties
TARGET, TARGET_DEFAULT = "commit.manifest.target-size-bytes", 8 * 2**20
MERGE_ENABLED = "commit.manifest-merge.enabled"  # Java's default: true
REPLANS = 5  # plans made again after what it replaced was rewritten or removed meanwhile; then it yields
LANDINGS = 20  # a plan landed on a moved head at most this often (writers keep landing) before planning again
MAX_BYTES = 512 * 2**20  # manifests one run reads into memory; a larger group is left for a bigger engine
COUNTS = ("manifests-", "entries-")  # the summary's counts, also in the task's result
TOTALS = (
    "total-records",
    "total-files-size",
    "total-data-files",
    "total-delete-files",
    "total-position-deletes",
    "total-equality-deletes",
)


# -- when it is due ------------------------------------------------------------------------------


def _int(props: dict[str, Any], key: str, default: int) -> int:
    try:
        return int(props.get(key, default))
    except (TypeError, ValueError):
        return default


def scheduled(metadata: dict[str, Any]) -> bool:
    """Whether the scheduler may rewrite this table's manifests by itself: not when the table turned
    manifest merging off (``commit.manifest-merge.enabled=false``: Java's appends then never merge,
    and the catalog does not either unless an operator runs it)."""
    props = metadata.get("properties") or {}
    return str(props.get(MERGE_ENABLED, "true")).strip().lower() != "false"


def due(metadata: dict[str, Any], storage: Storage) -> bool:
    """More manifests on the main branch than ``commit.manifest.min-count-to-merge``."""
    if not scheduled(metadata):
        return False
    head = main_head(metadata)
    if head is None or not head.get("manifest-list"):
        return False
    count = body_of(storage.read(head["manifest-list"])).count  # the blocks' counts: nothing decoded
    return count > _int(metadata.get("properties") or {}, MIN_COUNT, MIN_COUNT_DEFAULT)


# -- the plan (pure) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManifestGroup:
    """Manifests of one content and spec, rewritten into ``count`` manifests."""

    content: ManifestContent
    spec_id: int
    manifests: tuple[ManifestFile, ...]
    count: int


def plan(manifests: tuple[ManifestFile, ...], target_bytes: int) -> list[ManifestGroup]:
    """The groups to rewrite, data manifests first (Java rewrites DATA, then DELETES)."""
    groups: dict[tuple[int, int], list[ManifestFile]] = {}
    for m in manifests:
        groups.setdefault((int(m.content), m.partition_spec_id), []).append(m)
    out = []
    for (content, spec_id), members in sorted(groups.items()):
        if any(c is None for m in members for c in (m.added_files_count, m.existing_files_count)):
            continue  # Java: "No file counts in manifest"; such a group is left as it is
        total = sum(m.manifest_length for m in members)
        count = max(1, -(-total // max(1, target_bytes)))
        if count == 1 and len(members) == 1:
            continue
        if count >= len(members):
            continue  # already as merged as the target size allows
        out.append(ManifestGroup(ManifestContent(content), spec_id, tuple(members), count))
    return out


def _partition_key(entry: ManifestEntry) -> tuple:
    """A sort key over the partition tuple, nulls first (Spark's ascending order)."""
    partition = entry.data_file.partition
    values = tuple(partition[i] for i in range(len(partition))) if partition is not None else ()
    return tuple((v is not None, _comparable(v)) for v in values)


def _comparable(v: Any) -> Any:
    if v is None:
        return 0
    if isinstance(v, bool | int | float | str | bytes):
        return v
    return str(v)


def _cut(entries: list[ManifestEntry], count: int) -> list[list[ManifestEntry]]:
    """``entries`` in ``count`` contiguous runs of about equal size (none empty)."""
    count = max(1, min(count, len(entries)))
    size, extra = divmod(len(entries), count)
    runs, start = [], 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        runs.append(entries[start:end])
        start = end
    return [r for r in runs if r]


# -- the job -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Written:
    """Manifests written for a plan (not yet committed): what they replace and what they hold."""

    manifests: list[ManifestFile]
    replaced: set[str]
    entries: int
    paths: list[str] = field(default_factory=list)  # every file written, lists included


class Rewriter:
    """Rewrites one table's manifests (``run``), reading and writing through the server's storage."""

    def __init__(self, storage: Storage, engine: CommitEngine) -> None:
        self.storage = storage
        self.engine = engine

    def run(self, entry: Entry, file: Any, dry: bool, reread: Any) -> tuple[dict[str, Any], str]:
        """Rewrite the manifests of ``entry`` (at ``file``); ``reread()`` gives the table as it is
        now (entry, file). The task's result and the pointer the table was left at."""
        replans = landed_on_moved = 0
        for _ in range(REPLANS):
            metadata = file.data
            head = main_head(metadata)
            if head is None:
                return {"skipped": "the table has no snapshot on main"}, file.location
            if not head.get("manifest-list"):
                return {"skipped": "a v1 snapshot without a manifest list"}, file.location
            manifests, _ = read_records(self.storage.read(head["manifest-list"]))
            props = metadata.get("properties") or {}
            groups = plan(manifests, _int(props, TARGET, TARGET_DEFAULT))
            too_big = [g for g in groups if sum(m.manifest_length for m in g.manifests) > MAX_BYTES]
            groups = [g for g in groups if g not in too_big]
            result: dict[str, Any] = {"manifests-before": len(manifests)}
            if too_big:
                result["left-too-large"] = [{"spec-id": g.spec_id, "manifests": len(g.manifests)} for g in too_big]
            if not groups:
                return {**result, "manifests-replaced": 0, "manifests-created": 0, "replanned": replans}, file.location
            if dry:
                return {
                    **result,
                    "dry-run": True,
                    "manifests-to-replace": sum(len(g.manifests) for g in groups),
                    "manifests-to-create": sum(g.count for g in groups),
                }, file.location
            snapshot_id = new_snapshot_id(metadata)
            written = self._write(metadata, groups, snapshot_id)
            try:
                for _ in range(LANDINGS):
                    outcome = self._land(entry, metadata, head, written, snapshot_id)
                    if outcome is not None:
                        after, summary = outcome
                        result.update({k: int(v) for k, v in summary.items() if k.startswith(COUNTS)})
                        result.update(
                            {
                                "snapshot-id": snapshot_id,
                                "manifests-after": result["manifests-created"] + result["manifests-kept"],
                                "landed-on-moved-head": landed_on_moved,
                                "replanned": replans,
                                "metadata-location": after.location,
                            }
                        )
                        written.paths.clear()  # committed: nothing to delete
                        metrics.MAINTENANCE_MANIFEST_REWRITES.labels("landed").inc()
                        metrics.MAINTENANCE_MANIFESTS_REPLACED.inc(len(written.replaced))
                        return result, after.location
                    entry, file = reread()
                    version, metadata = metadata["format-version"], file.data
                    head = main_head(metadata)
                    if head is None or not head.get("manifest-list") or metadata["format-version"] != version:
                        break  # gone, or upgraded: its manifests were written for the old format
                    now = {m.manifest_path for m in read_records(self.storage.read(head["manifest-list"]))[0]}
                    if not written.replaced <= now:
                        break  # what it replaced was rewritten or removed: plan again
                    landed_on_moved += 1
                    metrics.MAINTENANCE_MANIFEST_REWRITES.labels("landed-on-moved-head").inc()
            finally:
                self._delete(written.paths)
            replans += 1
            metrics.MAINTENANCE_MANIFEST_REWRITES.labels("replanned").inc()
            log.info("manifest rewrite of %s planned again: the table's manifests changed", entry.ident)
        metrics.MAINTENANCE_MANIFEST_REWRITES.labels("yielded").inc()
        log.warning("manifest rewrite of %s yielded after %d plans: the table kept changing", entry.ident, replans)
        return {
            "yielded": "the table's manifests kept changing under the rewrite; nothing was committed",
            "replanned": replans,
            "landed-on-moved-head": landed_on_moved,
        }, file.location

    # -- writing the manifests -------------------------------------------------------------------

    def _write(self, metadata: dict[str, Any], groups: list[ManifestGroup], snapshot_id: int) -> Written:
        version = metadata["format-version"]
        codec = (metadata.get("properties") or {}).get("write.avro.compression-codec", "gzip")
        directory = metadata_dir(metadata)
        commit_id = uuid.uuid4()
        written = Written([], set(), 0)
        try:
            suffix = 0
            for group in groups:
                spec, schema = spec_and_schema(metadata, group.spec_id)
                entries = read_live_entries(self.storage, group.manifests)
                if spec.fields:
                    entries.sort(key=_partition_key)
                for run in _cut(entries, group.count):
                    location = f"{directory}/{commit_id}-m{suffix}.avro"
                    suffix += 1
                    out = BufferOutput(location)
                    with manifest_writer(version, group.content, spec, schema, out, snapshot_id, codec) as writer:
                        for e in run:
                            writer.existing(e)
                    self.storage.write_new(location, out.value)
                    written.paths.append(location)
                    written.manifests.append(writer.to_manifest_file())
                written.replaced.update(m.manifest_path for m in group.manifests)
                written.entries += len(entries)
        except BaseException:
            self._delete(written.paths)
            raise
        return written

    # -- the commit ------------------------------------------------------------------------------

    def _land(
        self, entry: Entry, metadata: dict[str, Any], head: dict[str, Any], written: Written, snapshot_id: int
    ) -> tuple[Any, dict[str, str]] | None:
        """Commit the rewrite on ``head``: the committed file and the summary, or None when the
        branch moved meanwhile (the caller looks at the new head)."""
        version = metadata["format-version"]
        head_manifests, _ = read_records(self.storage.read(head["manifest-list"]))
        if not written.replaced <= {m.manifest_path for m in head_manifests}:
            return None
        kept = [listed(m, version) for m in head_manifests if m.manifest_path not in written.replaced]
        new = [listed(m, version) for m in written.manifests]
        sequence = metadata.get("last-sequence-number", 0) + 1
        first_row_id = metadata.get("next-row-id", 0)
        codec = (metadata.get("properties") or {}).get("write.avro.compression-codec", "gzip")
        location = f"{metadata_dir(metadata)}/snap-{snapshot_id}-1-{uuid.uuid4()}.avro"
        out = BufferOutput(location)
        writer = list_writer(version, out, snapshot_id, head["snapshot-id"], sequence, first_row_id, codec)
        with writer:
            writer.add_manifests([*new, *kept])
        self.storage.write_new(location, out.value)
        written.paths.append(location)
        summary = {"operation": "replace"}
        summary.update({k: v for k, v in (head.get("summary") or {}).items() if k in TOTALS})
        summary.update(
            {
                "manifests-created": str(len(new)),
                "manifests-kept": str(len(kept)),
                "manifests-replaced": str(len(written.replaced)),
                "entries-processed": str(written.entries),
                "changed-partition-count": "0",  # Java's summary builder: no partition changed
                MAINTENANCE_JOB: KIND,
            }
        )
        change = replace_on_main(entry, metadata, head, snapshot_id, location, summary, writer.next_row_id)
        committed = commit_replace(
            self.engine, change, written.paths, [location], self._delete, f"manifest rewrite of {entry.ident}"
        )
        return None if committed is None else (committed, summary)

    def _delete(self, paths: list[str]) -> None:
        delete_quietly(self.storage, paths, "manifest rewrite")
