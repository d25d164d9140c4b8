"""Table and view routes: list, create (and stage), load, exists, commit, drop, rename, register,
multi-table transactions and metrics reports. Tables and views are both entries (``service.TABLE``,
``service.VIEW``): the routes differ only in their paths and a few table-only options."""

from __future__ import annotations

import hashlib

import orjson
from litestar import Request, Response, delete, get, head, post
from litestar.datastructures import State

from .. import errors
from ..files import MetadataFile
from ..service import TABLE, VIEW, Change, Committed, Kind
from . import idempotency, wire
from .models import (
    CommitRequest,
    CommitTransactionRequest,
    CreateTableRequest,
    CreateViewRequest,
    RegisterTableRequest,
    RegisterViewRequest,
    RenameTableRequest,
    ReportMetricsRequest,
)

TABLES = "/v1/namespaces/{namespace:str}/tables"
TABLE_PATH = TABLES + "/{table:str}"
VIEWS = "/v1/namespaces/{namespace:str}/views"
VIEW_PATH = VIEWS + "/{view:str}"
# How a recorded commit's 200 is rebuilt from its metadata file (see ``api.idempotency``).
COMMIT_RESULT = {**wire.IDEMPOTENT, "result": "commit"}
LOAD_RESULT = {**wire.IDEMPOTENT, "result": "load"}


# -- lists, loads, exists -------------------------------------------------------------------------


@get(TABLES)
async def list_tables(namespace: str, request: Request, state: State) -> Response:
    return await _list(TABLE, namespace, request, state)


@get(VIEWS)
async def list_views(namespace: str, request: Request, state: State) -> Response:
    return await _list(VIEW, namespace, request, state)


