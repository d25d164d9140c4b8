"""Client processes: fan a worker out to N forked processes, start them together, collect results.

Every client is its own process (one Python process cannot drive 32 clients: its own CPU would be
the bottleneck). A worker first prepares (opens its connection, makes its warm-up requests), then
waits on a barrier with all the others. When every client is ready, the parent takes its "before"
readings (server CPU, /metrics), so warm-ups stay out of them, and opens the barrier a second
time: the measurement window starts and each client stops starting new operations after
``duration`` seconds or ``max_ops`` operations, whichever comes first. Throughput is total
operations / the longest client window.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import wire

Worker = Callable[[int, Any, Callable[[], float], float, int], dict]


def fan_out(
    worker: Worker,
    args: list[Any],
    duration: float,
    max_ops: int,
    ready: Callable[[], None] = lambda: None,
    timeout: float = 300,
) -> list[dict]:
    """Run ``worker(i, args[i], start, duration, max_ops)`` in ``len(args)`` forked processes.

    ``start()`` blocks until every client is ready and the parent has called ``ready()``, and
    returns the client's deadline (``time.perf_counter()`` based). Returns the workers' result
    dicts (``{"error": ...}`` for a worker that raised).
    """
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(args) + 1)
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_child, args=(worker, i, a, barrier, queue, duration, max_ops), daemon=True)
        for i, a in enumerate(args)
    ]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)  # every client is warm
        ready()
        barrier.wait(timeout=120)  # go
    except Exception:  # noqa: BLE001 - a client died while preparing; its error is in the queue
        barrier.abort()
    results = []
    deadline = time.monotonic() + duration + timeout
    for _ in procs:
        try:
            results.append(queue.get(timeout=max(1.0, deadline - time.monotonic())))
        except Exception:  # noqa: BLE001 - a client hung: report it, do not hang the run
            results.append({"error": "client timed out"})
    for p in procs:
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    return results


def _child(worker: Worker, i: int, args: Any, barrier: Any, queue: Any, duration: float, max_ops: int) -> None:
    def start() -> float:
        barrier.wait(timeout=120)
        barrier.wait(timeout=120)
        return time.perf_counter() + duration

    try:
        result = worker(i, args, start, duration, max_ops)
    except BaseException:  # noqa: BLE001 - reported to the parent
        result = {"error": traceback.format_exc()[-2000:]}
        try:
            barrier.abort()
        except Exception:  # noqa: BLE001
            pass
    queue.put(result)


# -- loadTable ------------------------------------------------------------------------------------


def load_worker(i: int, args: dict, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    """GET the table over and over; latency of each request that answered 200."""
    http = wire.client(args["url"], args.get("client", "http"))
    path = args["path"]
    http.request("GET", path)
    deadline = start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    lat: list[float] = []
    statuses: Counter[int] = Counter()
    now = t0
    while len(lat) < max_ops and now < deadline:
        status, _ = http.request("GET", path)
        end = time.perf_counter()
        statuses[status] += 1
        if status == 200:
            lat.append(end - now)
        now = end
    http.close()
    return {"lat": lat, "statuses": dict(statuses), "elapsed": now - t0, "cpu": time.process_time() - cpu0}


# -- commits --------------------------------------------------------------------------------------


@dataclass
class TableState:
    """What a writer knows about one table: where it is and what main points at."""

    path: str
    location: str
    parent: int | None
    seq: int
    acked: list[int] = field(default_factory=list)


def commit_worker(i: int, args: dict, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    """Append one snapshot per commit, round-robin over this writer's tables.

    A 409 (another writer moved main first) means: re-read main (``?snapshots=refs``) and retry with
    a new snapshot on the new head, until success or the deadline. A 5xx or transport error leaves
    the outcome unknown: the id is recorded as unknown (never as acknowledged) and main re-read.
    Latencies: per commit (first attempt to success, retries included) and per request.
    """
    http = wire.client(args["url"], args.get("client", "http"))
    tables = [TableState(*t) for t in args["tables"]]
    for t in tables:  # warm the connection and learn the current head
        _refresh(http, t)
        if args.get("warmup"):  # one unmeasured commit: the server's parsed-metadata cache is warm
            sid = wire.new_snapshot_id()
            if http.request("POST", t.path, wire.append_body(t.location, [sid], t.parent, t.seq + 1))[0] == 200:
                t.acked.append(sid)
            _refresh(http, t)
    deadline = start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    commit_lat: list[float] = []
    attempt_lat: list[float] = []
    statuses: Counter[int] = Counter()
    unknown: list[tuple[str, int]] = []
    errors: list[str] = []
    conflicts = abandoned = commits = k = 0
    while commits < max_ops and time.perf_counter() < deadline:
        t = tables[k % len(tables)]
        k += 1
        began = time.perf_counter()
        for _attempt in range(1000):
            sid = wire.new_snapshot_id()
            body = wire.append_body(t.location, [sid], t.parent, t.seq + 1)
            a = time.perf_counter()
            status, data = http.request("POST", t.path, body)
            now = time.perf_counter()
            attempt_lat.append(now - a)
            statuses[status] += 1
            if status == 200:
                t.acked.append(sid)
                t.parent, t.seq = sid, t.seq + 1
                commit_lat.append(now - began)
                commits += 1
                break
            if status == 409:
                conflicts += 1
            elif status == 0 or status >= 500:
                unknown.append((t.path, sid))
            else:
                errors.append(f"{status}: {data[:300]!r}")
                break
            if now >= deadline:
                abandoned += 1
                break
            _refresh(http, t)
        if len(errors) > 20:
            break
    elapsed = time.perf_counter() - t0
    http.close()
    return {
        "lat": commit_lat,
        "attempt_lat": attempt_lat,
        "statuses": dict(statuses),
        "commits": commits,
        "conflicts": conflicts,
        "abandoned": abandoned,
        "unknown": unknown,
        "errors": errors[:5],
        "acked": {t.path: t.acked for t in tables},
        "elapsed": elapsed,
        "cpu": time.process_time() - cpu0,
    }


def _refresh(http: Any, t: TableState) -> None:
    status, data = http.request("GET", t.path + "?snapshots=refs")
    if status == 200:
        t.parent, t.seq = wire.head_of(orjson.loads(data)["metadata"])


def measured(
    worker: Worker, args: list[Any], duration: float, pid: int, count: Callable[[dict], int]
) -> tuple[float, float, list[dict]]:
    """One window of ``worker`` on the server process ``pid``: (operations/s over the longest client
    window, the server's CPU ms per operation, the clients' results). ``count`` says how many
    operations a client's result holds. A client that failed raises ``RuntimeError``."""
    before: dict[str, float] = {}

    def ready() -> None:
        before["cpu"] = cpu_seconds(pid)

    results = fan_out(worker, args, duration, 10**6, ready)
    failed = [x["error"] for x in results if "error" in x]
    if failed:
        raise RuntimeError(failed[0])
    ops = sum(count(x) for x in results)
    rate = ops / max(x["elapsed"] for x in results)
    return rate, 1000 * (cpu_seconds(pid) - before["cpu"]) / max(1, ops), results


