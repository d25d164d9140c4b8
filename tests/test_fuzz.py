"""Conformance fuzzing: generated requests, valid and invalid, against a real server.

Every response must be documented in spec/openapi.yaml (status code, media type, body schema), no
response is a 5xx, and every error of a catalog operation has the Iceberg error body. Stateful runs
follow the spec's links (create namespace -> create table or view -> load, commit, drop). The
property tests below need no server: the path codec and the commit requirement checks.

Deliberately not checked: that schema-valid requests are accepted (validity of table metadata is
semantic: a partition field must name an existing column) and that schema-invalid ones are refused
(the server is lenient where clients differ: ignored headers, case-insensitive query booleans,
non-string property values converted).
"""

from __future__ import annotations

import functools
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from catalog import errors
from catalog.api import wire
from catalog.metadata import tables
from tests.support import Server, start_server, warehouse_roots

SPEC = Path(__file__).resolve().parents[1] / "spec" / "openapi.yaml"
PREFIX = "fuzz"
SEED_NS, SEED_TABLE, SEED_VIEW = "seed", "t", "v"

CONFIG_DICT: dict[str, Any] = {
    # The prefix names a warehouse besides the default one (``_warehouse_env``); the steering
    # hook sends part of the cases there, the others get an unknown warehouse's 404.
    "parameters": {"prefix": PREFIX},
    "generation": {"mode": "all"},
}
schema = schemathesis.openapi.from_path(SPEC, config=schemathesis.Config.from_dict(CONFIG_DICT))


@schemathesis.check
def no_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    """No 5xx, except the 501 of an operation documented as not served."""
    status = response.status_code
    if status == 501 and "501" in case.operation.definition.raw.get("responses", {}):
        return True
    assert status < 500, f"server error {status}: {response.text[:500]}"
    return True


@schemathesis.check
def iceberg_error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """A catalog error is exactly ``{"error": {"message": str, "type": str, "code": <status>}}``."""
    status = response.status_code
    if status < 400 or case.method.upper() == "HEAD" or not case.path.startswith("/v1/"):
        return None
    if case.path == "/v1/oauth/tokens":  # OAuth 2 error shape, checked by the response schema
        return None
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"not the Iceberg error body: {body!r}"
    err = body["error"]
    assert isinstance(err.get("message"), str) and isinstance(err.get("type"), str), err
    assert err.get("code") == status, f"error code {err.get('code')} != HTTP status {status}"
    return True


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    iceberg_error_shape,
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Its own SQLite server: fuzzed garbage stays out of the shared one. Seeded with a namespace, a
    table and a view that generated requests are steered to part of the time."""
    workdir = tmp_path_factory.mktemp("fuzz")
    srv = start_server(workdir, extra_env=_warehouse_env(workdir))
    try:
        _seed(srv.url)
        _seed(srv.url, prefix=f"{PREFIX}/")
        yield srv
    finally:
        srv.stop()


def _warehouse_env(workdir: Path) -> dict[str, str]:
    """The warehouse ``PREFIX`` names, declared in a bootstrap file, on local disk beside the server's
    directory (a created warehouse may not lie in the directory of the server's database)."""
    lake = workdir.parent / f"{workdir.name}-{PREFIX}"
    (workdir / "warehouses.yaml").write_text(f"warehouses: [{{name: {PREFIX}, location: {lake}}}]\n")
    return {"CATALOG_WAREHOUSES_FILE": str(workdir / "warehouses.yaml"), **warehouse_roots(lake)}


def _seed(url: str, headers: dict[str, str] | None = None, prefix: str = "") -> None:
    """The seed objects in the default warehouse, or (``prefix``: ``"fuzz/"``) in the fuzzed one."""
    schema_json = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    ok = requests.post(f"{url}/v1/{prefix}namespaces", json={"namespace": [SEED_NS]}, timeout=30, headers=headers)
    assert ok.status_code == 200, ok.text
    ok = requests.post(
        f"{url}/v1/{prefix}namespaces/{SEED_NS}/tables",
        json={"name": SEED_TABLE, "schema": schema_json},
        timeout=30,
        headers=headers,
    )
    assert ok.status_code == 200, ok.text
    view = {
        "name": SEED_VIEW,
        "schema": {**schema_json, "schema-id": 0},
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
            "default-namespace": [SEED_NS],
        },
        "properties": {},
    }
    ok = requests.post(f"{url}/v1/{prefix}namespaces/{SEED_NS}/views", json=view, timeout=30, headers=headers)
    assert ok.status_code == 200, ok.text


