"""Table maintenance the catalog runs itself, on both backends, with real pyiceberg clients.

A server with maintenance on (the default, one worker thread) is started per backend. Snapshot
expiry keeps exactly what the table's policy says and deletes exactly the files only expired
snapshots used; orphan removal deletes old unreferenced files and keeps fresh ones; the queue
hands each task to one worker, takes a task back from a worker whose lease expired, and retries
then fails visibly. Every delete is asserted on the filesystem or the bucket.
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests.support import (
    CARE_ENV,
    Server,
    as_,
    auth_env,
    backends,
    care_server,
    run_care,
    start_server,
    start_worker,
    token,
    wait_task,
)

ROWS_SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def _care_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, **env: str) -> Server:
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    return care_server(request.param, tmp_path_factory.mktemp(f"care-{request.param}"), services, **env)


@pytest.fixture(scope="module", params=backends())
def care(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _care_server(request, tmp_path_factory)
    yield srv
    srv.stop()


GRACE_S = 8


@pytest.fixture(params=backends())
def graced(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Table maintenance with a writer grace: snapshots that were a head within GRACE_S are never expired."""
    srv = _care_server(request, tmp_path_factory, CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS=str(GRACE_S))
    yield srv
    srv.stop()


class Files:
    """The files of a warehouse location, on disk or in the bucket."""

    def __init__(self, server: Server) -> None:
        self.s3 = getattr(server, "s3", None)

    def _client(self):  # noqa: ANN202
        import boto3

        s3 = self.s3
        return boto3.client(
            "s3",
            endpoint_url=s3.endpoint,
            region_name=s3.region,
            aws_access_key_id=s3.access_key,
            aws_secret_access_key=s3.secret_key,
        )

    def under(self, location: str) -> set[str]:
        if self.s3 is None:
            root = location.removeprefix("file://")
            return {
                "file://" + os.path.join(d, f) if location.startswith("file:") else os.path.join(d, f)
                for d, _, fs in os.walk(root)
                for f in fs
            }
        bucket, _, prefix = location.removeprefix("s3://").partition("/")
        found = set()
        for page in self._client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            found.update(f"s3://{bucket}/{o['Key']}" for o in page.get("Contents") or [])
        return found

    def put(self, location: str, data: bytes, age_s: float = 0) -> None:
        if self.s3 is None:
            path = location.removeprefix("file://")
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(data)
            if age_s:
                old = time.time() - age_s
                os.utime(path, (old, old))
            return
        bucket, _, key = location.removeprefix("s3://").partition("/")
        self._client().put_object(Bucket=bucket, Key=key, Body=data)


def _norm(path: str) -> str:
    return "file://" + path.removeprefix("file:").removeprefix("//") if not path.startswith("s3") else path


def _table(catalog: RestCatalog, ns: str, name: str, **props: str):  # noqa: ANN202
    return catalog.create_table(f"{ns}.{name}", ROWS_SCHEMA, properties=props)


def _rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def _live_files(table) -> set[str]:  # noqa: ANN001
    """Every file a snapshot of the table references, from pyiceberg's own reading."""
    io, found = table.io, set()
    meta = table.metadata
    found.add(table.metadata_location)
    found.update(e.metadata_file for e in meta.metadata_log)
    for snapshot in meta.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            found.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
                found.add(entry.data_file.file_path)
    return {_norm(f) for f in found}


