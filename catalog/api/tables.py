"""Table routes: list, create (and stage), load, exists, commit, drop, rename, register,
multi-table transactions and metrics reports."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import orjson
from litestar import Request, Response, delete, get, head, post
from litestar.datastructures import State

from .. import commit, errors
from ..files import MetadataFile
from ..service import TableChange
from ..store import KeyTaken
from . import idempotency, wire
from .models import (
    CommitTableRequest,
    CommitTransactionRequest,
    CreateTableRequest,
    RegisterTableRequest,
    RenameTableRequest,
    ReportMetricsRequest,
)

TABLES = "/v1/namespaces/{namespace:str}/tables"
TABLE = TABLES + "/{table:str}"


@get(TABLES)
async def list_tables(namespace: str, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    after, size = wire.page_params(request.query_params)
    names = await wire.blocking(state.catalog.list_tables, ns, after, wire.fetch_limit(size))
    page, token = wire.paginate(names, size, lambda name: name)
    return wire.json_response(
        {"identifiers": [{"namespace": list(ns), "name": n} for n in page], "next-page-token": token}
    )


@post(TABLES, opt=wire.IDEMPOTENT)
async def create_table(namespace: str, payload: bytes, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateTableRequest, payload)
    location, metadata = await wire.blocking(
        state.catalog.create_table,
        ns,
        req.name,
        req.table_schema,
        req.location,
        req.partition_spec,
        req.write_order,
        dict(req.properties),
        req.stage_create,
    )
    raw = commit.dump(metadata)
    credentials = _vended(lambda: metadata.location, request, state)
    if location is None:  # staged: nothing persisted, no location yet
        return wire.raw_json_response(_load_result(None, raw, state, credentials))
    body = _load_result(location, raw, state, credentials)
    return wire.raw_json_response(body, headers={"ETag": etag(location, "all")})


@get(TABLE)
async def load_table(namespace: str, table: str, request: Request, state: State) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    mode = (request.query_params.get("snapshots") or "all").lower()
    if mode not in ("all", "refs"):
        raise errors.BadRequest(f"Invalid snapshots mode: {mode!r}, expected 'all' or 'refs'")
    file = await _load(state, ns, name)
    tag = etag(file.location, mode)
    if _matches(request.headers.get("if-none-match"), tag):
        return Response(content=None, status_code=304, headers={"ETag": tag})
    raw = file.raw if mode == "all" else file.refs_only
    credentials = _vended(lambda: file.metadata.location, request, state)
    return wire.raw_json_response(_load_result(file.location, raw, state, credentials), headers={"ETag": tag})


async def _load(state: State, ns: tuple[str, ...], name: str) -> MetadataFile:
    """The hot read path. On SQLite the pointer read runs inline (a thread hop costs more, and
    under load its GIL hand-offs dominate the latency tail); storage reads always leave the loop."""
    if not state.catalog.store.local:
        return await wire.blocking(state.catalog.load_table, ns, name)
    found = state.catalog.find_table(ns, name)
    return found if isinstance(found, MetadataFile) else await wire.blocking(state.catalog.files.read, found)


@head(TABLE, status_code=204)
async def table_exists(namespace: str, table: str, state: State) -> None:
    await wire.blocking(state.catalog.table_entry, wire.decode_namespace(namespace), wire.decode_name(table))


@post(TABLE, opt=wire.IDEMPOTENT)
async def update_table(namespace: str, table: str, payload: bytes, request: Request, state: State) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    req = wire.parse(CommitTableRequest, payload)
    if req.identifier is not None and (tuple(req.identifier.namespace), req.identifier.name) != (ns, name):
        raise errors.BadRequest("Malformed request: identifier in the body does not match the path")
    change = TableChange(ns, name, req.requirements, req.updates)
    try:  # the response is the new file's location and JSON: recorded as the location, and "}"
        file = await wire.blocking(state.catalog.commit_table, change, idempotency.claim(request, 200, b"}"))
    except KeyTaken:
        return await idempotency.replay(request)
    body = wire.metadata_body(file.location, file.raw)
    return wire.raw_json_response(body, headers={"ETag": etag(file.location, "all")})


@delete(TABLE, status_code=204, opt=wire.IDEMPOTENT)
async def drop_table(namespace: str, table: str, request: Request, state: State) -> None:
    purge = wire.is_true(request.query_params.get("purgeRequested"))
    await wire.blocking(state.catalog.drop_table, wire.decode_namespace(namespace), wire.decode_name(table), purge)


@post("/v1/tables/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_table(payload: bytes, state: State) -> None:
    req = wire.parse(RenameTableRequest, payload)
    await wire.blocking(state.catalog.rename_table, wire.identifier(req.source), wire.identifier(req.destination))


@post("/v1/namespaces/{namespace:str}/register", opt=wire.IDEMPOTENT)
async def register_table(namespace: str, payload: bytes, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(RegisterTableRequest, payload)
    file = await wire.blocking(state.catalog.register_table, ns, req.name, req.metadata_location, req.overwrite)
    body = _load_result(file.location, file.raw, state, _vended(lambda: file.metadata.location, request, state))
    return wire.raw_json_response(body, headers={"ETag": etag(file.location, "all")})


@post("/v1/transactions/commit", status_code=204, opt=wire.IDEMPOTENT)
async def commit_transaction(payload: bytes, request: Request, state: State) -> Response[None]:
    req = wire.parse(CommitTransactionRequest, payload)
    changes = []
    for change in req.table_changes:
        if change.identifier is None:
            raise errors.BadRequest("Malformed request: every table change needs an identifier")
        changes.append(TableChange(*wire.identifier(change.identifier), change.requirements, change.updates))
    try:
        await wire.blocking(state.catalog.commit_transaction, changes, idempotency.claim(request, 204, None))
    except KeyTaken:
        return await idempotency.replay(request)
    return wire.no_content()


@get(TABLE + "/credentials")
async def load_credentials(namespace: str, table: str, state: State) -> Response:
    """Storage credentials for the table's location: the server's own when vending is switched on,
    otherwise an explicit empty list (clients then use their configured credentials)."""
    file = await wire.blocking(state.catalog.load_table, wire.decode_namespace(namespace), wire.decode_name(table))
    return wire.json_response({"storage-credentials": _credentials(file.metadata.location, state)})


@post(TABLE + "/metrics", status_code=204)
async def report_metrics(namespace: str, table: str, payload: bytes, state: State) -> None:
    wire.parse(ReportMetricsRequest, payload)
    await wire.blocking(state.catalog.table_entry, wire.decode_namespace(namespace), wire.decode_name(table))


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


def _vended(location: Callable[[], str], request: Request, state: State) -> list[dict] | None:
    """Credentials for a load result, only when vending is on and the client asked for them
    (``location`` is called only then: it may need the metadata parsed)."""
    if not (state.vended and _wants_credentials(request)):
        return None
    return _credentials(location(), state)


def _load_result(
    location: str | None, raw_metadata: bytes, state: State, credentials: list[dict] | None = None
) -> bytes:
    tail = b',"config":' + state.table_config
    if credentials:
        tail += b',"storage-credentials":' + orjson.dumps(credentials)
    return wire.metadata_body(location, raw_metadata, tail + b"}")


def _wants_credentials(request: Request) -> bool:
    return "vended-credentials" in (request.headers.get("x-iceberg-access-delegation") or "")


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
]
