"""Entry locations: each table's and view's normalised location, for the ownership rule (no entry's
location may equal, contain or lie inside another's). Rows from before this revision are filled in
by the server at start-up, from their metadata files.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("catalog_entries") as batch:
        batch.add_column(sa.Column("location", sa.Text, nullable=True))
        batch.create_index("ix_entries_location", ["location"], postgresql_ops={"location": "text_pattern_ops"})


def downgrade() -> None:
    with op.batch_alter_table("catalog_entries") as batch:
        batch.drop_index("ix_entries_location")
        batch.drop_column("location")