def test_expiry_keeps_what_the_policy_says_and_deletes_only_what_expired_snapshots_used(care: Server) -> None:
    catalog = care.catalog()
    ns = f"care_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = _table(
        catalog,
        ns,
        "t",
        **{"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "2"},
    )
    table.append(_rows(10))  # s1: f1
    table.overwrite(_rows(10, 100))  # s2: f1 deleted, f2 added
    tagged = table.refresh().current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(tagged, "keep").commit()
    table.append(_rows(10, 200))  # s3
    table.append(_rows(10, 300))  # s4
    table.append(_rows(10, 400))  # s5
    table = table.refresh()
    snapshots = [s.snapshot_id for s in table.metadata.snapshots]
    first_list = table.metadata.snapshots[0].manifest_list
    files = Files(care)
    before_on_disk = files.under(table.location())
    expected_kept = {snapshots[-1], snapshots[-2], tagged}

    dry = run_care(care, ns, "t", kinds=["expire-snapshots"], **{"dry-run": True})[0]
    assert dry["state"] == "done" and dry["result"]["dry-run"], dry
    assert set(dry["result"]["expired-snapshots"]) == set(snapshots) - expected_kept
    assert files.under(table.location()) == before_on_disk, "a dry run deleted files"

    task = run_care(care, ns, "t", kinds=["expire-snapshots"])[0]
    assert task["state"] == "done", task
    table = table.refresh()
    assert {s.snapshot_id for s in table.metadata.snapshots} == expected_kept
    assert set(task["result"]["expired-snapshots"]) == set(snapshots) - expected_kept
    after_on_disk = files.under(table.location())
    live = _live_files(table)
    assert live <= {_norm(f) for f in after_on_disk}, "a file a kept snapshot references was deleted"
    deleted = {_norm(f) for f in before_on_disk} - {_norm(f) for f in after_on_disk}
    assert _norm(first_list) in deleted, "the manifest list of an expired snapshot was kept"
    assert deleted and not (deleted & live)
    assert task["result"]["deleted-files"] == len(dry["result"]["files-to-delete"])
    # readable: current, and the tagged snapshot by time travel
    assert table.scan().to_arrow().num_rows == 40
    assert table.scan(snapshot_id=tagged).to_arrow().num_rows == 10


