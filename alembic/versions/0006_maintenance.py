"""Table maintenance: the durable task queue of the catalog's own maintenance, each (entry, kind)'s last
run, and the leases that make one scheduler per deployment (catalog/database/tasks.py).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ACTIVE = "state IN ('queued', 'running')"


def upgrade() -> None:
    op.create_table(
        "maintenance_tasks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("entry_id", sa.Integer, nullable=False),
        sa.Column("table_uuid", sa.String(64), nullable=True),
        sa.Column("namespace", sa.String(1024), nullable=False),
        sa.Column("name", sa.String(1024), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("options", sa.JSON, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("not_before_ms", sa.BigInteger, nullable=False),
        sa.Column("lease_owner", sa.String(128), nullable=True),
        sa.Column("lease_expires_ms", sa.BigInteger, nullable=True),
        sa.Column("heartbeat_ms", sa.BigInteger, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("created_ms", sa.BigInteger, nullable=False),
        sa.Column("started_ms", sa.BigInteger, nullable=True),
        sa.Column("finished_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_maintenance_tasks_due", "maintenance_tasks", ["state", "not_before_ms"])
    op.create_index("ix_maintenance_tasks_entry", "maintenance_tasks", ["entry_id", "kind"])
    op.create_index(
        "uq_maintenance_tasks_active",
        "maintenance_tasks",
        ["entry_id", "kind"],
        unique=True,
        sqlite_where=sa.text(ACTIVE),
        postgresql_where=sa.text(ACTIVE),
    )
    op.create_table(
        "maintenance_runs",
        sa.Column("entry_id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(32), primary_key=True),
        sa.Column("metadata_location", sa.Text, nullable=True),
        sa.Column("finished_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "leases",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("expires_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("leases")
    op.drop_table("maintenance_runs")
    op.drop_index("uq_maintenance_tasks_active", table_name="maintenance_tasks")
    op.drop_index("ix_maintenance_tasks_entry", table_name="maintenance_tasks")
    op.drop_index("ix_maintenance_tasks_due", table_name="maintenance_tasks")
    op.drop_table("maintenance_tasks")