# The prefix too: a random one is an unknown warehouse (404), the fuzzed warehouse is PREFIX.
_STEER = {"prefix": PREFIX, "namespace": SEED_NS, "table": SEED_TABLE, "view": SEED_VIEW}


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> st.SearchStrategy:
    """Part of the time, aim at the seeded objects: random names only ever reach the 404 branches."""
    if not path_parameters:
        return st.just(path_parameters)
    steered = {**path_parameters, **{k: v for k, v in _STEER.items() if k in path_parameters}}
    return st.sampled_from([path_parameters, steered])


@pytest.mark.slow  # minutes: the full suite's, not the fast tier's
@schema.parametrize()
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
def test_operations_conform(case: Any, fuzz_server: Server) -> None:
    case.call_and_validate(base_url=fuzz_server.url, checks=CHECKS)


# -- stateful: follow the links ------------------------------------------------------------------

# A schema of its own, without the steering hook: a scenario's outcome must not depend on what an
# earlier one did to the seeded objects (Hypothesis reports that as flaky data generation). Valid
# requests only: scenarios are about reaching the states invalid requests never create.
# The management operations (grants) have no links into the catalog: left to the per-operation runs.
stateful_schema = schemathesis.openapi.from_path(
    SPEC, config=schemathesis.Config.from_dict({"parameters": {"prefix": PREFIX}, "generation": {"mode": "positive"}})
).exclude(path_regex="^/management/")
_CREATES = {"createNamespace": "namespace", "createTable": "name", "createView": "name"}


def _fresh_names(case: Any) -> None:
    """Every created object gets a fresh name (and namespaces one level, whose parent exists), so a
    create succeeds or fails the same way on every replay and the links lead to the same places.
    Likewise every Idempotency-Key is fresh: a generated key reused by a later scenario would get
    the earlier scenario's response replayed."""
    for header in list(case.headers or {}):
        if header.lower() == "idempotency-key":
            case.headers[header] = str(uuid.uuid4())
    field = _CREATES.get(case.operation.definition.raw["operationId"])
    if field is None or not isinstance(case.body, dict):
        return
    suffix = "_" + uuid.uuid4().hex[:8]
    value = case.body.get(field)
    if isinstance(value, list) and value and isinstance(value[0], str):
        case.body[field] = [value[0] + suffix]
    elif isinstance(value, str):
        case.body[field] = value + suffix


@pytest.mark.slow
def test_stateful_links_conform(fuzz_server: Server) -> None:
    seen: Counter[tuple[str, int]] = Counter()

    class Machine(stateful_schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": fuzz_server.url}

        def before_call(self, case: Any) -> None:
            _fresh_names(case)
            if case.path_parameters and "prefix" in case.path_parameters:
                case.path_parameters["prefix"] = PREFIX  # the scenarios run in the fuzzed warehouse

        def after_call(self, response: Any, case: Any) -> None:
            seen[(case.operation.definition.raw["operationId"], response.status_code)] += 1

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS)

    Machine.run(
        settings=settings(
            max_examples=120,
            stateful_step_count=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
    )
    # The links were followed: namespaces, tables and views were created, then used.
    assert seen[("createNamespace", 200)] and seen[("createTable", 200)] and seen[("createView", 200)], seen
    used = {op for (op, code), _ in seen.items() if code < 400}
    assert used & {"loadTable", "updateTable", "dropTable", "tableExists", "loadCredentials", "reportMetrics"}, seen


# -- with authentication and grants: 0 5xx, 0 bypass ---------------------------------------------

# A valid principal with no grants may list (and sees nothing) and read its own identity; anything
# else it sends is refused or malformed, whatever the request looks like.
# index: name, version, links; the lists come back empty
# Empty for a nobody (queryEvents: the change feed, a list of events).
_LISTS = {"listNamespaces", "listGrants", "listMaintenanceTasks", "listDroppedEntries", "queryEvents"}
_MAY_SUCCEED = {"getConfig", "whoami", "index", *_LISTS}
_OPEN = {"live", "ready", "metrics", "docs", "openapi"}  # docs, openapi: the API document, open
_CLIENTS = "owner:owner-secret,nobody:nobody-secret"
_SECRET = "fuzz-signing-key-" + "f" * 32
_GRANTS = '{"grants": [{"principal": "user:owner", "privileges": ["admin"], "on": "catalog"}]}'


@pytest.fixture(scope="module")
def secured_fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("fuzz-auth")
    (workdir / "grants.yaml").write_text(_GRANTS)
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": _CLIENTS,
        "CATALOG_TOKEN_SECRET": _SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
    }
    srv = start_server(workdir, extra_env={**env, **_warehouse_env(workdir)})
    try:
        _seed(srv.url, _bearer(srv.url, "owner"))
        _seed(srv.url, _bearer(srv.url, "owner"), prefix=f"{PREFIX}/")
        yield srv
    finally:
        srv.stop()


