"""Warehouses (issue 31): several on one server, each its own catalog, selected by ``warehouse``.

Real server processes over HTTP and real pyiceberg clients: tables land in their warehouse's storage
(asserted on the filesystem and on Azurite's listing), the same names in two warehouses are different
tables, an unknown warehouse is 404, a warehouse is deleted only when empty, a storage profile that
does not work is refused, grants confine a principal to its warehouse, and a database from before
warehouses migrates and serves its old clients unchanged.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError

from catalog.auth.grants import in_warehouse
from catalog.auth.policy import ROOT, Grant, Privilege, Target, parse_target
from tests.support import (
    CLIENTS,
    PY_SCHEMA,
    assert_error,
    auth_env,
    backends,
    new_pg_database,
    rows,
    s3_profile,
    start_server,
    token,
)

MGMT = "/management/v1/warehouses"


def _client(url: str, warehouse: str | None = None, **props: str) -> RestCatalog:
    extra = {"warehouse": warehouse} if warehouse else {}
    return RestCatalog(f"c-{uuid.uuid4().hex[:6]}", uri=url, **extra, **props)


def _ids(table) -> list[int]:
    return sorted(table.scan().to_arrow().column("id").to_pylist())


# -- two warehouses on one server: local disk and Azurite ---------------------------------------------


@pytest.mark.azure
def test_two_warehouses_local_and_azurite(tmp_path: Path, azurite) -> None:
    root = f"wh-{uuid.uuid4().hex[:8]}"
    # a container of its own (team-b's bucket): the session's are other tests' to keep clean
    container = f"team-b-{uuid.uuid4().hex[:8]}"
    azurite.service().create_container(container)
    declared = tmp_path / "warehouses.yaml"
    declared.write_text(
        f"""
warehouses:
  - name: team-a
    location: {tmp_path / "team-a"}
  - name: team-b
    location: {azurite.location(root, container=container)}
    azure:
      account-key: "{azurite.key}"
      blob-endpoint: {azurite.endpoint}
      vend-credentials: true
      sas-scope: container
