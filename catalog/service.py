"""The use cases. The only module that combines the store (SQL), the files (storage) and the pure
commit step, and the home of the commit loop.

The commit loop (``commit_table``), per attempt:
  1. read the pointer row; 2. read that metadata file (cached by location: files are immutable);
  3. check the requirements against it (a failure is a 409 and is NOT retried: the client's premise
  is stale) and apply the updates (pyiceberg); 4. write the new file create-only;
  5. compare-and-swap the pointer. Losing the CAS means another commit landed in between; the
  requirements may still hold on the new base, so go again from 1 (server-side rebase) after a
  jittered backoff, and delete the orphan file. An unknown CAS outcome is a 500 and the file is
  kept, since it may be the committed one.

Within one server process, steps 1-5 for a table run under a lock (one of a fixed set, picked by
the table's name): a commit that queued behind another reads the pointer that one left and, if its
requirement no longer holds, is refused without writing a file. Between processes and replicas
the CAS alone decides, as it does for correctness everywhere.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate

from . import commit, errors, invariants, metrics, migrate, names, purge
from .files import MetadataFile, MetadataFiles
from .locations import is_within, normalise
from .settings import Settings
from .storage import Storage
from .store import Entry, KeyRecord, LocationTaken, PointerOutcomeUnknown, Store

log = logging.getLogger("catalog.commit")
Namespace = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TableChange:
    namespace: Namespace
    name: str
    requirements: Sequence[TableRequirement]
    updates: Sequence[TableUpdate]


class Catalog:
    def __init__(self, settings: Settings, store: Store, storage: Storage, files: MetadataFiles) -> None:
        self.settings = settings
        self.store = store
        self.storage = storage
        self.files = files
        self.locations = storage.locations
        self._table_locks = [threading.Lock() for _ in range(_TABLE_LOCKS)]
        # Readiness checks run on their own threads, one at a time per check, so that a stalled
        # dependency neither takes request threads nor piles up checks.
        self._probe_threads = ThreadPoolExecutor(max_workers=3, thread_name_prefix="readiness")
        self._probes: dict[str, Future] = {}

    def probe(self) -> dict[str, Future]:
        """Each dependency's check, as a future that resolves when it passed and raises why not.
        A check still running from an earlier probe is joined, not started again."""
        checks = {"database": self.store.ping, "migrations": self._at_head, "storage": self.storage.ping}
        for name, check in checks.items():
            running = self._probes.get(name)
            if running is None or running.done():
                self._probes[name] = self._probe_threads.submit(check)
        return dict(self._probes)

    def _at_head(self) -> None:
        if not migrate.is_at_head(self.store.engine):
            raise errors.ServiceUnavailable("schema is not at head")

    # -- namespaces ------------------------------------------------------------------------------

    def create_namespace(self, ns: Namespace, properties: dict[str, str]) -> None:
        check_namespace(ns)
        if "location" in properties:
            self.locations.check(properties["location"], "namespace location")
        self.store.create_namespace(ns, properties)

    def load_namespace(self, ns: Namespace) -> dict[str, str]:
        props = self.store.get_namespace(ns)
        if props is None:
            raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
        return props

    def drop_namespace(self, ns: Namespace) -> None:
        self.store.drop_namespace(ns)

    def update_namespace_properties(
        self, ns: Namespace, removals: Sequence[str], updates: dict[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        if "location" in updates:
            self.locations.check(updates["location"], "namespace location")
        return self.store.update_namespace_properties(ns, removals, updates)

    def list_namespaces(self, parent: Namespace, after: str | None, limit: int | None) -> list[Namespace]:
        if parent:
            self.load_namespace(parent)
        return self.store.list_namespaces(parent, after, limit)

    # -- tables: reads ---------------------------------------------------------------------------

    def list_tables(self, ns: Namespace, after: str | None, limit: int | None) -> list[str]:
        self.load_namespace(ns)
        return self.store.list_entries(ns, "table", after, limit)

    def table_entry(self, ns: Namespace, name: str) -> Entry:
        entry = self.store.get_entry(ns, name)
        if entry is None or entry.kind != "table":
            raise errors.NoSuchTable(f"Table does not exist: {ident(ns, name)}")
        return entry

    def load_table(self, ns: Namespace, name: str) -> MetadataFile:
        return self.files.read(self.table_entry(ns, name).metadata_location)

    def find_table(self, ns: Namespace, name: str) -> MetadataFile | str:
        """loadTable without storage I/O: the file if it is cached, else its location to read."""
        location = self.table_entry(ns, name).metadata_location
        return self.files.cached(location) or location

    # -- tables: create, register, drop, rename --------------------------------------------------

    def create_table(
        self,
        ns: Namespace,
        name: str,
        schema: Schema,
        location: str | None,
        spec: PartitionSpec | None,
        order: SortOrder | None,
        properties: dict[str, str],
        stage: bool,
    ) -> tuple[str | None, TableMetadata]:
        """Create (or, with ``stage``, only build) a table; returns (metadata location, metadata)."""
        check_name(name)
        ns_props = self.load_namespace(ns)
        self.name_must_be_free(ns, name)
        location = self.location_for(ns, name, ns_props, location)
        metadata = commit.new_metadata(location, schema, spec, order, properties)
        self._check_paths(metadata.properties)
        if stage:
            return None, metadata
        written = self.files.write(commit.next_location(metadata, None), metadata)
        self._insert(ns, name, written, "table", metadata.location)
        return written.location, metadata

    def register_table(self, ns: Namespace, name: str, location: str, overwrite: bool) -> MetadataFile:
        check_name(name)
        self.load_namespace(ns)
        existing = self.store.get_entry(ns, name)
        replaced = existing if existing is not None and overwrite and existing.kind == "table" else None
        if replaced is None:
            self.name_must_be_free(ns, name)
        file, own = self.registrable(location, "table", replaced)
        if replaced is not None:
            self.store.overwrite_entry(ns, name, location, own)
        else:
            self.store.insert_entry(ns, name, "table", location, own)
        return file

    def registrable(self, location: str, kind: str, replaced: Entry | None) -> tuple[MetadataFile, str]:
        """register/register-view: the file, and the location it gives the new entry.

        The file must lie in the allowed roots and be no other entry's current metadata; the table
        or view it describes must lie in the allowed roots, own its location (see ``claim``), and
        hold the file (under its location or its ``write.metadata.path``). Each is checked before
        the next is read, so a refused request reads nothing it may not.
        """
        self.locations.check(location, "metadata location")
        holder = self.store.referencing(location)
        if holder is not None and (replaced is None or holder.id != replaced.id):
            other = ident(holder.namespace, holder.name)
            raise errors.AlreadyExists(f"Metadata file {location} is the current metadata of {holder.kind} {other}")
        file = self.files.read(location)
        metadata = file.metadata if kind == "table" else file.view
        if kind == "table":
            invariants.check_ranges([metadata])  # ids beyond Java's long would come back as floats
        own = self.claim(metadata.location, replaced.id if replaced is not None else None)
        homes = [own]
        if kind == "table":
            self._check_paths(metadata.properties)
            homes += [normalise(p) for k, p in metadata.properties.items() if k == "write.metadata.path"]
        if not any(is_within(normalise(location), home) for home in homes):
            raise errors.BadRequest(
                f"Metadata file {location} is not in the location of the {kind} it describes ({metadata.location})"
            )
        return file, own

    def drop_table(self, ns: Namespace, name: str, purge_requested: bool) -> None:
        """Drop the entry; with ``purge_requested``, then delete the table's files.

        The purge runs after the drop committed and deletes only what lies in the table's own
        locations (``_owned``). It never turns the completed drop into an error: what it could not
        delete is logged, for an operator or a later purge of the prefix.
        """
        entry = self.table_entry(ns, name)
        if not self.store.delete_entry(entry):
            raise errors.NoSuchTable(f"Table does not exist: {ident(ns, name)}")
        if not purge_requested:
            return
        try:
            doomed = self.files.read(entry.metadata_location)
            purge.delete_table_files(doomed, self._owned(doomed.metadata), self.files, self.settings)
        except Exception as e:  # noqa: BLE001 - the drop stands; the leftovers are reported
            log.warning(
                "purge of dropped table %s incomplete, files left under its location: %s",
                ident(ns, name),
                getattr(e, "message", str(e)) or type(e).__name__,
            )

    def rename_table(self, src: tuple[Namespace, str], dst: tuple[Namespace, str]) -> None:
        entry = self.table_entry(*src)
        check_namespace(dst[0])
        check_name(dst[1])
        self.store.rename_entry(entry, *dst)

    # -- commits ---------------------------------------------------------------------------------

    def commit_table(self, change: TableChange, key: KeyRecord | None = None) -> MetadataFile:
        """updateTable: the commit loop described in the module docstring. ``key``: the request's
        idempotency key, recorded in the CAS transaction with the new file as the response."""
        if commit.is_create(change.requirements):
            return self._commit_create(change)
        with _observed(change):
            for attempt in range(self.settings.commit_max_attempts):
                with self._serialised([change]):
                    staged = self._stage(change)
                    if staged is None:  # nothing to change
                        return self.load_table(change.namespace, change.name)
                    if self.swap([staged], key):
                        self.record_moves([staged])
                        return staged[1]
                self.lost(ident(change.namespace, change.name), attempt, [staged], lambda: self._recheck([change]))
            raise self._gave_up([change])

    def commit_transaction(self, changes: Sequence[TableChange], key: KeyRecord | None = None) -> None:
        """All tables or none: every pointer moves in ONE database transaction, or none does."""
        seen = set()
        for change in changes:
            table = (change.namespace, change.name)
            if table in seen:
                raise errors.IllegalArgument(f"Duplicate table in transaction: {ident(*table)}")
            seen.add(table)
            if commit.is_create(change.requirements):
                raise errors.IllegalArgument("Cannot create a table in a multi-table transaction")
        with _observed(changes[0]):
            self._commit_all(changes, key)

    def _commit_all(self, changes: Sequence[TableChange], key: KeyRecord | None) -> None:
        for attempt in range(self.settings.commit_max_attempts):
            staged: list[tuple[Entry, MetadataFile]] = []
            with self._serialised(changes):
                try:
                    for change in changes:
                        one = self._stage(change)
                        if one is not None:
                            staged.append(one)
                except BaseException:
                    self._discard(staged)
                    raise
                if not staged or self.swap(staged, key):
                    self.record_moves(staged)
                    return
            self.lost(ident(changes[0].namespace, changes[0].name), attempt, staged, lambda: self._recheck(changes))
        raise self._gave_up(changes)

    @contextmanager
    def _serialised(self, changes: Sequence[TableChange]) -> Iterator[None]:
        """Hold the locks of these tables, taken in one order so that transactions cannot deadlock."""
        slots = sorted({hash((c.namespace, c.name)) % _TABLE_LOCKS for c in changes})
        with ExitStack() as stack:
            for slot in slots:
                stack.enter_context(self._table_locks[slot])
            yield

    def _stage(self, change: TableChange) -> tuple[Entry, MetadataFile] | None:
        """Steps 1-4 for one table: the written-but-uncommitted new file, or None for a no-op."""
        entry = self.table_entry(change.namespace, change.name)
        base_file = self.files.read(entry.metadata_location)
        base = base_file.metadata
        commit.check_requirements(change.requirements, base)
        new = commit.apply_updates(base, change.updates, entry.metadata_location)
        if new is base:
            return None
        self._check_moved(entry, base.location, base.properties, new.location, new.properties)
        try:
            written = self.files.write(commit.next_location(new, entry.metadata_location), new, base_file)
        except errors.IcebergError as e:
            raise not_committed(e) from e
        return entry, written

    def swap(self, staged: Sequence[tuple[Entry, MetadataFile]], key: KeyRecord | None = None) -> bool:
        """Step 5, the CAS. True: committed (files cached, dropped log files deleted); False: lost.

        With ``key``, the idempotency key lands in the same transaction; a 200 response is recorded
        as the new metadata file. If another request recorded the key first, nothing lands.

        Status codes tell the truth: every failure known not to have committed (the store raises
        anything but ``PointerOutcomeUnknown`` only then) deletes the new files and is raised as it
        is (503 for the database). A failed COMMIT is settled by a fresh read of the pointers: landed
        is a success; unmoved is a known failure where the read is authoritative (SQLite); anything
        else is a 500 ``CommitStateUnknown`` and the files are kept, since one may be the committed one.
        """
        swaps = [(entry.id, entry.metadata_location, file.location) for entry, file in staged]
        if key is not None and key.status == 200:
            key.metadata_location = staged[0][1].location
        metrics.COMMIT_ATTEMPTS.inc()
        try:
            won = self.store.swap_pointers(swaps, key)
        except PointerOutcomeUnknown as e:
            landed = self._landed(swaps)
            if landed is False and e.settled:
                self._discard(staged)
                raise errors.ServiceUnavailable(f"Database unavailable, nothing was committed: {e}") from e
            if not landed:
                metrics.UNKNOWN.inc()
                log.error("commit outcome unknown for %s: %s", [f.location for _, f in staged], e)
                raise errors.CommitStateUnknown(f"Commit state unknown, the database connection failed: {e}") from e
            won = True
            if key is not None:
                key.recorded = True  # it is in the transaction that landed
        except Exception:
            self._discard(staged)  # known not committed: nothing points at these files
            raise
        if won:
            metrics.COMMITS.labels("transaction" if len(staged) > 1 else "table").inc()
            for entry, file in staged:
                self.files.remember(file)
                if entry.kind == "table":
                    self._delete_dropped_files(entry, file)
        return won

    def _landed(self, swaps: Sequence[tuple[int, str, str]]) -> bool | None:
        """After a failed COMMIT, a fresh read: True if it landed, False if every pointer is where it
        was, None if that cannot be told (the read failed, or the pointers moved on since).

        One new pointer in place proves the whole transaction landed: its file name is fresh (a
        uuid), so no other commit can have set it, and the transaction is atomic.
        """
        try:
            now = [self.store.read_pointer(entry_id) for entry_id, _, _ in swaps]
        except Exception:  # noqa: BLE001 - still unreachable: the outcome stays unknown
            return None
        if any(pointer == new for pointer, (_, _, new) in zip(now, swaps, strict=True)):
            return True
        if all(pointer == expected for pointer, (_, expected, _) in zip(now, swaps, strict=True)):
            return False
        return None

    def _commit_create(self, change: TableChange) -> MetadataFile:
        """Commit of a staged create (assert-create): build from empty, write 00000, insert the row."""
        check_name(change.name)
        self.load_namespace(change.namespace)
        self.name_must_be_free(change.namespace, change.name)
        commit.check_requirements(change.requirements, None)
        metadata = commit.apply_updates(commit.empty_metadata(), change.updates, None)
        self.claim(metadata.location)
        self._check_paths(metadata.properties)
        written = self.files.write(commit.next_location(metadata, None), metadata)
        self._insert(change.namespace, change.name, written, "table", metadata.location)
        return written

    def _insert(self, ns: Namespace, name: str, written: MetadataFile, kind: str, location: str) -> None:
        try:
            self.store.insert_entry(ns, name, kind, written.location, normalise(location))
        except errors.IcebergError:
            self.files.delete(written.location)  # known not committed: the row was never inserted
            raise
        self.files.remember(written)

    def lost(
        self,
        name: str,
        attempt: int,
        staged: Sequence[tuple[Entry, MetadataFile]],
        recheck: Callable[[], None] = lambda: None,
    ) -> None:
        """The CAS lost: delete the orphan files, then back off before rebasing on the new pointer.

        ``recheck`` raises when the requirements no longer hold on the new pointer: that 409 is
        answered at once, without the backoff and without writing another file.
        """
        self._discard(staged)
        metrics.REBASES.inc()
        log.info("commit to %s lost the CAS (attempt %d), rebasing", name, attempt + 1)
        recheck()
        delay = self.settings.commit_backoff_ms / 1000 * (2 ** min(attempt, 6))
        time.sleep(random.uniform(0, delay))

    def _recheck(self, changes: Sequence[TableChange]) -> None:
        for change in changes:
            entry = self.table_entry(change.namespace, change.name)
            commit.check_requirements(change.requirements, self.files.read(entry.metadata_location).metadata)

    def _discard(self, staged: Sequence[tuple[Entry, MetadataFile]]) -> None:
        for _, file in staged:
            try:
                self.files.delete(file.location)
            except Exception:  # noqa: BLE001 - an orphan file is harmless; never mask the real outcome
                log.warning("could not delete uncommitted metadata file %s", file.location)

    def _gave_up(self, changes: Sequence[TableChange]) -> errors.CommitFailed:
        return self.gave_up(", ".join(ident(c.namespace, c.name) for c in changes))

    def gave_up(self, names: str) -> errors.CommitFailed:
        metrics.CONFLICTS.labels("cas").inc()
        log.warning("commit conflict: table=%s cause=cas attempts=%d", names, self.settings.commit_max_attempts)
        return errors.CommitFailed(
            f"Commit failed: {names} changed concurrently {self.settings.commit_max_attempts} times in a row; "
            "refresh and retry"
        )

    def _delete_dropped_files(self, entry: Entry, file: MetadataFile) -> None:
        try:
            base = self.files.read(entry.metadata_location).metadata
            dropped = commit.dropped_metadata_files(base, entry.metadata_location, file.metadata)
            owned = self._owned(file.metadata, entry.id) if dropped else None
            for location in dropped:
                if owned is not None and owned(location):
                    self.files.delete(location)
        except Exception:  # noqa: BLE001 - housekeeping after a successful commit must not fail it
            log.warning("could not delete old metadata files of %s", file.location)

    # -- helpers ---------------------------------------------------------------------------------

    def name_must_be_free(self, ns: Namespace, name: str, creating: str = "table") -> None:
        existing = self.store.get_entry(ns, name)
        if existing is not None:
            if existing.kind == creating:
                kind = existing.kind.capitalize()
            else:
                kind = "View with same name" if existing.kind == "view" else "Table with same name"
            raise errors.AlreadyExists(f"{kind} already exists: {ident(ns, name)}")

    def location_for(self, ns: Namespace, name: str, ns_props: dict[str, str], requested: str | None) -> str:
        """A new table's or view's location: as requested, under the namespace's, or in the warehouse.

        A requested location must be free (``claim``). A location the server chooses is made free:
        when ``<base>/<name>`` is taken (say, by a table renamed away from this name, which keeps its
        files), a unique suffix is added, so the new entry never shares a directory with another.
        """
        if requested:
            self.claim(requested)
            return requested.rstrip("/")
        base = (ns_props.get("location") or "/".join([self.storage.root().rstrip("/"), *ns])).rstrip("/")
        chosen = f"{base}/{name}"
        if self.store.overlapping(self.locations.check(chosen)):
            # cut to leave room for the suffix: a path segment is at most MAX_NAME_BYTES on disk too
            stem = name.encode()[: names.MAX_NAME_BYTES - 9].decode(errors="ignore")
            chosen = f"{base}/{stem}-{uuid.uuid4().hex[:8]}"
        self.claim(chosen)
        return chosen

    # -- locations: the policy (``locations``) and ownership ---------------------------------------

    def claim(self, location: str, exclude_id: int | None = None) -> str:
        """The normalised ``location`` if an entry may live there: inside the allowed roots (403
        outside) and overlapping no other entry's location (409): a table or view owns its
        location, so one entry's commits, purge or registration can never reach another's files."""
        normal = self.locations.check(location)
        for other in self.store.overlapping(normal, exclude_id):
            raise LocationTaken(location, other)
        return normal

    def _check_paths(self, properties: dict[str, str], exclude_id: int | None = None) -> None:
        """``write.*.path`` properties must lie in the allowed roots; the metadata path, where the
        server itself writes, must not lie inside another entry's location either."""
        for key in _PATH_PROPERTIES:
            if (value := properties.get(key)) is None:
                continue
            normal = self.locations.check(value, f"{key} property")
            if key == "write.metadata.path":
                for other in self.store.overlapping(normal, exclude_id):
                    if is_within(normal, other.location):
                        raise errors.AlreadyExists(
                            f"{key} {value} lies in the location of {other.kind} {ident(other.namespace, other.name)}"
                        )

    def _check_moved(
        self, entry: Entry, old: str, old_props: dict[str, str], new: str, new_props: dict[str, str]
    ) -> None:
        """On a commit that moves the entry or its paths (rare): the same rules as on create."""
        if new != old:
            self.claim(new, entry.id)
        if any(old_props.get(k) != new_props.get(k) for k in _PATH_PROPERTIES):
            self._check_paths(new_props, entry.id)

    def _owned(self, metadata: TableMetadata, exclude_id: int | None = None) -> Callable[[str], bool]:
        """Whether a path is the table's own: inside its location or its ``write.*.path`` prefixes
        (those the policy allows), and not inside any other entry's location."""
        prefixes = [normalise(metadata.location)]
        for key in _PATH_PROPERTIES:
            if (value := metadata.properties.get(key)) is not None:
                try:
                    prefixes.append(self.locations.check(value))
                except errors.IcebergError:
                    continue
        others = [o.location for p in prefixes for o in self.store.overlapping(p, exclude_id)]

        def owned(path: str) -> bool:
            try:
                normal = normalise(path)
            except errors.IcebergError:
                return False
            return (
                self.locations.allows(normal)
                and any(is_within(normal, p) for p in prefixes)
                and not any(is_within(normal, o) for o in others)
            )

        return owned

    def record_moves(self, committed: Sequence[tuple[Entry, MetadataFile]]) -> None:
        """After a commit: the new location of each entry it moved (set-location; rare)."""
        for entry, file in committed:
            base = self.files.read(entry.metadata_location)
            old, new = (
                (base.metadata.location, file.metadata.location)
                if entry.kind == "table"
                else (
                    base.view.location,
                    file.view.location,
                )
            )
            if normalise(new) != normalise(old):
                self.store.set_location(entry.id, file.location, normalise(new))

    def backfill_locations(self, batch: int = 500) -> int:
        """Fill in the locations of entries created before migration 0003 (read from their metadata
        files), so the ownership rule covers them too. Returns how many were filled."""
        filled = 0
        while entries := self.store.entries_without_location(batch):
            for entry in entries:
                try:
                    file = self.files.read(entry.metadata_location)
                    metadata = file.metadata if entry.kind == "table" else file.view
                    self.store.set_location(entry.id, entry.metadata_location, normalise(metadata.location))
                    filled += 1
                except Exception as e:  # noqa: BLE001 - an unreadable entry keeps NULL; reported once
                    log.warning("cannot record the location of %s: %s", ident(entry.namespace, entry.name), e)
            if len(entries) < batch or not filled:
                break
        return filled


