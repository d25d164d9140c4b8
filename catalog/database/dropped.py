"""Dropped tables and views, kept for ``CATALOG_DROP_RETENTION`` before they go for good.

A drop moves the entry's row from ``catalog_entries`` to ``dropped_entries`` in one transaction
(``Entries.drop_entry``): its name is free at once, but it keeps its id, its pointer and its
location, which stays owned (``Entries.overlapping`` sees dropped entries too), so no new table can
move into files a purge will delete or an undrop will bring back. ``Entries.undrop_entry`` moves it
back when its name and location are free. When the retention ends, an entry dropped without purge
is released (its files stay, as the spec says, and its locations stay held: ``forget_dropped``) and
one dropped with ``purgeRequested`` gets a durable ``purge`` task (``catalog/maintenance/jobs.py``).

A purge and an undrop exclude each other by the row itself: the purge sets ``purging_ms`` with a
conditional UPDATE before deleting anything, an undrop deletes the row only while ``purging_ms`` is
NULL. The database serialises writes of one row, so exactly one of them wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from catalog.database.db import dropped_entries as dropped
from catalog.database.db import entry_paths, join_namespace, maintenance_runs, split_namespace
from catalog.database.outbox import EventRows
from catalog.database.sql import Database
from catalog.database.tasks import now_ms
from catalog.events import records
from catalog.names import dotted


@dataclass(frozen=True, slots=True)
class Dropped:
    id: int
    namespace: tuple[str, ...]
    name: str
    kind: str
    metadata_location: str
    location: str | None
    purge: bool
    dropped_ms: int
    expires_ms: int
    purging_ms: int | None
    dropped_by: str | None
    released_ms: int | None = None  # its retention ended without purge: see ``forget_dropped``

    @property
    def ident(self) -> str:
        return dotted(self.namespace, self.name)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "namespace": list(self.namespace),
            "name": self.name,
            "purge": self.purge,
            "state": "purging" if self.purging_ms is not None else "retained",
            "dropped-ms": self.dropped_ms,
            "expires-ms": self.expires_ms,
            "dropped-by": self.dropped_by,
            "metadata-location": self.metadata_location,
        }


COLUMNS = (
    dropped.c.id,
    dropped.c.namespace,
    dropped.c.name,
    dropped.c.kind,
    dropped.c.metadata_location,
    dropped.c.location,
    dropped.c.purge,
    dropped.c.dropped_ms,
    dropped.c.expires_ms,
    dropped.c.purging_ms,
    dropped.c.dropped_by,
    dropped.c.released_ms,
)
# The dropped entries a person sees and acts on: not the released ones (``forget_dropped``).
SHOWN = dropped.c.released_ms.is_(None)


def as_dropped(row: sa.Row) -> Dropped:
    values = list(row)
    values[1] = split_namespace(values[1])
    values[6] = bool(values[6])
    return Dropped(*values)


class DroppedRows:
    """The dropped entries on the catalog's ``Database`` (a drop and an undrop are ``Entries``'s: they
    move a row between the two tables); the end of a purge writes its event through ``outbox``."""

    def __init__(self, db: Database, outbox: EventRows) -> None:
        self.db = db
        self.outbox = outbox

    def get_dropped(self, dropped_id: int, released: bool = False) -> Dropped | None:
        """A dropped entry (``released``: a released one too)."""
        q = sa.select(*COLUMNS).where(dropped.c.id == dropped_id)
        with self.db.read() as conn:
            row = conn.execute(q if released else q.where(SHOWN)).first()
        return None if row is None else as_dropped(row)

    def list_dropped(
        self, ns: tuple[str, ...] | None = None, name: str | None = None, limit: int = 100
    ) -> list[Dropped]:
        """The most recently dropped first; of one namespace (and name) when given."""
        q = sa.select(*COLUMNS).where(SHOWN).order_by(dropped.c.dropped_ms.desc(), dropped.c.id.desc()).limit(limit)
        if ns is not None:
            q = q.where(dropped.c.namespace == join_namespace(ns))
        if name is not None:
            q = q.where(dropped.c.name == name)
        with self.db.read() as conn:
            return [as_dropped(r) for r in conn.execute(q)]

    def end_retention(self, dropped_id: int) -> Dropped | None:
        """Make the entry's retention end now (the scheduler purges or forgets it next): the entry as
        it is now, None when there is no such dropped entry."""
        now = now_ms()
        with self.db.write() as conn:
            conn.execute(
                dropped.update().where(dropped.c.id == dropped_id, dropped.c.expires_ms > now).values(expires_ms=now)
            )
            row = conn.execute(sa.select(*COLUMNS).where(dropped.c.id == dropped_id, SHOWN)).first()
        return None if row is None else as_dropped(row)

    def expired_dropped(self, limit: int) -> list[Dropped]:
        """Entries whose retention ended, the oldest first."""
        q = sa.select(*COLUMNS).where(dropped.c.expires_ms <= now_ms(), SHOWN)
        q = q.order_by(dropped.c.expires_ms).limit(limit)
        with self.db.read() as conn:
            return [as_dropped(r) for r in conn.execute(q)]

    def forget_dropped(self, ids: Sequence[int]) -> int:
        """Release entries dropped without purge whose retention ended: no undrop, no listing, no
        maintenance record any more, but their files stay, and so does the row, which keeps
        holding their locations: no other table may claim them and, through its own maintenance or purge,
        the files kept there. Only a register of that very table, or a create by someone who may
        drop its name, supersedes a released entry (``Catalog.register``, ``Catalog.create_table``)."""
        if not ids:
            return 0
        now = now_ms()
        with self.db.write() as conn:
            released = conn.execute(
                dropped.update()
                .where(
                    dropped.c.id.in_(list(ids)),
                    dropped.c.purge.is_(False),
                    dropped.c.expires_ms <= now,
                    dropped.c.released_ms.is_(None),
                )
                .values(released_ms=now)
                .returning(dropped.c.id)
            ).all()
            conn.execute(maintenance_runs.delete().where(maintenance_runs.c.entry_id.in_([r.id for r in released])))
        return len(released)

    def begin_purge(self, dropped_id: int) -> Dropped | None:
        """Claim the entry for its purge (no undrop from now on): the entry, or None when it is gone
        (undropped, or already purged) or its retention has not ended."""
        now = now_ms()
        with self.db.write() as conn:
            conn.execute(
                dropped.update()
                .where(
                    dropped.c.id == dropped_id,
                    dropped.c.purge.is_(True),
                    dropped.c.expires_ms <= now,
                    dropped.c.purging_ms.is_(None),
                )
                .values(purging_ms=now)
            )
            row = conn.execute(
                sa.select(*COLUMNS).where(dropped.c.id == dropped_id, dropped.c.purging_ms.is_not(None))
            ).first()
        return None if row is None else as_dropped(row)

    def end_purge(self, dropped_id: int) -> None:
        """The purge deleted the entry's files: forget it (its location is free again)."""
        with self.db.write() as conn:
            gone = conn.execute(
                dropped.delete()
                .where(dropped.c.id == dropped_id, dropped.c.purging_ms.is_not(None))
                .returning(dropped.c.kind, dropped.c.namespace, dropped.c.name)
            ).first()
            if gone is not None:
                forget_records(conn, [dropped_id])
                ns = split_namespace(gone.namespace)
                self.outbox.write(conn, [records.entry_event(records.PURGE, gone.kind, ns, gone.name, dropped_id)])


def forget_records(conn: sa.Connection, ids: Sequence[int]) -> None:
    """What is kept of entries that are gone for good: their maintenance record and their write
    paths (their prefixes are free again)."""
    if ids:
        conn.execute(maintenance_runs.delete().where(maintenance_runs.c.entry_id.in_(list(ids))))
        conn.execute(entry_paths.delete().where(entry_paths.c.entry_id.in_(list(ids))))
