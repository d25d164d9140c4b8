"""The console's routes under ``/ui``: each reads through the ``Catalog`` service and decides with the
REST API's own guard (``api.guard``: the same grants, the same audit record), then hands what the
caller may see to ``views``. Any error is a page, never a 500 for a bad name or id (a name or id
that cannot be is a 404, as one that names nothing).

With authentication on, the caller is the principal of the session cookie's bearer token, verified
on every request (``session``); without a session every page but sign-in sends to sign-in. Every
POST carries the CSRF token of the caller's nonce cookie, or is refused (403) before anything else.
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from urllib.parse import parse_qs

from litestar import Request, Response, Router, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath

from catalog import errors
from catalog.api import guard, oauth, selection, wire
from catalog.api.paging import SHARED_KEY_ENV
from catalog.auth import policy
from catalog.auth.policy import Privilege
from catalog.auth.principals import IdentityProviderUnavailable, InvalidToken
from catalog.console import html, listing, views
from catalog.console.listing import LIST_LIMIT
from catalog.console.oidc import FLOW_SECONDS, Flow
from catalog.console.session import CSRF_COOKIE, SESSION_COOKIE, Sessions
from catalog.settings import AuthSettings, ConsoleSettings
from catalog.usecases import MAINTENANCE_KINDS, TABLE, VIEW

log = logging.getLogger("catalog.console")

BASE = html.BASE
LOGIN = BASE + "/login"
OIDC_START, OIDC_CALLBACK = LOGIN + "/oidc", LOGIN + "/callback"
OPEN_PATHS = frozenset({LOGIN, OIDC_START, OIDC_CALLBACK, html.STYLESHEET})
FLOW_COOKIE = "iceberg_console_oidc"
CSP = "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # (no-referrer would make a browser send Origin: null)
    "x-frame-options": "DENY",
    "cache-control": "no-store",
}
TASKS_SHOWN = 20


class Visit:
    """One request's console context: the warehouse's state, the caller, the CSRF token of its
    nonce (and the nonce to set when the browser had none)."""

    def __init__(self, request: Request, sessions: Sessions, auth: bool) -> None:
        self.request = request
        self.warehouse = request.query_params.get("warehouse") or None
        if self.warehouse is not None and len(self.warehouse) > 200:
            raise errors.NoSuchWarehouse("Warehouse does not exist")
        self.state = request.app.state.ctx.registry().state(self.warehouse)  # 404 for one that is not
        selection.WAREHOUSE.set(self.warehouse)  # the guard decides with this warehouse's grants
        self.who = guard.principal(request)
        self.signed_in = self.who.name if auth else None
        nonce = request.cookies.get(CSRF_COOKIE)
        self.new_nonce = None if nonce and len(nonce) <= 64 else Sessions.nonce()
        self.csrf = sessions.csrf(self.new_nonce or nonce or "")

    def page(self, title: str, body: str, status: int = 200) -> Response:
        doc = html.page(title, body, self.signed_in, self.csrf if self.signed_in else None, self.warehouse)
        response = _html(doc, status)
        if self.new_nonce:
            _set_nonce(response, self.new_nonce, self.request)
        return response


def _html(doc: str, status: int = 200) -> Response:
    return Response(doc.encode(), status_code=status, media_type="text/html", headers=SECURITY_HEADERS)


def _redirect(to: str) -> Response:
    return Response(b"", status_code=303, headers={**SECURITY_HEADERS, "location": to})


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def _set_nonce(response: Response, nonce: str, request: Request) -> None:
    response.set_cookie(CSRF_COOKIE, nonce, path=BASE, httponly=True, samesite="strict", secure=_secure(request))


async def _form(request: Request) -> dict[str, str]:
    body = await request.body()
    return {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"), max_num_fields=50).items()}


def _checked(sessions: Sessions, request: Request, form: dict[str, str]) -> None:
    """403 for a POST that is not a form of ours: its CSRF token must fit the nonce cookie, and a
    browser that says where the form came from must say it came from here."""
    if not sessions.csrf_ok(request.cookies.get(CSRF_COOKIE), form.get("csrf")):
        raise errors.Forbidden("Forbidden: the form's CSRF token is missing or wrong (reload the page and retry)")
    origin, host = request.headers.get("origin"), request.headers.get("host")
    cross = request.headers.get("sec-fetch-site") == "cross-site"
    if cross or (origin is not None and host is not None and origin.partition("://")[2] != host):
        raise errors.Forbidden("Forbidden: a form posted from another site")


def router(
    settings: ConsoleSettings, auth_settings: AuthSettings, events_enabled: bool, shared_key: str | None = None
) -> Router:
    """The console's routes, for ``create_app`` (only with ``CATALOG_CONSOLE_ENABLED``): signed in as the
    API authenticates (``auth_settings``); ``events_enabled``: whether the events page has a feed."""
    sessions = Sessions(auth_settings.token_secret, shared_key or os.environ.get(SHARED_KEY_ENV))
    auth = auth_settings.auth_required
    ttl = auth_settings.token_ttl_seconds
    stylesheet = resources.files("catalog.console").joinpath("static/console.css").read_bytes()
    flow = None
    if settings.console_oidc_client_id and auth_settings.oidc_issuer:
        flow = Flow(
            auth_settings.oidc_issuer,
            settings.console_oidc_client_id,
            settings.console_oidc_client_secret,
            settings.console_oidc_scopes,
        )
    clients = bool(auth_settings.oauth_clients)

    async def sign_in(request: Request) -> Response | None:
        """``before_request``: the session's principal into the scope, or off to sign-in."""
        if not auth or request.scope.get("path") in OPEN_PATHS:
            return None
        token = sessions.open(request.cookies.get(SESSION_COOKIE), ttl)
        if token is not None:
            try:
                request.scope["principal"] = await request.app.state.ctx.authenticator.verify(token)
                return None
            except InvalidToken:
                pass
            except IdentityProviderUnavailable:
                return _html(html.page("Unavailable", views.problem("The identity provider is unavailable.")), 503)
        if request.method != "GET":
            return _html(html.page("Forbidden", views.problem("Sign in first.")), 403)
        return _redirect(LOGIN)

    def visit(request: Request) -> Visit:
        return Visit(request, sessions, auth)

    @get("/static/console.css", include_in_schema=False)
    async def css() -> Response:
        return Response(
            stylesheet, media_type="text/css", headers={**SECURITY_HEADERS, "cache-control": "max-age=3600"}
        )

    # -- sign-in -------------------------------------------------------------------------------------

    @get("/login")
    async def login_form(request: Request) -> Response:
        if not auth:
            return _redirect(BASE)
        v = visit(request)
        return v.page("Sign in", views.login(v.csrf, None, clients, flow is not None))

    @post("/login", status_code=303)
    async def login(request: Request) -> Response:
        if not auth:
            return _redirect(BASE)
        v = visit(request)
        form = await _form(request)
        _checked(sessions, request, form)
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        refused = await oauth.check_client(request, v.state, client_id, secret)
        if refused is not None:
            status, _, description, _ = refused
            said = f"Not signed in: {description}."
            return v.page("Sign in", views.login(v.csrf, said, clients, flow is not None), status)
        return _signed_in(request, v.state.authenticator.builtin.issue(client_id)["access_token"])

    def _signed_in(request: Request, bearer: str) -> Response:
        response = _redirect(BASE)
        response.set_cookie(
            SESSION_COOKIE, sessions.seal(bearer), path=BASE, httponly=True, samesite="strict",
            secure=_secure(request), max_age=ttl,
        )  # fmt: skip
        return response

    @get("/login/oidc")
    async def oidc_start(request: Request) -> Response:
        if not auth or flow is None:
            raise errors.NotFound("No OIDC sign-in on this catalog")
        redirect_uri = str(request.base_url).rstrip("/") + OIDC_CALLBACK
        to, pending = await wire.blocking(flow.start, redirect_uri)
        response = _redirect(to)
        # Lax, not Strict: the provider's redirect back is a cross-site navigation that must carry it
        response.set_cookie(
            FLOW_COOKIE, sessions.seal(pending), path=OIDC_CALLBACK, httponly=True, samesite="lax",
            secure=_secure(request), max_age=FLOW_SECONDS,
        )  # fmt: skip
        return response

    @get("/login/callback")
    async def oidc_callback(request: Request) -> Response:
        if not auth or flow is None:
            raise errors.NotFound("No OIDC sign-in on this catalog")
        q = request.query_params
        if q.get("error"):
            raise errors.Forbidden("Not signed in: the identity provider refused the sign-in")
        pending = sessions.open(request.cookies.get(FLOW_COOKIE), FLOW_SECONDS)
        bearer = await wire.blocking(flow.finish, pending, q.get("code"), q.get("state"))
        try:
            await request.app.state.ctx.authenticator.verify(bearer)
        except InvalidToken as e:
            raise errors.Forbidden(
                f"Not signed in: the provider's token is not one this catalog accepts ({e})"
            ) from None
        response = _signed_in(request, bearer)
        response.delete_cookie(FLOW_COOKIE, path=OIDC_CALLBACK)
        return response

    @post("/logout", status_code=303)
    async def logout(request: Request) -> Response:
        _checked(sessions, request, await _form(request))
        response = _redirect(LOGIN if auth else BASE)
        response.delete_cookie(SESSION_COOKIE, path=BASE)
        return response

    # -- browsing ------------------------------------------------------------------------------------

    @get("/")
    async def home(request: Request) -> Response:
        v = visit(request)
        if v.warehouse is None:
            seen = await listing.warehouses(request)
            if len(seen) > 1:
                return v.page("Warehouses", views.warehouses(seen))
        return await _namespace_page(v, ())

    @get("/ns/{namespace:str}")
    async def namespace(namespace: FromPath[str], request: Request) -> Response:
        v = visit(request)
        return await _namespace_page(v, wire.decode_namespace(namespace))

    @get("/search")
    async def search(request: Request) -> Response:
        v = visit(request)
        q = (request.query_params.get("q") or "").strip()[:200]
        found, capped = await listing.search(request, v.state.catalog, q) if q else ([], False)
        return v.page("Search", views.search(q, found, v.warehouse, capped))

    @get("/t/{namespace:str}/{table:str}")
    async def table_page(namespace: FromPath[str], table: FromPath[str], request: Request) -> Response:
        v = visit(request)
        ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
        target = policy.entry("table", ns, name)
        await guard.require(request, [(Privilege.READ, target)])
        loaded = await wire.blocking(v.state.catalog.load, TABLE, ns, name)
        tasks = await wire.blocking(v.state.catalog.maintenance_tasks, ns, name, [], TASKS_SHOWN)
        may_run = await guard.holds(request, Privilege.ALTER, target)
        here = html.entry_url("table", ns, name, v.warehouse)
        action = html.url(f"/t/{html.ns_segment(ns)}/{html.segment(name)}/maintenance", v.warehouse)
        maintenance = views.maintenance(tasks, may_run, action, v.csrf)
        page_raw = request.query_params.get("page") or "1"
        page = int(page_raw) if page_raw.isdigit() and len(page_raw) < 7 else 1
        body = _crumbs(v, ns, name) + views.table_page(loaded.data, page, here, maintenance, loaded.location)
        return v.page(f"Table {'.'.join(ns)}.{name}", body)

    @post("/t/{namespace:str}/{table:str}/maintenance", status_code=303)
    async def run_maintenance(namespace: FromPath[str], table: FromPath[str], request: Request) -> Response:
        form = await _form(request)
        _checked(sessions, request, form)
        v = visit(request)
        ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
        await guard.require(request, [(Privilege.ALTER, policy.entry("table", ns, name))])
        dry = form.get("mode") != "run"
        await wire.blocking(v.state.catalog.maintain, ns, name, list(MAINTENANCE_KINDS), dry)
        return _redirect(html.entry_url("table", ns, name, v.warehouse) + "#maintenance")

    @get("/v/{namespace:str}/{view:str}")
    async def view_page(namespace: FromPath[str], view: FromPath[str], request: Request) -> Response:
        v = visit(request)
        ns, name = wire.decode_namespace(namespace), wire.decode_name(view)
        await guard.require(request, [(Privilege.READ, policy.entry("view", ns, name))])
        loaded = await wire.blocking(v.state.catalog.load, VIEW, ns, name)
        return v.page(f"View {'.'.join(ns)}.{name}", _crumbs(v, ns, name) + views.view_page(loaded.data))

    # -- dropped, events -----------------------------------------------------------------------------

    @get("/dropped")
    async def dropped(request: Request) -> Response:
        v = visit(request)
        found = await wire.blocking(v.state.catalog.dropped, None, None, LIST_LIMIT)
        seen = await guard.visible(request, [policy.entry(d.kind, d.namespace, d.name) for d in found])
        shown = []
        for d, ok in zip(found, seen, strict=True):
            if ok:
                may = await guard.holds(request, Privilege.DROP, policy.entry(d.kind, d.namespace, d.name))
                may = may and await guard.holds(request, Privilege.CREATE, policy.namespace(d.namespace))
                shown.append((d, may))
        return v.page("Dropped tables and views", views.dropped(shown, v.csrf, v.warehouse))

    @post("/dropped/{dropped_id:str}/undrop", status_code=303)
    async def undrop(dropped_id: FromPath[str], request: Request) -> Response:
        _checked(sessions, request, await _form(request))
        v = visit(request)
        if not dropped_id.isdigit() or len(dropped_id) > 18:
            raise errors.NotFound("No such dropped entry")
        gone = await wire.blocking(v.state.catalog.dropped_entry, int(dropped_id))
        target = policy.entry(gone.kind, gone.namespace, gone.name)
        await guard.require_seen(request, target, errors.NotFound("No such dropped entry"))
        await guard.require(request, [(Privilege.DROP, target), (Privilege.CREATE, policy.namespace(gone.namespace))])
        entry = await wire.blocking(v.state.catalog.undrop, gone.id)
        return _redirect(html.entry_url(entry.kind, entry.namespace, entry.name, v.warehouse))

    @get("/events")
    async def events(request: Request) -> Response:
        v = visit(request)
        ident = (request.query_params.get("object") or "").strip()[:500]
        if not events_enabled:
            return v.page("Events", views.problem("Change events are off on this catalog (CATALOG_EVENTS_ENABLED)."))
        found = await listing.recent_events(request, v.state.catalog, tuple(p for p in ident.split(".") if p))
        return v.page("Events", views.events(found, ident, v.warehouse))

    # -- errors --------------------------------------------------------------------------------------

    def error_page(request: Request, exc: Exception) -> Response:
        if isinstance(exc, errors.IcebergError):
            status, message = exc.code, exc.message
        elif isinstance(exc, HTTPException):
            status, message = exc.status_code, str(exc.detail)
        else:
            log.exception("console page failed: %s %s", request.method, request.scope.get("path"))
            status, message = 500, "Something went wrong on the server; the log says what."
        if status == 401:
            return _redirect(LOGIN)
        if status in (400, 404, 422) or isinstance(exc, (errors.NoSuchNamespace, errors.NoSuchTable)):
            status, message = 404, "Not found: nothing here has that name or id (or you may not see it)."
        titles = {403: "Forbidden", 404: "Not found", 409: "Conflict", 503: "Unavailable"}
        return _html(html.page(titles.get(status, "Error"), views.problem(message)), status)

    return Router(
        path=BASE,
        route_handlers=[
            css,
            login_form,
            login,
            oidc_start,
            oidc_callback,
            logout,
            home,
            namespace,
            search,
            table_page,
            run_maintenance,
            view_page,
            dropped,
            undrop,
            events,
        ],  # fmt: skip
        before_request=sign_in,
        exception_handlers={Exception: error_page},
        include_in_schema=False,
    )


