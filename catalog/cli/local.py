"""What the commands that run on the server's own machine share (``serve``, ``migrate``, ``grants``): the
settings read from the environment and the flags, and refusals in one line.

Flags override ``CATALOG_*`` environment variables; they are passed to the server processes through
the environment, so several uvicorn workers all see the same settings. The server's modules
(SQLAlchemy, Alembic, pydantic, ...) are imported only when one of these commands runs: ``--help`` and
the commands that talk to a running server over HTTP start without them (tests/test_cli.py holds this).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

from catalog.server.flags import FLAGS

if TYPE_CHECKING:
    from catalog.settings import Settings


def settings_from(args: argparse.Namespace) -> Settings | int:
    """The settings, the command's flags applied over the environment; an exit status when they are
    invalid (each one printed on a line of its own, naming its variable and flag). Logging is set up."""
    from pydantic import ValidationError

    from catalog import logs
    from catalog.server import startup
    from catalog.settings import Settings

    for field in FLAGS:
        value = getattr(args, field, None)
        if value is not None:
            os.environ[f"CATALOG_{field.upper()}"] = str(value)
    try:
        settings = Settings()
    except ValidationError as e:
        traceback_if_debug()
        for line in startup.invalid(e):
            print(f"iceberg-catalog: configuration error: {line}", file=sys.stderr)
        return 2
    logs.configure(settings.server.log_level, settings.server.log_format)
    return settings


def on_the_database(settings: Settings, command) -> int:
    """Run ``command`` (it opens the database); a database that cannot be reached is one line, like serve."""
    import sqlalchemy.exc

    from catalog.server import startup

    try:
        return command()
    except sqlalchemy.exc.OperationalError as e:
        traceback_if_debug()
        print(f"iceberg-catalog: {startup.unreachable(settings, e)}", file=sys.stderr)
        return 2


def traceback_if_debug() -> None:
    """With --log-level debug (or CATALOG_LOG_LEVEL=debug), a refusal shows its traceback too."""
    if os.environ.get("CATALOG_LOG_LEVEL", "").lower() == "debug" and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc()
