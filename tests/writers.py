"""Concurrent pyiceberg writers in separate processes (one Python process cannot drive 32 writers:
the client's own CPU work would be the bottleneck, not the catalog)."""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

from pyiceberg.catalog.rest import RestCatalog

from tests.test_tables import rows

# pyiceberg's own retry on 409: it re-reads the table and rebuilds only the snapshot, keeping the data
# files. Its jitter is only 10%, so with 32 writers a short max wait makes them stampede: measured here,
# 10-500 ms gave 16 conflicts per successful commit, 100-8000 ms gave 3.6 and twice the throughput.
CLIENT_RETRY = {
    "commit.retry.num-retries": "10000",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "8000",
    "commit.retry.total-timeout-ms": "1200000",
}


def _process(urls: list[str], table: str, writer_ids: list[int], appends: int, props: dict[str, str]) -> list[int]:
    acknowledged: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        catalog = RestCatalog(f"w{w}", uri=urls[w % len(urls)], **props)
        tbl = catalog.load_table(table)
        for i in range(appends):
            row_id = w * 1000 + i
            tbl.append(rows(row_id, 1))
            with lock:
                acknowledged.append(row_id)

    with ThreadPoolExecutor(len(writer_ids)) as pool:
        list(pool.map(writer, writer_ids))
    return acknowledged


def hammer(
    urls: list[str], table: str, writers: int, appends: int, props: dict[str, str], processes: int = 8
) -> list[int]:
    """``writers`` pyiceberg writers (spread over ``processes`` processes and over ``urls``) each append
    ``appends`` single-row batches to ``table``; returns the ids of every acknowledged row."""
    groups = [list(range(p, writers, processes)) for p in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=ctx) as pool:
        results = pool.map(_process, *zip(*[(urls, table, g, appends, props) for g in groups], strict=True))
        return [row for acknowledged in results for row in acknowledged]
