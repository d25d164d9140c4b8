"""Several warehouses vs one (``--only warehouses``): issue 31's done-when, "no slower loadTable or
commit with several warehouses than with one (same run)".

Two servers of their own on the backend's services (``Backend.own_server``), at the default
settings (log level info included), identical but for their warehouses:

- ``one``: the default warehouse only; the clients use unprefixed paths (``/v1/namespaces/...``),
  as every client from before warehouses does;
- ``several``: the default and ``CREATED`` warehouses created through ``/management/v1/warehouses``
  (each a catalog with its own database: a SQLite file, or a PostgreSQL schema), the tables spread
  round-robin over the created ones, the clients selecting them by prefix (``/v1/<name>/...``).
  On ``sqlite`` the created warehouses are directories on local disk, as the default is; on
  ``postgres-s3`` they are prefixes of the same S3 bucket as the default (the same storage on
  both sides: local disk there would make ``several`` faster for the wrong reason).

Each server gets ``LOADERS`` load tables (10 snapshots, 50 columns, never committed to) and
``WRITERS`` append tables, the same names. Per round, on one server and then the other (the order
flipped each round, ``--rounds`` rounds, default 3): ``LOADERS`` clients, client i loading load table i, for
the plan's loadTable window; then ``WRITERS`` writers, writer i appending to table i (the commit
scenarios' append, ``clients.commit_worker``), for the plan's 16-writer window. Reported: each
side's median loadTable/s and commits/s, several / one with the per-round ratios (target >= 0.90),
the server's CPU per operation (steadier than the rates on a shared machine), each server's CPU
while idle for ``IDLE_S`` before the rounds (what its warehouses' background loops cost), and the
integrity check of both sides (every acknowledged snapshot on main's chain, no 5xx).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from tests.support import s3_profile

from . import clients, profiling, wire

CREATED = 3
LOADERS = 8
WRITERS = 16
COLUMNS = 50
SIDES = ("one", "several")
KINDS = ("load", "commit")
IDLE_S = 5.0


def _create_warehouses(backend: Any, http: wire.Http, server: str) -> list[str]:
    """``CREATED`` warehouses on ``server``, next to its default and on the same kind of storage."""
    names = []
    for i in range(1, CREATED + 1):
        name = f"team-{i}"
        if backend.name == "sqlite":
            doc: dict[str, Any] = {"name": name, "location": str(backend.workdir / server / name)}
        else:
            location = f"s3://{backend.s3.bucket}/{server}-{name}"
            doc = {"name": name, "location": location, "s3": s3_profile(backend.s3)}
        status, data = http.request("POST", "/management/v1/warehouses", orjson.dumps(doc))
        assert status == 201, data[:300]
        names.append(name)
    return names


def _setup(backend: Any, url: str, side: str, server: str) -> dict[str, list[tuple]]:
    """The load and append tables of one side: ``{"load": [...], "commit": [...]}`` (writer tuples)."""
    http = wire.client(url)
    try:
        prefixes = _create_warehouses(backend, http, server) if side == "several" else [""]
        tables: dict[str, list[tuple]] = {"load": [], "commit": []}
        for j, prefix in enumerate(prefixes):  # table i goes to warehouse i % len(prefixes)
            loads = [f"l{i:02d}" for i in range(j, LOADERS, len(prefixes))]
            appends = [f"a{i:02d}" for i in range(j, WRITERS, len(prefixes))]
            made = wire.create_tables(http, loads + appends, COLUMNS, prefix)
            tables["load"] += made[: len(loads)]
            tables["commit"] += made[len(loads) :]
        for path, location, _, _ in tables["load"]:  # 10 snapshots, as the headline load table
            sids = [wire.new_snapshot_id() for _ in range(10)]
            status, data = http.request("POST", path, wire.append_body(location, sids, None, 1))
            assert status == 200, data[:300]
        for key in KINDS:
            tables[key].sort(key=lambda t: t[0].rsplit("/", 1)[1])
        return tables
    finally:
        http.close()


def _window(kind: str, url: str, pid: int, tables: list[tuple], warmup: bool, plan: Any) -> tuple[float, float, list]:
    if kind == "load":
        args = [{"url": url, "path": t[0], "client": "http"} for t in tables]
        return clients.measured(clients.load_worker, args, plan.load_s, pid, lambda x: len(x["lat"]))
    args = [{"url": url, "tables": [t], "client": "http", "warmup": warmup} for t in tables]
    return clients.measured(clients.commit_worker, args, plan.distinct_s, pid, lambda x: x["commits"])


def _idle_cpu(pid: int) -> float:
    """The server's CPU while no client calls it (its background loops, per warehouse): ms per second."""
    before = clients.cpu_seconds(pid)
    time.sleep(IDLE_S)
    return 1000 * (clients.cpu_seconds(pid) - before) / IDLE_S