# -- server CPU -----------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its direct children (uvicorn workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (FileNotFoundError, ProcessLookupError, IndexError):
            pass
    return total


def rss_mb(pid: int) -> float:
    """Resident memory (MB) of ``pid`` and its direct children."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/status") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


# -- set-properties on one table --------------------------------------------------------------------


def properties_worker(i: int, args: dict, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    """Commit ``set-properties`` (this writer's own key, a counter) to one table, with no requirement:
    every commit lands, so N writers on one table measure the table's serial commit rate (the
    server's lock, the metadata file write and the CAS, one after the other). A 5xx or a transport
    error is counted, never retried blindly."""
    http = wire.client(args["url"], args.get("client", "http"))
    path = args["path"]
    http.request("GET", path + "?snapshots=refs")
    deadline = start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    lat: list[float] = []
    statuses: Counter[int] = Counter()
    errors: list[str] = []
    n = 0
    while len(lat) < max_ops and time.perf_counter() < deadline:
        n += 1
        body = orjson.dumps({"updates": [{"action": "set-properties", "updates": {f"bench.writer-{i}": str(n)}}]})
        a = time.perf_counter()
        status, data = http.request("POST", path, body)
        statuses[status] += 1
        if status == 200:
            lat.append(time.perf_counter() - a)
        elif len(errors) < 5:
            errors.append(f"{status}: {data[:300]!r}")
    elapsed = time.perf_counter() - t0
    http.close()
    return {
        "lat": lat,
        "statuses": dict(statuses),
        "errors": errors,
        "elapsed": elapsed,
        "cpu": time.process_time() - cpu0,
    }