"""
    )
    server = start_server(tmp_path / "srv", extra_env={"CATALOG_WAREHOUSES_FILE": str(declared)})
    try:
        listed = requests.get(server.url + MGMT, timeout=10).json()["warehouses"]
        assert [w["name"] for w in listed] == ["default", "team-a", "team-b"]
        assert listed[2]["azure"]["account-key"] == "********"  # never shown
        assert azurite.key not in requests.get(server.url + MGMT + "/team-b", timeout=10).text

        config = requests.get(server.url + "/v1/config", params={"warehouse": "team-b"}, timeout=10).json()
        assert config["overrides"]["prefix"] == "team-b"

        a = _client(server.url, "team-a")
        b = _client(server.url, "team-b", **{"header.X-Iceberg-Access-Delegation": "vended-credentials"})
        default = _client(server.url)
        for catalog, first in ((a, 0), (b, 100), (default, 1000)):
            catalog.create_namespace("sales")
            table = catalog.create_table("sales.orders", PY_SCHEMA)
            table.append(rows(first, 2))

        # The same namespace and table name are three different tables, each with its own rows.
        assert _ids(_client(server.url, "team-a").load_table("sales.orders")) == [0, 1]
        assert _ids(_client(server.url, "team-b").load_table("sales.orders")) == [100, 101]
        assert _ids(_client(server.url).load_table("sales.orders")) == [1000, 1001]

        # Each in its own storage: team-a's directory, team-b's Azurite prefix, the default's directory.
        a_files = [
            p.relative_to(tmp_path / "team-a").as_posix() for p in (tmp_path / "team-a").rglob("*") if p.is_file()
        ]
        assert any(f.startswith("sales/orders/metadata/") and f.endswith(".metadata.json") for f in a_files)
        assert sum(f.startswith("sales/orders/data/") for f in a_files) >= 1
        names = azurite.names(container)
        assert any(n.startswith(f"{root}/sales/orders/metadata/") for n in names), names
        assert any(n.startswith(f"{root}/sales/orders/data/") for n in names), names
        assert (tmp_path / "srv" / "warehouse" / "sales" / "orders").is_dir()
        assert b.load_table("sales.orders").location().startswith(f"abfss://{container}@{azurite.host}/{root}/")

        # Lists in one warehouse never show another's.
        a.create_namespace("only_a")
        assert ("only_a",) in a.list_namespaces() and ("only_a",) not in b.list_namespaces()
        assert ("only_a",) not in default.list_namespaces()
        a.drop_table("sales.orders")
        assert a.list_tables("sales") == [] and b.list_tables("sales") == [("sales", "orders")]

        # Deleted only when empty.
        assert_error(requests.delete(server.url + MGMT + "/team-a", timeout=10), 409, "ConflictException")
        for ns in ("only_a", "sales"):
            a.drop_namespace(ns)
        assert requests.delete(server.url + MGMT + "/team-a", timeout=10).status_code == 204
        assert_error(
            requests.get(server.url + "/v1/config", params={"warehouse": "team-a"}, timeout=10),
            404,
            "NoSuchWarehouseException",
        )
        # its database went with it (team-a was the file's first: id 1); team-b's stays
        assert not (tmp_path / "srv" / "catalog.warehouse-1.db").exists()
        assert (tmp_path / "srv" / "catalog.warehouse-2.db").exists()
        assert _ids(_client(server.url, "team-b").load_table("sales.orders")) == [100, 101]
    finally:
        server.stop()
        azurite.service().delete_container(container)


# -- selection, validation, the probe, the CLI -------------------------------------------------------------


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("warehouses")
    server = start_server(workdir)
    server.workdir = workdir  # type: ignore[attr-defined]
    yield server
    server.stop()


def test_unknown_warehouse_is_404_on_config_and_routes(plain) -> None:
    for name in ("nope", "x" * 300, "../etc", "default2"):
        resp = requests.get(plain.url + "/v1/config", params={"warehouse": name}, timeout=10)
        assert_error(resp, 404, "NoSuchWarehouseException")
    for path in ("/v1/nope/namespaces", "/v1/nope/namespaces/a/tables/t", "/v1/%1Ex/namespaces"):
        assert_error(requests.get(plain.url + path, timeout=10), 404, "NoSuchWarehouseException")
    assert_error(requests.get(plain.url + MGMT + "/nope", timeout=10), 404, "NoSuchWarehouseException")
    # the default: no warehouse, its name, or its location (what clients from before may send)
    base = requests.get(plain.url + "/v1/config", timeout=10).json()
    for asked in ("default", "warehouse", plain.env["CATALOG_WAREHOUSE"]):  # "warehouse": DuckDB's ATTACH
        got = requests.get(plain.url + "/v1/config", params={"warehouse": asked}, timeout=10).json()
        assert got == base


@pytest.mark.parametrize(
    "doc, status",
    [
        ({"name": "Bad Name", "location": "/tmp/x"}, 400),
        ({"name": "a" * 64, "location": "/tmp/x"}, 400),
        ({"name": "default", "location": "/tmp/x"}, 400),  # the default's name
        ({"name": "warehouse", "location": "/tmp/x"}, 400),  # an alias of the default (CATALOG_WAREHOUSE_ALIASES)
        ({"name": "namespaces", "location": "/tmp/x"}, 400),  # a route word
        ({"name": "ok", "location": "relative/dir"}, 400),
        ({"name": "ok", "location": "/tmp/" + "x" * 3000}, 400),
        ({"name": "ok", "location": "/tmp/a\x01b"}, 400),
        ({"name": "ok", "location": "/tmp/x", "s3": {"nonsense": 1}}, 400),
        ({"name": "ok", "location": "/tmp/x", "s3": "endpoint"}, 400),
        ({"name": "ok", "location": "/tmp/x", "azure": {"sas-scope": "everything"}}, 400),
        ({"name": "ok", "location": "/tmp/x", "maintenance": {"max-snapshot-age-ms": -5}}, 400),
        ({"name": "ok", "location": "/tmp/x", "extra": 1}, 400),
        ({"name": "ok", "location": "/tmp/x", "s3": {"endpoint": {"nested": 1}}}, 400),
        ({"name": "ok", "location": 5}, 400),
        ([1, 2], 400),
        ({"name": "ok", "location": "gs://Bad_Bucket/x"}, 400),
    ],
)
def test_hostile_warehouses_are_refused_in_the_iceberg_shape(plain, doc, status) -> None:
    resp = requests.post(plain.url + MGMT, json=doc, timeout=30)
    assert resp.status_code == status, resp.text
    assert set(resp.json()) == {"error"} and resp.json()["error"]["code"] == status
    assert [w["name"] for w in requests.get(plain.url + MGMT, timeout=10).json()["warehouses"]] == ["default"]


def test_garbage_bodies_are_4xx(plain) -> None:
    for body in (b"", b"{", b"\x00\xff", b"[]", b'"x"', b"{" * 5000):
        resp = requests.post(plain.url + MGMT, data=body, headers={"Content-Type": "application/json"}, timeout=10)
        assert 400 <= resp.status_code < 500, (body[:10], resp.status_code, resp.text)
    resp = requests.put(plain.url + MGMT + "/default", json={"location": "/tmp/y"}, timeout=10)
    assert resp.status_code == 400
    assert requests.delete(plain.url + MGMT + "/default", timeout=10).status_code == 400


def test_the_probe_refuses_a_profile_that_does_not_work(plain, tmp_path: Path) -> None:
    unreachable = {
        "name": "far",
        "location": "s3://bucket/x",
        "s3": {"endpoint": "http://127.0.0.1:1", "access-key-id": "a", "secret-access-key": "b"},
    }
    resp = requests.post(plain.url + MGMT, json=unreachable, timeout=120)
    assert_error(resp, 400, "BadRequestException", "Storage probe failed")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    resp = requests.post(plain.url + MGMT, json={"name": "blocked", "location": str(blocker / "wh")}, timeout=30)
    assert_error(resp, 400, "BadRequestException", "Storage probe failed")
    assert [w["name"] for w in requests.get(plain.url + MGMT, timeout=10).json()["warehouses"]] == ["default"]


def test_locations_of_warehouses_do_not_overlap(plain, tmp_path: Path) -> None:
    inside_default = plain.env["CATALOG_WAREHOUSE"] + "/nested"
    resp = requests.post(plain.url + MGMT, json={"name": "inner", "location": inside_default}, timeout=30)
    assert_error(resp, 409, "ConflictException")
    made = requests.post(plain.url + MGMT, json={"name": "one", "location": str(tmp_path / "one")}, timeout=30)
    assert made.status_code == 201, made.text
    try:
        again = requests.post(plain.url + MGMT, json={"name": "one", "location": str(tmp_path / "x")}, timeout=30)
        assert_error(again, 409, "AlreadyExistsException")
        below = requests.post(plain.url + MGMT, json={"name": "two", "location": str(tmp_path / "one/b")}, timeout=30)
        assert_error(below, 409, "ConflictException")
        # a table location outside its warehouse is refused by that warehouse's location policy
        one = _client(plain.url, "one")
        one.create_namespace("n")
        with pytest.raises(Exception, match="outside the warehouse"):
            one.create_table("n.t", PY_SCHEMA, location=plain.env["CATALOG_WAREHOUSE"] + "/n/stolen")
        one.drop_namespace("n")
    finally:
        requests.delete(plain.url + MGMT + "/one", timeout=10)


def test_the_cli_lists_creates_shows_and_deletes(plain, tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "catalog", "warehouses", *args, "--uri", plain.url],
            capture_output=True,
            text=True,
            timeout=60,
        )

    made = cli("create", "--name", "cli-wh", "--location", str(tmp_path / "cli"), "--set", "maintenance.enabled=false")
    assert made.returncode == 0, made.stderr
    listed = cli("list")
    assert listed.returncode == 0 and '"cli-wh"' in listed.stdout and '"default"' in listed.stdout
    shown = cli("show", "cli-wh")
    assert shown.returncode == 0 and '"enabled": false' in shown.stdout
    assert cli("show", "nope").returncode == 1
    refused = cli("create", "--name", "BAD", "--location", "/tmp/z")
    assert refused.returncode == 2 and "name" in refused.stderr
    assert cli("delete", "cli-wh").returncode == 0
    assert "cli-wh" not in cli("list").stdout


# -- grants: a principal granted one warehouse cannot see or touch the other -------------------------------

BOOTSTRAP = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: client:ingest, privileges: [admin], on: {warehouse: team-a}}
  - {principal: client:analyst, privileges: [read], on: {warehouse: team-b}}
"""


