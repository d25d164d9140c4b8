"""Operational endpoints against the real server: probes, Prometheus metrics, request ids, JSON logs."""

from __future__ import annotations

import re

import orjson
import requests

from tests.support import create


def metric(server_url: str, name: str, labels: str = "") -> float:
    text = requests.get(f"{server_url}/metrics", timeout=10).text
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} ([0-9.e+]+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_liveness_and_readiness(http):
    assert http.get("/health/live").json() == {"status": "ok"}
    ready = http.get("/health/ready")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["checks"] == {"database": "ok", "storage": "ok", "migrations": "ok"}
    # warehouses created beside the default (by other tests on this shared server) are each ready
    assert set(body) <= {"status", "checks", "warehouses"}
    assert all(set(checks.values()) == {"ok"} for checks in body.get("warehouses", {}).values()), body


def test_conflicts_and_commits_are_counted(server, http, ns):
    create(http, ns, "t")
    conflicts = 'catalog_commit_conflict_total{cause="requirement"}'
    before_conflicts = metric(server.url, conflicts)
    before_commits = metric(server.url, "catalog_commits_total", '{kind="table"}')
    stale = {"requirements": [{"type": "assert-current-schema-id", "current-schema-id": 9}], "updates": []}
    assert http.post(f"/v1/namespaces/{ns}/tables/t", json=stale).status_code == 409
    ok = {"updates": [{"action": "set-properties", "updates": {"a": "b"}}]}
    assert http.post(f"/v1/namespaces/{ns}/tables/t", json=ok).status_code == 200
    assert metric(server.url, conflicts) == before_conflicts + 1
    assert metric(server.url, "catalog_commits_total", '{kind="table"}') == before_commits + 1
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    assert (
        'catalog_http_requests_total{method="POST",route="/v1/namespaces/{namespace:str}/tables/{table:str}",status="409"}'
        in text
    )
    assert "catalog_commit_duration_seconds_bucket" in text and "catalog_metadata_cache_hits" in text
    assert "catalog_db_pool_checked_out" in text


def test_request_id_and_json_conflict_log(server, http, ns):
    create(http, ns, "logged")
    stale = {"requirements": [{"type": "assert-default-spec-id", "default-spec-id": 7}], "updates": []}
    resp = http.post(f"/v1/namespaces/{ns}/tables/logged", json=stale, headers={"X-Request-Id": "req-abc-123"})
    assert resp.status_code == 409 and resp.headers["X-Request-Id"] == "req-abc-123"
    assert http.get("/v1/config").headers["X-Request-Id"]  # made up when the client sends none
    lines = [orjson.loads(line) for line in server.log.read_bytes().splitlines() if line.startswith(b"{")]
    conflict = [e for e in lines if e.get("request_id") == "req-abc-123" and "commit conflict" in e["message"]]
    assert len(conflict) == 1, lines[-5:]
    assert f"table={ns}.logged" in conflict[0]["message"] and "expected id 7 != 0" in conflict[0]["message"]
    assert conflict[0]["level"] == "warning"