def test_expiry_never_deletes_files_outside_the_table_that_hostile_metadata_names(care: Server) -> None:
    """A registered table whose old snapshot names another table's manifest list: expiring that
    snapshot makes the neighbour's list, manifests and data files "unreachable" from this table, but
    they are not its own, so they are kept (and the neighbour still reads)."""
    catalog = care.catalog()
    ns = f"care_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    neighbour = _table(catalog, ns, "neighbour")
    neighbour.append(_rows(5))
    neighbour = neighbour.refresh()
    theirs = _live_files(neighbour)
    src = _table(catalog, ns, "src", **{"history.expire.max-snapshot-age-ms": "1"})
    src.append(_rows(1, 100))
    src = src.refresh()
    files = Files(care)
    doc = json.loads(src.io.new_input(src.metadata_location).open().read())
    catalog.drop_table(f"{ns}.src")
    gone = requests.get(f"{care.url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()
    assert requests.delete(f"{care.url}/management/v1/dropped/{gone['dropped'][0]['id']}", timeout=30).ok  # forget
    own = doc["snapshots"][0]
    foreign = {
        "snapshot-id": 1,
        "sequence-number": 0,
        "timestamp-ms": own["timestamp-ms"] - 1000,
        "manifest-list": neighbour.current_snapshot().manifest_list,
        "summary": {"operation": "append"},
        "schema-id": own.get("schema-id", 0),
    }
    doc["snapshots"].insert(0, foreign)
    crafted = f"{doc['location']}/metadata/00009-{uuid.uuid4()}.metadata.json"
    files.put(crafted, json.dumps(doc).encode())
    resp = requests.post(
        f"{care.url}/v1/namespaces/{ns}/register", json={"name": "hostile", "metadata-location": crafted}, timeout=30
    )
    assert resp.status_code == 200, resp.text

    task = run_care(care, ns, "hostile", kinds=["expire-snapshots"])[0]
    assert task["state"] == "done" and task["result"]["expired-snapshots"] == [1], task
    on_disk = {_norm(f) for f in files.under(neighbour.location())}
    assert theirs <= on_disk, "expiry deleted another table's files"
    assert neighbour.refresh().scan().to_arrow().num_rows == 5
    assert catalog.load_table(f"{ns}.hostile").scan().to_arrow().num_rows == 1


@pytest.mark.slow
def test_orphans_older_than_the_age_are_removed_and_fresh_ones_kept(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "sqlite", {**CARE_ENV, "CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS": "1"})
    try:
        catalog = srv.catalog()
        catalog.create_namespace("o")
        table = _table(catalog, "o", "t")
        table.append(_rows(5))
        table = table.refresh()
        base = table.location().removeprefix("file://")
        old = f"{base}/data/forgotten-by-a-crashed-writer.parquet"
        fresh = f"{base}/data/being-written-now.parquet"
        files = Files(srv)
        files.put(old, b"x" * 100, age_s=2 * 3600)
        files.put(fresh, b"y" * 100)
        outside = tmp_path / "warehouse" / "o" / "not-a-table-file.txt"  # in the namespace, not the table
        files.put(str(outside), b"z", age_s=2 * 3600)
        live = _live_files(table)

        dry = run_care(srv, "o", "t", kinds=["remove-orphans"], **{"dry-run": True})[0]
        assert dry["result"]["files-to-delete"] == [f"file://{old}"], dry
        assert os.path.exists(old)

        task = run_care(srv, "o", "t", kinds=["remove-orphans"])[0]
        assert task["state"] == "done" and task["result"]["orphans"] == 1, task
        assert not os.path.exists(old)
        assert os.path.exists(fresh) and outside.exists()
        assert all(os.path.exists(f.removeprefix("file://")) for f in live)
        assert table.refresh().scan().to_arrow().num_rows == 5
    finally:
        srv.stop()


@pytest.fixture
def queued_only(tmp_path: Path) -> Iterator[tuple[Server, object]]:
    """A server that runs no task itself (CATALOG_MAINTENANCE_WORKERS=0), and the same catalog in
    this process: tasks stay queued until the test runs them, one claim at a time."""
    from catalog.server.app import build_catalog
    from catalog.settings import Settings

    srv = start_server(tmp_path, "sqlite", {"CATALOG_MAINTENANCE_WORKERS": "0"})
    local = build_catalog(
        Settings(
            database_url=srv.env["CATALOG_DATABASE_URL"],
            warehouse=srv.env["CATALOG_WAREHOUSE"],
            maintenance_max_attempts=2,
            maintenance_retry_seconds=0,
            maintenance_lease_seconds=5,
            maintenance_writer_grace_seconds=0,
        )
    )
    yield srv, local
    local.db.engine.dispose()
    srv.stop()


def _queue(server: Server, ns: str, table: str, kind: str = "expire-snapshots") -> dict:
    url = f"{server.url}/management/v1/maintenance/tables/{quote(ns)}/{quote(table)}"
    resp = requests.post(url, json={"kinds": [kind]}, timeout=30)
    assert resp.status_code == 202, resp.text
    return resp.json()["tasks"][0]


def test_a_table_dropped_or_recreated_while_its_task_waits_is_skipped(queued_only) -> None:  # noqa: ANN001
    from catalog.maintenance.worker import Workers

    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("d")
    _table(catalog, "d", "gone").append(_rows(3))
    _table(catalog, "d", "again").append(_rows(3))
    gone, again = _queue(srv, "d", "gone"), _queue(srv, "d", "again")
    catalog.drop_table("d.gone")
    catalog.drop_table("d.again")
    _table(catalog, "d", "again", **{"history.expire.max-snapshot-age-ms": "1"}).append(_rows(3))
    workers = Workers(local.jobs, 1)
    assert workers.run_one("test") and workers.run_one("test")
    for queued in (gone, again):
        task = local.tasks.get_task(queued["id"])
        assert task.state == "done" and "skipped" in task.result, task
    assert len(catalog.load_table("d.again").metadata.snapshots) == 1  # the new table was not touched


def test_a_renamed_table_is_cared_for_under_its_new_name(queued_only) -> None:  # noqa: ANN001
    from catalog.maintenance.worker import Workers

    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("r")
    table = _table(catalog, "r", "t", **{"history.expire.max-snapshot-age-ms": "1"})
    for i in range(3):
        table.append(_rows(2, i * 10))
    queued = _queue(srv, "r", "t")
    catalog.rename_table("r.t", "r.moved")
    assert Workers(local.jobs, 1).run_one("test")
    task = local.tasks.get_task(queued["id"])
    assert task.state == "done" and len(task.result["expired-snapshots"]) == 2, task
    assert len(catalog.load_table("r.moved").metadata.snapshots) == 1


def test_a_killed_workers_task_is_claimed_again_and_its_late_result_dropped(queued_only) -> None:  # noqa: ANN001
    """A worker that claimed a task and died (kill -9: it never finishes, never renews its lease)."""
    from catalog.maintenance.worker import Workers

    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("k")
    table = _table(catalog, "k", "t", **{"history.expire.max-snapshot-age-ms": "1"})
    for i in range(3):
        table.append(_rows(1, i))
    queued = _queue(srv, "k", "t")
    dead = local.tasks.claim("dead-worker", lease_ms=300)
    assert dead is not None and dead.id == queued["id"]
    assert local.tasks.claim("another", lease_ms=300) is None  # not twice while the lease holds
    time.sleep(0.5)
    assert Workers(local.jobs, 1).run_one("successor")
    task = local.tasks.get_task(queued["id"])
    assert task.state == "done" and task.attempts == 2 and len(task.result["expired-snapshots"]) == 2
    assert not local.tasks.finish(dead, "dead-worker", {"late": True}, None)  # its result is not taken
    assert local.tasks.get_task(queued["id"]).result == task.result
    live = _live_files(catalog.load_table("k.t"))
    assert all(os.path.exists(f.removeprefix("file://")) for f in live)


def test_storage_errors_are_retried_then_the_task_fails_visibly(queued_only) -> None:  # noqa: ANN001
    from catalog.maintenance.worker import Workers

    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("f")
    table = _table(catalog, "f", "t", **{"history.expire.max-snapshot-age-ms": "1"})
    for i in range(3):
        table.append(_rows(1, i))
    first_list = table.refresh().metadata.snapshots[0].manifest_list
    os.remove(first_list.removeprefix("file://"))  # unreadable: the planner must not guess
    before = catalog.load_table("f.t").metadata_location
    queued = _queue(srv, "f", "t")
    workers = Workers(local.jobs, 1)
    assert workers.run_one("test")
    task = local.tasks.get_task(queued["id"])
    assert task.state == "queued" and task.attempts == 1 and task.last_error, task
    assert workers.run_one("test")
    task = local.tasks.get_task(queued["id"])
    assert task.state == "failed" and task.attempts == 2 and task.last_error, task
    assert catalog.load_table("f.t").metadata_location == before  # nothing was committed
    listed = requests.get(f"{srv.url}/management/v1/maintenance/tasks", params={"state": "failed"}, timeout=10)
    assert [t["id"] for t in listed.json()["tasks"]] == [queued["id"]]
    assert listed.json()["tasks"][0]["last-error"]


def test_one_task_per_table_and_kind_is_queued(queued_only) -> None:  # noqa: ANN001
    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("q")
    _table(catalog, "q", "t").append(_rows(1))
    first, second = _queue(srv, "q", "t"), _queue(srv, "q", "t")
    assert first["id"] == second["id"] and first["created"] and not second["created"]
    orphans = _queue(srv, "q", "t", "remove-orphans")
    assert orphans["id"] != first["id"]


@pytest.mark.slow
def test_appends_racing_expiry_all_land_without_a_409(graced: Server) -> None:
    """Writers keep appending while expiry runs again and again on a table whose policy expires
    everything at once: every append lands exactly once, and no writer fails because a snapshot it
    started from was expired under it (the writer grace spares those; pyiceberg validates against its
    starting snapshot). The snapshots older than the grace do get expired meanwhile."""
    import threading

    care = graced
    catalog = care.catalog()
    ns = f"care_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = _table(catalog, ns, "t", **{"history.expire.max-snapshot-age-ms": "1"})
    for i in range(3):
        table.append(_rows(1, 1000 + i))
    old = {s.snapshot_id for s in table.refresh().metadata.snapshots}
    time.sleep(GRACE_S + 1)  # the first two are older than the grace: expirable while the writers run
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        client = care.catalog()
        for i in range(6):
            for _attempt in range(20):  # pyiceberg does not retry a 409 itself: count any
                try:
                    client.load_table(f"{ns}.t").append(_rows(1, w * 100 + i))
                    break
                except Exception as e:  # noqa: BLE001
                    if "CommitFailed" not in type(e).__name__ and "409" not in str(e):
                        errors.append(e)
                        return
            else:
                errors.append(AssertionError("an append never landed"))

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    runs = []
    while any(t.is_alive() for t in threads):
        runs.append(run_care(care, ns, "t", kinds=["expire-snapshots"])[0])
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(r["state"] == "done" for r in runs), runs
    expired = {i for r in runs for i in r["result"]["expired-snapshots"]}
    assert len(expired & old) >= 2, (expired, old)  # the race was not vacuous (the third, once past the grace)
    table = catalog.load_table(f"{ns}.t")
    ids = sorted(table.scan().to_arrow().column("id").to_pylist())
    assert ids == sorted([1000, 1001, 1002, *(w * 100 + i for w in range(3) for i in range(6))])


def test_the_scheduler_expires_a_table_by_itself_by_default(tmp_path: Path) -> None:
    env = {**CARE_ENV, "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "0.5", "CATALOG_MAINTENANCE_EXPIRE_EVERY_MINUTES": "0"}
    srv = start_server(tmp_path, "sqlite", env)
    try:
        catalog = srv.catalog()
        catalog.create_namespace("s")
        on = _table(catalog, "s", "on", **{"history.expire.max-snapshot-age-ms": "1"})
        off = _table(
            catalog, "s", "off", **{"history.expire.max-snapshot-age-ms": "1", "catalog.maintenance.enabled": "false"}
        )
        for i in range(3):
            on.append(_rows(1, i))
            off.append(_rows(1, i))
        deadline = time.monotonic() + 60
        while len(catalog.load_table("s.on").metadata.snapshots) > 1:
            assert time.monotonic() < deadline, "the scheduler never expired the table"
            time.sleep(0.3)
        assert len(catalog.load_table("s.off").metadata.snapshots) == 3
        metrics = requests.get(f"{srv.url}/metrics", timeout=10).text
        assert 'catalog_maintenance_tasks_total{kind="expire-snapshots",outcome="done"}' in metrics
    finally:
        srv.stop()


def test_maintenance_needs_alter_to_run_and_read_to_see(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "sqlite", {**CARE_ENV, **auth_env(tmp_path)})
    try:
        admin = as_(srv, "admin")
        admin.create_namespace("g")
        _table(admin, "g", "t").append(_rows(1))
        grant = {"principal": "client:analyst", "privileges": ["read"], "on": {"table": ["g", "t"]}}
        admin_h = {"Authorization": f"Bearer {token(srv, 'admin')}"}
        reader_h = {"Authorization": f"Bearer {token(srv, 'analyst')}"}
        assert (
            requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=admin_h, timeout=10).status_code == 201
        )
        url = f"{srv.url}/management/v1/maintenance/tables/g/t"
        assert requests.post(url, json={}, headers=reader_h, timeout=10).status_code == 403
        assert requests.post(url, json={"kinds": ["expire-snapshots"]}, headers=admin_h, timeout=10).status_code == 202
        seen = requests.get(f"{srv.url}/management/v1/maintenance/tasks", headers=reader_h, timeout=10)
        assert seen.status_code == 200 and {t["table"] for t in seen.json()["tasks"]} == {"t"}
        nobody = requests.get(f"{srv.url}/management/v1/maintenance/tasks", timeout=10)
        assert nobody.status_code == 401
    finally:
        srv.stop()


def test_expiry_is_due_again_after_n_commits_however_recent_its_lastrun_care(queued_only) -> None:  # noqa: ANN001
    """``CATALOG_MAINTENANCE_EXPIRE_EVERY_COMMITS``: a hot table is not left to grow for the whole
    ``..._EXPIRE_EVERY_MINUTES``; a quiet one is not looked at again."""
    from catalog.maintenance.worker import Scheduler, Workers
    from catalog.server.app import build_catalog

    srv, queued_local = queued_only
    update = {"maintenance_expire_every_minutes": 600, "maintenance_expire_every_commits": 5}
    local = build_catalog(queued_local.settings.model_copy(update=update))
    try:
        catalog = srv.catalog()
        catalog.create_namespace("n")
        table = _table(catalog, "n", "hot")
        table.append(_rows(1))
        scheduler, workers = Scheduler(local.jobs, local.leases), Workers(local.jobs, 1)

        def expiries() -> list:
            return [t for t in local.tasks.list_tasks() if t.kind == "expire-snapshots"]

        scheduler.schedule()  # never expired: due
        assert len(expiries()) == 1
        while workers.run_one("test"):
            pass
        for i in range(4):
            table.append(_rows(1, i))
        scheduler.schedule()
        assert len(expiries()) == 1  # 4 commits since its last run: not yet
        table.append(_rows(1, 9))
        scheduler.schedule()
        assert len(expiries()) == 2 and expiries()[0].state == "queued"  # the 5th commit made it due
    finally:
        local.db.engine.dispose()


JUNK = 40_000  # enough old files that the worker is caught half way through deleting them


@pytest.mark.slow
def test_orphan_removal_killed_mid_delete_loses_nothing(tmp_path: Path) -> None:
    """kill -9 of a dedicated worker process while it deletes orphans: the task is claimed again
    once its lease expired, finishes the job, and every file the table references is still there."""
    srv = start_server(tmp_path, "sqlite", {"CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600"})  # runs no task
    workers = []
    try:
        catalog = srv.catalog()
        catalog.create_namespace("o")
        table = _table(catalog, "o", "t")
        for i in range(3):
            table.append(_rows(2, 10 * i))
        table = catalog.load_table("o.t")
        live = _live_files(table)
        junk = tmp_path / "warehouse" / "o" / "t" / "data" / "junk"
        junk.mkdir(parents=True)
        old = time.time() - 100 * 3600  # older than the 72 h orphan age
        for i in range(JUNK):
            path = junk / f"{i}.parquet"
            path.write_bytes(b"x")
            os.utime(path, (old, old))
        task = _queue(srv, "o", "t", "remove-orphans")
        workers.append(start_worker(srv))
        deadline = time.monotonic() + 60
        while len(os.listdir(junk)) == JUNK:
            assert time.monotonic() < deadline, "the worker never started deleting"
            time.sleep(0.005)
        os.kill(workers[0].pid, signal.SIGKILL)
        workers[0].wait(10)
        left = len(os.listdir(junk))
        assert 0 < left < JUNK, "the removal was not caught half way: raise JUNK"
        assert all(os.path.exists(f.removeprefix("file://")) for f in live)

        workers.append(start_worker(srv))  # claims it again once the dead worker's lease expired
        done = wait_task(srv.url, task["id"])
        assert done["state"] == "done" and done["attempts"] == 2 and done["result"]["deleted-files"] == left, done
        assert os.listdir(junk) == []
        assert all(os.path.exists(f.removeprefix("file://")) for f in live)
        assert sorted(catalog.load_table("o.t").scan().to_arrow().column("id").to_pylist()) == [0, 1, 10, 11, 20, 21]
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(10)
        srv.stop()


def test_orphan_removal_finishes_on_a_table_under_continuous_appends(queued_only) -> None:  # noqa: ANN001
    """Each commit that lands while it looks is read (only what it added) and the pointer checked
    again: a hot table still gets its orphans removed, and nothing a commit references goes."""
    import threading

    from catalog.maintenance.worker import Workers

    srv, local = queued_only
    catalog = srv.catalog()
    catalog.create_namespace("h")
    table = _table(catalog, "h", "t")
    table.append(_rows(1))
    location = table.location().removeprefix("file://")
    old = time.time() - 100 * 3600
    for i in range(200):
        path = Path(location) / "data" / f"orphan-{i}.parquet"
        path.write_bytes(b"x")
        os.utime(path, (old, old))
    stop, landed = threading.Event(), []

    def append() -> None:
        writer = srv.catalog().load_table("h.t")
        while not stop.is_set():
            writer.append(_rows(1, 100 + len(landed)))
            landed.append(1)

    appender = threading.Thread(target=append)
    appender.start()
    try:
        while len(landed) < 3:
            time.sleep(0.05)
        queued = _queue(srv, "h", "t", "remove-orphans")
        assert Workers(local.jobs, 1).run_one("test")
    finally:
        stop.set()
        appender.join(60)
    task = local.tasks.get_task(queued["id"])
    assert task.state == "done" and task.result["deleted-files"] == 200, (task.state, task.last_error, task.result)
    table = catalog.load_table("h.t")
    assert all(os.path.exists(f.removeprefix("file://")) for f in _live_files(table))
    assert table.scan().to_arrow().num_rows == 1 + len(landed)
