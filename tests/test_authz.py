"""Authorization: grants decide what each principal may do, on every route, on both backends.

A platform's set-up: ``admin`` may do anything, ``ingest`` may write the one table ``raw.events``,
``analyst`` may read the namespace ``analytics``, ``nobody`` holds nothing. Refused requests are
403 in the Iceberg body and change nothing: asserted on the pointers and on the warehouse files.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests
from pyiceberg.exceptions import ForbiddenError

from catalog.auth import policy as authz
from catalog.auth.policy import Grant, Policy, Privilege, Target, commit_privileges, parse_grants, principal_keys
from catalog.errors import BadRequest
from tests.support import (
    PY_SCHEMA,
    Server,
    as_,
    assert_error,
    auth_env,
    backends,
    rows,
    s3_client_props,
    s3_env,
    start_server,
    token,
)

BOOTSTRAP = """
grants:
  - {principal: user:admin, privileges: [admin], on: catalog}
  - {principal: user:ingest, privileges: [write], on: {table: raw.events}}
  - {principal: user:analyst, privileges: [read], on: {namespace: analytics}}
"""
ROWS = rows(0, 3)


@pytest.fixture(scope="module", params=backends())
def secured(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("authz")
    env = auth_env(workdir, BOOTSTRAP)
    io: dict[str, str] = {}
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        env |= {"CATALOG_DATABASE_URL": services["pg"].url, **s3_env(services["s3"], f"authz-{uuid.uuid4().hex[:6]}")}
        io = s3_client_props(services["s3"])
        _reset_grants(services["pg"].url)
    server = start_server(workdir, request.param, env)
    server.io_props = io
    admin = as_(server, "admin")
    for ns in ("raw", "analytics", "secret"):
        if not admin.namespace_exists(ns):
            admin.create_namespace(ns)
    for ident in ("raw.events", "raw.other", "analytics.a", "analytics.b", "secret.s"):
        if admin.table_exists(ident):
            admin.purge_table(ident)
        admin.create_table(ident, PY_SCHEMA)
    admin.load_table("analytics.a").append(ROWS)
    yield server
    server.stop()


def _reset_grants(url: str) -> None:
    """The PostgreSQL database is shared by the session: grants other modules left behind go."""
    import sqlalchemy as sa

    engine = sa.create_engine(url)
    with engine.begin() as conn:
        if sa.inspect(conn).has_table("grants"):
            conn.execute(sa.text("DELETE FROM grants"))
    engine.dispose()


class Caller:
    """Raw HTTP as one principal."""

    def __init__(self, server: Server, client: str) -> None:
        self.base = server.url
        self.headers = {"Authorization": f"Bearer {token(server, client)}"}

    def __call__(self, method: str, path: str, **kw: Any) -> requests.Response:
        return requests.request(
            method, self.base + path, headers={**self.headers, **kw.pop("headers", {})}, timeout=30, **kw
        )


def pointers(server: Server) -> dict[str, str]:
    admin = Caller(server, "admin")
    found = {}
    for ns in ("raw", "analytics", "secret"):
        for ident in admin("GET", f"/v1/namespaces/{ns}/tables").json()["identifiers"]:
            found[f"{ns}.{ident['name']}"] = admin("GET", f"/v1/namespaces/{ns}/tables/{ident['name']}").json()[
                "metadata-location"
            ]
    return found


def warehouse_files(server: Server) -> set[str]:
    if server.backend != "sqlite":
        return set()
    root = Path(server.env["CATALOG_WAREHOUSE"])
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def properties_commit(server: Server, ident: str) -> dict[str, Any]:
    """A commit that changes a property (``manage-properties``, which ``write`` does not give)."""
    table = as_(server, "admin").load_table(ident)
    return {
        "requirements": [{"type": "assert-table-uuid", "uuid": table.metadata.table_uuid.hex}],
        "updates": [{"action": "set-properties", "updates": {"x": "y"}}],
    }


# -- pure: the evaluator ---------------------------------------------------------------------------


def test_namespace_grants_are_inherited_and_privileges_imply_what_they_should() -> None:
    a = authz.namespace(["a"])
    ab_t = authz.entry("table", ["a", "b"], "t")
    policy = Policy(
        [
            Grant("user:u", Privilege.WRITE, a),
            Grant("role:r", Privilege.PURGE, ab_t),
            Grant("user:boss", Privilege.ADMIN, authz.ROOT),
        ]
    )
    u, r, boss, other = (principal_keys(n, g) for n, g in (("u", []), ("x", ["r"]), ("boss", []), ("o", ["z"])))
    assert policy.allows(u, Privilege.WRITE, ab_t) and policy.allows(u, Privilege.READ, ab_t)  # write gives read
    assert not policy.allows(u, Privilege.DROP, ab_t) and not policy.allows(u, Privilege.WRITE, authz.ROOT)
    assert not policy.allows(u, Privilege.WRITE, authz.entry("table", ["ab"], "t"))  # a prefix is not a parent
    assert policy.allows(r, Privilege.DROP, ab_t) and policy.allows(r, Privilege.PURGE, ab_t)  # purge gives drop
    assert not policy.allows(r, Privilege.READ, ab_t)  # dropping is not reading
    assert all(policy.allows(boss, p, ab_t) for p in Privilege)
    assert not any(policy.allows(other, p, ab_t) for p in Privilege)
    assert not policy.allows(u, Privilege.WRITE, authz.entry("view", ["x"], "a"))  # a name is not a namespace


def test_visibility_lets_a_principal_navigate_to_its_grants() -> None:
    policy = Policy([Grant("user:u", Privilege.WRITE, authz.entry("table", ["a", "b"], "t"))])
    u = principal_keys("u", [])
    assert policy.sees(u, authz.namespace(["a"])) and policy.sees(u, authz.namespace(["a", "b"]))
    assert policy.sees(u, authz.entry("table", ["a", "b"], "t"))
    assert not policy.sees(u, authz.entry("table", ["a", "b"], "other"))
    assert not policy.sees(u, authz.namespace(["a", "c"])) and not policy.sees(u, authz.namespace(["z"]))
    # table a.b (namespace a, name b) is not inside namespace a.b
    policy = Policy([Grant("user:u", Privilege.READ, authz.namespace(["a", "b"]))])
    assert not policy.sees(u, authz.entry("table", ["a"], "b"))


def test_commit_privileges_follow_the_updates() -> None:
    assert commit_privileges([{"action": "add-snapshot"}, {"action": "set-snapshot-ref"}]) == {Privilege.WRITE}
    assert commit_privileges([{"action": "set-properties"}]) == {Privilege.MANAGE_PROPERTIES}
    assert commit_privileges([{"action": "add-schema"}, {"action": "unknown-thing"}]) == {Privilege.ALTER}
    assert commit_privileges([]) == {Privilege.WRITE}


def test_bootstrap_documents_are_checked() -> None:
    grants = parse_grants(
        {"grants": [{"principal": "role:r", "privileges": ["read", "write"], "on": {"table": ["a.b", "t"]}}]}
    )
    assert [g.target for g in grants] == [Target("table", ("a.b", "t"))] * 2
    for bad in (
        {"grants": [{"principal": "r", "privileges": ["read"], "on": "catalog"}]},
        {"grants": [{"principal": "user:x", "privileges": ["fly"], "on": "catalog"}]},
        {"grants": [{"principal": "user:x", "privileges": ["read"], "on": {"table": "t"}}]},
        {"grants": [{"principal": "user:x", "privileges": ["read"], "on": {"bucket": "t"}}]},
        {"grants": "all"},
        ["x"],
    ):
        with pytest.raises(BadRequest):
            parse_grants(bad)


# -- end to end ------------------------------------------------------------------------------------


def test_ingest_appends_to_its_one_table_and_is_refused_everywhere_else(secured: Server) -> None:
    ingest = as_(secured, "ingest")
    events = ingest.load_table("raw.events")
    events.append(ROWS)
    assert len(ingest.load_table("raw.events").scan().to_arrow()) == 3

    before, files = pointers(secured), warehouse_files(secured)
    http = Caller(secured, "ingest")
    refused = [
        http("POST", "/v1/namespaces/raw/tables", json={"name": "x", "schema": PY_SCHEMA.model_dump(by_alias=True)}),
        http("DELETE", "/v1/namespaces/raw/tables/events"),
        http("DELETE", "/v1/namespaces/raw/tables/events", params={"purgeRequested": "true"}),
        http("GET", "/v1/namespaces/raw/tables/other"),
        http("POST", "/v1/namespaces/raw/tables/events", json=properties_commit(secured, "raw.events")),
        http("POST", "/v1/namespaces/raw/tables/other", json={"requirements": [], "updates": []}),
        http(
            "POST",
            "/v1/tables/rename",
            json={
                "source": {"namespace": ["raw"], "name": "events"},
                "destination": {"namespace": ["raw"], "name": "e2"},
            },
        ),
        http("POST", "/v1/namespaces/raw/register", json={"name": "r", "metadata-location": before["raw.events"]}),
        http(
            "POST",
            "/v1/transactions/commit",
            json={
                "table-changes": [
                    {"identifier": {"namespace": ["raw"], "name": n}, "requirements": [], "updates": []}
                    for n in ("events", "other")
                ]
            },
        ),
        http("POST", "/v1/namespaces", json={"namespace": ["raw", "sub"]}),
        http("DELETE", "/v1/namespaces/secret"),
        http("POST", "/v1/namespaces/raw/properties", json={"updates": {"owner": "me"}}),
        http("GET", "/v1/namespaces/analytics/tables"),
    ]
    for resp in refused:
        assert_error(resp, 403, "ForbiddenException")
    with pytest.raises(ForbiddenError):
        events.transaction().set_properties(owner="ingest").commit_transaction()
    with pytest.raises(ForbiddenError), events.update_schema() as update:
        update.add_column("extra", PY_SCHEMA.find_field("id").field_type)
    assert pointers(secured) == before and warehouse_files(secured) == files
    # what it may see: the way to its table, and the table
    assert ingest.list_namespaces() == [("raw",)]
    assert ingest.list_tables("raw") == [("raw", "events")]


def test_analyst_reads_only_what_it_was_granted(secured: Server) -> None:
    analyst = as_(secured, "analyst")
    assert analyst.list_namespaces() == [("analytics",)]
    assert sorted(analyst.list_tables("analytics")) == [("analytics", "a"), ("analytics", "b")]
    assert len(analyst.load_table("analytics.a").scan().to_arrow()) == 3
    before = pointers(secured)
    with pytest.raises(ForbiddenError):
        analyst.load_table("analytics.a").append(ROWS)
    with pytest.raises(ForbiddenError):
        analyst.load_table("raw.events")
    http = Caller(secured, "analyst")
    assert http("HEAD", "/v1/namespaces/raw").status_code == 403
    assert http("HEAD", "/v1/namespaces/raw/tables/events").status_code == 403
    assert_error(http("GET", "/v1/namespaces", params={"parent": "secret"}), 403, "ForbiddenException")
    assert pointers(secured) == before


def test_a_principal_with_no_grants_gets_403_on_every_catalog_route(secured: Server) -> None:
    """Every route of the app is called (the list is checked against the app's routes), as a valid
    principal that holds nothing: 403 on each (on the routes that name an object by its id, the 404
    of an id that names nothing: tests/test_hidden_objects.py), nothing changed."""
    from catalog.api import unserved
    from catalog.server.app import create_app
    from catalog.settings import Settings

    location = pointers(secured)["raw.events"]
    ident = {"namespace": ["raw"], "name": "events"}
    commit = {"requirements": [], "updates": [{"action": "add-snapshot"}]}
    calls = {
        ("GET", "/v1/namespaces"): None,  # lists: 200 with nothing in them (checked below)
        ("POST", "/v1/namespaces"): {"json": {"namespace": ["n"]}},
        ("GET", "/v1/namespaces/{namespace}"): {},
        ("HEAD", "/v1/namespaces/{namespace}"): {},
        ("DELETE", "/v1/namespaces/{namespace}"): {},
        ("POST", "/v1/namespaces/{namespace}/properties"): {"json": {"updates": {"a": "b"}}},
        ("GET", "/v1/namespaces/{namespace}/tables"): {},
        ("POST", "/v1/namespaces/{namespace}/tables"): {
            "json": {"name": "x", "schema": PY_SCHEMA.model_dump(by_alias=True)}
        },
        ("GET", "/v1/namespaces/{namespace}/tables/{table}"): {},
        ("HEAD", "/v1/namespaces/{namespace}/tables/{table}"): {},
        ("POST", "/v1/namespaces/{namespace}/tables/{table}"): {"json": commit},
        ("DELETE", "/v1/namespaces/{namespace}/tables/{table}"): {"params": {"purgeRequested": "true"}},
        ("POST", "/v1/namespaces/{namespace}/tables/{table}/unregister"): {},
        ("GET", "/v1/namespaces/{namespace}/tables/{table}/credentials"): {},
        # scan planning: READ on the table, as loadTable (tests/test_planning_authz.py)
        ("POST", "/v1/namespaces/{namespace}/tables/{table}/plan"): {"json": {}},
        ("GET", "/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}"): {},
        ("DELETE", "/v1/namespaces/{namespace}/tables/{table}/plan/{plan_id}"): {},
        ("POST", "/v1/namespaces/{namespace}/tables/{table}/tasks"): {"json": {"plan-task": "x"}},
        ("POST", "/v1/namespaces/{namespace}/tables/{table}/metrics"): {
            "json": {
                "report-type": "scan-report",
                "table-name": "raw.events",
                "snapshot-id": 1,
                "filter": True,
                "schema-id": 0,
                "projected-field-ids": [],
                "projected-field-names": [],
                "metrics": {},
            }
        },
        ("POST", "/v1/namespaces/{namespace}/register"): {"json": {"name": "r", "metadata-location": location}},
        ("POST", "/v1/tables/rename"): {"json": {"source": ident, "destination": {**ident, "name": "moved"}}},
        ("POST", "/v1/transactions/commit"): {"json": {"table-changes": [{"identifier": ident, **commit}]}},
        ("GET", "/v1/namespaces/{namespace}/views"): {},
        ("POST", "/v1/namespaces/{namespace}/views"): {"json": {"name": "v", "schema": {}, "view-version": {}}},
        ("GET", "/v1/namespaces/{namespace}/views/{view}"): {},
        ("HEAD", "/v1/namespaces/{namespace}/views/{view}"): {},
        ("POST", "/v1/namespaces/{namespace}/views/{view}"): {"json": commit},
        ("DELETE", "/v1/namespaces/{namespace}/views/{view}"): {},
        ("POST", "/v1/views/rename"): {"json": {"source": ident, "destination": {**ident, "name": "moved"}}},
        ("POST", "/v1/namespaces/{namespace}/register-view"): {"json": {"name": "r", "metadata-location": location}},
        ("GET", "/management/v1/grants"): None,  # only the grants it may manage: none
        ("POST", "/management/v1/grants"): {
            "json": {"principal": "user:nobody", "privileges": ["admin"], "on": "catalog"}
        },
        ("DELETE", "/management/v1/grants/{grant_id}"): {},
        ("GET", "/management/v1/whoami"): None,
        ("POST", "/management/v1/maintenance/tables/{namespace}/{table}"): {"json": {"dry-run": True}},
        ("GET", "/management/v1/maintenance/tasks"): None,  # only tasks of tables it may read: none
        ("GET", "/management/v1/maintenance/tasks/{task_id}"): {},
        ("GET", "/management/v1/dropped"): None,  # only entries it holds a privilege on: none
        ("POST", "/management/v1/dropped/{dropped_id}/undrop"): {},
        ("DELETE", "/management/v1/dropped/{dropped_id}"): {},
        ("POST", "/v1/events"): None,  # the change feed: only events of what it may see: none
        ("GET", "/management/v1/warehouses"): {},  # warehouses are for admins only
        ("POST", "/management/v1/warehouses"): {"json": {"name": "mine", "location": "/tmp/mine"}},
        ("GET", "/management/v1/warehouses/{name}"): {},
        ("PUT", "/management/v1/warehouses/{name}"): {"json": {"location": "/tmp/mine"}},
        ("DELETE", "/management/v1/warehouses/{name}"): {},
    }
    open_routes = {
        "/",
        "/v1/config",
        "/v1/oauth/tokens",
        "/health/live",
        "/health/ready",
        "/metrics",
        "/docs",
        "/openapi.json",
    }
    app = create_app(Settings(database_url="sqlite:///:memory:"))
    served = {
        (
            method,
            path.replace("{namespace:str}", "{namespace}")
            .replace("{table:str}", "{table}")
            .replace("{view:str}", "{view}")
            .replace("{grant_id:str}", "{grant_id}")
            .replace("{task_id:str}", "{task_id}")
            .replace("{dropped_id:str}", "{dropped_id}")
            .replace("{plan_id:str}", "{plan_id}")
            .replace("{name:str}", "{name}"),
        )
        for route in app.routes
        for handler in route.route_handlers
        for method in handler.http_methods
        for path in handler.paths
        if path not in open_routes
        and method != "OPTIONS"
        and handler.handler_name not in {h.handler_name for h in unserved.ROUTES}
        # 501 unless remote signing is on; tests/test_signing.py checks its refusals of principals
        and handler.handler_name != "sign_request"
        # the console's pages: tests/test_console.py checks what a principal sees and may do there
        and not route.path.startswith("/ui")
    }
    assert served == set(calls), f"routes without a check here: {served ^ set(calls)}"

    doomed = f"dropme_{uuid.uuid4().hex[:6]}"
    as_(secured, "admin").create_table(f"raw.{doomed}", PY_SCHEMA)
    Caller(secured, "admin")("DELETE", f"/v1/namespaces/raw/tables/{doomed}")
    dropped = Caller(secured, "admin")("GET", "/management/v1/dropped", params={"namespace": "raw", "name": doomed})
    dropped_id = dropped.json()["dropped"][0]["id"]
    before, files = pointers(secured), warehouse_files(secured)
    http = Caller(secured, "nobody")
    grant_id = Caller(secured, "admin")("GET", "/management/v1/grants").json()["grants"][0]["id"]
    queued = Caller(secured, "admin")("POST", "/management/v1/maintenance/tables/raw/events", json={"dry-run": True})
    task_id = queued.json()["tasks"][0]["id"]  # the secured server runs no task: it stays queued
    for (method, path), kwargs in calls.items():
        url = path.format(
            namespace="raw",
            table="events",
            view="events",
            grant_id=grant_id,
            task_id=task_id,
            dropped_id=dropped_id,
            name="default",
            plan_id="p1",
        )
        resp = http(method, url, **(kwargs or {}))
        if kwargs is None:
            assert resp.status_code == 200, (method, path, resp.text)
            body = resp.json()
            assert all(body.get(k, []) == [] for k in ("namespaces", "grants", "tasks", "dropped", "events")), body
        elif method == "HEAD":
            assert resp.status_code == 403, (method, path)
        elif "_id}" in path and "{plan_id}" not in path:  # a plan id is checked after READ on its table
            assert_error(resp, 404, "NotFoundException")
        else:
            assert_error(resp, 403, "ForbiddenException")
    assert pointers(secured) == before and warehouse_files(secured) == files


def test_grants_and_revokes_through_the_management_api_take_effect_within_the_cache_bound(secured: Server) -> None:
    admin, analyst = Caller(secured, "admin"), Caller(secured, "analyst")
    assert analyst("GET", "/v1/namespaces/raw/tables/events").status_code == 403
    created = admin(
        "POST",
        "/management/v1/grants",
        json={"principal": "client:analyst", "privileges": ["read"], "on": {"table": "raw.events"}},
    )
    assert created.status_code == 201, created.text
    (grant,) = created.json()["grants"]
    assert grant["on"] == {"table": ["raw", "events"]} and grant["source"] == "api"
    assert analyst("GET", "/v1/namespaces/raw/tables/events").status_code == 200
    me = analyst("GET", "/management/v1/whoami").json()
    assert me["principal"] == "analyst" and {g["id"] for g in me["grants"]} >= {grant["id"]}
    # analyst may not hand out what it holds
    assert_error(
        analyst(
            "POST", "/management/v1/grants", json={"principal": "user:nobody", "privileges": ["read"], "on": "catalog"}
        ),
        403,
        "ForbiddenException",
    )
    assert admin("DELETE", f"/management/v1/grants/{grant['id']}").status_code == 204
    deadline = time.monotonic() + 1 + 2  # CATALOG_AUTHZ_CACHE_SECONDS=1, plus slack
    while analyst("GET", "/v1/namespaces/raw/tables/events").status_code != 403:
        assert time.monotonic() < deadline, "the revoke did not take effect within the cache bound"
        time.sleep(0.1)
    assert_error(admin("DELETE", f"/management/v1/grants/{grant['id']}"), 404, "NotFoundException")
    assert_error(
        admin("POST", "/management/v1/grants", json={"principal": "x", "privileges": ["read"], "on": "catalog"}),
        400,
        "BadRequestException",
    )


def test_an_idempotency_key_replays_only_to_the_principal_that_used_it(secured: Server) -> None:
    admin, ingest = Caller(secured, "admin"), Caller(secured, "ingest")
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {"namespace": [f"idem_{uuid.uuid4().hex[:6]}"]}
    assert admin("POST", "/v1/namespaces", json=body, headers=key).status_code == 200
    # keys are scoped per principal: ingest's request is processed as its own (it may not create
    # namespaces), and nothing tells it that admin used the key
    err = assert_error(ingest("POST", "/v1/namespaces", json=body, headers=key), 403, "ForbiddenException")
    assert "Idempotency" not in err["message"]


def test_every_mutation_and_every_refusal_leaves_an_audit_line(secured: Server) -> None:
    rid = uuid.uuid4().hex[:16]
    Caller(secured, "nobody")("DELETE", "/v1/namespaces/raw/tables/events", headers={"X-Request-Id": rid})
    rid2 = uuid.uuid4().hex[:16]
    Caller(secured, "admin")(
        "POST", "/v1/namespaces", json={"namespace": [f"a_{rid2}"]}, headers={"X-Request-Id": rid2}
    )
    rid3 = uuid.uuid4().hex[:16]
    requests.get(f"{secured.url}/v1/namespaces", headers={"X-Request-Id": rid3}, timeout=10)
    deadline = time.monotonic() + 5
    while True:
        lines = [orjson.loads(line) for line in secured.log.read_text().splitlines() if line.startswith("{")]
        audit = {line.get("request_id"): line for line in lines if line.get("logger") == "catalog.audit"}
        if {rid, rid2, rid3} <= set(audit) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    denied, allowed, unauthenticated = audit[rid], audit[rid2], audit[rid3]
    assert denied["principal"] == "nobody" and denied["action"] == "drop_table" and denied["outcome"] == "denied"
    assert denied["object"] == "table raw.events" and denied["status"] == 403 and denied["privileges"] == ["drop"]
    assert allowed["principal"] == "admin" and allowed["outcome"] == "allowed" and allowed["status"] == 200
    assert allowed["object"] == "catalog"
    assert unauthenticated["status"] == 401 and unauthenticated["outcome"] == "denied"


@pytest.mark.slow
def test_grants_cli_and_a_broken_bootstrap_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    subprocess.run([sys.executable, "-m", "catalog", "migrate"], env=env, check=True, capture_output=True)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "catalog", "grants", *args], env=env, capture_output=True, text=True
        )

    added = cli(
        "add", "--principal", "user:ingest", "--privilege", "write", "--privilege", "read", "--on", "table=raw.events"
    )
    assert added.returncode == 0, added.stderr
    listed = [orjson.loads(line) for line in cli("list").stdout.splitlines()]
    assert {(g["privilege"], tuple(g["on"]["table"])) for g in listed} == {
        ("write", ("raw", "events")),
        ("read", ("raw", "events")),
    }
    assert cli("remove", "--id", str(listed[0]["id"])).returncode == 0
    assert len(cli("list").stdout.splitlines()) == 1
    bad = cli("add", "--principal", "ingest", "--privilege", "write", "--on", "catalog")
    assert bad.returncode == 2 and "user:<name>" in bad.stderr and "Traceback" not in bad.stderr

    broken = tmp_path / "broken.yaml"
    broken.write_text("grants:\n  - {principal: user:x, privileges: [fly], on: catalog}\n")
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"],
        env={**env, "CATALOG_AUTHZ_BOOTSTRAP": str(broken), "CATALOG_PORT": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 2 and "CATALOG_AUTHZ_BOOTSTRAP" in served.stderr and "fly" in served.stderr
    assert "Traceback" not in served.stderr


@pytest.mark.postgres
def test_two_replicas_of_two_workers_accept_every_valid_token_and_honour_a_revoke_within_the_bound(
    services: dict, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two server processes of two workers each on one PostgreSQL database, like two pods: every
    fresh token (built-in or from the identity provider) works on every one of them, and a revoke
    made through one replica stops working on the other within ``CATALOG_AUTHZ_CACHE_SECONDS``."""
    from tests.idp import LocalIdP

    _reset_grants(services["pg"].url)
    with LocalIdP(audience="iceberg-catalog", clients={"bi": ("bi-secret", ["analysts"])}) as idp:
        replicas = []
        for i in range(2):
            workdir = tmp_path_factory.mktemp(f"replica{i}")
            env = {
                **auth_env(workdir, BOOTSTRAP, cache_seconds="2"),
                "CATALOG_WORKERS": "2",
                "CATALOG_DATABASE_URL": services["pg"].url,
                "CATALOG_OIDC_ISSUER": idp.issuer,
                "CATALOG_OIDC_AUDIENCE": "iceberg-catalog",
                **s3_env(services["s3"], "replicas"),
            }
            replicas.append(start_server(workdir, "postgres-s3", env))
        try:
            admin = Caller(replicas[0], "admin")
            ns = f"rep_{uuid.uuid4().hex[:6]}"
            assert admin("POST", "/v1/namespaces", json={"namespace": [ns]}).status_code == 200
            for i in range(100):
                fresh = token(replicas[i % 2], "analyst") if i % 2 else idp.mint("carol", groups=["analysts"])
                with requests.Session() as new_connection:  # a new connection: any worker may take it
                    resp = new_connection.get(
                        f"{replicas[(i // 2) % 2].url}/v1/namespaces",
                        headers={"Authorization": f"Bearer {fresh}"},
                        timeout=10,
                    )
                assert resp.status_code == 200, (i, resp.text)

            granted = admin(
                "POST",
                "/management/v1/grants",
                json={"principal": "role:analysts", "privileges": ["read"], "on": {"namespace": ns}},
            ).json()["grants"][0]
            carol = {"Authorization": f"Bearer {idp.mint('carol', groups=['analysts'])}"}
            deadline = time.monotonic() + 2 + 3
            while requests.get(f"{replicas[1].url}/v1/namespaces/{ns}", headers=carol, timeout=10).status_code != 200:
                assert time.monotonic() < deadline, "a grant made on one replica did not reach the other in time"
                time.sleep(0.1)
            assert admin("DELETE", f"/management/v1/grants/{granted['id']}").status_code == 204
            revoked_at = time.monotonic()
            while True:  # every worker of the other replica must stop honouring it
                codes = {
                    requests.Session()
                    .get(f"{replicas[1].url}/v1/namespaces/{ns}", headers=carol, timeout=10)
                    .status_code
                    for _ in range(6)
                }
                if codes == {403}:
                    break
                assert time.monotonic() - revoked_at < 2 + 3, f"revoke not in force everywhere: {codes}"
                time.sleep(0.1)
        finally:
            for replica in replicas:
                replica.stop()
