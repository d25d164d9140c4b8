"""SQL access: reads, inserts and the conditional UPDATE that is the commit.

Every database error is translated here, by ``_translate``, and no SQL text or parameter reaches a
client:
- a missing table or column (the schema is not migrated) -> 503 naming ``iceberg-catalog migrate``;
- a value the database refuses (``DataError``) -> 400;
- an unreachable, full or failing database, or an exhausted pool -> 503 ``ServiceUnavailable``
  (nothing changed);
- a unique-key violation on insert -> ``AlreadyExists`` (409), by the caller.
In the CAS transaction, any error before COMMIT is sent is a known failure (503: a transaction that
never sent COMMIT cannot have committed); only a failure of the COMMIT itself is
``PointerOutcomeUnknown``, which the service settles with a fresh read of the pointer.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

from catalog import errors
from catalog.auth.policy import Grant, Target, parse_privilege
from catalog.locations import ancestors, overlaps
from catalog.store.db import catalog_entries as E
from catalog.store.db import grants as G
from catalog.store.db import idempotency_keys as K
from catalog.store.db import join_namespace, split_namespace
from catalog.store.db import namespaces as N

log = logging.getLogger("catalog.store")


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    namespace: tuple[str, ...]
    name: str
    kind: str
    metadata_location: str


@dataclass(frozen=True, slots=True)
class Located:
    """An entry and its normalised location (the ownership rule's view of an entry)."""

    id: int
    namespace: tuple[str, ...]
    name: str
    kind: str
    location: str


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


class Swapped(enum.Enum):
    WON = "won"
    LOST = "lost"  # a pointer was no longer the expected one: nothing changed
    KEY_TAKEN = "key-taken"  # another request recorded the Idempotency-Key first: nothing changed


class PointerOutcomeUnknown(Exception):
    """The COMMIT of the pointer UPDATE failed: it may or may not have landed.

    ``settled``: a fresh read of the pointers now tells the outcome for certain. True on SQLite (a
    local file, committed synchronously: once COMMIT has returned an error, nothing more will land);
    False on a server database, where a lost connection can leave the COMMIT still running there.
    """

    def __init__(self, message: str, settled: bool) -> None:
        super().__init__(message)
        self.settled = settled


class LocationTaken(errors.AlreadyExists):
    """409: ``location`` equals, contains or lies inside the location of another entry."""

    def __init__(self, location: str, other: Located) -> None:
        super().__init__(
            f"Location {location} overlaps the location of {other.kind} {'.'.join((*other.namespace, other.name))}"
        )


class Store:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # A read of a local SQLite file (WAL: never waits for a writer) costs less than handing it
        # to a worker thread: callers may run ``local`` reads on the event loop.
        self.local = engine.dialect.name == "sqlite"
        self._autocommit_reads = engine.dialect.name == "postgresql"  # SQLite connections already are
        self._get_entry = _Compiled(
            sa.select(E.c.id, E.c.namespace, E.c.name, E.c.kind, E.c.metadata_location).where(
                E.c.namespace == sa.bindparam("namespace"), E.c.name == sa.bindparam("name")
            ),
            engine.dialect,
        )
        self._swap = _Compiled(
            E.update()
            .where(E.c.id == sa.bindparam("id"), E.c.metadata_location == sa.bindparam("expected"))
            .values(
                metadata_location=sa.bindparam("new"),
                previous_metadata_location=sa.bindparam("expected"),
                location=sa.bindparam("location"),
            ),
            engine.dialect,
        )
        dbapi = engine.dialect.loaded_dbapi
        self._put_key = _Compiled(K.insert(), engine.dialect)
        self._dbapi_error: type[Exception] = dbapi.Error
        self._integrity_error: type[Exception] = dbapi.IntegrityError
        self._unreachable: tuple[type[Exception], ...] = (dbapi.OperationalError, dbapi.InterfaceError)
        # SQLite has one writer at a time. Writers of this process queue on a lock (handed over at
        # once) rather than on SQLite's busy handler, which polls with sleeps of up to 100 ms.
        self._writers: AbstractContextManager = threading.Lock() if self.local else nullcontext()

    # -- connections -----------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with _translated(), self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """A write transaction whose failure means nothing was changed (no pointer moves in here).
        Unique-key violations reach the caller as ``IntegrityError``: only it knows which key."""
        with _translated(keep=exc.IntegrityError), self._writers, self.engine.begin() as conn:
            yield conn

    def ping(self) -> None:
        with self._read() as conn:
            conn.execute(sa.text("SELECT 1"))

    # -- namespaces ------------------------------------------------------------------------------

    def get_namespace(self, ns: tuple[str, ...]) -> dict[str, str] | None:
        with self._read() as conn:
            row = conn.execute(sa.select(N.c.properties).where(N.c.name == join_namespace(ns))).first()
        return None if row is None else dict(row.properties)

    def list_namespaces(self, parent: tuple[str, ...], after: str | None, limit: int | None) -> list[tuple[str, ...]]:
        q = sa.select(N.c.name).where(N.c.parent == join_namespace(parent)).order_by(N.c.name)
        if after is not None:
            q = q.where(N.c.name > after)
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [split_namespace(r.name) for r in conn.execute(q)]

    def create_namespace(self, ns: tuple[str, ...], properties: dict[str, str]) -> None:
        try:
            with self._write() as conn:
                if len(ns) > 1 and not _exists(conn, N, N.c.name == join_namespace(ns[:-1])):
                    raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns[:-1])}")
                conn.execute(
                    N.insert().values(name=join_namespace(ns), parent=join_namespace(ns[:-1]), properties=properties)
                )
        except exc.IntegrityError as e:
            raise errors.AlreadyExists(f"Namespace already exists: {'.'.join(ns)}") from e

    def update_namespace_properties(
        self, ns: tuple[str, ...], removals: Sequence[str], updates: dict[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        """Apply removals then updates in one transaction; returns (updated, removed, missing)."""
        key = join_namespace(ns)
        with self._write() as conn:
            row = conn.execute(sa.select(N.c.properties).where(N.c.name == key).with_for_update()).first()
            if row is None:
                raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
            props = dict(row.properties)
            removals = list(dict.fromkeys(removals))  # a key named twice is removed (and reported) once
            removed = [k for k in removals if k in props]
            missing = [k for k in removals if k not in props]
            for k in removed:
                del props[k]
            props.update(updates)
            conn.execute(N.update().where(N.c.name == key).values(properties=props))
        return sorted(updates), removed, missing

    def drop_namespace(self, ns: tuple[str, ...]) -> None:
        key = join_namespace(ns)
        with self._write() as conn:
            if not _exists(conn, N, N.c.name == key):
                raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
            children = conn.execute(sa.select(sa.func.count()).where(N.c.parent == key)).scalar_one()
            tables = conn.execute(
                sa.select(sa.func.count()).where(E.c.namespace == key, E.c.kind == "table")
            ).scalar_one()
            views = conn.execute(
                sa.select(sa.func.count()).where(E.c.namespace == key, E.c.kind == "view")
            ).scalar_one()
            if children or tables or views:
                raise errors.NamespaceNotEmpty(
                    f"Namespace {'.'.join(ns)} is not empty. Contains {tables} table(s), {views} view(s) "
                    f"and {children} namespace(s)."
                )
            conn.execute(N.delete().where(N.c.name == key))

    # -- tables and views ------------------------------------------------------------------------

    def get_entry(self, ns: tuple[str, ...], name: str) -> Entry | None:
        """The pointer read of every load and commit: see ``_fetch_one``."""
        row = self._fetch_one(self._get_entry, {"namespace": join_namespace(ns), "name": name})
        return None if row is None else Entry(row[0], split_namespace(row[1]), row[2], row[3], row[4])

    def _raw_connection(self) -> PoolProxiedConnection:
        with _translated(driver=(self._dbapi_error,)):
            return self.engine.raw_connection()

    def _fetch_one(self, query: _Compiled, values: dict[str, object]) -> tuple | None:
        """One row of a precompiled query on a pooled DBAPI connection.

        The hot reads skip SQLAlchemy's per-call work (an isolation-level switch on checkout and
        back, statement execution and result machinery): measured on SQLite, 183 us -> 12 us per
        pointer read. The pool (and its pre-ping) is the engine's; a database error drops the
        connection from the pool and is a 503, as on every other read.
        """
        conn = self._raw_connection()
        try:
            if self._autocommit_reads:  # no transaction: no ROLLBACK round trip when it is returned
                conn.driver_connection.autocommit = True
            cursor = conn.cursor()
            try:
                cursor.execute(query.sql, query.parameters(values))
                return cursor.fetchone()
            finally:
                cursor.close()
                if self._autocommit_reads:
                    conn.driver_connection.autocommit = False
        except self._dbapi_error as e:
            if isinstance(e, self._unreachable):
                conn.invalidate(e)
            translated = _translate(e)
            if translated is None:
                raise
            raise translated from e
        finally:
            conn.close()

    def list_entries(self, ns: tuple[str, ...], kind: str, after: str | None, limit: int | None) -> list[str]:
        q = sa.select(E.c.name).where(E.c.namespace == join_namespace(ns), E.c.kind == kind).order_by(E.c.name)
        if after is not None:
            q = q.where(E.c.name > after)
        if limit is not None:
            q = q.limit(limit)
        with self._read() as conn:
            return [r.name for r in conn.execute(q)]

    def insert_entry(
        self,
        ns: tuple[str, ...],
        name: str,
        kind: str,
        metadata_location: str,
        location: str,
        key: KeyRecord | None = None,
    ) -> Swapped:
        """Register a new table or view (``location``: its normalised location). 409 if the name is
        taken (by a table or a view). ``key`` is recorded in the same transaction (a create's
        Idempotency-Key): ``KEY_TAKEN`` when another request recorded it first, nothing inserted."""
        ident = ".".join((*ns, name))
        try:
            with self._write() as conn:
                if key is not None and _exists(conn, K, K.c.key == key.key):
                    return Swapped.KEY_TAKEN
                taken = _holder_of(conn, ns, name)
                if taken is not None:
                    raise _name_taken(kind, taken, ident)
                self._location_free(conn, location, None)
                conn.execute(
                    E.insert().values(
                        namespace=join_namespace(ns),
                        name=name,
                        kind=kind,
                        metadata_location=metadata_location,
                        location=location,
                    )
                )
                if key is not None:
                    conn.execute(K.insert().values(**_key_row(key)))
        except exc.IntegrityError as e:
            raise _name_taken(kind, kind, ident) from e
        return Swapped.WON

    def overwrite_entry(self, ns: tuple[str, ...], name: str, metadata_location: str, location: str) -> None:
        """Register-with-overwrite: point an existing table at another metadata file."""
        where = (E.c.namespace == join_namespace(ns), E.c.name == name, E.c.kind == "table")
        with self._write() as conn:
            replaced = conn.execute(sa.select(E.c.id).where(*where)).scalar()
            self._location_free(conn, location, replaced)
            conn.execute(
                E.update()
                .where(*where)
                .values(
                    metadata_location=metadata_location,
                    previous_metadata_location=E.c.metadata_location,
                    location=location,
                )
            )

    # -- locations (the ownership rule, see service) ---------------------------------------------

    def overlapping(self, location: str, exclude_id: int | None = None) -> list[Located]:
        """Entries whose location equals, contains or lies inside ``location`` (normalised).

        Containing locations are found by equality with each ancestor, contained ones by prefix
        (``LIKE`` with the wildcards escaped). Runs on creates, registers and location changes only.
        """
        with self._read() as conn:
            return _overlapping(conn, location, exclude_id)

    def _location_free(self, conn: Connection, location: str, exclude_id: int | None) -> None:
        """In the transaction that inserts or moves an entry: ``LocationTaken`` if another entry
        overlaps ``location``. The service checked before writing any file; this closes the race
        between two creates that both passed that check. Writers are serialised for it: SQLite's
        write transactions are (BEGIN IMMEDIATE); on PostgreSQL an advisory lock held until the
        transaction ends does it, taken only by these rare inserts, never by commits."""
        if not self.local:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCATIONS_LOCK})
        for other in _overlapping(conn, location, exclude_id):
            raise LocationTaken(location, other)

    def referencing(self, metadata_location: str) -> Entry | None:
        """The entry whose pointer is this metadata file, if any."""
        q = sa.select(E.c.id, E.c.namespace, E.c.name, E.c.kind, E.c.metadata_location).where(
            E.c.metadata_location == metadata_location
        )
        with self._read() as conn:
            row = conn.execute(q.limit(1)).first()
        return None if row is None else Entry(row[0], split_namespace(row[1]), row[2], row[3], row[4])

    def set_location(self, entry_id: int, metadata_location: str, location: str) -> None:
        """Record an entry's new location, if its pointer is still the file that moved it there."""
        with self._write() as conn:
            conn.execute(
                E.update()
                .where(E.c.id == entry_id, E.c.metadata_location == metadata_location)
                .values(location=location)
            )

    def entries_without_location(self, limit: int) -> list[Entry]:
        q = sa.select(E.c.id, E.c.namespace, E.c.name, E.c.kind, E.c.metadata_location)
        with self._read() as conn:
            rows = conn.execute(q.where(E.c.location.is_(None)).order_by(E.c.id).limit(limit)).all()
        return [Entry(r[0], split_namespace(r[1]), r[2], r[3], r[4]) for r in rows]

    def delete_entry(self, entry: Entry) -> bool:
        with self._write() as conn:
            return conn.execute(E.delete().where(E.c.id == entry.id)).rowcount == 1

    def rename_entry(self, entry: Entry, to_ns: tuple[str, ...], to_name: str) -> None:
        noun = "Table" if entry.kind == "table" else "View"
        src, dst = ".".join((*entry.namespace, entry.name)), ".".join((*to_ns, to_name))
        try:
            with self._write() as conn:
                taken = _holder_of(conn, to_ns, to_name)
                if taken is not None:
                    other = "Table" if taken == "table" else "View"
                    raise errors.AlreadyExists(f"Cannot rename {src} to {dst}. {other} already exists")
                moved = conn.execute(
                    E.update().where(E.c.id == entry.id).values(namespace=join_namespace(to_ns), name=to_name)
                ).rowcount
                if moved != 1:
                    raise (errors.NoSuchTable if entry.kind == "table" else errors.NoSuchView)(
                        f"{noun} does not exist: {src}"
                    )
        except exc.IntegrityError as e:
            raise errors.AlreadyExists(f"Cannot rename {src} to {dst}. {noun} already exists") from e

    # -- the compare-and-swap --------------------------------------------------------------------

    def swap_pointers(self, swaps: Sequence[Swap], key: KeyRecord | None = None) -> Swapped:
        """The commit: all-or-nothing compare-and-swap of one or more pointers in ONE transaction.

        Each pointer moves by a conditional UPDATE: the database serialises UPDATEs of a row and
        re-evaluates the WHERE clause against the latest committed version, so of N racing calls
        with the same ``expected`` exactly one sees rowcount 1. Rows are updated in id order so that
        two overlapping transactions lock in the same order and cannot deadlock; any rowcount 0
        rolls the whole transaction back (``LOST``). ``key`` is recorded in the same transaction: a
        commit and its idempotency key land together or not at all. Raises
        ``PointerOutcomeUnknown`` when the COMMIT itself fails.
        """
        with self._writers:
            return self._swap_pointers(swaps, key)

    def _swap_pointers(self, swaps: Sequence[Swap], key: KeyRecord | None) -> Swapped:
        """The CAS transaction. Until COMMIT is sent nothing can have landed, so every failure before
        it is a known one (translated, at worst 503); only a failed COMMIT is ``PointerOutcomeUnknown``."""
        conn = self._raw_connection()
        try:
            cursor = conn.cursor()
            try:
                if self.local:  # take the write lock now: a deferred upgrade could fail mid-transaction
                    cursor.execute("BEGIN IMMEDIATE")
                for swap in sorted(swaps, key=lambda s: s.entry_id):
                    values = {
                        "id": swap.entry_id,
                        "expected": swap.expected,
                        "new": swap.new,
                        "location": swap.location,
                    }
                    cursor.execute(self._swap.sql, self._swap.parameters(values))
                    if cursor.rowcount != 1:
                        conn.rollback()
                        return Swapped.LOST
                if key is not None:
                    try:
                        cursor.execute(self._put_key.sql, self._put_key.parameters(_key_row(key)))
                    except self._integrity_error:
                        conn.rollback()
                        return Swapped.KEY_TAKEN
            except self._dbapi_error as e:
                _quiet_rollback(conn)
                conn.invalidate(e)
                raise _translate(e) or _not_committed(e) from e
            try:
                conn.commit()
            except Exception as e:  # noqa: BLE001 - whatever failed here, COMMIT may have been sent
                _quiet_rollback(conn)
                conn.invalidate(e)
                raise PointerOutcomeUnknown(_short(e), settled=self.local) from e
            return Swapped.WON
        finally:
            conn.close()

    def read_pointer(self, entry_id: int) -> str | None:
        with self._read() as conn:
            return conn.execute(sa.select(E.c.metadata_location).where(E.c.id == entry_id)).scalar()

    # -- idempotency keys ------------------------------------------------------------------------

    def get_key(self, key: str) -> KeyRecord | None:
        with self._read() as conn:
            row = conn.execute(
                sa.select(K.c.key, K.c.fingerprint, K.c.status, K.c.body, K.c.metadata_location).where(K.c.key == key)
            ).first()
        return None if row is None else KeyRecord(row[0], row[1], row[2], _bytes(row[3]), row[4])

    def put_key(self, record: KeyRecord) -> bool:
        """Record a final response; False if the key was recorded first by another request."""
        try:
            with self._write() as conn:
                conn.execute(K.insert().values(**_key_row(record)))
        except exc.IntegrityError:
            return False
        return True

    def expire_keys(self, older_than_ms: int) -> int:
        with self._write() as conn:
            return conn.execute(K.delete().where(K.c.created_ms < older_than_ms)).rowcount

    # -- grants --------------------------------------------------------------------------------

    def list_grants(self) -> list[Grant]:
        with self._read() as conn:
            rows = conn.execute(
                sa.select(G.c.id, G.c.principal, G.c.privilege, G.c.object_kind, G.c.object_name, G.c.source)
            ).all()
        return [_grant(row) for row in rows]

    def add_grants(self, grants: Sequence[Grant]) -> list[Grant]:
        """Insert the grants not held yet (an existing one keeps its id and source); returns all of
        them as stored, with their ids."""
        for attempt in range(3):  # a concurrent insert of the same grant: read it back, once it exists
            try:
                with self._write() as conn:
                    self._insert_missing(conn, grants)
                    return [_grant(row) for row in conn.execute(_select_grants(grants))]
            except exc.IntegrityError:
                if attempt == 2:
                    raise errors.CommitFailed("Grants changed concurrently; try again") from None
        raise AssertionError("unreachable")

    def delete_grant(self, grant_id: int) -> Grant | None:
        with self._write() as conn:
            row = conn.execute(
                sa.select(G.c.id, G.c.principal, G.c.privilege, G.c.object_kind, G.c.object_name, G.c.source).where(
                    G.c.id == grant_id
                )
            ).first()
            if row is not None:
                conn.execute(G.delete().where(G.c.id == grant_id))
        return None if row is None else _grant(row)

    def sync_bootstrap(self, grants: Sequence[Grant]) -> tuple[int, int]:
        """Make the ``bootstrap`` grants exactly ``grants`` (those from the API stay); returns
        (added, removed). Replicas starting together each run this: it converges."""
        wanted = {_grant_key(g) for g in grants}
        for attempt in range(3):
            try:
                return self._sync_bootstrap(grants, wanted)
            except exc.IntegrityError:
                if attempt == 2:
                    raise errors.CommitFailed("Grants changed concurrently; try again") from None
        raise AssertionError("unreachable")

    def _sync_bootstrap(self, grants: Sequence[Grant], wanted: set[tuple[str, str, str, str]]) -> tuple[int, int]:
        with self._write() as conn:
            rows = conn.execute(
                sa.select(G.c.id, G.c.principal, G.c.privilege, G.c.object_kind, G.c.object_name).where(
                    G.c.source == "bootstrap"
                )
            ).all()
            stale = [r.id for r in rows if tuple(r[1:]) not in wanted]
            if stale:
                conn.execute(G.delete().where(G.c.id.in_(stale)))
            added = self._insert_missing(conn, grants)
        return added, len(stale)

    def _insert_missing(self, conn: Connection, grants: Sequence[Grant]) -> int:
        held = {tuple(r) for r in conn.execute(_select_grants(grants).with_only_columns(*_GRANT_KEY))}
        now = int(time.time() * 1000)
        rows, seen = [], set(held)
        for g in grants:
            key = _grant_key(g)
            if key not in seen:
                seen.add(key)
                rows.append(dict(zip(("principal", "privilege", "object_kind", "object_name"), key, strict=True)))
                rows[-1].update(source=g.source, created_ms=now)
        if rows:
            conn.execute(G.insert(), rows)
        return len(rows)


