"""The web console in a real browser: Debian's headless Chromium (``/usr/bin/chromium``), driven by
Playwright for Python (never ``playwright install``: the system browser is the one tested). Missing
browser or Playwright: skipped here, a failure under ``CI=true`` (``.ci/install-services.sh``
installs chromium).

With ``CONSOLE_SCREENSHOTS=1`` the tests write the pages they checked to docs/console/*.png (the
pictures of docs/console.md); otherwise nothing is written, so CI leaves the docs alone.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import requests

from tests.support import (
    CARE_ON_REQUEST,
    CLIENTS,
    ROOT,
    Server,
    as_,
    auth_env,
    skip_or_fail,
    start_server,
    warehouse_roots,
)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "docs" / "console"
ONE_TABLE = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: client:analyst, privileges: [read], on: {table: shop.orders}}
"""
# the chart's geometry (catalog/console/charts.py), to check where each point is drawn
HEIGHT, PAD = 110, 8


def shot(page: Any, name: str) -> None:
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        skip_or_fail(f"{CHROMIUM} is missing (apt-get install chromium; .ci/install-services.sh does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        skip_or_fail("playwright is not installed: pip install -e '.[test]'")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    yield context.new_page()
    context.close()


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Auth off, two warehouses; ``web.events`` with three appends."""
    tmp = tmp_path_factory.mktemp("console-browser")
    team = tmp_path_factory.mktemp("console-team")  # off the server's directory: a warehouse may not overlap it
    srv = start_server(tmp, "sqlite", {**CARE_ON_REQUEST, **warehouse_roots(team)})
    try:
        made = requests.post(
            srv.url + "/management/v1/warehouses", json={"name": "team", "location": str(team / "wh")}, timeout=60
        )
        assert made.status_code == 201, made.text
        cat = srv.catalog()
        cat.create_namespace("web")
        table = cat.create_table("web.events", schema=pa.schema([("id", pa.int64()), ("kind", pa.string())]))
        for i in range(3):
            rows = pa.table({"id": pa.array(range(i * 10, i * 10 + 5 + i), pa.int64()), "kind": ["x"] * (5 + i)})
            table.append(rows)
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("console-browser-auth")
    srv = start_server(tmp, "sqlite", {**auth_env(tmp, ONE_TABLE), **CARE_ON_REQUEST})
    try:
        admin = as_(srv, "admin")
        for ns in ("shop", "hr"):
            admin.create_namespace(ns)
        for ident in ("shop.orders", "shop.refunds", "hr.salaries"):
            admin.create_table(ident, schema=pa.schema([("id", pa.int64())]))
        admin.drop_table("shop.refunds")
        yield srv
    finally:
        srv.stop()


def snapshots(server: Server, ns: str, name: str) -> list[dict]:
    doc = requests.get(f"{server.url}/v1/namespaces/{ns}/tables/{name}", timeout=10).json()["metadata"]
    return sorted(doc["snapshots"], key=lambda s: (s["timestamp-ms"], s.get("sequence-number", 0)))


def tasks(server: Server) -> list[dict]:
    return requests.get(f"{server.url}/management/v1/maintenance/tasks", timeout=10).json()["tasks"]


def sign_in(page: Any, server: Server, client: str) -> None:
    page.goto(server.url + "/ui")
    assert page.url.endswith("/ui/login")
    page.fill("#client_id", client)
    page.fill("#client_secret", CLIENTS[client])
    page.click("button:text('Sign in')")
    page.wait_for_url(re.compile(r"/ui$"))


# -- browsing: warehouse -> namespace -> table, its snapshots and health chart ----------------------------


def test_browse_to_a_table_and_see_its_snapshots_and_health_chart(page: Any, lake: Server) -> None:
    page.goto(lake.url + "/ui")
    assert page.inner_text("h1") == "Warehouses"
    assert page.locator("a", has_text="team").count() == 1
    shot(page, "warehouses")
    page.click("table a:text-is('default')")
    assert page.inner_text("h1") == "Namespaces"
    page.click("table a:text-is('web')")
    assert page.inner_text("h1") == "Namespace web"
    shot(page, "namespace")
    page.click("table.tables a:text-is('events')")
    assert page.inner_text("h1") == "Table web.events"

    snaps = snapshots(lake, "web", "events")
    assert len(snaps) == 3
    rows = page.locator("table.snapshots tbody tr")
    assert rows.count() == 3
    newest = rows.nth(0).inner_text()
    assert str(snaps[-1]["snapshot-id"]) in newest and "append" in newest
    assert snaps[-1]["summary"]["added-records"] in newest

    for series in ("total-data-files", "total-files-size", "total-delete-files"):
        line = page.locator(f'polyline[data-series="{series}"]')
        values = [int(v) for v in line.get_attribute("data-values").split(",")]
        assert values == [int(s["summary"][series]) for s in snaps], series
        ids = [int(v) for v in line.get_attribute("data-snapshots").split(",")]
        assert ids == [s["snapshot-id"] for s in snaps]
        top = max(values) or 1
        ys = [float(p.split(",")[1]) for p in line.get_attribute("points").split()]
        assert ys == pytest.approx([HEIGHT - PAD - (HEIGHT - 2 * PAD) * v / top for v in values], abs=0.06)
    average = page.locator('polyline[data-series="avg-file-size"]').get_attribute("data-values")
    sizes = [int(s["summary"]["total-files-size"]) // int(s["summary"]["total-data-files"]) for s in snaps]
    assert [int(v) for v in average.split(",")] == sizes
    data_files = page.locator("#health figcaption").first.inner_text()
    assert f"{snaps[-1]['summary']['total-data-files']} files" in data_files
    shot(page, "table")


def test_run_a_dry_run_then_a_real_run_of_table_maintenance(page: Any, lake: Server) -> None:
    before = len(tasks(lake))
    page.goto(lake.url + "/ui/t/web/events")
    page.click("form.dry-run button")
    page.wait_for_url(re.compile(r"/ui/t/web/events#maintenance$"))
    dry = wait_rows(page, lake, "dry run", 4)
    assert any("would" in r for r in dry), dry  # a dry run says what a run would do
    page.click("form.run-now button")
    page.wait_for_url(re.compile(r"/ui/t/web/events#maintenance$"))
    done = wait_rows(page, lake, "run", 4)
    assert all(r.split("\t")[-1].strip() for r in done)
    merged = [r for r in done if "rewrite-manifests" in r]
    assert merged and "merged" in merged[0], done  # three appends' manifests, merged by the real run
    assert len(tasks(lake)) == before + 8
    shot(page, "care")


def wait_rows(page: Any, server: Server, mode: str, n: int, timeout: float = 90) -> list[str]:
    """The maintenance table's finished rows of ``mode``, once there are ``n`` (reloading the page)."""
    deadline = time.monotonic() + timeout
    while True:
        page.reload()  # (a goto to the same URL with a #fragment would not load it again)
        rows = page.locator("table.tasks tbody tr").all_inner_texts()
        done = [r for r in rows if f"\t{mode}\tdone\t" in r]
        if len(done) >= n:
            return done
        assert time.monotonic() < deadline, rows
        time.sleep(0.5)


def test_drop_with_the_api_and_undrop_in_the_console(page: Any, lake: Server) -> None:
    lake.catalog().create_table("web.gone", schema=pa.schema([("id", pa.int64())]))
    assert requests.delete(f"{lake.url}/v1/namespaces/web/tables/gone", timeout=10).status_code == 204
    assert requests.get(f"{lake.url}/v1/namespaces/web/tables/gone", timeout=10).status_code == 404
    page.goto(lake.url + "/ui/dropped")
    row = page.locator("table.dropped tbody tr", has_text="gone")
    assert row.count() == 1
    shot(page, "dropped")
    row.locator("form.undrop button").click()
    page.wait_for_url(re.compile(r"/ui/t/web/gone$"))
    assert page.inner_text("h1") == "Table web.gone"
    assert requests.get(f"{lake.url}/v1/namespaces/web/tables/gone", timeout=10).status_code == 200


def test_the_event_feed_filtered_by_table(page: Any, lake: Server) -> None:
    page.goto(lake.url + "/ui/events")
    page.fill("#object", "web.events")
    page.click("form.search button")
    rows = page.locator("table.events tbody tr").all_inner_texts()
    assert rows and all("web.events" in r for r in rows)
    assert any("create-table" in r or "createTable" in r or "table" in r for r in rows)
    shot(page, "events")


def test_a_forged_post_from_the_browser_is_refused_and_changes_nothing(page: Any, lake: Server) -> None:
    page.goto(lake.url + "/ui/t/web/events")  # the browser holds the console's cookies
    before = tasks(lake)
    forged = page.request.post(lake.url + "/ui/t/web/events/maintenance", form={"mode": "run"}, max_redirects=0)
    assert forged.status == 403
    wrong = page.request.post(lake.url + "/ui/t/web/events/maintenance", form={"mode": "run", "csrf": "f" * 64})
    assert wrong.status == 403
    assert tasks(lake) == before


# -- with authentication: sign-in, and what one table's read grant shows -----------------------------------


def test_sign_in_and_one_table_grant_sees_that_table_only_without_buttons(browser: Any, secured: Server) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(secured.url + "/ui")
        shot(page, "sign-in")
        sign_in(page, secured, "analyst")
        assert "Signed in as analyst" in page.inner_text("header")
        assert [t.strip() for t in page.locator("table.list tbody a").all_inner_texts()] == ["shop"]
        page.click("table a:text-is('shop')")
        assert page.locator("table.tables tbody a").all_inner_texts() == ["orders"]
        page.fill("#q", "s")  # matches orders, refunds (dropped) and salaries: only orders is shown
        page.click("form.search button")
        assert page.locator("table.results tbody a").all_inner_texts() == ["orders"]
        page.goto(secured.url + "/ui/events")
        feed = " ".join(page.locator("table.events tbody tr").all_inner_texts())
        assert "shop.orders" in feed and "refunds" not in feed and "salaries" not in feed and "hr" not in feed
        page.goto(secured.url + "/ui/t/shop/orders")
        assert page.inner_text("h1") == "Table shop.orders"
        assert page.locator("main form[method=post]").count() == 0  # nothing that acts
        page.goto(secured.url + "/ui/dropped")
        assert page.locator("table.dropped tbody tr").count() == 0
        assert page.locator("main form[method=post]").count() == 0
    finally:
        context.close()
    admin = browser.new_context()
    page = admin.new_page()
    try:
        sign_in(page, secured, "admin")
        page.goto(secured.url + "/ui/t/shop/orders")
        assert page.locator("form.run-now button").count() == 1
        page.goto(secured.url + "/ui/dropped")
        assert page.locator("table.dropped tbody tr", has_text="refunds").locator("form.undrop").count() == 1
    finally:
        admin.close()


# -- sign-in with the OIDC provider: authorization code + PKCE -------------------------------------------

PEOPLE = """
grants:
  - {principal: client:admin, privileges: [admin], on: catalog}
  - {principal: user:alice, privileges: [read], on: {table: shop.orders}}
"""


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Any]]:
    from tests.idp import LocalIdP

    tmp = tmp_path_factory.mktemp("console-oidc")
    with LocalIdP(audience="catalog", clients={"console": ("", [])}) as idp:
        env = {
            **auth_env(tmp, PEOPLE),
            "CATALOG_OIDC_ISSUER": idp.issuer,
            "CATALOG_OIDC_AUDIENCE": "catalog",
            "CATALOG_CONSOLE_OIDC_CLIENT_ID": "console",
        }
        srv = start_server(tmp, "sqlite", env)
        try:
            admin = as_(srv, "admin")
            admin.create_namespace("shop")
            for name in ("orders", "refunds"):
                admin.create_table(f"shop.{name}", schema=pa.schema([("id", pa.int64())]))
            yield srv, idp
        finally:
            srv.stop()


