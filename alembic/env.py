"""Alembic environment: runs migrations on the connection given by ``catalog.database.migrate`` (or, from
the CLI, on ``CATALOG_DATABASE_URL`` / the ini's ``sqlalchemy.url``)."""

from __future__ import annotations

import os

import sqlalchemy as sa

from alembic import context
from catalog.database.db import metadata

config = context.config
connection = config.attributes.get("connection")

if connection is not None:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    url = os.environ.get("CATALOG_DATABASE_URL") or config.get_main_option("sqlalchemy.url")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
