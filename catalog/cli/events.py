"""``iceberg-catalog events tail [--follow]``: the change feed of a running server (``POST
/v1/events``), one line per event (or one JSON object per line with ``--json``), oldest first, with
the same ``--uri``/``--token``/``--credential``/``--warehouse`` as the other client commands.

  iceberg-catalog events tail                         # every event kept, then exit
  iceberg-catalog events tail --follow --from-now     # only what happens from now on, until Ctrl-C
  iceberg-catalog events tail --namespace sales --type update-table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from catalog.cli.common import CliError, Management, connection_options
from catalog.names import dotted

POLL_SECONDS = 1.0


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("events", help="the catalog's change events")
    actions = top.add_subparsers(dest="action", required=True)
    tail = actions.add_parser(
        "tail",
        help="print the change events, oldest first (--follow: keep printing)",
        parents=[connection_options()],
    )
    tail.add_argument("--follow", "-f", action="store_true", help="keep waiting for new events until Ctrl-C")
    tail.add_argument("--from-now", action="store_true", help="skip the events already there")
    tail.add_argument("--namespace", action="append", help="only this namespace (a.b) and below (repeatable)")
    tail.add_argument("--table", action="append", help="only this table or view, namespace.name (repeatable)")
    tail.add_argument("--type", action="append", help="only this operation type (repeatable)")


def run(args: argparse.Namespace) -> int:
    try:
        session = Management.connect(args)
        return _tail(session, args)
    except CliError as e:
        print(f"iceberg-catalog events {args.action}: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 0


def _tail(session: Management, args: argparse.Namespace) -> int:
    query: dict[str, Any] = {"page-size": 500}
    names = [n.split(".") for n in (args.namespace or [])] + [n.split(".") for n in (args.table or [])]
    if names:
        query["catalog-objects-by-name"] = names
    if args.type:
        query["operation-types"] = args.type
    token = None
    skipping = args.from_now
    while True:
        page = session.call(
            "POST", session.v1("/events"), json={**query, **({"continuation-token": token} if token else {})}
        )
        if not skipping:
            for event in page["events"]:
                print(json.dumps(event) if args.json else line(event), flush=True)
        token = page["next-page-token"]
        if not page["events"]:
            skipping = False
            if not args.follow:
                return 0
            time.sleep(POLL_SECONDS)


def line(event: dict[str, Any]) -> str:
    """``<sequence> <time> <operation-type> <object> <details>`` for people."""
    op = event["operation"]
    ident = op.get("identifier")
    target = dotted(ident["namespace"], ident["name"]) if ident else dotted(op.get("namespace") or [])
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(event["timestamp-ms"] / 1000))
    details = []
    if op.get("added-snapshot-ids"):
        details.append(f"+{len(op['added-snapshot-ids'])} snapshot(s)")
    if op.get("removed-snapshot-ids"):
        details.append(f"-{len(op['removed-snapshot-ids'])} snapshot(s)")
    if op.get("snapshot-operation"):
        details.append(op["snapshot-operation"])
    if op.get("destination"):
        dest = op["destination"]
        details.append("-> " + dotted(dest["namespace"], dest["name"]))
    return f"{event['sequence']} {when} {op['operation-type']} {target} {' '.join(details)}".rstrip()
