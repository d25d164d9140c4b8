"""What a table owns: its location and its ``write.*.path`` prefixes, live and dropped, against
another principal's creates, registers, commits and care. Each attack is checked on the files (the
filesystem or the bucket listing), not only on the answer; both backends where storage is touched.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.exceptions import TableAlreadyExistsError

from catalog.database import migrate
from tests.support import (
    CARE_ON_REQUEST,
    PY_SCHEMA,
    Server,
    as_,
    assert_error,
    auth_env,
    purge_now,
    rows,
    start_server,
    stored_files,
    token,
)


def _victim(server: Server, catalog, ns: str, name: str = "victim") -> tuple[object, str]:
    """A table whose data files live under ``write.data.path``, outside its location (normal on
    object stores), with a few appends: the table and that data path."""
    root = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    root = root if "://" in root else f"file://{root}"
    data_path = f"{root}/shared-{uuid.uuid4().hex[:8]}/{name}-data"
    table = catalog.create_table(f"{ns}.{name}", PY_SCHEMA, properties={"write.data.path": data_path})
    for i in range(3):
        table.append(rows(i * 2, 2))
    table = catalog.load_table(f"{ns}.{name}")
    data = [t.file.file_path for t in table.scan().plan_files()]
    assert data and all(p.startswith(data_path + "/") for p in data)  # the data path really is used
    return table, data_path


def test_a_table_cannot_be_created_at_or_around_another_tables_write_paths(server: Server, catalog, ns: str, http):
    """Finding (a): a table created AT the victim's write.data.path, dropped with purge, swept the
    victim's data files. Now the create is refused, and the victim's files stay."""
    victim, data_path = _victim(server, catalog, ns)
    before = stored_files(server, data_path)
    parent = data_path.rsplit("/", 1)[0]
    for location in (data_path, data_path + "/inside", parent):
        resp = http.post(
            f"/v1/namespaces/{ns}/tables",
            json={"name": "attacker", "schema": _schema(), "location": location},
        )
        assert_error(resp, 409, "AlreadyExistsException", "overlaps the location of another table or view")
        assert "victim" not in resp.text and data_path not in resp.text
    for key in ("write.data.path", "write.metadata.path", "write.object-storage.path"):
        resp = http.post(
            f"/v1/namespaces/{ns}/tables",
            json={"name": "attacker", "schema": _schema(), "properties": {key: data_path + "/x"}},
        )
        assert_error(resp, 409, "AlreadyExistsException", f"{key} overlaps the location of another table")
    # next to it is someone else's business: allowed, and owned from then on
    beside = catalog.create_table(f"{ns}.beside", PY_SCHEMA, location=data_path + "-beside")
    beside.append(rows(0, 1))
    catalog.purge_table(f"{ns}.beside")
    purge_now(server.url, f"{ns}.beside")
    assert stored_files(server, data_path) == before
    assert stored_files(server, data_path + "-beside") == set()
    assert catalog.load_table(f"{ns}.victim").scan().to_arrow().num_rows == 6


def test_a_commit_cannot_point_a_write_path_over_another_tables_files(server: Server, catalog, ns: str, http):
    """Finding (b): another table set its write.data.path over the victim's directory, and orphan
    removal listed (dry run) and deleted the victim's files. Now the commit is refused; and a
    table's own write path moving elsewhere is recorded, so the old place is free again."""
    victim, data_path = _victim(server, catalog, ns)
    before = stored_files(server, data_path)
    catalog.create_table(f"{ns}.attacker", PY_SCHEMA).append(rows(0, 1))
    home = catalog.load_table(f"{ns}.victim").location()
    for key in ("write.data.path", "write.metadata.path", "write.folder-storage.path"):
        for target in (data_path, data_path.rsplit("/", 1)[0], home, home + "/data"):
            resp = http.post(
                f"/v1/namespaces/{ns}/tables/attacker",
                json={"updates": [{"action": "set-properties", "updates": {key: target}}]},
            )
            assert_error(resp, 409, "AlreadyExistsException", "overlaps the location of another table")
    assert "write.data.path" not in catalog.load_table(f"{ns}.attacker").properties
    runs = requests.post(
        f"{server.url}/management/v1/maintenance/tables/{ns}/attacker",
        json={"kinds": ["remove-orphans"], "dry-run": True},
        timeout=30,
    )
    assert runs.status_code == 202, runs.text
    assert stored_files(server, data_path) == before
    # the victim moves its data path: the old prefix is released, the new one owned
    moved = data_path + "-2"
    with victim.transaction() as tx:
        tx.set_properties({"write.data.path": moved})
    resp = http.post(
        f"/v1/namespaces/{ns}/tables/attacker",
        json={"updates": [{"action": "set-properties", "updates": {"write.data.path": moved + "/x"}}]},
    )
    assert_error(resp, 409, "AlreadyExistsException", "write.data.path overlaps")
    resp = http.post(
        f"/v1/namespaces/{ns}/tables/attacker",
        json={"updates": [{"action": "set-properties", "updates": {"write.data.path": f"{home}-elsewhere"}}]},
    )
    assert resp.status_code == 200, resp.text


