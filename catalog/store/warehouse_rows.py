"""The ``warehouses`` table (in the server's own database): the warehouses besides the default."""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from catalog import errors
from catalog.store.db import warehouses
from catalog.warehouses import Warehouse


class WarehouseRows:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def list(self) -> list[tuple[Warehouse, int]]:
        """Every warehouse, by name, with the time it was last changed (ms)."""
        query = sa.select(warehouses).order_by(warehouses.c.name)
        with self.engine.connect() as conn:
            return [(_warehouse(r), r.updated_ms) for r in conn.execute(query)]

    def get(self, name: str) -> Warehouse | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(warehouses).where(warehouses.c.name == name)).first()
        return _warehouse(row) if row else None

    def insert(self, w: Warehouse) -> Warehouse:
        now = int(time.time() * 1000)
        values = {"name": w.name, "location": w.location, "profile": w.profile, "created_ms": now, "updated_ms": now}
        try:
            with self.engine.begin() as conn:
                new_id = conn.execute(sa.insert(warehouses).values(**values)).inserted_primary_key[0]
        except sa.exc.IntegrityError:
            raise errors.AlreadyExists(f"Warehouse already exists: {w.name}") from None
        return Warehouse(w.name, w.location, w.profile, id=int(new_id))

    def next_id(self) -> int:
        """The id the next insert is likely to get (only to check a profile's settings before)."""
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(warehouses.c.id), 0))).scalar_one()) + 1

    def update(self, w: Warehouse) -> None:
        now = int(time.time() * 1000)
        with self.engine.begin() as conn:
            done = conn.execute(
                sa.update(warehouses)
                .where(warehouses.c.name == w.name)
                .values(location=w.location, profile=w.profile, updated_ms=now)
            ).rowcount
        if not done:
            raise errors.NoSuchWarehouse(f"Warehouse does not exist: {w.name}")

    def delete(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(sa.delete(warehouses).where(warehouses.c.name == name)).rowcount)


def _warehouse(row: sa.Row) -> Warehouse:
    return Warehouse(row.name, row.location, dict(row.profile or {}), id=row.id)