def _integrity(url: str, acked: dict[str, list[int]], statuses: dict[int, int]) -> dict[str, int]:
    http = wire.client(url)
    try:
        lost = 0
        for path, ids in acked.items():
            status, data = http.request("GET", path)
            assert status == 200, data[:300]
            ancestry = wire.main_ancestry(orjson.loads(data)["metadata"])
            lost += sum(1 for sid in ids if sid not in ancestry)
    finally:
        http.close()
    return {
        "acknowledged": sum(len(v) for v in acked.values()),
        "lost": lost,
        "http_5xx": sum(n for s, n in statuses.items() if s >= 500 or s == 0),
    }


def run(
    backend: Any, plan: Any, rounds: int, server_env: dict[str, str], log: Any, prof_dir: Path | None = None
) -> dict[str, Any]:
    """``rounds`` rounds (``--rounds``); with ``prof_dir`` (``--profile``) py-spy records each side's
    windows of the last round (cpu mode: every thread, the background loops too), summarised under
    ``out["profiles"]``."""
    env = {"CATALOG_LOG_LEVEL": "info", **server_env}
    servers = {side: backend.own_server(f"warehouses-{side}", env) for side in SIDES}
    try:
        tables = {side: _setup(backend, srv.url, side, f"warehouses-{side}") for side, srv in servers.items()}
        out: dict[str, Any] = {"created": CREATED, "loaders": LOADERS, "writers": WRITERS, "rounds": rounds}
        out["idle_cpu_ms_per_s"] = {side: _idle_cpu(srv.proc.pid) for side, srv in servers.items()}
        m = _Measured()
        for r in range(rounds):
            for side in SIDES if r % 2 == 0 else SIDES[::-1]:
                srv = servers[side]
                for kind in KINDS:
                    raw = prof_dir / f"{backend.name}-warehouses-{side}-{kind}.txt" if prof_dir else None
                    rec = profiling.Recording(srv.proc.pid, raw, "cpu") if raw and r == rounds - 1 else None
                    m.add(side, kind, *_window(kind, srv.url, srv.proc.pid, tables[side][kind], r == 0, plan))
                    if rec is not None:
                        m.profiles[f"warehouses-{side}-{kind}"] = rec.stop()
                log(
                    f"[{backend.name}] warehouses {side}, round {r + 1}: {m.rates[side, 'load'][-1]:,.0f} loads/s, "
                    f"{m.rates[side, 'commit'][-1]:,.0f} commits/s"
                )
        out.update(m.summary())
        out["integrity"] = {s: _integrity(servers[s].url, m.acked[s], m.statuses[s]) for s in SIDES}
        return out
    finally:
        for srv in servers.values():
            srv.stop()


class _Measured:
    """The windows' numbers per (side, kind), the acknowledged snapshots and the statuses per side."""

    def __init__(self) -> None:
        self.rates: dict[tuple[str, str], list[float]] = {(s, k): [] for s in SIDES for k in KINDS}
        self.cpu: dict[tuple[str, str], list[float]] = {(s, k): [] for s in SIDES for k in KINDS}
        self.acked: dict[str, dict[str, list[int]]] = {s: {} for s in SIDES}
        self.statuses: dict[str, dict[int, int]] = {s: {} for s in SIDES}
        self.profiles: dict[str, Any] = {}

    def add(self, side: str, kind: str, rate: float, cpu_ms: float, results: list[dict]) -> None:
        self.rates[side, kind].append(rate)
        self.cpu[side, kind].append(cpu_ms)
        for x in results:
            for status, n in x["statuses"].items():
                self.statuses[side][int(status)] = self.statuses[side].get(int(status), 0) + n
            for path, ids in x.get("acked", {}).items():
                self.acked[side].setdefault(path, []).extend(ids)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"profiles": self.profiles}
        for kind in KINDS:
            one, several = (statistics.median(self.rates[s, kind]) for s in SIDES)
            out[kind] = {
                "one": one,
                "several": several,
                "ratio": several / one if one else float("nan"),
                "per_round": [b / a if a else float("nan") for a, b in zip(*self._pair(self.rates, kind), strict=True)],
                "one_cpu_ms": statistics.median(self.cpu["one", kind]),
                "several_cpu_ms": statistics.median(self.cpu["several", kind]),
                "rates": dict(zip(SIDES, self._pair(self.rates, kind), strict=True)),
                "cpu_ms": dict(zip(SIDES, self._pair(self.cpu, kind), strict=True)),
            }
        return out

    @staticmethod
    def _pair(values: dict[tuple[str, str], list[float]], kind: str) -> tuple[list[float], list[float]]:
        return values["one", kind], values["several", kind]
