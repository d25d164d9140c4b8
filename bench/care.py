"""Table maintenance rows (``--only maintenance``) and the scale probe (``--only maintenance-scale``).

Both run on a server of their own (``Backend.own_server``: same services, its own catalog database
and warehouse), started with the server's maintenance workers and scheduler on and short intervals
(``SERVER_ENV``), so that table maintenance runs while the bench appends, as it would in production.

Files. Expiry and orphan removal read every manifest list and manifest they decide on, so every
snapshot the bench commits here names a real manifest list of its own, which names a real manifest
of its own (v2 Avro, written once per table with pyiceberg's writers as templates, then copied
under new names: the list's bytes with its manifest's path replaced by one of the same length, the
manifest's bytes unchanged). The copies are valid Iceberg files; the snapshot ids and sequence
numbers inside them are the template's (expiry and orphan removal read paths only). Every manifest
names the table's one real data file, which stays live, so an expiry deletes exactly a manifest list
and a manifest per expired snapshot, both files that exist. The client writes them with plain
``open``/``write`` on local disk and with a pool of boto3 ``put_object`` on S3, ahead of the
commits, so that per append the client spends little more than the HTTP request.

Measured per backend (``run``):

1. ``care_off`` (``catalog.maintenance.enabled=false``) gets its 10,000 appends (2,000 with
   ``--quick``) as commits of ``OFF_BATCH`` snapshots each: with maintenance off nothing reads
   them, the table ends the same as after single appends, and a single-append build on a table
   growing to 10,000 snapshots would take minutes (see the growth rows for what such a commit costs);
2. ``care_on`` (maintenance on: ``POLICY``) gets its appends one commit at a time by one client,
   while the server's scheduler and worker expire its snapshots (a task every scheduler round once
   the pointer moved): commit latency of every append, the snapshot count every 10%, the server's
   CPU and its maintenance metrics over the whole run;
3. fresh tables (maintenance on, same policy; each with one append) are created, and then in one
   window the three kinds are measured interleaved, round by round: one append to each, then one
   loadTable of each: commit and load p50 of each, so that the ratio on / fresh is taken in the
   same seconds. A fresh table serves ``FRESH_COMMITS`` rounds, then the next one takes over (so
   "fresh" means 1 to 11 snapshots);
4. ``care_off`` is then expired through the management API (``POST /management/v1/maintenance/...``
   ``{"kinds": ["expire-snapshots"]}``, the server's worker runs it): the server's CPU from the
   request to the task's end per 1,000 expired snapshots, and files deleted per second: a watcher
   polls the first manifest and the last manifest list the cleanup deletes (the worker deletes
   manifests, then manifest lists, sorted, ``DELETE_THREADS`` at a time), files deleted between the
   two / the time between them.

The scale probe (``scale``, local disk only) expires a table of 100,000 snapshots (keeping 100) and
then runs orphan removal over a table directory holding 1,000,000 more files (younger than the
orphan age: all listed and kept), each as one task through the management API, on a server of its
own: the server's peak resident memory during each task (``VmHWM`` after resetting it through
``/proc/<pid>/clear_refs``), its CPU and the task's wall time.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import orjson

from . import clients, hot, metrics, wire
from .report import lat_stats, sample

# The care server: workers and scheduler on, a scheduler round every second, an expiry on every
# table whose pointer moved at each round, a writer grace of half a second (one writer here).
SERVER_ENV = {
    "CATALOG_MAINTENANCE_ENABLED": "true",
    "CATALOG_MAINTENANCE_WORKERS": "1",
    "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "1",
    "CATALOG_MAINTENANCE_EXPIRE_EVERY_MINUTES": "0",
    "CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS": "0.5",
    # Orphan removal runs once on each table at the first round (it never ran); a failed attempt's
    # retry is put off past the group so that it does not run inside the measured expiry (the report
    # says how many failed).
    "CATALOG_MAINTENANCE_RETRY_SECONDS": "600",
}
KEEP = 100
# The tables' policy: keep main's newest KEEP snapshots, expire every older one.
POLICY = {"history.expire.max-snapshot-age-ms": "0", "history.expire.min-snapshots-to-keep": str(KEEP)}
ENABLED = "catalog.maintenance.enabled"
OFF_BATCH = 500  # snapshots per commit while building care_off
FRESH_COMMITS = 10  # window rounds per fresh table (each has 1 to 11 snapshots while measured)
PREFETCH = 32  # appends whose files are being written ahead of the commits
UPLOAD_THREADS = 8
TOKEN = "T" * 17  # replaced by each copy's 17-digit number
MAINTENANCE = "/management/v1/maintenance"


# -- files ----------------------------------------------------------------------------------------


class Store:
    """Writes, sizes and checks files of the backend's storage, by their location."""

    def __init__(self, storage: dict) -> None:
        self.kind = storage["kind"]
        self.s3 = None
        if self.kind == "s3":
            import boto3
            from botocore.config import Config

            self.s3 = boto3.client(
                "s3",
                endpoint_url=storage["endpoint"],
                aws_access_key_id=storage["access_key"],
                aws_secret_access_key=storage["secret_key"],
                region_name=storage["region"],
                config=Config(s3={"addressing_style": "path"}, max_pool_connections=UPLOAD_THREADS * 2),
            )

    @staticmethod
    def path(location: str) -> str:
        return unquote(urlsplit(location).path) if location.startswith("file:") else location

    @staticmethod
    def _key(location: str) -> tuple[str, str]:
        parts = urlsplit(location)
        return parts.netloc, parts.path.lstrip("/")

    def put(self, location: str, data: bytes) -> None:
        if self.s3 is not None:
            bucket, key = self._key(location)
            self.s3.put_object(Bucket=bucket, Key=key, Body=data)
            return
        path = self.path(location)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def exists(self, location: str) -> bool:
        if self.s3 is not None:
            bucket, key = self._key(location)
            try:
                self.s3.head_object(Bucket=bucket, Key=key)
                return True
            except self.s3.exceptions.ClientError:
                return False
        return os.path.exists(self.path(location))

    def names(self, prefix: str) -> list[str]:
        """The locations under ``prefix`` (a directory on local disk, a key prefix on S3)."""
        if self.s3 is not None:
            bucket, key = self._key(prefix)
            out = []
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/"):
                out += [f"s3://{bucket}/{item['Key']}" for item in page.get("Contents") or ()]
            return out
        base = prefix.rstrip("/")
        return [f"{base}/{name}" for name in os.listdir(self.path(base))]

    def size(self, location: str) -> int:
        if self.s3 is not None:
            bucket, key = self._key(location)
            return int(self.s3.head_object(Bucket=bucket, Key=key)["ContentLength"])
        return os.path.getsize(self.path(location))


