"""Concurrent pyiceberg writers in separate processes (one Python process cannot drive 32 writers:
the client's own CPU work would be the bottleneck, not the catalog)."""

from __future__ import annotations

import multiprocessing
import re
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import Table

from tests.support import rows

# pyiceberg's own retry on 409: it re-reads the table and rebuilds only the snapshot, keeping the data
# files. Its jitter is only 10%, so with 32 writers a short max wait makes them stampede: measured here,
# 10-500 ms gave 16 conflicts per successful commit, 100-8000 ms gave 3.6 and twice the throughput.
CLIENT_RETRY = {
    "commit.retry.num-retries": "10000",
    "commit.retry.min-wait-ms": "100",
    "commit.retry.max-wait-ms": "8000",
    "commit.retry.total-timeout-ms": "1200000",
}
# With the server's append rebase on (issue 17) a writer must never see a 409 for an append, so
# pyiceberg's own retry is off: any 409 fails the writer, hence the test.
NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}


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


def counter_total(urls: list[str], name: str, labels: str = "") -> float:
    """Sum over ``urls``' /metrics of the series ``name`` whose label text matches the regex ``labels``."""
    total = 0.0
    pattern = re.compile(rf"^{name}(\{{.*\}})? (\S+)$", re.M)  # labels may hold braces (routes)
    for url in urls:
        for match in pattern.finditer(requests.get(f"{url}/metrics", timeout=10).text):
            if re.search(labels, match.group(1) or ""):
                total += float(match.group(2))
    return total


def assert_exactly_once_linear(table: Table, acknowledged: list[int]) -> None:
    """Every acknowledged row once; main's chain is every snapshot, parent to child, sequence numbers
    strictly increasing; the head's summary totals equal a full scan."""
    snapshots = {s.snapshot_id: s for s in table.snapshots()}
    chain, sid = [], table.metadata.current_snapshot_id
    while sid is not None:
        chain.append(snapshots[sid])
        sid = snapshots[sid].parent_snapshot_id
    chain.reverse()
    assert len(chain) == len(snapshots) == len(acknowledged)
    seqs = [s.sequence_number for s in chain]
    assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), seqs
    assert all(s.summary.operation.value == "append" for s in chain)
    ids = table.scan().to_arrow()["id"].to_pylist()
    assert sorted(ids) == sorted(acknowledged)
    files = list(table.scan().plan_files())
    summary = chain[-1].summary
    assert int(summary["total-records"]) == len(ids)
    assert int(summary["total-data-files"]) == len(files) == len(acknowledged)
