"""``iceberg-catalog maintenance``: the catalog's own table maintenance.

- ``run NS.TABLE [--kind K ...] [--dry-run] [--wait]``, ``status [NS.TABLE]`` (queued and running
  tasks) and ``history [NS.TABLE]`` (finished ones; of a dropped or purged table too, its purge
  last) talk to a RUNNING server over its management API
  (``/management/v1/maintenance``), with the same ``--uri``/``--token``/``--credential``/``--warehouse``
  as the browse commands.
- ``worker`` runs table maintenance in this process, on the LOCAL configuration (``CATALOG_*`` variables,
  as ``serve`` reads them): for the default warehouse and every created one (those created later
  within seconds, ``server.maintenance``), ``CATALOG_MAINTENANCE_WORKERS`` threads (at least one) and a
  scheduler each, until interrupted. For deployments that keep maintenance off the request-serving
  replicas (``CATALOG_MAINTENANCE_WORKERS=0`` there).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any
from urllib.parse import quote

from catalog.cli.browse import Output
from catalog.cli.common import CliError, Management, connection_options, first_line
from catalog.names import dotted

KINDS = ("expire-snapshots", "remove-orphans", "rewrite-manifests", "rewrite-data-files")
WAIT_SECONDS = 600.0


def register(sub: argparse._SubParsersAction) -> None:
    client = connection_options()
    top = sub.add_parser("maintenance", help="the catalog's own table maintenance: run it now, see what it did")
    actions = top.add_subparsers(dest="action", required=True)
    run = actions.add_parser("run", parents=[client], help="run table maintenance on a table now")
    run.add_argument("table", help="namespace.table")
    run.add_argument("--kind", action="append", choices=KINDS, help="only this kind (repeatable; default: all)")
    run.add_argument("--dry-run", action="store_true", help="report what would be removed; remove nothing")
    run.add_argument("--wait", action="store_true", help="return when the tasks finished, with what each did")
    run.add_argument(
        "--writer-grace",
        type=float,
        metavar="SECONDS",
        help="this run's writer grace (snapshot expiry) and quiet period (compaction), e.g. 0 to apply a "
        "policy just set; needs admin on the table (default: the server's and the table's)",
    )
    for name, text in (("status", "queued and running tasks"), ("history", "finished tasks, newest first")):
        p = actions.add_parser(name, parents=[client], help=text)
        p.add_argument("table", nargs="?", help="namespace.table (default: every table you may read)")
        p.add_argument("--limit", type=int, default=50)
    actions.add_parser("worker", help="run table maintenance in this process (local configuration), until stopped")


def run(args: argparse.Namespace) -> int:
    if args.action == "worker":
        return _worker()
    out = Output(args.json)
    try:
        session = Management.connect(args)
        if args.action == "run":
            return _run(session, args, out)
        return _list(session, args, out, ("queued", "running") if args.action == "status" else ("done", "failed"))
    except CliError as e:
        print(f"iceberg-catalog maintenance {args.action}: {e}", file=sys.stderr)
        return e.status


def _split(name: str) -> tuple[tuple[str, ...], str]:
    parts = name.split(".")
    if len(parts) < 2 or not all(parts):
        raise CliError(f"{name!r} is not a table (expected namespace.table)", 2)
    return tuple(parts[:-1]), parts[-1]


def _run(session: Management, args: argparse.Namespace, out: Output) -> int:
    ns, name = _split(args.table)
    path = f"/management/v1/maintenance/tables/{quote(chr(0x1F).join(ns), safe='')}/{quote(name, safe='')}"
    body: dict[str, Any] = {"kinds": args.kind or list(KINDS), "dry-run": args.dry_run}
    if args.writer_grace is not None:
        body["writer-grace-seconds"] = args.writer_grace
    tasks = session.call("POST", path, json=body)["tasks"]
    if args.wait:
        deadline = time.monotonic() + WAIT_SECONDS
        while any(t["state"] in ("queued", "running") for t in tasks):
            if time.monotonic() > deadline:
                raise CliError(f"tasks still running after {WAIT_SECONDS:.0f} s: see `maintenance status`")
            time.sleep(0.5)
            tasks = [session.call("GET", f"/management/v1/maintenance/tasks/{t['id']}") for t in tasks]
    _show(tasks, out, f"Maintenance of {args.table}")
    return 1 if any(t["state"] == "failed" for t in tasks) else 0


def _list(session: Management, args: argparse.Namespace, out: Output, states: tuple[str, ...]) -> int:
    params: dict[str, Any] = {"state": ",".join(states), "limit": args.limit}
    if args.table:
        ns, name = _split(args.table)
        params.update(namespace=dotted(ns), table=name)
    tasks = session.call("GET", "/management/v1/maintenance/tasks", params=params)["tasks"]
    _show(tasks, out, "Maintenance tasks")
    return 0


def _show(tasks: list[dict[str, Any]], out: Output, title: str) -> None:
    rows = [
        [
            t["id"],
            dotted(t["namespace"], t["table"]),
            t["kind"] + (" (dry run)" if t.get("dry-run") else ""),
            t["state"],
            t["attempts"],
            _what(t),
        ]
        for t in tasks
    ]
    out.rows(title, ["id", "table", "kind", "state", "attempts", "result"], rows, {"tasks": tasks})


def _what(task: dict[str, Any]) -> str:
    """The result column: never blank. A finished task's summary (the server words it:
    ``maintenance/explain.py``), else what the task is waiting for."""
    state, error = task["state"], task.get("last-error")
    if state == "failed":
        return f"error: {error}"
    if state == "queued":
        waiting = "already queued (with its own options)" if task.get("created") is False else "waiting for a worker"
        return f"{waiting}; last attempt failed: {error}" if error else waiting
    if state == "running":
        return "running"
    result = task.get("result") or {}
    if "summary" in result:
        return str(result["summary"])
    # a result from a server before summaries: its counts as they are
    counts = [f"{k} {v}" for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return ", ".join(counts) or "done"


def _worker() -> int:
    from catalog import logs
    from catalog.server.app import build_catalog
    from catalog.server.background import Cared, start_parts
    from catalog.server.warehouses import Registry
    from catalog.settings import Settings

    settings = Settings()
    logs.configure(settings.server.log_level, settings.server.log_format)
    threads = max(1, settings.maintenance.maintenance_workers)
    try:
        catalog = build_catalog(settings, migrated=settings.database.is_sqlite or settings.database.auto_migrate)
    except Exception as e:  # noqa: BLE001 - one line, like serve
        print(f"iceberg-catalog maintenance worker: {first_line(e)}", file=sys.stderr)
        return 2

    def open_warehouse(of: Settings, name: str) -> tuple[Cared, list[Any]]:
        opened = build_catalog(of)
        return Cared(opened), start_parts(opened, name, threads)

    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    parts = start_parts(catalog, None, threads)  # the default warehouse: its maintenance, its change events
    warehouses = Registry(settings, Cared(catalog), open_warehouse)  # every created one, as they come and go
    warehouses.start()
    print(f"iceberg-catalog maintenance worker: {threads} threads per warehouse; stop with Ctrl-C", file=sys.stderr)
    stopped.wait()
    warehouses.stop()
    for part in reversed(parts):
        part.stop()
    catalog.close()
    return 0