def test_a_dropped_tables_write_paths_stay_owned_and_drop_then_register_works(server: Server, catalog, ns: str, http):
    """A dropped table keeps its write paths through its retention; registering that very table
    again (drop then register, how a table moves) supersedes the dropped entry; a different table
    claiming its places stays refused."""
    victim, data_path = _victim(server, catalog, ns)
    metadata = victim.metadata_location
    catalog.drop_table(f"{ns}.victim")  # without purge: its files are kept, owned while retained
    with pytest.raises(TableAlreadyExistsError, match="dropped table or view"):
        catalog.create_table(f"{ns}.other", PY_SCHEMA, location=data_path)
    with pytest.raises(TableAlreadyExistsError, match="dropped table or view"):
        catalog.create_table(f"{ns}.other", PY_SCHEMA, properties={"write.data.path": data_path})
    moved = catalog.register_table(f"{ns}.moved", metadata)
    assert moved.scan().to_arrow().num_rows == 6
    listed = requests.get(f"{server.url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()
    assert not [d for d in listed["dropped"] if d["name"] == "victim"]
    with pytest.raises(TableAlreadyExistsError, match="another table or view"):
        catalog.create_table(f"{ns}.other", PY_SCHEMA, location=data_path)  # the registered table's now
    moved.append(rows(6, 1))  # and it commits as its own
    assert catalog.load_table(f"{ns}.moved").scan().to_arrow().num_rows == 7


def test_statistics_files_outside_the_table_are_accepted_as_java_does_and_never_deleted(
    server: Server, catalog, ns: str, http
):
    """pyiceberg's integration suite sets statistics files anywhere, as Iceberg Java accepts: the
    catalog never reads them, and a purge deletes one only inside the table's own locations."""
    victim, data_path = _victim(server, catalog, ns)
    foreign = sorted(stored_files(server, data_path))[0]  # another table's file: must survive
    table = catalog.create_table(f"{ns}.stats", PY_SCHEMA)
    table.append(rows(0, 1))
    snapshot = catalog.load_table(f"{ns}.stats").current_snapshot().snapshot_id
    update = {
        "action": "set-statistics",
        "statistics": {
            "snapshot-id": snapshot,
            "statistics-path": foreign,
            "file-size-in-bytes": 1,
            "file-footer-size-in-bytes": 1,
            "blob-metadata": [],
        },
    }
    resp = http.post(f"/v1/namespaces/{ns}/tables/stats", json={"updates": [update]})
    assert resp.status_code == 200, resp.text
    catalog.purge_table(f"{ns}.stats")
    purge_now(server.url, f"{ns}.stats")
    assert foreign in stored_files(server, data_path)
    # a manifest list outside the table's locations stays refused: the catalog reads those
    resp = http.post(
        f"/v1/namespaces/{ns}/tables/victim",
        json={
            "updates": [
                {
                    "action": "add-snapshot",
                    "snapshot": {
                        "snapshot-id": 99,
                        "sequence-number": 99,
                        "timestamp-ms": int(time.time() * 1000),
                        "manifest-list": f"{data_path}-x/snap.avro",
                        "summary": {"operation": "append"},
                        "schema-id": 0,
                    },
                }
            ]
        },
    )
    assert_error(resp, 403, "ForbiddenException", "manifest-list")


def test_no_table_at_the_warehouse_root_and_a_purge_leaves_no_empty_directories(server: Server, catalog, ns: str, http):
    root = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    root_uri = root if "://" in root else f"file://{root}"
    for location in (root_uri, root_uri + "/"):
        resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": "t", "schema": _schema(), "location": location})
        assert_error(resp, 400, "BadRequestException", "warehouse root")
        resp = http.post(
            f"/v1/namespaces/{ns}/tables",
            json={"name": "t", "schema": _schema(), "properties": {"write.data.path": location}},
        )
        assert_error(resp, 400, "BadRequestException", "warehouse root")
    table = catalog.create_table(f"{ns}.purged", PY_SCHEMA)
    table.append(rows(0, 2))
    location = catalog.load_table(f"{ns}.purged").location()
    catalog.purge_table(f"{ns}.purged")
    purge_now(server.url, f"{ns}.purged")
    assert stored_files(server, location) == set()
    if server.backend == "sqlite":  # directories are a local disk's
        assert not Path(location.removeprefix("file://")).exists()


def test_another_principal_cannot_claim_a_released_location_but_its_owner_can(tmp_path: Path):
    """Ending a drop's retention without purge keeps the files there: another principal creating a
    table at that location would own them (and could purge them). Only a principal that may drop
    the released table's name takes the location over; the files are never touched meanwhile."""
    srv = start_server(tmp_path, "sqlite", {**auth_env(tmp_path), **CARE_ON_REQUEST})
    try:
        admin = as_(srv, "admin")
        headers = {"Authorization": f"Bearer {token(srv, 'admin')}"}
        admin.create_namespace("hr")
        admin.create_namespace("mine")
        grants = [
            ("client:ingest", ["create", "drop", "purge"], {"namespace": ["mine"]}),
            ("client:ingest", ["create", "register"], {"namespace": ["mine"]}),
        ]
        for principal, privileges, on in grants:
            grant = {"principal": principal, "privileges": privileges, "on": on}
            assert requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=headers, timeout=10).ok
        table = admin.create_table("hr.plans", PY_SCHEMA)
        table.append(rows(0, 3))
        location = admin.load_table("hr.plans").location()
        metadata = admin.load_table("hr.plans").metadata_location
        admin.drop_table("hr.plans")
        purge_now(srv.url, "hr.plans", headers=headers)  # without purge: released, files kept
        kept = stored_files(srv, location)
        assert kept

        attacker = as_(srv, "ingest")
        with pytest.raises(TableAlreadyExistsError, match="dropped without purge"):
            attacker.create_table("mine.grab", PY_SCHEMA, location=location)
        with pytest.raises(TableAlreadyExistsError):
            attacker.create_table("mine.grab", PY_SCHEMA, location=location + "/data")
        with pytest.raises(TableAlreadyExistsError):
            attacker.register_table("mine.grab", metadata)  # the same table: still not theirs
        assert stored_files(srv, location) == kept

        again = admin.create_table("hr.plans2", PY_SCHEMA, location=location)  # who may drop it may
        assert again.location() == location
        assert stored_files(srv, location) >= kept

        # unregister (and a drop with CATALOG_DROP_RETENTION=0) releases at once, the same way
        admin.create_table("hr.budget", PY_SCHEMA).append(rows(0, 1))
        budget = admin.load_table("hr.budget")
        out = requests.post(f"{srv.url}/v1/namespaces/hr/tables/budget/unregister", headers=headers, timeout=30)
        assert out.status_code == 200, out.text
        with pytest.raises(TableAlreadyExistsError, match="dropped without purge"):
            attacker.create_table("mine.grab", PY_SCHEMA, location=budget.location())
        moved = admin.register_table("hr.budget_moved", budget.metadata_location)  # unregister then register
        assert moved.scan().to_arrow().num_rows == 1
    finally:
        srv.stop()


