"""spec/openapi.yaml stays true: it documents exactly the routes the app serves, and every operation it
shares with the upstream Iceberg REST contract keeps the contract's path, method, parameters and
status codes. No server needed: the routes come from the app object, the prefix mapping from the
raw-path router.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from openapi_spec_validator import validate

from catalog.api import config as config_api
from catalog.api import events as events_api
from catalog.api import routing
from catalog.console.routes import BASE as CONSOLE
from catalog.server import app as app_module
from catalog.settings import Settings
from tests.support import ROOT, skip_or_fail

SPEC = ROOT / "spec" / "openapi.yaml"
UPSTREAM = ROOT.parent / "shared" / "reference" / "rest-catalog-open-api.yaml"
METHODS = ("get", "put", "post", "delete", "head", "patch", "options")
# Served by the app, deliberately outside /v1/{prefix}: no prefix segment.
UNPREFIXED = {"/v1/config", "/v1/oauth/tokens"}
_PARAM = re.compile(r"\{[^}]*\}")
# Served /v1 operations from upstream proposals not yet in the contract (apache/iceberg#12584).
PROPOSED = {("POST", "/v1/{prefix}/events")}
# Status codes documented on purpose although the upstream contract lacks them for the operation.
DEVIATIONS = {
    # A multi-level namespace whose parent is missing: this server does not create parents implicitly.
    ("POST", "/v1/{prefix}/namespaces"): {"404"},
    # A view the caller holds no privilege on, like a table (the contract lists 403 for tableExists).
    ("HEAD", "/v1/{prefix}/namespaces/{namespace}/views/{view}"): {"403"},
    # Signing for a table that does not exist: NoSuchTableException, as every other table route.
    ("POST", "/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign"): {"404"},
    # Brute-force protection: a client or address with too many failed attempts is locked for a while.
    ("POST", "/v1/oauth/tokens"): {"429"},
}


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return _load(SPEC)


@pytest.fixture(scope="module")
def upstream() -> dict[str, Any]:
    if not UPSTREAM.exists():
        skip_or_fail(f"the upstream contract is missing: {UPSTREAM}")
    return _load(UPSTREAM)


def _operations(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(METHOD, path) -> operation, with the path item's parameters merged in."""
    out = {}
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                op = dict(item[method])
                op["parameters"] = [*item.get("parameters", []), *op.get("parameters", [])]
                out[(method.upper(), path)] = op
    return out


