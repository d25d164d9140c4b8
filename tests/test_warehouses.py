"""Warehouses (issue 31): several on one server, each its own catalog, selected by ``warehouse``.

Real server processes over HTTP and real pyiceberg clients: tables land in their warehouse's storage
(asserted on the filesystem and on Azurite's listing), the same names in two warehouses are different
tables, an unknown warehouse is 404, a warehouse is deleted only when empty, a storage profile that
does not work is refused, grants confine a principal to its warehouse, and a database from before
warehouses migrates and serves its old clients unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, RESTError

from catalog.auth.grants import in_warehouse
from catalog.auth.policy import ROOT, Grant, Privilege, Target, parse_target
from catalog.errors import BadRequest
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
    warehouse_roots,
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
    env = {"CATALOG_WAREHOUSES_FILE": str(declared), **warehouse_roots(tmp_path)}
    server = start_server(tmp_path / "srv", extra_env=env)
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
    # created warehouses in each test's tmp_path; the default beside the database's directory, not in
    # it, so that a warehouse inside the default is refused for overlapping it (409)
    env = {**warehouse_roots(tmp_path_factory.getbasetemp()), "CATALOG_WAREHOUSE": str(tmp_path_factory.mktemp("dflt"))}
    server = start_server(workdir, extra_env=env)
    server.workdir = workdir  # type: ignore[attr-defined]
    yield server
    server.stop()


def test_unknown_warehouse_is_404_on_config_and_routes(plain) -> None:
    for name in ("nope", "x" * 300, "../etc", "default2"):
        resp = requests.get(plain.url + "/v1/config", params={"warehouse": name}, timeout=10)
        assert_error(resp, 404, "NoSuchWarehouseException")
    counted = 'catalog_http_requests_total{method="GET",route="unmatched",status="404"}'

    def unmatched() -> float:
        found = [ln for ln in requests.get(plain.url + "/metrics", timeout=10).text.splitlines() if counted in ln]
        return float(found[0].split()[-1]) if found else 0.0

    before = unmatched()
    for path in ("/v1/nope/namespaces", "/v1/nope/namespaces/a/tables/t", "/v1/%1Ex/namespaces"):
        resp = requests.get(plain.url + path, timeout=10)
        assert_error(resp, 404, "NoSuchWarehouseException")
        assert resp.headers["x-request-id"]  # observed like every request: counted and logged
    assert unmatched() == before + 3
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


@pytest.mark.slow
def test_a_principal_granted_one_warehouse_cannot_touch_the_other(tmp_path: Path) -> None:
    env = {**auth_env(tmp_path, BOOTSTRAP), **warehouse_roots(tmp_path)}
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

        # the same principal in team-b: is told it does not exist, sees nothing, loads nothing, commits nothing
        with pytest.raises(RESTError, match="NoSuchWarehouseException"):
            as_in("ingest", "team-b")
        headers = ingest_h
        resp = requests.get(server.url + "/v1/team-b/namespaces", headers=headers, timeout=10)
        assert resp.json()["namespaces"] == []
        resp = requests.get(server.url + "/v1/team-b/namespaces/sales/tables/orders", headers=headers, timeout=10)
        assert resp.status_code == 403
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
        with pytest.raises(RESTError, match="NoSuchWarehouseException"):
            as_in("analyst", "team-a")

        # the admin of team-a manages the grants inside team-a, and only there
        def grant(on: dict) -> requests.Response:
            doc = {"principal": "client:analyst", "privileges": ["read"], "on": on}
            return requests.post(server.url + "/management/v1/grants", json=doc, headers=ingest_h, timeout=10)

        for elsewhere in ({"warehouse": "team-b", "table": "sales.orders"}, {"table": "sales.orders"}, "catalog"):
            assert_error(grant(elsewhere), 403, "ForbiddenException")
        assert grant({"warehouse": "team-a", "table": "sales.orders"}).status_code == 201
        assert _ids(as_in("analyst", "team-a").load_table("sales.orders")) == [10]
        mine = requests.get(server.url + "/management/v1/grants", headers=ingest_h, timeout=10).json()["grants"]
        assert {str(g["on"]) for g in mine} == {
            str({"warehouse": "team-a"}),
            str({"warehouse": "team-a", "table": ["sales", "orders"]}),
        }
    finally:
        server.stop()


def test_warehouse_grants_decide_inside_their_warehouse_only() -> None:
    orders = Target("table", ("sales", "orders"))
    grants = [
        Grant("client:a", Privilege.READ, ROOT, id=1),
        Grant("client:b", Privilege.WRITE, Target("warehouse", ("team-a",)), id=2),
        Grant("client:c", Privilege.READ, Target("namespace", ("sales",)), id=3),
        Grant("client:d", Privilege.READ, Target("table", ("sales", "orders"), "team-a"), id=4),
        Grant("client:e", Privilege.READ, Target("table", ("sales", "orders"), "default"), id=5),
    ]
    default = frozenset({"default", "warehouse"})
    in_a = in_warehouse(grants, "team-a", {"team-a"})
    assert {(g.principal, g.target) for g in in_a} == {("client:a", ROOT), ("client:b", ROOT), ("client:d", orders)}
    in_b = in_warehouse(grants, "team-b", {"team-b"})
    assert {(g.principal, g.target) for g in in_b} == {("client:a", ROOT)}
    in_default = in_warehouse(grants, None, default)
    assert {(g.principal, g.target) for g in in_default} == {
        ("client:a", ROOT),
        ("client:c", Target("namespace", ("sales",))),
        ("client:e", orders),  # the default warehouse named explicitly
    }
    assert parse_target({"warehouse": "team-a"}) == Target("warehouse", ("team-a",))
    assert parse_target({"warehouse": "team-a", "table": "sales.orders"}) == Target("table", orders.path, "team-a")
    assert parse_target({"view": ["a.b", "v"], "warehouse": "team-a"}) == Target("view", ("a.b", "v"), "team-a")
    shown = {"warehouse": "team-a", "namespace": ["sales"]}
    assert parse_target(shown).to_json() == shown and parse_target(shown).where() == (
        "team-a",
        Target("namespace", ("sales",)),
    )
    for hostile in (
        {"warehouse": "Not A Name"},
        {"warehouse": "../etc", "table": "a.t"},
        {"warehouse": "x" * 100_000, "namespace": "a"},
        {"warehouse": ["team-a"], "table": "a.t"},
        {"warehouse": "team-a", "catalog": True},
        {"warehouse": "team-a", "table": "a.b", "view": "a.c"},
        {"warehouse": "team-a", "table": "t"},
        {"warehouse": "team-a", "namespace": "a\x00b"},
        {"warehouse": "team-a", "table": ["a", "..", "t"]},
        {"warehouse": "team-a", "namespace": ["a" * 100_000]},
        {"warehouse": "team-a", "warehouses": "a"},
    ):
        with pytest.raises(BadRequest):
            parse_target(hostile)


# -- grants on the objects inside a warehouse ------------------------------------------------------------

FINE = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  # team-a does not exist yet when the server starts: a bootstrap grant may name it before
  - {principal: client:analyst, privileges: [read], "on": {warehouse: team-a, table: sales.orders}}
"""


