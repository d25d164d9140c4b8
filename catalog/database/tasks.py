"""The maintenance queue: durable tasks in the catalog's own database, claimed under a lease.

A task is for an entry by identity (its row id and its table's uuid, so a rename never loses it
and a re-created table is never mistaken for it), of one kind (``expire-snapshots``,
``remove-orphans``, or ``purge``, whose entry is a dropped one), in one state: ``queued`` ->
``running`` -> ``done`` | ``failed`` (or back to ``queued`` with a later ``not_before_ms`` after a
failed attempt). At most one task per entry and
kind is queued or running (a partial unique index). A claim takes the oldest due task: a queued one
whose ``not_before_ms`` has passed, or a running one whose lease expired (its worker was killed or
lost the database). On PostgreSQL the claim is ``SELECT ... FOR UPDATE SKIP LOCKED``, so replicas
never wait for each other's claims; on SQLite it runs inside the single writer (``BEGIN IMMEDIATE``).
Every change a worker makes to its task names the lease owner: a worker whose lease was taken over
changes nothing.

No queue library fits: the well-kept ones are for PostgreSQL only (procrastinate, pgqueuer), need a
broker (Celery, Dramatiq, RQ), or SQLite/Redis only (huey), and none writes its rows in the
catalog's own database and transactions on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import exc

from catalog.database.db import catalog_entries as entries
from catalog.database.db import join_namespace, maintenance_runs, maintenance_tasks, split_namespace
from catalog.database.outbox import EventRows
from catalog.database.sql import Database
from catalog.events import records
from catalog.names import dotted

ACTIVE = ("queued", "running")


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    kind: str
    entry_id: int
    table_uuid: str | None
    namespace: tuple[str, ...]
    name: str
    state: str
    options: dict[str, Any]
    attempts: int
    not_before_ms: int
    lease_owner: str | None
    lease_expires_ms: int | None
    last_error: str | None
    result: dict[str, Any] | None
    created_ms: int
    started_ms: int | None
    finished_ms: int | None

    @property
    def ident(self) -> str:
        return dotted(self.namespace, self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "namespace": list(self.namespace),
            "table": self.name,
            "state": self.state,
            "dry-run": bool(self.options.get("dry-run")),
            "attempts": self.attempts,
            "not-before-ms": self.not_before_ms,
            "last-error": self.last_error,
            "result": self.result,
            "created-ms": self.created_ms,
            "started-ms": self.started_ms,
            "finished-ms": self.finished_ms,
        }


_COLUMNS = (
    maintenance_tasks.c.id,
    maintenance_tasks.c.kind,
    maintenance_tasks.c.entry_id,
    maintenance_tasks.c.table_uuid,
    maintenance_tasks.c.namespace,
    maintenance_tasks.c.name,
    maintenance_tasks.c.state,
    maintenance_tasks.c.options,
    maintenance_tasks.c.attempts,
    maintenance_tasks.c.not_before_ms,
    maintenance_tasks.c.lease_owner,
    maintenance_tasks.c.lease_expires_ms,
    maintenance_tasks.c.last_error,
    maintenance_tasks.c.result,
    maintenance_tasks.c.created_ms,
    maintenance_tasks.c.started_ms,
    maintenance_tasks.c.finished_ms,
)


def _task(row: sa.Row) -> Task:
    values = list(row)
    values[4] = split_namespace(values[4])
    values[7] = dict(values[7] or {})
    return Task(*values)


def _record_run(conn: sa.Connection, entry_id: int, kind: str, pointer: str | None, now: int) -> None:
    """The entry's last run of ``kind``: the pointer it left and the entry's commit count then."""
    key = (maintenance_runs.c.entry_id == entry_id, maintenance_runs.c.kind == kind)
    commits = conn.execute(sa.select(entries.c.commits).where(entries.c.id == entry_id)).scalar()
    conn.execute(maintenance_runs.delete().where(*key))
    conn.execute(
        maintenance_runs.insert().values(
            entry_id=entry_id, kind=kind, metadata_location=pointer, finished_ms=now, commits=commits
        )
    )


def _done_event(task: Task, result: dict[str, Any]) -> records.Event:
    """A finished task's event: its kind, its id, and the scalar parts of its result (counts)."""
    summary = {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool)) and len(str(v)) <= 256}
    return records.Event(
        records.MAINTENANCE_DONE,
        "table",
        task.namespace,
        task.name,
        task.entry_id,
        {"task-kind": task.kind, "task-id": task.id, "dry-run": bool(task.options.get("dry-run")), "result": summary},
    )


def now_ms() -> int:
    return int(time.time() * 1000)


