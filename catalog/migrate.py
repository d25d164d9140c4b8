"""Schema migrations through Alembic, without an ini file: ``upgrade``, ``downgrade``, ``is_at_head``."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from alembic import command


def script_location() -> str:
    """The scripts ship in the wheel as ``catalog/_alembic``; in a checkout they are ``alembic/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
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


def is_at_head(engine: Engine) -> bool:
    heads = set(ScriptDirectory.from_config(_config(engine)).get_heads())
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads()) == heads


def revisions(engine: Engine) -> tuple[set[str], set[str]]:
    """(the database's current revisions, the scripts' heads): equal when migrated."""
    heads = set(ScriptDirectory.from_config(_config(engine)).get_heads())
    with engine.connect() as conn:
        return set(MigrationContext.configure(conn).get_current_heads()), heads
