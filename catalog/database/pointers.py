"""The pointers: the compiled read every load and commit starts with, the compare-and-swap that
is the commit, and the Idempotency-Key rows written in it. This is the measured hot path: both
statements are compiled once and run on a pooled DBAPI connection (``sql.Database.fetch_one``).
"""

from __future__ import annotations

import enum
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from catalog import tracing
from catalog.database import async_reads
from catalog.database.db import catalog_entries as entries
from catalog.database.db import entry_paths, join_namespace, split_namespace
from catalog.database.db import idempotency_keys as keys
from catalog.database.outbox import EventRows
from catalog.database.sql import Compiled, Database, not_committed, quiet_rollback, short, translate
from catalog.events.records import Event
from catalog.names import dotted


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    namespace: tuple[str, ...]
    name: str
    kind: str
    metadata_location: str
    location: str | None = None  # normalised; read by the pointer read only (None: not read, or not yet filled)

    @property
    def ident(self) -> str:
        return dotted(self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """What an ``Idempotency-Key`` stands for: the final response to its first request. A commit's
    200 is its new ``metadata_location`` (the response is rebuilt from that file); any other
    response is its ``body``."""

    key: str
    fingerprint: str
    status: int
    body: bytes | None = None
    metadata_location: str | None = None


@dataclass(frozen=True, slots=True)
class Swap:
    """One pointer move of a CAS transaction: ``expected`` -> ``new``; ``location`` is the entry's
    normalised location after it (a commit may move the table)."""

    entry_id: int
    expected: str
    new: str
    location: str
    moved: bool = True  # False: the entry's row already holds ``location`` (the pointer read saw it)
    # The entry's normalised write.*.path prefixes after it, when the commit changed them (None: as
    # they were; the usual commit): recorded in the same transaction (``entry_paths``).
    write_paths: Mapping[str, str] | None = None


class Swapped(enum.Enum):
    WON = "won"
    LOST = "lost"  # a pointer was no longer the expected one: nothing changed
    KEY_TAKEN = "key-taken"  # another request recorded the Idempotency-Key first: nothing changed
    BUSY = "busy"  # a bounded wait ran out: another writer held the database: nothing changed


class InlineBusy(Exception):
    """A read for a commit on the event loop waited its bound for the database (SQLite): the commit
    goes to a thread, which waits as every other reader does."""


class PointerOutcomeUnknown(Exception):
    """The COMMIT of the pointer UPDATE failed: it may or may not have landed.

    ``settled``: a fresh read of the pointers now tells the outcome for certain. True on SQLite (a
    local file, committed synchronously: once COMMIT has returned an error, nothing more will land);
    False on a server database, where a lost connection can leave the COMMIT still running there.
    """

    def __init__(self, message: str, settled: bool) -> None:
        super().__init__(message)
        self.settled = settled


def _entry(row: tuple | None) -> Entry | None:
    return None if row is None else Entry(row[0], split_namespace(row[1]), row[2], row[3], row[4], row[5])


class Pointers:
    """The pointer read and the CAS on the catalog's ``Database``. The CAS writes its events through
    ``outbox`` on its own DBAPI cursor, in its own transaction (``swap_pointers``)."""

    def __init__(self, db: Database, outbox: EventRows) -> None:
        self.db = db
        self.outbox = outbox
        engine = db.engine
        self._async_reads = async_reads.for_engine(engine, min(async_reads.CONNECTIONS, engine.pool.size()))
        self._get_entry = Compiled(
            sa.select(
                entries.c.id,
                entries.c.namespace,
                entries.c.name,
                entries.c.kind,
                entries.c.metadata_location,
                entries.c.location,
            ).where(entries.c.namespace == sa.bindparam("namespace"), entries.c.name == sa.bindparam("name")),
            engine.dialect,
        )
        moves = {
            "metadata_location": sa.bindparam("new"),
            "previous_metadata_location": sa.bindparam("expected"),
            "commits": sa.literal_column("commits + 1"),  # no bound parameter: see Compiled
        }
        where = (entries.c.id == sa.bindparam("id"), entries.c.metadata_location == sa.bindparam("expected"))
        self._swap = Compiled(
            entries.update().where(*where).values(**moves, location=sa.bindparam("location")), engine.dialect
        )
        # The usual commit leaves the location as it was: not naming it in SET spares the location
        # index's page (SQLite rewrites an index whose column is SET, even to its own value: one WAL
        # page per commit of five). The WHERE makes sure the row does hold it.
        self._swap_in_place = Compiled(
            entries.update().where(*where, entries.c.location == sa.bindparam("location")).values(**moves),
            engine.dialect,
        )
        self._put_key = Compiled(keys.insert(), engine.dialect)
        self._forget_paths = Compiled(
            entry_paths.delete().where(entry_paths.c.entry_id == sa.bindparam("id")), engine.dialect
        )
        self._add_path = Compiled(entry_paths.insert(), engine.dialect)
        self._paths_recorded = Compiled(
            entries.update().where(entries.c.id == sa.bindparam("id")).values(paths_recorded=sa.true()), engine.dialect
        )
        # SQLite: the connection the event loop's commits swap on (``wait`` given), kept checked out
        # with its busy timeout at that wait; None until the first, and after a failure dropped it.
        self._inline: Any = None
        self._inline_wait_ms = -1

    def get_entry(self, ns: tuple[str, ...], name: str, wait: float | None = None) -> Entry | None:
        """The pointer read of every load and commit: see ``Database.fetch_one``. ``wait`` (SQLite, a commit
        on the event loop): read on the connection that commit will swap on, whose page cache its
        own last commit left valid, or ``InlineBusy`` when the database kept it waiting that long."""
        values = {"namespace": join_namespace(ns), "name": name}
        if wait is None or not self.db.local or not self.db.writers.acquire(blocking=False):  # type: ignore[attr-defined]
            return _entry(self.db.fetch_one(self._get_entry, values))
        try:  # held: no swap is using the connection, and it is not being let go of
            conn = self._inline_connection(wait)
            try:
                cursor = conn.cursor()
                try:
                    with tracing.span("db.read"):
                        cursor.execute(self._get_entry.sql, self._get_entry.parameters(values))
                        return _entry(cursor.fetchone())
                finally:
                    cursor.close()
            except self.db.dbapi_error as e:
                if _busy(e):
                    raise InlineBusy() from e
                self._invalidate(conn, e)
                translated = translate(e)
                if translated is None:
                    raise
                raise translated from e
        finally:
            self.db.writers.release()  # type: ignore[attr-defined]

    @property
    def events_on(self) -> bool:
        """Whether the CAS (and a create's insert) writes events (the outbox's switch)."""
        return self.outbox.events_on

    @property
    def awaits_reads(self) -> bool:
        return self._async_reads is not None

    async def get_entry_awaited(self, ns: tuple[str, ...], name: str) -> Entry | None:
        """``get_entry`` awaited on the event loop, where ``awaits_reads`` (``async_reads.py``)."""
        assert self._async_reads is not None
        with tracing.span("db.read"):
            row = await self._async_reads.fetch_one(self._get_entry, {"namespace": join_namespace(ns), "name": name})
        return _entry(row)

    def close_held_connections(self) -> None:
        """Let go of the connections kept out of the pool: the event loop's reads and its swaps."""
        if self._async_reads is not None:
            self._async_reads.close()
        with self.db.writers:  # not while a swap is using it
            inline, self._inline = self._inline, None
        if inline is not None:
            inline.close()

    # -- the compare-and-swap --------------------------------------------------------------------

    def swap_pointers(
        self,
        swaps: Sequence[Swap],
        key: KeyRecord | None = None,
        events: Sequence[Event] = (),
        wait: float | None = None,
    ) -> Swapped:
        """The commit: all-or-nothing compare-and-swap of one or more pointers in ONE transaction.

        Each pointer moves by a conditional UPDATE: the database serialises UPDATEs of a row and
        re-evaluates the WHERE clause against the latest committed version, so of N racing calls
        with the same ``expected`` exactly one sees rowcount 1. Rows are updated in id order so that
        two overlapping transactions lock in the same order and cannot deadlock; any rowcount 0
        rolls the whole transaction back (``LOST``). ``key`` is recorded in the same transaction: a
        commit and its idempotency key land together or not at all; so do its ``events``, inserted
        after the UPDATEs (each row lock held: two commits of one entry write their events in the
        order they commit, see ``events.py``). Raises
        ``PointerOutcomeUnknown`` when the COMMIT itself fails.

        ``wait`` (SQLite only: a commit run on the event loop, which must not stall): the most
        seconds to wait for the write lock, held by another thread or process, before answering
        ``BUSY``, having done nothing. None: wait as every other writer does.
        """
        prepared = self.outbox.prepared(events)
        if wait is None:
            with self.db.writers:
                return self._swap_pointers(swaps, key, prepared)
        assert self.db.local, "only SQLite's writer lock is waited for with a bound"
        if not self.db.writers.acquire(timeout=wait):  # type: ignore[attr-defined]  # a Lock on SQLite
            return Swapped.BUSY
        try:
            return self._swap_pointers(swaps, key, prepared, wait)
        finally:
            self.db.writers.release()  # type: ignore[attr-defined]

    def _swap_pointers(
        self, swaps: Sequence[Swap], key: KeyRecord | None, events: tuple[str, list], wait: float | None = None
    ) -> Swapped:
        """The CAS transaction. Until COMMIT is sent nothing can have landed, so every failure before
        it is a known one (translated, at worst 503); only a failed COMMIT is ``PointerOutcomeUnknown``."""
        inline = self.db.local and wait is not None
        conn = self._inline_connection(wait) if inline else self.db.raw_connection()  # type: ignore[arg-type]
        try:
            cursor = conn.cursor()
            try:
                if inline:
                    if not _begin_or_busy(cursor):
                        return Swapped.BUSY
                elif self.db.local:  # take the write lock now: a deferred upgrade could fail mid-transaction
                    cursor.execute("BEGIN IMMEDIATE")
                for swap in sorted(swaps, key=lambda s: s.entry_id):
                    values = {
                        "id": swap.entry_id,
                        "expected": swap.expected,
                        "new": swap.new,
                        "location": swap.location,
                    }
                    statement = self._swap if swap.moved else self._swap_in_place
                    cursor.execute(statement.sql, statement.parameters(values))
                    if cursor.rowcount != 1:
                        conn.rollback()
                        return Swapped.LOST
                    if swap.write_paths is not None:
                        self._record_paths(cursor, swap.entry_id, swap.write_paths)
                if key is not None:
                    try:
                        cursor.execute(self._put_key.sql, self._put_key.parameters(key_row(key)))
                    except self.db.integrity_error:
                        conn.rollback()
                        return Swapped.KEY_TAKEN
                self.outbox.write_raw(cursor, events)
            except self.db.dbapi_error as e:
                quiet_rollback(conn)
                self._invalidate(conn, e)
                raise translate(e) or not_committed(e) from e
            try:
                conn.commit()
            except Exception as e:  # noqa: BLE001 - whatever failed here, COMMIT may have been sent
                quiet_rollback(conn)
                self._invalidate(conn, e)
                raise PointerOutcomeUnknown(short(e), settled=self.db.local) from e
            return Swapped.WON
        finally:
            if not inline:
                conn.close()

    def _record_paths(self, cursor: Any, entry_id: int, write_paths: Mapping[str, str]) -> None:
        """A commit that changed the table's write paths records them with its pointer move (rare:
        the usual commit never runs this)."""
        cursor.execute(self._forget_paths.sql, self._forget_paths.parameters({"id": entry_id}))
        for prop, location in write_paths.items():
            row = {"entry_id": entry_id, "property": prop, "location": location}
            cursor.execute(self._add_path.sql, self._add_path.parameters(row))
        cursor.execute(self._paths_recorded.sql, self._paths_recorded.parameters({"id": entry_id}))

    def _inline_connection(self, wait: float) -> Any:
        """The event loop's swap connection, its busy timeout at ``wait``. Kept out of the pool: a
        checkout, and setting and restoring the busy timeout around each ``BEGIN IMMEDIATE``, cost
        ~5% of a set-properties commit's CPU on the event loop (py-spy, issue 27)."""
        if self._inline is None:
            self._inline = self.db.raw_connection()
            self._inline_wait_ms = -1
        wait_ms = int(wait * 1000)
        if wait_ms != self._inline_wait_ms:
            try:
                self._inline.cursor().execute(f"PRAGMA busy_timeout={wait_ms}")
            except self.db.dbapi_error as e:
                self._invalidate(self._inline, e)
                raise translate(e) or not_committed(e) from e
            self._inline_wait_ms = wait_ms
        return self._inline

    def _invalidate(self, conn: Any, e: BaseException) -> None:
        """Drop a connection that failed (the pool opens a new one), the kept one included."""
        if conn is self._inline:
            self._inline = None
        conn.invalidate(e)

    def read_pointer(self, entry_id: int) -> str | None:
        with self.db.read() as conn:
            return conn.execute(sa.select(entries.c.metadata_location).where(entries.c.id == entry_id)).scalar()

    # -- idempotency keys ------------------------------------------------------------------------

    def get_key(self, key: str) -> KeyRecord | None:
        with self.db.read() as conn:
            row = conn.execute(
                sa.select(keys.c.key, keys.c.fingerprint, keys.c.status, keys.c.body, keys.c.metadata_location).where(
                    keys.c.key == key
                )
            ).first()
        return None if row is None else KeyRecord(row[0], row[1], row[2], _bytes(row[3]), row[4])

    def put_key(self, record: KeyRecord) -> bool:
        """Record a final response; False if the key was recorded first by another request."""
        try:
            with self.db.write() as conn:
                conn.execute(keys.insert().values(**key_row(record)))
        except exc.IntegrityError:
            return False
        return True

    def expire_keys(self, older_than_ms: int) -> int:
        with self.db.write() as conn:
            return conn.execute(keys.delete().where(keys.c.created_ms < older_than_ms)).rowcount


def key_row(record: KeyRecord) -> dict[str, object]:
    """An Idempotency-Key's row, as the CAS and a create's insert write it."""
    return {
        "key": record.key,
        "fingerprint": record.fingerprint,
        "status": record.status,
        "body": record.body,
        "metadata_location": record.metadata_location,
        "created_ms": int(time.time() * 1000),
    }


def _bytes(value: object) -> bytes | None:
    return None if value is None else bytes(value)  # type: ignore[call-overload]


def _begin_or_busy(cursor: Any) -> bool:
    """``BEGIN IMMEDIATE`` within the connection's busy timeout: False, with no transaction open,
    when another process held the write lock all that time."""
    try:
        cursor.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if not _busy(e):
            raise
        return False
    return True


def _busy(e: BaseException) -> bool:
    """SQLite's "database is locked": the busy timeout ran out."""
    return isinstance(e, sqlite3.OperationalError) and e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