@pytest.mark.slow
def test_grants_on_objects_inside_a_warehouse_decide_there_only(fresh, tmp_path: Path) -> None:
    server = fresh({**auth_env(tmp_path, FINE), **warehouse_roots(tmp_path)})
    admin_h = {"Authorization": f"Bearer {token(server, 'admin')}"}
    for name in ("team-a", "team-b"):
        doc = {"name": name, "location": str(tmp_path / name)}
        assert requests.post(server.url + MGMT, json=doc, headers=admin_h, timeout=30).status_code == 201
    signin = {"oauth2-server-uri": server.url + "/v1/oauth/tokens"}

    def as_in(client: str, warehouse: str | None) -> RestCatalog:
        return _client(server.url, warehouse, **signin, credential=f"{client}:{CLIENTS[client]}")

    def http(client: str, method: str, path: str, **kw) -> requests.Response:
        headers = {"Authorization": f"Bearer {token(server, client)}"}
        return requests.request(method, server.url + path, headers=headers, timeout=30, **kw)

    # the same names in all three warehouses
    for warehouse in ("team-a", "team-b", None):
        admin = as_in("admin", warehouse)
        admin.create_namespace("sales")
        admin.create_table("sales.orders", PY_SCHEMA)
    a_admin = as_in("admin", "team-a")
    a_admin.create_table("sales.refunds", PY_SCHEMA)
    a_admin.load_table("sales.orders").append(rows(0, 2))
    as_in("admin", "team-b").load_table("sales.orders").append(rows(20, 1))

    # read on team-a's sales.orders: that one table there, read only
    analyst = as_in("analyst", "team-a")
    assert analyst.list_namespaces() == [("sales",)]
    assert analyst.list_tables("sales") == [("sales", "orders")]
    assert _ids(analyst.load_table("sales.orders")) == [0, 1]
    with pytest.raises(ForbiddenError):
        analyst.load_table("sales.refunds")
    with pytest.raises(ForbiddenError):
        analyst.load_table("sales.orders").append(rows(5, 1))
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"x": "1"}}]}
    resp = http("analyst", "POST", "/v1/team-a/namespaces/sales/tables/orders", json=commit)
    assert_error(resp, 403, "ForbiddenException")
    # the same names in the default warehouse and in team-b are other objects: nothing of them
    elsewhere = as_in("analyst", None)
    assert elsewhere.list_namespaces() == []
    with pytest.raises(ForbiddenError):
        elsewhere.load_table("sales.orders")
    with pytest.raises(RESTError, match="NoSuchWarehouseException"):  # team-b's /v1/config: see below
        as_in("analyst", "team-b")
    assert http("analyst", "GET", "/v1/team-b/namespaces").json()["namespaces"] == []
    assert_error(http("analyst", "GET", "/v1/team-b/namespaces/sales/tables/orders"), 403, "ForbiddenException")

    # /v1/config: a created warehouse the caller holds nothing in is answered as one that is none
    def config(client: str, warehouse: str) -> requests.Response:
        return http(client, "GET", "/v1/config", params={"warehouse": warehouse})

    assert config("analyst", "team-a").json()["overrides"]["prefix"] == "team-a"
    unknown = assert_error(config("analyst", "no-such"), 404, "NoSuchWarehouseException")
    hidden = assert_error(config("analyst", "team-b"), 404, "NoSuchWarehouseException")
    assert hidden["message"] == unknown["message"].replace("no-such", "team-b")
    assert_error(config("nobody", "team-a"), 404, "NoSuchWarehouseException")
    assert config("nobody", "default").status_code == 200  # the default warehouse is not hidden
    assert config("admin", "team-b").json()["overrides"]["prefix"] == "team-b"  # catalog grants span all

    # through the management API: write on team-b's sales.orders, and nowhere else
    grant = {
        "principal": "client:ingest",
        "privileges": ["write"],
        "on": {"warehouse": "team-b", "table": "sales.orders"},
    }
    created = http("admin", "POST", "/management/v1/grants", json=grant)
    assert created.status_code == 201, created.text
    assert created.json()["grants"][0]["on"] == {"warehouse": "team-b", "table": ["sales", "orders"]}
    ingest = as_in("ingest", "team-b")
    ingest.load_table("sales.orders").append(rows(21, 1))
    assert _ids(as_in("admin", "team-b").load_table("sales.orders")) == [20, 21]
    resp = http("ingest", "POST", "/v1/namespaces/sales/tables/orders", json=commit)  # the default's
    assert_error(resp, 403, "ForbiddenException")
    assert_error(
        http("ingest", "POST", "/v1/team-a/namespaces/sales/tables/orders", json=commit), 403, "ForbiddenException"
    )
    assert_error(config("ingest", "team-a"), 404, "NoSuchWarehouseException")
    assert config("ingest", "team-b").status_code == 200
    # who may not manage the catalog's grants cannot grant inside a warehouse, nor learn which exist
    for on in ({"warehouse": "team-b", "namespace": "sales"}, {"warehouse": "no-such", "namespace": "sales"}):
        resp = http("ingest", "POST", "/management/v1/grants", json={**grant, "on": on})
        assert_error(resp, 403, "ForbiddenException")

    # hostile objects: 4xx in the Iceberg shape
    for on, status, kind in (
        ({"warehouse": "no-such", "table": "sales.orders"}, 404, "NoSuchWarehouseException"),
        ({"warehouse": "../team-a", "table": "sales.orders"}, 400, "BadRequestException"),
        ({"warehouse": "team-a" * 5000, "namespace": "sales"}, 400, "BadRequestException"),
        ({"warehouse": "team-a", "namespace": "s" * 100_000}, 400, "BadRequestException"),
        ({"warehouse": "team-a", "table": "sales/../x.orders"}, 400, "BadRequestException"),
        ({"warehouse": "team-a", "catalog": True}, 400, "BadRequestException"),
        ({"warehouse": {"name": "team-a"}, "table": "sales.orders"}, 400, "BadRequestException"),
    ):
        assert_error(http("admin", "POST", "/management/v1/grants", json={**grant, "on": on}), status, kind)

    # a rename inside a warehouse treats grants as the default warehouse does: they name the object,
    # so the renamed table leaves the grant behind, and a new table of the name has it
    move = {
        "source": {"namespace": ["sales"], "name": "orders"},
        "destination": {"namespace": ["sales"], "name": "old"},
    }
    assert http("admin", "POST", "/v1/team-a/tables/rename", json=move).status_code == 204
    with pytest.raises(ForbiddenError):
        analyst.load_table("sales.old")
    assert analyst.list_tables("sales") == []
    a_admin.create_table("sales.orders", PY_SCHEMA)
    assert analyst.list_tables("sales") == [("sales", "orders")]

    # the CLI: the same objects, --on repeated
    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "catalog", "grants", *args]
        return subprocess.run(command, env=server.env, capture_output=True, text=True, timeout=60)

    added = cli(
        "add", "--principal", "role:bi", "--privilege", "read", "--on", "warehouse=team-a", "--on", "namespace=sales"
    )
    assert added.returncode == 0, added.stderr
    assert '"on": {"warehouse": "team-a", "namespace": ["sales"]}' in added.stdout
    refused = cli(
        "add", "--principal", "role:bi", "--privilege", "read", "--on", "warehouse=no-such", "--on", "table=a.t"
    )
    assert refused.returncode == 2 and "Warehouse does not exist: no-such" in refused.stderr, refused.stderr
    refused = cli("add", "--principal", "role:bi", "--privilege", "read", "--on", "warehouse=team-a", "--on", "catalog")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr

    # a deleted warehouse takes the grants naming its objects with it
    b_admin = as_in("admin", "team-b")
    b_admin.drop_table("sales.orders")
    b_admin.drop_namespace("sales")
    assert http("admin", "DELETE", MGMT + "/team-b").status_code == 204
    listed = http("admin", "GET", "/management/v1/grants").json()["grants"]
    assert [g for g in listed if g["on"].get("warehouse") == "team-b"] == []
    assert any(g["on"] == {"warehouse": "team-a", "namespace": ["sales"]} for g in listed)


