"""The jobs of table maintenance, each one task: ``expire-snapshots``, ``remove-orphans``,
``rewrite-manifests`` (its job is ``rewrite_manifests.py``), ``rewrite-data-files`` (``compaction.py``) and
``purge``.

Snapshot expiry plans with Iceberg's ``ExpireSnapshots`` semantics (``expire.plan``), spares the
snapshots that were a branch's head within the writer grace (a writer may still be committing from
one: its client validates against it), and commits
the plan through the commit engine as an ordinary commit: ``assert-table-uuid``, the plan's
``remove-snapshot-ref`` and ``remove-snapshots`` updates, and a guard that refuses the result if it
would lose a ref the plan did not expire (a writer moved a ref onto a planned snapshot meanwhile).
A lost CAS is re-applied on the new head by the engine, so writers never see a 409 because of it;
a guard refusal re-plans on the new head. Only after the commit landed are files deleted: those
reachable from the metadata before it and from none of the metadata it left
(``reachability.after_expiry``), and the metadata files that fell out of the metadata log, each
only when it lies inside the table's own locations (``Ownership.owned``). A crash between the
commit and the deletes leaves orphans, never a dangling reference. Every expiry run, with or
without snapshots to expire, then deletes the metadata files that fell out of the log earlier
(other commits'), found by listing the metadata directories (``old_metadata``: old enough that no
commit can be in flight with one, and the table's own).

Orphan removal deletes files under the table's own locations that no metadata of the table
references and that are older than ``CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS``. It checks the pointer
again before deleting; when commits landed meanwhile it reads what they added (only that:
lists and manifests never change), drops the candidates they reference and checks again.

A purge deletes the files of a table dropped with ``purgeRequested`` once its retention ended
(``database/dropped.py``): it first claims the dropped entry (no undrop from then on), deletes the
table's own files in an order that is safe to repeat (``storage/purge.py``), and only then forgets
the entry, which releases its location. A failed or killed purge is run again by the queue.

A task names its entry by identity: a table renamed since is found under its new name; a table
dropped, or dropped and created again (another table uuid), ends the task as ``skipped``.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from catalog import errors, metrics
from catalog.commit.changes import TABLE, Change
from catalog.commit.engine import CommitEngine
from catalog.database.dropped import DroppedRows
from catalog.database.entries import Entries
from catalog.database.ownership import PATH_PROPERTIES, Ownership
from catalog.database.pointers import Entry
from catalog.database.tasks import Task, TaskRows
from catalog.locations import normalise
from catalog.maintenance import compaction, expire, inheritance, old_metadata, orphans, reachability, rewrite_manifests
from catalog.maintenance.spark import SparkEngine
from catalog.metadata import tables
from catalog.settings import MaintenanceSettings, StorageSettings
from catalog.storage import purge
from catalog.storage.backends import Storage, StoredFile
from catalog.storage.manifests import Unreadable
from catalog.storage.metadata_files import MetadataFile, MetadataFiles, version_of

log = logging.getLogger("catalog.maintenance")

EXPIRE, ORPHANS, PURGE = "expire-snapshots", "remove-orphans", "purge"
REWRITE_MANIFESTS, COMPACT = rewrite_manifests.KIND, compaction.KIND
WRITER_GRACE = "writer-grace-seconds"  # a run's option: the grace it gives writers (expiry, compaction)
KINDS = (EXPIRE, ORPHANS, REWRITE_MANIFESTS, COMPACT)  # what a live table gets; a purge is for a dropped one
REPLANS = 5  # an expiry whose guard refused it (a ref moved onto a planned snapshot) plans again
ORPHANS_PER_RUN = 100_000  # the next run takes the rest
METADATA_PER_RUN = 100_000  # stale metadata files an expiry deletes at most (the next run takes the rest)
ORPHAN_PASSES = 50  # commits an orphan removal catches up with before it gives up (each pass is cheap)
RESULT_ITEMS = 1000  # snapshot ids or paths a task's result lists (with the full count beside them)
SWEEP_BATCH = 1000  # files deleted at a time by a purge's sweep of the table's location
DELETE_THREADS = 8  # deletes in flight per task (the storage's own bound, storage_concurrency, holds too)


class Skipped(Exception):
    """The task's entry is gone (dropped) or another table took its place: nothing to do."""


