"""Prometheus metrics (prometheus-client). Counters live here; the service and the HTTP layer
increment them. Each server process keeps its own registry: scrape every replica/worker.

Conflicts are counted by cause, so operators can tell a stale client (``requirement``: the client's
premise no longer holds) from raw contention the server could not absorb (``cas``: the pointer kept
moving for ``commit_max_attempts`` rebases).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

REGISTRY = CollectorRegistry(auto_describe=True)

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


class GaugeCollector:
    """Gauges read at scrape time (cache counters, pool usage) from callables the app registers."""

    def __init__(self) -> None:
        self.sources: dict[str, tuple[str, Callable[[], float]]] = {}

    def add(self, name: str, doc: str, read: Callable[[], float]) -> None:
        self.sources[name] = (doc, read)

    def collect(self) -> Iterator[Metric]:
        for name, (doc, read) in self.sources.items():
            try:
                value = float(read())
            except Exception:  # noqa: BLE001 - a gauge that cannot be read is left out of this scrape
                continue
            yield GaugeMetricFamily(name, doc, value=value)


GAUGES = GaugeCollector()
REGISTRY.register(GAUGES)
