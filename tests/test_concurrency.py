"""The concurrency proofs: exactly one of N racing commits wins each round; nothing is lost."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from pyiceberg.exceptions import CommitFailedException

from tests.support import PY_SCHEMA, Http, add_column, create, load, metric_total, race, rows, start_server

NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}


def test_barrier_race_exactly_one_wins(server, ns):
    """Two writers loaded from the same snapshot, released together: one commit, one 409."""
    catalog = server.catalog()
    # pyiceberg retries 409s itself by default; switch that off to see the server's answer
    catalog.create_table(f"{ns}.race", PY_SCHEMA, properties=NO_CLIENT_RETRY).append(rows(0, 1))
    for round_ in range(5):
        writers = [server.catalog().load_table(f"{ns}.race") for _ in range(2)]
        base = writers[0].current_snapshot().snapshot_id
        assert writers[1].current_snapshot().snapshot_id == base

        def write(i, writers=writers, round_=round_):
            try:
                writers[i].append(rows(100 * round_ + 10 * i, 1))
                return "won"
            except CommitFailedException:
                return "409"

        outcomes = Counter(race(2, write))
        assert outcomes == Counter({"won": 1, "409": 1}), outcomes
        table = catalog.load_table(f"{ns}.race")
        assert table.current_snapshot().parent_snapshot_id == base
    assert len(catalog.load_table(f"{ns}.race").snapshots()) == 6


def test_raw_cas_many_racers_one_winner(server, ns):
    """16 identical-premise commits released at once: the CAS lets exactly one through, the rest
    find the requirement broken on the rebased metadata and get 409, none a 5xx."""
    with Http(server.url) as http:
        create_resp = create(http, ns, "hot")
    n = 16
    bodies = [add_column(create_resp, f"c{i}") for i in range(n)]

    def post(i):
        return requests.post(f"{server.url}/v1/namespaces/{ns}/tables/hot", json=bodies[i], timeout=60).status_code

    codes = Counter(race(n, post))
    assert codes == Counter({200: 1, 409: n - 1}), codes
    with Http(server.url) as http:
        final = load(http, ns, "hot")
    assert final["metadata"]["last-column-id"] == 3 and len(final["metadata"]["schemas"]) == 2
    assert final["metadata-location"].split("/")[-1].startswith("00001-")


@pytest.mark.slow
def test_eight_writers_ten_appends_each_lose_nothing(server, ns):
    """8 threads x 10 appends with client retry on 409: exactly 80 snapshots and every row."""
    server.catalog().create_table(f"{ns}.hammer", PY_SCHEMA, properties=NO_CLIENT_RETRY)
    threads, per_thread = 8, 10
    conflicts = Counter()

    def writer(t):
        catalog = server.catalog()
        for i in range(per_thread):
            batch = rows(1000 * t + i, 1)
            while True:
                table = catalog.load_table(f"{ns}.hammer")
                try:
                    table.append(batch)
                    break
                except CommitFailedException:
                    conflicts[t] += 1

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(writer, range(threads)))
    table = server.catalog().load_table(f"{ns}.hammer")
    assert len(table.snapshots()) == threads * per_thread
    ids = table.scan().to_arrow()["id"].to_pylist()
    assert sorted(ids) == sorted(1000 * t + i for t in range(threads) for i in range(per_thread))
    # the snapshot chain is linear: every commit built on the one before it
    chain = {s.snapshot_id: s.parent_snapshot_id for s in table.snapshots()}
    head, length = table.current_snapshot().snapshot_id, 0
    while head is not None:
        head, length = chain[head], length + 1
    assert length == threads * per_thread
    assert sum(conflicts.values()) > 0  # the writers really raced


def test_two_processes_on_one_database_rebase_lost_races(server, ns, tmp_path):
    """Within one process, commits to a table queue on a lock and never lose the CAS; a second
    server process on the same database (a replica, or a second uvicorn worker) races for real.
    Commits whose requirement survives a lost race are rebased by the server: all succeed, none is
    lost, and the rebase counters prove the lost-CAS path ran."""
    shared = {k: v for k, v in server.env.items() if k.startswith(("CATALOG_", "AWS_")) and k != "CATALOG_PORT"}
    other = start_server(tmp_path / "second", server.backend, shared)
    try:
        urls = [server.url, other.url]
        with Http(server.url) as http:
            table_uuid = create(http, ns, "shared")["metadata"]["table-uuid"]
        n, rounds = 8, 5
        codes = Counter()
        for r in range(rounds):  # each round's n commits released together

            def set_property(i, r=r):
                body = {
                    "requirements": [{"type": "assert-table-uuid", "uuid": table_uuid}],
                    "updates": [{"action": "set-properties", "updates": {f"k{i}-{r}": "v"}}],
                }
                url = f"{urls[i % 2]}/v1/namespaces/{ns}/tables/shared"
                return requests.post(url, json=body, timeout=60).status_code

            codes.update(race(n, set_property))
        assert codes == Counter({200: n * rounds}), codes
        with Http(other.url) as http:
            props = load(http, ns, "shared")["metadata"]["properties"]
        assert {f"k{i}-{r}" for i in range(n) for r in range(rounds)} <= set(props)
        rebases = sum(metric_total(url, "catalog_commit_rebase_total") for url in urls)
        assert rebases > 0
    finally:
        other.stop()
