"""Page tokens must not reveal names the caller may not see (issue 28, item 1).

A caller granted read on one table pages through namespaces and tables with ``pageSize=1``: no
hidden name ever appears in a response body, the next-page tokens included (decoded). A forged or
altered token is a 400 in the Iceberg error shape; an admin still gets every name exactly once.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import Server, assert_error, start_server

SECRET = "paging-test-token-secret-" + "p" * 32
CLIENTS = {"admin": "admin-secret", "reader": "reader-secret"}
BOOTSTRAP = """
grants:
  - {principal: client:admin, privileges: [admin], "on": catalog}
  - {principal: client:reader, privileges: [read], "on": {table: mid.visible}}
"""
# Hidden names sort before, between and after the visible ones.
NAMESPACES = ["aaa_hidden", "mid", "mmm_hidden", "zzz_hidden"]
TABLES = ["aaa_secret", "kkk_secret", "visible", "www_secret", "zzz_secret"]
HIDDEN = ["aaa_hidden", "mmm_hidden", "zzz_hidden", "aaa_secret", "kkk_secret", "www_secret", "zzz_secret", "hid_t"]
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}


def bearer(server: Server, client: str) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "client_id": client, "client_secret": CLIENTS[client]}
    resp = requests.post(f"{server.url}/v1/oauth/tokens", data=form, timeout=10)
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"Bearer {resp.json()['access_token']}"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir: Path = tmp_path_factory.mktemp("paging")
    (workdir / "grants.yaml").write_text(BOOTSTRAP)
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
    }
    server = start_server(workdir, "sqlite", env)
    admin = bearer(server, "admin")
    for ns in NAMESPACES:
        assert requests.post(f"{server.url}/v1/namespaces", json={"namespace": [ns]}, headers=admin).ok
    for ns, name in [("mid", t) for t in TABLES] + [(ns, "hid_t") for ns in NAMESPACES if ns != "mid"]:
        body = {"name": name, "schema": SCHEMA}
        resp = requests.post(f"{server.url}/v1/namespaces/{ns}/tables", json=body, headers=admin)
        assert resp.status_code == 200, resp.text
    yield server
    server.stop()


def pages(server: Server, headers: dict[str, str], path: str, size: int) -> list[requests.Response]:
    """Every page of a list, following next-page-token."""
    found, token = [], ""
    while True:
        resp = requests.get(server.url + path, params={"pageSize": size, "pageToken": token}, headers=headers)
        assert resp.status_code == 200, resp.text
        found.append(resp)
        token = resp.json()["next-page-token"]
        if not token:
            return found
        assert len(found) < 50, "paging does not end"


def decoded(token: str | None) -> str:
    """Whatever a token decodes to (base64, with or without a leading version character)."""
    out = []
    for raw in (token or "", (token or "")[1:]):
        try:
            out.append(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode("latin-1"))
        except ValueError:
            pass
    return " ".join(out)


def test_a_reader_paging_one_at_a_time_never_sees_a_hidden_name(secured):
    reader = bearer(secured, "reader")
    for path, listed in (("/v1/namespaces", "namespaces"), ("/v1/namespaces/mid/tables", "identifiers")):
        responses = pages(secured, reader, path, 1)
        seen = [item for r in responses for item in r.json()[listed]]
        assert seen == ([["mid"]] if listed == "namespaces" else [{"namespace": ["mid"], "name": "visible"}])
        for resp in responses:
            text = resp.text + decoded(resp.json()["next-page-token"])
            leaked = [name for name in HIDDEN if name in text]
            assert not leaked, (path, resp.text)
    views = pages(secured, reader, "/v1/namespaces/mid/views", 1)
    assert [r.json() for r in views] == [{"identifiers": [], "next-page-token": None}]


def test_an_admin_pages_through_every_name_exactly_once(secured):
    admin = bearer(secured, "admin")
    for size in (1, 2, 3):
        namespaces = [ns for r in pages(secured, admin, "/v1/namespaces", size) for ns in r.json()["namespaces"]]
        assert namespaces == [[ns] for ns in NAMESPACES]
        listed = pages(secured, admin, "/v1/namespaces/mid/tables", size)
        tables = [t["name"] for r in listed for t in r.json()["identifiers"]]
        assert tables == TABLES


def test_forged_altered_or_borrowed_tokens_are_400(secured):
    admin, reader = bearer(secured, "admin"), bearer(secured, "reader")
    first = requests.get(f"{secured.url}/v1/namespaces", params={"pageSize": 1}, headers=admin).json()
    token = first["next-page-token"]
    altered = token[:-2] + ("A" if token[-2] != "A" else "B") + token[-1]
    forged = [
        base64.urlsafe_b64encode(b"aaa_hidden").decode(),  # the old format: a name in base64
        "1" + base64.urlsafe_b64encode(b"\0" * 40).decode(),
        altered,
        "not a token",
    ]
    for bad in forged:
        resp = requests.get(f"{secured.url}/v1/namespaces", params={"pageSize": 1, "pageToken": bad}, headers=admin)
        assert_error(resp, 400, "BadRequestException", "pageToken")
        assert "aaa_hidden" not in resp.text
    # Issued to the admin for the namespace list: not the reader's, nor another list's.
    resp = requests.get(f"{secured.url}/v1/namespaces", params={"pageSize": 1, "pageToken": token}, headers=reader)
    assert_error(resp, 400, "BadRequestException", "pageToken")
    assert "mid" not in resp.text and "hidden" not in resp.text
    resp = requests.get(
        f"{secured.url}/v1/namespaces/mid/tables", params={"pageSize": 1, "pageToken": token}, headers=admin
    )
    assert_error(resp, 400, "BadRequestException", "pageToken")


def test_without_a_token_secret_the_workers_of_one_server_share_the_page_key(tmp_path):
    """No CATALOG_TOKEN_SECRET, two workers: ``serve`` draws one key for both, so a paged list whose
    requests land on either worker still pages through (each request is a new connection)."""
    server = start_server(tmp_path, "sqlite", {"CATALOG_WORKERS": "2", "CATALOG_LOG_LEVEL": "info"})
    try:
        deadline = time.monotonic() + 60
        while server.log.read_bytes().count(b"Application startup complete") < 2:  # both serve
            assert time.monotonic() < deadline, server.log.read_text()[-3000:]
            time.sleep(0.2)
        names = [f"ns{i:02d}" for i in range(12)]
        for ns in names:
            assert requests.post(f"{server.url}/v1/namespaces", json={"namespace": [ns]}, timeout=10).ok
        for _ in range(3):
            listed = [
                ns for r in pages(server, {"Connection": "close"}, "/v1/namespaces", 1) for ns in r.json()["namespaces"]
            ]
            assert listed == [[ns] for ns in names]
    finally:
        server.stop()
