"""Grants: the authorization policy (catalog.authz), one privilege on one object per row.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("principal", sa.String(256), nullable=False),
        sa.Column("privilege", sa.String(32), nullable=False),
        sa.Column("object_kind", sa.String(16), nullable=False),
        sa.Column("object_name", sa.String(2048), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.UniqueConstraint("principal", "privilege", "object_kind", "object_name", name="uq_grants"),
    )


def downgrade() -> None:
    op.drop_table("grants")
