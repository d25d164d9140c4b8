"""Soft delete: dropped tables and views kept for ``CATALOG_DROP_RETENTION`` (restorable, their
locations still owned, then purged or forgotten), and each entry's commit count (the scheduler's
"due after N commits").

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dropped_entries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("metadata_location", sa.Text, nullable=False),
        sa.Column("location", sa.Text, nullable=True),
        sa.Column("purge", sa.Boolean, nullable=False),
        sa.Column("dropped_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
        sa.Column("purging_ms", sa.BigInteger, nullable=True),
        sa.Column("dropped_by", sa.String(256), nullable=True),
    )
    op.create_index("ix_dropped_entries_name", "dropped_entries", ["namespace", "name"])
    op.create_index("ix_dropped_entries_expires", "dropped_entries", ["expires_ms"])
    op.create_index(
        "ix_dropped_entries_location",
        "dropped_entries",
        ["location"],
        postgresql_ops={"location": "text_pattern_ops"},
    )
    # On SQLite the table is rebuilt with AUTOINCREMENT: a dropped entry keeps its id (in
    # dropped_entries) and no new entry may be given it meanwhile (SQLite reuses the largest rowid
    # otherwise). PostgreSQL's sequence never hands an id out twice.
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(
        "catalog_entries",
        recreate="always" if sqlite else "auto",
        table_kwargs={"sqlite_autoincrement": True} if sqlite else {},
    ) as batch:
        batch.add_column(sa.Column("commits", sa.BigInteger, nullable=False, server_default="0"))
    with op.batch_alter_table("maintenance_runs") as batch:
        batch.add_column(sa.Column("commits", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("maintenance_runs") as batch:
        batch.drop_column("commits")
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(
        "catalog_entries",
        recreate="always" if sqlite else "auto",
        table_kwargs={"sqlite_autoincrement": False} if sqlite else {},
    ) as batch:
        batch.drop_column("commits")
    op.drop_index("ix_dropped_entries_location", table_name="dropped_entries")
    op.drop_index("ix_dropped_entries_expires", table_name="dropped_entries")
    op.drop_index("ix_dropped_entries_name", table_name="dropped_entries")
    op.drop_table("dropped_entries")