class Files:
    """One table's files: a real data file, and per snapshot a manifest list naming a manifest of its
    own (see the module docstring). ``pair(n)`` -> (list location, [(location, bytes), ...])."""

    def __init__(self, store: Store, location: str, storage: dict) -> None:
        import tempfile

        from pyiceberg.io import load_file_io
        from pyiceberg.manifest import ManifestFile, write_manifest_list
        from pyiceberg.schema import Schema

        self.store, self.location = store, location.rstrip("/")
        parquet = hot.parquet_row()
        self.data_file = f"{self.location}/data/care-shared.parquet"
        store.put(self.data_file, parquet)
        schema = Schema.model_validate(hot.SCHEMA)
        with tempfile.TemporaryDirectory() as tmp:
            fio = load_file_io({}, tmp)
            sid = wire.new_snapshot_id()
            output = fio.new_output(f"{tmp}/m.avro")
            manifest = hot.one_file_manifest(output, 2, schema, sid, self.data_file, len(parquet), "null")
            self.manifest_bytes = Path(f"{tmp}/m.avro").read_bytes()
            named = ManifestFile.from_args(
                **{f: getattr(manifest, f) for f in hot.MANIFEST_FIELDS} | {"manifest_path": self.manifest(TOKEN)}
            )
            with write_manifest_list(2, fio.new_output(f"{tmp}/l.avro"), sid, None, 1, "null") as lw:
                lw.add_manifests([named])
            self.list_bytes = Path(f"{tmp}/l.avro").read_bytes()
        if self.list_bytes.count(TOKEN.encode()) != 1:
            raise RuntimeError("the manifest list template does not name its manifest exactly once")

    def manifest(self, number: str) -> str:
        return f"{self.location}/metadata/care-{number}-m0.avro"

    def manifest_list(self, number: str) -> str:
        return f"{self.location}/metadata/snap-care-{number}.avro"

    def pair(self, n: int) -> tuple[str, list[tuple[str, bytes]]]:
        number = f"{n:017d}"
        listing = self.list_bytes.replace(TOKEN.encode(), number.encode())
        return self.manifest_list(number), [
            (self.manifest(number), self.manifest_bytes),
            (self.manifest_list(number), listing),
        ]

    def write(self, n: int) -> str:
        """Write snapshot ``n``'s manifest and list (the manifest first); the list's location."""
        location, files = self.pair(n)
        for path, data in files:
            self.store.put(path, data)
        return location


