"""CPU per request without sockets or clients: ``python -m bench.inprocess load|commit|props``.

On a shared 2-core machine the HTTP scenarios' throughput moves by +-20% between neighbouring
windows; a change worth 10 us per request drowns in that. This measures the server's own CPU per
operation (``time.process_time``) in one process, with nothing else in it:

- ``load``: the whole ASGI app (the raw-path router and every middleware, as uvicorn calls it, minus
  the socket), GET of a 50-column table, 5 x N requests;
- ``load-warehouses``: the same on a server with 3 created warehouses (local directories), a table
  in each, loaded round-robin through their prefixes (``/v1/team-1/...``): what several warehouses
  cost a load;
- ``commit``: the commit engine (``Catalog.commit``, no HTTP): appends round-robin over 100 tables;
- ``props``: the commit engine: ``set-properties`` on one table, its metadata log at its maximum.

``--src DIR`` (repeatable) measures other source trees (e.g. ``git archive <ref> | tar -x -C DIR``),
each in its own process, alternately, ``--rounds`` times; the default is this tree. Several kinds
(``load load-warehouses``) alternate the same way. The log level is
the default (info) unless ``--level``. Writes its logs and files to a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__.splitlines()[0])
    parser.add_argument("kind", nargs="+", choices=("load", "load-warehouses", "commit", "props"))
    parser.add_argument("--src", action="append", default=[], help="source tree to measure (repeatable)")
    parser.add_argument("--n", type=int, default=2000, help="operations per measurement (default 2000)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations over the sources (default 2)")
    parser.add_argument("--level", default="info", help="log level (default: the server's default, info)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_measure(args.kind[0], args.n, args.level)))
        return 0
    sources = args.src or [str(ROOT)]
    results: dict[tuple[str, str], list[float]] = {(k, s): [] for s in sources for k in args.kind}
    for _ in range(args.rounds):
        for kind, src in results:
            env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}"}
            cmd = [sys.executable, "-m", "bench.inprocess", kind, "--child", "--n", str(args.n)]
            out = subprocess.run([*cmd, "--level", args.level], env=env, cwd=ROOT, capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            results[kind, src] += json.loads(out.stdout.strip().splitlines()[-1])
    for (kind, src), values in results.items():
        runs = sorted(round(v) for v in values)
        print(f"{kind} {src}: CPU per op median {statistics.median(values):.1f} us, runs {runs}")
    return 0


def _measure(kind: str, n: int, level: str) -> list[float]:
    tmp = tempfile.mkdtemp(prefix="catalog-inprocess-")
    os.environ.update(
        {
            "CATALOG_DATABASE_URL": f"sqlite:///{tmp}/catalog.db",
            "CATALOG_WAREHOUSE": f"{tmp}/warehouse",
            "CATALOG_MAINTENANCE_WORKERS": "0",
            "CATALOG_LOG_FORMAT": "json",
            "CATALOG_LOG_LEVEL": level,
        }
    )
    log = open(f"{tmp}/server.log", "w")  # noqa: SIM115 - the process's stderr until it exits
    os.dup2(log.fileno(), 2)
    if kind.startswith("load"):
        return asyncio.run(_loads(n, kind == "load-warehouses", Path(tmp)))
    return _commits(kind, n)


def _timed(fn, n: int, rounds: int = 5) -> list[float]:
    out = []
    for _ in range(rounds):
        t = time.process_time()
        for _ in range(n):
            fn()
        out.append((time.process_time() - t) / n * 1e6)
    return out


async def _loads(n: int, warehouses: bool, tmp: Path) -> list[float]:

    try:
        from catalog.server.app import app_from_env
    except ImportError:  # trees before the server/ folder (wave 1)
        from catalog.app import app_from_env  # type: ignore[no-redef]
    app = app_from_env()
    queue: asyncio.Queue = asyncio.Queue()
    await queue.put({"type": "lifespan.startup"})
    started = asyncio.get_running_loop().create_future()

    async def lifespan_send(message: dict) -> None:
        if message["type"] == "lifespan.startup.complete":
            started.set_result(True)

    lifespan = asyncio.create_task(
        app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, queue.get, lifespan_send)
    )
    await started

    async def call(method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
            "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"host", b"bench"), (b"content-length", str(len(body)).encode())],
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {},
        }  # fmt: skip
        sent, answer = False, {"status": 0, "body": b""}

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"] += message.get("body", b"")

        await app(scope, receive, send)
        return answer["status"], answer["body"]

    prefixes = [f"team-{i}" for i in range(1, 4)] if warehouses else [""]
    for prefix in filter(None, prefixes):
        doc = {"name": prefix, "location": str(tmp / prefix)}
        status, data = await call("POST", "/management/v1/warehouses", json.dumps(doc).encode())
        assert status == 201, data
    paths = [await _load_table(call, prefix) for prefix in prefixes]
    out = []
    for _ in range(5):
        t = time.process_time()
        for k in range(n):
            status, _ = await call("GET", paths[k % len(paths)])
            assert status == 200
        out.append((time.process_time() - t) / n * 1e6)
    lifespan.cancel()
    return out


async def _load_table(call, prefix: str) -> str:
    """Namespace ``bench`` and a 50-column table of 10 snapshots in warehouse ``prefix``: its path."""
    from bench import wire

    base = f"/v1/{prefix + '/' if prefix else ''}namespaces"
    await call("POST", base, json.dumps({"namespace": [wire.NS]}).encode())
    status, data = await call("POST", f"{base}/{wire.NS}/tables", wire.create_table_body("load", 50))
    assert status == 200, data
    location, path, head = json.loads(data)["metadata"]["location"], wire.table_path("load", prefix), None
    for seq in range(1, 11):
        sid = wire.new_snapshot_id()
        status, data = await call("POST", path, wire.append_body(location, [sid], head, seq))
        assert status == 200, data
        head = sid
    return path


def _commits(kind: str, n: int) -> list[float]:
    import orjson

    from bench import wire
    from catalog import logs
    from catalog.server.app import build_catalog
    from catalog.settings import Settings
    from catalog.usecases import TABLE, Change

    settings = Settings()
    logs.configure(settings.server.log_level, "json")
    catalog = build_catalog(settings, migrated=True)
    catalog.create_namespace((wire.NS,), {})
    tables = []
    for i in range(100 if kind == "commit" else 1):
        body = orjson.loads(wire.create_table_body(f"w{i:03d}", 50))
        request = {k: body.get(k) for k in ("schema", "partition-spec", "write-order")}
        created = catalog.create_table((wire.NS,), body["name"], None, request | {"properties": {}})
        tables.append([body["name"], created.files[0].data["location"], None, 0])
    count = [0]

    def one() -> None:
        count[0] += 1
        if kind == "props":
            updates = [{"action": "set-properties", "updates": {f"w{count[0] % 16}": str(count[0])}}]
            catalog.commit([Change(TABLE, (wire.NS,), tables[0][0], [], updates)])
            return
        t = tables[count[0] % len(tables)]
        sid = wire.new_snapshot_id()
        body = orjson.loads(wire.append_body(t[1], [sid], t[2], t[3] + 1))
        catalog.commit([Change(TABLE, (wire.NS,), t[0], body["requirements"], body["updates"])])
        t[2], t[3] = sid, t[3] + 1

    for _ in range(200):  # warm: caches, the metadata log at its maximum (props)
        one()
    return _timed(one, n)


if __name__ == "__main__":
    sys.exit(main())