@pytest.mark.parametrize("backend", backends())
def test_migration_0010_keeps_the_grants_and_goes_back_without_the_warehouse_ones(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Forward: the grants made before keep naming what they named (the default warehouse's
    objects, the catalog, a warehouse). Back: a grant on a created warehouse's table goes (the
    revision before would read it as one on the default's table of that name), the others stay."""
    import sqlalchemy as sa

    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.database.store import Store
    from catalog.settings import Settings

    if backend == "postgres-s3":
        url = new_pg_database(request.getfixturevalue("services")["pg"], f"g_{uuid.uuid4().hex[:8]}")
    else:
        url = f"sqlite:///{tmp_path / 'g.db'}"
    engine = create_engine(Settings(database_url=url).database)
    try:
        migrate.upgrade(engine, "0009")
        with engine.begin() as conn:
            for kind, name in (("table", "sales\x1forders"), ("warehouse", "team-a"), ("catalog", "")):
                conn.execute(
                    sa.text(
                        "INSERT INTO grants (principal, privilege, object_kind, object_name, source, created_ms) "
                        "VALUES ('role:r', 'read', :kind, :name, 'api', 0)"
                    ),
                    {"kind": kind, "name": name},
                )
        migrate.upgrade(engine)
        orders = Target("table", ("sales", "orders"))
        before = {(g.principal, g.target) for g in Store(engine).list_grants()}
        assert before == {("role:r", orders), ("role:r", Target("warehouse", ("team-a",))), ("role:r", ROOT)}
        # the same grant on team-a's table of the same name is another grant
        added = Store(engine).add_grants([Grant("role:r", Privilege.READ, Target("table", orders.path, "team-a"))])
        assert added[0].id is not None and added[0].target.warehouse == "team-a"
        assert len(Store(engine).list_grants()) == 4
        migrate.downgrade(engine, "0009")
        with engine.connect() as conn:
            left = conn.execute(sa.text("SELECT object_kind, object_name FROM grants")).all()
        assert sorted(left) == [("catalog", ""), ("table", "sales\x1forders"), ("warehouse", "team-a")]
        migrate.upgrade(engine)
        assert {(g.principal, g.target) for g in Store(engine).list_grants()} == before
    finally:
        engine.dispose()


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
@pytest.mark.slow
def test_a_database_from_before_warehouses_migrates_and_serves_old_clients(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    import sqlalchemy as sa

    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.settings import Settings

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
    engine = create_engine(settings.database)
    assert migrate.current(engine) == frozenset({"0008"})
    engine.dispose()

    # this version: migrates at start, serves the old clients unchanged, nothing moved
    server = start_server(workdir, extra_env={**db, **warehouse_roots(tmp_path)})
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
    engine = create_engine(settings.database)
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
        ("warehouses: [{name: a, location: 's3://b/a'}, {name: a, location: 's3://b/b'}]", "twice"),
        ("warehouses: [{name: a, location: /tmp/a}]", "CATALOG_WAREHOUSE_ROOTS"),  # local: only under a root
        ("warehouses: [", "cannot read"),
    ],
)
@pytest.mark.slow
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


