"""Command line: ``iceberg-catalog serve``, ``migrate``, ``grants``, and the commands for people of
``catalog/cli/`` (``namespaces``, ``tables``, ``views``: ``browse.py``; ``tables dropped|undrop|end-retention``:
``dropped.py``; ``doctor``: ``doctor.py``; ``maintenance``: ``maintenance.py``);
also ``python -m catalog``.

Flags override ``CATALOG_*`` environment variables; they are passed to the server processes through
the environment, so several uvicorn workers all see the same settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from catalog import __version__
from catalog.cli import browse, doctor, dropped, maintenance
from catalog.cli import events as events_cli
from catalog.cli import migrate as migrate_cli
from catalog.cli import warehouses as warehouses_cli
from catalog.server.flags import FLAGS as _FLAGS

if TYPE_CHECKING:
    from catalog.settings import Settings

# The server's modules (startup: SQLAlchemy, Alembic, pydantic, ...) are imported only by the commands
# that use them (serve, migrate, grants): --help and the commands that talk to a running server over
# HTTP start without them (tests/test_cli.py holds this; `python -m bench.cli` times it).


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="iceberg-catalog", description="Apache Iceberg REST catalog server")
    parser.add_argument("--version", action="version", version=f"iceberg-catalog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the REST catalog server")
    for field, flag in _FLAGS.items():
        serve.add_argument(flag, dest=field, help=f"overrides CATALOG_{field.upper()}")
    mig = sub.add_parser("migrate", help="migrate the database schema (to head by default) and exit")
    mig.add_argument("--database-url", dest="database_url")
    mig.add_argument("--revision", default="head", help="target revision (head, base, or an id)")
    mig.add_argument("--downgrade", action="store_true", help="migrate down to --revision (asks for confirmation)")
    mig.add_argument("--yes", action="store_true", help="downgrade without asking (scripts)")
    grants = sub.add_parser(
        "grants", help="list, add and remove grants (authorization), directly in the database", description=_GRANTS
    )
    grants.add_argument("action", choices=["list", "add", "remove", "check-bootstrap"])
    grants.add_argument("--database-url", dest="database_url")
    grants.add_argument("--principal", help="user:<name>, client:<id> or role:<name>")
    grants.add_argument("--privilege", action="append", help="read, write, alter, ..., admin (repeatable)")
    grants.add_argument(
        "--on",
        action="append",
        help="catalog | warehouse=w | namespace=a.b | table=a.b.t | view=a.b.v; with warehouse=w beside a "
        "namespace, table or view (--on warehouse=w --on table=a.b.t): that warehouse's object",
    )
    grants.add_argument("--id", type=int, help="the grant to remove")
    grants.add_argument("--file", help="a bootstrap file to check (check-bootstrap)")
    tables, client = browse.register(sub)
    dropped.register(tables, client)
    doctor.register(sub)
    maintenance.register(sub)
    events_cli.register(sub)
    warehouses_cli.register(sub)
    args = parser.parse_args(argv)
    if args.command == "tables" and args.action in dropped.ACTIONS:
        return dropped.run(args)
    if args.command in browse.COMMANDS:
        return browse.run(args)
    if args.command == "doctor":
        return doctor.run(args)
    if args.command == "maintenance":
        return maintenance.run(args)
    if args.command == "events":
        return events_cli.run(args)
    if args.command == "warehouses":
        return warehouses_cli.run(args)
    from pydantic import ValidationError

    from catalog import logs
    from catalog.server import startup
    from catalog.settings import Settings

    for field in _FLAGS:
        value = getattr(args, field, None)
        if value is not None:
            os.environ[f"CATALOG_{field.upper()}"] = str(value)
    try:
        settings = Settings()
    except ValidationError as e:  # one line per setting, naming its variable and flag
        _traceback_if_debug()
        for line in startup.invalid(e):
            print(f"iceberg-catalog: configuration error: {line}", file=sys.stderr)
        return 2
    logs.configure(settings.log_level, settings.log_format)
    if args.command in ("migrate", "grants"):
        import sqlalchemy.exc

        try:
            if args.command == "migrate":
                return _migrate(settings, args.revision, args.downgrade, args.yes)
            return _grants(settings, args)
        except sqlalchemy.exc.OperationalError as e:  # the database cannot be reached: one line, like serve
            _traceback_if_debug()
            print(f"iceberg-catalog: {startup.unreachable(settings, e)}", file=sys.stderr)
            return 2
    from catalog.settings import ConfigurationError

    try:
        startup.check_settings(settings)  # here too, so that a refusal is one line, not a traceback per worker
    except ConfigurationError as e:
        print(f"iceberg-catalog: configuration error: {e}", file=sys.stderr)
        return 2
    if settings.authz_bootstrap:  # refuse a broken policy file before serving, in one line
        from catalog.auth.grants import read_bootstrap

        try:
            read_bootstrap(settings.authz_bootstrap)
        except ValueError as e:
            print(f"iceberg-catalog: {e}", file=sys.stderr)
            return 2
    try:
        return _serve(settings)
    except startup.Refused as e:
        _traceback_if_debug()
        print(f"iceberg-catalog: {e}", file=sys.stderr)
        return 2


def _traceback_if_debug() -> None:
    """With --log-level debug (or CATALOG_LOG_LEVEL=debug), a refusal shows its traceback too."""
    if os.environ.get("CATALOG_LOG_LEVEL", "").lower() == "debug" and sys.exc_info()[0] is not None:
        import traceback

        traceback.print_exc()


_GRANTS = """Grants give a principal (user:<name> for an identity provider's user, client:<id> for a
built-in client of CATALOG_OAUTH_CLIENTS, or role:<name> for a group/role in its token) a privilege
on the catalog (every warehouse), a warehouse (everything in it), a namespace (inherited below it), a
table or a view. Privileges: read, write, alter,
manage-properties, create, drop, purge, register, manage-grants, admin. Running servers see a change
within CATALOG_AUTHZ_CACHE_SECONDS. Examples:
  iceberg-catalog grants add --principal role:platform --privilege admin --on catalog
  iceberg-catalog grants add --principal client:ingest --privilege write --on table=raw.events
  iceberg-catalog grants add --principal role:team-a --privilege admin --on warehouse=team-a
  iceberg-catalog grants add --principal role:bi --privilege read --on warehouse=team-a --on table=sales.orders
  iceberg-catalog grants list --principal client:ingest
  iceberg-catalog grants remove --id 7"""


def _grants(settings: Settings, args: argparse.Namespace) -> int:
    import json

    from catalog import errors
    from catalog.auth import policy
    from catalog.auth.grants import read_bootstrap
    from catalog.auth.tokens import parse_clients
    from catalog.store.db import create_engine
    from catalog.store.grant_rows import GrantRows
    from catalog.store.sql import Database
    from catalog.store.warehouse_rows import WarehouseRows

    try:
        if args.action == "check-bootstrap":
            found = read_bootstrap(args.file or settings.authz_bootstrap or "")
            print(f"{len(found)} grants")
            return 0
        engine = create_engine(settings)
        grants = GrantRows(Database(engine))  # the one part of the store this command uses
        if args.action == "list":
            for g in sorted(grants.list_grants(), key=lambda g: g.id or 0):
                if args.principal in (None, g.principal):
                    print(json.dumps(g.to_json()))
        elif args.action == "add":
            if not (args.principal and args.privilege and args.on):
                raise errors.BadRequest("grants add needs --principal, --privilege and --on")
            target = policy.parse_target(_grant_object(args.on))
            where = target.where()[0]
            known = where is None or where in settings.default_warehouse_names
            if not known and WarehouseRows(engine).get(where) is None:
                raise errors.NoSuchWarehouse.named(where)
            wanted = [
                policy.Grant(policy.parse_principal(args.principal), policy.parse_privilege(p), target)
                for p in args.privilege
            ]
            policy.refuse_ambiguous(wanted, parse_clients(settings.oauth_clients))
            for g in grants.add_grants(wanted):
                print(json.dumps(g.to_json()))
        elif args.action == "remove":
            if args.id is None:
                raise errors.BadRequest("grants remove needs --id")
            removed = grants.delete_grant(args.id)
            if removed is None:
                raise errors.NotFound(f"no grant with id {args.id}")
            print(json.dumps(removed.to_json()))
        engine.dispose()
    except (errors.IcebergError, ValueError) as e:
        print(f"iceberg-catalog grants: {getattr(e, 'message', e)}", file=sys.stderr)
        return 2
    return 0


def _grant_object(on: list[str]) -> object:
    """``--on`` as a grant object: ``catalog``, or the ``kind=name`` pairs as one mapping (checked by
    ``policy.parse_target``: ``warehouse=w`` alone, or beside one namespace, table or view)."""
    if on == ["catalog"]:
        return "catalog"
    pairs = [item.partition("=") for item in on]
    found = {kind: name for kind, _, name in pairs}
    return found if len(found) == len(pairs) else None


def _migrate(settings: Settings, revision: str, down: bool, yes: bool = False) -> int:
    from catalog.store import migrate
    from catalog.store.db import create_engine

    engine = create_engine(settings)
    if down:
        current = ", ".join(sorted(migrate.current(engine))) or "base"
        refused = migrate_cli.confirm_downgrade(engine.url.render_as_string(hide_password=True), current, revision, yes)
        if refused is not None:
            engine.dispose()
            return refused
    (migrate.downgrade if down else migrate.upgrade)(engine, revision)
    print(f"database migrated to {revision}: {engine.url.render_as_string(hide_password=True)}")
    engine.dispose()
    return 0


def _serve(settings: Settings) -> int:
    """Bind the port, then migrate, then start the workers: a busy port fails before the database is
    touched, and a database that cannot be reached is one line (``startup``), in the parent process."""
    import shutil
    import tempfile

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from catalog import logs
    from catalog.server import startup
    from catalog.server.connections import BoundedHttpProtocol

    # One process answers /metrics from its own registry; several get a fresh directory below.
    # (Before anything imports prometheus-client, which reads this variable once.)
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    max_connections = _fit_connections(settings.max_connections)
    # The protocol reads its limits from the environment in each worker process: pass the lowered cap.
    os.environ["CATALOG_MAX_CONNECTIONS"] = str(max_connections)
    if settings.token_secret is None:  # one page-token key for all the workers (catalog/api/paging.py)
        import secrets

        from catalog.api.paging import SHARED_KEY_ENV

        os.environ.setdefault(SHARED_KEY_ENV, secrets.token_hex(32))
    sock = startup.listen(settings)
    startup.prepare_warehouse(settings)
    startup.prepare_database(settings)
    if settings.warehouses_file:  # checked here, in one line; applied (and probed) by each worker at start
        from catalog.server.warehouses import read_file

        try:
            read_file(settings.warehouses_file, settings)
        except ValueError as e:
            raise startup.Refused(str(e)) from None
    config = uvicorn.Config(
        "catalog.server.app:app_from_env",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level,
        # Applied by uvicorn in this process and first thing in every worker process: JSON everywhere.
        log_config=logs.dict_config(settings.log_level, settings.log_format),
        access_log=False,  # the access lines are catalog.access's (app.RequestObservation)
        # The peer is the client: X-Forwarded-For is read only from CATALOG_TRUSTED_PROXIES (auth/lockout.py),
        # not from any local peer as uvicorn's default would.
        proxy_headers=False,
        timeout_graceful_shutdown=30,
        # Deadlines for incomplete requests and the connection cap (uvicorn has neither): connections.py.
        http=BoundedHttpProtocol,
        ws="none",  # no WebSocket routes: an Upgrade request is served as plain HTTP
        # +1: uvicorn counts the connection asking among the open ones; it also bounds running requests.
        limit_concurrency=max_connections + 1,
        # Longer than clients' pooled-connection idle time: a server closing an idle keep-alive
        # connection just as a client reuses it makes the client see "connection aborted".
        timeout_keep_alive=settings.idle_timeout_seconds,
    )
    startup.announce(settings)
    if settings.workers == 1:
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
        return 0 if server.started else 1
    # Several workers: each writes its metrics into files in a fresh directory that /metrics, in
    # whichever worker serves it, adds up (prometheus-client's multiprocess mode, see metrics.py).
    try:
        shared = tempfile.mkdtemp(prefix="iceberg-catalog-metrics-")
    except OSError as e:
        raise startup.Refused(
            f"--workers {settings.workers} needs a writable temporary directory for the workers' metrics: {e} "
            "(set TMPDIR to one)"
        ) from e
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = shared
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    return 0


# Descriptors the process needs besides client connections: database pool, storage clients, logs...
_FD_RESERVE = 256


def _fit_connections(wanted: int) -> int:
    """Raise the soft open-file limit to the hard one, and lower the connection cap so that the
    connections, plus what the process needs besides, fit in it: refusing a connection with a 503 is
    better than failing accept() or a database connection with EMFILE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:  # e.g. an unlimited hard limit some systems refuse
            logging.getLogger("catalog").warning("could not raise the open-file limit to %s: %s", hard, e)
    if soft == resource.RLIM_INFINITY or wanted + _FD_RESERVE <= soft:
        return wanted
    fitted = max(1, soft - _FD_RESERVE)
    logging.getLogger("catalog").warning(
        "max_connections %d does not fit the open-file limit %d: serving at most %d", wanted, soft, fitted
    )
    return fitted


if __name__ == "__main__":
    sys.exit(main())