async def _list(kind: Kind, namespace: str, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    after, size = wire.page_params(request.query_params)
    names = await wire.blocking(state.catalog.list_entries, kind, ns, after, wire.fetch_limit(size))
    page, token = wire.paginate(names, size, lambda name: name)
    return wire.json_response(
        {"identifiers": [{"namespace": list(ns), "name": n} for n in page], "next-page-token": token}
    )


@get(TABLE_PATH)
async def load_table(namespace: str, table: str, request: Request, state: State) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    mode = (request.query_params.get("snapshots") or "all").lower()
    if mode not in ("all", "refs"):
        raise errors.BadRequest(f"Invalid snapshots mode: {mode!r}, expected 'all' or 'refs'")
    file = state.catalog.load_inline(TABLE, ns, name) or await wire.blocking(state.catalog.load, TABLE, ns, name)
    tag = etag(file.location, mode)
    if _matches(request.headers.get("if-none-match"), tag):
        return Response(content=None, status_code=304, headers={"ETag": tag})
    raw = file.raw if mode == "all" else file.refs_only
    return wire.raw_json_response(
        wire.load_result(file.location, raw, state.table_config, _vended(file, request, state)),
        headers={"ETag": tag},
    )


@get(VIEW_PATH)
async def load_view(namespace: str, view: str, state: State) -> Response:
    file = await wire.blocking(state.catalog.load, VIEW, wire.decode_namespace(namespace), wire.decode_name(view))
    return _loaded(file, state)


@head(TABLE_PATH, status_code=204)
async def table_exists(namespace: str, table: str, state: State) -> None:
    await wire.blocking(state.catalog.entry, TABLE, wire.decode_namespace(namespace), wire.decode_name(table))


@head(VIEW_PATH, status_code=204)
async def view_exists(namespace: str, view: str, state: State) -> None:
    await wire.blocking(state.catalog.entry, VIEW, wire.decode_namespace(namespace), wire.decode_name(view))


# -- creates and registers ------------------------------------------------------------------------


@post(TABLES, opt=LOAD_RESULT)
async def create_table(namespace: str, payload: bytes, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateTableRequest, payload)
    body = {
        "schema": req.table_schema,
        "partition-spec": req.partition_spec,
        "write-order": req.write_order,
        "properties": dict(req.properties),
    }
    if req.stage_create:  # nothing persisted, no metadata location yet
        doc = await wire.blocking(state.catalog.stage_table, ns, req.name, req.location, body)
        credentials = _credentials(doc["location"], state) if _wants_credentials(request, state) else None
        return wire.raw_json_response(wire.load_result(None, orjson.dumps(doc), state.table_config, credentials))
    key = idempotency.key_of(request, 200)
    outcome = await wire.blocking(state.catalog.create_table, ns, req.name, req.location, body, key)
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    return _loaded(outcome.files[0], state, request)


@post(VIEWS)
async def create_view(namespace: str, payload: bytes, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateViewRequest, payload)
    body = {"schema": req.view_schema, "view-version": req.view_version, "properties": dict(req.properties)}
    return _loaded(await wire.blocking(state.catalog.create_view, ns, req.name, req.location, body), state)


@post("/v1/namespaces/{namespace:str}/register", opt=wire.IDEMPOTENT)
async def register_table(namespace: str, payload: bytes, request: Request, state: State) -> Response:
    req = wire.parse(RegisterTableRequest, payload)
    file = await wire.blocking(
        state.catalog.register, TABLE, wire.decode_namespace(namespace), req.name, req.metadata_location, req.overwrite
    )
    return _loaded(file, state, request)


@post("/v1/namespaces/{namespace:str}/register-view", opt=wire.IDEMPOTENT)
async def register_view(namespace: str, payload: bytes, state: State) -> Response:
    req = wire.parse(RegisterViewRequest, payload)
    file = await wire.blocking(
        state.catalog.register, VIEW, wire.decode_namespace(namespace), req.name, req.metadata_location
    )
    return _loaded(file, state)


# -- commits --------------------------------------------------------------------------------------


@post(TABLE_PATH, opt=COMMIT_RESULT)
async def update_table(namespace: str, table: str, payload: bytes, request: Request, state: State) -> Response:
    return await _commit_one(TABLE, namespace, table, payload, request, state)


@post(VIEW_PATH, opt=LOAD_RESULT)
async def replace_view(namespace: str, view: str, payload: bytes, request: Request, state: State) -> Response:
    return await _commit_one(VIEW, namespace, view, payload, request, state)


async def _commit_one(
    kind: Kind, namespace: str, name: str, payload: bytes, request: Request, state: State
) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(name)
    req = wire.parse(CommitRequest, payload)
    if req.identifier is not None and (tuple(req.identifier.namespace), req.identifier.name) != (ns, name):
        raise errors.BadRequest("Malformed request: identifier in the body does not match the path")
    change = Change(kind, ns, name, req.requirements, req.updates)
    outcome = await wire.blocking(state.catalog.commit, [change], idempotency.key_of(request, 200))
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    file = outcome.files[0]
    if kind is VIEW:
        return _loaded(file, state)
    return wire.raw_json_response(
        wire.load_result(file.location, file.raw), headers={"ETag": etag(file.location, "all")}
    )


@post("/v1/transactions/commit", status_code=204, opt=wire.IDEMPOTENT)
async def commit_transaction(payload: bytes, request: Request, state: State) -> Response[None]:
    req = wire.parse(CommitTransactionRequest, payload)
    changes = []
    for change in req.table_changes:
        if change.identifier is None:
            raise errors.BadRequest("Malformed request: every table change needs an identifier")
        changes.append(Change(TABLE, *wire.identifier(change.identifier), change.requirements, change.updates))
    outcome = await wire.blocking(state.catalog.commit, changes, idempotency.key_of(request, 204))
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    return wire.no_content()


# -- drop, rename, credentials, metrics -----------------------------------------------------------


@delete(TABLE_PATH, status_code=204, opt=wire.IDEMPOTENT)
async def drop_table(namespace: str, table: str, request: Request, state: State) -> None:
    purge = wire.is_true(request.query_params.get("purgeRequested"))
    await wire.blocking(state.catalog.drop, TABLE, wire.decode_namespace(namespace), wire.decode_name(table), purge)


@delete(VIEW_PATH, status_code=204, opt=wire.IDEMPOTENT)
async def drop_view(namespace: str, view: str, state: State) -> None:
    await wire.blocking(state.catalog.drop, VIEW, wire.decode_namespace(namespace), wire.decode_name(view))


@post("/v1/tables/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_table(payload: bytes, state: State) -> None:
    req = wire.parse(RenameTableRequest, payload)
    await wire.blocking(state.catalog.rename, TABLE, wire.identifier(req.source), wire.identifier(req.destination))


@post("/v1/views/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_view(payload: bytes, state: State) -> None:
    req = wire.parse(RenameTableRequest, payload)
    await wire.blocking(state.catalog.rename, VIEW, wire.identifier(req.source), wire.identifier(req.destination))


@get(TABLE_PATH + "/credentials")
async def load_credentials(namespace: str, table: str, state: State) -> Response:
    """Storage credentials for the table's location: the server's own when vending is switched on,
    otherwise an explicit empty list (clients then use their configured credentials)."""
    file = await wire.blocking(state.catalog.load, TABLE, wire.decode_namespace(namespace), wire.decode_name(table))
    return wire.json_response({"storage-credentials": _credentials(file.data["location"], state)})


@post(TABLE_PATH + "/metrics", status_code=204)
async def report_metrics(namespace: str, table: str, payload: bytes, state: State) -> None:
    wire.parse(ReportMetricsRequest, payload)
    await wire.blocking(state.catalog.entry, TABLE, wire.decode_namespace(namespace), wire.decode_name(table))


# -- the load result ------------------------------------------------------------------------------


def _loaded(file: MetadataFile, state: State, request: Request | None = None) -> Response:
    """A LoadTableResult / LoadViewResult of a metadata file, with its ETag."""
    credentials = _vended(file, request, state) if request is not None else None
    return wire.raw_json_response(
        wire.load_result(file.location, file.raw, state.table_config, credentials),
        headers={"ETag": etag(file.location, "all")},
    )


def etag(location: str, mode: str) -> str:
    """Distinct per metadata file and snapshots mode (a refs load and an all load differ)."""
    return '"' + hashlib.blake2b(f"{location},snapshots={mode}".encode(), digest_size=12).hexdigest() + '"'


def _matches(if_none_match: str | None, tag: str) -> bool:
    if not if_none_match:
        return False
    candidates = {t.strip().removeprefix("W/").strip('"') for t in if_none_match.split(",")}
    return tag.strip('"') in candidates or "*" in candidates


def _credentials(location: str, state: State) -> list[dict]:
    return [{"prefix": location, "config": state.vended}] if state.vended else []


def _vended(file: MetadataFile, request: Request, state: State) -> list[dict] | None:
    """Credentials for a load result, only when vending is on and the client asked for them."""
    return _credentials(file.data["location"], state) if _wants_credentials(request, state) else None


def _wants_credentials(request: Request, state: State) -> bool:
    return bool(state.vended) and "vended-credentials" in (request.headers.get("x-iceberg-access-delegation") or "")


ROUTES = [
    list_tables,
    create_table,
    load_table,
    table_exists,
    update_table,
    drop_table,
    rename_table,
    register_table,
    commit_transaction,
    report_metrics,
    load_credentials,
    list_views,
    create_view,
    load_view,
    view_exists,
    replace_view,
    drop_view,
    rename_view,
    register_view,
]
