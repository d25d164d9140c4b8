"""Command line: ``iceberg-catalog serve``, ``migrate``, ``grants``, and the commands for people of
``catalog/cli.py`` (``namespaces``, ``tables``, ``views``, ``doctor``); also ``python -m catalog``.

Flags override ``CATALOG_*`` environment variables; they are passed to the server processes through
the environment, so several uvicorn workers all see the same settings.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from . import cli, logs
from .settings import Settings

_FLAGS = {
    "database_url": "--database-url",
    "warehouse": "--warehouse",
    "host": "--host",
    "port": "--port",
    "workers": "--workers",
    "log_level": "--log-level",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="iceberg-catalog", description="Apache Iceberg REST catalog server")
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
    grants.add_argument("--principal", help="user:<name> or role:<name>")
    grants.add_argument("--privilege", action="append", help="read, write, alter, ..., admin (repeatable)")
    grants.add_argument("--on", help="catalog | namespace=a.b | table=a.b.t | view=a.b.v")
    grants.add_argument("--id", type=int, help="the grant to remove")
    grants.add_argument("--file", help="a bootstrap file to check (check-bootstrap)")
    cli.register(sub)
    args = parser.parse_args(argv)
    if args.command in cli.COMMANDS:
        return cli.run(args)

    for field in _FLAGS:
        value = getattr(args, field, None)
        if value is not None:
            os.environ[f"CATALOG_{field.upper()}"] = str(value)
    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)
    if args.command == "migrate":
        return _migrate(settings, args.revision, args.downgrade, args.yes)
    if args.command == "grants":
        return _grants(settings, args)
    from .identity import ConfigurationError, check_settings

    try:
        check_settings(settings)  # here too, so that a refusal is one line, not a traceback per worker
    except ConfigurationError as e:
        print(f"iceberg-catalog: configuration error: {e}", file=sys.stderr)
        return 2
    if settings.authz_bootstrap:  # refuse a broken policy file before serving, in one line
        from .access import read_bootstrap

        try:
            read_bootstrap(settings.authz_bootstrap)
        except ValueError as e:
            print(f"iceberg-catalog: {e}", file=sys.stderr)
            return 2
    return _serve(settings)


_GRANTS = """Grants give a principal (user:<name>, or role:<name> for a group/role in its token) a privilege
on the catalog, a namespace (inherited below it), a table or a view. Privileges: read, write, alter,
manage-properties, create, drop, purge, register, manage-grants, admin. Running servers see a change
within CATALOG_AUTHZ_CACHE_SECONDS. Examples:
  iceberg-catalog grants add --principal role:platform --privilege admin --on catalog
  iceberg-catalog grants add --principal user:ingest --privilege write --on table=raw.events
  iceberg-catalog grants list --principal user:ingest
  iceberg-catalog grants remove --id 7"""


def _grants(settings: Settings, args: argparse.Namespace) -> int:
    import json

    from . import authz, errors
    from .access import read_bootstrap
    from .db import create_engine
    from .store import Store

    try:
        if args.action == "check-bootstrap":
            found = read_bootstrap(args.file or settings.authz_bootstrap or "")
            print(f"{len(found)} grants")
            return 0
        store = Store(create_engine(settings))
        if args.action == "list":
            for g in sorted(store.list_grants(), key=lambda g: g.id or 0):
                if args.principal in (None, g.principal):
                    print(json.dumps(g.to_json()))
        elif args.action == "add":
            if not (args.principal and args.privilege and args.on):
                raise errors.BadRequest("grants add needs --principal, --privilege and --on")
            kind, _, name = args.on.partition("=")
            target = authz.parse_target(kind if kind == "catalog" else {kind: name})
            wanted = [
                authz.Grant(authz.parse_principal(args.principal), authz.parse_privilege(p), target)
                for p in args.privilege
            ]
            for g in store.add_grants(wanted):
                print(json.dumps(g.to_json()))
        elif args.action == "remove":
            if args.id is None:
                raise errors.BadRequest("grants remove needs --id")
            removed = store.delete_grant(args.id)
            if removed is None:
                raise errors.NotFound(f"no grant with id {args.id}")
            print(json.dumps(removed.to_json()))
        store.engine.dispose()
    except (errors.IcebergError, ValueError) as e:
        print(f"iceberg-catalog grants: {getattr(e, 'message', e)}", file=sys.stderr)
        return 2
    return 0


def _migrate(settings: Settings, revision: str, down: bool, yes: bool = False) -> int:
    from . import migrate
    from .db import create_engine

    engine = create_engine(settings)
    if down:
        current = ", ".join(sorted(migrate.revisions(engine)[0])) or "base"
        refused = cli.confirm_downgrade(engine.url.render_as_string(hide_password=True), current, revision, yes)
        if refused is not None:
            engine.dispose()
            return refused
    (migrate.downgrade if down else migrate.upgrade)(engine, revision)
    print(f"database migrated to {revision}: {engine.url.render_as_string(hide_password=True)}")
    engine.dispose()
    return 0


def _serve(settings: Settings) -> int:
    import uvicorn

    from .connections import BoundedHttpProtocol

    max_connections = _fit_connections(settings.max_connections)
    # The protocol reads its limits from the environment in each worker process: pass the lowered cap.
    os.environ["CATALOG_MAX_CONNECTIONS"] = str(max_connections)
    uvicorn.run(
        "catalog.app:app_from_env",
        factory=True,
        host=settings.host,
        port=settings.port,
        workers=settings.workers,
        log_level=settings.log_level.lower(),
        log_config=None,  # keep our (JSON) handler for uvicorn's loggers too
        access_log=False,
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
