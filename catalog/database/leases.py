"""Leases: a named role held by one owner at a time until its time runs out (``leases`` table).

The maintenance scheduler (``maintenance/worker.py``) and the event delivery loops
(``delivery/loop.py``) each act only while they hold their lease, so one process of a deployment
does that work; an owner that dies simply lets its lease expire.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import exc

from catalog.database.db import leases
from catalog.database.sql import Database
from catalog.database.tasks import now_ms


class Leases:
    def __init__(self, db: Database) -> None:
        self.db = db

    def take_lease(self, name: str, owner: str, ttl_ms: int) -> bool:
        """Hold the named lease until ``ttl_ms`` from now: True when ``owner`` holds it (it was free,
        expired or already ``owner``'s)."""
        now = now_ms()
        with self.db.write() as conn:
            moved = conn.execute(
                leases.update()
                .where(leases.c.name == name, sa.or_(leases.c.owner == owner, leases.c.expires_ms < now))
                .values(owner=owner, expires_ms=now + ttl_ms)
            ).rowcount
            if moved:
                return True
            if conn.execute(sa.select(leases.c.owner).where(leases.c.name == name)).first() is not None:
                return False
            try:
                with conn.begin_nested():
                    conn.execute(leases.insert().values(name=name, owner=owner, expires_ms=now + ttl_ms))
            except exc.IntegrityError:
                return False
            return True

    def release_lease(self, name: str, owner: str) -> None:
        with self.db.write() as conn:
            conn.execute(leases.delete().where(leases.c.name == name, leases.c.owner == owner))
