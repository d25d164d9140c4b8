"""``iceberg-catalog migrate``: the database schema to head (or ``--revision``), and exit; a downgrade
says what it will do and asks before it runs."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from catalog.cli import local

if TYPE_CHECKING:
    from catalog.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    mig = sub.add_parser("migrate", help="migrate the database schema (to head by default) and exit")
    mig.add_argument("--database-url", dest="database_url")
    mig.add_argument("--revision", default="head", help="target revision (head, base, or an id)")
    mig.add_argument("--downgrade", action="store_true", help="migrate down to --revision (asks for confirmation)")
    mig.add_argument("--yes", action="store_true", help="downgrade without asking (scripts)")


def run(args: argparse.Namespace) -> int:
    settings = local.settings_from(args)
    if isinstance(settings, int):
        return settings
    return local.on_the_database(settings, lambda: _migrate(settings, args.revision, args.downgrade, args.yes))


def _migrate(settings: Settings, revision: str, down: bool, yes: bool = False) -> int:
    from catalog.database import migrate
    from catalog.database.db import create_engine

    engine = create_engine(settings.database)
    if down:
        current = ", ".join(sorted(migrate.current(engine))) or "base"
        refused = confirm_downgrade(engine.url.render_as_string(hide_password=True), current, revision, yes)
        if refused is not None:
            engine.dispose()
            return refused
    (migrate.downgrade if down else migrate.upgrade)(engine, revision)
    print(f"database migrated to {revision}: {engine.url.render_as_string(hide_password=True)}")
    engine.dispose()
    return 0


def confirm_downgrade(where: str, current: str, revision: str, yes: bool) -> int | None:
    """None to go ahead; otherwise the exit status of a refusal (printed here)."""
    what = (
        "drops EVERY catalog table (namespaces, tables, views, grants; the warehouse files stay)"
        if revision == "base"
        else "may drop columns and tables added by later revisions"
    )
    plan = f"downgrade {where} from {current} to {revision}: this {what}"
    if yes:
        return None
    if not sys.stdin.isatty():
        print(
            f"iceberg-catalog migrate: refusing to {plan}, without confirmation (stdin is not a terminal): pass --yes",
            file=sys.stderr,
        )
        return 2
    print(f"About to {plan}.", file=sys.stderr)
    try:
        if revision == "base":
            answer = input("Type 'base' to confirm: ").strip()
            ok = answer == "base"
        else:
            answer = input("Continue? [y/N] ").strip().lower()
            ok = answer in ("y", "yes")
    except EOFError:
        ok = False
    if not ok:
        print("iceberg-catalog migrate: not confirmed; nothing changed", file=sys.stderr)
        return 2
    return None
