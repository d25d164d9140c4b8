"""Change events (docs/events.md): the outbox written in each change's own transaction, and the feed
``POST /v1/events`` that serves it. Real server processes over HTTP, on every backend."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    PY_SCHEMA,
    Server,
    Start,
    as_,
    auth_env,
    feed,
    new_pg_database,
    read_all,
    rows,
    start_server,
    token,
)


def ops(events: list[dict[str, Any]]) -> list[str]:
    return [e["operation"]["operation-type"] for e in events]


# -- the outbox under a kill -9 storm -------------------------------------------------------------


@pytest.mark.slow
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


# -- what each change writes, and the feed's filters and tokens -------------------------------------


def test_every_kind_of_change_writes_its_event_and_the_feed_filters_them(server: Server) -> None:
    ns = f"ev_{uuid.uuid4().hex[:8]}"
    catalog = server.catalog()
    catalog.create_namespace(ns)
    catalog.update_namespace_properties(ns, updates={"owner": "me"})
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 2))
    table = catalog.load_table(f"{ns}.t")
    catalog.rename_table(f"{ns}.t", f"{ns}.u")
    metadata_location = catalog.load_table(f"{ns}.u").metadata_location
    catalog.drop_table(f"{ns}.u")
    gone = requests.get(f"{server.url}/management/v1/dropped", params={"namespace": ns}, timeout=10).json()
    (gone_id,) = [d["id"] for d in gone["dropped"]]
    assert requests.post(f"{server.url}/management/v1/dropped/{gone_id}/undrop", timeout=10).status_code == 200
    catalog.drop_table(f"{ns}.u")
    assert requests.delete(f"{server.url}/management/v1/dropped/{gone_id}", timeout=10).status_code == 202
    deadline = time.monotonic() + 30  # forgotten by the scheduler's next look: the location is free then
    while time.monotonic() < deadline:
        try:
            catalog.register_table(f"{ns}.back", metadata_location)
            break
        except Exception:  # noqa: BLE001 - not forgotten yet
            time.sleep(0.2)
    catalog.drop_table(f"{ns}.back")
    catalog.create_namespace(f"{ns}.child")
    catalog.drop_namespace(f"{ns}.child")
    mine = {"catalog-objects-by-name": [[ns]]}
    events = read_all(server.url, **mine)
    assert ops(events) == [
        "create-namespace", "update-namespace-properties", "create-table", "update-table", "rename-table",
        "drop-table", "x-undrop-table", "drop-table", "register-table", "drop-table", "create-namespace",
        "drop-namespace",
    ]  # fmt: skip
    ops_ = [e["operation"] for e in events]
    assert ops_[1]["updated"] == ["owner"] and ops_[1]["namespace"] == [ns]
    assert ops_[3]["added-snapshot-ids"] == [table.current_snapshot().snapshot_id]
    assert ops_[3]["snapshot-operation"] == "append" and "assert-ref-snapshot-id" in ops_[3]["requirement-types"]
    assert ops_[3]["table-uuid"] == str(table.metadata.table_uuid)
    assert ops_[4]["identifier"] == {"namespace": [ns], "name": "t"}
    assert ops_[4]["destination"] == {"namespace": [ns], "name": "u"}
    assert ops_[5]["identifier"] == {"namespace": [ns], "name": "u"} and ops_[5]["purge-requested"] is False
    assert ops_[8]["metadata-location"] == metadata_location
    assert ops_[10]["namespace"] == [ns, "child"]
    # filters: operation types, object types, a table by name; pages with tokens
    assert ops(read_all(server.url, **mine, **{"operation-types": ["drop-table"]})) == ["drop-table"] * 3
    assert ops(read_all(server.url, **mine, **{"object-types": ["namespace"]})) == [
        "create-namespace", "update-namespace-properties", "create-namespace", "drop-namespace",
    ]  # fmt: skip
    assert ops(read_all(server.url, **{"catalog-objects-by-name": [[ns, "t"]]})) == [
        "create-table", "update-table", "rename-table",
    ]  # fmt: skip
    assert ops(read_all(server.url, **{"catalog-objects-by-name": [[ns, "u"]]})) == [
        "drop-table", "x-undrop-table", "drop-table",
    ]  # fmt: skip
    first = feed(server.url, **mine, **{"page-size": 3}).json()
    assert ops(first["events"]) == ops(events)[:3]
    second = feed(server.url, **mine, **{"page-size": 3, "continuation-token": first["next-page-token"]}).json()
    assert ops(second["events"]) == ops(events)[3:6]
    assert second["highest-processed-timestamp-ms"] >= second["events"][-1]["timestamp-ms"]
    # caught up: no events, and the token stays usable
    last = read_all(server.url, **mine)
    assert len(last) == len(events)


def test_the_feed_refuses_forged_and_foreign_tokens_and_bad_requests_with_400(server: Server) -> None:
    ns = f"ev_{uuid.uuid4().hex[:8]}"
    server.catalog().create_namespace(ns)
    mine = {"catalog-objects-by-name": [[ns]]}
    token_ = feed(server.url, **mine).json()["next-page-token"]
    forged = token_[:-4] + ("AAAA" if not token_.endswith("AAAA") else "BBBB")
    for body in (
        {**mine, "continuation-token": forged},
        {**mine, "continuation-token": "1" + "A" * 40},
        {**mine, "continuation-token": "x" * 10_000},
        {"catalog-objects-by-name": [["other"]], "continuation-token": token_},  # another filter's
        {"page-size": 0},
        {"page-size": "10"},
        {"operation-types": ["drop-database"]},
        {"object-types": ["index"]},
        {"catalog-objects-by-name": [[]]},
        {"catalog-objects-by-name": [["a"]] * 101},
        {"catalog-objects-by-name": [["x" * 2000]]},
        {"surprise": 1},
    ):
        resp = feed(server.url, **body)
        assert resp.status_code == 400, (body, resp.text)
        err = resp.json()["error"]
        assert err["type"] == "BadRequestException" and "Traceback" not in err["message"]
    for raw in (b"[1]", b"{", b"\xff"):
        resp = requests.post(f"{server.url}/v1/events", data=raw, timeout=10)
        assert resp.status_code == 400, resp.text
    assert feed(server.url, **mine, **{"page-size": 10**12}).status_code == 200  # bounded, not refused
    assert feed(server.url, **mine, **{"continuation-token": token_}).status_code == 200


@pytest.mark.slow
def test_the_feed_is_advertised_and_served_with_a_prefix_and_absent_when_off(server: Server, tmp_path: Path) -> None:
    endpoints = requests.get(f"{server.url}/v1/config", timeout=10).json()["endpoints"]
    assert "POST /v1/{prefix}/events" in endpoints
    # the default warehouse's name as the prefix; one that names no warehouse is 404 (tests/test_warehouses.py)
    assert requests.post(f"{server.url}/v1/default/events", json={}, timeout=10).status_code == 200
    assert requests.post(f"{server.url}/v1/anyprefix/events", json={}, timeout=10).status_code == 404
    off = start_server(tmp_path, "sqlite", {"CATALOG_EVENTS_ENABLED": "false"})
    try:
        endpoints = requests.get(f"{off.url}/v1/config", timeout=10).json()["endpoints"]
        assert not [e for e in endpoints if "events" in e]
        assert requests.post(f"{off.url}/v1/events", json={}, timeout=10).status_code == 404
        off.catalog().create_namespace("quiet")
        import sqlite3

        with sqlite3.connect(tmp_path / "catalog.db") as db:
            assert db.execute("SELECT count(*) FROM events").fetchone() == (0,)
    finally:
        off.stop()


GRANTS = """
grants:
  - {principal: user:admin, privileges: [admin], on: catalog}
  - {principal: user:analyst, privileges: [read], on: {namespace: seen}}
  - {principal: user:ingest, privileges: [create], on: {namespace: hidden}}