def test_a_principal_granted_one_warehouse_cannot_touch_the_other(tmp_path: Path) -> None:
    env = auth_env(tmp_path, BOOTSTRAP)
    server = start_server(tmp_path / "srv", extra_env=env)
    try:
        admin_h = {"Authorization": f"Bearer {token(server, 'admin')}"}
        ingest_h = {"Authorization": f"Bearer {token(server, 'ingest')}"}
        for name in ("team-a", "team-b"):
            doc = {"name": name, "location": str(tmp_path / name)}
            assert requests.post(server.url + MGMT, json=doc, headers=admin_h, timeout=30).status_code == 201
        # only an admin of the catalog manages warehouses
        doc = {"name": "team-c", "location": str(tmp_path / "c")}
        assert requests.post(server.url + MGMT, json=doc, headers=ingest_h, timeout=30).status_code == 403
        assert requests.get(server.url + MGMT, headers=ingest_h, timeout=30).status_code == 403

        signin = {"credential": "", "oauth2-server-uri": server.url + "/v1/oauth/tokens"}

        def as_in(client: str, warehouse: str) -> RestCatalog:
            return _client(server.url, warehouse, **{**signin, "credential": f"{client}:{CLIENTS[client]}"})

        b_admin = as_in("admin", "team-b")
        b_admin.create_namespace("sales")
        b_admin.create_table("sales.orders", PY_SCHEMA).append(rows(0, 2))

        a = as_in("ingest", "team-a")  # admin of team-a only
        a.create_namespace("sales")
        a.create_table("sales.orders", PY_SCHEMA).append(rows(10, 1))
        assert _ids(a.load_table("sales.orders")) == [10]

        # the same principal in team-b: sees nothing, loads nothing, commits nothing
        b = as_in("ingest", "team-b")
        assert b.list_namespaces() == []
        with pytest.raises((ForbiddenError, NoSuchTableError)):
            b.load_table("sales.orders")
        headers = ingest_h
        resp = requests.get(server.url + "/v1/team-b/namespaces/sales/tables", headers=headers, timeout=10)
        assert resp.status_code == 403
        commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"x": "1"}}]}
        resp = requests.post(
            server.url + "/v1/team-b/namespaces/sales/tables/orders", json=commit, headers=headers, timeout=10
        )
        assert resp.status_code == 403, resp.text
        resp = requests.get(
            server.url + "/v1/team-b/namespaces/sales/tables/orders/credentials", headers=headers, timeout=10
        )
        assert resp.status_code == 403, resp.text  # no vended credentials either
        # nor in the default warehouse
        assert _client(server.url, **{**signin, "credential": f"ingest:{CLIENTS['ingest']}"}).list_namespaces() == []

        # the reader of team-b reads there and cannot write; sees nothing of team-a
        reader = as_in("analyst", "team-b")
        assert _ids(reader.load_table("sales.orders")) == [0, 1]
        with pytest.raises(ForbiddenError):
            reader.load_table("sales.orders").append(rows(5, 1))
        assert as_in("analyst", "team-a").list_namespaces() == []
    finally:
        server.stop()


