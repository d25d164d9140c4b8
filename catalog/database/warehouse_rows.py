"""The ``warehouses`` table (in the server's own database): the warehouses besides the default.
Profiles are stored with their secrets sealed when ``CATALOG_SECRETS_KEY`` is set (``sealing.py``)
and read back as stored: ``settings_for`` unseals a secret where a storage client needs it."""

from __future__ import annotations

import logging
import time

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from catalog import errors, sealing
from catalog.database.db import warehouses
from catalog.warehouse_profiles import Warehouse

log = logging.getLogger("catalog.warehouses")


class WarehouseRows:
    def __init__(self, engine: Engine, secrets_key: str | None = None) -> None:
        self.engine = engine
        self.secrets_key = secrets_key

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
        profile = sealing.seal(w.profile, self.secrets_key, w.name)
        values = {"name": w.name, "location": w.location, "profile": profile, "created_ms": now, "updated_ms": now}
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
                .values(location=w.location, profile=sealing.seal(w.profile, self.secrets_key, w.name), updated_ms=now)
            ).rowcount
        if not done:
            raise errors.NoSuchWarehouse(f"Warehouse does not exist: {w.name}")

    def reseal(self) -> int:
        """Seal with the first key what is stored plain or sealed with another key (a key set or
        rotated since); how many rows changed. A row changed meanwhile is left to its writer, which
        sealed it."""
        done = 0
        for w, updated in self.list():
            if sealing.sealed_by_first(w.profile, self.secrets_key):
                continue
            try:
                profile = sealing.seal(w.profile, self.secrets_key, w.name)
            except errors.IcebergError as e:  # no key opens it: the warehouse does not open, and says why
                log.error("%s", e.message)
                continue
            with self.engine.begin() as conn:
                done += conn.execute(
                    sa.update(warehouses)
                    .where(warehouses.c.id == w.id, warehouses.c.updated_ms == updated)
                    .values(profile=profile)
                ).rowcount
        return done

    def delete(self, name: str) -> bool:
        with self.engine.begin() as conn:
            return bool(conn.execute(sa.delete(warehouses).where(warehouses.c.name == name)).rowcount)


def _warehouse(row: sa.Row) -> Warehouse:
    return Warehouse(row.name, row.location, dict(row.profile or {}), id=row.id)