"""


def test_a_caller_sees_only_events_of_what_it_may_see(fresh: Start, tmp_path: Path) -> None:
    srv = fresh(auth_env(tmp_path, GRANTS))
    admin = as_(srv, "admin")
    for ns in ("seen", "hidden"):
        admin.create_namespace(ns)
        admin.create_table(f"{ns}.t", PY_SCHEMA).append(rows(0, 1))
    admin_headers = {"Authorization": f"Bearer {token(srv, 'admin')}"}
    analyst_headers = {"Authorization": f"Bearer {token(srv, 'analyst')}"}
    everything = read_all(srv.url, admin_headers)
    assert {
        tuple(e["operation"].get("namespace") or e["operation"]["identifier"]["namespace"]) for e in everything
    } == {
        ("seen",),
        ("hidden",),
    }
    seen = read_all(srv.url, analyst_headers)
    assert ops(seen) == ["create-namespace", "create-table", "update-table"]
    assert all("hidden" not in str(e) for e in seen)
    # who may only create in a namespace sees the namespace's events, not its tables' (no read on them)
    ingest_headers = {"Authorization": f"Bearer {token(srv, 'ingest')}"}
    assert ops(read_all(srv.url, ingest_headers)) == ["create-namespace"]
    # a token is its caller's: the analyst's token is refused to the admin
    analyst_token = feed(srv.url, analyst_headers).json()["next-page-token"]
    assert feed(srv.url, admin_headers, **{"continuation-token": analyst_token}).status_code == 400
    assert feed(srv.url).status_code == 401


def test_events_tail_prints_the_feed_and_follows_it(server: Server) -> None:
    ns = f"ev_{uuid.uuid4().hex[:8]}"
    server.catalog().create_namespace(ns)
    server.catalog().create_table(f"{ns}.t", PY_SCHEMA)
    cli = [sys.executable, "-m", "catalog", "events", "tail", "--uri", server.url, "--namespace", ns]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split()[2:4] for ln in lines] == [["create-namespace", ns], ["create-table", f"{ns}.t"]]
    follow = subprocess.Popen([*cli, "--follow", "--from-now", "--json"], stdout=subprocess.PIPE, text=True)
    printed: queue.Queue[str] = queue.Queue()

    def read() -> None:
        try:
            for line in follow.stdout:  # type: ignore[union-attr]
                printed.put(line)
        except (ValueError, OSError):  # closed under it when the test ends
            return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        # "--from-now" skips what is there when it starts, which on a busy machine may be after an
        # append: append until one is printed (bounded), rather than after a fixed sleep.
        table = server.catalog().load_table(f"{ns}.t")
        for attempt in range(12):
            table.append(rows(attempt, 1))
            try:
                first = json.loads(printed.get(timeout=5))
                break
            except queue.Empty:
                continue
        else:
            raise AssertionError("events tail --follow printed nothing in a minute of appends")
        assert first["operation"]["operation-type"] == "update-table"
        assert first["operation"]["identifier"] == {"namespace": [ns], "name": "t"}
    finally:
        follow.kill()
        follow.wait(10)
        reader.join(10)  # it ends at the killed process's end of output
        follow.stdout.close()
    bad = subprocess.run([*cli[:-2], "--type", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown operation type" in bad.stderr


def test_retention_prunes_by_age_and_count_and_a_token_past_the_pruned_events_is_400(tmp_path: Path) -> None:
    from catalog.database.db import create_engine
    from catalog.database.store import Store
    from catalog.settings import Settings

    srv = start_server(tmp_path, "sqlite")
    try:
        catalog = srv.catalog()
        for i in range(5):
            catalog.create_namespace(f"p{i}")
        first = feed(srv.url, **{"page-size": 1}).json()
        assert ops(first["events"]) == ["create-namespace"]
        store = Store(create_engine(Settings(database_url=f"sqlite:///{tmp_path / 'catalog.db'}").database))
        try:
            assert store.prune_events(0, keep=3) == 2  # by count: the newest 3 stay
            assert [e.namespace for e in store.read_events(0, 100)] == [("p2",), ("p3",), ("p4",)]
            resp = feed(srv.url, **{"continuation-token": first["next-page-token"]})
            assert resp.status_code == 400 and "pruned" in resp.json()["error"]["message"]
            assert ops(read_all(srv.url)) == ["create-namespace"] * 3  # from the start: what is kept
            assert store.prune_events(10**15, keep=1000) == 2  # by age: all but the newest (the feed's mark)
            assert [e.namespace for e in store.read_events(0, 100)] == [("p4",)]
        finally:
            store.engine.dispose()
    finally:
        srv.stop()


def test_views_transactions_and_maintenance_write_their_events(server: Server) -> None:
    from tests.support import JSON_SCHEMA

    ns = f"ev_{uuid.uuid4().hex[:8]}"
    catalog = server.catalog()
    catalog.create_namespace(ns)
    version = {
        "version-id": 0, "schema-id": 0, "timestamp-ms": 1_700_000_000_001, "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}], "default-namespace": [ns],
    }  # fmt: skip
    view = {"name": "v", "schema": JSON_SCHEMA, "view-version": version, "properties": {}}
    created = requests.post(f"{server.url}/v1/namespaces/{ns}/views", json=view, timeout=30).json()
    commit = {
        "requirements": [{"type": "assert-view-uuid", "uuid": created["metadata"]["view-uuid"]}],
        "updates": [{"action": "set-properties", "updates": {"owner": "bi"}}],
    }
    assert requests.post(f"{server.url}/v1/namespaces/{ns}/views/v", json=commit, timeout=30).status_code == 200
    rename = {"source": {"namespace": [ns], "name": "v"}, "destination": {"namespace": [ns], "name": "w"}}
    assert requests.post(f"{server.url}/v1/views/rename", json=rename, timeout=30).status_code == 204
    catalog.drop_view(f"{ns}.w")
    # a multi-table transaction: one event per table, written in its one transaction
    a, b = catalog.create_table(f"{ns}.a", PY_SCHEMA), catalog.create_table(f"{ns}.b", PY_SCHEMA)
    changes = [
        {
            "identifier": {"namespace": [ns], "name": t.name()[-1]},
            "requirements": [{"type": "assert-table-uuid", "uuid": str(t.metadata.table_uuid)}],
            "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
        }
        for t in (a, b)
    ]
    resp = requests.post(f"{server.url}/v1/transactions/commit", json={"table-changes": changes}, timeout=30)
    assert resp.status_code == 204, resp.text
    # a maintenance task the caller asked for: its event once done
    catalog.load_table(f"{ns}.a").append(rows(0, 1))
    path = f"{server.url}/management/v1/maintenance/tables/{ns}/a"
    assert requests.post(path, json={"kinds": ["expire-snapshots"]}, timeout=30).status_code == 202
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        events = read_all(server.url, **{"catalog-objects-by-name": [[ns]]})
        if "x-maintenance-done" in ops(events):
            break
        time.sleep(0.2)
    assert ops(events) == [
        "create-namespace", "create-view", "update-view", "rename-view", "drop-view", "create-table",
        "create-table", "update-table", "update-table", "update-table", "x-maintenance-done",
    ]  # fmt: skip
    view_update = events[2]["operation"]
    assert view_update["object-type"] == "view" and view_update["update-actions"] == ["set-properties"]
    assert view_update["view-uuid"] == created["metadata"]["view-uuid"]
    assert events[3]["operation"]["destination"] == {"namespace": [ns], "name": "w"}
    assert {events[i]["operation"]["identifier"]["name"] for i in (7, 8)} == {"a", "b"}
    done = events[10]["operation"]
    assert done["task-kind"] == "expire-snapshots" and done["identifier"] == {"namespace": [ns], "name": "a"}


def test_an_event_whose_transaction_commits_late_is_not_skipped_on_postgresql(services: dict) -> None:
    """Transaction A inserts its event first (the smaller seq) but commits after B: the feed serves
    B, then A, and a reader whose cursor moved past B still gets A (the sequencer's order)."""
    import sqlalchemy as sa

    from catalog.database import migrate
    from catalog.database.db import create_engine, events
    from catalog.database.outbox import event_row
    from catalog.database.store import Store
    from catalog.events.records import namespace_event
    from catalog.settings import Settings

    url = new_pg_database(services["pg"], f"late_{uuid.uuid4().hex[:8]}")
    store = Store(create_engine(Settings(database_url=url).database))
    try:
        migrate.upgrade(store.engine)
        late = store.engine.connect()
        late_tx = late.begin()
        late.execute(events.insert(), [event_row(namespace_event("create-namespace", ("late",)), 1)])
        store.emit([namespace_event("create-namespace", ("early",))])  # drew a larger seq, commits first
        store.sequence()
        first = store.read_events(0, 100)
        assert [e.namespace for e in first] == [("early",)]
        late_tx.commit()
        late.close()
        assert store.read_events(first[-1].position, 100) == []  # not yet ordered: not served
        store.sequence()
        after = store.read_events(first[-1].position, 100)
        assert [e.namespace for e in after] == [("late",)] and after[0].position > first[-1].position
        with store.engine.connect() as conn:  # and it did draw the smaller seq
            seqs = dict(conn.execute(sa.select(events.c.namespace, events.c.seq)).all())
        assert seqs["late"] < seqs["early"]
    finally:
        store.engine.dispose()
