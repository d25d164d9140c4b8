"""Principal kinds: built-in clients are ``client:<id>``, an identity provider's users ``user:<name>``.

Before this revision both were ``user:<name>``, so an identity provider's token whose principal
claim equalled a built-in client's id held that client's grants. This revision cannot know which
ids are built-in clients (``CATALOG_OAUTH_CLIENTS`` is the server's setting, not the database's): it
marks the ``user:`` grants made through the API or CLI as ``legacy``, and the server settles them at
its first start with authentication on (``GrantRows.settle_legacy``): those naming a configured
built-in client become ``client:<id>``, the others stay ``user:<name>``, each rewrite logged.
Bootstrap grants need no marking: the server rewrites them from its file at every start.

The downgrade turns ``client:<id>`` back into ``user:<id>`` (a grant then held under both names is
kept once) and drops the mark.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

grants = sa.table(
    "grants",
    sa.column("id", sa.Integer),
    sa.column("principal", sa.String),
    sa.column("privilege", sa.String),
    sa.column("object_kind", sa.String),
    sa.column("object_name", sa.String),
    sa.column("source", sa.String),
    sa.column("legacy", sa.Boolean),
)


def upgrade() -> None:
    with op.batch_alter_table("grants") as batch:
        batch.add_column(sa.Column("legacy", sa.Boolean, nullable=False, server_default=sa.false()))
    op.execute(
        grants.update()
        .where(grants.c.principal.like("user:%"), grants.c.source != "bootstrap")
        .values(legacy=sa.true())
    )


def downgrade() -> None:
    conn = op.get_bind()
    clients = conn.execute(
        sa.select(
            grants.c.id, grants.c.principal, grants.c.privilege, grants.c.object_kind, grants.c.object_name
        ).where(grants.c.principal.like("client:%"))
    ).all()
    for row in clients:
        user = "user:" + row.principal.removeprefix("client:")
        held = conn.execute(
            sa.select(grants.c.id).where(
                grants.c.principal == user,
                grants.c.privilege == row.privilege,
                grants.c.object_kind == row.object_kind,
                grants.c.object_name == row.object_name,
            )
        ).first()
        if held is None:
            conn.execute(grants.update().where(grants.c.id == row.id).values(principal=user))
        else:
            conn.execute(grants.delete().where(grants.c.id == row.id))
    with op.batch_alter_table("grants") as batch:
        batch.drop_column("legacy")
