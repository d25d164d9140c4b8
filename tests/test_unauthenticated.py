"""What a request without a token is told, and what it may read, on a server that requires
authentication: a missing token is called missing (not malformed), and the API docs
(``/docs``, ``/openapi.json``) are served without one."""

from __future__ import annotations

import pytest

from tests.support import ROOT


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    from tests.support import start_server

    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "etl:s3cret",
        "CATALOG_TOKEN_SECRET": "x" * 40,
        "CATALOG_AUTHORIZATION": "none",
    }
    srv = start_server(tmp_path_factory.mktemp("auth"), extra_env=env)
    yield srv
    srv.stop()


def test_no_token_is_called_a_missing_token(auth_server):
    import requests
    from pyiceberg.exceptions import UnauthorizedError

    for headers in ({}, {"Authorization": "Bearer None"}, {"Authorization": "Bearer "}):
        resp = requests.get(f"{auth_server.url}/v1/namespaces", headers=headers, timeout=10)
        assert resp.status_code == 401, resp.text
        message = resp.json()["error"]["message"]
        assert "missing bearer token" in message and "malformed" not in message, (headers, message)
    # pyiceberg, configured without a token or credential, is told the same
    with pytest.raises(UnauthorizedError, match="missing bearer token"):
        auth_server.catalog().list_namespaces()
    # a token that is there but broken is still called malformed
    resp = requests.get(f"{auth_server.url}/v1/namespaces", headers={"Authorization": "Bearer abc"}, timeout=10)
    assert resp.status_code == 401 and "malformed token" in resp.json()["error"]["message"]


def test_docs_and_openapi_json_are_served_without_a_token(auth_server):
    import re

    import requests
    import yaml

    resp = requests.get(f"{auth_server.url}/openapi.json", timeout=10)  # no token, auth required
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    assert resp.json() == yaml.safe_load((ROOT / "spec" / "openapi.yaml").read_text())
    page = requests.get(f"{auth_server.url}/docs", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="/openapi.json"' in page.text and "/v1/{prefix}/namespaces" in page.text
    # the document's own title, once: not "REST API API"
    assert "<title>iceberg-catalog REST API</title>" in page.text and "API API" not in page.text
    # self-contained: nothing loaded from elsewhere (no network needed, any CSP)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text), page.text[:500]
    assert "<script" not in page.text
    # not catalog operations: not advertised
    token = requests.post(
        f"{auth_server.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "etl", "client_secret": "s3cret"},
        timeout=10,
    ).json()["access_token"]
    config = requests.get(f"{auth_server.url}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    endpoints = " ".join(config.json()["endpoints"])
    assert "docs" not in endpoints and "openapi" not in endpoints