@pytest.mark.slow
def test_each_warehouse_has_its_own_feed_and_its_events_name_it(tmp_path: Path) -> None:
    from tests.support import FAST, Receiver, free_port, wait_for

    hook = Receiver(free_port())
    hook.up()
    env = {"CATALOG_EVENTS_WEBHOOKS": f"hook={hook.url}", **FAST, **warehouse_roots(tmp_path)}
    server = start_server(tmp_path / "srv", extra_env=env)
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
        for warehouse, shown in (("team-a", "only_in_a"), (None, "only_in_default")):
            tail = [sys.executable, "-m", "catalog", "events", "tail", "--uri", server.url, "--json"]
            run = subprocess.run(
                tail + (["--warehouse", warehouse] if warehouse else []), capture_output=True, text=True, timeout=60
            )
            assert run.returncode == 0, run.stderr
            assert [".".join(json.loads(ln)["operation"]["namespace"]) for ln in run.stdout.splitlines()] == [shown]
        wait_for(lambda: len(hook.received) >= 2, "both events at the webhook")
        sources = {e["subject"]: e["source"] for _, e, _ in hook.received}
        assert sources == {
            "only_in_a": "/iceberg-catalog/events/team-a",
            "only_in_default": "/iceberg-catalog/events",
        }
    finally:
        server.stop()
        hook.down()


