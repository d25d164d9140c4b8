"""The schema exists only through Alembic: up to head, down to base, and models == migrations."""

from __future__ import annotations

from tests.support import check_migrations_round_trip


def test_sqlite_migrations_round_trip(tmp_path):
    check_migrations_round_trip(f"sqlite:///{tmp_path / 'm.db'}")