class Jobs:
    def __init__(
        self,
        settings: MaintenanceSettings,
        storage_settings: StorageSettings,
        port: int,
        tasks: TaskRows,
        entries: Entries,
        dropped: DroppedRows,
        storage: Storage,
        files: MetadataFiles,
        ownership: Ownership,
        engine: CommitEngine,
    ) -> None:
        """``storage_settings``: the warehouse's, for the FileIO of the files jobs read and delete (and the
        compaction Spark's); ``port``: the server's, where that Spark reaches the catalog."""
        self.settings = settings
        self.storage_settings = storage_settings
        self.tasks = tasks  # the queue, for the workers (``worker.py``)
        self.entries = entries
        self.dropped = dropped
        self.storage = storage
        self.files = files
        self.ownership = ownership
        self.engine = engine
        # opened on the first compaction too large for the process
        self.spark = SparkEngine(settings, storage_settings, port)

    # -- the entry a task is for -----------------------------------------------------------------

    def current(self, task: Task) -> tuple[Entry, MetadataFile]:
        """The task's table as it is now, by identity; ``Skipped`` when it is gone or replaced."""
        entry = self.entries.get_entry_by_id(task.entry_id)
        if entry is None or entry.kind != "table":
            raise Skipped("the table was dropped")
        file = self.files.read(entry.metadata_location)
        if task.table_uuid is not None and file.data.get("table-uuid") != task.table_uuid:
            raise Skipped("the table was dropped and another one created in its place")
        return entry, file

    def namespaces(self, ns: tuple[str, ...]) -> list[dict[str, str]]:
        """The properties of each namespace of ``ns``, outermost first."""
        return [self.entries.get_namespace(ns[: i + 1]) or {} for i in range(len(ns))]

    def enabled(self, entry: Entry, file: MetadataFile) -> bool:
        try:
            props = file.data.get("properties") or {}
            return inheritance.enabled(props, self.namespaces(entry.namespace), self.settings)
        except errors.BadRequest as e:
            log.warning("maintenance of %s skipped: %s", entry.ident, e.message)
            return False

    def run(self, task: Task) -> tuple[dict[str, Any], str | None]:
        """Do the task: its result, and the pointer the table was left at (None when skipped)."""
        if task.kind == PURGE:
            return self.purge(task), None
        try:
            entry, file = self.current(task)
        except Skipped as e:
            return {"skipped": str(e)}, None
        if task.kind == EXPIRE:
            try:
                return self.expire_snapshots(task, entry, file)
            except Skipped as e:  # dropped while its metadata directory was looked at
                return {"skipped": str(e)}, None
        if task.kind == ORPHANS:
            return self.remove_orphans(task, entry, file)
        if task.kind == REWRITE_MANIFESTS:
            return self.rewrite_manifests(task, entry, file)
        if task.kind == COMPACT:
            return self.compact(task, entry, file)
        raise errors.BadRequest(f"Unknown maintenance task kind: {task.kind}")

    # -- snapshot expiry -------------------------------------------------------------------------

    def expire_snapshots(self, task: Task, entry: Entry, file: MetadataFile) -> tuple[dict[str, Any], str]:
        dry = bool(task.options.get("dry-run"))
        io = purge.file_io(self.storage_settings, file.location)
        for _ in range(REPLANS):
            metadata = file.data
            defaults = inheritance.expire_defaults(self.namespaces(entry.namespace), self.settings)
            rules = expire.retention(metadata.get("properties") or {}, defaults)
            if not rules.gc_enabled:  # as Java refuses: the table's files may be shared with another
                return {"skipped": "gc.enabled is false on this table"}, file.location
            now = int(time.time() * 1000)
            grace = writer_grace(task, self.settings)
            planned_by_policy = expire.plan(metadata, now, rules)
            plan = _spare_recent_heads(planned_by_policy, metadata, now, grace)
            why = _why_kept(metadata, now, rules, planned_by_policy, plan, grace)
            updates = plan.updates()
            if not updates:
                swept = self._stale_metadata(task, entry, file)
                if dry:
                    return {
                        "dry-run": True,
                        **_capped("expired-snapshots", []),
                        "removed-refs": [],
                        **_capped("files-to-delete", [f.location for f in swept]),
                        **_capped("metadata-files-to-delete", [f.location for f in swept]),
                        **why,
                    }, file.location
                deleted = self._delete_metadata(swept)
                return {
                    **_capped("expired-snapshots", []),
                    "removed-refs": [],
                    "deleted-files": deleted,
                    "deleted-metadata-files": deleted,
                    **why,
                }, file.location
            # Every file the plan would leave unreachable is found BEFORE the commit: a manifest that
            # cannot be read fails the task with the table unchanged, never half-cleaned.
            planned = tables.apply(metadata, [], updates, base_location=file.location, now_ms=now)
            planned_gone = reachability.after_expiry(metadata, planned, io)
            if dry:
                dropped = _dropped_metadata(metadata, file.location, planned, None)
                swept = self._stale_metadata(task, entry, file)
                metadata_files = self._owned(entry, metadata, [*dropped, *(f.location for f in swept)])
                gone = self._owned(entry, metadata, [*planned_gone.all(), *metadata_files])
                return {
                    "dry-run": True,
                    **_capped("expired-snapshots", list(plan.snapshot_ids)),
                    "removed-refs": list(plan.refs),
                    **_capped("files-to-delete", sorted(gone)),
                    **_capped("metadata-files-to-delete", sorted(metadata_files)),
                    **why,
                }, file.location
            change = Change(
                TABLE,
                entry.namespace,
                entry.name,
                requirements=[{"type": "assert-table-uuid", "uuid": metadata["table-uuid"]}],
                updates=updates,
                guard=_keeps_refs(plan.refs),
            )
            try:
                committed = self.engine.commit([change])
            except errors.CommitFailed as e:  # a ref moved onto a planned snapshot, or renamed: plan again
                log.info("expiry of %s re-planned: %s", entry.ident, e.message)
                entry, file = self.current(task)
                continue
            after_file = committed.files[0]  # type: ignore[union-attr]  # no key: never Replayed
            metrics.MAINTENANCE_SNAPSHOTS_EXPIRED.inc(len(plan.snapshot_ids))
            if _snapshot_ids(after_file.data) == _snapshot_ids(planned):
                unreachable = planned_gone.all()
            else:  # others committed meanwhile: what is unreachable is decided on what landed
                unreachable = reachability.after_expiry(metadata, after_file.data, io).all()
            dropped_logs = _dropped_metadata(metadata, file.location, after_file.data, after_file.location)
            gone = self._owned(entry, after_file.data, [*unreachable, *dropped_logs])
            deleted = self._delete(gone, EXPIRE)
            deleted_logs = len(set(gone) & set(dropped_logs))
            # Then the metadata files that fell out of the log earlier (by other commits), on the
            # table as it is after this commit.
            try:
                swept_count = self._delete_metadata(self._stale_metadata(task, entry, after_file))
            except Skipped:  # dropped meanwhile: its files are the dropped entry's now
                swept_count = 0
            return {
                **_capped("expired-snapshots", list(plan.snapshot_ids)),
                "removed-refs": list(plan.refs),
                "deleted-files": deleted + swept_count,
                "deleted-metadata-files": deleted_logs + swept_count,
                "metadata-location": after_file.location,
                **why,
            }, after_file.location
        raise errors.CommitFailed(f"Snapshot expiry of {entry.ident}: the table kept changing its refs")

    def _stale_metadata(self, task: Task, entry: Entry, file: MetadataFile) -> list[StoredFile]:
        """The table's metadata files that are in neither its current file nor its log, older than
        ``CATALOG_MAINTENANCE_METADATA_FILE_AGE_SECONDS`` and its own (``old_metadata``; at most
        ``METADATA_PER_RUN``). The age counts from before the pointer is read again here: a file
        older than that and not in the log could only become current through a commit that took
        longer than the age from its write to its swap. ``Skipped`` when the table is gone."""
        started_ms = int(time.time() * 1000)
        latest = self.entries.get_entry_by_id(entry.id)
        if latest is None:
            raise Skipped("the table was dropped")
        if latest.metadata_location != file.location:
            entry, file = self.current(task)
        cutoff = started_ms - int(self.settings.maintenance_metadata_file_age_seconds * 1000)
        keep = old_metadata.kept(file.data, file.location)
        owned = self.ownership.owned(file.data, entry.id)
        found: list[StoredFile] = []
        for directory in old_metadata.directories(file.data):
            listing = self.storage.listing(directory)
            for stored in old_metadata.stale(listing, directory, keep, cutoff, owned, version_of(file.location)):
                found.append(stored)
                if len(found) >= METADATA_PER_RUN:
                    return found
        return found

    def _delete_metadata(self, stale: list[StoredFile]) -> int:
        deleted = self._delete([f.location for f in stale], EXPIRE)
        metrics.MAINTENANCE_BYTES_DELETED.labels(EXPIRE).inc(sum(f.size for f in stale))
        if deleted:
            log.info("snapshot expiry deleted %d metadata files out of the metadata log", deleted)
        return deleted

    # -- manifest rewrite (catalog/maintenance/rewrite_manifests.py) ------------------------------------------

    def rewrite_manifests(self, task: Task, entry: Entry, file: MetadataFile) -> tuple[dict[str, Any], str | None]:
        rewriter = rewrite_manifests.Rewriter(self.storage, self.engine)
        try:
            return rewriter.run(entry, file, bool(task.options.get("dry-run")), lambda: self.current(task))
        except Skipped as e:
            return {"skipped": str(e)}, None
        except Unreadable as e:  # another codec, a broken file: retrying would not help
            return {"skipped": f"a manifest or manifest list this catalog does not read: {e}"}, file.location

    # -- data compaction (catalog/maintenance/compaction.py) ---------------------------------------

    def compact(self, task: Task, entry: Entry, file: MetadataFile) -> tuple[dict[str, Any], str | None]:
        compactor = compaction.Compactor(
            self.storage,
            self.engine,
            self.settings.maintenance_compaction_max_bytes,
            self.settings.maintenance_compaction_quiet_seconds,
            self.spark,
            quiet_override=task.options.get(WRITER_GRACE),
        )
        try:
            return compactor.run(entry, file, bool(task.options.get("dry-run")), lambda: self.current(task))
        except Skipped as e:
            return {"skipped": str(e)}, None
        except Unreadable as e:
            return {"skipped": f"a manifest or manifest list this catalog does not read: {e}"}, file.location

    # -- orphans ---------------------------------------------------------------------------------

    def remove_orphans(self, task: Task, entry: Entry, file: MetadataFile) -> tuple[dict[str, Any], str]:
        dry = bool(task.options.get("dry-run"))
        if not expire.retention(file.data.get("properties") or {}).gc_enabled:
            return {"skipped": "gc.enabled is false on this table"}, file.location
        cutoff = int(time.time() * 1000 - self.settings.maintenance_orphan_age_hours * 3600 * 1000)
        known = orphans.Referenced(purge.file_io(self.storage_settings, file.location))
        known.add(file.data, file.location)
        owned = self.ownership.owned(file.data, entry.id)
        found = orphans.find(self.storage, self._prefixes(file.data), known.paths, owned, cutoff, ORPHANS_PER_RUN)
        # A commit landing meanwhile may reference a candidate: what it added is read (only that),
        # the candidates it references are dropped, and the pointer is checked again.
        for _ in range(ORPHAN_PASSES):
            latest = self.entries.get_entry_by_id(entry.id)
            if latest is None:
                raise Skipped("the table was dropped")
            if latest.metadata_location == file.location:
                break
            entry, file = self.current(task)
            known.add(file.data, file.location)
            found.files = [f for f in found.files if normalise(f.location) not in known.paths]
        else:
            raise errors.CommitFailed(f"Orphan removal of {entry.ident}: the table kept changing")
        result: dict[str, Any] = {
            "scanned": found.scanned,
            "kept-younger-than-age": found.kept_young,
            "orphan-age-hours": self.settings.maintenance_orphan_age_hours,
            "orphans": len(found.files),
            "bytes": sum(f.size for f in found.files),
        }
        if dry:
            result.update({"dry-run": True, **_capped("files-to-delete", sorted(f.location for f in found.files))})
            return result, file.location
        result["deleted-files"] = self._delete([f.location for f in found.files], ORPHANS)
        metrics.MAINTENANCE_BYTES_DELETED.labels(ORPHANS).inc(result["bytes"])
        return result, file.location

    # -- purge -----------------------------------------------------------------------------------

    def purge(self, task: Task) -> dict[str, Any]:
        """Delete the files of a dropped table whose retention ended, then forget it."""
        gone = self.dropped.begin_purge(task.entry_id)
        if gone is None:
            return {"skipped": "the table was undropped, or its purge is done"}
        try:
            file = self.files.read(gone.metadata_location)
        except errors.NotFound:  # deleted last, by an earlier attempt: nothing of the table is left
            self.dropped.end_purge(gone.id)
            return {"deleted-files": 0, "metadata-location": gone.metadata_location}
        io = purge.file_io(self.storage_settings, file.location)
        owned = self.ownership.owned(file.data, gone.id)
        gc = expire.retention(file.data.get("properties") or {}).gc_enabled
        deleted = 0
        for _, paths in purge.table_files(file.data, file.location, owned, io, data_files=gc):
            deleted += self._delete(paths, PURGE)
        # What no metadata named (a failed commit's files, a manifest lost before): the table's own
        # location is its alone (no other entry overlaps it) and no one can commit to it any more.
        # Never a root of the location policy (no table lies at one; a table from before that rule
        # might): the sweep would list the whole warehouse.
        current = normalise(file.location)
        sweep = gc and normalise(file.data["location"]) not in self.ownership.locations.roots
        batch: list[str] = []
        for stored in self.storage.listing(file.data["location"]) if sweep else ():
            path = normalise(stored.location)
            if path != current and owned(path):
                batch.append(stored.location)
            if len(batch) >= SWEEP_BATCH:
                deleted += self._delete(batch, PURGE)
                batch = []
        deleted += self._delete(batch, PURGE)
        deleted += self._delete([file.location], PURGE)  # last: a repeated purge starts from it
        if sweep:
            self.storage.remove_empty_directories(file.data["location"])
        self.dropped.end_purge(gone.id)
        log.info("purged dropped table %s: %d files deleted", gone.ident, deleted)
        return {"deleted-files": deleted, "metadata-location": gone.metadata_location}

    def _prefixes(self, metadata: dict[str, Any]) -> list[str]:
        props = metadata.get("properties") or {}
        return [metadata["location"], *(props[k] for k in PATH_PROPERTIES if props.get(k))]

    # -- deleting --------------------------------------------------------------------------------

    def _owned(self, entry: Entry, metadata: dict[str, Any], paths: list[str]) -> list[str]:
        """Only the table's own files: inside its locations and no other entry's. The others are
        logged and kept (the metadata is a client's word)."""
        owned = self.ownership.owned(metadata, entry.id)
        mine, foreign = [], []
        for path in dict.fromkeys(paths):
            (mine if owned(path) else foreign).append(path)
        if foreign:
            log.warning("maintenance of %s kept %d files outside the table's locations", entry.ident, len(foreign))
        return mine

    def _delete(self, paths: list[str], kind: str) -> int:
        """Delete ``paths`` (already checked), a few at a time; raise on the first failure (the
        task is retried: deleting a deleted file is a no-op)."""
        if not paths:
            return 0
        with ThreadPoolExecutor(max_workers=DELETE_THREADS, thread_name_prefix="maintenance-delete") as pool:
            for _ in pool.map(self.files.delete, paths):
                pass
        metrics.MAINTENANCE_FILES_DELETED.labels(kind).inc(len(paths))
        return len(paths)