@pytest.mark.slow
def test_duckdb_selects_a_warehouse_by_attach_name(tmp_path: Path) -> None:
    """DuckDB's ``ATTACH '<warehouse>'`` sends it to /v1/config and uses the prefix it gets back:
    one connection, two catalogs, the same table name in each."""
    from tests.services import duckdb_connection

    server = start_server(tmp_path / "srv", extra_env=warehouse_roots(tmp_path))
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


@pytest.mark.slow
def test_several_workers_apply_the_file_and_see_a_new_warehouse(tmp_path: Path) -> None:
    declared = tmp_path / "warehouses.yaml"
    declared.write_text(f"warehouses: [{{name: team-a, location: {tmp_path / 'a'}}}]\n")
    env = {"CATALOG_WORKERS": "2", "CATALOG_WAREHOUSES_FILE": str(declared), **warehouse_roots(tmp_path)}
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


@pytest.mark.slow
def test_doctor_probes_each_warehouse(plain, tmp_path: Path) -> None:
    doc = {"name": "doctored", "location": str(tmp_path / "d")}
    assert requests.post(plain.url + MGMT, json=doc, timeout=30).status_code == 201
    kept = ("CATALOG_DATABASE_URL", "CATALOG_WAREHOUSE", "CATALOG_WAREHOUSE_ROOTS", "PATH", "HOME")
    env = {k: v for k, v in plain.env.items() if k in kept}
    try:
        run = subprocess.run(
            [sys.executable, "-m", "catalog", "doctor"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "✓ warehouse doctored: writable" in run.stdout, run.stdout + run.stderr
        unrooted = {k: v for k, v in env.items() if k != "CATALOG_WAREHOUSE_ROOTS"}  # the roots no longer allow it
        run = subprocess.run(
            [sys.executable, "-m", "catalog", "doctor"], env=unrooted, capture_output=True, text=True, timeout=120
        )
        assert "✗ warehouse doctored:" in run.stdout and "CATALOG_WAREHOUSE_ROOTS" in run.stdout, run.stdout
        (tmp_path / "d").rename(tmp_path / "d-away")  # a file where the warehouse's directory was
        (tmp_path / "d").write_text("not a directory")
        run = subprocess.run(
            [sys.executable, "-m", "catalog", "doctor"], env=env, capture_output=True, text=True, timeout=120
        )
        assert "✗ warehouse doctored:" in run.stdout and run.returncode == 1, run.stdout
    finally:
        requests.delete(plain.url + MGMT + "/doctored", timeout=10)


def _s3_warehouse(s3, name: str, root: str) -> dict:  # noqa: ANN001 - the services' S3
    """A warehouse on the session's S3 bucket under ``root``, with the server's own keys."""
    return {"name": name, "location": f"s3://{s3.bucket}/{root}", "s3": s3_profile(s3)}


def _empty(s3, root: str) -> None:  # noqa: ANN001
    """The session's bucket is shared: leave it as it was."""
    client = s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=f"{root}/"):
        for o in page.get("Contents", []):
            client.delete_object(Bucket=s3.bucket, Key=o["Key"])


@pytest.mark.s3
def test_a_warehouse_on_s3_beside_a_local_default(services, tmp_path: Path) -> None:
    """An S3 warehouse (SeaweedFS) created through the API on a server whose default is local disk:
    its storage comes from its profile alone, clients get its endpoint from /v1/config."""
    s3 = services["s3"]
    root = f"wh-{uuid.uuid4().hex[:8]}"
    server = start_server(tmp_path / "srv")
    try:
        made = requests.post(server.url + MGMT, json=_s3_warehouse(s3, "on-s3", root), timeout=60)
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
        _empty(s3, root)


# -- storage secrets sealed at rest (CATALOG_SECRETS_KEY) ------------------------------------------


def test_sealing_seals_secrets_only_and_rotates() -> None:
    from cryptography.fernet import Fernet

    from catalog import errors, sealing

    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    profile = {"s3": {"endpoint": "http://s3", "secret-access-key": "s3cr3t"}, "maintenance": {"enabled": True}}
    sealed = sealing.seal(profile, old, "w")
    assert sealed["s3"]["endpoint"] == "http://s3" and sealed["maintenance"] == {"enabled": True}
    assert sealed["s3"]["secret-access-key"].startswith(sealing.PREFIX) and "s3cr3t" not in str(sealed)
    assert sealing.unseal(sealed, old, "w") == profile
    assert sealing.sealed_by_first(sealed, old) and not sealing.sealed_by_first(profile, old)
    rotated = f"{new},{old}"
    assert not sealing.sealed_by_first(sealed, rotated)  # sealed with a key that is no longer the first
    resealed = sealing.seal(sealed, rotated, "w")
    assert sealing.sealed_by_first(resealed, rotated) and sealing.unseal(resealed, new, "w") == profile
    assert sealing.seal(profile, None, "w") == profile  # no key: as given
    for setting in (None, Fernet.generate_key().decode()):
        with pytest.raises(errors.BadRequest) as refused:
            sealing.unseal(sealed, setting, "w")
        assert "warehouse w" in refused.value.message and "s3cr3t" not in refused.value.message
    with pytest.raises(ValueError, match="32 url-safe base64"):
        sealing.keys("not-a-key")


@pytest.mark.s3
def test_warehouse_secrets_are_sealed_at_rest_rotated_and_needed(services, tmp_path: Path) -> None:
    """With CATALOG_SECRETS_KEY the S3 secret of a created warehouse is in no database file, only its
    Fernet token; a rotated key reseals it at start and the warehouse keeps working; without a key
    that opens it the warehouse does not open (404), the default serves, and the log says why."""
    import sqlite3

    from cryptography.fernet import Fernet, InvalidToken

    s3 = services["s3"]
    root = f"wh-{uuid.uuid4().hex[:8]}"
    key1, key2 = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    workdir = tmp_path / "srv"
    database = workdir / "catalog.db"
    keys = {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}

    def stored_secret() -> str:
        with sqlite3.connect(database) as conn:
            (profile,) = conn.execute("SELECT profile FROM warehouses WHERE name = 'sealed'").fetchone()
        return json.loads(profile)["s3"]["secret-access-key"]

    server = start_server(workdir, extra_env={"CATALOG_SECRETS_KEY": key1})
    try:
        assert requests.post(server.url + MGMT, json=_s3_warehouse(s3, "sealed", root), timeout=60).status_code == 201
        catalog = _client(server.url, "sealed", **keys)
        catalog.create_namespace("ns")
        catalog.create_table("ns.t", PY_SCHEMA).append(rows(0, 2))
        server.stop()
        files = [p for p in workdir.iterdir() if p.name.startswith("catalog.db")]
        assert files and all(s3.secret_key.encode() not in p.read_bytes() for p in files)
        assert Fernet(key1).decrypt(stored_secret().removeprefix("fernet:").encode()).decode() == s3.secret_key

        server = start_server(workdir, extra_env={"CATALOG_SECRETS_KEY": f"{key2},{key1}"})  # rotated
        _client(server.url, "sealed", **keys).load_table("ns.t").append(rows(2, 2))
        assert _ids(_client(server.url, "sealed", **keys).load_table("ns.t")) == [0, 1, 2, 3]
        server.stop()
        token_ = stored_secret().removeprefix("fernet:").encode()
        assert Fernet(key2).decrypt(token_).decode() == s3.secret_key
        with pytest.raises(InvalidToken):
            Fernet(key1).decrypt(token_)

        for env in ({}, {"CATALOG_SECRETS_KEY": key1}):  # no key, or only the retired one
            server = start_server(workdir, extra_env=env)
            resp = requests.get(server.url + "/v1/config", params={"warehouse": "sealed"}, timeout=10)
            assert_error(resp, 404, "NoSuchWarehouseException")
            assert requests.get(server.url + "/v1/namespaces", timeout=10).status_code == 200  # the default serves
            server.stop()
            log = server.log.read_text()
            assert "The secrets of warehouse sealed are encrypted" in log and s3.secret_key not in log
    finally:
        server.stop()
        _empty(s3, root)


def test_serve_refuses_a_secrets_key_that_is_no_key(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as refused:
        start_server(tmp_path / "srv", extra_env={"CATALOG_SECRETS_KEY": "hunter2-but-longer"})
    assert "32 url-safe base64" in str(refused.value) and "hunter2" not in str(refused.value)