def test_write_paths_of_tables_from_before_the_upgrade_are_recorded_at_start(tmp_path: Path):
    """A database migrated from before write paths were recorded: the server reads each table's
    metadata at start-up and from then on owns its write paths as a new table's."""
    srv = start_server(tmp_path, "sqlite")
    db = Path(srv.env["CATALOG_DATABASE_URL"].removeprefix("sqlite:///"))
    if not db.is_absolute():
        db = srv.log.parent / db
    try:
        catalog = srv.catalog()
        catalog.create_namespace("old")
        data_path = f"file://{srv.env['CATALOG_WAREHOUSE'].rstrip('/')}/elsewhere/old-data"
        catalog.create_table("old.t", PY_SCHEMA, properties={"write.data.path": data_path}).append(rows(0, 1))
        catalog.create_table("old.gone", PY_SCHEMA, properties={"write.data.path": data_path + "2"})
        catalog.drop_table("old.gone")
    finally:
        srv.stop()
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{db}")
    migrate.downgrade(engine, "0010")  # as the database was before
    engine.dispose()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'entry_paths'").fetchone()[0] == 0
    srv = start_server(tmp_path, "sqlite", {"CATALOG_AUTO_MIGRATE": "true"})
    try:
        catalog = srv.catalog()
        for taken in (data_path, data_path + "2"):  # live and dropped
            with pytest.raises(TableAlreadyExistsError, match="overlaps the location"):
                catalog.create_table(f"old.t{uuid.uuid4().hex[:4]}", PY_SCHEMA, location=taken)
    finally:
        srv.stop()


def _schema() -> dict:
    return {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}
