"""The scenarios of one backend's run: setup over HTTP, loadTable, commits, growth, the lost-commit
check and the baselines. ``Run`` holds the server handle and collects every number in ``Run.r``."""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from . import (
    backends,
    baselines,
    care,
    clients,
    compaction,
    cpu,
    events,
    footprint,
    hot,
    metrics,
    profiling,
    warehouses,
    weed,
    wire,
)
from .report import lat_stats, sample

LOAD_LEVELS = (1, 8, 32)
WRITERS = 16
TABLES = 100
COLUMNS = 50


@dataclass(frozen=True)
class Point:
    """A growth point: tables of ``snapshots`` snapshots and ``columns`` columns. A commit adds a
    snapshot, so the commits go round-robin over ``replicas`` tables: the history stays near its
    nominal size while it is measured. ``max_commits`` caps the plan's count at the big sizes."""

    snapshots: int
    columns: int
    replicas: int
    label: str
    max_commits: int = 10**6


GROWTH = {
    "10": Point(10, COLUMNS, 10, "fresh: 10 snapshots, 50 columns"),
    "1k": Point(1_000, COLUMNS, 3, "1,000 snapshots"),
    "10k": Point(10_000, COLUMNS, 1, "10,000 snapshots"),
    "50k": Point(50_000, COLUMNS, 1, "50,000 snapshots", max_commits=40),
    "500c": Point(10, 500, 10, "500 columns, 10 snapshots"),
    "2000c": Point(10, 2_000, 3, "2,000 columns, 10 snapshots"),
}
HISTORY_BATCH = 5_000  # add-snapshot updates per commit while building history


PARTS = (
    "load",
    "commit_scenarios",
    "hot_appends",
    "growth",
    "baselines",
    "care",
    "care_scale",
    "footprint",
    "compaction",
    "events",
    "warehouses",
    "weed",
)
SHORT = {
    "load": "load",
    "commits": "commit_scenarios",
    "hot": "hot_appends",
    "growth": "growth",
    "baselines": "baselines",
    "maintenance": "care",  # the results' key stays "care": earlier results files read the same
    "maintenance-scale": "care_scale",
    "footprint": "footprint",
    "compaction": "compaction",
    "events": "events",
    "warehouses": "warehouses",
    "weed": "weed",
}
# opt-in: the scale probe (minutes), the footprint after 10,000 commits at default maintenance settings (GBs
# of metadata written, minutes) and the SeaweedFS catalog comparison (its own rounds, minutes)
DEFAULT = tuple(k for k in SHORT if k not in ("maintenance-scale", "footprint", "weed"))


@dataclass(frozen=True)
class Plan:
    """Seconds per measurement window (and an operation cap) for each scenario."""

    load_s: float
    single_s: float
    distinct_s: float
    hot_s: float
    growth_commit_s: float
    growth_commits: int
    growth_load_s: float
    history_s: float  # time budget for building one growth table's history
    cas_1_s: float
    cas_16_s: float
    sql_1_s: float
    sql_16_s: float
    write_probes: int
    hot_append_s: float  # each (writers, rebase off|on) window of the hot-append scenario