_GRANT_KEY = (G.c.principal, G.c.privilege, G.c.object_kind, G.c.object_name)


def _grant_key(g: Grant) -> tuple[str, str, str, str]:
    return g.principal, str(g.privilege), g.target.kind, join_namespace(g.target.path)


def _select_grants(grants: Sequence[Grant]) -> sa.Select:
    principals = sorted({g.principal for g in grants})
    keys = {_grant_key(g) for g in grants}
    return sa.select(G.c.id, G.c.principal, G.c.privilege, G.c.object_kind, G.c.object_name, G.c.source).where(
        G.c.principal.in_(principals), sa.tuple_(*_GRANT_KEY).in_(sorted(keys))
    )


def _grant(row: sa.Row) -> Grant:
    return Grant(row[1], parse_privilege(row[2]), Target(row[3], split_namespace(row[4])), id=row[0], source=row[5])


class _Compiled:
    """A statement compiled once for the engine's dialect: its SQL and its DBAPI parameters."""

    def __init__(self, statement: sa.Select | sa.Update | sa.Insert, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self._order = compiled.positiontup if compiled.positional else None

    def parameters(self, values: dict[str, object]) -> tuple | dict[str, object]:
        return values if self._order is None else tuple(values[name] for name in self._order)


def _key_row(record: KeyRecord) -> dict[str, object]:
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


def _exists(conn: Connection, table: sa.Table, cond: sa.ColumnElement[bool]) -> bool:
    return conn.execute(sa.select(sa.literal(1)).select_from(table).where(cond)).first() is not None


def _overlapping(conn: Connection, location: str, exclude_id: int | None) -> list[Located]:
    q = sa.select(E.c.id, E.c.namespace, E.c.name, E.c.kind, E.c.location).where(
        sa.or_(E.c.location.in_(ancestors(location)), E.c.location.startswith(location + "/", autoescape=True))
    )
    if exclude_id is not None:
        q = q.where(E.c.id != exclude_id)
    rows = conn.execute(q).all()
    # LIKE is case-insensitive on SQLite: keep only exact overlaps
    return [Located(r[0], split_namespace(r[1]), r[2], r[3], r[4]) for r in rows if overlaps(r[4], location)]


# The advisory lock key that serialises location claims on PostgreSQL (any constant the catalog owns).
_LOCATIONS_LOCK = 0x1CEB_E4C0


def _holder_of(conn: Connection, ns: tuple[str, ...], name: str) -> str | None:
    """The kind ('table' | 'view') holding ``ns.name``, or None; 404 if the namespace is missing."""
    if not _exists(conn, N, N.c.name == join_namespace(ns)):
        raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
    return conn.execute(sa.select(E.c.kind).where(E.c.namespace == join_namespace(ns), E.c.name == name)).scalar()


def _name_taken(creating: str, existing: str, ident: str) -> errors.IcebergError:
    if creating == existing:
        return errors.AlreadyExists(f"{'Table' if creating == 'table' else 'View'} already exists: {ident}")
    if existing == "view":
        return errors.AlreadyExists(f"View with same name already exists: {ident}")
    return errors.AlreadyExists(f"Table with same name already exists: {ident}")


def _quiet_rollback(trans: sa.Transaction | PoolProxiedConnection) -> None:
    try:
        trans.rollback()
    except Exception:  # noqa: BLE001 - the connection may be gone; the outcome is decided by the caller
        pass


# How a missing table or column reads: PostgreSQL's SQLSTATEs (undefined_table, undefined_column)
# and SQLite's messages. Either means the schema is behind the code: the operator must migrate.
_SCHEMA_STATES = frozenset({"42P01", "42703"})
_SCHEMA_MESSAGES = ("no such table", "no such column", "has no column named")
NOT_MIGRATED = (
    "Database schema is missing or out of date: run `iceberg-catalog migrate` (or start with CATALOG_AUTO_MIGRATE=true)"
)


def _translate(e: BaseException) -> errors.IcebergError | None:
    """THE translation of a database error into what a client is told; None when it is not a known
    kind (a bug: the caller re-raises it, and the renderer answers 500 without its text).

    Only the driver's own first line is quoted, never SQLAlchemy's text, which carries the SQL and
    its parameters.
    """
    if isinstance(e, exc.TimeoutError):  # no connection free in the pool within the pool timeout
        return errors.ServiceUnavailable("Database unavailable: no free connection in the pool")
    orig = getattr(e, "orig", None) or e
    text = str(orig).lower()
    if getattr(orig, "sqlstate", None) in _SCHEMA_STATES or any(m in text for m in _SCHEMA_MESSAGES):
        return errors.ServiceUnavailable(NOT_MIGRATED)
    # PEP 249 class names, matched as SQLAlchemy itself matches them: one test for wrapped and raw
    # errors of any driver (psycopg.errors.DiskFull is an OperationalError, for instance).
    kinds = {c.__name__ for c in (*type(orig).__mro__, *type(e).__mro__)}
    if "DataError" in kinds:  # a value the database cannot hold: the request's fault
        return errors.BadRequest(f"Invalid value: the database refused it ({_short(orig)})")
    if kinds & {"OperationalError", "InterfaceError"}:  # unreachable, full, locked, shutting down
        return errors.ServiceUnavailable(f"Database unavailable: {_short(orig)}")
    return None


@contextmanager
def _translated(keep: type[Exception] | tuple[type[Exception], ...] = (), driver: tuple = ()) -> Iterator[None]:
    """Translate database errors raised in the block (see ``_translate``); ``keep`` passes through.
    ``driver``: the driver's own error classes, for blocks that can raise them unwrapped (connecting
    through ``engine.raw_connection()`` does)."""
    try:
        yield
    except keep:
        raise
    except (exc.DBAPIError, exc.TimeoutError, *driver) as e:
        translated = _translate(e)
        if translated is None:
            raise
        raise translated from e


def _not_committed(e: BaseException) -> errors.IcebergError:
    """An untranslated error in the CAS transaction before COMMIT: still, nothing landed."""
    log.error("database error before COMMIT, nothing was committed", exc_info=e)
    return errors.ServiceUnavailable("Database error before the commit: nothing was committed")


def _short(e: BaseException) -> str:
    """The first line of the driver's message (no SQL), or the error's type when it has none."""
    orig = getattr(e, "orig", None) or e
    lines = str(orig).strip().splitlines()
    return lines[0][:300] if lines else type(orig).__name__