def _resolve(doc: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        target: Any = doc
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _parameters(doc: dict[str, Any], op: dict[str, Any]) -> set[tuple[str, str, bool]]:
    params = (_resolve(doc, p) for p in op["parameters"])
    # Header names are case-insensitive on the wire.
    return {(p["name"].lower() if p["in"] == "header" else p["name"], p["in"], bool(p.get("required"))) for p in params}


def _shape(path: str) -> str:
    """A path with its parameter names blanked: the app and the documents name them differently."""
    return _PARAM.sub("{}", path)


def _spec_path(route_path: str) -> str:
    """A litestar route path as the spec writes it: /v1 catalog routes gain the {prefix} segment."""
    path = re.sub(r"\{(\w+):\w+\}", r"{\1}", route_path)
    if path.startswith("/v1/") and path not in UNPREFIXED:
        path = "/v1/{prefix}/" + path[len("/v1/") :]
    return path


def _served() -> set[tuple[str, str]]:
    """Every (METHOD, path shape) the app routes; litestar's automatic OPTIONS is not an operation,
    and the console's pages (HTML for people under /ui, docs/console.md) are not API operations."""
    app = app_module.create_app(Settings())
    out = set()
    for route in app.routes:
        if route.path == CONSOLE or route.path.startswith(CONSOLE + "/"):
            continue
        for method in getattr(route, "methods", ()):
            if method != "OPTIONS":
                out.add((method, _shape(_spec_path(route.path))))
    return out


def _codes(op: dict[str, Any]) -> set[str]:
    return {str(code).upper() for code in op["responses"]}


def _allowed_by(code: str, upstream_codes: set[str]) -> bool:
    """``code`` is in the upstream set directly or through a range such as ``5XX``."""
    return code in upstream_codes or f"{code[0]}XX" in upstream_codes


# -- the document itself -----------------------------------------------------------------------


def test_spec_is_a_valid_openapi_document(spec):
    validate(spec)
    assert spec["openapi"].startswith("3.1")


def test_operation_ids_are_unique(spec):
    ids = [op["operationId"] for op in _operations(spec).values()]
    assert len(ids) == len(set(ids))


def test_every_error_response_has_the_iceberg_error_body(spec):
    """Catalog errors are ``{"error": {message, type, code}}``; HEAD answers have no body; the token
    endpoint speaks OAuth 2. (/health/ready's 503 is its readiness report.)"""
    for (method, path), op in _operations(spec).items():
        if not path.startswith("/v1/"):
            continue
        for code, response in op["responses"].items():
            if not str(code).startswith(("4", "5")):
                continue
            content = _resolve(spec, response).get("content")
            if method == "HEAD":
                assert content is None, (method, path, code)
                continue
            schema = content["application/json"]["schema"]
            expected = "OAuthError" if path == "/v1/oauth/tokens" else "IcebergErrorResponse"
            assert schema == {"$ref": f"#/components/schemas/{expected}"}, (method, path, code)
    error = spec["components"]["schemas"]["ErrorModel"]
    assert set(error["required"]) == {"message", "type", "code"}


# -- the document and the app ------------------------------------------------------------------


def test_every_served_route_is_documented_and_every_documented_operation_is_served(spec):
    documented = {(method, _shape(path)) for method, path in _operations(spec)}
    served = _served()
    assert served - documented == set(), "served but not in spec/openapi.yaml"
    assert documented - served == set(), "in spec/openapi.yaml but not served"


def test_advertised_endpoints_are_the_served_catalog_operations(spec):
    """/v1/config's ``endpoints`` = the documented /v1/{prefix} operations that are not 501s."""
    advertised = {
        tuple(e.split(" ", 1)) for e in config_api.advertised([*app_module.CATALOG_ROUTES, *events_api.ROUTES])
    }
    served = {
        (method, path)
        for (method, path), op in _operations(spec).items()
        if path.startswith("/v1/{prefix}/") and "501" not in op["responses"]
    }
    assert {(m, _shape(p)) for m, p in advertised} == {(m, _shape(p)) for m, p in served}


def test_routes_honouring_idempotency_keys_are_the_documented_ones(spec):
    """A served operation that documents the Idempotency-Key header is marked idempotent, and only those
    (the 501 operations document it as upstream does, and answer without an effect)."""
    app = app_module.create_app(Settings())
    marked = {
        (method, _shape(_spec_path(route.path)))
        for route in app.routes
        for method, (handler, *_) in getattr(route, "route_handler_map", {}).items()
        if handler.opt.get("idempotent")
    }
    documented = {
        (method, _shape(path))
        for (method, path), op in _operations(spec).items()
        if ("idempotency-key", "header", False) in _parameters(spec, op) and "501" not in op["responses"]
    }
    assert marked == documented and len(marked) == 17


def test_prefixless_form_reaches_the_same_route():
    """The router strips any single prefix segment after /v1/ (unless it is a resource word), so
    /v1/{prefix}/x and /v1/x are the same operation; the prefix must name a known warehouse."""
    seen: list[str] = []

    async def inner(scope, receive, send):
        seen.append(scope["path"])

    def route(path: str, prefix: str = "") -> list[Any]:
        sent: list[Any] = []

        async def send(message):
            sent.append(message)

        knows = (lambda p: p == prefix) if prefix else None
        router = routing.RawPathRouting(inner, knows)  # type: ignore[arg-type]
        scope = {"type": "http", "path": path, "raw_path": path.encode(), "method": "GET", "headers": []}
        asyncio.run(router(scope, None, send))
        return sent

    for path in ("/v1/namespaces/a%1Fb/tables/t", "/v1/tables/rename", "/v1/transactions/commit", "/v1/views/rename"):
        route(path)
        route(path.replace("/v1/", "/v1/wh/", 1))
        assert seen[-1] == seen[-2] == path
    route("/v1/config")
    assert seen[-1] == "/v1/config"
    route("/v1/namespaces", prefix="wh")
    route("/v1/wh/namespaces", prefix="wh")
    assert seen[-2:] == ["/v1/namespaces", "/v1/namespaces"]
    count = len(seen)
    sent = route("/v1/other/namespaces", prefix="wh")
    assert len(seen) == count and sent[0]["status"] == 404 and b"NoSuchWarehouseException" in sent[1]["body"]


def test_description_names_the_words_that_are_never_a_prefix(spec):
    description = spec["info"]["description"]
    for word in routing._UNPREFIXED_FIRST:
        assert f"`{word}`" in description, word


# -- the document and the upstream contract ----------------------------------------------------


def test_upstream_contract_operations_are_all_documented(spec, upstream):
    """Every upstream operation is here: served, or routed only to answer 501."""
    ours = {(m, p) for m, p in _operations(spec)}
    assert set(_operations(upstream)) - ours == set()


def test_shared_operations_match_the_upstream_contract(spec, upstream):
    theirs = _operations(upstream)
    problems = []
    for key, op in _operations(spec).items():
        if key not in theirs:
            assert not key[1].startswith("/v1/") or key in PROPOSED, f"{key} is not in the upstream contract"
            continue
        up = theirs[key]
        if op["operationId"] != up["operationId"]:
            problems.append(f"{key}: operationId {op['operationId']} != {up['operationId']}")
        ours_p, theirs_p = _parameters(spec, op), _parameters(upstream, up)
        if ours_p != theirs_p:
            only_ours, only_theirs = ours_p - theirs_p, theirs_p - ours_p
            problems.append(f"{key}: parameters differ: ours-only {only_ours}, upstream-only {only_theirs}")
        codes, up_codes = _codes(op), _codes(up)
        extra = {c for c in codes if not _allowed_by(c, up_codes)} - DEVIATIONS.get(key, set())
        if extra:
            problems.append(f"{key}: status codes not in the contract: {sorted(extra)}")
        success = sorted(c for c in codes if c.startswith("2"))
        if success and success != sorted(c for c in up_codes if c.startswith("2")):
            problems.append(f"{key}: success code {success} differs from the contract's")
        if not success and "501" not in codes:
            problems.append(f"{key}: neither a success code nor a 501")
    assert not problems, "\n".join(problems)


def test_request_body_media_types_match_the_upstream_contract(spec, upstream):
    theirs = _operations(upstream)
    for key, op in _operations(spec).items():
        if key in theirs and "requestBody" in op and "requestBody" in theirs[key]:
            ours_types = set(_resolve(spec, op["requestBody"])["content"])
            assert ours_types == set(_resolve(upstream, theirs[key]["requestBody"])["content"]), key