@functools.cache
def _bearer(url: str, client: str) -> dict[str, str]:
    secret = dict(c.split(":") for c in _CLIENTS.split(","))[client]
    resp = requests.post(
        f"{url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": client, "client_secret": secret},
        timeout=10,
    )
    return {"Authorization": f"Bearer {resp.json()['access_token']}"}


def _state(url: str, headers: dict[str, str]) -> list[Any]:
    """Everything a request could change: namespaces, the seeded table's and view's metadata, grants."""
    get = lambda path: requests.get(url + path, headers=headers, timeout=30).json()  # noqa: E731
    return [
        get("/v1/namespaces"),
        get(f"/v1/namespaces/{SEED_NS}"),
        get(f"/v1/namespaces/{SEED_NS}/tables/{SEED_TABLE}")["metadata-location"],
        get(f"/v1/namespaces/{SEED_NS}/views/{SEED_VIEW}")["metadata-location"],
        get("/management/v1/grants"),
    ]


# Who may do what does not depend on a field's boundary values: those are the first run's (its
# coverage phase, every operation's edge cases). Here the explicit examples and the generated cases,
# valid and invalid. With the coverage phase this run took ~10 minutes of a parallel suite's worker
# time (the two commit operations 3.3), without it 45 s on an idle machine.
secured_schema = schemathesis.openapi.from_path(
    SPEC, config=schemathesis.Config.from_dict({**CONFIG_DICT, "phases": {"coverage": {"enabled": False}}})
)
secured_schema.hook(flatmap_path_parameters)


@pytest.mark.slow  # minutes: the full suite's, not the fast tier's
@secured_schema.parametrize()
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True, database=None)
def test_operations_with_auth_on_never_fail_and_never_let_through(case: Any, secured_fuzz_server: Server) -> None:
    """As a principal holding nothing, and with no token at all: every response documented, no
    5xx, no success outside ``_MAY_SUCCEED`` (lists come back empty), nothing changed."""
    url = secured_fuzz_server.url
    owner = _bearer(url, "owner")
    reads = case.method.upper() in ("GET", "HEAD", "OPTIONS")
    before = None if reads else _state(url, owner)
    operation = case.operation.definition.raw["operationId"]
    for headers in (_bearer(url, "nobody"), {}):
        response = case.call(base_url=url, headers={**(case.headers or {}), **headers})
        case.validate_response(response, checks=CHECKS)
        if (
            operation == "getToken" or operation in _OPEN
        ):  # answers anyone: a token for a right secret, an OAuth error otherwise
            continue
        if case.method.upper() == "OPTIONS":  # the framework's Allow answer: no content, no effect
            assert response.status_code >= 400 or not response.content, response.text
            continue
        if headers and operation in _MAY_SUCCEED:
            listed = ("namespaces", "grants", "tasks", "dropped", "events")
            if response.status_code == 200 and operation in _LISTS:
                assert not any(response.json().get(k) for k in listed), response.text
        else:
            assert response.status_code >= 400, (
                operation,
                case.method,
                case.path,
                response.status_code,
                response.text[:300],
            )
    assert reads or _state(url, owner) == before


# -- properties without a server -----------------------------------------------------------------