# -- pages of several parts ------------------------------------------------------------------------


async def _namespace_page(v: Visit, ns: tuple[str, ...]) -> Response:
    request, catalog = v.request, v.state.catalog
    properties = None
    if ns:
        await guard.require_visible(request, policy.namespace(ns))
        properties = await wire.blocking(catalog.load_namespace, ns)
    children = await wire.blocking(catalog.list_namespaces, ns, None, LIST_LIMIT)
    children = await listing.visible(request, children, policy.namespace)
    tables = views_ = []
    if ns:
        tables = await wire.blocking(catalog.list_entries, TABLE, ns, None, LIST_LIMIT)
        tables = await listing.visible(request, tables, lambda n: policy.entry("table", ns, n))
        views_ = await wire.blocking(catalog.list_entries, VIEW, ns, None, LIST_LIMIT)
        views_ = await listing.visible(request, views_, lambda n: policy.entry("view", ns, n))
    title = f"Namespace {'.'.join(ns)}" if ns else "Namespaces"
    body = _crumbs(v, ns, None) + views.namespace(ns, children, tables, views_, properties, v.warehouse)
    return v.page(title, body)


def _crumbs(v: Visit, ns: tuple[str, ...], name: str | None) -> str:
    parts: list[tuple[str, str | None]] = [("Catalog", BASE)]
    if v.warehouse is not None:
        parts.append((v.warehouse, html.url("", v.warehouse) if ns or name else None))
    for i in range(1, len(ns) + 1):
        last = i == len(ns) and name is None
        parts.append((ns[i - 1], None if last else html.ns_url(ns[:i], v.warehouse)))
    if name is not None:
        parts.append((name, None))
    return html.crumbs(parts)
