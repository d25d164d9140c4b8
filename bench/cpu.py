"""CPU-only steps of a commit, timed on the growth tables' metadata through PUBLIC functions only:

- ``orjson.loads`` of the metadata file: what a metadata cache miss costs at least;
- ``catalog.metadata.tables.apply(base, requirements, updates, base_location=..., now_ms=...)``: the
  engine applying the bench's one-snapshot append. Skipped (reported missing) on a server that does
  not have that module.

Runs in a spawned process: the catalog package and the parsed metadata stay out of the process
that forks the HTTP clients.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from . import wire


def measure(cases: dict[str, tuple[bytes, str]], budget_s: float = 1.0) -> dict:
    """``cases``: key -> (metadata JSON, its location). Returns key -> step -> median ms."""
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(_measure, cases, budget_s).result(timeout=600)


def _timed(fn: Callable[[], Any], budget_s: float, max_reps: int = 50) -> tuple[float, Any]:
    times, out, deadline = [], None, time.perf_counter() + budget_s
    while len(times) < max_reps and (len(times) < 3 or time.perf_counter() < deadline):
        a = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - a)
    return 1000 * statistics.median(times), out


def _measure(cases: dict[str, tuple[bytes, str]], budget_s: float) -> dict:
    try:
        import catalog
        from catalog.metadata import tables as engine
    except ImportError:
        engine = None
    else:  # an editable install can serve catalog.metadata from another checkout than catalog itself
        if Path(engine.__file__).resolve().parents[1] != Path(catalog.__file__).resolve().parent:
            engine = None
    out: dict = {"engine": "catalog.metadata.tables.apply" if engine else None}
    for key, (raw, location) in cases.items():
        out[key] = _case(engine, raw, location, budget_s)
    return out


def _case(engine: Any, raw: bytes, location: str, budget_s: float) -> dict:
    ms: dict[str, Any] = {"metadata_kb": len(raw) / 1024}
    ms["parse_metadata"], base = _timed(lambda: orjson.loads(raw), budget_s)
    if engine is None:
        return ms
    parent, seq = wire.head_of(base)
    body = orjson.loads(wire.append_body(base["location"], [wire.new_snapshot_id()], parent, seq + 1))
    now = int(time.time() * 1000)
    try:
        ms["apply"], _ = _timed(
            lambda: engine.apply(base, body["requirements"], body["updates"], base_location=location, now_ms=now),
            budget_s,
        )
    except Exception as e:  # noqa: BLE001 - the engine's signature moved: say so, do not fail the run
        ms["apply_error"] = repr(e)[:200]
    return ms