# Levels a client may send: any text but the empty string (an empty level is refused), the unit
# separator itself, which separates levels and so cannot occur inside one, and NUL, which no stored
# name can hold (catalog.names); at most 12 characters, so within the 255-byte limit.
LEVEL = st.text(min_size=1, max_size=12).filter(lambda s: s != "" and "\x1f" not in s and "\x00" not in s)


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(LEVEL, min_size=1, max_size=4))
def test_namespace_path_round_trip_java_style(levels: list[str]) -> None:
    """Java: each level form-encoded (space as ``+``), levels joined by %1F."""
    raw = "%1F".join(quote_plus(level, safe="") for level in levels)
    assert wire.decode_namespace(raw) == tuple(levels)


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(LEVEL, min_size=1, max_size=4))
def test_namespace_path_round_trip_percent_style(levels: list[str]) -> None:
    """pyiceberg: each level percent-encoded (space as %20, ``+`` as %2B), joined by %1F or 0x1F."""
    assert wire.decode_namespace("%1F".join(quote(level, safe="") for level in levels)) == tuple(levels)
    assert wire.decode_namespace("%1f".join(quote(level, safe="") for level in levels)) == tuple(levels)


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(LEVEL)
def test_name_round_trip(name: str) -> None:
    assert wire.decode_name(quote(name, safe="")) == name
    assert wire.decode_name(quote_plus(name, safe="")) == name


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(LEVEL, min_size=1, max_size=4))
def test_parent_query_round_trip(levels: list[str]) -> None:
    """``parent`` arrives already decoded by the query parser (Java: 0x1F between levels) or with
    the separator still encoded (pyiceberg)."""
    assert wire.decode_parent("\x1f".join(levels)) == tuple(levels)


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(LEVEL, min_size=1, max_size=3), st.integers(0, 3))
def test_empty_namespace_level_is_refused(levels: list[str], at: int) -> None:
    levels = [*levels]
    levels.insert(min(at, len(levels)), "")
    with pytest.raises(errors.BadRequest):
        wire.decode_namespace("%1F".join(quote(level, safe="") for level in levels))


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(LEVEL, min_size=1, max_size=3), st.integers(0, 3), st.sampled_from(["nul", "long"]))
def test_a_level_no_name_can_be_is_refused_everywhere(levels: list[str], at: int, bad: str) -> None:
    """A level or name with a NUL, or over 255 bytes of UTF-8, is a 400 in every decoder."""
    levels = [*levels]
    i = min(at, len(levels) - 1)
    levels[i] = levels[i] + "\x00" if bad == "nul" else levels[i] + "é" * 128
    with pytest.raises(errors.BadRequest):
        wire.decode_namespace("%1F".join(quote(level, safe="") for level in levels))
    with pytest.raises(errors.BadRequest):
        wire.decode_parent("\x1f".join(levels))
    with pytest.raises(errors.BadRequest):
        wire.decode_name(quote(levels[i], safe=""))


# -- commit requirements ---------------------------------------------------------------------------


def _metadata() -> Any:
    fields = [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
    ]
    return tables.new_table(
        location="file:///tmp/warehouse/t",
        schema={"type": "struct", "fields": fields},
        spec={"fields": [{"source-id": 1, "field-id": 1000, "transform": "bucket[4]", "name": "id_bucket"}]},
        order={
            "order-id": 1,
            "fields": [{"source-id": 2, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}],
        },
        properties={"format-version": "2"},
        now_ms=1_700_000_000_000,
    )


METADATA = _metadata()
# (requirement type, field, value on METADATA)
HOLDING = [
    ("assert-table-uuid", "uuid", METADATA["table-uuid"]),
    ("assert-current-schema-id", "current-schema-id", METADATA["current-schema-id"]),
    ("assert-last-assigned-field-id", "last-assigned-field-id", METADATA["last-column-id"]),
    ("assert-last-assigned-partition-id", "last-assigned-partition-id", METADATA["last-partition-id"]),
    ("assert-default-spec-id", "default-spec-id", METADATA["default-spec-id"]),
    ("assert-default-sort-order-id", "default-sort-order-id", METADATA["default-sort-order-id"]),
    ("assert-ref-snapshot-id", "snapshot-id", None),  # ref "main" absent: asserted absent
]


def _requirement(type_: str, field: str, value: Any) -> dict:
    body = {"type": type_, field: value}
    if type_ == "assert-ref-snapshot-id":
        body["ref"] = "main"
    return body


def check_requirements(requirements: list[dict], metadata: dict) -> None:
    assert tables.apply(metadata, requirements, [], base_location="l", now_ms=1) is metadata


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.lists(st.sampled_from(HOLDING), max_size=len(HOLDING)))
def test_requirements_that_hold_pass(chosen: list[tuple[str, str, Any]]) -> None:
    check_requirements([_requirement(*r) for r in chosen], METADATA)


@settings(database=None, deadline=None)  # timing varies on a shared CI machine
@given(st.data())
def test_a_mutated_requirement_fails_naming_it(data: st.DataObject) -> None:
    type_, field, value = data.draw(st.sampled_from(HOLDING))
    if type_ == "assert-table-uuid":
        wrong: Any = str(data.draw(st.uuids().filter(lambda u: str(u) != value)))
    elif type_ == "assert-ref-snapshot-id":
        wrong = data.draw(st.integers(min_value=1, max_value=2**62))
    else:
        wrong = data.draw(st.integers(min_value=-5, max_value=10_000).filter(lambda v: v != value))
    others = data.draw(st.lists(st.sampled_from([h for h in HOLDING if h[0] != type_]), max_size=3))
    requirements = [_requirement(*r) for r in others] + [_requirement(type_, field, wrong)]
    with pytest.raises(errors.RequirementFailed) as caught:
        check_requirements(requirements, METADATA)
    assert caught.value.code == 409
    assert type_ in caught.value.message
