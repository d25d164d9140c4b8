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
(``commit/rollback.py``): the catalog's snapshot is the one that loses. Every snapshot
it makes carries ``catalog.maintenance-job`` in its summary, which is how the engine tells it apart.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestFile

from catalog import errors, metrics
from catalog.commit.changes import MAINTENANCE_JOB
from catalog.commit.engine import CommitEngine
from catalog.commit.rebuilt import with_totals
from catalog.database.pointers import Entry
from catalog.maintenance.compaction_plan import (
    MIN_INPUT_FILES,
    Live,
    deferred,
    delete_bytes,
    delete_key,
    estimated_outputs,
    plan,
    quiet_ms,
    row_level_since,
    target_bytes,
)
from catalog.maintenance.replace import (
    commit_replace,
    listed,
    live_entries,
    main_head,
    metadata_dir,
    new_snapshot_id,
    read_live_entries,
    read_manifests,
    replace_on_main,
)
from catalog.maintenance.rows import Rewritten, rewrite
from catalog.maintenance.spark import SparkEngine
from catalog.storage.backends import Storage, delete_quietly
from catalog.storage.manifests import (
    ENTRY_READ,
    BufferOutput,
    list_writer,
    manifest_writer,
    read_records,
    spec_and_schema,
)

log = logging.getLogger("catalog.maintenance")

KIND = "rewrite-data-files"
REPLANS = 5
LANDINGS = 20


class Compactor:
    """Compacts one table's small data files (``run``), through the server's storage and engine."""

    def __init__(
        self,
        storage: Storage,
        engine: CommitEngine,
        max_bytes: int,
        quiet_seconds: float,
        spark: SparkEngine | None = None,
        quiet_override: float | None = None,
    ) -> None:
        self.storage = storage
        self.engine = engine
        self.max_bytes = max_bytes
        self.quiet_seconds = quiet_seconds
        self.spark = spark
        self.quiet_override = quiet_override  # an operator's run: this quiet period, whatever the table says

    def run(self, entry: Entry, file: Any, dry: bool, reread: Any) -> tuple[dict[str, Any], str | None]:
        """Compact ``entry`` (at ``file``); ``reread()`` gives the table as it is now. The task's result
        and the pointer the table was left at (None when deferred: looked at again at the next scan)."""
        replans = landed_on_moved = 0
        for _ in range(REPLANS):
            metadata = file.data
            head = main_head(metadata)
            if head is None or not head.get("manifest-list"):
                return {"skipped": "the table has no snapshot with a manifest list on main"}, file.location
            quiet, now = quiet_ms(metadata, self.quiet_seconds, self.quiet_override), int(time.time() * 1000)
            if reason := deferred(metadata, now, quiet):
                metrics.MAINTENANCE_COMPACTIONS.labels("deferred").inc()
                return {"engine": "in-process", "deferred": reason, "quiet-seconds": quiet / 1000}, None
            live = self._live(head)
            before = now - quiet if quiet else None
            if self.spark is not None and self.spark.configured:
                whole = plan(metadata, live, None, before)
                size = sum(g.bytes + delete_bytes(g) for g in whole.groups)
                if size > self.max_bytes:  # beyond the in-process bound: Spark's rewrite_data_files
                    return self._on_spark(entry, file, dry, reread, size, len(live.data))
            the_plan = plan(metadata, live, self.max_bytes, before)
            result: dict[str, Any] = {
                "engine": "in-process",
                "data-files-before": len(live.data),
                "quiet-seconds": quiet / 1000,
                "target-file-size-bytes": target_bytes(metadata),
            }
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
                    "estimated-data-files-to-add": estimated_outputs(metadata, the_plan.groups),
                }, file.location
            start = head
            snapshot_id = new_snapshot_id(metadata)
            started = time.process_time()
            written = rewrite(self.storage, metadata, the_plan.groups, self.max_bytes)
            cpu = time.process_time() - started
            try:
                for _ in range(LANDINGS):
                    outcome = self._land(entry, metadata, head, start, written, snapshot_id)
                    if isinstance(outcome, str):
                        log.info("compaction of %s yields: %s", entry.ident, outcome)
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
                    if writer := row_level_since(metadata, head, start):
                        reason = f"a row-level writer committed while it ran (snapshot {writer})"
                        metrics.MAINTENANCE_COMPACTIONS.labels("yielded").inc()
                        log.info("compaction of %s yields: %s", entry.ident, reason)
                        return {"engine": "in-process", "yielded": reason, "replanned": replans}, file.location
                    landed_on_moved += 1
                    metrics.MAINTENANCE_COMPACTIONS.labels("landed-on-moved-head").inc()
            finally:
                self._delete(written.paths)
            replans += 1
            metrics.MAINTENANCE_COMPACTIONS.labels("replanned").inc()
        metrics.MAINTENANCE_COMPACTIONS.labels("yielded").inc()
        log.warning("compaction of %s yielded after %d plans: writers kept changing its files", entry.ident, replans)
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
        entries = read_live_entries(self.storage, manifests)
        data = [e for e in entries if e.data_file.content == DataFileContent.DATA]
        deletes = [e for e in entries if e.data_file.content != DataFileContent.DATA]
        return Live(manifests, data, deletes)

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
        for m, raw in zip(touched, read_manifests(self.storage, touched), strict=True):
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
        change = replace_on_main(entry, metadata, head, snapshot_id, location, summary, lw.next_row_id)
        mine = [p for p in written.paths if p.startswith(f"{directory}/{commit_id}-") or p == location]
        committed = commit_replace(
            self.engine, change, written.paths, mine, self._delete, f"compaction of {entry.ident}"
        )
        return None if committed is None else (committed, summary)

    def _validate(self, manifests: tuple[ManifestFile, ...], head: dict, start: dict, written: Rewritten) -> str:
        """Java's ``BaseRewriteFiles.validate`` on the head it would land on: '' when it holds."""
        if head["snapshot-id"] == start["snapshot-id"]:
            return ""
        live = read_live_entries(self.storage, manifests)
        data = {e.data_file.file_path for e in live if e.data_file.content == DataFileContent.DATA}
        if missing := [p for p in written.replaced if p not in data]:
            return f"{len(missing)} of the files it rewrites were removed meanwhile (e.g. {missing[0]})"
        deletes = {delete_key(e.data_file) for e in live}
        if missing := [k for k in written.removed_deletes if k not in deletes]:
            return f"{len(missing)} of the delete files it applied were removed meanwhile"
        start_seq = start.get("sequence-number", 0)
        for e in live:
            f = e.data_file
            if f.content != DataFileContent.POSITION_DELETES or (e.sequence_number or 0) <= start_seq:
                continue
            target = delete_key(f)[1]
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

    def _delete(self, paths: list[str]) -> None:
        delete_quietly(self.storage, paths, "compaction")


def _removed(e: ManifestEntry, written: Rewritten) -> bool:
    f = e.data_file
    if f.content == DataFileContent.DATA:
        return f.file_path in written.replaced
    return delete_key(f) in written.removed_deletes
