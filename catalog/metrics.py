"""Prometheus metrics (prometheus-client). Counters live here; the service and the HTTP layer
increment them. Define a new one as a module-level Counter/Histogram with ``registry=REGISTRY``.

One process (``--workers 1``): the registry answers ``/metrics``. Several workers: the CLI gives
them a fresh ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode): every worker
writes its counters and histograms to files there and ``/metrics``, whichever worker serves it,
adds up all of them, so totals only grow (a worker that exits leaves its counts). The gauges read at
scrape time (cache, pool) are then published by each worker every ``GAUGE_PUBLISH_SECONDS`` and at
each scrape, and reported as the sum over the live workers (``livesum``). Each replica is still its
own target: scrape every replica.

Conflicts are counted by cause, so operators can tell a stale client (``requirement``: the client's
premise no longer holds) from raw contention the server could not absorb (``cas``: the pointer kept
moving for ``commit_max_attempts`` rebases).
"""

from __future__ import annotations

import glob
import os
import threading
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily, Metric

REGISTRY = CollectorRegistry(auto_describe=True)
# Set by the CLI before it starts several workers (prometheus-client reads it when it is imported).
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
GAUGE_PUBLISH_SECONDS = 5.0

REQUESTS = Counter(
    "catalog_http_requests_total", "HTTP requests by route and status", ["method", "route", "status"], registry=REGISTRY
)
REQUEST_SECONDS = Histogram(
    "catalog_http_request_duration_seconds",
    "HTTP request latency by route",
    ["method", "route"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
COMMIT_ATTEMPTS = Counter(
    "catalog_commit_attempts_total", "Compare-and-swap attempts (one per rebase)", registry=REGISTRY
)
COMMITS_TO_THREAD = Counter(
    "catalog_commit_to_thread_total",
    "Commits on SQLite + local disk that could not run inline on the event loop and went to a worker "
    "thread, by reason (lock, writer, file, rebase, lost, group)",
    ["reason"],
    registry=REGISTRY,
)
COMMITS = Counter(
    "catalog_commits_total",
    "Commits that moved a pointer, by kind (table | view | transaction)",
    ["kind"],
    registry=REGISTRY,
)
CONFLICTS = Counter(
    "catalog_commit_conflict_total", "Commits answered 409, by cause (requirement | cas)", ["cause"], registry=REGISTRY
)
REBASES = Counter("catalog_commit_rebase_total", "Lost CAS races retried on the new pointer", registry=REGISTRY)
APPEND_REBASES = Counter(
    "catalog_commit_append_rebase_total",
    "Pure appends whose branch had moved, rebuilt on the new head by the server and committed (no 409)",
    registry=REGISTRY,
)
GROUP_COMMIT_SIZE = Histogram(
    "catalog_group_commit_size",
    "Commits landed together in one metadata file and one compare-and-swap (group commit of appends)",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
    registry=REGISTRY,
)
UNKNOWN = Counter("catalog_commit_state_unknown_total", "Commits answered 500 CommitStateUnknown", registry=REGISTRY)
COMMIT_SECONDS = Histogram(
    "catalog_commit_duration_seconds",
    "Commit latency, from the first read to the answer, by kind (table | view | transaction)",
    ["kind"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
COMMIT_STEP_SECONDS = Histogram(
    "catalog_commit_step_seconds",
    "Time in each step of a commit attempt (read | apply | write | cas), by kind",
    ["kind", "step"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
    registry=REGISTRY,
)

VENDED_CREDENTIALS = Counter(
    "catalog_s3_vended_credentials_total",
    "Table-scoped storage credentials handed out, by access (read | write)",
    ["access"],
    registry=REGISTRY,
)
MAINTENANCE_TASKS = Counter(
    "catalog_maintenance_tasks_total",
    "Maintenance task attempts by kind (expire-snapshots | remove-orphans | rewrite-manifests), "
    "outcome (done | skipped | retry | failed)",
    ["kind", "outcome"],
    registry=REGISTRY,
)
MAINTENANCE_SECONDS = Histogram(
    "catalog_maintenance_task_duration_seconds",
    "Maintenance task attempt duration, by kind",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
    registry=REGISTRY,
)
MAINTENANCE_FILES_DELETED = Counter(
    "catalog_maintenance_files_deleted_total", "Files deleted by maintenance, by kind", ["kind"], registry=REGISTRY
)
MAINTENANCE_BYTES_DELETED = Counter(
    "catalog_maintenance_bytes_deleted_total",
    "Bytes deleted by maintenance (where the size is known: orphans), by kind",
    ["kind"],
    registry=REGISTRY,
)
MAINTENANCE_SNAPSHOTS_EXPIRED = Counter(
    "catalog_maintenance_snapshots_expired_total", "Snapshots removed by snapshot expiry", registry=REGISTRY
)
MAINTENANCE_COMPACTIONS = Counter(
    "catalog_maintenance_compactions_total",
    "Data compactions by outcome: landed, landed-on-moved-head (a writer committed first; its files kept), "
    "replanned (a writer changed the files it rewrote), yielded (nothing committed), rolled-back (a writer "
    "whose base was older landed instead)",
    ["outcome"],
    registry=REGISTRY,
)
WRITERS_MET_MAINTENANCE = Counter(
    "catalog_writer_commits_met_maintenance_total",
    "Writer commits whose branch had moved only by the catalog's own maintenance snapshots, by what the "
    "server did: rebased (an append, over them), rolled-back (a row-level write landed on its base; the "
    "catalog's snapshots were removed)",
    ["action"],
    registry=REGISTRY,
)
MAINTENANCE_MANIFEST_REWRITES = Counter(
    "catalog_maintenance_manifest_rewrites_total",
    "Manifest rewrites by outcome: landed, landed-on-moved-head (a writer committed first; kept its manifests), "
    "replanned (what it replaced changed), yielded (nothing committed)",
    ["outcome"],
    registry=REGISTRY,
)
MAINTENANCE_MANIFESTS_REPLACED = Counter(
    "catalog_maintenance_manifests_replaced_total", "Manifests replaced by manifest rewrites", registry=REGISTRY
)
PLANNING_MANIFEST_CACHE = Counter(
    "catalog_planning_manifest_cache_total",
    "Manifests and manifest lists scan planning looked up in its cache, by result (hit | miss)",
    ["result"],
    registry=REGISTRY,
)
PLANNING_PLANS = Counter(
    "catalog_planning_plans_total",
    "Scan plans answered, by how (inline: tasks in the answer | tasks: plan-task tokens)",
    ["answer"],
    registry=REGISTRY,
)
PLANNING_TASKS_FETCHED = Counter(
    "catalog_planning_tasks_fetched_total", "Plan-task tokens redeemed (fetchScanTasks)", registry=REGISTRY
)
SIGN_REQUESTS = Counter(
    "catalog_s3_sign_requests_total",
    "S3 remote signing requests, by outcome (signed | denied: refused 403 by grants or confinement)",
    ["outcome"],
    registry=REGISTRY,
)

EVENTS_SEQUENCED = Counter(
    "catalog_events_written_total", "Change events committed and ordered into the feed", registry=REGISTRY
)
EVENTS_DELIVERED = Counter(
    "catalog_events_delivered_total", "Change events a sink accepted, by sink", ["sink"], registry=REGISTRY
)
EVENTS_DELIVERY_FAILURES = Counter(
    "catalog_events_delivery_failures_total", "Failed deliveries to a sink (retried), by sink", ["sink"],
    registry=REGISTRY,
)  # fmt: skip
EVENTS_SINK_LAG = Gauge(
    "catalog_events_sink_lag",
    "Events in the feed a sink has not accepted yet (set by the replica that delivers to it)",
    ["sink"],
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
EVENTS_SINK_LAG_SECONDS = Gauge(
    "catalog_events_sink_lag_seconds",
    "Age of the oldest event a sink has not accepted yet, 0 when caught up (set by the replica that delivers)",
    ["sink"],
    multiprocess_mode="livemax",
    registry=REGISTRY,
)
EVENTS_SINK_FAILING = Gauge(
    "catalog_events_sink_failing",
    "1 while deliveries to a sink fail (nothing accepted since the last failure), else 0",
    ["sink"],
    multiprocess_mode="livemax",
    registry=REGISTRY,
)


class GaugeCollector:
    """Gauges read at scrape time (cache counters, pool usage) from callables the app registers.
    With several workers, also published to shared livesum gauges (``publish``)."""

    def __init__(self) -> None:
        self.sources: dict[str, tuple[str, Callable[[], float]]] = {}
        self.shared: dict[str, Gauge] = {}

    def add(self, name: str, doc: str, read: Callable[[], float], shared_by_workers: bool = False) -> None:
        """``shared_by_workers``: every worker reads the same value (from the database), reported
        once (the largest) instead of summed."""
        self.sources[name] = (doc, read)
        if MULTIPROCESS:
            mode = "livemax" if shared_by_workers else "livesum"
            self.shared[name] = Gauge(name, doc, multiprocess_mode=mode, registry=None)

    def collect(self) -> Iterator[Metric]:
        for name, (doc, read) in self.sources.items():
            try:
                value = float(read())
            except Exception:  # noqa: BLE001 - a gauge that cannot be read is left out of this scrape
                continue
            yield GaugeMetricFamily(name, doc, value=value)

    def publish(self) -> None:
        """Write this worker's current values where every worker's ``/metrics`` reads them."""
        for name, gauge in self.shared.items():
            try:
                gauge.set(float(self.sources[name][1]()))
            except Exception:  # noqa: BLE001 - keeps its last published value
                continue

    def publish_every(self, seconds: float) -> threading.Event:
        """With several workers, publish in the background until the returned event is set."""
        stop = threading.Event()
        if MULTIPROCESS:

            def loop() -> None:
                while not stop.wait(seconds):
                    self.publish()

            self.publish()
            threading.Thread(target=loop, name="gauges", daemon=True).start()
        return stop


GAUGES = GaugeCollector()
REGISTRY.register(GAUGES)


def exposition() -> bytes:
    """The ``/metrics`` body: this process's registry, or every worker's files added up."""
    if not MULTIPROCESS:
        return generate_latest(REGISTRY)
    GAUGES.publish()  # this worker's gauges as of now; the others' as of their last publication
    _forget_dead_workers()
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


def _forget_dead_workers() -> None:
    """A worker that died without shutting down (killed, crashed; uvicorn starts another) left its
    live gauges behind: drop them, so the sums are over the workers that are alive."""
    for path in glob.glob(os.path.join(os.environ["PROMETHEUS_MULTIPROC_DIR"], "gauge_live*_*.db")):
        try:
            pid = int(os.path.basename(path).rsplit("_", 1)[1].removesuffix(".db"))
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid)
        except (ValueError, OSError):  # not ours to judge (another user's pid, a stray file)
            continue


def process_exited() -> None:
    """At a worker's shutdown: its live gauges stop counting (its counters stay in the totals)."""
    if MULTIPROCESS:
        multiprocess.mark_process_dead(os.getpid())