class TaskRows:
    """The maintenance queue on the catalog's ``Database``; a finished task writes its event through
    ``outbox`` in its own transaction."""

    def __init__(self, db: Database, outbox: EventRows) -> None:
        self.db = db
        self.outbox = outbox

    def enqueue(
        self,
        kind: str,
        entry_id: int,
        table_uuid: str | None,
        ns: tuple[str, ...],
        name: str,
        options: dict[str, Any] | None = None,
        not_before_ms: int | None = None,
    ) -> tuple[Task, bool]:
        """A queued task for this entry and kind; (task, True) when it was created, (the queued or
        running one, False) when one is there already."""
        now = now_ms()
        for _ in range(3):
            existing = self._active(entry_id, kind)
            if existing is not None:
                return existing, False
            try:
                with self.db.write() as conn:
                    conn.execute(
                        maintenance_tasks.insert().values(
                            kind=kind,
                            entry_id=entry_id,
                            table_uuid=table_uuid,
                            namespace=join_namespace(ns),
                            name=name,
                            state="queued",
                            options=options or {},
                            attempts=0,
                            not_before_ms=now if not_before_ms is None else not_before_ms,
                            created_ms=now,
                        )
                    )
            except exc.IntegrityError:  # another process enqueued it first: return that one
                continue
            created = self._active(entry_id, kind)
            if created is not None:
                return created, True
        raise RuntimeError("maintenance task could not be enqueued")

    def _active(self, entry_id: int, kind: str) -> Task | None:
        q = sa.select(*_COLUMNS).where(
            maintenance_tasks.c.entry_id == entry_id,
            maintenance_tasks.c.kind == kind,
            maintenance_tasks.c.state.in_(ACTIVE),
        )
        with self.db.read() as conn:
            row = conn.execute(q).first()
        return None if row is None else _task(row)

    def claim(self, owner: str, lease_ms: int) -> Task | None:
        """The oldest due task, now running under ``owner``'s lease; None when nothing is due."""
        now = now_ms()
        due = sa.or_(
            sa.and_(maintenance_tasks.c.state == "queued", maintenance_tasks.c.not_before_ms <= now),
            sa.and_(maintenance_tasks.c.state == "running", maintenance_tasks.c.lease_expires_ms < now),
        )
        q = sa.select(maintenance_tasks.c.id).where(due).order_by(maintenance_tasks.c.not_before_ms).limit(1)
        if not self.db.local:
            q = q.with_for_update(skip_locked=True)
        with self.db.write() as conn:
            task_id = conn.execute(q).scalar()
            if task_id is None:
                return None
            conn.execute(
                maintenance_tasks.update()
                .where(maintenance_tasks.c.id == task_id)
                .values(
                    state="running",
                    lease_owner=owner,
                    lease_expires_ms=now + lease_ms,
                    heartbeat_ms=now,
                    attempts=maintenance_tasks.c.attempts + 1,
                    started_ms=now,
                )
            )
            row = conn.execute(sa.select(*_COLUMNS).where(maintenance_tasks.c.id == task_id)).one()
        return _task(row)

    def heartbeat(self, task_id: int, owner: str, lease_ms: int) -> bool:
        """Extend the lease; False when this owner no longer holds it (taken over)."""
        now = now_ms()
        with self.db.write() as conn:
            return (
                conn.execute(
                    maintenance_tasks.update()
                    .where(
                        maintenance_tasks.c.id == task_id,
                        maintenance_tasks.c.lease_owner == owner,
                        maintenance_tasks.c.state == "running",
                    )
                    .values(lease_expires_ms=now + lease_ms, heartbeat_ms=now)
                ).rowcount
                == 1
            )

    def finish(self, task: Task, owner: str, result: dict[str, Any], pointer: str | None) -> bool:
        """Done, with its result; the entry's last run of this kind is recorded (``pointer``: the
        metadata it left), unless the task was a dry run or left no table (None: skipped, or a
        purge). False: the lease was lost."""
        now = now_ms()
        with self.db.write() as conn:
            done = conn.execute(
                maintenance_tasks.update()
                .where(maintenance_tasks.c.id == task.id, maintenance_tasks.c.lease_owner == owner)
                .values(state="done", result=result, finished_ms=now, lease_owner=None, lease_expires_ms=None)
            ).rowcount
            if done and pointer is not None and not task.options.get("dry-run"):
                _record_run(conn, task.entry_id, task.kind, pointer, now)
            if done:
                self.outbox.write(conn, [_done_event(task, result)])
        return done == 1

    def record_run(self, entry_id: int, kind: str, pointer: str | None) -> None:
        """Record a run without a task (the scheduler looked and found nothing to do, e.g. the
        table's maintenance is off), so the table is looked at again only when it is due again."""
        with self.db.write() as conn:
            _record_run(conn, entry_id, kind, pointer, now_ms())

    def fail(self, task: Task, owner: str, error: str, retry_at_ms: int | None) -> bool:
        """A failed attempt: queued again at ``retry_at_ms``, or failed for good (None)."""
        values: dict[str, Any] = {"last_error": error[:2000], "lease_owner": None, "lease_expires_ms": None}
        if retry_at_ms is None:
            values.update(state="failed", finished_ms=now_ms())
        else:
            values.update(state="queued", not_before_ms=retry_at_ms)
        with self.db.write() as conn:
            return (
                conn.execute(
                    maintenance_tasks.update()
                    .where(maintenance_tasks.c.id == task.id, maintenance_tasks.c.lease_owner == owner)
                    .values(**values)
                ).rowcount
                == 1
            )

    def get_task(self, task_id: int) -> Task | None:
        with self.db.read() as conn:
            row = conn.execute(sa.select(*_COLUMNS).where(maintenance_tasks.c.id == task_id)).first()
        return None if row is None else _task(row)

    def list_tasks(
        self, entry_ids: Sequence[int] | None = None, states: Sequence[str] = (), limit: int = 100
    ) -> list[Task]:
        """The newest first; only those of ``entry_ids`` when given."""
        q = sa.select(*_COLUMNS).order_by(maintenance_tasks.c.id.desc()).limit(limit)
        if entry_ids is not None:
            q = q.where(maintenance_tasks.c.entry_id.in_(list(entry_ids)))
        if states:
            q = q.where(maintenance_tasks.c.state.in_(list(states)))
        with self.db.read() as conn:
            return [_task(r) for r in conn.execute(q)]

    def former_task_entries(self, ns: Sequence[str], name: str, limit: int = 100) -> list[int]:
        """The ids of entries no longer live (dropped, or purged and forgotten) that had tasks under
        the name ``ns.name``: a gone table's history. Tasks keep the names they were queued under,
        and a purge is queued under the name the table was dropped with. The names have no index:
        this scans the tasks, and runs only when no live table has the name."""
        live = sa.select(entries.c.id)
        q = (
            sa.select(maintenance_tasks.c.entry_id)
            .where(
                maintenance_tasks.c.namespace == join_namespace(tuple(ns)),
                maintenance_tasks.c.name == name,
                maintenance_tasks.c.entry_id.not_in(live),
            )
            .distinct()
            .limit(limit)
        )
        with self.db.read() as conn:
            return [r[0] for r in conn.execute(q)]

    def queue_depth(self) -> dict[str, int]:
        """Tasks per state among queued and running, and the age of the oldest due one (ms)."""
        q = sa.select(maintenance_tasks.c.state, sa.func.count(), sa.func.min(maintenance_tasks.c.not_before_ms))
        q = q.where(maintenance_tasks.c.state.in_(ACTIVE)).group_by(maintenance_tasks.c.state)
        with self.db.read() as conn:
            rows = conn.execute(q).all()
        depth = {state: count for state, count, _ in rows}
        oldest = min((first for state, _, first in rows if state == "queued" and first is not None), default=None)
        depth["oldest_queued_age_ms"] = 0 if oldest is None else max(0, now_ms() - oldest)
        return depth

    def due_tables(
        self, kind: str, every_ms: int, changed_only: bool, limit: int, every_commits: int = 0
    ) -> list[tuple[int, tuple, str]]:
        """Tables whose last ``kind`` run is older than ``every_ms`` (or that never had one), and,
        with ``changed_only``, whose pointer moved since; or (``every_commits`` > 0) that took that
        many commits since: (entry id, namespace, name), oldest first, skipping those with a task
        queued or running."""
        runs = maintenance_runs
        cutoff = now_ms() - every_ms
        joined = entries.outerjoin(runs, sa.and_(runs.c.entry_id == entries.c.id, runs.c.kind == kind))
        stale = sa.or_(runs.c.finished_ms.is_(None), runs.c.finished_ms < cutoff)
        if changed_only:
            stale = sa.and_(
                stale,
                sa.or_(runs.c.metadata_location.is_(None), runs.c.metadata_location != entries.c.metadata_location),
            )
        if every_commits > 0:
            stale = sa.or_(stale, entries.c.commits - sa.func.coalesce(runs.c.commits, 0) >= every_commits)
        active = sa.select(maintenance_tasks.c.entry_id).where(
            maintenance_tasks.c.kind == kind, maintenance_tasks.c.state.in_(ACTIVE)
        )
        q = (
            sa.select(entries.c.id, entries.c.namespace, entries.c.name)
            .select_from(joined)
            .where(entries.c.kind == "table", stale, entries.c.id.not_in(active))
            .order_by(runs.c.finished_ms.asc().nulls_first(), entries.c.id)
            .limit(limit)
        )
        with self.db.read() as conn:
            return [(r[0], split_namespace(r[1]), r[2]) for r in conn.execute(q)]
