"""SQLAlchemy table definitions and the engine factory.

Schema (created and upgraded only by the Alembic migrations in ``alembic/``):

- ``namespaces``: one row per namespace; ``name`` is the levels joined by the unit separator
  (``\\x1f``), ``parent`` the same for the parent ('' at the top level).
- ``catalog_entries``: tables and views share one identifier space (a view and a table cannot have
  the same name), so both live here, told apart by ``kind``. ``metadata_location`` is THE pointer:
  it only moves by a conditional UPDATE (see ``pointers.Pointers.swap_pointers``).
- ``idempotency_keys``: the final response to each request that carried an ``Idempotency-Key``,
  replayed when the client retries it (see ``api.idempotency``). A commit's row is written in the
  commit's own transaction; ``metadata_location`` then stands for the response body's metadata.
- ``grants``: one privilege on one object for one principal (see ``auth/policy.py``); the object is
  its kind and its path joined like namespace names ('' for the catalog); ``source`` is ``api``
  (management API, CLI) or ``bootstrap`` (the ``CATALOG_AUTHZ_BOOTSTRAP`` file, kept in step with it);
  ``legacy`` marks the ``user:`` grants from before principal kinds, until start-up settles them;
  ``warehouse`` is the warehouse a namespace, table or view grant names an object of ('' for the
  default warehouse's objects, and for the catalog and warehouse kinds).
- ``maintenance_tasks``: the durable queue of the catalog's own table maintenance (``database/tasks.py``);
  ``maintenance_runs``: each (entry, kind)'s last finished run, which scheduling reads;
  ``leases``: named leases (the one scheduler per deployment holds ``scheduler``).
- ``events``: the outbox of change events; ``event_sinks``: each push sink's cursor (database/outbox.py).
- ``entry_paths``: the ``write.*.path`` prefixes of live and dropped entries, owned like their
  ``location`` (``database/ownership.py``).
- ``warehouses``: the warehouses besides the default one (``catalog/warehouse_profiles.py``); read only in
  the server's own database, each warehouse's objects are in a database of its own.

Every lock and serialisation on SQLite's write path, outermost first, and why each exists (SQLite
has ONE writer at a time per database file; PostgreSQL needs none of the in-process ones, and the
compare-and-swap alone decides correctness everywhere):

1. ``commit/engine.py`` ``CommitEngine.serialised``: 1,024 process-local slot locks, one per
   entry's name hash, held for a commit's read-apply-write-swap. Not for correctness: a commit that
   queued behind another to the same table reads the pointer that one left, so a stale requirement
   is refused (409) before a file is written, and a lost CAS is rare within one process.
2. ``commit/grouping.py`` ``GroupCommitter``: per table and process, one leader lands the appends
   that queued while the previous group was landing (under lock 1 for that table), so N appends
   cost one metadata file and one CAS instead of N.
3. ``database/sql.py`` ``Database.writers``: one process-wide ``threading.Lock`` around every write
   transaction on SQLite (``write`` and the CAS). Writers of this process queue on it and are
   handed the database at once, instead of on SQLite's busy handler, which polls with sleeps of up
   to 100 ms.
4. ``database/db.py`` ``_configure_sqlite``: ``BEGIN IMMEDIATE`` for every non-autocommit transaction,
   so a transaction takes the write lock when it begins; a deferred one that read first could fail
   with "database is locked" when it upgrades. Between processes (workers, the CLI) this and the
   30 s ``busy_timeout`` are what serialise writers.
5. ``database/pointers.py`` ``Pointers._swap_pointers``: the CAS runs on a raw DBAPI connection (the
   measured fast path), outside SQLAlchemy's ``begin`` event, so it issues its own
   ``BEGIN IMMEDIATE`` for the same reason as 4.
A commit run on the event loop (``commit.inline.InlineCommitter``, SQLite and local disk only) waits at
most 2 ms for 1, for 3 and, through a busy timeout lowered for its ``BEGIN IMMEDIATE``, for 4/5;
past that it goes to a worker thread and waits there as every other writer does.
On PostgreSQL, the one serialisation the catalog adds is ``entries.Entries._location_free``: an
advisory lock held by the rare transactions that claim a location (creates, registers, moves),
never by commits.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine

from catalog.names import SEP
from catalog.settings import DatabaseSettings

metadata = sa.MetaData()

namespaces = sa.Table(
    "namespaces",
    metadata,
    sa.Column("name", sa.String(1024), primary_key=True),
    sa.Column("parent", sa.String(1024), nullable=False, index=True),
    sa.Column("properties", sa.JSON, nullable=False),
)

catalog_entries = sa.Table(
    "catalog_entries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "namespace",
        sa.String(1024),
        sa.ForeignKey("namespaces.name", name="fk_entries_namespace"),
        nullable=False,
    ),
    sa.Column("name", sa.String(1024), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),  # 'table' | 'view'
    sa.Column("metadata_location", sa.Text, nullable=False),
    sa.Column("previous_metadata_location", sa.Text, nullable=True),
    # The entry's normalised location (catalog.locations): no two entries' locations may overlap.
    # NULL only for rows from before migration 0003 until the server fills them in at start-up.
    sa.Column("location", sa.Text, nullable=True),
    # Pointer moves since the entry was made (the CAS counts them): "expiry due after N commits".
    sa.Column("commits", sa.BigInteger, nullable=False, server_default="0"),
    # Its write.*.path prefixes are in entry_paths (False only for rows from before migration 0011,
    # until the server reads them from their metadata files at start-up).
    sa.Column("paths_recorded", sa.Boolean, nullable=False, server_default=sa.false(), default=True),
    sa.UniqueConstraint("namespace", "name", name="uq_entries_namespace_name"),
    # Serves the overlap lookup (store.overlapping): equality with each ancestor and, on PostgreSQL
    # where text_pattern_ops lets a btree answer it, the prefix LIKE.
    sa.Index("ix_entries_location", "location", postgresql_ops={"location": "text_pattern_ops"}),
    sqlite_autoincrement=True,  # ids are never reused: a dropped entry keeps its own (0007)
)

idempotency_keys = sa.Table(
    "idempotency_keys",
    metadata,
    sa.Column("key", sa.String(128), primary_key=True),
    sa.Column("fingerprint", sa.String(64), nullable=False),  # sha256 of method, path and body
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("body", sa.LargeBinary, nullable=True),
    sa.Column("metadata_location", sa.Text, nullable=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False, index=True),
)


grants = sa.Table(
    "grants",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("principal", sa.String(256), nullable=False),
    sa.Column("privilege", sa.String(32), nullable=False),
    sa.Column("object_kind", sa.String(16), nullable=False),
    sa.Column("object_name", sa.String(2048), nullable=False),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    # True for a ``user:`` grant made before migration 0005 (when built-in clients were ``user:`` too)
    # until the server settles it at start-up (``GrantRows.settle_legacy``).
    sa.Column("legacy", sa.Boolean, nullable=False, server_default=sa.false()),
    # not NULL for the default's objects: the unique constraint must see two such grants as equal
    sa.Column("warehouse", sa.String(63), nullable=False, server_default=""),
    sa.UniqueConstraint("principal", "privilege", "object_kind", "object_name", "warehouse", name="uq_grants"),
)


ACTIVE_TASK = sa.text("state IN ('queued', 'running')")

maintenance_tasks = sa.Table(
    "maintenance_tasks",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("kind", sa.String(32), nullable=False),  # expire-snapshots | remove-orphans
    # The entry by identity: its row id and its table's uuid (a re-created table is another one).
    sa.Column("entry_id", sa.Integer, nullable=False),
    sa.Column("table_uuid", sa.String(64), nullable=True),
    sa.Column("namespace", sa.String(1024), nullable=False),  # the names when enqueued, for people
    sa.Column("name", sa.String(1024), nullable=False),
    sa.Column("state", sa.String(16), nullable=False),  # queued | running | done | failed
    sa.Column("options", sa.JSON, nullable=False),  # {"dry-run": bool, "forced": bool}
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("not_before_ms", sa.BigInteger, nullable=False),
    sa.Column("lease_owner", sa.String(128), nullable=True),
    sa.Column("lease_expires_ms", sa.BigInteger, nullable=True),
    sa.Column("heartbeat_ms", sa.BigInteger, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
    sa.Column("result", sa.JSON, nullable=True),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("started_ms", sa.BigInteger, nullable=True),
    sa.Column("finished_ms", sa.BigInteger, nullable=True),
    sa.Index("ix_maintenance_tasks_due", "state", "not_before_ms"),
    sa.Index("ix_maintenance_tasks_entry", "entry_id", "kind"),
    # At most one queued or running task per entry and kind.
    sa.Index(
        "uq_maintenance_tasks_active",
        "entry_id",
        "kind",
        unique=True,
        sqlite_where=ACTIVE_TASK,
        postgresql_where=ACTIVE_TASK,
    ),
)

maintenance_runs = sa.Table(
    "maintenance_runs",
    metadata,
    sa.Column("entry_id", sa.Integer, primary_key=True),
    sa.Column("kind", sa.String(32), primary_key=True),
    sa.Column("metadata_location", sa.Text, nullable=True),  # the pointer the last run saw
    sa.Column("finished_ms", sa.BigInteger, nullable=False),
    sa.Column("commits", sa.BigInteger, nullable=True),  # the entry's commit count the last run saw
)

# Dropped tables and views, kept for CATALOG_DROP_RETENTION (catalog/database/dropped.py): the row left
# catalog_entries (its name is free) but keeps its id, pointer and location (still owned).
dropped_entries = sa.Table(
    "dropped_entries",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),  # the entry's own id
    sa.Column("namespace", sa.String(1024), nullable=False),
    sa.Column("name", sa.String(1024), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),
    sa.Column("metadata_location", sa.Text, nullable=False),
    sa.Column("location", sa.Text, nullable=True),
    sa.Column("purge", sa.Boolean, nullable=False),  # the drop asked for its files to be deleted
    sa.Column("dropped_ms", sa.BigInteger, nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),  # then purged (purge) or forgotten
    sa.Column("purging_ms", sa.BigInteger, nullable=True),  # set once a purge began: no undrop since
    sa.Column("dropped_by", sa.String(256), nullable=True),
    # Its retention ended without purge: not shown nor undroppable, but its locations stay held (the
    # files are kept there) until a register of the same table or an allowed create supersedes it.
    sa.Column("released_ms", sa.BigInteger, nullable=True),
    sa.Column("paths_recorded", sa.Boolean, nullable=False, server_default=sa.false(), default=True),
    sa.Index("ix_dropped_entries_name", "namespace", "name"),
    sa.Index("ix_dropped_entries_expires", "expires_ms"),
    sa.Index("ix_dropped_entries_location", "location", postgresql_ops={"location": "text_pattern_ops"}),
)

# The write.*.path prefixes of live and dropped entries (catalog/database/ownership.py): owned like their
# ``location``, so no other entry may overlap them and no deleting job of another entry lists them.
# ``entry_id`` is the id a live entry keeps when it is dropped and undropped; the rows go when the
# entry is forgotten or purged. Most entries have none.
entry_paths = sa.Table(
    "entry_paths",
    metadata,
    sa.Column("entry_id", sa.Integer, primary_key=True),
    sa.Column("property", sa.String(64), primary_key=True),  # write.data.path, write.metadata.path, ...
    sa.Column("location", sa.Text, nullable=False),  # normalised (catalog.locations)
    sa.Index("ix_entry_paths_location", "location", postgresql_ops={"location": "text_pattern_ops"}),
)

leases = sa.Table(
    "leases",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("owner", sa.String(128), nullable=False),
    sa.Column("expires_ms", sa.BigInteger, nullable=False),
)


# The outbox (database/outbox.py): one row per change, written in the change's own transaction. ``seq``
# is drawn at insert (on PostgreSQL not in commit order across transactions); ``position`` is the
# feed's order, given afterwards by the one sequencer to rows it sees committed.
events = sa.Table(
    "events",
    metadata,
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("position", sa.BigInteger, nullable=True),
    sa.Column("event_id", sa.String(36), nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("type", sa.String(48), nullable=False),
    sa.Column("object_kind", sa.String(16), nullable=False),
    sa.Column("namespace", sa.String(1024), nullable=False),
    sa.Column("name", sa.String(1024), nullable=True),
    sa.Column("entry_id", sa.Integer, nullable=True),
    sa.Column("payload", sa.Text, nullable=False),  # JSON, written with orjson by the raw CAS path too
    sa.Index("uq_events_position", "position", unique=True),
    sa.Index(
        "ix_events_unpositioned",
        "seq",
        sqlite_where=sa.text("position IS NULL"),
        postgresql_where=sa.text("position IS NULL"),
    ),
    sqlite_autoincrement=True,
)

# Each push sink's durable cursor: every event at or below ``position`` was delivered.
event_sinks = sa.Table(
    "event_sinks",
    metadata,
    sa.Column("name", sa.String(64), primary_key=True),
    sa.Column("position", sa.BigInteger, nullable=False),
    sa.Column("delivered_ms", sa.BigInteger, nullable=True),
)

warehouses = sa.Table(
    "warehouses",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(63), nullable=False),
    sa.Column("location", sa.String(2048), nullable=False),
    sa.Column("profile", sa.JSON, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("updated_ms", sa.BigInteger, nullable=False),
    sa.Index("uq_warehouses_name", "name", unique=True),
    sqlite_autoincrement=True,
)


def join_namespace(levels: tuple[str, ...] | list[str]) -> str:
    return SEP.join(levels)


def split_namespace(key: str) -> tuple[str, ...]:
    return tuple(key.split(SEP)) if key else ()


def create_engine(settings: DatabaseSettings) -> Engine:
    """Engine for the configured database.

    SQLite: WAL, a busy timeout, and write transactions opened with ``BEGIN IMMEDIATE`` so that two
    writers queue on the lock instead of failing with "database is locked" when a read lock would be
    upgraded. Reads use AUTOCOMMIT connections and never take the write lock.
    PostgreSQL: a bounded pool sized by settings, whose connections are pinged when they come out
    of the pool after an idle spell (``_ping_when_idle``).
    """
    url = settings.database_url
    if settings.is_sqlite:
        engine = sa.create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": 30},
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_max_overflow,
            poolclass=sa.pool.QueuePool,
        )
        _configure_sqlite(engine)
        return engine
    engine = sa.create_engine(
        with_schema(url, settings.database_schema),
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout,
        connect_args=_postgres_connect_args(url),
    )
    _ping_when_idle(engine)
    return engine


# A pooled connection idle longer than this is pinged before use.
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """Ping a connection as it leaves the pool only when it sat there for a while.

    Pinging every checkout (SQLAlchemy's ``pool_pre_ping``) is one more round trip per request:
    measured here, a pointer read (one per loadTable) took 125 us with it and 44 us without. What a
    ping catches, connections the server closed (a restart, a failover, an idle timeout), happens
    while connections sit idle; one in steady use needs none. A stale connection
    makes the pool open a new one (``DisconnectionError``), so the first requests after an outage
    succeed as before; a connection that dies while in use is a 503, as it always was.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is None or time.monotonic() - since < PING_AFTER_IDLE_SECONDS:
            return
        autocommit = dbapi_conn.autocommit
        try:
            dbapi_conn.autocommit = True  # no transaction left open by the ping
            cursor = dbapi_conn.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
            dbapi_conn.autocommit = autocommit
        except Exception as e:  # noqa: BLE001 - any failure: this connection is not to be used
            raise sa.exc.DisconnectionError("a pooled connection failed its ping") from e


def _postgres_connect_args(url: str) -> dict[str, Any]:
    if url.startswith("postgresql"):
        return {"connect_timeout": 5}
    return {}


def with_schema(url: str, schema: str | None) -> sa.URL:
    """The database URL, on PostgreSQL with ``options=-csearch_path=<schema>`` when a schema is set (a
    warehouse's own, catalog/warehouse_profiles.py): every unqualified table name resolves there, and the
    option is in the URL itself, so every connection made from ``engine.url`` carries it."""
    parsed = sa.make_url(url)
    if not schema or parsed.get_backend_name() != "postgresql":
        return parsed
    return parsed.update_query_dict({"options": f"-csearch_path={schema}"})


# How long a SQLite write waits for another process's write transaction before "database is locked".
SQLITE_BUSY_TIMEOUT_MS = 30_000


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
