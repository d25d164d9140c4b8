"""Change events (docs/events.md): the outbox written in each change's own transaction, and the feed
``POST /v1/events`` that serves it. Real server processes over HTTP, on every backend."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    PY_SCHEMA,
    Server,
    as_,
    auth_env,
    backends,
    new_pg_database,
    rows,
    s3_client_props,
    s3_env,
    start_server,
    token,
)

Start = Callable[..., Server]


@pytest.fixture(params=backends())
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Start]:
    """Start servers on a database of their own (``start(env)``; a second call with ``same=True``
    shares the first one's database and storage). All are stopped at the end."""
    started: list[Server] = []
    base: dict[str, str] = {}
    io: dict[str, str] = {}
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        name = f"ev_{uuid.uuid4().hex[:8]}"
        base = {"CATALOG_DATABASE_URL": new_pg_database(services["pg"], name), **s3_env(services["s3"], name)}
        io = s3_client_props(services["s3"])

    def start(env: dict[str, str] | None = None, same: bool = False) -> Server:
        if same and started:
            shared = {k: v for k, v in started[0].env.items() if k.startswith(("CATALOG_", "AWS_"))}
            shared.pop("CATALOG_PORT")
            env = {**shared, **(env or {})}
        else:
            env = {**base, **(env or {})}
        srv = start_server(tmp_path / f"s{len(started)}", request.param, env)
        srv.io_props = io
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def feed(url: str, headers: dict[str, str] | None = None, **body: Any) -> requests.Response:
    return requests.post(f"{url}/v1/events", json=body, headers=headers or {}, timeout=30)


def read_all(url: str, headers: dict[str, str] | None = None, **filters: Any) -> list[dict[str, Any]]:
    """Every event the filter gives, following the continuation tokens to the end."""
    out: list[dict[str, Any]] = []
    token_: str | None = None
    while True:
        body = {**filters, "page-size": 1000, **({"continuation-token": token_} if token_ else {})}
        resp = feed(url, headers, **body)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        out += page["events"]
        if not page["events"] and token_ == page["next-page-token"]:
            return out
        if not page["events"]:
            return out
        token_ = page["next-page-token"]


def ops(events: list[dict[str, Any]]) -> list[str]:
    return [e["operation"]["operation-type"] for e in events]


# -- the outbox under a kill -9 storm -------------------------------------------------------------


def test_a_commit_storm_killed_by_sigkill_leaves_every_landed_change_once_in_commit_order(fresh: Start) -> None:
    """4 writers append to 2 tables while a reader tails the feed; the server is killed with
    SIGKILL mid-storm and started again. Afterwards the feed holds exactly the snapshots the tables
    hold (each once: nothing lost, nothing that did not land), each table's events follow its
    metadata log, every acknowledged append is there, and the tail saw what a full read sees."""
    srv = fresh()
    catalog = srv.catalog()
    catalog.create_namespace("storm")
    keep = {"write.metadata.previous-versions-max": "1000"}
    for t in ("a", "b"):
        catalog.create_table(f"storm.{t}", PY_SCHEMA, properties=keep)
    acked: Counter[str] = Counter()
    stop = threading.Event()

    def writer(i: int) -> None:
        try:
            table = srv.catalog().load_table(f"storm.{'ab'[i % 2]}")
            for n in range(1000):
                if stop.is_set():
                    return
                table.append(rows(1000 * i + n, 1))
                acked[table.name()[-1]] += 1
        except Exception:  # noqa: BLE001 - the server was killed under it: the outcome may be unknown
            return

    tailed: list[dict[str, Any]] = []

    def tail() -> None:
        cursor = None
        while not stop.is_set():
            try:
                resp = feed(srv.url, **({"continuation-token": cursor} if cursor else {}), **{"page-size": 200})
            except requests.RequestException:
                return
            if resp.status_code != 200:
                return
            tailed.extend(resp.json()["events"])
            cursor = resp.json()["next-page-token"]
            time.sleep(0.02)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)] + [threading.Thread(target=tail)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while sum(acked.values()) < 24 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(10)
    stop.set()
    for thread in threads:
        thread.join(60)
    assert sum(acked.values()) >= 24, acked
    again = fresh(same=True)
    events = read_all(again.url, **{"catalog-objects-by-name": [["storm"]]})
    positions = [e["sequence"] for e in events]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert len({e["event-id"] for e in events}) == len(events)
    for t in ("a", "b"):
        table = again.catalog().load_table(f"storm.{t}")
        mine = [e["operation"] for e in events if e["operation"].get("identifier", {}).get("name") == t]
        assert [o["operation-type"] for o in mine] == ["create-table"] + ["update-table"] * (len(mine) - 1)
        added = [i for o in mine for i in o["added-snapshot-ids"]]
        assert Counter(added) == Counter(s.snapshot_id for s in table.snapshots())  # each exactly once
        assert all(o["snapshot-operation"] == "append" for o in mine[1:])
        assert sum(o["commits"] for o in mine[1:]) == len(table.snapshots()) >= acked[t]
        chain = [m.metadata_file for m in table.metadata.metadata_log] + [table.metadata_location]
        assert [o["metadata-location"] for o in mine] == chain  # the commit order, per table
    # the tail never skipped one: what it saw is a prefix of the full read
    tailed_storm = [e["event-id"] for e in tailed if e["operation"].get("namespace") == ["storm"] or
                    e["operation"].get("identifier", {}).get("namespace") == ["storm"]]  # fmt: skip
    assert len(tailed_storm) > 3
    assert tailed_storm == [e["event-id"] for e in events[: len(tailed_storm)]]
