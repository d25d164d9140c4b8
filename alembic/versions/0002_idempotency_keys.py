"""Idempotency keys: the final response to each request that carried an Idempotency-Key.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(128), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=True),
        sa.Column("metadata_location", sa.Text, nullable=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_idempotency_keys_created_ms", "idempotency_keys", ["created_ms"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created_ms", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
