"""Dropped tables and views: kept for ``CATALOG_DROP_RETENTION`` (restorable, their location still
owned), then forgotten or purged by a durable maintenance task that survives ``kill -9``.

Real server processes, real pyiceberg and Spark, the CLI as a user runs it; every purge is
asserted on the files themselves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError

from tests.support import (
    CARE_ON_REQUEST,
    JSON_SCHEMA,
    PY_SCHEMA,
    Server,
    as_,
    auth_env,
    purge_now,
    rows,
    scalar,
    start_server,
    start_worker,
    token,
)


def _dropped(server: Server, ns: str, name: str | None = None, headers: dict | None = None) -> list[dict]:
    params = {"namespace": ns, **({"name": name} if name else {})}
    resp = requests.get(f"{server.url}/management/v1/dropped", params=params, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["dropped"]


def _cli(server: Server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "catalog", "tables", *args, "--uri", server.url],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "CATALOG_URI": server.url},
    )


def _wait(predicate, what: str, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


# -- undrop ----------------------------------------------------------------------------------------


def test_undrop_restores_a_dropped_table_with_its_history_and_spark_reads_it(spark, lake: str, server: Server):
    short = f"ud_{uuid.uuid4().hex[:8]}"
    ns = f"{lake}.{short}"
    spark.sql(f"CREATE NAMESPACE {ns}")
    table = f"{ns}.events"
    spark.sql(f"CREATE TABLE {table} (id BIGINT, name STRING) USING iceberg")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')")
    first = scalar(spark, f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at LIMIT 1")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'c')")
    spark.sql(f"DROP TABLE {table}")

    (gone,) = _dropped(server, short, "events")
    assert gone["kind"] == "table" and gone["purge"] is False
    listed = _cli(server, "dropped", short, "--json")
    assert listed.returncode == 0 and f'"id": {gone["id"]}' in listed.stdout, listed

    # the name is free at once: another table takes it (elsewhere: the location is still owned)
    spark.sql(f"CREATE TABLE {table} (x INT) USING iceberg")
    refused = _cli(server, "undrop", f"{short}.events")
    assert refused.returncode == 1 and "a table of that name exists" in refused.stderr, refused
    spark.sql(f"DROP TABLE {table} PURGE")

    restored = _cli(server, "undrop", f"{short}.events", "--id", str(gone["id"]))
    assert restored.returncode == 0, restored
    spark.sql(f"REFRESH TABLE {table}")
    assert scalar(spark, f"SELECT count(*) FROM {table}") == 3
    assert scalar(spark, f"SELECT count(*) FROM {table} VERSION AS OF {first}") == 2  # its history came back
    pyi = server.catalog().load_table(f"{short}.events")
    assert pyi.scan().to_arrow().num_rows == 3
    assert [d["id"] for d in _dropped(server, short)] != [gone["id"]]  # no longer listed as dropped
    purge_now(server.url, f"{short}.events")  # the other table of that name, dropped with purge


def test_a_dropped_tables_location_stays_owned_until_it_is_forgotten(server: Server, catalog, ns: str):
    original = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    original.append(rows(0, 2))
    location = catalog.load_table(f"{ns}.t").location()
    catalog.drop_table(f"{ns}.t")
    with pytest.raises(TableAlreadyExistsError, match="dropped table or view"):
        catalog.create_table(f"{ns}.other", PY_SCHEMA, location=location)
    with pytest.raises(TableAlreadyExistsError, match="dropped table or view"):
        catalog.create_table(f"{ns}.inside", PY_SCHEMA, location=f"{location}/sub")
    again = catalog.create_table(f"{ns}.t", PY_SCHEMA)  # the name is free; the server picks a free location
    assert again.location() != location and again.location().startswith(location + "-")
    (gone,) = _dropped(server, ns, "t")
    resp = requests.post(f"{server.url}/management/v1/dropped/{gone['id']}/undrop", timeout=30)
    assert resp.status_code == 409 and "exists" in resp.json()["error"]["message"]
    assert requests.post(f"{server.url}/management/v1/dropped/999999999/undrop", timeout=30).status_code == 404
    assert requests.post(f"{server.url}/management/v1/dropped/x/undrop", timeout=30).status_code == 400

    purge_now(server.url, f"{ns}.t")  # dropped without purge: released, its files kept
    assert original.io.new_input(original.metadata_location).exists()
    taken = catalog.create_table(f"{ns}.other", PY_SCHEMA, location=location)
    assert taken.location() == location


def test_a_dropped_view_is_restored(server: Server, catalog, ns: str, http):
    view = {
        "name": "v",
        "schema": JSON_SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": int(time.time() * 1000),
            "schema-id": 0,
            "summary": {},
            "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
            "default-namespace": [ns],
        },
        "properties": {},
    }
    assert http.post(f"/v1/namespaces/{ns}/views", json=view).status_code == 200
    assert http("DELETE", f"/v1/namespaces/{ns}/views/v").status_code == 204
    (gone,) = _dropped(server, ns, "v")
    assert gone["kind"] == "view"
    resp = requests.post(f"{server.url}/management/v1/dropped/{gone['id']}/undrop", timeout=30)
    assert resp.status_code == 200 and resp.json()["kind"] == "view", resp.text
    assert http.get(f"/v1/namespaces/{ns}/views/v").status_code == 200


def test_a_purge_keeps_the_data_files_of_a_table_whose_gc_is_off(server: Server, catalog, ns: str):
    """As Iceberg's own purge: gc.enabled=false means the data files may be shared with another
    table, so only the table's metadata goes."""
    catalog.create_table(f"{ns}.shared", PY_SCHEMA, properties={"gc.enabled": "false"}).append(rows(0, 3))
    table = catalog.load_table(f"{ns}.shared")
    data = [t.file.file_path for t in table.scan().plan_files()]
    manifests = [m.manifest_path for m in table.current_snapshot().manifests(table.io)]
    catalog.purge_table(f"{ns}.shared")
    purge_now(server.url, f"{ns}.shared")
    assert data and all(table.io.new_input(p).exists() for p in data)
    assert not any(table.io.new_input(p).exists() for p in [*manifests, table.metadata_location])