def test_sign_in_with_the_identity_provider_by_code_and_pkce(browser: Any, provider: tuple[Server, Any]) -> None:
    srv, idp = provider
    idp.person = ("alice", [])
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(srv.url + "/ui")
        page.click("a:text('Sign in with your identity provider')")
        page.wait_for_url(re.compile(r"/ui$"))
        assert "Signed in as alice" in page.inner_text("header")
        page.click("table a:text-is('shop')")
        assert page.locator("table.tables tbody a").all_inner_texts() == ["orders"]
        asked = [p for p in idp.requests if p.startswith("/authorize?")]
        assert asked and "code_challenge_method=S256" in asked[-1] and "code_challenge=" in asked[-1]
    finally:
        context.close()


def test_a_callback_that_answers_no_sign_in_of_this_browser_is_refused(provider: tuple[Server, Any]) -> None:
    srv, idp = provider
    idp.person = ("alice", [])
    s = requests.Session()
    to_idp = s.get(srv.url + "/ui/login/oidc", allow_redirects=False, timeout=10)
    assert to_idp.status_code == 303 and to_idp.headers["location"].startswith(idp.authorize_url)
    back = requests.get(to_idp.headers["location"], allow_redirects=False, timeout=10).headers["location"]
    code, state = re.search(r"code=(\w+)&state=([\w-]+)", back).groups()
    callback = f"{srv.url}/ui/login/callback"
    # another browser (no pending sign-in), or this one with another state: no session, and no code spent
    assert requests.get(callback, params={"code": code, "state": state}, timeout=10).status_code == 403
    wrong = s.get(callback, params={"code": code, "state": "x" + state}, allow_redirects=False, timeout=10)
    assert wrong.status_code == 403 and "iceberg_console=" not in wrong.headers.get("set-cookie", "")
    ok = s.get(callback, params={"code": code, "state": state}, allow_redirects=False, timeout=10)
    assert ok.status_code == 303 and "iceberg_console=" in ok.headers["set-cookie"]
    assert "Signed in as" in s.get(srv.url + "/ui", timeout=10).text
    # the code is good once: replayed (even with the flow cookie of another start), refused by the provider
    again = requests.Session()
    again.get(srv.url + "/ui/login/oidc", allow_redirects=False, timeout=10)
    assert again.get(callback, params={"code": code, "state": state}, timeout=10).status_code == 403
