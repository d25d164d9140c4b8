"""Schema migrations through Alembic, without an ini file: ``upgrade``, ``downgrade``, ``is_at_head``."""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from alembic import command


def script_location() -> str:
    """The scripts ship in the wheel as ``catalog/_alembic``; in a checkout they are ``alembic/``."""
    package = Path(__file__).resolve().parent.parent  # catalog/
    for candidate in (package / "_alembic", package.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return str(candidate)
    raise RuntimeError("Alembic migration scripts not found")


def _config(engine: Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", script_location())
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False).replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    cfg = _config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    cfg = _config(engine)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


@functools.cache
def heads() -> frozenset[str]:
    """The scripts' head revisions (read once: they do not change while the process runs)."""
    return frozenset(ScriptDirectory(script_location()).get_heads())


def current(engine: Engine) -> frozenset[str]:
    """The database's revisions (none before the first migration). A plain query, not Alembic's
    MigrationContext, which logs two INFO lines per call (readiness runs this on every probe)."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return frozenset()
        return frozenset(row[0] for row in conn.execute(sa.text("SELECT version_num FROM alembic_version")))


def is_at_head(engine: Engine) -> bool:
    return current(engine) == heads()