# -- the retention ends by itself --------------------------------------------------------------------


@pytest.mark.parametrize("retention", ["0", "2s"])
@pytest.mark.slow
def test_the_retention_ends_by_itself_purging_or_forgetting(tmp_path: Path, retention: str):
    env = {**CARE_ON_REQUEST, "CATALOG_DROP_RETENTION": retention, "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "0.5"}
    srv = start_server(tmp_path, "sqlite", env)
    try:
        catalog = srv.catalog()
        catalog.create_namespace("r")
        for name in ("kept", "purged"):
            catalog.create_table(f"r.{name}", PY_SCHEMA).append(rows(0, 3))
        kept, purged = catalog.load_table("r.kept"), catalog.load_table("r.purged")
        kept_files = [t.file.file_path for t in kept.scan().plan_files()] + [kept.metadata_location]
        purged_files = [t.file.file_path for t in purged.scan().plan_files()] + [purged.metadata_location]
        catalog.drop_table("r.kept")
        catalog.purge_table("r.purged")
        if retention == "0":
            assert [d["name"] for d in _dropped(srv, "r")] in ([], ["purged"])  # without purge: released now
        else:
            assert {d["name"] for d in _dropped(srv, "r")} == {"kept", "purged"}
        _wait(lambda: not _dropped(srv, "r"), "the retention to end")
        assert all(kept.io.new_input(p).exists() for p in kept_files)
        assert not any(purged.io.new_input(p).exists() for p in purged_files)
        assert not list((tmp_path / "warehouse" / "r" / "purged").rglob("*.*"))
        with pytest.raises(NoSuchTableError):
            catalog.load_table("r.purged")
    finally:
        srv.stop()


# -- kill -9 ---------------------------------------------------------------------------------------


def _files(root: Path) -> int:
    return sum(len(fs) for _, _, fs in os.walk(root))


JUNK = 40_000  # enough files that the purge is caught half way on this machine


@pytest.mark.slow
def test_a_purge_killed_mid_delete_is_finished_by_another_worker(tmp_path: Path):
    srv = start_server(tmp_path, "sqlite", {"CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600"})
    workers: list[subprocess.Popen] = []
    try:
        catalog = srv.catalog()
        catalog.create_namespace("k")
        catalog.create_table("k.t", PY_SCHEMA).append(rows(0, 3))
        root = tmp_path / "warehouse" / "k" / "t"
        junk = root / "data" / "junk"  # files no metadata names: the purge's sweep deletes them
        junk.mkdir(parents=True)
        for i in range(JUNK):
            (junk / f"{i}.parquet").write_bytes(b"x")
        total = _files(root)
        catalog.purge_table("k.t")
        (gone,) = _dropped(srv, "k", "t")
        assert requests.delete(f"{srv.url}/management/v1/dropped/{gone['id']}", timeout=30).status_code == 202
        workers.append(start_worker(srv))
        _wait(lambda: _files(root) < total, "the purge to start deleting", timeout=60)
        os.kill(workers[0].pid, signal.SIGKILL)
        workers[0].wait(10)
        left = _files(root)
        assert 0 < left < total, "the purge was not caught half way: raise JUNK"

        (half,) = _dropped(srv, "k", "t")
        assert half["state"] == "purging"
        resp = requests.post(f"{srv.url}/management/v1/dropped/{gone['id']}/undrop", timeout=30)
        assert resp.status_code == 409 and "purge has begun" in resp.json()["error"]["message"]
        with pytest.raises(TableAlreadyExistsError):  # the location is still the dropped table's
            catalog.create_table("k.other", PY_SCHEMA, location=f"file://{root}")
        time.sleep(1)
        assert _files(root) == left  # nothing runs it while the dead worker's lease holds

        workers.append(start_worker(srv))  # claims it again once the lease expired
        _wait(lambda: not _dropped(srv, "k"), "the purge to be finished", timeout=120)
        assert _files(root) == 0
        tasks = requests.get(f"{srv.url}/management/v1/maintenance/tasks", timeout=30).json()["tasks"]
        (purge,) = [t for t in tasks if t["kind"] == "purge"]
        assert purge["state"] == "done" and purge["attempts"] == 2, purge
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(10)
        srv.stop()


# -- who may see and undrop ------------------------------------------------------------------------


def test_dropped_entries_are_seen_and_restored_by_those_with_grants(tmp_path: Path):
    srv = start_server(tmp_path, "sqlite", auth_env(tmp_path))
    try:
        admin, reader, dropper = ({"Authorization": f"Bearer {token(srv, c)}"} for c in ("admin", "analyst", "ingest"))
        catalog = as_(srv, "admin")
        catalog.create_namespace("g")
        for name in ("t", "hidden"):
            catalog.create_table(f"g.{name}", PY_SCHEMA)
        for principal, privileges in (("client:analyst", ["read"]), ("client:ingest", ["drop"])):
            grant = {"principal": principal, "privileges": privileges, "on": {"table": ["g", "t"]}}
            assert requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=admin, timeout=10).ok
        grant = {"principal": "client:ingest", "privileges": ["create"], "on": {"namespace": ["g"]}}
        assert requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=admin, timeout=10).ok
        catalog.drop_table("g.t")
        catalog.drop_table("g.hidden")

        assert {d["name"] for d in _dropped(srv, "g", headers=reader)} == {"t"}  # grants name it: still seen
        (gone,) = _dropped(srv, "g", "t", headers=admin)
        undrop = f"{srv.url}/management/v1/dropped/{gone['id']}/undrop"
        assert requests.post(undrop, headers=reader, timeout=10).status_code == 403
        end = requests.delete(f"{srv.url}/management/v1/dropped/{gone['id']}", headers=reader, timeout=10)
        assert end.status_code == 403
        assert requests.post(undrop, headers=dropper, timeout=10).status_code == 200
        assert catalog.table_exists("g.t")
        assert requests.get(f"{srv.url}/management/v1/dropped", timeout=10).status_code == 401
    finally:
        srv.stop()
