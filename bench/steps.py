"""Where a commit's CPU goes, step by step: the server's own commit functions timed in-process on the
metadata of the growth tables (the same code path as ``Catalog._stage``, minus I/O).

Runs in a spawned process (pyiceberg and the catalog package stay out of the process that forks
the HTTP clients). Also parses the server's Prometheus text, to split a request's latency into
the service's commit time and the HTTP layer around it.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from . import wire

STEPS = ("parse_request", "parse_metadata", "check_requirements", "apply_updates", "dump")


def measure(cases: dict[str, tuple[bytes, str]], budget_s: float = 1.0) -> dict:
    """``cases``: key -> (metadata JSON, its location). Returns key -> step -> median ms."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_measure, cases, budget_s).result(timeout=300)


def _timed(fn: Callable[[], Any], budget_s: float, max_reps: int = 50) -> tuple[float, Any]:
    times, out, deadline = [], None, time.perf_counter() + budget_s
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() < deadline):
        a = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - a)
    return 1000 * statistics.median(times), out


def _measure(cases: dict[str, tuple[bytes, str]], budget_s: float) -> dict:
    try:
        from pyiceberg.table.metadata import TableMetadataUtil

        from catalog import commit
        from catalog.api import wire as server_wire
        from catalog.api.models import CommitTableRequest
    except Exception as e:  # noqa: BLE001 - the catalog's internals moved: say so, do not fail the run
        return {"error": f"cannot import the catalog's commit functions: {e!r}"}
    out: dict = {}
    for key, (raw, location) in cases.items():
        try:
            out[key] = _case(raw, location, budget_s, TableMetadataUtil, commit, server_wire, CommitTableRequest)
        except Exception as e:  # noqa: BLE001
            out[key] = {"error": repr(e)[:300]}
    return out


def _case(raw: bytes, location: str, budget_s: float, util: Any, commit: Any, server_wire: Any, model: Any) -> dict:
    ms: dict[str, float] = {"metadata_kb": len(raw) / 1024}
    ms["parse_metadata"], base = _timed(lambda: util.parse_raw(raw), budget_s)
    head = base.current_snapshot_id
    body = wire.append_body(base.location, [wire.new_snapshot_id()], head, base.last_sequence_number + 1)
    ms["parse_request"], req = _timed(lambda: server_wire.parse(model, body), budget_s)
    ms["check_requirements"], _ = _timed(lambda: commit.check_requirements(req.requirements, base), budget_s)
    ms["apply_updates"], new = _timed(lambda: commit.apply_updates(base, req.updates, location), budget_s)
    ms["dump"], _ = _timed(lambda: commit.dump(new), budget_s)
    return ms


# -- Prometheus text ------------------------------------------------------------------------------


def scrape(text: str) -> dict[str, float]:
    """'name{labels} value' lines -> {'name{labels}': value} (comments skipped)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            values[key] = float(value)
        except ValueError:
            continue
    return values


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def server_split(d: dict[str, float], method: str) -> dict[str, float]:
    """Mean server-side times (ms) from a metrics delta: the HTTP layer of table routes for
    ``method`` and, for commits, the service's commit loop; plus conflict and rebase counts."""

    def total(name: str, *must: str) -> float:
        return sum(v for k, v in d.items() if k.startswith(name) and all(m in k for m in must))

    route = ('route="/v1/namespaces/{namespace:str}/tables/{table:str}"', f'method="{method}"')
    out = {}
    n = total("catalog_http_request_duration_seconds_count", *route)
    if n:
        out["http_mean_ms"] = 1000 * total("catalog_http_request_duration_seconds_sum", *route) / n
        out["http_requests"] = n
    n = total("catalog_commit_duration_seconds_count")
    if n:
        out["service_commit_mean_ms"] = 1000 * total("catalog_commit_duration_seconds_sum") / n
        out["service_commits"] = n
    for name, key in (
        ("catalog_commit_attempts_total", "cas_attempts"),
        ("catalog_commit_rebase_total", "server_rebases"),
        ('catalog_commit_conflict_total{cause="requirement"}', "conflicts_requirement"),
        ('catalog_commit_conflict_total{cause="cas"}', "conflicts_cas"),
    ):
        out[key] = total(name)
    return out