def snapshot(files_list: str, location: str, sid: int, parent: int | None, seq: int) -> dict:
    s = wire.snapshot(location, sid, parent, seq)
    s["manifest-list"] = files_list
    return s


def append_body(snaps: list[dict], parent: int | None) -> bytes:
    updates = [{"action": "add-snapshot", "snapshot": s} for s in snaps]
    updates.append(
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snaps[-1]["snapshot-id"]}
    )
    requirements = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}]
    return orjson.dumps({"requirements": requirements, "updates": updates})


# -- a table over HTTP ----------------------------------------------------------------------------


class Table:
    """One bench table on the care server: its files, its head (tracked from our own commits: the
    expiry commits never move main nor the sequence number), and its appends."""

    def __init__(self, http: wire.Http, store: Store, storage: dict, name: str, props: dict[str, str]) -> None:
        self.http, self.name, self.path = http, name, wire.table_path(name)
        status, data = http.request(
            "POST",
            f"/v1/namespaces/{wire.NS}/tables",
            orjson.dumps({"name": name, "schema": hot.SCHEMA, "properties": {"bench": "true", **props}}),
        )
        if status != 200:
            raise RuntimeError(f"create {name} -> {status}: {data[:300]!r}")
        metadata = orjson.loads(data)["metadata"]
        self.location = metadata["location"]
        self.files = Files(store, self.location, storage)
        self.head, self.seq = wire.head_of(metadata)
        self.n = 0  # files numbered per table

    def reload(self) -> dict:
        status, data = self.http.request("GET", self.path)
        if status != 200:
            raise RuntimeError(f"load {self.name} -> {status}: {data[:300]!r}")
        loaded = orjson.loads(data)
        self.head, self.seq = wire.head_of(loaded["metadata"])
        return loaded

    def next_number(self) -> int:
        self.n += 1
        return self.n

    def commit(self, lists: list[str]) -> tuple[int, float]:
        """Commit one snapshot per manifest list in ``lists`` (chained) on the head: (status, seconds)."""
        snaps, parent = [], self.head
        for i, listing in enumerate(lists):
            sid = wire.new_snapshot_id()
            snaps.append(snapshot(listing, self.location, sid, parent, self.seq + 1 + i))
            parent = sid
        body = append_body(snaps, self.head)
        t = time.perf_counter()
        status, answer = self.http.request("POST", self.path, body)
        elapsed = time.perf_counter() - t
        if status == 200:
            self.head, self.seq = parent, self.seq + len(lists)
        elif status == 409:
            self.reload()
        else:
            raise RuntimeError(f"commit to {self.name} -> {status}: {answer[:300]!r}")
        return status, elapsed

    def append(self) -> float:
        """One append with files of its own, written now: its commit latency."""
        listing = self.files.write(self.next_number())
        while True:
            status, elapsed = self.commit([listing])
            if status == 200:
                return elapsed


def task(http: wire.Http, name: str, kinds: list[str], timeout: float = 900) -> dict:
    """Queue ``kinds`` on table ``name`` now and wait for the task(s) to end: the last one's JSON."""
    http.close()  # a fresh connection: the server drops keep-alive connections left idle for long
    status, data = http.request(
        "POST", f"{MAINTENANCE}/tables/{wire.NS}/{name}", orjson.dumps({"kinds": kinds, "dry-run": False})
    )
    if status != 202:
        raise RuntimeError(f"maintenance run of {name} -> {status}: {data[:300]!r}")
    ids = [t["id"] for t in orjson.loads(data)["tasks"]]
    deadline = time.monotonic() + timeout
    out: dict = {}
    for tid in ids:
        while True:
            status, data = http.request("GET", f"{MAINTENANCE}/tasks/{tid}")
            if status != 200:
                raise RuntimeError(f"task {tid} -> {status}: {data[:300]!r}")
            out = orjson.loads(data)
            if out["state"] in ("done", "failed"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"task {tid} of {name} did not end in {timeout:.0f} s: {out}")
            time.sleep(0.05)
        if out["state"] != "done" or "skipped" in (out.get("result") or {}):
            raise RuntimeError(f"task {tid} of {name}: {out}")
    return out


