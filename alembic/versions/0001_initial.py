"""Initial schema: namespaces and catalog entries (tables and views share one identifier space).

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "namespaces",
        sa.Column("name", sa.String(1024), primary_key=True),
        sa.Column("parent", sa.String(1024), nullable=False),
        sa.Column("properties", sa.JSON, nullable=False),
    )
    op.create_index("ix_namespaces_parent", "namespaces", ["parent"])
    op.create_table(
        "catalog_entries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "namespace",
            sa.String(1024),
            sa.ForeignKey("namespaces.name", name="fk_entries_namespace"),
            nullable=False,
        ),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("metadata_location", sa.Text, nullable=False),
        sa.Column("previous_metadata_location", sa.Text, nullable=True),
        sa.UniqueConstraint("namespace", "name", name="uq_entries_namespace_name"),
    )


def downgrade() -> None:
    op.drop_table("catalog_entries")
    op.drop_index("ix_namespaces_parent", table_name="namespaces")
    op.drop_table("namespaces")
