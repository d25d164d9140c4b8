"""The schema exists only through Alembic: up to head, down to base, and models == migrations."""

from __future__ import annotations

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from catalog.settings import Settings
from catalog.store import migrate
from catalog.store.db import create_engine, metadata


def check_round_trip(url: str) -> None:
    engine = create_engine(Settings(database_url=url))
    try:
        migrate.upgrade(engine)
        assert migrate.is_at_head(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == [], diff
        migrate.downgrade(engine, "base")
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        assert not migrate.is_at_head(engine)
        migrate.upgrade(engine)
        assert migrate.is_at_head(engine)
    finally:
        engine.dispose()


def test_sqlite_migrations_round_trip(tmp_path):
    check_round_trip(f"sqlite:///{tmp_path / 'm.db'}")
