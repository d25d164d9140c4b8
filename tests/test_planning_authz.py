"""Scan planning is authorised exactly as loadTable (READ on the table, on every call), and a
plan-task token works only for the caller it was issued to, on its table (docs/planning.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests

from tests.support import as_, assert_error, auth_env, start_server, token

GRANTS = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: client:analyst, privileges: [read], on: {namespace: seen}}
  - {principal: client:ingest, privileges: [read], on: {namespace: seen}}
"""


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    tmp = tmp_path_factory.mktemp("planning-authz")
    server = start_server(tmp, extra_env={**auth_env(tmp, GRANTS), "CATALOG_PLANNING_MANIFESTS_PER_TASK": "1"})
    admin = as_(server, "admin")
    for ns in ("seen", "hidden"):
        admin.create_namespace(ns)
        for name in ("t", "u"):
            table = admin.create_table(f"{ns}.{name}", pa.schema([pa.field("id", pa.int64())]))
            for i in range(2):
                table.append(pa.table({"id": pa.array([i], pa.int64())}))
    yield server
    server.stop()


def _call(srv, client: str, method: str, path: str, **kw) -> requests.Response:
    headers = {"Authorization": f"Bearer {token(srv, client)}"}
    return requests.request(method, srv.url + path, headers=headers, timeout=30, **kw)


def test_no_plan_without_read_on_the_table_as_load_table_answers(srv) -> None:
    for client in ("analyst", "nobody"):
        loaded = _call(srv, client, "GET", "/v1/namespaces/hidden/tables/t")
        planned = _call(srv, client, "POST", "/v1/namespaces/hidden/tables/t/plan", json={})
        assert loaded.status_code in (403, 404) and planned.status_code == loaded.status_code, planned.text
        assert planned.json()["error"]["type"] == loaded.json()["error"]["type"]
        for method in ("GET", "DELETE"):
            resp = _call(srv, client, method, "/v1/namespaces/hidden/tables/t/plan/p1")
            assert resp.status_code == loaded.status_code
    assert _call(srv, "nobody", "POST", "/v1/namespaces/seen/tables/t/plan", json={}).status_code == 403
    resp = requests.post(srv.url + "/v1/namespaces/seen/tables/t/plan", json={}, timeout=30)
    assert resp.status_code == 401


def test_a_reader_plans_and_redeems_its_own_plan_tasks(srv) -> None:
    planned = _call(srv, "analyst", "POST", "/v1/namespaces/seen/tables/t/plan", json={})
    assert planned.status_code == 200, planned.text
    tokens = planned.json()["plan-tasks"]
    assert len(tokens) == 2
    for plan_task in tokens:
        resp = _call(srv, "analyst", "POST", "/v1/namespaces/seen/tables/t/tasks", json={"plan-task": plan_task})
        assert resp.status_code == 200 and len(resp.json()["file-scan-tasks"]) == 1, resp.text
    assert sorted(as_(srv, "analyst").load_table("seen.t").scan().to_arrow()["id"].to_pylist()) == [0, 1]


def test_a_plan_task_replayed_by_another_caller_or_on_another_table_is_refused(srv) -> None:
    plan_task = _call(srv, "analyst", "POST", "/v1/namespaces/seen/tables/t/plan", json={}).json()["plan-tasks"][0]
    body = {"json": {"plan-task": plan_task}}
    for client in ("ingest", "admin"):  # both may read the table: the token is still not theirs
        assert_error(
            _call(srv, client, "POST", "/v1/namespaces/seen/tables/t/tasks", **body), 400, "BadRequestException"
        )
    assert_error(
        _call(srv, "analyst", "POST", "/v1/namespaces/seen/tables/u/tasks", **body), 404, "NoSuchPlanTaskException"
    )
    resp = _call(srv, "analyst", "POST", "/v1/namespaces/hidden/tables/t/tasks", **body)
    assert resp.status_code == 403  # no READ there: refused before the token is looked at


def test_a_token_handed_to_a_caller_without_read_gets_nothing(srv) -> None:
    """READ is checked on every call, before the token: holding a token grants nothing."""
    plan_task = _call(srv, "admin", "POST", "/v1/namespaces/hidden/tables/t/plan", json={}).json()["plan-tasks"][0]
    resp = _call(srv, "nobody", "POST", "/v1/namespaces/hidden/tables/t/tasks", json={"plan-task": plan_task})
    assert resp.status_code == 403


def test_a_plan_id_is_its_callers_only(srv) -> None:
    """Another caller who may read the table cannot cancel the plan or get credentials by its id;
    a caller without READ is refused before the id is looked at."""
    path = "/v1/namespaces/seen/tables/t"
    plan_id = _call(srv, "analyst", "POST", path + "/plan", json={}).json()["plan-id"]
    for client in ("ingest", "admin"):
        assert_error(_call(srv, client, "DELETE", f"{path}/plan/{plan_id}"), 404, "NoSuchPlanIdException")
        resp = _call(srv, client, "GET", path + "/credentials", params={"planId": plan_id})
        assert_error(resp, 404, "NoSuchPlanIdException")
    assert _call(srv, "nobody", "GET", path + "/credentials", params={"planId": plan_id}).status_code == 403
    assert _call(srv, "nobody", "DELETE", f"{path}/plan/{plan_id}").status_code == 403
    assert _call(srv, "analyst", "GET", path + "/credentials", params={"planId": plan_id}).status_code == 200
    assert _call(srv, "analyst", "DELETE", f"{path}/plan/{plan_id}").status_code == 204
