"""What a caller may not see stays hidden from it (docs/auth.md, "What a principal without grants
can learn"): the management API's ids answer for a hidden object exactly as for a missing one, a
task's results are for who may load its table, a maintenance run's kinds are bounded before any
work, a ``//`` before ``/management`` keeps its ``?warehouse=``, and the events feed tells nothing of
hidden events (a rename's hidden destination, their time, another warehouse's token). And what may
be seen is: the history of a purged table ends with its purge.

Real server processes on every backend, authentication on, raw HTTP, pyiceberg and the CLI.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support import (
    CARE_ON_REQUEST,
    CLIENTS,
    PY_SCHEMA,
    Server,
    assert_error,
    auth_env,
    backends,
    new_pg_database,
    purge_now,
    rows,
    s3_client_props,
    s3_env,
    start_server,
    token,
    wait_task,
    warehouse_roots,
)

MAINTENANCE = "/management/v1/maintenance"
DROPPED = "/management/v1/dropped"
GRANTS = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: client:ingest, privileges: [create], on: {namespace: lab}}
  - {principal: client:analyst, privileges: [read], on: {namespace: seen}}
  - {principal: client:analyst, privileges: [read], on: {table: lab.open}}
"""


@pytest.fixture(scope="module", params=backends())
def srv(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own (its ids start at 1) with authentication on, care on request and the
    warehouse ``w2`` (a local directory)."""
    workdir = tmp_path_factory.mktemp(f"hidden-{request.param}")
    env = {**auth_env(workdir, GRANTS), **CARE_ON_REQUEST, **warehouse_roots(workdir)}
    io: dict[str, str] = {}
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        name = f"hidden_{uuid.uuid4().hex[:8]}"
        env.update({"CATALOG_DATABASE_URL": new_pg_database(services["pg"], name), **s3_env(services["s3"], name)})
        io = s3_client_props(services["s3"])
    server = start_server(workdir / "srv", request.param, env)
    server.io_props = io
    try:
        doc = {"name": "w2", "location": str(workdir / "w2")}
        made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, headers=_as(server), timeout=60)
        assert made.status_code == 201, made.text
        yield server
    finally:
        server.stop()


def _as(server: Server, client: str = "admin") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(server, client)}"}


def _catalog(server: Server, client: str = "admin", warehouse: str | None = None) -> RestCatalog:
    props = {"credential": f"{client}:{CLIENTS[client]}", "oauth2-server-uri": server.url + "/v1/oauth/tokens"}
    return server.catalog(**props, **({"warehouse": warehouse} if warehouse else {}))


def _run(server: Server, ns: str, table: str, body: object, client: str = "admin", **kw) -> requests.Response:
    url = f"{server.url}{MAINTENANCE}/tables/{quote(ns)}/{quote(table)}"
    return requests.post(url, json=body, headers=_as(server, client), timeout=kw.pop("timeout", 60), **kw)


def _events(server: Server, headers: dict[str, str], prefix: str = "", **body: object) -> requests.Response:
    return requests.post(f"{server.url}/v1/{prefix}events", json=body, headers=headers, timeout=60)


# -- 1. ids: a hidden object answers as a missing one --------------------------------------------------


def test_walking_the_ids_of_the_management_api_tells_a_principal_without_grants_nothing(srv: Server) -> None:
    admin = _catalog(srv)
    admin.create_namespace("hr")
    admin.create_table("hr.layoffs_plan", PY_SCHEMA).append(rows(0, 2))
    admin.create_table("hr.fired", PY_SCHEMA)
    admin.drop_table("hr.fired")
    ran = _run(srv, "hr", "layoffs_plan", {"kinds": ["expire-snapshots"], "dry-run": True})
    assert ran.status_code == 202, ran.text
    task_id = ran.json()["tasks"][0]["id"]
    wait_task(srv.url, task_id, headers=_as(srv))
    grant = {"principal": "client:analyst", "privileges": ["read"], "on": {"table": "hr.layoffs_plan"}}
    granted = requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=_as(srv), timeout=30)
    assert granted.status_code == 201, granted.text
    dropped = requests.get(srv.url + DROPPED, params={"namespace": "hr"}, headers=_as(srv), timeout=30)
    (gone,) = dropped.json()["dropped"]
    highest = max(task_id, gone["id"], *(g["id"] for g in granted.json()["grants"]))

    nobody = _as(srv, "nobody")
    routes = [
        ("GET", MAINTENANCE + "/tasks/{}"),
        ("POST", DROPPED + "/{}/undrop"),
        ("DELETE", DROPPED + "/{}"),
        ("DELETE", "/management/v1/grants/{}"),
    ]
    absent = 10**9
    for method, path in routes:
        missing = requests.request(method, srv.url + path.format(absent), headers=nobody, timeout=30)
        err = assert_error(missing, 404, "NotFoundException", str(absent))
        shape = err["message"].replace(str(absent), "{}")
        assert shape.count("{}") == 1, shape
        for i in range(1, highest + 3):
            resp = requests.request(method, srv.url + path.format(i), headers=nobody, timeout=30)
            assert resp.status_code == 404, (method, path, i, resp.text)
            assert resp.json() == {"error": {"message": shape.format(i), "type": "NotFoundException", "code": 404}}
            assert "hr" not in resp.text and "layoffs" not in resp.text and "fired" not in resp.text
    # lists show it nothing either
    for path in (MAINTENANCE + "/tasks", DROPPED, "/management/v1/grants"):
        listed = requests.get(srv.url + path, headers=nobody, timeout=30)
        assert listed.status_code == 200 and "hr" not in listed.text, listed.text
    # each such refusal is still an audit line: denied, answered 404
    audit = [json.loads(ln) for ln in srv.log.read_text().splitlines() if '"logger":"catalog.audit"' in ln]
    denied = {(a["action"], a["status"]) for a in audit if a["principal"] == "nobody" and a["outcome"] == "denied"}
    assert {("get_task", 404), ("undrop", 404), ("end_retention", 404), ("revoke_grant", 404)} <= denied, denied
    # the objects are still there, and who may see them still does
    assert requests.get(f"{srv.url}{MAINTENANCE}/tasks/{task_id}", headers=_as(srv), timeout=30).status_code == 200
    # who sees the dropped entry but may not restore it is told so
    analyst = _as(srv, "analyst")
    grant = {"principal": "client:analyst", "privileges": ["read"], "on": {"table": "hr.fired"}}
    assert requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=_as(srv), timeout=30).ok
    undrop = requests.post(f"{srv.url}{DROPPED}/{gone['id']}/undrop", headers=analyst, timeout=30)
    assert_error(undrop, 403, "ForbiddenException")


# -- 2. a maintenance run's kinds ---------------------------------------------------------------------


def test_a_maintenance_run_takes_each_known_kind_once_and_refuses_the_rest_at_once_and_briefly(srv: Server) -> None:
    admin = _catalog(srv)
    admin.create_namespace("kinds")
    admin.create_table("kinds.t", PY_SCHEMA).append(rows(0, 1))
    for kinds in (["expire-snapshots"] * 10_000, ["expire-snapshots"] * 200_000, [], "expire-snapshots", [1]):
        started = time.monotonic()
        resp = _run(srv, "kinds", "t", {"kinds": kinds, "dry-run": True}, timeout=30)
        assert time.monotonic() - started < 10
        assert_error(resp, 400, "BadRequestException")
        assert len(resp.content) < 300, resp.text
    unknown = "nope-" + "x" * 1000
    for kinds in ([unknown], ["expire-snapshots", unknown], [unknown] * 3):
        resp = _run(srv, "kinds", "t", {"kinds": kinds, "dry-run": True})
        assert_error(resp, 400, "BadRequestException", "expire-snapshots")
        assert "nope" not in resp.text and len(resp.content) < 300, resp.text
    # checked before anything else: before the caller's grants and the table's existence
    for who, table in (("nobody", "t"), ("admin", "no_such_table")):
        resp = _run(srv, "kinds", table, {"kinds": [unknown], "dry-run": True}, client=who)
        assert_error(resp, 400, "BadRequestException")
    # a kind named twice counts once
    ran = _run(srv, "kinds", "t", {"kinds": ["expire-snapshots", "expire-snapshots"], "dry-run": True})
    assert ran.status_code == 202, ran.text
    assert [t["kind"] for t in ran.json()["tasks"]] == ["expire-snapshots"]
    wait_task(srv.url, ran.json()["tasks"][0]["id"], headers=_as(srv))


# -- 3. a task's results are for who may load its table -------------------------------------------------


def test_a_create_only_principal_reads_no_task_of_a_table_it_may_not_load(srv: Server) -> None:
    admin = _catalog(srv)
    admin.create_namespace("lab")
    for name in ("closed", "open"):
        admin.create_table(f"lab.{name}", PY_SCHEMA).append(rows(0, 2))
    ran = {
        name: _run(srv, "lab", name, {"kinds": ["remove-orphans"], "dry-run": True}).json()["tasks"][0]["id"]
        for name in ("closed", "open")
    }
    for task_id in ran.values():
        assert wait_task(srv.url, task_id, headers=_as(srv))["state"] == "done"
    ingest, analyst = _as(srv, "ingest"), _as(srv, "analyst")  # create on lab / read on lab.open
    assert _catalog(srv, "ingest").list_tables("lab")  # it may see the tables (create on their namespace)

    missing = requests.get(f"{srv.url}{MAINTENANCE}/tasks/{10**9}", headers=ingest, timeout=30).json()
    for task_id in ran.values():
        resp = requests.get(f"{srv.url}{MAINTENANCE}/tasks/{task_id}", headers=ingest, timeout=30)
        assert resp.status_code == 404, resp.text
        assert resp.json() == json.loads(json.dumps(missing).replace(str(10**9), str(task_id)))
    listed = requests.get(srv.url + MAINTENANCE + "/tasks", headers=ingest, timeout=30).json()["tasks"]
    assert [t for t in listed if t["namespace"] == ["lab"]] == []
    by_name = requests.get(
        srv.url + MAINTENANCE + "/tasks", params={"namespace": "lab", "table": "closed"}, headers=ingest, timeout=30
    )
    assert_error(by_name, 403, "ForbiddenException")
    # who may read a table reads its tasks, and only those
    assert requests.get(f"{srv.url}{MAINTENANCE}/tasks/{ran['open']}", headers=analyst, timeout=30).status_code == 200
    assert requests.get(f"{srv.url}{MAINTENANCE}/tasks/{ran['closed']}", headers=analyst, timeout=30).status_code == 404
    listed = requests.get(srv.url + MAINTENANCE + "/tasks", headers=analyst, timeout=30).json()["tasks"]
    assert {t["table"] for t in listed if t["namespace"] == ["lab"]} == {"open"}


# -- 4. a doubled slash keeps the warehouse -----------------------------------------------------------


def test_a_doubled_slash_before_management_keeps_the_warehouse_it_names(srv: Server) -> None:
    in_w2 = _catalog(srv, warehouse="w2")
    in_w2.create_namespace("slash")
    in_w2.create_table("slash.only_in_w2", PY_SCHEMA)
    in_w2.drop_table("slash.only_in_w2")
    admin = _as(srv)
    for lead in ("//", "///"):
        url = f"{srv.url}{lead}{DROPPED[1:]}"
        listed = requests.get(url, params={"namespace": "slash", "warehouse": "w2"}, headers=admin, timeout=30)
        assert listed.status_code == 200, listed.text
        assert [d["name"] for d in listed.json()["dropped"]] == ["only_in_w2"]
        unknown = requests.get(url, params={"warehouse": "nope"}, headers=admin, timeout=30)
        assert_error(unknown, 404, "NoSuchWarehouseException")
        url = f"{srv.url}{lead}{MAINTENANCE[1:]}/tasks"
        tasks = requests.get(url, params={"warehouse": "nope"}, headers=admin, timeout=30)
        assert_error(tasks, 404, "NoSuchWarehouseException")
    # the same path without ?warehouse= is the default warehouse's, where it was never dropped
    plain = requests.get(f"{srv.url}{DROPPED}", params={"namespace": "slash"}, headers=admin, timeout=30)
    assert plain.status_code == 200 and plain.json()["dropped"] == [], plain.text


# -- 5. events ----------------------------------------------------------------------------------------


def _all_events(server: Server, headers: dict[str, str], **filters: object) -> tuple[list[dict], dict]:
    """Every event the caller is shown, and the last answer (caught up)."""
    out: list[dict] = []
    body: dict[str, object] = {**filters, "page-size": 1000}
    while True:
        resp = _events(server, headers, **body)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        out += page["events"]
        if not page["events"]:
            return out, page
        body["continuation-token"] = page["next-page-token"]


def test_a_rename_to_a_name_the_reader_may_not_see_comes_without_its_destination(srv: Server) -> None:
    admin = _catalog(srv)
    for ns in ("seen", "secret"):
        admin.create_namespace_if_not_exists(ns)
    admin.create_table("seen.moving", PY_SCHEMA).append(rows(0, 1))
    admin.rename_table("seen.moving", "secret.arrived")
    admin.create_table("seen.stays", PY_SCHEMA)
    admin.rename_table("seen.stays", "seen.stayed")
    analyst = _as(srv, "analyst")  # read on namespace seen

    events, _ = _all_events(srv, analyst)
    renames = [e["operation"] for e in events if e["operation"]["operation-type"] == "rename-table"]
    # the rename into a hidden name keeps what the reader may see (the old name left), not where it went
    assert renames == [
        {
            "operation-type": "rename-table",
            "identifier": {"namespace": ["seen"], "name": "moving"},
            "object-type": "table",
        },
        {
            "operation-type": "rename-table",
            "identifier": {"namespace": ["seen"], "name": "stays"},
            "object-type": "table",
            "destination": {"namespace": ["seen"], "name": "stayed"},
        },
    ]
    assert "secret" not in json.dumps(events) and "arrived" not in json.dumps(events)
    admin_events, _ = _all_events(srv, _as(srv), **{"catalog-objects-by-name": [["seen", "moving"]]})
    (shown,) = [e for e in admin_events if e["operation"]["operation-type"] == "rename-table"]
    assert shown["operation"]["destination"] == {"namespace": ["secret"], "name": "arrived"}


def test_events_the_reader_may_not_see_do_not_move_its_highest_processed_timestamp(srv: Server) -> None:
    admin = _catalog(srv)
    for ns in ("seen", "secret"):
        admin.create_namespace_if_not_exists(ns)
    admin.create_table("seen.clock", PY_SCHEMA)
    time.sleep(0.05)
    admin.create_table("secret.earlier", PY_SCHEMA)  # hidden, and newer than anything the reader sees
    analyst = _as(srv, "analyst")
    first = _events(srv, analyst, **{"page-size": 1000}).json()  # every event it may see, and more read past
    assert first["events"] and "secret" not in json.dumps(first)
    # the newest timestamp among the events shown, not that of the hidden ones read past
    newest = max(e["timestamp-ms"] for e in first["events"])
    assert first["highest-processed-timestamp-ms"] == newest
    time.sleep(0.05)
    admin.create_table("secret.later", PY_SCHEMA).append(rows(0, 1))
    again = _events(srv, analyst, **{"continuation-token": first["next-page-token"]}).json()
    assert again["events"] == [] and again["highest-processed-timestamp-ms"] == newest
    assert _all_events(srv, analyst)[1]["highest-processed-timestamp-ms"] == newest


def test_an_events_token_is_refused_on_another_warehouse(srv: Server) -> None:
    _catalog(srv, warehouse="w2").create_namespace("tokens")
    admin = _as(srv)
    default_token = _events(srv, admin).json()["next-page-token"]
    w2_token = _events(srv, admin, "w2/").json()["next-page-token"]
    for prefix, foreign in (("w2/", default_token), ("", w2_token), ("default/", w2_token)):
        resp = _events(srv, admin, prefix, **{"continuation-token": foreign})
        assert_error(resp, 400, "BadRequestException", "warehouse")
    for prefix, own in (("w2/", w2_token), ("", default_token), ("default/", default_token)):
        assert _events(srv, admin, prefix, **{"continuation-token": own}).status_code == 200


# -- 6. the history of a purged table -----------------------------------------------------------------


def test_the_maintenance_history_of_a_purged_table_ends_with_its_purge(srv: Server) -> None:
    admin = _catalog(srv)
    admin.create_namespace("hist")
    admin.create_table("hist.t", PY_SCHEMA).append(rows(0, 2))
    ran = _run(srv, "hist", "t", {"kinds": ["expire-snapshots"], "dry-run": True}).json()["tasks"][0]["id"]
    wait_task(srv.url, ran, headers=_as(srv))
    admin.purge_table("hist.t")
    purge_now(srv.url, "hist.t", headers=_as(srv))
    deadline = time.monotonic() + 60  # the entry is gone when its purge ends; the task, a moment later
    while True:
        found = requests.get(
            srv.url + MAINTENANCE + "/tasks", params={"namespace": "hist", "table": "t"}, headers=_as(srv), timeout=30
        )
        assert found.status_code == 200, found.text
        if all(t["state"] == "done" for t in found.json()["tasks"]):
            break
        assert time.monotonic() < deadline, found.text
        time.sleep(0.2)

    def history(client: str) -> subprocess.CompletedProcess:
        command = ["maintenance", "history", "hist.t", "--json", "--uri", srv.url]
        command += ["--credential", f"{client}:{CLIENTS[client]}"]
        return subprocess.run([sys.executable, "-m", "catalog", *command], capture_output=True, text=True, timeout=120)

    shown = history("admin")
    assert shown.returncode == 0, shown.stderr
    tasks = json.loads(shown.stdout)["tasks"]
    assert [(t["kind"], t["state"]) for t in tasks] == [("purge", "done"), ("expire-snapshots", "done")]
    assert tasks[1]["id"] == ran and all(t["namespace"] == ["hist"] and t["table"] == "t" for t in tasks)
    refused = history("nobody")
    assert refused.returncode != 0 and "403" in refused.stderr, refused.stderr
    # a table of the name again: its own history, not its predecessor's
    admin.create_table("hist.t", PY_SCHEMA)
    again = history("admin")
    assert again.returncode == 0 and json.loads(again.stdout)["tasks"] == [], again.stdout
    never = requests.get(
        srv.url + MAINTENANCE + "/tasks", params={"namespace": "hist", "table": "never"}, headers=_as(srv), timeout=30
    )
    assert_error(never, 404, "NoSuchTableException")