# Commits to different tables share a lock only when their names hash to the same slot.
_TABLE_LOCKS = 1024
# Properties that put a table's files somewhere other than under its location.
_PATH_PROPERTIES = ("write.metadata.path", "write.data.path", "write.object-storage.path", "write.folder-storage.path")


def not_committed(e: errors.IcebergError) -> errors.IcebergError:
    """An error before the CAS: the commit certainly did not happen, so never a 500 (which clients
    read as "state unknown"): what the operator must fix is a 503 too, with its message."""
    if e.code >= 500 and not isinstance(e, errors.ServiceUnavailable):
        return errors.ServiceUnavailable(e.message)
    return e


@contextmanager
def _observed(change: TableChange) -> Iterator[None]:
    """Commit latency, and one warning line per failed requirement (operators alert on the rate)."""
    start = time.perf_counter()
    try:
        yield
    except errors.CommitFailed as e:
        if e.message.startswith("Requirement failed"):
            metrics.CONFLICTS.labels("requirement").inc()
            log.warning(
                "commit conflict: table=%s cause=requirement %s", ident(change.namespace, change.name), e.message
            )
        raise
    finally:
        metrics.COMMIT_SECONDS.observe(time.perf_counter() - start)


def ident(ns: Namespace, name: str) -> str:
    return ".".join((*ns, name))


def check_name(name: str) -> None:
    """A new name (or namespace level) becomes a path segment of a table location, inside a URI:
    nothing that could escape the warehouse or that a URI cannot carry, and within the limits of
    ``catalog.names``. 400 before any SQL."""
    if not isinstance(name, str) or not name.strip():
        raise errors.BadRequest("Invalid name: must be a non-empty string")
    names.check_name_fits(name)
    if any(c < " " or c == "\x7f" for c in name):  # includes 0x1F, the level separator
        raise errors.BadRequest(f"Invalid name: {names.shown(name)} contains a control character (tab, CR, LF, ...)")
    if "/" in name or "\\" in name or name in (".", ".."):
        raise errors.BadRequest(
            f"Invalid name: {names.shown(name)} contains a path separator or is a relative path segment"
        )
    if "#" in name or "?" in name:  # a URI parser would cut the location there
        raise errors.BadRequest(f"Invalid name: {names.shown(name)} contains '#' or '?'")


def check_namespace(ns: Namespace) -> None:
    names.check_namespace_fits(ns)  # first: the depth bounds the loop
    for level in ns:
        check_name(level)