def test_warehouse_grants_decide_inside_their_warehouse_only() -> None:
    grants = [
        Grant("client:a", Privilege.READ, ROOT, id=1),
        Grant("client:b", Privilege.WRITE, Target("warehouse", ("team-a",)), id=2),
        Grant("client:c", Privilege.READ, Target("namespace", ("sales",)), id=3),
    ]
    in_a = in_warehouse(grants, "team-a", "default")
    assert {(g.principal, g.target) for g in in_a} == {("client:a", ROOT), ("client:b", ROOT)}
    in_default = in_warehouse(grants, None, "default")
    assert {g.principal for g in in_default} == {"client:a", "client:c"}
    assert parse_target({"warehouse": "team-a"}) == Target("warehouse", ("team-a",))
    with pytest.raises(Exception, match="object"):
        parse_target({"warehouse": "Not A Name"})


# -- a database from before warehouses -------------------------------------------------------------------------


def _code_before_warehouses(into: Path) -> Path:
    """This repository's code as it was before warehouses (the parent of the commit that added
    migration 0009), exported with ``git archive``: the server an existing deployment runs."""
    repo = Path(__file__).resolve().parent.parent
    try:
        added = subprocess.run(
            ["git", "log", "--diff-filter=A", "--format=%H", "--", "alembic/versions/0009_warehouses.py"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.split()[-1]
        archive = subprocess.run(["git", "archive", f"{added}^"], cwd=repo, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError, IndexError):
        pytest.skip("not a git checkout with the warehouses commit: no code from before to compare with")
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True, timeout=60)
    return into


@pytest.mark.parametrize("backend", backends())
def test_a_database_from_before_warehouses_migrates_and_serves_old_clients(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import sqlalchemy as sa

    from catalog.settings import Settings
    from catalog.store import migrate
    from catalog.store.db import create_engine

    old_code = _code_before_warehouses(tmp_path / "old-code")
    workdir = tmp_path / "srv"
    db: dict[str, str] = {}
    if backend == "postgres-s3":  # PostgreSQL with a local warehouse: the database is what migrates
        db = {"CATALOG_DATABASE_URL": new_pg_database(request.getfixturevalue("services")["pg"], "before_wh")}
    old_env = {"PYTHONPATH": str(old_code), **db}
    # a deployment from before: its server, its tables, its rows
    server = start_server(workdir, extra_env=old_env)
    try:
        client = _client(server.url)
        client.create_namespace("legacy")
        client.create_table("legacy.t", PY_SCHEMA).append(rows(0, 3))
        location = client.load_table("legacy.t").location()
    finally:
        server.stop()
    settings = Settings(database_url=server.env["CATALOG_DATABASE_URL"], warehouse=server.env["CATALOG_WAREHOUSE"])
    engine = create_engine(settings)
    assert migrate.current(engine) == frozenset({"0008"})
    engine.dispose()

    # this version: migrates at start, serves the old clients unchanged, nothing moved
    server = start_server(workdir, extra_env=db)
    try:
        client = _client(server.url)  # an old client: no warehouse
        table = client.load_table("legacy.t")
        assert table.location() == location and _ids(table) == [0, 1, 2]
        table.append(rows(3, 1))
        by_location = _client(server.url, server.env["CATALOG_WAREHOUSE"])  # one that sent the location
        assert _ids(by_location.load_table("legacy.t")) == [0, 1, 2, 3]
        resp = requests.post(server.url + MGMT, json={"name": "new", "location": str(tmp_path / "new")}, timeout=30)
        assert resp.status_code == 201, resp.text
        new = _client(server.url, "new")  # on PostgreSQL: a schema of its own
        new.create_namespace("legacy")
        new.create_table("legacy.t", PY_SCHEMA).append(rows(100, 1))
        assert _ids(new.load_table("legacy.t")) == [100] and _ids(client.load_table("legacy.t")) == [0, 1, 2, 3]
        if backend == "postgres-s3":  # the new warehouse's rows are in its own schema, none in the server's
            from catalog.settings import normalise_database_url

            engine = sa.create_engine(normalise_database_url(db["CATALOG_DATABASE_URL"]))
            with engine.connect() as conn:
                schemas = conn.execute(
                    sa.text("SELECT table_schema FROM information_schema.tables WHERE table_name = 'catalog_entries'")
                ).scalars()
                own = [x for x in schemas if x.startswith("warehouse_")]
                assert len(own) == 1, own
                assert conn.execute(sa.text(f"SELECT count(*) FROM {own[0]}.catalog_entries")).scalar() == 1
                assert conn.execute(sa.text("SELECT count(*) FROM public.catalog_entries")).scalar() == 1
            engine.dispose()
        new.drop_table("legacy.t")
        new.drop_namespace("legacy")
        assert requests.delete(server.url + MGMT + "/new", timeout=30).status_code == 204
        resp = requests.post(server.url + MGMT, json={"name": "new", "location": str(tmp_path / "new")}, timeout=30)
        assert resp.status_code == 201, resp.text
        assert _client(server.url, "new").list_namespaces() == []  # a new warehouse starts empty
        grant = {"principal": "client:x", "privileges": ["read"], "on": {"warehouse": "new"}}
        assert requests.post(server.url + "/management/v1/grants", json=grant, timeout=10).status_code == 201
    finally:
        server.stop()

    # and back: the warehouse table and its grants go, the tables stay, the old server serves them
    engine = create_engine(settings)
    migrate.downgrade(engine, "0008")
    with engine.connect() as conn:
        assert not sa.inspect(conn).has_table("warehouses")
        assert conn.execute(sa.text("SELECT count(*) FROM grants WHERE object_kind = 'warehouse'")).scalar() == 0
    engine.dispose()
    server = start_server(workdir, extra_env=old_env)
    try:
        assert _ids(_client(server.url).load_table("legacy.t")) == [0, 1, 2, 3]
    finally:
        server.stop()


@pytest.mark.parametrize(
    "content, says",
    [
        ("warehouses: [{name: Bad, location: /tmp/x}]", "warehouses[0]"),
        ("warehouses: {name: a}", "'warehouses' list"),
        ("warehouses: [{name: a, location: /tmp/a}, {name: a, location: /tmp/b}]", "twice"),
        ("warehouses: [", "cannot read"),
    ],
)
def test_serve_refuses_a_broken_warehouses_file_in_one_line(tmp_path: Path, content: str, says: str) -> None:
    import os

    from tests.support import free_port

    broken = tmp_path / "warehouses.yaml"
    broken.write_text(content)
    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
        "CATALOG_WAREHOUSE": str(tmp_path / "wh"),
        "CATALOG_WAREHOUSES_FILE": str(broken),
        "CATALOG_PORT": str(free_port()),
    }
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert served.returncode == 2, served.stderr
    assert "CATALOG_WAREHOUSES_FILE" in served.stderr and says in served.stderr and "Traceback" not in served.stderr


def test_each_warehouse_has_its_own_feed_and_its_events_name_it(tmp_path: Path) -> None:
    from tests.support import free_port
    from tests.test_delivery import FAST, Receiver, wait_for

    hook = Receiver(free_port())
    hook.up()
    server = start_server(tmp_path / "srv", extra_env={"CATALOG_EVENTS_WEBHOOKS": f"hook={hook.url}", **FAST})
    try:
        made = requests.post(server.url + MGMT, json={"name": "team-a", "location": str(tmp_path / "a")}, timeout=30)
        assert made.status_code == 201, made.text
        _client(server.url, "team-a").create_namespace("only_in_a")
        _client(server.url).create_namespace("only_in_default")

        def feed(prefix: str) -> list[str]:
            resp = requests.post(f"{server.url}/v1/{prefix}events", json={"page-size": 100}, timeout=10)
            assert resp.status_code == 200, resp.text
            return [".".join(e["operation"]["namespace"]) for e in resp.json()["events"]]

        assert feed("team-a/") == ["only_in_a"] and feed("") == ["only_in_default"]
        wait_for(lambda: len(hook.received) >= 2, "both events at the webhook")
        sources = {e["subject"]: e["source"] for _, e, _ in hook.received}
        assert sources == {
            "only_in_a": "/iceberg-catalog/events/team-a",
            "only_in_default": "/iceberg-catalog/events",
        }
    finally:
        server.stop()
        hook.down()


def test_duckdb_selects_a_warehouse_by_attach_name(tmp_path: Path) -> None:
    """DuckDB's ``ATTACH '<warehouse>'`` sends it to /v1/config and uses the prefix it gets back:
    one connection, two catalogs, the same table name in each."""
    from tests.services import duckdb_connection

    server = start_server(tmp_path / "srv")
    try:
        made = requests.post(server.url + MGMT, json={"name": "team-a", "location": str(tmp_path / "a")}, timeout=30)
        assert made.status_code == 201, made.text
        for name in ("team-a", "warehouse"):  # "warehouse": the default's alias, what DuckDB's examples send
            catalog = _client(server.url, None if name == "warehouse" else name)
            catalog.create_namespace("sales")
            catalog.create_table("sales.orders", PY_SCHEMA)
        con = duckdb_connection()
        for alias, name in (("a", "team-a"), ("d", "warehouse")):
            con.execute(
                f"ATTACH '{name}' AS {alias} (TYPE iceberg, ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')"
            )
        con.execute("INSERT INTO a.sales.orders (id, name) VALUES (1, 'in a'), (2, 'in a')")
        con.execute("INSERT INTO d.sales.orders (id, name) VALUES (7, 'in default')")
        assert con.execute("SELECT id, name FROM a.sales.orders ORDER BY id").fetchall() == [(1, "in a"), (2, "in a")]
        assert con.execute("SELECT id, name FROM d.sales.orders").fetchall() == [(7, "in default")]
        assert _ids(_client(server.url, "team-a").load_table("sales.orders")) == [1, 2]
        assert any((tmp_path / "a" / "sales" / "orders" / "data").iterdir())
        refused = None
        try:
            con.execute(f"ATTACH 'nope' AS n (TYPE iceberg, ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none')")
        except Exception as e:  # noqa: BLE001 - DuckDB's error type for a failed attach
            refused = str(e)
        assert refused is not None and "warehouse=nope" in refused and "404" in refused, refused
    finally:
        server.stop()


def test_a_warehouse_changes_only_to_a_profile_that_works(plain, tmp_path: Path) -> None:
    doc = {"name": "changing", "location": str(tmp_path / "changing")}
    assert requests.post(plain.url + MGMT, json=doc, timeout=30).status_code == 201
    try:
        changed = {**doc, "maintenance": {"min-snapshots-to-keep": 3}}
        resp = requests.put(plain.url + MGMT + "/changing", json=changed, timeout=30)
        assert resp.status_code == 200, resp.text
        shown = requests.get(plain.url + MGMT + "/changing", timeout=10).json()
        assert shown["maintenance"] == {"min-snapshots-to-keep": 3}
        far = {"location": "s3://bucket/x", "s3": {"endpoint": "http://127.0.0.1:1", "access-key-id": "a"}}
        assert_error(requests.put(plain.url + MGMT + "/changing", json=far, timeout=120), 400, "BadRequestException")
        renamed = {**doc, "name": "other"}
        assert_error(requests.put(plain.url + MGMT + "/changing", json=renamed, timeout=30), 400, "BadRequestException")
        assert_error(
            requests.put(plain.url + MGMT + "/nope", json={"location": doc["location"]}, timeout=30),
            404,
            "NoSuchWarehouseException",
        )
        catalog = _client(plain.url, "changing")
        catalog.create_namespace("n")
        moved = {"location": str(tmp_path / "elsewhere")}
        assert_error(requests.put(plain.url + MGMT + "/changing", json=moved, timeout=30), 409, "ConflictException")
        assert requests.get(plain.url + MGMT + "/changing", timeout=10).json()["location"] == doc["location"]
        assert ("n",) in _client(plain.url, "changing").list_namespaces()  # reopened, same database
        catalog.drop_namespace("n")
    finally:
        requests.delete(plain.url + MGMT + "/changing", timeout=10)


def test_several_workers_apply_the_file_and_see_a_new_warehouse(tmp_path: Path) -> None:
    declared = tmp_path / "warehouses.yaml"
    declared.write_text(f"warehouses: [{{name: team-a, location: {tmp_path / 'a'}}}]\n")
    env = {"CATALOG_WORKERS": "2", "CATALOG_WAREHOUSES_FILE": str(declared)}
    server = start_server(tmp_path / "srv", extra_env=env)
    try:
        made = requests.post(server.url + MGMT, json={"name": "team-b", "location": str(tmp_path / "b")}, timeout=30)
        assert made.status_code == 201, made.text
        deadline = time.monotonic() + 15  # the other worker reads the table every 5 s
        while True:
            answers = {
                requests.get(server.url + "/v1/config", params={"warehouse": w}, timeout=10).status_code
                for w in ("team-a", "team-b")
                for _ in range(6)
            }
            if answers == {200} or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert answers == {200}
    finally:
        server.stop()


def test_what_get_shows_can_be_sent_back_and_keeps_the_secret(plain, tmp_path: Path) -> None:
    import sqlalchemy as sa

    doc = {
        "name": "secretive",
        "location": str(tmp_path / "s"),
        "s3": {"access-key-id": "k", "secret-access-key": "s3cr3t"},
    }
    assert requests.post(plain.url + MGMT, json=doc, timeout=30).status_code == 201
    try:
        shown = requests.get(plain.url + MGMT + "/secretive", timeout=10).json()
        assert shown["s3"]["secret-access-key"] == "********" and "s3cr3t" not in str(shown)
        shown["maintenance"] = {"enabled": False}
        resp = requests.put(plain.url + MGMT + "/secretive", json=shown, timeout=30)
        assert resp.status_code == 200, resp.text
        engine = sa.create_engine(plain.env["CATALOG_DATABASE_URL"])
        with engine.connect() as conn:
            profile = conn.execute(sa.text("SELECT profile FROM warehouses WHERE name = 'secretive'")).scalar_one()
        engine.dispose()
        assert '"s3cr3t"' in profile and '"enabled": false' in profile.replace('"enabled":false', '"enabled": false')
        flagged = {**doc, "default": True}
        assert requests.put(plain.url + MGMT + "/secretive", json=flagged, timeout=30).status_code == 400
    finally:
        requests.delete(plain.url + MGMT + "/secretive", timeout=10)


def test_doctor_probes_each_warehouse(plain, tmp_path: Path) -> None:
    doc = {"name": "doctored", "location": str(tmp_path / "d")}
    assert requests.post(plain.url + MGMT, json=doc, timeout=30).status_code == 201
    env = {k: v for k, v in plain.env.items() if k in ("CATALOG_DATABASE_URL", "CATALOG_WAREHOUSE", "PATH", "HOME")}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "catalog", "doctor"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "✓ warehouse doctored: writable" in run.stdout, run.stdout + run.stderr
        (tmp_path / "d").rename(tmp_path / "d-away")  # a file where the warehouse's directory was
        (tmp_path / "d").write_text("not a directory")
        run = subprocess.run(
            [sys.executable, "-m", "catalog", "doctor"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "✗ warehouse doctored:" in run.stdout and run.returncode == 1, run.stdout
    finally:
        requests.delete(plain.url + MGMT + "/doctored", timeout=10)


@pytest.mark.s3
def test_a_warehouse_on_s3_beside_a_local_default(services, tmp_path: Path) -> None:
    """An S3 warehouse (SeaweedFS) created through the API on a server whose default is local disk:
    its storage comes from its profile alone, clients get its endpoint from /v1/config."""
    s3 = services["s3"]
    root = f"wh-{uuid.uuid4().hex[:8]}"
    server = start_server(tmp_path / "srv")
    try:
        doc = {
            "name": "on-s3",
            "location": f"s3://{s3.bucket}/{root}",
            "s3": s3_profile(s3),
        }
        made = requests.post(server.url + MGMT, json=doc, timeout=60)
        assert made.status_code == 201, made.text
        config = requests.get(server.url + "/v1/config", params={"warehouse": "on-s3"}, timeout=10).json()
        assert config["defaults"]["s3.endpoint"] == s3.endpoint and config["overrides"]["prefix"] == "on-s3"
        assert s3.secret_key not in str(config)
        keys = {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}
        catalog = _client(server.url, "on-s3", **keys)
        catalog.create_namespace("sales")
        catalog.create_table("sales.orders", PY_SCHEMA).append(rows(0, 2))
        assert _ids(_client(server.url, "on-s3", **keys).load_table("sales.orders")) == [0, 1]
        listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{root}/")
        names = [o["Key"] for o in listed.get("Contents", [])]
        assert any(n.startswith(f"{root}/sales/orders/metadata/") for n in names), names
        assert any(n.startswith(f"{root}/sales/orders/data/") for n in names), names
        assert not (tmp_path / "srv" / "warehouse" / "sales").exists()  # nothing on the default's disk
    finally:
        server.stop()
        client = s3.client()  # the session's bucket is shared: leave it as it was
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=f"{root}/"):
            for o in page.get("Contents", []):
                client.delete_object(Bucket=s3.bucket, Key=o["Key"])
