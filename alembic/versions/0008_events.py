"""Change events: the outbox written in each change's own transaction, and the push sinks' cursors.

``seq`` is drawn at insert; ``position``, the feed's order, is given later by the one sequencer
(database/events.py explains why the feed cannot read by ``seq`` on PostgreSQL).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "events",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("position", sa.BigInteger, nullable=True),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("type", sa.String(48), nullable=False),
        sa.Column("object_kind", sa.String(16), nullable=False),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(1024), nullable=True),
        sa.Column("entry_id", sa.Integer, nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("uq_events_position", "events", ["position"], unique=True)
    # The sequencer's scan: rows not yet given a position, in seq order.
    op.create_index(
        "ix_events_unpositioned",
        "events",
        ["seq"],
        sqlite_where=sa.text("position IS NULL"),
        postgresql_where=sa.text("position IS NULL"),
    )
    op.create_table(
        "event_sinks",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("position", sa.BigInteger, nullable=False),
        sa.Column("delivered_ms", sa.BigInteger, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("event_sinks")
    op.drop_index("ix_events_unpositioned", table_name="events")
    op.drop_index("uq_events_position", table_name="events")
    op.drop_table("events")
