"""Grants on the namespaces, tables and views of a created warehouse.

A grant's object gains the warehouse it is in: ``warehouse`` is that warehouse's name, '' (the
default) for the default warehouse's objects, as every grant before this revision named them, and
for the catalog and ``warehouse`` kinds (which name their warehouse in ``object_name``). The unique
constraint takes it in: the same table name in two warehouses is two objects.

The downgrade deletes the grants naming a created warehouse's objects: the revision before would
read them as grants on the default warehouse's objects of the same names.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_KEY = ["principal", "privilege", "object_kind", "object_name"]


def upgrade() -> None:
    with op.batch_alter_table("grants") as batch:
        batch.add_column(sa.Column("warehouse", sa.String(63), nullable=False, server_default=""))
        batch.drop_constraint("uq_grants", type_="unique")
        batch.create_unique_constraint("uq_grants", [*_KEY, "warehouse"])


def downgrade() -> None:
    op.execute("DELETE FROM grants WHERE warehouse <> ''")
    with op.batch_alter_table("grants") as batch:
        batch.drop_constraint("uq_grants", type_="unique")
        batch.create_unique_constraint("uq_grants", _KEY)
        batch.drop_column("warehouse")
