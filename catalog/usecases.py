"""The use cases: namespaces, and the entries (tables and views) in them. Commits are the commit
engine's (``catalog.commit.engine``); this module prepares them (names, locations, the new metadata of a
create) and is the HTTP layer's only way in (it never reaches the store or the files itself). The
``Catalog`` holds collaborators for three of its jobs: where entries go (``placement``), registering
an existing metadata file (``registration``) and dropped entries (``drops``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from catalog import errors
from catalog.commit.changes import TABLE, VIEW, Change, Committed, Kind, Outcome
from catalog.commit.engine import CommitEngine
from catalog.commit.grouping import GroupCommitter
from catalog.commit.inline import InlineCommitter
from catalog.database import migrate
from catalog.database.dropped import Dropped, DroppedRows
from catalog.database.entries import Entries, name_taken
from catalog.database.grant_rows import GrantRows
from catalog.database.leases import Leases
from catalog.database.location_rows import HeldByDropped
from catalog.database.outbox import EventRows
from catalog.database.ownership import Ownership
from catalog.database.pointers import Entry, KeyRecord, Pointers
from catalog.database.sql import Database
from catalog.database.tasks import Task, TaskRows
from catalog.drops import Drops
from catalog.events.records import StoredEvent
from catalog.maintenance.jobs import KINDS as MAINTENANCE_KINDS
from catalog.maintenance.jobs import WRITER_GRACE, Jobs
from catalog.metadata import tables, views
from catalog.names import check_name, check_namespace, dotted
from catalog.placement import Placement
from catalog.planning.planner import Answer, Planner, Prepared
from catalog.planning.request import ScanRequest
from catalog.registration import Registration
from catalog.settings import Settings
from catalog.storage.backends import LocalStorage, Storage
from catalog.storage.metadata_files import MetadataFile, MetadataFiles

log = logging.getLogger("catalog.usecases")
Namespace = tuple[str, ...]
__all__ = ["TABLE", "VIEW", "Catalog", "Change", "Committed", "HeldByDropped", "Kind", "Outcome"]


class Catalog:
    def __init__(
        self,
        settings: Settings,
        storage: Storage,
        files: MetadataFiles,
        *,
        db: Database,
        pointers: Pointers,
        entries: Entries,
        dropped: DroppedRows,
        tasks: TaskRows,
        outbox: EventRows,
        leases: Leases,
        grants: GrantRows,
    ) -> None:
        """The store's parts (``build_catalog`` builds them once on one database); each part below is
        handed on to the consumers that use it, and only to them; so is each group of ``settings``."""
        self.settings = settings
        self.storage = storage
        self.files = files
        self.db = db  # the readiness probe, the migration check, and closing
        self.pointers = pointers
        self.entries = entries
        self.dropped_rows = dropped
        self.tasks = tasks
        self.outbox = outbox  # the feed here; with ``leases``, the delivery loops (``server/background.py``)
        self.leases = leases
        self.grants = grants  # not used here: the server builds this catalog's ``Access`` with it
        self.ownership = Ownership(entries, storage.locations)
        self.placement = Placement(storage, files, pointers, entries, dropped, self.ownership)
        self.registration = Registration(files, entries, self.ownership, self.placement)
        self.drops = Drops(entries, dropped, tasks)
        self.engine = CommitEngine(settings.commits, pointers, entries, files, self.ownership, grouping=GroupCommitter)
        # Commits on the event loop: only with the setting on, and the database (SQLite) and the
        # storage on local disk (``commit_inline``).
        self.inline: InlineCommitter | None = None
        if settings.commits.inline_commits and db.local and isinstance(storage, LocalStorage):
            self.inline = InlineCommitter(self.engine, storage)
        care = (settings.maintenance, settings.storage, settings.server.port)  # Spark reaches the catalog at the port
        self.jobs = Jobs(*care, tasks, entries, dropped, storage, files, self.ownership, self.engine)
        self.planner = Planner(storage, settings.planning)
        # Readiness checks run on their own threads, one at a time per check, so that a stalled
        # dependency neither takes request threads nor piles up checks.
        self._probe_threads = ThreadPoolExecutor(max_workers=3, thread_name_prefix="readiness")
        self._probes: dict[str, Future] = {}

    def probe(self, storage: bool = True) -> dict[str, Future]:
        """Each dependency's check (the storage's too, unless ``storage`` is false), as a future
        that resolves when it passed and raises why not. A check still running from an earlier
        probe is joined, not started again."""
        checks = {"database": self.db.ping, "migrations": self._at_head}
        if storage:
            checks["storage"] = self.storage.ping
        for name, check in checks.items():
            running = self._probes.get(name)
            if running is None or running.done():
                try:
                    self._probes[name] = self._probe_threads.submit(check)
                except RuntimeError:  # closed (a warehouse closed or reopened meanwhile): not ready
                    self._probes[name] = closed = Future()
                    closed.set_exception(errors.ServiceUnavailable("closed"))
        return {name: self._probes[name] for name in checks}

    def close(self) -> None:
        """Let go of what this catalog holds: its database connections and its readiness threads
        (a warehouse closed, or reopened with a changed profile)."""
        self._probe_threads.shutdown(wait=False, cancel_futures=True)
        self.planner.close()
        self.engine.close()
        self.pointers.close_held_connections()
        self.db.engine.dispose()

    def _at_head(self) -> None:
        if not migrate.is_at_head(self.db.engine):
            raise errors.ServiceUnavailable("schema is not at head")

    # -- namespaces ------------------------------------------------------------------------------

    def create_namespace(self, ns: Namespace, properties: dict[str, str]) -> None:
        check_namespace(ns)
        if "location" in properties:
            self.placement.check_namespace_location(ns, properties["location"])
        self.entries.create_namespace(ns, properties)

    def load_namespace(self, ns: Namespace) -> dict[str, str]:
        props = self.entries.get_namespace(ns)
        if props is None:
            raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
        return props

    def drop_namespace(self, ns: Namespace) -> None:
        self.entries.drop_namespace(ns)

    def update_namespace_properties(
        self, ns: Namespace, removals: Sequence[str], updates: dict[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        if "location" in updates:
            self.placement.check_namespace_location(ns, updates["location"])
        return self.entries.update_namespace_properties(ns, removals, updates)

    def list_namespaces(self, parent: Namespace, after: str | None, limit: int | None) -> list[Namespace]:
        if parent:
            self.load_namespace(parent)
        return self.entries.list_namespaces(parent, after, limit)

    # -- entries: reads --------------------------------------------------------------------------

    def list_entries(self, kind: Kind, ns: Namespace, after: str | None, limit: int | None) -> list[str]:
        self.load_namespace(ns)
        return self.entries.list_entries(ns, kind.name, after, limit)

    def entry(self, kind: Kind, ns: Namespace, name: str) -> Entry:
        return _found(self.pointers.get_entry(ns, name), kind, ns, name)

    def load(self, kind: Kind, ns: Namespace, name: str) -> MetadataFile:
        return self.files.read(self.entry(kind, ns, name).metadata_location)

    def load_inline(self, kind: Kind, ns: Namespace, name: str) -> MetadataFile | None:
        """``load`` when it needs no I/O that could block: the pointer read is local (SQLite in WAL
        mode never waits for a writer) and the file is cached. None: call ``load`` on a thread.
        A thread hop costs more than such a load, and under load its GIL hand-offs dominate the
        latency tail of the hottest route."""
        if not self.db.local:
            return None
        return self.files.cached(self.entry(kind, ns, name).metadata_location)

    async def load_awaited(self, kind: Kind, ns: Namespace, name: str) -> MetadataFile | None:
        """``load`` with the pointer read awaited on the event loop (PostgreSQL: no thread hop,
        ``database/async_reads.py``) when the file is cached. None: call ``load`` on a thread."""
        if not self.pointers.awaits_reads:
            return None
        entry = _found(await self.pointers.get_entry_awaited(ns, name), kind, ns, name)
        return self.files.cached(entry.metadata_location)

    # -- entries: create, register, drop, rename -------------------------------------------------

    def scan_plan(self, ns: Namespace, name: str, req: ScanRequest) -> tuple[str, Prepared, Answer]:
        """A scan of the table as the request asks (``catalog.planning``): its uuid, the prepared
        request (plan tasks name it) and the answer (tasks inline, or groups of manifests)."""
        file = self.load(TABLE, ns, name)
        prepared = self.planner.prepare(self.planner.metadata(file.location, file.raw), req)
        return str(prepared.metadata.table_uuid), prepared, self.planner.plan(prepared)

    def scan_tasks(
        self, ns: Namespace, name: str, uuid: str, manifest_list: str | None, req: ScanRequest, ordinals: list[int]
    ) -> dict[str, Any]:
        """The tasks of one plan task, planned on ``manifest_list`` of the table whose uuid is ``uuid``
        (404 when the table or its snapshot is not that one any more)."""
        file = self.load(TABLE, ns, name)
        metadata = self.planner.metadata(file.location, file.raw)
        if str(metadata.table_uuid) != uuid:
            raise errors.NoSuchPlanTask("Plan task does not exist: it is of another table")
        prepared = self.planner.prepare(metadata, req)
        if prepared.manifest_list != manifest_list:
            raise errors.NoSuchPlanTask("Plan task does not exist: its snapshot is no longer in the table")
        return self.planner.tasks(prepared, ordinals)

    def stage_table(self, ns: Namespace, name: str, location: str | None, request: dict[str, Any]) -> dict[str, Any]:
        """A staged create: the metadata the table would have. Nothing is persisted but, on local
        disk, the table's empty directories: clients write data and manifests before the create
        commits, and some (DuckDB) do not create parent directories."""
        created = self._new_table(ns, name, location, request)
        self.storage.prepare_table_location(created["location"])
        return created

    def create_table(
        self,
        ns: Namespace,
        name: str,
        location: str | None,
        request: dict[str, Any],
        key: KeyRecord | None = None,
        superseding: Collection[int] = (),
    ) -> Outcome:
        """createTable; ``key``: the request's Idempotency-Key, recorded with the new row. A
        requested location held by released dropped entries (dropped without purge, retention
        ended: their files are kept there) is taken over only when the caller may drop their names
        (``superseding``: the API checks and asks again, ``HeldByDropped``)."""
        superseded = frozenset()
        if location:
            superseded = self.placement.superseded(TABLE, [self.ownership.locations.check(location)], None, superseding)
        created = self._new_table(ns, name, location, request, superseded)
        return self.engine.commit([Change(TABLE, ns, name, created=created, superseding=superseded)], key)

    def _new_table(
        self,
        ns: Namespace,
        name: str,
        location: str | None,
        request: dict[str, Any],
        superseded: Collection[int] = (),
    ) -> dict[str, Any]:
        check_name(name)
        ns_props = self.load_namespace(ns)
        self._name_must_be_free(TABLE, ns, name)
        return tables.new_table(
            location=self.placement.location_for(ns, name, ns_props, location, superseded),
            schema=request["schema"],
            spec=request.get("partition-spec"),
            order=request.get("write-order"),
            properties=request.get("properties") or {},
            now_ms=int(time.time() * 1000),
        )

    def create_view(self, ns: Namespace, name: str, location: str | None, request: dict[str, Any]) -> MetadataFile:
        check_name(name)
        ns_props = self.load_namespace(ns)
        self._name_must_be_free(VIEW, ns, name)
        created = views.new_view(
            location=self.placement.location_for(ns, name, ns_props, location),
            schema=request["schema"],
            version=request["view-version"],
            properties=request.get("properties") or {},
            now_ms=int(time.time() * 1000),
        )
        return self._commit_one(Change(VIEW, ns, name, created=created))

    def _commit_one(self, change: Change) -> MetadataFile:
        outcome = self.engine.commit([change])
        assert isinstance(outcome, Committed)  # without an Idempotency-Key, never Replayed
        return outcome.files[0]

    def register(
        self,
        kind: Kind,
        ns: Namespace,
        name: str,
        location: str,
        overwrite: bool = False,
        superseding: Collection[int] = (),
    ) -> MetadataFile:
        """register/register-view: a new entry (or, with ``overwrite``, an existing table) pointing
        at an existing metadata file.

        The file must lie in the allowed roots and be no other entry's current metadata; the table
        or view it describes must lie in the allowed roots, own its location and write paths, and
        hold the file (under its location or its ``write.metadata.path``). Each is checked before
        the next is read, so a refused request reads nothing it may not.

        Drop then register (how a table moves between namespaces or catalogs): a table or view
        dropped without purge keeps its locations through its retention, and after it (released);
        registering that same one (the same uuid) again supersedes the dropped entry, which is
        forgotten in the register's transaction (its files are the new entry's). Only the dropped
        entries the caller may drop (``superseding``: the API checks and asks again,
        ``HeldByDropped``); another table claiming the location stays refused.
        """
        check_name(name)
        self.load_namespace(ns)
        existing = self.pointers.get_entry(ns, name)
        replaced = existing if existing is not None and overwrite and existing.kind == kind.name else None
        if replaced is None:
            self._name_must_be_free(kind, ns, name)
        return self.registration.register(kind, ns, name, location, replaced, superseding)

    def drop(
        self, kind: Kind, ns: Namespace, name: str, purge_requested: bool = False, by: str | None = None
    ) -> Dropped | None:
        """Drop the entry: its name is free at once; the entry itself is kept, restorable, for
        ``CATALOG_DROP_RETENTION`` (``database/dropped.py``), then released or, with
        ``purge_requested`` (tables), purged by a maintenance worker. No file I/O here: a purge due
        now is queued (``maintenance/jobs.py``), durable, and retried until the files are gone."""
        entry = self.entry(kind, ns, name)
        purge = purge_requested and kind is TABLE
        return self.drops.drop(entry, purge, int(self.settings.maintenance.drop_retention * 1000), by)

    def dropped(self, ns: Namespace | None, name: str | None, limit: int) -> list[Dropped]:
        return self.dropped_rows.list_dropped(ns, name, limit)

    def dropped_entries(self, ids: Collection[int]) -> list[Dropped]:
        """Dropped entries by id, released ones too (those a create or register may supersede)."""
        return [gone for i in ids if (gone := self.dropped_rows.get_dropped(i, released=True)) is not None]

    def dropped_entry(self, dropped_id: int) -> Dropped:
        return self.drops.dropped_entry(dropped_id)

    def undrop(self, dropped_id: int) -> Entry:
        """Restore a dropped table or view under its name (409 when the name or its location was
        taken since, or its purge has begun)."""
        return self.drops.undrop(dropped_id)

    def end_retention(self, dropped_id: int) -> Dropped:
        """End a dropped entry's retention now: a purge is queued (dropped with purge) or the entry
        is released, its files kept and its locations held (without)."""
        return self.drops.end_retention(dropped_id)

    def unregister(self, ns: Namespace, name: str) -> MetadataFile:
        """unregisterTable: remove the table's entry and keep every file, the opposite of register
        (its locations stay held, as a released drop's: a register of the same table takes them).
        Answers the metadata file the pointer was at when the entry went: the delete is conditional on
        that pointer, so a commit landing meanwhile is in the answer (or, once removed, fails)."""
        for _ in range(self.settings.commits.commit_max_attempts):
            entry = self.entry(TABLE, ns, name)
            file = self.files.read(entry.metadata_location)  # first: storage away means nothing removed
            if self.entries.release_entry(entry, entry.metadata_location):
                log.info("table %s unregistered, its files kept: %s", dotted(ns, name), entry.metadata_location)
                return file
        # Nothing was removed: as busy a table as this is a retry-later.
        raise errors.ServiceUnavailable(f"Table {dotted(ns, name)} kept changing while being unregistered; retry")

    def rename(self, kind: Kind, src: tuple[Namespace, str], dst: tuple[Namespace, str]) -> None:
        entry = self.entry(kind, *src)
        check_namespace(dst[0])
        check_name(dst[1])
        self.entries.rename_entry(entry, *dst)

    # -- commits ---------------------------------------------------------------------------------

    def commit(self, changes: Sequence[Change], key: KeyRecord | None = None) -> Outcome:
        """updateTable and replaceView (one change), transactions/commit (several, all or none):
        see ``catalog.commit.engine``. A staged create's commit (assert-create) creates the entry."""
        seen = set()
        for change in changes:
            if (change.namespace, change.name) in seen:
                raise errors.IllegalArgument(f"Duplicate table in transaction: {change.ident}")
            seen.add((change.namespace, change.name))
            if change.creates:
                if len(changes) > 1:
                    raise errors.IllegalArgument("Cannot create a table in a multi-table transaction")
                check_name(change.name)
                self.load_namespace(change.namespace)
        return self.engine.commit(changes, key)

    async def commit_inline(
        self, changes: Sequence[Change], key: KeyRecord | None = None, others_waiting: bool = True
    ) -> Outcome | None:
        """``commit`` on the event loop when the database (SQLite) and the storage are local, the
        ``inline_commits`` setting is on and the commit needs no wait (``catalog.commit.inline``);
        None: call ``commit`` on a thread. ``others_waiting``: other requests are pending, so the
        new file's sync may leave the loop. A single change only, so the transaction checks of
        ``commit`` do not apply."""
        if self.inline is None:
            return None
        return await self.inline.commit(changes, key, others_waiting)

    # -- idempotency keys (see api.idempotency) --------------------------------------------------

    # -- change events (the outbox: database/outbox.py) ----------------------------------------------

    def event_start(self) -> int:
        """Order what committed since the last look, and the position the feed starts after."""
        self.outbox.sequence()
        return self.outbox.event_bounds()[0]

    def event_bounds(self) -> tuple[int, int]:
        """(the position the feed starts after, the newest position): where a reader of the newest
        events (the console) starts."""
        self.outbox.sequence()
        return self.outbox.event_bounds()

    def events_after(self, position: int, limit: int, types: Sequence[str] = ()) -> list[StoredEvent]:
        return self.outbox.read_events(position, limit, types)

    def recorded(self, key: str) -> KeyRecord | None:
        return self.pointers.get_key(key)

    def record(self, record: KeyRecord) -> KeyRecord | None:
        """Record a final response; the record a concurrent twin wrote first, if it did."""
        return None if self.pointers.put_key(record) else self.pointers.get_key(record.key)

    def expire_keys(self, older_than_ms: int) -> int:
        return self.pointers.expire_keys(older_than_ms)

    def read_file(self, location: str) -> MetadataFile:
        """A metadata file by location (a recorded commit response)."""
        return self.files.read(location)

    # -- helpers ---------------------------------------------------------------------------------

    def _name_must_be_free(self, creating: Kind, ns: Namespace, name: str) -> None:
        existing = self.pointers.get_entry(ns, name)
        if existing is not None:
            raise name_taken(creating.name, existing.kind, dotted(ns, name))

    def staged_location(self, ns: Namespace, name: str) -> str | None:
        """Where a staged create of ``ns.name`` at the server's choice of location writes before it
        commits: ``<namespace location>/<name>``; None if an entry has that name or overlaps that
        location (the remote signer's only way into a table that does not exist yet)."""
        check_name(name)
        ns_props = self.load_namespace(ns)
        return self.placement.staged_location(ns, name, ns_props)

    # -- table maintenance ------------------------------------------------------------------------------

    def maintain(
        self, ns: Namespace, name: str, kinds: Sequence[str], dry_run: bool, writer_grace: float | None = None
    ) -> list[tuple[Task, bool]]:
        """Queue ``kinds`` of maintenance for the table now (a task of a kind already queued or running is
        returned as it is, with False); workers run them. ``writer_grace``: this run's writer grace
        and compaction quiet period, in seconds (None: the server's and the table's)."""
        if not kinds or any(k not in MAINTENANCE_KINDS for k in kinds):  # not repeated back: the API checked them
            raise errors.BadRequest(f"Unknown maintenance kind: choose from {', '.join(MAINTENANCE_KINDS)}")
        kinds = list(dict.fromkeys(kinds))
        entry = self.entry(TABLE, ns, name)
        uuid = self.files.read(entry.metadata_location).data.get("table-uuid")
        options: dict[str, Any] = {"dry-run": dry_run, "forced": True}
        if writer_grace is not None:
            options[WRITER_GRACE] = writer_grace
        return [self.tasks.enqueue(kind, entry.id, uuid, entry.namespace, entry.name, options) for kind in kinds]

    def maintenance_tasks(
        self, ns: Namespace | None, name: str | None, states: Sequence[str], limit: int
    ) -> list[Task]:
        """The newest tasks first: every table's, or the table ``ns.name``'s. A table that is gone
        (dropped, or purged and forgotten) has the tasks of the entries that had the name and are
        live no more (its maintenance before the drop, and its purge); none: ``NoSuchTable``."""
        if ns is None or name is None:
            return self.tasks.list_tasks(None, states, limit)
        entry = self.pointers.get_entry(ns, name)
        if entry is not None and entry.kind == TABLE.name:
            return self.tasks.list_tasks([entry.id], states, limit)
        former = self.tasks.former_task_entries(ns, name)
        if not former:
            _found(None, TABLE, ns, name)
        return self.tasks.list_tasks(former, states, limit)

    def maintenance_task(self, task_id: int) -> Task:
        task = self.tasks.get_task(task_id)
        if task is None:
            raise missing_task(task_id)
        return task

    def backfill_locations(self, batch: int = 500) -> int:
        """Fill in the locations and write paths of live and dropped entries created before
        migrations 0003 and 0011 (read from their metadata files), so the ownership rule covers them
        too. Returns how many were filled."""
        return self.placement.backfill_locations(batch)


def missing_task(task_id: int) -> errors.NotFound:
    """The answer for a task id that names no task, and for one the caller may not see."""
    return errors.NotFound(f"Maintenance task does not exist: {task_id}")


def _found(entry: Entry | None, kind: Kind, ns: Namespace, name: str) -> Entry:
    if entry is None or entry.kind != kind.name:
        raise kind.missing(f"{kind.noun} does not exist: {dotted(ns, name)}")
    return entry
