"""The database machinery every store module shares: read and write transactions, the pooled
DBAPI fast path for the hot reads, and THE translation of database errors.

Every database error is translated here, by ``translate``, and no SQL text or parameter reaches a
client:
- a missing table or column (the schema is not migrated) -> 503 naming ``iceberg-catalog migrate``;
- a value the database refuses (``DataError``) -> 400;
- an unreachable, full or failing database, or an exhausted pool -> 503 ``ServiceUnavailable``
  (nothing changed);
- a unique-key violation on insert -> ``AlreadyExists`` (409), by the caller.
In the CAS transaction (``pointers.py``), any error before COMMIT is sent is a known failure (503: a
transaction that never sent COMMIT cannot have committed); only a failure of the COMMIT itself is
``PointerOutcomeUnknown``, which the commit engine settles with a fresh read of the pointer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import PoolProxiedConnection

from catalog import errors, tracing

log = logging.getLogger("catalog.database")


class Database:
    """The engine and the two kinds of transaction the store runs on it. ONE per database: each part
    of the store (``Pointers``, ``Entries``, ``GrantRows``, ``TaskRows``, ``Leases``, ``DroppedRows``,
    the outbox ``EventRows``) holds it as ``db``, so one engine and one SQLite writer lock serve them
    all (``store.Store`` builds them)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # A read of a local SQLite file (WAL: never waits for a writer) costs less than handing it
        # to a worker thread: callers may run ``local`` reads on the event loop.
        self.local = engine.dialect.name == "sqlite"
        self._autocommit_reads = engine.dialect.name == "postgresql"  # SQLite connections already are
        dbapi = engine.dialect.loaded_dbapi
        self.dbapi_error: type[Exception] = dbapi.Error
        self.integrity_error: type[Exception] = dbapi.IntegrityError
        self._unreachable: tuple[type[Exception], ...] = (dbapi.OperationalError, dbapi.InterfaceError)
        # SQLite has one writer at a time. Writers of this process queue on a lock (handed over at
        # once) rather than on SQLite's busy handler, which polls with sleeps of up to 100 ms.
        # (Every serialisation on SQLite's write path is listed in ``db.py``.)
        self.writers: AbstractContextManager = threading.Lock() if self.local else nullcontext()

    @contextmanager
    def read(self) -> Iterator[Connection]:
        with (
            tracing.span("db.read"),
            translated(),
            self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn,
        ):
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction whose failure means nothing was changed (no pointer moves in here).
        Unique-key violations reach the caller as ``IntegrityError``: only it knows which key."""
        with tracing.span("db.write"), translated(keep=exc.IntegrityError), self.writers, self.engine.begin() as conn:
            yield conn

    def ping(self) -> None:
        with self.read() as conn:
            conn.execute(sa.text("SELECT 1"))

    def raw_connection(self) -> PoolProxiedConnection:
        try:  # what ``translated(driver=...)`` does, without a generator per hot read
            return self.engine.raw_connection()
        except (exc.DBAPIError, exc.TimeoutError, self.dbapi_error) as e:
            translated = translate(e)
            if translated is None:
                raise
            raise translated from e

    def fetch_one(self, query: Compiled, values: dict[str, object]) -> tuple | None:
        """One row of a precompiled query on a pooled DBAPI connection.

        The hot reads skip SQLAlchemy's per-call work (an isolation-level switch on checkout and
        back, statement execution and result machinery): measured on SQLite, 183 us -> 12 us per
        pointer read. The pool (and its ping of idle connections) is the engine's; a database error drops the
        connection from the pool and is a 503, as on every other read.
        """
        with tracing.span("db.read"):
            return self._fetch_one_untraced(query, values)

    def _fetch_one_untraced(self, query: Compiled, values: dict[str, object]) -> tuple | None:
        conn = self.raw_connection()
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
        except self.dbapi_error as e:
            if isinstance(e, self._unreachable):
                conn.invalidate(e)
            translated = translate(e)
            if translated is None:
                raise
            raise translated from e
        finally:
            conn.close()


class Compiled:
    """A statement compiled once for the engine's dialect: its SQL and its DBAPI parameters."""

    def __init__(self, statement: sa.Select | sa.Update | sa.Insert | sa.Delete, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        self._order = compiled.positiontup if compiled.positional else None

    def parameters(self, values: dict[str, object]) -> tuple | dict[str, object]:
        return values if self._order is None else tuple(values[name] for name in self._order)


def exists(conn: Connection, table: sa.Table, cond: sa.ColumnElement[bool]) -> bool:
    return conn.execute(sa.select(sa.literal(1)).select_from(table).where(cond)).first() is not None


def quiet_rollback(trans: sa.Transaction | PoolProxiedConnection) -> None:
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


def translate(e: BaseException) -> errors.IcebergError | None:
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
        return errors.BadRequest(f"Invalid value: the database refused it ({short(orig)})")
    if kinds & {"OperationalError", "InterfaceError"}:  # unreachable, full, locked, shutting down
        return errors.ServiceUnavailable(f"Database unavailable: {what_failed(text)}", detail=short(orig))
    return None


# What the client may know of a database failure: its kind, never the driver's text (it names the
# host, port, user, database and file paths). The text itself goes to the log.
_FAILURES = (
    (("full", "no space"), "the database or its disk is full"),
    (("locked", "lock timeout", "deadlock"), "the database is locked or busy"),
    (("shutting down", "terminating", "starting up", "recovery mode"), "the database is restarting"),
    (("too many", "remaining connection slots"), "the database has no free connection"),
    (("timeout", "timed out"), "the database did not answer in time"),
)


def what_failed(text: str) -> str:
    for markers, what in _FAILURES:
        if any(marker in text for marker in markers):
            return what
    return "the database cannot be reached or failed"


@contextmanager
def translated(keep: type[Exception] | tuple[type[Exception], ...] = (), driver: tuple = ()) -> Iterator[None]:
    """Translate database errors raised in the block (see ``translate``); ``keep`` passes through.
    ``driver``: the driver's own error classes, for blocks that can raise them unwrapped (connecting
    through ``engine.raw_connection()`` does)."""
    try:
        yield
    except keep:
        raise
    except (exc.DBAPIError, exc.TimeoutError, *driver) as e:
        translated = translate(e)
        if translated is None:
            raise
        raise translated from e


def not_committed(e: BaseException) -> errors.IcebergError:
    """An untranslated error in the CAS transaction before COMMIT: still, nothing landed."""
    log.error("database error before COMMIT, nothing was committed", exc_info=e)
    return errors.ServiceUnavailable("Database error before the commit: nothing was committed")


def short(e: BaseException) -> str:
    """The first line of the driver's message (no SQL), or the error's type when it has none."""
    orig = getattr(e, "orig", None) or e
    lines = str(orig).strip().splitlines()
    return lines[0][:300] if lines else type(orig).__name__
