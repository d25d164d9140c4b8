"""Where a commit's and a load's time goes inside the service, without HTTP.

In a spawned process, the server's own ``Catalog`` service is built the way ``catalog.app`` builds
it (engine, migrations, storage, metadata-file cache) on the same kind of database and storage as
the backend, and its steps are wrapped with timers *in this process only* (no source is changed):
the pointer SELECT, the metadata cache, requirements, updates, serialisation, the file write, the
CAS, the post-commit housekeeping. One writer commits the benchmark's append round-robin over
fresh tables and then to one 10,000-snapshot table; one reader loads a table. Reported: mean ms
per commit (or load) spent in each step; a step nested in another is indented under it.

If the catalog's internals have moved, this reports an error instead of numbers.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from . import wire

NS = ("bench_inproc",)


def measure(settings: dict, commits: int, budget_s: float, history: int = 10_000) -> dict:
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_measure, settings, commits, budget_s, history).result(timeout=600)


class Timers:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, obj: Any, attr: str, label: str) -> None:
        fn = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start
                self.calls[label] += 1

        setattr(obj, attr, timed)

    def report(self, per: int) -> dict[str, float]:
        out = {label: round(1000 * s / per, 4) for label, s in self.seconds.items()}
        self.seconds.clear()
        self.calls.clear()
        return out


def _measure(settings_kw: dict, commits: int, budget_s: float, history: int) -> dict:
    try:
        return _run(settings_kw, commits, budget_s, history)
    except Exception as e:  # noqa: BLE001 - the service's internals moved: say so, do not fail the run
        import traceback

        return {"error": f"{e!r}: {traceback.format_exc()[-800:]}"}


def _run(settings_kw: dict, commits: int, budget_s: float, history: int) -> dict:
    from pyiceberg.schema import Schema

    from catalog import commit as commit_mod
    from catalog import migrate
    from catalog.api.models import CommitTableRequest
    from catalog.db import create_engine
    from catalog.files import MetadataFiles
    from catalog.service import Catalog, TableChange
    from catalog.settings import Settings
    from catalog.storage import create_storage
    from catalog.store import Store

    settings = Settings(**settings_kw)
    engine = create_engine(settings)
    migrate.upgrade(engine)
    storage = create_storage(settings)
    files = MetadataFiles(storage, settings.metadata_cache_bytes)
    cat = Catalog(settings, Store(engine), storage, files)
    cat.create_namespace(NS, {})
    schema = Schema.model_validate(wire.schema(50))
    heads: dict[str, tuple[int | None, int, str]] = {}

    def append(name: str, count: int = 1) -> None:
        parent, seq, location = heads[name]
        ids = [wire.new_snapshot_id() for _ in range(count)]
        req = CommitTableRequest.model_validate_json(wire.append_body(location, ids, parent, seq + 1))
        cat.commit_table(TableChange(NS, name, req.requirements, req.updates))
        heads[name] = (ids[-1], seq + count, location)

    names = [f"t{i:02d}" for i in range(20)]
    for name in [*names, "big"]:
        _, metadata = cat.create_table(NS, name, schema, None, None, None, {}, False)
        heads[name] = (None, 0, metadata.location)
        append(name, 10)
    done = 10
    while done < history:
        append("big", min(2000, history - done))
        done += min(2000, history - done)
    append("big")  # warm: the parsed model of the current file is cached

    t = Timers()
    t.wrap(cat, "commit_table", "commit_table (total)")
    t.wrap(cat.store, "get_entry", "  SELECT pointer (store.get_entry)")
    t.wrap(cat.files, "read", "  metadata cache (files.read)")
    t.wrap(commit_mod, "check_requirements", "  check_requirements")
    t.wrap(commit_mod, "apply_updates", "  apply_updates")
    t.wrap(commit_mod, "next_location", "  next_location")
    t.wrap(cat.files, "write", "  write new file (files.write)")
    t.wrap(commit_mod, "dump_spliced", "    serialise (commit.dump_spliced)")
    t.wrap(cat.storage, "write_new", "    storage.write_new (create-only write)")
    t.wrap(cat.store, "swap_pointers", "  CAS (store.swap_pointers)")
    t.wrap(cat, "_delete_dropped_files", "  housekeeping (_delete_dropped_files)")
    out: dict[str, Any] = {}

    def loop(fn: Callable[[int], None], limit: int) -> int:
        n, deadline = 0, time.perf_counter() + budget_s
        while n < limit and time.perf_counter() < deadline:
            fn(n)
            n += 1
        return n

    n = loop(lambda i: append(names[i % len(names)]), commits)
    out["commit_fresh"] = {"commits": n, "ms": t.report(n)}
    n = loop(lambda i: append("big"), max(5, commits // 10))
    out[f"commit_{history}"] = {"commits": n, "ms": t.report(n)}

    t.wrap(cat, "load_table", "load_table (total)")
    n = loop(lambda i: cat.load_table(NS, names[0]), 20 * commits)
    out["load"] = {"loads": n, "ms": {k: v for k, v in t.report(n).items() if "commit" not in k}}
    engine.dispose()
    return out


def settings_for(backend: Any, workdir: Any) -> dict:
    """Settings of an in-process service on the backend's kind of database and storage."""
    if backend.db["kind"] == "sqlite":
        return {"database_url": f"sqlite:///{workdir / 'inproc.db'}", "warehouse": str(workdir / "inproc-warehouse")}
    s = backend.storage
    return {
        "database_url": backend.server.env["CATALOG_DATABASE_URL"],
        "warehouse": f"s3://{s['bucket']}/inproc",
        "s3_endpoint": s["endpoint"],
        "s3_region": s["region"],
        "s3_access_key_id": s["access_key"],
        "s3_secret_access_key": s["secret_key"],
        "s3_path_style_access": True,
    }
