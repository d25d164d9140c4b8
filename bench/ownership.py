"""How the ownership check grows with the number of entries: ``python -m bench.ownership``.

A create, a register and a commit that moves a location or a write path ask the database which
entries overlap the location they claim (``Entries.overlapping``: one statement over the locations
and the ``write.*.path`` prefixes of live and dropped entries); every deleting job asks it for each
prefix of its table (``Ownership.owned``). This fills a catalog with N tables, a third of them with
a ``write.data.path`` outside their location and a tenth of them dropped, and times both checks for
a free location and for a taken one, at N = 100, 1,000 and 10,000, on SQLite and (``--pg``) on a
throwaway PostgreSQL. Rows are inserted through the store itself (no metadata files: the check reads
none). Nothing here runs on the commit path: a commit that moves nothing makes no query.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

SIZES = (100, 1_000, 10_000)
CHECKS = 300


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ownership", description=__doc__.splitlines()[0])
    parser.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL (tests/services.py)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    args = parser.parse_args()
    backends = ["sqlite", *(["postgres"] if args.pg else [])]
    print("| backend | entries | claim, free (us) | claim, taken (us) | owned() of a table (us) |")
    print("|---|---|---|---|---|")
    for backend in backends:
        with _catalog(backend) as catalog:
            filled = 0
            for size in sorted(args.sizes):
                _fill(catalog, filled, size)
                filled = size
                row = _measure(catalog, size)
                print(f"| {backend} | {size:,} | {row[0]:.0f} | {row[1]:.0f} | {row[2]:.0f} |", flush=True)
    return 0


@contextmanager
def _catalog(backend: str) -> Iterator:
    from catalog.server.app import build_catalog
    from catalog.settings import Settings

    with tempfile.TemporaryDirectory(prefix="bench-ownership-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'c.db'}"
        handles = []
        if backend == "postgres":
            from tests import services
            from tests.support import new_pg_database

            pg = services.start_postgres(Path(tmp) / "pg")
            handles.append(pg)
            url = new_pg_database(pg, f"own_{uuid.uuid4().hex[:6]}")
        settings = Settings(database_url=url, warehouse=str(Path(tmp) / "wh"), events_enabled=False)
        catalog = build_catalog(settings, migrated=True)
        try:
            catalog.create_namespace(("n",), {})
            yield catalog
        finally:
            catalog.db.engine.dispose()
            for handle in handles:
                handle.stop()


def _fill(catalog, start: int, end: int) -> None:
    """Tables ``start`` to ``end``: every third with a write.data.path outside its location, every
    tenth dropped."""
    root = catalog.storage.root()
    entries = catalog.entries
    for i in range(start, end):
        location = f"{root}/n/t{i}"
        paths = {"write.data.path": f"{root}/data/t{i}"} if i % 3 == 0 else None
        entries.insert_entry(("n",), f"t{i}", "table", f"{location}/metadata/0.json", location, write_paths=paths)
        if i % 10 == 0:
            entry = catalog.pointers.get_entry(("n",), f"t{i}")
            entries.drop_entry(entry, False, 3_600_000, None)


def _measure(catalog, size: int) -> tuple[float, float, float]:
    root = catalog.storage.root()
    ownership = catalog.ownership
    free = [f"{root}/n/new-{i}" for i in range(CHECKS)]
    taken = [f"{root}/data/t{3 * (i % (size // 3))}/x" for i in range(CHECKS)]
    doc = {"location": f"{root}/n/t1", "properties": {"write.data.path": f"{root}/data/t0"}}

    def claim_free(i: int) -> None:
        ownership.claim(free[i])

    def claim_taken(i: int) -> None:
        try:
            ownership.claim(taken[i])
        except Exception:  # noqa: BLE001 - the 409 is the point
            return
        raise AssertionError("a taken location was free")

    def owned(i: int) -> None:
        ownership.owned(doc, 2)

    return _us(claim_free), _us(claim_taken), _us(owned)


def _us(fn: Callable[[int], None]) -> float:
    """The median of 5 rounds of ``CHECKS`` calls, in microseconds per call."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for i in range(CHECKS):
            fn(i)
        rounds.append((time.perf_counter() - start) / CHECKS * 1e6)
    return statistics.median(rounds)


if __name__ == "__main__":
    raise SystemExit(main())
