"""Warehouses: the ones created besides the default (which stays the server's own settings).

Each row is one warehouse: its name (the route prefix clients get from ``/v1/config?warehouse=``),
its location and its profile (storage keys and per-warehouse settings, JSON). A warehouse's
namespaces, tables, views, events and maintenance queue live in a database of their own
(``catalog/warehouses.py``: a SQLite file next to this one, a PostgreSQL schema), so nothing of the
default warehouse moves: this migration only adds the table.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "warehouses",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("location", sa.String(2048), nullable=False),
        sa.Column("profile", sa.JSON, nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("uq_warehouses_name", "warehouses", ["name"], unique=True)


def downgrade() -> None:
    # grants on a warehouse (object kind 'warehouse') name what no longer exists
    op.execute("DELETE FROM grants WHERE object_kind = 'warehouse'")
    op.drop_index("uq_warehouses_name", table_name="warehouses")
    op.drop_table("warehouses")