def settle(http: wire.Http, timeout: float = 60) -> float:
    """Wait until no task is running and no due task is queued (seconds waited); a task put off to a
    later retry does not count."""
    t = time.perf_counter()
    while time.perf_counter() - t < timeout:
        status, data = http.request("GET", f"{MAINTENANCE}/tasks?state=queued,running&limit=100")
        now_ms = time.time() * 1000
        if status == 200 and not [
            x for x in orjson.loads(data)["tasks"] if x["state"] == "running" or (x["not-before-ms"] or 0) <= now_ms
        ]:
            return time.perf_counter() - t
        time.sleep(0.2)
    return math.nan


class Watch:
    """Polls two files from another thread: when the first disappeared and when the second did."""

    def __init__(self, store: Store, first: str, last: str, every: float) -> None:
        self.store, self.first, self.last, self.every = store, first, last, every
        self.first_gone = self.last_gone = math.nan
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.perf_counter()
            if math.isnan(self.first_gone) and not self.store.exists(self.first):
                self.first_gone = now
            if not math.isnan(self.first_gone) and not self.store.exists(self.last):
                self.last_gone = time.perf_counter()
                return
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def leftovers(store: Store, table: Table) -> dict:
    """The table's manifest lists on storage that no snapshot of it names any more: files of expired
    snapshots the cleanup left behind (orphans)."""
    meta = table.reload()["metadata"]
    named = {s["manifest-list"] for s in meta.get("snapshots") or ()}
    found = [p for p in store.names(table.location.rstrip("/") + "/metadata") if "/snap-care-" in p]
    return {"lists_on_storage": len(found), "named": len(named), "left_behind": len(set(found) - named)}


