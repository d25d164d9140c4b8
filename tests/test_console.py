"""The web console over plain HTTP (the browser tests are tests/test_console_browser.py): its headers,
CSRF, sign-in, what a principal with one grant sees, hostile names and ids (never a 500), the
setting that turns it off, and what a 10,000-snapshot table's page renders (one page, a sampled chart).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests

from tests.support import CARE_ON_REQUEST, CLIENTS, JSON_SCHEMA, Server, as_, auth_env, start_server, wait_task

ONE_TABLE = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: client:analyst, privileges: [read], on: {table: shop.orders}}
"""
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("console-open"), "sqlite", CARE_ON_REQUEST)
    cat = srv.catalog()
    cat.create_namespace("web")
    table = cat.create_table("web.clicks", schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("console-auth")
    srv = start_server(tmp, "sqlite", {**auth_env(tmp, ONE_TABLE), **CARE_ON_REQUEST})
    admin = as_(srv, "admin")
    for ns in ("shop", "hr"):
        admin.create_namespace(ns)
    for ident in ("shop.orders", "shop.refunds", "hr.salaries"):
        admin.create_table(ident, schema=pa.schema([("id", pa.int64())]))
    yield srv
    srv.stop()


def signed_in(server: Server, client: str, secret: str | None = None) -> requests.Session:
    s = requests.Session()
    form = s.get(server.url + "/ui/login", timeout=10)
    assert form.status_code == 200, form.text
    csrf = CSRF_FIELD.search(form.text).group(1)
    data = {"csrf": csrf, "client_id": client, "client_secret": secret or CLIENTS[client]}
    resp = s.post(server.url + "/ui/login", data=data, allow_redirects=False, timeout=10)
    assert resp.status_code == 303, resp.text
    return s


def csrf_of(page: requests.Response) -> str:
    return CSRF_FIELD.search(page.text).group(1)


# -- headers, CSRF, the setting ------------------------------------------------------------------------


def test_every_page_has_a_strict_policy_and_no_script(open_server: Server) -> None:
    for path in ("/ui", "/ui/ns/web", "/ui/t/web/clicks", "/ui/dropped", "/ui/events", "/ui/search?q=c"):
        resp = requests.get(open_server.url + path, timeout=10)
        assert resp.status_code == 200, (path, resp.text)
        csp = resp.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp
        assert resp.headers["x-content-type-options"] == "nosniff"
        assert "<script" not in resp.text.lower() and " style=" not in resp.text.lower()
    css = requests.get(open_server.url + "/ui/static/console.css", timeout=10)
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_a_forged_post_is_refused_and_changes_nothing(open_server: Server) -> None:
    before = requests.get(f"{open_server.url}/management/v1/maintenance/tasks", timeout=10).json()["tasks"]
    s = requests.Session()
    page = s.get(open_server.url + "/ui/t/web/clicks", timeout=10)
    for data in ({"mode": "run"}, {"mode": "run", "csrf": "0" * 64}, {"mode": "run", "csrf": ""}):
        forged = requests.post(
            open_server.url + "/ui/t/web/clicks/maintenance", data=data, allow_redirects=False, timeout=10
        )
        assert forged.status_code == 403, forged.text
        # with the browser's cookie but not its token (a cross-site form cannot read it)
        with_cookie = s.post(
            open_server.url + "/ui/t/web/clicks/maintenance", data=data, allow_redirects=False, timeout=10
        )
        assert with_cookie.status_code == 403
    # another browser's token does not fit this one's cookie
    other = requests.Session()
    other_token = csrf_of(other.get(open_server.url + "/ui/t/web/clicks", timeout=10))
    crossed = s.post(
        open_server.url + "/ui/t/web/clicks/maintenance",
        data={"mode": "run", "csrf": other_token},
        allow_redirects=False,
    )
    assert crossed.status_code == 403
    # the right token, posted from another site (a browser says so in Origin)
    elsewhere = s.post(
        open_server.url + "/ui/t/web/clicks/maintenance",
        data={"mode": "run", "csrf": csrf_of(page)},
        headers={"Origin": "https://evil.example"},
        allow_redirects=False,
    )
    assert elsewhere.status_code == 403
    after = requests.get(f"{open_server.url}/management/v1/maintenance/tasks", timeout=10).json()["tasks"]
    assert after == before
    ok = s.post(
        open_server.url + "/ui/t/web/clicks/maintenance",
        data={"mode": "dry-run", "csrf": csrf_of(page)},
        allow_redirects=False,
    )
    assert ok.status_code == 303 and ok.headers["location"].startswith("/ui/t/web/clicks")


def test_a_snapshot_says_who_committed_it_the_catalogs_own_included(open_server: Server) -> None:
    cat = open_server.catalog()
    table = cat.create_table(
        "web.merged", schema=pa.schema([("id", pa.int64())]), properties={"commit.manifest.min-count-to-merge": "2"}
    )
    for i in range(3):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    queued = requests.post(
        f"{open_server.url}/management/v1/maintenance/tables/web/merged",
        json={"kinds": ["rewrite-manifests"]},
        timeout=30,
    )
    assert queued.status_code == 202, queued.text
    task = wait_task(open_server.url, queued.json()["tasks"][0]["id"])
    assert task["state"] == "done" and task["result"]["manifests-replaced"] == 3, task
    page = requests.get(open_server.url + "/ui/t/web/merged", timeout=10)
    assert page.status_code == 200
    assert "catalog.maintenance-job: rewrite-manifests" in page.text
    assert page.text.count("catalog.maintenance-job") == 1  # the writers' appends are not the catalog's


def test_the_console_can_be_turned_off(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "sqlite", {"CATALOG_CONSOLE_ENABLED": "false"})
    try:
        assert requests.get(srv.url + "/ui", timeout=10).status_code == 404
        assert requests.get(srv.url + "/v1/config", timeout=10).status_code == 200
    finally:
        srv.stop()


def test_a_view_shows_its_sql_escaped(open_server: Server) -> None:
    sql = "SELECT id FROM web.clicks WHERE note = '<b>&amp;</b>'"
    version = {
        "version-id": 0,
        "schema-id": 0,
        "timestamp-ms": 1_700_000_000_001,
        "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        "default-namespace": ["web"],
    }
    body = {"name": "recent", "schema": JSON_SCHEMA, "view-version": version, "properties": {}}
    made = requests.post(f"{open_server.url}/v1/namespaces/web/views", json=body, timeout=10)
    assert made.status_code == 200, made.text
    assert ">recent<" in requests.get(open_server.url + "/ui/ns/web", timeout=10).text
    page = requests.get(open_server.url + "/ui/v/web/recent", timeout=10)
    assert page.status_code == 200
    assert "WHERE note = &#x27;&lt;b&gt;&amp;amp;&lt;/b&gt;&#x27;" in page.text and "<b>&amp;</b>" not in page.text


# -- hostile names and ids: a 404 page, never a 500 ------------------------------------------------------

HOSTILE = [
    "%00",
    "%FF%FE",
    "..%2F..%2Fetc%2Fpasswd",
    "a%1F%1Fb",
    "%1F",
    "x" * 5000,
    "%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    "%F0%9F%98%80",
    "%E2%80%AE",
    "web%1Fclicks",
    "-1",
    "99999999999999999999999",
    "1e9",
    "%2e%2e",
    "'%20OR%201=1--",
]


def test_hostile_names_and_ids_get_a_page_not_a_500(open_server: Server) -> None:
    base = open_server.url
    s = requests.Session()
    csrf = csrf_of(s.get(base + "/ui/t/web/clicks", timeout=10))
    seen: dict[int, int] = {}
    for bad in HOSTILE:
        gets = [
            f"/ui/ns/{bad}",
            f"/ui/t/{bad}/clicks",
            f"/ui/t/web/{bad}",
            f"/ui/t/{bad}/{bad}",
            f"/ui/v/web/{bad}",
            f"/ui?warehouse={bad}",
            f"/ui/ns/web?warehouse={bad}",
            f"/ui/search?q={bad}",
            f"/ui/events?object={bad}",
            f"/ui/t/web/clicks?page={bad}",
            f"/ui/dropped?warehouse={bad}",
        ]
        for path in gets:
            resp = s.get(base + path, timeout=30)
            seen[resp.status_code] = seen.get(resp.status_code, 0) + 1
            assert resp.status_code < 500, (path, resp.status_code, resp.text[:300])
            assert "<script>alert" not in resp.text
        for path in (f"/ui/dropped/{bad}/undrop", f"/ui/t/{bad}/x/maintenance", f"/ui/t/web/{bad}/maintenance"):
            resp = s.post(base + path, data={"csrf": csrf, "mode": "dry-run"}, allow_redirects=False, timeout=30)
            assert resp.status_code < 500, (path, resp.status_code, resp.text[:300])
            assert resp.status_code in (403, 404), (path, resp.status_code)
    assert seen.get(404, 0) > 0
    for path in ("/ui/t/web/nope", "/ui/ns/nope", "/ui/v/web/clicks", "/ui/dropped/123456/undrop"):
        resp = s.request("POST" if path.endswith("undrop") else "GET", base + path, data={"csrf": csrf}, timeout=10)
        assert resp.status_code == 404 and "Not found" in resp.text, (path, resp.status_code)


# -- sign-in and grants --------------------------------------------------------------------------------


def test_sign_in_with_a_built_in_client_and_a_sealed_httponly_cookie(secured: Server) -> None:
    anonymous = requests.get(secured.url + "/ui/ns/shop", allow_redirects=False, timeout=10)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/ui/login"
    s = requests.Session()
    csrf = csrf_of(s.get(secured.url + "/ui/login", timeout=10))
    wrong = s.post(secured.url + "/ui/login", data={"csrf": csrf, "client_id": "admin", "client_secret": "no"})
    assert wrong.status_code == 401 and "Not signed in" in wrong.text and "admin-secret" not in wrong.text
    forged = requests.post(secured.url + "/ui/login", data={"client_id": "admin", "client_secret": CLIENTS["admin"]})
    assert forged.status_code == 403
    ok = s.post(
        secured.url + "/ui/login",
        data={"csrf": csrf, "client_id": "admin", "client_secret": CLIENTS["admin"]},
        allow_redirects=False,
    )
    assert ok.status_code == 303
    cookie = ok.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "admin-secret" not in cookie and "eyJ" not in cookie  # sealed: not even the token's JWT shows
    home = s.get(secured.url + "/ui/ns/shop", timeout=10)
    assert home.status_code == 200 and "Signed in as" in home.text and "admin" in home.text
    assert "admin-secret" not in home.text
    # a tampered cookie is no session
    jar = requests.Session()
    jar.cookies.set("iceberg_console", cookie.split("=", 1)[1].split(";")[0][:-4] + "AAAA", path="/ui")
    assert jar.get(secured.url + "/ui", allow_redirects=False, timeout=10).status_code == 303
    out = s.post(secured.url + "/ui/logout", data={"csrf": csrf_of(home)}, allow_redirects=False, timeout=10)
    assert out.status_code == 303


def test_one_table_grant_sees_that_table_only_and_no_buttons(secured: Server) -> None:
    s = signed_in(secured, "analyst")
    home = s.get(secured.url + "/ui", timeout=10).text
    assert ">shop<" in home and ">hr<" not in home
    shop = s.get(secured.url + "/ui/ns/shop", timeout=10).text
    assert ">orders<" in shop and "refunds" not in shop
    found = s.get(secured.url + "/ui/search?q=r", timeout=10).text
    assert ">orders<" in found and "refunds" not in found and "salaries" not in found
    events = s.get(secured.url + "/ui/events", timeout=10).text
    assert "orders" in events and "refunds" not in events and "salaries" not in events and ">hr<" not in events
    table = s.get(secured.url + "/ui/t/shop/orders", timeout=10)
    assert table.status_code == 200
    assert "Run now" not in table.text and "Dry run" not in table.text
    assert s.get(secured.url + "/ui/t/shop/refunds", timeout=10).status_code == 403
    assert s.get(secured.url + "/ui/ns/hr", timeout=10).status_code == 403
    refused = s.post(
        secured.url + "/ui/t/shop/orders/maintenance",
        data={"csrf": csrf_of(table), "mode": "run"},
        allow_redirects=False,
    )
    assert refused.status_code == 403
    admin = signed_in(secured, "admin")
    assert "Run now" in admin.get(secured.url + "/ui/t/shop/orders", timeout=10).text


def test_hostile_urls_signed_in_with_one_grant_get_a_page_not_a_500(secured: Server) -> None:
    s = signed_in(secured, "analyst")
    csrf = csrf_of(s.get(secured.url + "/ui/t/shop/orders", timeout=10))
    for bad in HOSTILE:
        for path in (f"/ui/ns/{bad}", f"/ui/t/shop/{bad}", f"/ui/t/{bad}/orders", f"/ui/events?object={bad}"):
            resp = s.get(secured.url + path, timeout=30)
            assert resp.status_code in (200, 403, 404), (path, resp.status_code, resp.text[:300])
        resp = s.post(secured.url + f"/ui/dropped/{bad}/undrop", data={"csrf": csrf}, allow_redirects=False)
        assert resp.status_code in (403, 404), (bad, resp.status_code)


# -- speed: a 10,000-snapshot table --------------------------------------------------------------------


def test_a_table_of_10000_snapshots_renders_one_page_and_a_sampled_chart() -> None:
    """What keeps the page fast on a long history: one page of snapshots, 50 log lines, at most
    ``MAX_POINTS`` chart points. (Tests assert no timings; the bench would time it.)"""
    from catalog.console import charts, views

    snaps = [
        {
            "snapshot-id": 1000 + i,
            "sequence-number": i + 1,
            "timestamp-ms": 1_700_000_000_000 + i * 1000,
            "summary": {
                "operation": "append",
                "added-data-files": "1",
                "added-records": "10",
                "total-data-files": str(i + 1),
                "total-files-size": str((i + 1) * 900),
                "total-delete-files": "0",
            },
        }
        for i in range(10_000)
    ]
    doc = {
        "format-version": 2,
        "table-uuid": "u",
        "location": "/x",
        "current-snapshot-id": 1000 + 9_999,
        "snapshots": snaps,
        "schemas": [{"schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}],
        "current-schema-id": 0,
        "metadata-log": [{"timestamp-ms": 1, "metadata-file": f"/m/{i}.json"} for i in range(1000)],
    }
    body = views.table_page(doc, 7, "/ui/t/n/t", "", "/x/m.json")
    assert body.count("<tr>") < 200  # a page of snapshots, 50 log lines: not the whole history
    assert "page 7 of 200" in body
    drawn = re.search(r'data-series="total-data-files" data-max="(\d+)" data-values="([\d,]+)"', body)
    values = [int(v) for v in drawn.group(2).split(",")]
    assert len(values) <= charts.MAX_POINTS and values[0] == 1 and values[-1] == 10_000