FULL = Plan(8, 8, 10, 15, 6, 100, 3, 45, 3, 5, 6, 8, 100, 15)
QUICK = Plan(2, 2.5, 3, 4, 2, 30, 1, 20, 1, 2, 2, 3, 30, 5)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Run:
    """One backend's run: the server, the HTTP helper for setup and checks, and the results."""

    def __init__(self, backend: backends.Backend, plan: Plan, args: argparse.Namespace, prof_dir: Path) -> None:
        self.b, self.plan, self.args, self.prof_dir = backend, plan, args, prof_dir
        self.url = backend.server.url
        self.http = wire.Http(self.url)
        self.r: dict = {"status": "ok", "versions": backend.versions, "raw": {}, "profiles": {}}
        self.acked: dict[str, list[int]] = {}
        self.unknown: list = []
        self.statuses: dict[int, int] = {}
        self.locations: dict[str, str] = {}
        self.split: dict[str, float] = {}

    # -- helpers ---------------------------------------------------------------------------------

    def call(self, method: str, path: str, body: bytes | None = None, ok: tuple[int, ...] = (200,)) -> bytes:
        status, data = self.http.request(method, path, body)
        if status not in ok:
            raise RuntimeError(f"{method} {path} -> {status}: {data[:500]!r}")
        return data

    def create(self, name: str, columns: int, snapshots: int, budget_s: float = math.inf) -> int:
        data = self.call("POST", f"/v1/namespaces/{wire.NS}/tables", wire.create_table_body(name, columns))
        self.locations[name] = orjson.loads(data)["metadata"]["location"]
        return self.build_history(name, snapshots, budget_s)

    def build_history(self, name: str, snapshots: int, budget_s: float = math.inf, batch: int = HISTORY_BATCH) -> int:
        """Add ``snapshots`` append snapshots, up to ``batch`` per commit request; stop early (between
        requests) once ``budget_s`` is spent, so a server slow to apply them cannot stall the run.
        Returns how many were added."""
        path, done, deadline = wire.table_path(name), 0, time.perf_counter() + budget_s
        while done < snapshots and time.perf_counter() < deadline:
            head, seq = wire.head_of(orjson.loads(self.call("GET", path + "?snapshots=refs"))["metadata"])
            ids = [wire.new_snapshot_id() for _ in range(min(batch, snapshots - done))]
            self.call("POST", path, wire.append_body(self.locations[name], ids, head, seq + 1))
            done += len(ids)
        return done

    def scenario(self, name: str, worker, args: list, duration: float, max_ops: int, profile: str | None = None):
        """Run clients with server CPU accounting (and a py-spy recording with ``--profile``). The
        "before" readings are taken once every client is warm, just before the window opens."""
        rec = None
        if self.args.profile and profile and profiling.available():
            rec = profiling.Recording(self.b.pid, self.prof_dir / f"{self.b.name}-{name}.txt", profile)
            time.sleep(0.3)
        before: dict = {}

        def ready() -> None:
            before["metrics"] = self.metrics()
            before["cpu"] = clients.cpu_seconds(self.b.pid)

        results = clients.fan_out(worker, args, duration, max_ops, ready)
        cpu = clients.cpu_seconds(self.b.pid) - before.get("cpu", 0.0)
        self.split = metrics.delta(before.get("metrics", {}), self.metrics())
        if rec is not None:
            self.r["profiles"][name] = rec.stop()
        failed = [r["error"] for r in results if "error" in r]
        if failed:
            raise RuntimeError(f"{name}: {len(failed)} client(s) failed:\n{failed[0]}")
        for r in results:
            for status, n in r["statuses"].items():
                self.statuses[int(status)] = self.statuses.get(int(status), 0) + n
        return results, cpu

    def metrics(self) -> dict[str, float]:
        status, data = self.http.request("GET", "/metrics")
        return metrics.scrape(data.decode()) if status == 200 else {}

    def commit_args(self, names: list[str], warmup: bool) -> dict:
        tables = [(wire.table_path(n), self.locations[n], None, 0) for n in names]
        return {"url": self.url, "tables": tables, "client": self.args.client, "warmup": warmup}

    def commits(
        self, name: str, groups: list[list[str]], duration: float, max_ops: int, profile: str | None, warmup=False
    ) -> dict:
        args = [self.commit_args(g, warmup) for g in groups]
        results, cpu = self.scenario(name, clients.commit_worker, args, duration, max_ops, profile)
        lat = [x for r in results for x in r["lat"]]
        attempts = [x for r in results for x in r["attempt_lat"]]
        commits = sum(r["commits"] for r in results)
        conflicts = sum(r["conflicts"] for r in results)
        elapsed = max(r["elapsed"] for r in results)
        for r in results:
            for path, ids in r["acked"].items():
                self.acked.setdefault(path, []).extend(ids)
            self.unknown.extend(r["unknown"])
            if r["errors"]:
                raise RuntimeError(f"{name}: unexpected answers: {r['errors']}")
        self.r["raw"][name] = sample(lat)
        if conflicts:
            self.r["raw"][f"{name}_attempt"] = sample(attempts)
        return {
            **lat_stats(lat),
            "rate": commits / elapsed if elapsed else math.nan,
            "commits": commits,
            "attempts": len(attempts),
            "conflicts": conflicts,
            "rate_409": conflicts / len(attempts) if attempts else 0.0,
            "retries_per_commit": conflicts / commits if commits else math.nan,
            "abandoned": sum(r["abandoned"] for r in results),
            "attempt": lat_stats(attempts),
            "server_cpu_ms": 1000 * cpu / max(1, len(attempts)),
            "client_cpu_ms": 1000 * sum(r["cpu"] for r in results) / max(1, len(attempts)),
            "elapsed_s": elapsed,
            "server": metrics.server_split(self.split, "POST"),
        }

    # -- scenarios -------------------------------------------------------------------------------

    def setup(self) -> None:
        t = time.perf_counter()
        only = self.args.only  # create only what the chosen scenario groups use
        self.call("POST", "/v1/namespaces", orjson.dumps({"namespace": [wire.NS]}))
        if "load" in only:
            self.create("load", COLUMNS, 10)
        if only & {"commit_scenarios", "baselines"}:
            self.create("hot", COLUMNS, 10)
        if "commit_scenarios" in only:
            for i in range(TABLES):
                self.create(f"w{i:03d}", COLUMNS, 10)
        self.r["setup_s"] = {"tables": time.perf_counter() - t}
        for key, g in GROWTH.items() if "growth" in only else ():
            t = time.perf_counter()
            budget = self.plan.history_s
            built = [self.create(f"g_{key}_{i}", g.columns, g.snapshots, budget) for i in range(g.replicas)]
            self.r["setup_s"][f"history_{key}"] = time.perf_counter() - t
            if min(built) < g.snapshots:
                log(f"[{self.b.name}] growth {key}: history stopped at the time budget: {min(built):,} snapshots")
        log(f"[{self.b.name}] setup: {self.r['setup_s']}")

    def load(self) -> None:
        self.r["load"], self.r["raw"]["load"] = {}, {}
        args = {"url": self.url, "path": wire.table_path("load"), "client": self.args.client}
        for c in LOAD_LEVELS:
            results, cpu = self.scenario(
                f"load-{c}", clients.load_worker, [args] * c, self.plan.load_s, 10**7, "gil" if c == 32 else None
            )
            lat = [x for r in results for x in r["lat"]]
            elapsed = max(r["elapsed"] for r in results)
            s = {**lat_stats(lat), "rps": len(lat) / elapsed, "clients": c}
            s["server_cpu_ms"] = 1000 * cpu / max(1, len(lat))
            s["client_cpu_ms"] = 1000 * sum(r["cpu"] for r in results) / max(1, len(lat))
            s["server"] = metrics.server_split(self.split, "GET")
            self.r["load"][str(c)] = s
            self.r["raw"]["load"][str(c)] = sample(lat)
            log(
                f"[{self.b.name}] loadTable x{c}: {s['rps']:,.0f}/s p50 {s['p50_ms']:.2f} p99 {s['p99_ms']:.2f} ms "
                f"(server CPU {s['server_cpu_ms']:.2f} ms/op, client CPU {s['client_cpu_ms']:.2f} ms/op)"
            )

    def commit_scenarios(self) -> None:
        p = self.plan
        names = [f"w{i:03d}" for i in range(TABLES)]
        self.r["commit_single"] = s = self.commits("commit_single", [names], p.single_s, 5000, "wall")
        log(f"[{self.b.name}] commit, 1 writer: {s['rate']:,.0f}/s p50 {s['p50_ms']:.2f} p99 {s['p99_ms']:.2f} ms")
        groups = [names[w::WRITERS] for w in range(WRITERS)]
        self.r["commit_distinct"] = s = self.commits("commit_distinct", groups, p.distinct_s, 10**6, "gil")
        log(
            f"[{self.b.name}] commit, 16 writers/100 tables: {s['rate']:,.0f}/s p50 {s['p50_ms']:.2f} "
            f"p99 {s['p99_ms']:.2f} ms, 409s {s['conflicts']}"
        )
        self.r["commit_hot"] = s = self.commits("commit_hot", [["hot"]] * WRITERS, p.hot_s, 10**6, "gil")
        log(
            f"[{self.b.name}] commit, 16 writers/1 table: {s['rate']:,.1f}/s, 409 rate {s['rate_409']:.0%}, "
            f"{s['retries_per_commit']:.2f} retries/commit, p50 {s['p50_ms']:.1f} p99 {s['p99_ms']:.1f} ms"
        )

    def hot_appends(self) -> None:
        """16 and 64 pyiceberg-style appenders (real manifest lists) on ONE table, rebase off then on,
        each on its own fresh table (``bench/hot.py``)."""
        self.r["hot_appends"], self.r["raw"]["hot_appends"] = {}, {}
        import pyiceberg.io.pyarrow  # noqa: F401 - imported once here, shared by the forked clients
        import pyiceberg.manifest  # noqa: F401

        io_props = hot.file_io_props(self.b.storage)
        parquet = hot.parquet_row()
        for writers in hot.LEVELS:
            for rebase in (False, True):
                name = hot.table_name(writers, rebase)
                data = self.call("POST", f"/v1/namespaces/{wire.NS}/tables", hot.create_body(name, rebase))
                location = orjson.loads(data)["metadata"]["location"]
                args = {
                    "url": self.url,
                    "path": wire.table_path(name),
                    "location": location,
                    "io": io_props,
                    "parquet": parquet,
                    "client": self.args.client,
                }
                seeder = hot.Appender(args)  # one append first: the race is on a branch that exists
                seed = [seeder.append_once()]
                seeder.http.close()
                key = f"{writers}_{'on' if rebase else 'off'}"
                results, srv_cpu = self.scenario(
                    f"hot_appends_{key}", hot.append_worker, [args] * writers, self.plan.hot_append_s, 10**6
                )
                self.r["hot_appends"][key] = s = self._hot_summary(results, srv_cpu, writers, rebase)
                acked = seed + [sid for r in results for sid in r["acked"]]
                metadata = orjson.loads(self.call("GET", wire.table_path(name)))["metadata"]
                s["verify"] = hot.verify(metadata, acked, io_props)
                self.r["raw"]["hot_appends"][key] = sample([x for r in results for x in r["lat"]])
                for r in results:
                    if r["errors"]:
                        raise RuntimeError(f"hot appends {key}: unexpected answers: {r['errors']}")
                log(
                    f"[{self.b.name}] hot appends, {writers} writers, rebase {'on' if rebase else 'off'}: "
                    f"{s['rate']:,.1f}/s, 409 rate {s['rate_409']:.1%}, "
                    f"p50 {s['p50_ms']:.0f} p99 {s['p99_ms']:.0f} ms, "
                    f"{s['lists_per_append']:.2f} manifest lists written per append, "
                    f"{s['server'].get('append_rebases', 0):.0f} server rebases, verify {s['verify']}"
                )
        self.rebase_probe(io_props, parquet)
        self.client_probe(io_props, parquet)

    def rebase_probe(self, io_props: dict, parquet: bytes) -> None:
        """What one rebase costs the server as the head's manifest list grows (``hot.probe``)."""
        self.r["rebase_probe"] = {}
        rounds = 5 if self.args.quick else 15
        for manifests in hot.PROBE_MANIFESTS:
            name = f"rebase_probe_{manifests}"
            data = self.call("POST", f"/v1/namespaces/{wire.NS}/tables", hot.create_body(name, True))
            args = {"url": self.url, "path": wire.table_path(name), "io": io_props, "parquet": parquet}
            a = hot.Appender(args | {"location": orjson.loads(data)["metadata"]["location"]})
            hot.build_head(a, manifests)
            before = self.metrics()
            lat = hot.probe(a, rounds)
            a.http.close()
            d = metrics.delta(before, self.metrics())
            n = metrics.total(d, "catalog_commit_append_rebase_total")
            rebase_s = metrics.total(d, "catalog_commit_step_seconds_sum", kind="table", step="rebase")
            self.r["rebase_probe"][str(manifests)] = p = {
                "manifests": manifests,
                "rebases": n,
                "direct": lat_stats(lat["direct"]),
                "rebased": lat_stats(lat["rebased"]),
                "server_rebase_step_ms": 1000 * rebase_s / n if n else math.nan,
            }
            log(
                f"[{self.b.name}] rebase probe, {manifests} manifests: direct p50 {p['direct']['p50_ms']:.1f} ms, "
                f"rebased p50 {p['rebased']['p50_ms']:.1f} ms, server rebase step {p['server_rebase_step_ms']:.1f} ms "
                f"({n:.0f} rebases)"
            )

    def client_probe(self, io_props: dict, parquet: bytes) -> None:
        """What a real pyiceberg append costs its client as the table's history grows (``hot.client_probe``),
        and what that makes the soak test's 800 appends cost the clients alone on this machine."""
        import os

        name = "client_probe"
        data = self.call("POST", f"/v1/namespaces/{wire.NS}/tables", hot.create_body(name, False))
        args = {"url": self.url, "path": wire.table_path(name), "io": io_props, "parquet": parquet}
        a = hot.Appender(args | {"location": orjson.loads(data)["metadata"]["location"]})
        sizes = hot.CLIENT_SNAPSHOTS_QUICK if self.args.quick else hot.CLIENT_SNAPSHOTS
        points = hot.client_probe(a, self.url, f"{wire.NS}.{name}", io_props, sizes, 3)
        a.http.close()
        soak = hot.soak_client_cpu_s(points)
        cores = len(os.sched_getaffinity(0))
        self.r["client_probe"] = {"points": points, "soak_client_cpu_s": soak, "cores": cores}
        text = ", ".join(f"{p['snapshots']:,} snapshots {p['cpu_ms']:.0f} ms" for p in points)
        if soak:
            text += (
                f"; {hot.SOAK_APPENDS} appends: {soak:.0f} s of client CPU, >= {soak / cores:.0f} s on {cores} cores"
            )
        log(f"[{self.b.name}] pyiceberg append, client CPU: {text}")

    def _hot_summary(self, results: list[dict], srv_cpu: float, writers: int, rebase: bool) -> dict:
        lat = [x for r in results for x in r["lat"]]
        attempts = [x for r in results for x in r["attempt_lat"]]
        commits = sum(r["commits"] for r in results)
        conflicts = sum(r["conflicts"] for r in results)
        elapsed = max(r["elapsed"] for r in results)
        counts: dict[str, int] = {}
        for r in results:
            for k, v in r["counts"].items():
                counts[k] = counts.get(k, 0) + v
            self.unknown.extend(r["unknown"])
        per = max(1, commits)
        return {
            **lat_stats(lat),
            "writers": writers,
            "rebase": rebase,
            "rate": commits / elapsed if elapsed else math.nan,
            "commits": commits,
            "attempts": len(attempts),
            "conflicts": conflicts,
            "rate_409": conflicts / len(attempts) if attempts else 0.0,
            "retries_per_commit": conflicts / per,
            "abandoned": sum(r["abandoned"] for r in results),
            "unknown": sum(len(r["unknown"]) for r in results),
            "attempt": lat_stats(attempts),
            "counts": counts,
            "lists_per_append": counts.get("lists_written", 0) / per,
            "manifests_per_append": counts.get("manifests_written", 0) / per,
            "manifest_entries_listed_per_append": counts.get("manifests_listed", 0) / per,
            "client_cpu_ms_per_append": 1000 * sum(r["cpu"] for r in results) / per,
            "server_cpu_ms_per_append": 1000 * srv_cpu / per,
            "elapsed_s": elapsed,
            "server": metrics.server_split(self.split, "POST"),
        }

    def growth(self) -> None:
        self.r["growth"], self.r["raw"]["growth"] = {}, {}
        p, cases = self.plan, {}
        for key, point in GROWTH.items():
            names = [f"g_{key}_{i}" for i in range(point.replicas)]
            data = self.call("GET", wire.table_path(names[0]))
            loaded = orjson.loads(data)
            cases[key] = (orjson.dumps(loaded["metadata"]), loaded["metadata-location"])
            g = {"snapshots": len(loaded["metadata"].get("snapshots") or ()), "nominal_snapshots": point.snapshots}
            g |= {"columns": point.columns, "replicas": point.replicas, "build_s": self.r["setup_s"][f"history_{key}"]}
            size, g["response_kb"] = len(cases[key][0]), len(data) / 1024
            g["metadata_kb"] = size / 1024
            del data, loaded  # the clients are forked next: keep this process small
            mode = "wall" if key in ("10", "10k") else None
            cap = min(p.growth_commits, point.max_commits)
            s = self.commits(f"growth_{key}", [names], p.growth_commit_s, cap, mode, warmup=True)
            raw_commit = self.r["raw"].pop(f"growth_{key}")
            args = {"url": self.url, "path": wire.table_path(names[0]), "client": self.args.client}
            results, _ = self.scenario(f"growth_load_{key}", clients.load_worker, [args], p.growth_load_s, 5000)
            lat = [x for r in results for x in r["lat"]]
            g["snapshots_added_per_table"] = s["commits"] / point.replicas
            self.r["growth"][key] = {**g, "commit": s, "load": lat_stats(lat)}
            self.r["raw"]["growth"][key] = {"commit": raw_commit, "load": sample(lat)}
            srv = s["server"]
            log(
                f"[{self.b.name}] growth {key}: commit p50 {s['p50_ms']:.1f} p99 {s['p99_ms']:.1f} ms "
                f"(n={s['n']}; server: "
                + ", ".join(f"{k} {v:.2f}" for k, v in srv.items() if k.endswith("_ms"))
                + f"), load p50 {lat_stats(lat)['p50_ms']:.1f} ms, metadata {size / 1024:,.0f} KB"
            )

        t = time.perf_counter()
        self.r["cpu_steps"] = cpu.measure(cases, 0.5 if self.args.quick else 1.0)
        log(f"[{self.b.name}] commit CPU steps in-process ({time.perf_counter() - t:.1f}s): {self.r['cpu_steps']}")

    def verify(self) -> None:
        """Every acknowledged snapshot id must be in main's ancestry of the final metadata."""
        lost = 0
        for path, ids in self.acked.items():
            ancestry = wire.main_ancestry(orjson.loads(self.call("GET", path))["metadata"])
            lost += sum(1 for sid in ids if sid not in ancestry)
        self.r["integrity"] = {
            "acknowledged": sum(len(v) for v in self.acked.values()),
            "lost": lost,
            "unknown_outcome": len(self.unknown),
            "http_5xx": sum(n for s, n in self.statuses.items() if s >= 500),
            "transport_errors": self.statuses.get(0, 0),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
        }
        log(f"[{self.b.name}] integrity: {self.r['integrity']}")

    def care(self) -> None:
        """Table maintenance on vs off after many appends, its CPU and delete rate (``bench/jobs.py``)."""
        appends = getattr(self.args, "care_appends", None) or (2_000 if self.args.quick else 10_000)
        self.r["care"] = c = care.run(self.b, self.args.quick, appends, dict(self.args.server_env), log)
        self.r["raw"]["care"] = c.pop("raw")

    def care_scale(self) -> None:
        """100,000 snapshots expired, 1,000,000 files listed by orphan removal (``bench/jobs.py``)."""
        self.r["care_scale"] = out = {}
        care.scale(self.b, self.args.quick, dict(self.args.server_env), log, out)

    def footprint(self) -> None:
        """Files and bytes under a table vs what its metadata references, after many commits with
        care at its defaults (``bench/footprint.py``)."""
        commits = getattr(self.args, "footprint_commits", None) or (2_000 if self.args.quick else 10_000)
        props = dict(getattr(self.args, "footprint_property", None) or ())
        self.r["footprint"] = footprint.run(self.b, self.args.quick, commits, dict(self.args.server_env), log, props)

    def compaction(self) -> None:
        """A table fed by 16 appenders, compaction off vs on (``bench/compaction.py``)."""
        self.r["compaction"] = compaction.run(self.b, self.args.quick, dict(self.args.server_env), log)

    def events(self) -> None:
        """Commits/s with change events on vs off, on servers of their own (``bench/events.py``)."""
        self.r["events"] = events.run(self.b, self.args.quick, dict(self.args.server_env), log)

    def warehouses(self) -> None:
        """loadTable and commits over 3 created warehouses vs the default only (``bench/warehouses.py``)."""
        prof = self.prof_dir if self.args.profile else None
        self.r["warehouses"] = w = warehouses.run(
            self.b, self.plan, getattr(self.args, "rounds", 3), dict(self.args.server_env), log, prof
        )
        self.r["profiles"].update(w.pop("profiles"))
        for side, i in w["integrity"].items():
            log(f"[{self.b.name}] warehouses {side}: {i}")

    def weed(self) -> None:
        """This server against SeaweedFS's Iceberg REST catalog, alternately (``bench/weed.py``)."""
        assert self.b.workdir is not None
        rounds = getattr(self.args, "rounds", 3)
        self.r["weed"] = w = weed.run(
            self.url, self.b.pid, self.b.workdir, self.plan.load_s, self.plan.distinct_s, rounds, log
        )
        self.http.close()  # idle through the rounds: the server may have closed it (reopened on next use)
        for path, ids in w.pop("ours_acked").items():  # and in its lost-commit check
            self.acked.setdefault(path, []).extend(ids)
        for key in weed.KEYS:  # our side's answers count in the run's 5xx check
            for status, n in w[key]["ours_statuses"].items():
                self.statuses[int(status)] = self.statuses.get(int(status), 0) + n

    def baselines(self) -> None:
        p, b = self.plan, {}
        cas = baselines.raw_cas(self.b.db, p.cas_1_s, p.cas_16_s, WRITERS)
        one = cas["single"][0]
        b["raw_cas_1"] = {**lat_stats(one["lat"]), "rate": one["wins"] / one["elapsed"]}
        multi = cas["multi"]
        wins = sum(r["wins"] for r in multi)
        b["raw_cas_16"] = {
            "rate": wins / max(r["elapsed"] for r in multi),
            "wins": wins,
            "losses": sum(r["losses"] for r in multi),
        }
        self.r["raw"]["raw_cas_1"] = sample(one["lat"])
        hot_bytes = len(orjson.dumps(orjson.loads(self.call("GET", wire.table_path("hot")))["metadata"]))
        write = baselines.metadata_write(self.b.storage, hot_bytes, p.write_probes, 10)
        b["metadata_write"] = {**lat_stats(write), "bytes": hot_bytes}
        b["hot_bound_per_s"] = 1000 / (b["metadata_write"]["p50_ms"] + b["raw_cas_1"]["p50_ms"])
        log(
            f"[{self.b.name}] raw CAS p50 {b['raw_cas_1']['p50_ms']:.2f} ms, 16 writers {b['raw_cas_16']['rate']:,.0f}"
            f"/s; metadata write ({hot_bytes / 1024:,.0f} KB) p50 {b['metadata_write']['p50_ms']:.2f} ms; "
            f"hot bound {b['hot_bound_per_s']:,.0f}/s"
        )
        sql = baselines.sqlcatalog(self.b.sqlcatalog, TABLES, COLUMNS, p.sql_1_s, p.sql_16_s, WRITERS)
        if "error" in sql:
            b["sqlcatalog_error"] = sql["error"]
            log(f"[{self.b.name}] SqlCatalog baseline failed: {sql['error']}")
        else:
            for key, results in (("sqlcatalog_1", sql["single"]), ("sqlcatalog_16", sql["multi"])):
                errors = [r["error"] for r in results if "error" in r]
                if errors:
                    b[f"{key}_error"] = errors[0]
                    continue
                lat = [x for r in results for x in r["lat"]]
                b[key] = {
                    **lat_stats(lat),
                    "rate": len(lat) / max(r["elapsed"] for r in results),
                    "failures": sum(r["failures"] for r in results),
                }
                self.r["raw"][key] = sample(lat)
            rates = {k: round(v["rate"], 1) for k, v in b.items() if k.startswith("sqlcatalog") and isinstance(v, dict)}
            log(f"[{self.b.name}] SqlCatalog commits/s: {rates}")
        self.r["baselines"] = b
