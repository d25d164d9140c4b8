"""Protocol details clients depend on: config, endpoints, prefix, ETag/304, snapshots=refs, errors."""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.support import JSON_SCHEMA, assert_error, create

EXPECTED_ENDPOINTS = {
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/transactions/commit",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/views/rename",
    "POST /v1/{prefix}/namespaces/{namespace}/register-view",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
}


def test_config_shape(http):
    body = http.get("/v1/config").json()
    assert isinstance(body["defaults"], dict) and isinstance(body["overrides"], dict)
    assert set(body["endpoints"]) >= EXPECTED_ENDPOINTS
    # With warehouses, `warehouse` names one: the default's name (or its location, as clients from
    # before warehouses may send) is the default; any other name is 404 in the Iceberg error shape.
    assert http.get("/v1/config", params={"warehouse": "default"}).json()["overrides"] == body["overrides"]
    unknown = http.get("/v1/config", params={"warehouse": "anything"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "NoSuchWarehouseException"


def test_every_advertised_endpoint_is_served(http, ns):
    """Each advertised operation answers with something other than 404-no-route/405."""
    create(http, ns, "t")
    for endpoint in http.get("/v1/config").json()["endpoints"]:
        method, template = endpoint.split(" ")
        path = (
            template.replace("/{prefix}", "").replace("{namespace}", ns).replace("{table}", "t").replace("{view}", "t")
        )
        resp = http(method, path, json={})
        assert resp.status_code != 405, endpoint
        if resp.status_code == 404 and resp.content:  # a 404 about the resource, not "no such route"
            assert resp.json()["error"]["type"] != "NotFoundException", endpoint


def test_prefixed_and_unprefixed_routes_are_the_same(http, ns):
    create(http, ns, "t")
    plain = http.get(f"/v1/namespaces/{ns}/tables/t")
    # The default warehouse's name (CATALOG_PREFIX, or `default`) is a prefix of its routes; a prefix
    # that names no warehouse is 404 (before warehouses, any prefix was accepted and ignored).
    prefixed = http.get(f"/v1/default/namespaces/{ns}/tables/t")
    assert plain.status_code == prefixed.status_code == 200
    assert plain.json()["metadata-location"] == prefixed.json()["metadata-location"]
    assert http.get("/v1/default/namespaces").status_code == 200
    unknown = http.get("/v1/wh/namespaces")
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "NoSuchWarehouseException"
    resp = http.post(
        "/v1/default/tables/rename",
        json={"source": {"namespace": [ns], "name": "t"}, "destination": {"namespace": [ns], "name": "u"}},
    )
    assert resp.status_code == 204, resp.text


def test_etag_and_if_none_match(http, ns):
    created = create(http, ns, "t")
    first = http.get(f"/v1/namespaces/{ns}/tables/t")
    tag = first.headers["ETag"]
    assert tag
    again = http.get(f"/v1/namespaces/{ns}/tables/t", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    refs = http.get(f"/v1/namespaces/{ns}/tables/t", params={"snapshots": "refs"})
    assert refs.headers["ETag"] != tag  # a different view of the table, a different tag
    http.post(f"/v1/namespaces/{ns}/tables/t", json={"updates": [{"action": "set-properties", "updates": {"a": "b"}}]})
    changed = http.get(f"/v1/namespaces/{ns}/tables/t", headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["ETag"] != tag
    assert changed.json()["metadata-location"] != created["metadata-location"]
    assert_error(http.get(f"/v1/namespaces/{ns}/tables/t", params={"snapshots": "some"}), 400, "BadRequestException")


def test_snapshots_refs_filters_unreferenced(server, ns):
    catalog = server.catalog()
    table = catalog.create_table(f"{ns}.hist", pa.schema([("id", pa.int64())]))
    for i in range(3):
        table.append(pa.table({"id": [i]}))
    table = catalog.load_table(f"{ns}.hist")
    first = table.snapshots()[0].snapshot_id
    table.manage_snapshots().create_tag(first, "t0").commit()
    import requests

    all_ = requests.get(f"{server.url}/v1/namespaces/{ns}/tables/hist", timeout=30).json()["metadata"]
    refs = requests.get(f"{server.url}/v1/namespaces/{ns}/tables/hist?snapshots=refs", timeout=30).json()["metadata"]
    assert len(all_["snapshots"]) == 3
    assert {s["snapshot-id"] for s in refs["snapshots"]} == {first, all_["current-snapshot-id"]}
    assert refs["snapshot-log"] == all_["snapshot-log"]


def test_head_table_and_metrics(http, ns):
    create(http, ns, "t")
    ok = http("HEAD", f"/v1/namespaces/{ns}/tables/t")
    assert ok.status_code == 204 and ok.content == b""
    missing = http("HEAD", f"/v1/namespaces/{ns}/tables/nope")
    assert missing.status_code == 404 and missing.content == b""
    report = {
        "report-type": "commit-report",
        "table-name": f"{ns}.t",
        "snapshot-id": 1,
        "sequence-number": 1,
        "operation": "append",
        "metrics": {},
    }
    assert http.post(f"/v1/namespaces/{ns}/tables/t/metrics", json=report).status_code == 204
    assert_error(http.post(f"/v1/namespaces/{ns}/tables/t/metrics", json={}), 400, "BadRequestException")


def test_unknown_route_and_method_use_the_error_body(http):
    assert_error(http.get("/v1/nothing/here/at/all"), 404, "NotFoundException")
    resp = http("PUT", "/v1/namespaces")
    assert resp.status_code == 405 and resp.json()["error"]["code"] == 405


def test_names_with_encoded_characters(http, ns):
    for name in ("with space", "dot.ted", "ünï", "a+b", "per%cent"):
        resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": JSON_SCHEMA})
        assert resp.status_code == 200, (name, resp.text)
    from urllib.parse import quote

    for name in ("with space", "dot.ted", "ünï", "a+b", "per%cent"):
        resp = http.get(f"/v1/namespaces/{ns}/tables/{quote(name, safe='')}")
        assert resp.status_code == 200, (name, resp.text)
    assert http.get(f"/v1/namespaces/{ns}/tables/with+space").status_code == 200  # Java's form encoding
    names = sorted(i["name"] for i in http.get(f"/v1/namespaces/{ns}/tables").json()["identifiers"])
    assert names == sorted(["with space", "dot.ted", "ünï", "a+b", "per%cent"])
    # an encoded slash reaches the handler as a name, and is refused as one
    assert_error(http.get(f"/v1/namespaces/{ns}/tables/a%2Fb"), 404, "NoSuchTableException")


def test_bearer_none_is_ignored(http):
    """pyiceberg sends 'Authorization: Bearer None' when no token is configured."""
    assert http.get("/v1/config", headers={"Authorization": "Bearer None"}).status_code == 200


def test_unserved_operations_are_501_in_the_error_shape(http, ns):
    create(http, ns, "t")
    for method, path in (  # scan planning is served: tests/test_planning.py
        ("POST", f"/v1/namespaces/{ns}/tables/t/sign"),
        ("GET", f"/v1/namespaces/{ns}/functions"),
    ):
        assert_error(http(method, path, json={}), 501, "NotImplementedException", "Not implemented")
    endpoints = " ".join(http.get("/v1/config").json()["endpoints"])
    assert "functions" not in endpoints and "sign" not in endpoints


def test_credentials_endpoint_answers_explicitly(http, ns):
    create(http, ns, "t")
    resp = http.get(f"/v1/namespaces/{ns}/tables/t/credentials")
    assert resp.status_code == 200 and "storage-credentials" in resp.json()
    assert_error(http.get(f"/v1/namespaces/{ns}/tables/nope/credentials"), 404, "NoSuchTableException")


# --- referenced-by and the load result's remote-signing-config (issue 28, item 12) ----------------


def test_referenced_by_is_validated(http, ns) -> None:
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
    assert http("POST", f"/v1/namespaces/{ns}/tables", json={"name": "t", "schema": schema}).status_code == 200
    view = {
        "name": "v",
        "schema": schema,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {},
            "default-namespace": [ns],
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        },
        "properties": {},
    }
    assert http("POST", f"/v1/namespaces/{ns}/views", json=view).status_code == 200
    good = [f"{ns}%1Fv", f"prod%1Fanalytics%1Fquarterly%2Cv,{ns}%1Fv", "a%1Fb%1Fc"]
    bad = ["justaview", f"{ns}%1F", "%1Fv", f"{ns}%1Fv,", ",".join([f"{ns}%1Fv"] * 33)]
    for path in (
        f"/v1/namespaces/{ns}/tables/t",
        f"/v1/namespaces/{ns}/views/v",
        f"/v1/namespaces/{ns}/tables/t/credentials",
    ):
        for value in good:
            resp = http("GET", f"{path}?referenced-by={value}")
            assert resp.status_code == 200, (path, value, resp.text)
        for value in bad:
            resp = http("GET", f"{path}?referenced-by={value}")
            assert resp.status_code == 400, (path, value, resp.text)
            assert resp.json()["error"]["type"] == "BadRequestException"


@pytest.mark.slow
def test_a_remote_signing_offer_carries_remote_signing_config(tmp_path) -> None:
    """The load result's ``remote-signing-config`` (the contract's RemoteSigningConfig) next to the
    ``config`` properties older clients read. A staged create answers a load result without touching S3."""
    import requests

    from tests.support import free_port, start_server

    env = {
        "CATALOG_WAREHOUSE": "s3://lake/wh",
        "CATALOG_S3_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "CATALOG_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "CATALOG_S3_SECRET_ACCESS_KEY": "secret-example",
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_S3_REMOTE_SIGNING": "true",
    }
    srv = start_server(tmp_path, extra_env=env)
    try:
        requests.post(f"{srv.url}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).raise_for_status()
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "a", "type": "long", "required": False}],
        }
        create = {"name": "t", "schema": schema, "stage-create": True}
        for header, offered in (("remote-signing", True), ("vended-credentials", True), (None, False)):
            headers = {"X-Iceberg-Access-Delegation": header} if header else {}
            resp = requests.post(f"{srv.url}/v1/namespaces/n/tables", json=create, headers=headers, timeout=10)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            if offered:
                assert body["config"]["s3.remote-signing-enabled"] == "true"
                assert body["remote-signing-config"] == {"properties": {}, "headers": {}}
            else:
                assert "remote-signing-config" not in body and "s3.remote-signing-enabled" not in body["config"]
            assert "secret-example" not in resp.text
    finally:
        srv.stop()
