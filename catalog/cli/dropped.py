"""``iceberg-catalog tables dropped|undrop|end-retention``: dropped tables and views, kept for
``CATALOG_DROP_RETENTION``, over a RUNNING server's management API (``/management/v1/dropped``),
with the same ``--uri``/``--token``/``--credential``/``--warehouse`` as the browse commands.

- ``tables dropped [NAMESPACE]``: what is kept, most recently dropped first.
- ``tables undrop NS.NAME [--id ID]``: restore it under its name (the most recently dropped of that
  name, or the one with ``--id``).
- ``tables end-retention NS.NAME [--id ID]``: end its retention now: purged (dropped with purge) or
  released with its files kept (and its location held).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from catalog.cli.browse import Output
from catalog.cli.common import CliError, Management
from catalog.names import dotted

ACTIONS = ("dropped", "undrop", "end-retention")


def register(tables: argparse._SubParsersAction, client: argparse.ArgumentParser) -> None:
    p = tables.add_parser("dropped", parents=[client], help="dropped tables and views still kept (restorable)")
    p.add_argument("namespace", nargs="?", help="only this namespace (a.b)")
    p.add_argument("--limit", type=int, default=100)
    p = tables.add_parser("undrop", parents=[client], help="restore a dropped table or view under its name")
    p.add_argument("table", help="namespace.name")
    p.add_argument("--id", type=int, help="which one, when the name was dropped more than once (see `dropped`)")
    p = tables.add_parser(
        "end-retention", parents=[client], help="purge (if dropped with purge) or forget a dropped table now"
    )
    p.add_argument("table", help="namespace.name")
    p.add_argument("--id", type=int, help="which one, when the name was dropped more than once (see `dropped`)")


def run(args: argparse.Namespace) -> int:
    out = Output(args.json)
    try:
        api = Management.connect(args)
        if args.action == "dropped":
            params: dict[str, Any] = {"limit": args.limit}
            if args.namespace:
                params["namespace"] = args.namespace
            found = api.call("GET", "/management/v1/dropped", params=params)["dropped"]
            _show(found, out)
            return 0
        gone = _one(api, args.table, args.id)
        if args.action == "undrop":
            restored = api.call("POST", f"/management/v1/dropped/{gone['id']}/undrop")
            out.document(restored) if args.json else out.line(f"{args.table} is back ({restored['kind']})")
            return 0
        ended = api.call("DELETE", f"/management/v1/dropped/{gone['id']}")
        what = "its purge is queued (see `maintenance status`)" if ended["purge"] else "released, its files kept"
        out.document(ended) if args.json else out.line(f"{args.table}: {what}")
        return 0
    except CliError as e:
        print(f"iceberg-catalog tables {args.action}: {e}", file=sys.stderr)
        return e.status


def _one(api: Management, ident: str, wanted: int | None) -> dict[str, Any]:
    parts = ident.split(".")
    if len(parts) < 2 or not all(parts):
        raise CliError(f"{ident!r} is not a table or view (expected namespace.name)", 2)
    params = {"namespace": dotted(parts[:-1]), "name": parts[-1]}
    found = api.call("GET", "/management/v1/dropped", params=params)["dropped"]
    if wanted is not None:
        found = [d for d in found if d["id"] == wanted]
    if not found:
        raise CliError(f"no dropped table or view {ident}{f' with id {wanted}' if wanted is not None else ''}")
    return found[0]  # the most recently dropped


def _show(found: list[dict[str, Any]], out: Output) -> None:
    rows = [
        [
            d["id"],
            dotted(d["namespace"], d["name"]),
            d["kind"],
            _time(d["dropped-ms"]),
            _time(d["expires-ms"]),
            "purge" if d["purge"] else "forget (files kept)",
            d["state"],
        ]
        for d in found
    ]
    out.rows("Dropped", ["id", "name", "kind", "dropped", "until", "then", "state"], rows, {"dropped": found})


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
