"""``iceberg-catalog grants list|add|remove|check-bootstrap``: grants (authorization), directly in the
database (a running server sees a change within ``CATALOG_AUTHZ_CACHE_SECONDS``)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from catalog.cli import local

if TYPE_CHECKING:
    from catalog.settings import Settings

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


def register(sub: argparse._SubParsersAction) -> None:
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


def run(args: argparse.Namespace) -> int:
    settings = local.settings_from(args)
    if isinstance(settings, int):
        return settings
    return local.on_the_database(settings, lambda: _grants(settings, args))


def _grants(settings: Settings, args: argparse.Namespace) -> int:
    import json

    from catalog import errors
    from catalog.auth import policy
    from catalog.auth.grants import read_bootstrap
    from catalog.auth.tokens import parse_clients
    from catalog.database.db import create_engine
    from catalog.database.grant_rows import GrantRows
    from catalog.database.sql import Database
    from catalog.database.warehouse_rows import WarehouseRows

    try:
        if args.action == "check-bootstrap":
            found = read_bootstrap(args.file or settings.auth.authz_bootstrap or "")
            print(f"{len(found)} grants")
            return 0
        engine = create_engine(settings.database)
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
            known = where is None or where in settings.warehouses.default_warehouse_names
            if not known and WarehouseRows(engine).get(where) is None:
                raise errors.NoSuchWarehouse.named(where)
            wanted = [
                policy.Grant(policy.parse_principal(args.principal), policy.parse_privilege(p), target)
                for p in args.privilege
            ]
            policy.refuse_ambiguous(wanted, parse_clients(settings.auth.oauth_clients))
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
