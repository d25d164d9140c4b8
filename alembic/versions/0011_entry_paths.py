"""The ``write.*.path`` prefixes of tables, owned like their locations.

``entry_paths`` holds each live or dropped entry's ``write.data.path``, ``write.metadata.path``,
``write.object-storage.path`` and ``write.folder-storage.path`` (normalised), so the ownership rule
finds them in one indexed query. A dropped entry whose retention ended without purge is now
released (``released_ms``) rather than deleted: it keeps holding its locations, where its files
were kept. The entries from before this revision have ``paths_recorded``
false: the server reads their metadata files at start-up and records their prefixes
(``Catalog.backfill_locations``); until then their prefixes are not known to the rule.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "entry_paths",
        sa.Column("entry_id", sa.Integer, primary_key=True),
        sa.Column("property", sa.String(64), primary_key=True),
        sa.Column("location", sa.Text, nullable=False),
    )
    op.create_index(
        "ix_entry_paths_location", "entry_paths", ["location"], postgresql_ops={"location": "text_pattern_ops"}
    )
    # ADD COLUMN in place (SQLite too): a batch would copy catalog_entries into a table without its
    # AUTOINCREMENT, and ids must never be handed out twice (a dropped entry keeps its own: 0007).
    for table in ("catalog_entries", "dropped_entries"):
        op.add_column(table, sa.Column("paths_recorded", sa.Boolean, nullable=False, server_default=sa.false()))
    op.add_column("dropped_entries", sa.Column("released_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.execute("DELETE FROM dropped_entries WHERE released_ms IS NOT NULL")  # forgotten before 0011
    with op.batch_alter_table("dropped_entries") as batch:
        batch.drop_column("released_ms")
        batch.drop_column("paths_recorded")
    sqlite = op.get_bind().dialect.name == "sqlite"
    with op.batch_alter_table(
        "catalog_entries",
        recreate="always" if sqlite else "auto",
        table_kwargs={"sqlite_autoincrement": True} if sqlite else {},
    ) as batch:
        batch.drop_column("paths_recorded")
    op.drop_index("ix_entry_paths_location", table_name="entry_paths")
    op.drop_table("entry_paths")
