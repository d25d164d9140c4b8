"""The outbox: change events written in the change's own transaction, their order, their reading,
their pruning, and the push sinks' cursors.

Written: every store method that changes the catalog calls ``EventRows.write`` on the outbox it was
given (the CAS: ``write_raw`` on its DBAPI cursor) inside its own transaction, after its own
UPDATE/INSERT/DELETE, so an event exists exactly when its change does, and two changes of one row
draw their ``seq`` in the order they commit (the second waits for the first's row lock before it
gets there).

Ordered: the feed does NOT read by ``seq``. On PostgreSQL a sequence value is drawn at insert, not
at commit: transaction A may draw 10, B 11, and B commit first; a reader that served 11 and moved
its cursor past it would never see 10. So the feed reads by ``position``, which one sequencer at a
time (an advisory transaction lock; on SQLite the one writer) gives to the rows it sees committed
and not yet positioned, in ``seq`` order, above every position given before. A row committed later
is positioned later; positions become visible in increasing order (the next sequencer starts only
after the previous one committed), so a cursor on ``position`` never skips one. Rows of one entry
keep their commit order: the later one can only be seen once the earlier one is. On SQLite there is
one writer at a time, so transactions commit in the order they write: a row takes its position at
insert (the largest + 1, in the same statement) and the sequencer finds nothing to do.

The sequencer runs where events are read (the feed, the delivery loop): the commit path pays one
INSERT only (one table row and one index entry on SQLite; on PostgreSQL two index entries, and the
sequencer's UPDATE later, off the commit path). Age pruning walks from the oldest position, so no
index on the time is kept up by every commit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from catalog.database.db import event_sinks, events, join_namespace, split_namespace
from catalog.database.sql import Compiled, Database
from catalog.events.records import Event, StoredEvent

_SEQUENCER_LOCK = 0x1CEB_E4C1  # any constant the catalog owns (see location_rows.LOCATIONS_LOCK)
SEQUENCE_BATCH = 10_000
PRUNE_BATCH = 5_000
_COLUMNS = ("event_id", "created_ms", "type", "object_kind", "namespace", "name", "entry_id", "payload")


def event_row(event: Event, now_ms: int) -> dict[str, Any]:
    return {
        "event_id": event.event_id,
        "created_ms": now_ms,
        "type": event.type,
        "object_kind": event.object_kind,
        "namespace": join_namespace(event.namespace),
        "name": event.name,
        "entry_id": event.entry_id,
        "payload": orjson.dumps(event.payload).decode(),
    }


class EventRows:
    """The outbox, on the catalog's one ``Database``. The parts whose changes have events (entries,
    pointers, tasks, dropped entries) are given this object and write their rows through it inside
    their own transactions (``write``, or ``prepared``/``write_raw`` on the CAS's DBAPI cursor).
    ``events_on`` (CATALOG_EVENTS_ENABLED) says whether changes write events."""

    def __init__(self, db: Database, events_on: bool = True) -> None:
        self.db = db
        self.events_on = events_on
        self._events_insert: Compiled | None = None

    def _insert_statement(self) -> sa.Insert:
        values: dict[str, Any] = {c: sa.bindparam(c) for c in _COLUMNS}
        if self.db.local:  # one writer: the next position now (see the module docstring)
            values["position"] = sa.literal_column("(SELECT coalesce(max(position), 0) + 1 FROM events)")
        return events.insert().values(**values)

    def write(self, conn: Connection, changes: Sequence[Event]) -> None:
        """Write ``changes`` in the caller's transaction (``conn``)."""
        if self.events_on and changes:
            now = _now_ms()
            conn.execute(self._insert_statement(), [event_row(e, now) for e in changes])

    def prepared(self, changes: Sequence[Event]) -> tuple[str, list[Any]]:
        """The precompiled INSERT and its parameters for ``write_raw``: built before the CAS
        transaction begins, so nothing but the database can fail inside it."""
        if not (self.events_on and changes):
            return "", []
        insert = self._events_insert
        if insert is None:
            insert = self._events_insert = Compiled(self._insert_statement(), self.db.engine.dialect)
        now = _now_ms()
        return insert.sql, [insert.parameters(event_row(e, now)) for e in changes]

    @staticmethod
    def write_raw(cursor: Any, prepared: tuple[str, list[Any]]) -> None:
        """``write`` on the CAS's raw DBAPI cursor (``prepared`` by ``prepared``)."""
        sql, rows = prepared
        if len(rows) == 1:
            cursor.execute(sql, rows[0])
        elif rows:
            cursor.executemany(sql, rows)

    def emit(self, changes: Sequence[Event]) -> None:
        """Events of changes that are not rows here (a maintenance task's outcome is written with it)."""
        with self.db.write() as conn:
            self.write(conn, changes)

    # -- order -----------------------------------------------------------------------------------

    def sequence(self) -> int:
        """Give positions to the committed rows that have none (see the module docstring); how many.
        0 also when another sequencer holds the lock (its work is visible once it commits)."""
        if self.db.local:
            return 0  # positioned at insert
        with self.db.write() as conn:
            if not conn.execute(sa.text("SELECT pg_try_advisory_xact_lock(:k)"), {"k": _SEQUENCER_LOCK}).scalar():
                return 0
            return conn.execute(
                sa.text(
                    "WITH top AS (SELECT coalesce(max(position), 0) AS p FROM events), "
                    "todo AS (SELECT seq, row_number() OVER (ORDER BY seq) AS rn FROM events "
                    "WHERE position IS NULL ORDER BY seq LIMIT :n) "
                    "UPDATE events SET position = top.p + todo.rn FROM todo, top WHERE events.seq = todo.seq"
                ),
                {"n": SEQUENCE_BATCH},
            ).rowcount

    # -- reading ---------------------------------------------------------------------------------

    def read_events(self, after: int, limit: int, types: Sequence[str] = ()) -> list[StoredEvent]:
        """Positioned events after ``after``, in position order."""
        q = sa.select(events.c.position, *(events.c[c] for c in _COLUMNS)).where(events.c.position > after)
        if types:
            q = q.where(events.c.type.in_(list(types)))
        with self.db.read() as conn:
            rows = conn.execute(q.order_by(events.c.position).limit(limit)).all()
        return [
            StoredEvent(r[0], r[1], r[2], r[3], r[4], split_namespace(r[5]), r[6], r[7], orjson.loads(r[8]))
            for r in rows
        ]

    def event_bounds(self) -> tuple[int, int]:
        """(the oldest kept position - 1, the newest position): 0, 0 when there are none."""
        with self.db.read() as conn:
            low, high = conn.execute(sa.select(sa.func.min(events.c.position), sa.func.max(events.c.position))).one()
        return (low - 1 if low is not None else 0), (high or 0)

    def prune_events(self, older_than_ms: int, keep: int) -> int:
        """Delete events older than ``older_than_ms`` and all but the newest ``keep`` positioned ones.
        The newest positioned event always stays: the oldest position kept is how the feed tells a
        token whose next events were pruned (``event_bounds``)."""
        gone = 0
        with self.db.write() as conn:
            high = conn.execute(sa.select(sa.func.max(events.c.position))).scalar()
            if high is None:
                return 0
            if high > keep:
                gone += conn.execute(events.delete().where(events.c.position <= high - keep)).rowcount
        while True:  # by age, from the oldest, in batches (positions follow time closely enough)
            with self.db.write() as conn:
                rows = conn.execute(
                    sa.select(events.c.position, events.c.created_ms)
                    .where(events.c.position < high)
                    .order_by(events.c.position)
                    .limit(PRUNE_BATCH)
                ).all()
                old = [p for p, created in rows if created < older_than_ms]
                if old:
                    gone += conn.execute(events.delete().where(events.c.position.in_(old))).rowcount
            if len(old) < PRUNE_BATCH:
                return gone

    # -- push sinks' cursors ---------------------------------------------------------------------

    def sink_position(self, name: str) -> int | None:
        with self.db.read() as conn:
            return conn.execute(sa.select(event_sinks.c.position).where(event_sinks.c.name == name)).scalar()

    def start_sink(self, name: str, position: int) -> None:
        """A new sink starts at ``position`` (the feed's end when it was first configured)."""
        with self.db.write() as conn:
            if conn.execute(sa.select(event_sinks.c.name).where(event_sinks.c.name == name)).first() is None:
                conn.execute(event_sinks.insert().values(name=name, position=position, delivered_ms=None))

    def advance_sink(self, name: str, position: int) -> None:
        with self.db.write() as conn:
            conn.execute(
                event_sinks.update()
                .where(event_sinks.c.name == name, event_sinks.c.position < position)
                .values(position=position, delivered_ms=_now_ms())
            )


def _now_ms() -> int:
    return int(time.time() * 1000)