def writer_grace(task: Task, settings: MaintenanceSettings) -> float:
    """The seconds of grace a task gives writers: the run's own (``writer-grace-seconds``, an
    operator's override for this run only), else ``CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS``."""
    override = task.options.get(WRITER_GRACE)
    return float(override) if override is not None else settings.maintenance_writer_grace_seconds


def _spare_recent_heads(plan: expire.Expiry, metadata: dict[str, Any], now_ms: int, grace: float) -> expire.Expiry:
    """The plan without the snapshots that were the head of a branch within the writer grace
    (``grace`` seconds): a snapshot stopped being a head when a child was
    committed on it, and a writer that loaded the table before that may still be committing from it
    (clients validate their commit against their starting snapshot, which must still exist)."""
    grace_ms = int(grace * 1000)
    if not plan.snapshot_ids or grace_ms == 0:
        return plan
    recent_parents = {
        s.get("parent-snapshot-id") for s in metadata.get("snapshots") or [] if s["timestamp-ms"] >= now_ms - grace_ms
    }
    kept = tuple(i for i in plan.snapshot_ids if i not in recent_parents)
    return plan if kept == plan.snapshot_ids else expire.Expiry(kept, plan.refs)


def _why_kept(
    metadata: dict[str, Any],
    now_ms: int,
    rules: expire.Retention,
    by_policy: expire.Expiry,
    plan: expire.Expiry,
    grace: float,
) -> dict[str, Any]:
    """What an expiry's result says about the snapshots it kept: how many for each reason (the
    policy's, ``expire.why_kept``, and the writer grace's), and the values that decided."""
    kept = expire.why_kept(metadata, now_ms, rules, by_policy)
    if held := len(by_policy.snapshot_ids) - len(plan.snapshot_ids):
        kept["writer-grace"] = held
    return {
        "kept-snapshots": kept,
        "max-snapshot-age-ms": rules.max_snapshot_age_ms,
        "min-snapshots-to-keep": rules.min_snapshots_to_keep,
        "writer-grace-seconds": grace,
    }