def peak_reset(pid: int) -> bool:
    """Reset the process's peak resident memory (``VmHWM``) to its current RSS (Linux >= 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def status_mb(pid: int, field: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 1024


def expiry(http: wire.Http, store: Store, table: Table, pid: int, every: float) -> dict:
    """Expire ``table`` through the management API (the server's worker runs it), with the server's
    CPU, its peak RSS and the delete phase's rate (see the module docstring)."""
    loaded = table.reload()
    meta = loaded["metadata"]
    chain = sorted(wire.main_ancestry(meta))
    snaps = {s["snapshot-id"]: s for s in meta.get("snapshots") or ()}
    by_seq = sorted((snaps[s] for s in chain), key=lambda s: s["sequence-number"])
    doomed = [s["manifest-list"] for s in by_seq[:-KEEP] if "snap-care-" in s["manifest-list"]]
    manifests = sorted(table.files.manifest(p.rsplit("snap-care-", 1)[1][:-5]) for p in doomed)
    lists = sorted(doomed)
    watch = Watch(store, manifests[0], lists[-1], every) if doomed else None
    peak_ok = peak_reset(pid)
    rss0 = status_mb(pid, "VmRSS")
    cpu0, t0 = clients.cpu_seconds(pid), time.perf_counter()
    done = task(http, table.name, ["expire-snapshots"])
    cpu, wall = clients.cpu_seconds(pid) - cpu0, time.perf_counter() - t0
    if watch is not None:
        deadline = time.perf_counter() + 10
        while math.isnan(watch.last_gone) and time.perf_counter() < deadline:
            time.sleep(0.05)
        watch.stop()
    result = done["result"]
    expired = result.get("expired-snapshots-count", len(result.get("expired-snapshots") or ()))
    phase = (watch.last_gone - watch.first_gone) if watch else math.nan
    deleted_timed = len(manifests) + len(lists)
    return {
        "snapshots_before": len(snaps),
        "expired": expired,
        "deleted_files": result.get("deleted-files"),
        "task_s": (done["finished-ms"] - done["started-ms"]) / 1000,
        "wall_s": wall,
        "server_cpu_s": cpu,
        "cpu_ms_per_1000_expired": 1000 * 1000 * cpu / expired if expired else math.nan,
        "delete_phase_s": phase,
        "delete_phase_files": deleted_timed,
        "files_per_s": deleted_timed / phase if phase and not math.isnan(phase) and phase > 0 else math.nan,
        "before_delete_s": (watch.first_gone - t0) if watch else math.nan,
        "rss_before_mb": rss0,
        "peak_rss_mb": status_mb(pid, "VmHWM") if peak_ok else math.nan,
        "metadata_kb_before": len(orjson.dumps(meta)) / 1024,
    }


# -- the care rows --------------------------------------------------------------------------------


def run(backend: Any, quick: bool, appends: int, server_env: dict[str, str], log: Any) -> dict:
    rounds = 30 if quick else 100
    out: dict[str, Any] = {"appends": appends, "policy": POLICY, "server_env": SERVER_ENV, "raw": {}}
    t_group = time.perf_counter()
    server = backend.own_server("care", {**server_env, **SERVER_ENV})
    pid = server.proc.pid
    http = wire.Http(server.url)
    store = Store(backend.storage)
    pool = ThreadPoolExecutor(UPLOAD_THREADS if store.s3 is not None else 1, thread_name_prefix="care-files")
    try:
        http.request("POST", "/v1/namespaces", orjson.dumps({"namespace": [wire.NS]}))
        name = backend.name

        # 1. maintenance off: the history in commits of OFF_BATCH snapshots
        t = time.perf_counter()
        off = Table(http, store, backend.storage, "care_off", {ENABLED: "false", **POLICY})
        done = 0
        while done < appends:
            numbers = [off.next_number() for _ in range(min(OFF_BATCH, appends - done))]
            lists = list(pool.map(off.files.write, numbers))
            status, _ = off.commit(lists)
            if status != 200:
                raise RuntimeError(f"care_off history: {status}")
            done += len(numbers)
        out["off_build_s"] = time.perf_counter() - t
        log(f"[{name}] care: care_off built, {appends:,} snapshots in {out['off_build_s']:.1f} s")

        # 2. maintenance on: one append per commit, files written ahead
        on = Table(http, store, backend.storage, "care_on", {ENABLED: "true", **POLICY})
        before = metrics.scrape(http.request("GET", "/metrics")[1].decode())
        cpu0, t0 = clients.cpu_seconds(pid), time.perf_counter()
        ahead: deque[Future] = deque()
        lat: list[float] = []
        trajectory: list[tuple[int, int]] = []
        conflicts = 0
        step = max(1, appends // 10)
        for i in range(appends):
            while len(ahead) < PREFETCH and i + len(ahead) < appends:
                ahead.append(pool.submit(on.files.write, on.next_number()))
            listing = ahead.popleft().result()
            while True:
                status, elapsed = on.commit([listing])
                if status == 200:
                    break
                conflicts += 1
            lat.append(elapsed)
            if (i + 1) % step == 0:
                count = len(orjson.loads(http.request("GET", on.path)[1])["metadata"].get("snapshots") or ())
                trajectory.append((i + 1, count))
        append_s = time.perf_counter() - t0
        append_cpu = clients.cpu_seconds(pid) - cpu0
        d = metrics.delta(before, metrics.scrape(http.request("GET", "/metrics")[1].decode()))
        loaded = on.reload()
        right_after = len(loaded["metadata"].get("snapshots") or ())
        waited = settle(http)
        out["on_appends"] = {
            **lat_stats(lat),
            "first_1000": lat_stats(lat[:1000]),
            "last_1000": lat_stats(lat[-1000:]),
            "seconds": append_s,
            "rate": appends / append_s,
            "server_cpu_ms_per_append": 1000 * append_cpu / appends,
            "conflicts": conflicts,
            "trajectory": trajectory,
            "snapshots_right_after": right_after,
            "settle_s": waited,
            "maintenance": {
                "expire_tasks": metrics.total(d, "catalog_maintenance_tasks_total", kind="expire-snapshots"),
                "orphan_tasks": metrics.total(d, "catalog_maintenance_tasks_total", kind="remove-orphans"),
                "failed_or_retried": metrics.total(d, "catalog_maintenance_tasks_total", outcome="failed")
                + metrics.total(d, "catalog_maintenance_tasks_total", outcome="retry"),
                "snapshots_expired": metrics.total(d, "catalog_maintenance_snapshots_expired_total"),
                "files_deleted": metrics.total(d, "catalog_maintenance_files_deleted_total"),
                "expire_task_s": metrics.total(
                    d, "catalog_maintenance_task_duration_seconds_sum", kind="expire-snapshots"
                ),
            },
        }
        out["raw"]["on_appends"] = sample(lat)
        a, m = out["on_appends"], out["on_appends"]["maintenance"]
        log(
            f"[{name}] care: care_on {appends:,} appends in {append_s:.1f} s ({appends / append_s:,.0f}/s), "
            f"commit p50 {a['p50_ms']:.2f} ms (first 1,000 {a['first_1000']['p50_ms']:.2f}, "
            f"last 1,000 {a['last_1000']['p50_ms']:.2f}); snapshots {trajectory}; "
            f"{right_after} right after, settled in {waited:.1f} s; maintenance: {m}"
        )

        # 3. on vs off vs fresh, interleaved in one window
        # a fresh table takes FRESH_COMMITS of the rounds, then the next one takes over: fresh stays fresh
        freshes = [
            Table(http, store, backend.storage, f"care_fresh_{i}", {ENABLED: "true", **POLICY})
            for i in range(math.ceil(rounds / FRESH_COMMITS))
        ]
        for tbl in freshes:
            tbl.append()
        fresh = freshes[0]
        tables = {"fresh": fresh, "on": on, "off": off}
        state: dict[str, dict] = {}
        for key, tbl in tables.items():
            loaded = tbl.reload()
            state[key] = {
                "snapshots": len(loaded["metadata"].get("snapshots") or ()),
                "metadata_file_kb": store.size(loaded["metadata-location"]) / 1024,
                "metadata_json_kb": len(orjson.dumps(loaded["metadata"])) / 1024,
                "metadata_log": len(loaded["metadata"].get("metadata-log") or ()),
            }
        commit_lat: dict[str, list[float]] = {k: [] for k in tables}
        load_lat: dict[str, list[float]] = {k: [] for k in tables}
        cpu0 = clients.cpu_seconds(pid)
        for r in range(rounds):
            tables["fresh"] = freshes[r // FRESH_COMMITS]
            for key, tbl in tables.items():
                commit_lat[key].append(tbl.append())
            for key, tbl in tables.items():
                t = time.perf_counter()
                status, _ = http.request("GET", tbl.path)
                load_lat[key].append(time.perf_counter() - t)
                if status != 200:
                    raise RuntimeError(f"load {tbl.name} -> {status}")
        window_cpu = clients.cpu_seconds(pid) - cpu0
        for key in tables:
            state[key]["commit"] = lat_stats(commit_lat[key])
            state[key]["load"] = lat_stats(load_lat[key])
        out["window"] = {"rounds": rounds, "server_cpu_s": window_cpu, "tables": state}
        f, o, x = (state[k] for k in ("fresh", "on", "off"))
        out["on_vs_fresh_commit"] = o["commit"]["p50_ms"] / f["commit"]["p50_ms"]
        log(
            f"[{name}] care: commit p50 fresh {f['commit']['p50_ms']:.2f}, on {o['commit']['p50_ms']:.2f}, "
            f"off {x['commit']['p50_ms']:.2f} ms (on/fresh {out['on_vs_fresh_commit']:.2f}x); load p50 "
            f"{f['load']['p50_ms']:.2f} / {o['load']['p50_ms']:.2f} / {x['load']['p50_ms']:.2f} ms; snapshots "
            f"{f['snapshots']} / {o['snapshots']} / {x['snapshots']}; metadata file "
            f"{f['metadata_file_kb']:,.0f} / {o['metadata_file_kb']:,.0f} / {x['metadata_file_kb']:,.0f} KB"
        )

        # 4. expire care_off (about `appends` snapshots) through the management API
        out["settle_before_expiry_s"] = settle(http)
        out["on_leftovers"] = leftovers(store, on)
        out["expiry"] = e = expiry(http, store, off, pid, 0.005 if store.s3 is None else 0.02)
        log(
            f"[{name}] care: care_off expiry: {e['expired']:,} snapshots expired, {e['deleted_files']:,} files "
            f"deleted, task {e['task_s']:.1f} s, server CPU {e['server_cpu_s']:.1f} s "
            f"({e['cpu_ms_per_1000_expired']:,.0f} ms per 1,000 expired); delete phase {e['delete_phase_files']:,} "
            f"files in {e['delete_phase_s']:.2f} s = {e['files_per_s']:,.0f} files/s; "
            f"peak RSS {e['peak_rss_mb']:.0f} MB"
        )
        out["server_rss_mb"] = clients.rss_mb(pid)
        status, data = http.request("GET", f"{MAINTENANCE}/tasks?state=queued,failed&limit=100")
        out["tasks_put_off"] = [
            {k: x[k] for k in ("table", "kind", "state", "attempts", "last-error")}
            for x in (orjson.loads(data)["tasks"] if status == 200 else ())
            if x.get("last-error")
        ]
    finally:
        pool.shutdown(wait=True)
        http.close()
        server.stop()
        out["server_log_errors"] = _errors(server.log)
    out["group_s"] = time.perf_counter() - t_group
    return out


def _errors(path: Path) -> int:
    if not path.exists():
        return 0
    text = path.read_text(errors="replace").lower()
    return sum(1 for line in text.splitlines() if '"level":"error"' in line.replace(" ", ""))


# -- the scale probe ------------------------------------------------------------------------------


def scale(backend: Any, quick: bool, server_env: dict[str, str], log: Any, out: dict[str, Any]) -> dict:
    """100,000 snapshots expired in one task, then orphan removal over 1,000,000 files (local disk).
    Fills ``out`` as it goes (a failure keeps what was measured)."""
    if backend.storage["kind"] != "local":
        out["skipped"] = "local disk only"
        return out
    snapshots, orphan_files = (20_000, 200_000) if quick else (100_000, 1_000_000)
    out.update({"snapshots": snapshots, "files": orphan_files})
    server = backend.own_server("care-scale", {**server_env, **SERVER_ENV})
    pid = server.proc.pid
    http = wire.Http(server.url, timeout=600)
    store = Store(backend.storage)
    try:
        http.request("POST", "/v1/namespaces", orjson.dumps({"namespace": [wire.NS]}))
        t = time.perf_counter()
        tbl = Table(http, store, backend.storage, "care_scale", {ENABLED: "false", **POLICY})
        done = 0
        while done < snapshots:
            lists = [tbl.files.write(tbl.next_number()) for _ in range(min(5_000, snapshots - done))]
            status, _ = tbl.commit(lists)
            if status != 200:
                raise RuntimeError(f"care_scale history: {status}")
            done += len(lists)
        out["build_s"] = time.perf_counter() - t
        out["rss_after_build_mb"] = status_mb(pid, "VmRSS")
        log(f"[{backend.name}] care-scale: {snapshots:,} snapshots built in {out['build_s']:.0f} s")
        time.sleep(1)  # past the writer grace
        out["expiry"] = e = expiry(http, store, tbl, pid, 0.02)
        log(
            f"[{backend.name}] care-scale: expiry of {e['expired']:,} snapshots: task {e['task_s']:.1f} s, "
            f"server CPU {e['server_cpu_s']:.1f} s, {e['deleted_files']:,} files deleted "
            f"({e['files_per_s']:,.0f}/s in the delete phase), peak RSS {e['peak_rss_mb']:.0f} MB "
            f"(from {e['rss_before_mb']:.0f})"
        )

        t = time.perf_counter()
        data_dir = Store.path(tbl.location.rstrip("/") + "/data")
        os.makedirs(data_dir, exist_ok=True)
        for i in range(orphan_files):
            os.close(os.open(f"{data_dir}/orphan-{i:08d}.parquet", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        out["files_build_s"] = time.perf_counter() - t
        log(f"[{backend.name}] care-scale: {orphan_files:,} files written in {out['files_build_s']:.0f} s")
        peak_ok = peak_reset(pid)
        rss0 = status_mb(pid, "VmRSS")
        cpu0, t0 = clients.cpu_seconds(pid), time.perf_counter()
        done_task = task(http, tbl.name, ["remove-orphans"])
        result = done_task["result"]
        out["orphans"] = o = {
            "scanned": result.get("scanned"),
            "kept_young": result.get("kept-younger-than-age"),
            "orphans": result.get("orphans"),
            "task_s": (done_task["finished-ms"] - done_task["started-ms"]) / 1000,
            "wall_s": time.perf_counter() - t0,
            "server_cpu_s": clients.cpu_seconds(pid) - cpu0,
            "rss_before_mb": rss0,
            "peak_rss_mb": status_mb(pid, "VmHWM") if peak_ok else math.nan,
        }
        log(
            f"[{backend.name}] care-scale: orphan removal scanned {o['scanned']:,} files in {o['task_s']:.1f} s, "
            f"server CPU {o['server_cpu_s']:.1f} s, peak RSS {o['peak_rss_mb']:.0f} MB (from {o['rss_before_mb']:.0f})"
        )
    finally:
        http.close()
        server.stop()
        out["server_log_errors"] = _errors(server.log)
    return out
