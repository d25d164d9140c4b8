"""The catalog's database as its set of parts (``Store``), built once on one ``Database``: what
``build_catalog`` hands out, part by part."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from catalog.database.dropped import DroppedRows
from catalog.database.entries import Entries
from catalog.database.grant_rows import GrantRows
from catalog.database.leases import Leases
from catalog.database.outbox import EventRows
from catalog.database.pointers import Pointers
from catalog.database.sql import Database
from catalog.database.tasks import TaskRows


class Store:
    """The catalog's database as its parts, each built once on one ``Database`` (one engine, one
    SQLite writer lock): ``pointers``, ``entries``, ``grants``, ``tasks``, ``leases``, ``dropped`` and
    the ``outbox`` the changing ones write their events through. ``build_catalog`` hands each consumer
    only the parts it uses; nothing else in ``catalog/`` may hold this whole (``tests/test_layout.py``).

    For tests and one-off scripts, ``store.name`` is the one part's method of that name."""

    def __init__(self, engine: Engine, events: bool = True) -> None:
        self.db = Database(engine)
        self.outbox = EventRows(self.db, events)
        self.pointers = Pointers(self.db, self.outbox)
        self.entries = Entries(self.db, self.outbox)
        self.grants = GrantRows(self.db)
        self.tasks = TaskRows(self.db, self.outbox)
        self.leases = Leases(self.db)
        self.dropped = DroppedRows(self.db, self.outbox)

    @property
    def engine(self) -> Engine:
        return self.db.engine

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        parts = (self.db, self.outbox, self.pointers, self.entries, self.grants, self.tasks, self.leases, self.dropped)
        for part in parts:
            if hasattr(type(part), name) or name in vars(part):
                return getattr(part, name)
        raise AttributeError(f"no part of the store has {name!r}")