def _keeps_refs(expired: tuple[str, ...]) -> Any:
    """The guard of an expiry commit: the result loses no ref but the expired ones."""

    def guard(base: dict[str, Any], new: dict[str, Any]) -> None:
        lost = set(base.get("refs") or {}) - set(new.get("refs") or {}) - set(expired)
        if lost:
            raise errors.CommitFailed(f"Snapshot expiry would remove the refs {sorted(lost)}: planned again")

    return guard


def _dropped_metadata(
    before: dict[str, Any], before_location: str, after: dict[str, Any], location: str | None
) -> list[str]:
    """Metadata files the commit took out of the metadata log (``write.metadata.previous-versions-max``);
    ``location`` None: a planned commit, its file not written yet."""
    was = {normalise(e["metadata-file"]) for e in before.get("metadata-log") or []} | {normalise(before_location)}
    now = {normalise(e["metadata-file"]) for e in after.get("metadata-log") or []}
    if location is not None:
        now.add(normalise(location))
    return sorted(was - now)


def _snapshot_ids(metadata: dict[str, Any]) -> set[int]:
    return {s["snapshot-id"] for s in metadata.get("snapshots") or []}


def _capped(key: str, items: list) -> dict[str, Any]:
    """``key``: the first ``RESULT_ITEMS`` items, ``key-count``: how many there are (a result is a
    row in the queue: at 100,000 snapshots the whole list would be megabytes)."""
    return {key: items[:RESULT_ITEMS], f"{key}-count": len(items)}
