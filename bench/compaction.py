"""Compaction rows (``--only compaction``): a table fed by 16 appenders, compaction off vs on.

On a server of its own (``Backend.own_server``) with its scheduler looking every second and
compaction considered at every change (``SERVER_ENV``, quiet period 0: appenders only), two tables
of the same shape get the same load one after the other: 16 pyiceberg appender threads, each append
a few rows in each of ``PARTITIONS`` partitions (one small file per partition), for ``seconds``
(each table gets one append first, so that no appender asserts that its branch does not exist). The
``off`` table has ``catalog.maintenance.enabled=false``; the ``on`` table is compacted by the
server's worker while the appenders run. Both have append rebase on, so that appenders never make
each other fail: every 409 the server answers an appender would be compaction's (the target is 0;
pyiceberg retries a 409 by itself, so they are counted on the server's ``/metrics``).

Measured for each table when the appenders stop, and for ``on`` again after one more compaction run
(what the scheduler does at its next round): live data files, manifests, pyiceberg ``plan_files``
time, a DuckDB full scan (``count(*)`` and a sum), a Spark full scan when a Spark with the Iceberg
runtime is available (``ICEBERG_SPARK_JARS``); the appenders' commits and 409s; and from the
compaction tasks' own results, the server's CPU per GB rewritten in process.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import pyarrow as pa
import requests

from tests.support import duckdb_attached, s3_client_props

PARTITIONS = 4
ROWS = 2_000  # per partition per append (a file of ~10-20 KB)
APPENDERS = 16
SERVER_ENV = {
    "CATALOG_MAINTENANCE_ENABLED": "true",
    "CATALOG_MAINTENANCE_WORKERS": "1",
    "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "1",
    "CATALOG_MAINTENANCE_COMPACTION_EVERY_MINUTES": "0",
    "CATALOG_MAINTENANCE_COMPACTION_QUIET_SECONDS": "0",
    # only compaction is measured here: the other kinds run on their usual schedules
    "CATALOG_MAINTENANCE_EXPIRE_EVERY_MINUTES": "60",
    "CATALOG_MAINTENANCE_MANIFESTS_EVERY_MINUTES": "0",
}


def run(backend: Any, quick: bool, server_env: dict[str, str], log: Any) -> dict:
    seconds = 20 if quick else 120
    out: dict[str, Any] = {"seconds": seconds, "appenders": APPENDERS, "partitions": PARTITIONS}
    server = backend.own_server("compaction", {**server_env, **SERVER_ENV})
    if backend.name == "postgres-s3":
        server.io_props = s3_client_props(backend.s3)
    try:
        catalog = server.catalog()
        catalog.create_namespace("bench")
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import IdentityTransform
        from pyiceberg.types import LongType, NestedField, StringType

        schema = Schema(
            NestedField(1, "id", LongType(), required=False), NestedField(2, "part", StringType(), required=False)
        )
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))
        rebase = {"catalog.append-rebase.enabled": "true"}
        off = {**rebase, "catalog.maintenance.enabled": "false"}
        catalog.create_table("bench.off", schema, partition_spec=spec, properties=off)
        catalog.create_table("bench.on", schema, partition_spec=spec, properties=rebase)
        for name in ("off", "on"):
            log(f"[{backend.name}] compaction {name}: {APPENDERS} appenders for {seconds}s")
            out[name] = {"appends": _feed(server, catalog, f"bench.{name}", seconds)}
            out[name]["at_stop"] = _measure(server, catalog, name)
        url = f"{server.url}/management/v1/maintenance/tables/bench/on"
        resp = requests.post(url, json={"kinds": ["rewrite-data-files"]}, timeout=30)
        _wait(server.url, resp.json()["tasks"][0]["id"])
        out["on"]["after_final_run"] = _measure(server, catalog, "on")
        out["tasks"] = _tasks(server.url)
        out["spark"] = _spark_scans(server, out)
    finally:
        server.stop()
    return out


def _http_409s(url: str) -> float:
    """POSTs the server answered 409 so far (pyiceberg retries a 409 by itself: only the server sees them)."""
    text = requests.get(f"{url}/metrics", timeout=30).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("catalog_http_requests_total{") and 'method="POST"' in line and 'status="409"' in line
    )


def _feed(server: Any, catalog: Any, name: str, seconds: float) -> dict[str, Any]:
    catalog.load_table(name).append(_rows(0, 0))  # the branch exists: no appender asserts it does not
    before = _http_409s(server.url)
    stop = time.monotonic() + seconds
    counts = {"commits": 0, "failed": 0, "errors": 0}
    lock = threading.Lock()

    def appender(w: int) -> None:
        from pyiceberg.exceptions import CommitFailedException

        table = catalog.load_table(name)
        n = 0
        while time.monotonic() < stop:
            try:
                table.append(_rows(w + 1, n))
                key = "commits"
            except CommitFailedException:  # after pyiceberg's own retries
                key = "failed"
            except Exception:  # noqa: BLE001 - counted; the run goes on
                key = "errors"
            table = catalog.load_table(name)
            n += 1
            with lock:
                counts[key] += 1

    threads = [threading.Thread(target=appender, args=(w,)) for w in range(APPENDERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {**counts, "http_409s": int(_http_409s(server.url) - before)}


def _rows(writer: int, n: int) -> pa.Table:
    ids = [writer * 1_000_000 + n * 1000 + k for k in range(ROWS * PARTITIONS)]
    parts = [f"p{k % PARTITIONS}" for k in range(len(ids))]
    return pa.table({"id": pa.array(ids, pa.int64()), "part": pa.array(parts)})


def _measure(server: Any, catalog: Any, name: str) -> dict[str, Any]:
    table = catalog.load_table(f"bench.{name}")
    snapshot = table.current_snapshot()
    plans = []
    for _ in range(3):
        t = time.perf_counter()
        tasks = list(table.scan().plan_files())
        plans.append(time.perf_counter() - t)
    duck = duckdb_attached(server)
    scans = []
    try:
        for _ in range(3):
            t = time.perf_counter()
            rows, total = duck.execute(f"SELECT count(*), sum(id) FROM lake.bench.{name}").fetchone()
            scans.append(time.perf_counter() - t)
    finally:
        duck.close()
    return {
        "data_files": len(tasks),
        "manifests": len(snapshot.manifests(table.io)) if snapshot else 0,
        "rows": rows,
        "sum": total,
        "plan_files_ms": round(statistics.median(plans) * 1000, 1),
        "duckdb_scan_ms": round(statistics.median(scans) * 1000, 1),
    }


def _wait(url: str, task_id: int, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        task = requests.get(f"{url}/management/v1/maintenance/tasks/{task_id}", timeout=30).json()
        if task["state"] not in ("queued", "running"):
            return task
        time.sleep(0.2)
    raise TimeoutError(f"maintenance task {task_id} did not finish")


def _tasks(url: str) -> dict[str, Any]:
    tasks = requests.get(f"{url}/management/v1/maintenance/tasks", params={"limit": 1000}, timeout=30).json()
    results = [t.get("result") or {} for t in tasks.get("tasks", []) if t["kind"] == "rewrite-data-files"]
    landed = [r for r in results if r.get("snapshot-id")]
    cpu = sum(r.get("cpu-seconds", 0) for r in landed)
    rewritten = sum(r.get("rewritten-bytes", 0) for r in landed)
    return {
        "runs": len(results),
        "landed": len(landed),
        "landed_on_moved_head": sum(r.get("landed-on-moved-head", 0) for r in landed),
        "yielded": sum(1 for r in results if r.get("yielded")),
        "rewritten_files": sum(r.get("rewritten-data-files", 0) for r in landed),
        "rewritten_mb": round(rewritten / 2**20, 2),
        "cpu_s": round(cpu, 2),
        "cpu_s_per_gb": round(cpu / (rewritten / 2**30), 1) if rewritten else None,
        "cpu_ms_per_file": round(cpu * 1000 / max(1, sum(r.get("rewritten-data-files", 0) for r in landed)), 2),
    }


def _spark_scans(server: Any, out: dict[str, Any]) -> dict[str, Any]:
    """A Spark full scan of each table (median of 3), when Spark and the Iceberg runtime are here."""
    import os

    if not os.environ.get("ICEBERG_SPARK_JARS"):
        return {"skipped": "ICEBERG_SPARK_JARS is not set"}
    try:
        from pyspark.sql import SparkSession

        from tests.support import client_settings, spark_conf
    except ImportError as e:
        return {"skipped": f"pyspark: {e}"}
    builder = SparkSession.builder.master("local[2]").appName("bench-compaction")
    for key, value in spark_conf(server.url, catalog="lake", **client_settings(server)).items():
        builder = builder.config(key, value)
    spark = builder.config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate()
    scans: dict[str, Any] = {}
    try:
        for name in ("off", "on"):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                spark.sql(f"SELECT count(*), sum(id) FROM lake.bench.{name}").collect()
                times.append(time.perf_counter() - t)
            scans[f"{name}_ms"] = round(statistics.median(times) * 1000, 1)
    finally:
        spark.stop()
    return scans
