"""Table and view routes: list, create (and stage), load, exists, commit, drop, rename, register,
multi-table transactions and metrics reports. Tables and views are both entries (``service.TABLE``,
``service.VIEW``): the routes differ only in their paths and a few table-only options."""

from __future__ import annotations

import functools
import hashlib

import orjson
from litestar import Request, Response, delete, get, head, post
from litestar.params import FromPath, RawBody

from catalog import errors
from catalog.api import guard, idempotency, observation, paging, planning, wire
from catalog.api.context import AppState, Ctx
from catalog.api.models import (
    CommitRequest,
    CommitTransactionRequest,
    CreateTableRequest,
    CreateViewRequest,
    RegisterTableRequest,
    RegisterViewRequest,
    RenameTableRequest,
    ReportMetricsRequest,
)
from catalog.auth import policy
from catalog.auth.policy import Privilege, Target
from catalog.storage import signing, vending
from catalog.storage.metadata_files import MetadataFile
from catalog.usecases import TABLE, VIEW, Change, Committed, HeldByDropped, Kind

TABLES = "/v1/namespaces/{namespace:str}/tables"
TABLE_PATH = TABLES + "/{table:str}"
VIEWS = "/v1/namespaces/{namespace:str}/views"
VIEW_PATH = VIEWS + "/{view:str}"
# How a recorded commit's 200 is rebuilt from its metadata file (see ``api.idempotency``).
COMMIT_RESULT = {**wire.IDEMPOTENT, "result": "commit"}
LOAD_RESULT = {**wire.IDEMPOTENT, "result": "load"}


# -- lists, loads, exists -------------------------------------------------------------------------


@get(TABLES)
async def list_tables(namespace: FromPath[str], request: Request, ctx: Ctx) -> Response:
    return await _list(TABLE, namespace, request, ctx)


@get(VIEWS)
async def list_views(namespace: FromPath[str], request: Request, ctx: Ctx) -> Response:
    return await _list(VIEW, namespace, request, ctx)


async def _list(kind: Kind, namespace: str, request: Request, ctx: AppState) -> Response:
    ns = wire.decode_namespace(namespace)
    await guard.require_visible(request, policy.namespace(ns))
    page, token = await paging.visible_page(
        request,
        ctx.pages,
        kind.name + "s\0" + paging.namespace_key(ns),
        lambda after, limit: ctx.catalog.list_entries(kind, ns, after, limit),
        lambda name: policy.entry(kind.name, ns, name),
        lambda name: name,
    )
    return wire.json_response(
        {
            "identifiers": [{"namespace": list(ns), "name": n} for n in page],
            "next-page-token": token,
        }
    )


@get(TABLE_PATH)
async def load_table(namespace: FromPath[str], table: FromPath[str], request: Request, ctx: Ctx) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    wire.referenced_by(request.scope["query_string"])  # validated: a malformed chain is a 400
    await guard.require(request, [(Privilege.READ, policy.entry("table", ns, name))])
    mode = (request.query_params.get("snapshots") or "all").lower()
    if mode not in ("all", "refs"):
        raise errors.BadRequest(f"Invalid snapshots mode: {mode!r}, expected 'all' or 'refs'")
    file = (
        ctx.catalog.load_inline(TABLE, ns, name)
        or await ctx.catalog.load_awaited(TABLE, ns, name)
        or await wire.blocking(ctx.catalog.load, TABLE, ns, name)
    )
    planning = planning_mode(file, ctx.catalog.planner.settings.scan_planning_mode)
    tag = etag(file.location, mode if planning is None else f"{mode},scan-planning-mode={planning}")
    if _matches(request.headers.get("if-none-match"), tag):
        return Response(content=None, status_code=304, headers={"ETag": tag})
    raw = file.raw if mode == "all" else file.refs_only
    config, credentials, signer = await _delegated(file.data["location"], (ns, name), request, ctx)
    if planning is not None:
        config = orjson.dumps({**orjson.loads(config), "scan-planning-mode": planning})
    body = wire.load_result(file.location, raw, config, credentials, signer)
    return wire.raw_json_response(body, headers={"ETag": tag})


@get(VIEW_PATH)
async def load_view(namespace: FromPath[str], view: FromPath[str], request: Request, ctx: Ctx) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(view)
    wire.referenced_by(request.scope["query_string"])
    await guard.require(request, [(Privilege.READ, policy.entry("view", ns, name))])
    return await _loaded(await wire.blocking(ctx.catalog.load, VIEW, ns, name), ctx)


@head(TABLE_PATH, status_code=204)
async def table_exists(namespace: FromPath[str], table: FromPath[str], request: Request, ctx: Ctx) -> None:
    await _exists(TABLE, namespace, table, request, ctx)


@head(VIEW_PATH, status_code=204)
async def view_exists(namespace: FromPath[str], view: FromPath[str], request: Request, ctx: Ctx) -> None:
    await _exists(VIEW, namespace, view, request, ctx)


async def _exists(kind: Kind, namespace: str, name: str, request: Request, ctx: AppState) -> None:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(name)
    await guard.require_visible(request, policy.entry(kind.name, ns, name))
    await wire.blocking(ctx.catalog.entry, kind, ns, name)


# -- creates and registers ------------------------------------------------------------------------


@post(TABLES, opt=LOAD_RESULT)
async def create_table(namespace: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateTableRequest, body)
    await guard.require(request, [(Privilege.CREATE, policy.namespace(ns))])
    created = {
        "schema": req.table_schema,
        "partition-spec": req.partition_spec,
        "write-order": req.write_order,
        "properties": dict(req.properties),
    }
    if req.stage_create:  # nothing persisted, no metadata location yet
        doc = await wire.blocking(ctx.catalog.stage_table, ns, req.name, req.location, created)
        config, credentials, signer = await _delegated(doc["location"], (ns, req.name), request, ctx, creating=True)
        return wire.raw_json_response(wire.load_result(None, orjson.dumps(doc), config, credentials, signer))
    key = idempotency.key_of(request, 200)
    create = functools.partial(ctx.catalog.create_table, ns, req.name, req.location, created, key)
    try:
        outcome = await wire.blocking(create)
    except HeldByDropped as held:  # the location of a table dropped without purge: for who may drop it
        outcome = await wire.blocking(functools.partial(create, superseding=await _supersedable(request, ctx, held)))
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    return await _loaded(outcome.files[0], ctx, (ns, req.name), request, creating=True)


@post(VIEWS)
async def create_view(namespace: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateViewRequest, body)
    await guard.require(request, [(Privilege.CREATE, policy.namespace(ns))])
    created = {"schema": req.view_schema, "view-version": req.view_version, "properties": dict(req.properties)}
    return await _loaded(await wire.blocking(ctx.catalog.create_view, ns, req.name, req.location, created), ctx)


@post("/v1/namespaces/{namespace:str}/register", opt=wire.IDEMPOTENT)
async def register_table(namespace: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(RegisterTableRequest, body)
    needs = [(Privilege.REGISTER, policy.namespace(ns))]
    if req.overwrite:  # replaces whatever table has the name: as much as dropping it
        needs.append((Privilege.DROP, policy.entry("table", ns, req.name)))
    await guard.require(request, needs)
    register = functools.partial(ctx.catalog.register, TABLE, ns, req.name, req.metadata_location, req.overwrite)
    try:
        file = await wire.blocking(register)
    except HeldByDropped as held:  # drop then register: the caller may supersede what it may drop
        file = await wire.blocking(functools.partial(register, superseding=await _supersedable(request, ctx, held)))
    return await _loaded(file, ctx, (ns, req.name), request)


async def _supersedable(request: Request, ctx: Ctx, held: HeldByDropped) -> list[int]:
    """The dropped tables holding a location, if the caller may drop each one's name (who could
    have undropped it may take its place); else the 409 stands."""
    for gone in await wire.blocking(ctx.catalog.dropped_entries, held.ids):
        if not await guard.holds(request, Privilege.DROP, policy.entry(gone.kind, gone.namespace, gone.name)):
            raise held
    return held.ids


@post("/v1/namespaces/{namespace:str}/register-view", opt=wire.IDEMPOTENT)
async def register_view(namespace: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(RegisterViewRequest, body)
    await guard.require(request, [(Privilege.REGISTER, policy.namespace(ns))])
    register = functools.partial(ctx.catalog.register, VIEW, ns, req.name, req.metadata_location)
    try:
        file = await wire.blocking(register)
    except HeldByDropped as held:  # drop then register, as for a table
        file = await wire.blocking(functools.partial(register, superseding=await _supersedable(request, ctx, held)))
    return await _loaded(file, ctx)


# -- commits --------------------------------------------------------------------------------------


@post(TABLE_PATH, opt=COMMIT_RESULT)
async def update_table(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    return await _commit_one(TABLE, namespace, table, body, request, ctx)


@post(VIEW_PATH, opt=LOAD_RESULT)
async def replace_view(
    namespace: FromPath[str], view: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    return await _commit_one(VIEW, namespace, view, body, request, ctx)


async def _commit_one(
    kind: Kind, namespace: str, name: str, body: RawBody, request: Request, ctx: AppState
) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(name)
    req = wire.parse(CommitRequest, body)
    if req.identifier is not None and (tuple(req.identifier.namespace), req.identifier.name) != (ns, name):
        raise errors.BadRequest("Malformed request: identifier in the body does not match the path")
    change = Change(kind, ns, name, req.requirements, req.updates)
    await guard.require(request, _commit_needs(change))
    key = idempotency.key_of(request, 200)
    # on the loop when nothing can block it long; its file synced off it when others are waiting
    outcome = await ctx.catalog.commit_inline([change], key, others_waiting=observation.PENDING.count > 1)
    if outcome is None:
        outcome = await wire.blocking(ctx.catalog.commit, [change], key)
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    file = outcome.files[0]
    if kind is VIEW:
        return await _loaded(file, ctx)
    return wire.raw_json_response(
        wire.load_result(file.location, file.raw), headers={"ETag": etag(file.location, "all")}
    )


@post("/v1/transactions/commit", status_code=204, opt=wire.IDEMPOTENT)
async def commit_transaction(body: RawBody, request: Request, ctx: Ctx) -> Response[None]:
    req = wire.parse(CommitTransactionRequest, body)
    changes = []
    for change in req.table_changes:
        if change.identifier is None:
            raise errors.BadRequest("Malformed request: every table change needs an identifier")
        changes.append(Change(TABLE, *wire.identifier(change.identifier), change.requirements, change.updates))
    await guard.require(request, [need for change in changes for need in _commit_needs(change)])
    outcome = await wire.blocking(ctx.catalog.commit, changes, idempotency.key_of(request, 204))
    if not isinstance(outcome, Committed):
        return await idempotency.replay(request)
    idempotency.settle(request, outcome)
    return wire.no_content()


# -- drop, rename, credentials, metrics -----------------------------------------------------------


@delete(TABLE_PATH, status_code=204, opt=wire.IDEMPOTENT)
async def drop_table(namespace: FromPath[str], table: FromPath[str], request: Request, ctx: Ctx) -> None:
    await _drop(TABLE, namespace, table, request, ctx)


@delete(VIEW_PATH, status_code=204, opt=wire.IDEMPOTENT)
async def drop_view(namespace: FromPath[str], view: FromPath[str], request: Request, ctx: Ctx) -> None:
    await _drop(VIEW, namespace, view, request, ctx)


async def _drop(kind: Kind, namespace: str, name: str, request: Request, ctx: AppState) -> None:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(name)
    purge = kind is TABLE and wire.is_true(request.query_params.get("purgeRequested"))
    who = await guard.require(
        request, [(Privilege.PURGE if purge else Privilege.DROP, policy.entry(kind.name, ns, name))]
    )
    await wire.blocking(ctx.catalog.drop, kind, ns, name, purge, who.name)


@post(TABLE_PATH + "/unregister", status_code=200, opt=wire.IDEMPOTENT)
async def unregister_table(namespace: FromPath[str], table: FromPath[str], request: Request, ctx: Ctx) -> Response:
    """The table leaves the catalog, every file stays (to be registered elsewhere): the opposite of
    registerTable. Answers the last metadata location and its metadata; needs the drop privilege."""
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    await guard.require(request, [(Privilege.DROP, policy.entry("table", ns, name))])
    file = await wire.blocking(ctx.catalog.unregister, ns, name)
    return wire.raw_json_response(wire.load_result(file.location, file.raw))


@post("/v1/tables/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_table(body: RawBody, request: Request, ctx: Ctx) -> None:
    await _rename(TABLE, body, request, ctx)


@post("/v1/views/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_view(body: RawBody, request: Request, ctx: Ctx) -> None:
    await _rename(VIEW, body, request, ctx)


async def _rename(kind: Kind, body: RawBody, request: Request, ctx: AppState) -> None:
    """Both ends: dropping the source name, creating in the destination namespace."""
    req = wire.parse(RenameTableRequest, body)
    source, destination = wire.identifier(req.source), wire.identifier(req.destination)
    await guard.require(
        request,
        [(Privilege.DROP, policy.entry(kind.name, *source)), (Privilege.CREATE, policy.namespace(destination[0]))],
    )
    await wire.blocking(ctx.catalog.rename, kind, source, destination)


@get(TABLE_PATH + "/credentials")
async def load_credentials(namespace: FromPath[str], table: FromPath[str], request: Request, ctx: Ctx) -> Response:
    """Fresh table-scoped storage credentials (see ``catalog.storage.vending``): read-only or read-write
    as the caller's privileges on the table allow; read-only for a ``planId`` (a plan this caller made
    on this table, else 404 ``NoSuchPlanIdException``: ``api/planning.py``); an empty list when
    vending is off."""
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    wire.referenced_by(request.scope["query_string"])
    await guard.require(request, [(Privilege.READ, policy.entry("table", ns, name))])
    file = ctx.catalog.load_inline(TABLE, ns, name) or await wire.blocking(ctx.catalog.load, TABLE, ns, name)
    plan_id = request.query_params.get("planId")
    if plan_id is not None:
        planning.plan_of(plan_id, file.data.get("table-uuid"), request, ctx)
    if ctx.vendor is None:
        return wire.json_response({"storage-credentials": []})
    location = file.data["location"]
    access = vending.READ if plan_id is not None else await _access(request, (ns, name))
    found = await wire.blocking(vending.delegate, ctx.vendor, "vended-credentials", access, location, None)
    return wire.json_response({"storage-credentials": found.credentials if found else []})


@post(TABLE_PATH + "/metrics", status_code=204)
async def report_metrics(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> None:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    wire.parse(ReportMetricsRequest, body)
    await guard.require(request, [(Privilege.READ, policy.entry("table", ns, name))])
    await wire.blocking(ctx.catalog.entry, TABLE, ns, name)


# -- authorization --------------------------------------------------------------------------------


def _commit_needs(change: Change) -> list[tuple[Privilege, Target]]:
    """A staged create's commit (``assert-create``) is a create in the namespace; any other commit
    needs what its updates change (``policy.commit_privileges``) on the entry."""
    if any(r.get("type") == "assert-create" for r in change.requirements):
        return [(Privilege.CREATE, policy.namespace(change.namespace))]
    target = policy.entry(change.kind.name, change.namespace, change.name)
    return [(p, target) for p in sorted(policy.commit_privileges(change.updates))]


async def _access(request: Request, identifier: tuple[tuple[str, ...], str], creating: bool = False) -> str:
    """The storage access a caller's credentials get: read-write if it may write the table (or, for
    the answer to its create, create tables in the namespace), else read-only."""
    ns, name = identifier
    if await guard.holds(request, Privilege.WRITE, policy.entry("table", ns, name)):
        return vending.WRITE
    if creating and await guard.holds(request, Privilege.CREATE, policy.namespace(ns)):
        return vending.WRITE
    return vending.READ


# -- the load result ------------------------------------------------------------------------------


async def _loaded(
    file: MetadataFile,
    ctx: AppState,
    identifier: tuple[tuple[str, ...], str] | None = None,
    request: Request | None = None,
    creating: bool = False,
) -> Response:
    """A LoadTableResult / LoadViewResult of a metadata file, with its ETag (and, for a table, the
    storage access its caller gets, see ``_delegated``)."""
    config, credentials, signer = ctx.table_config, None, None
    if request is not None and identifier is not None:
        config, credentials, signer = await _delegated(file.data["location"], identifier, request, ctx, creating)
    return wire.raw_json_response(
        wire.load_result(file.location, file.raw, config, credentials, signer),
        headers={"ETag": etag(file.location, "all")},
    )


PLANNING_PROPERTY = "catalog.scan-planning-mode"


def planning_mode(file: MetadataFile, setting: str) -> str | None:
    """The ``scan-planning-mode`` a table's load tells the client (Java 1.11 reads it there): the
    table's ``catalog.scan-planning-mode`` property, else ``server`` when the server's setting says
    so, else nothing (clients plan themselves)."""
    if PLANNING_PROPERTY.encode() in file.raw:  # a byte search spares parsing most loads
        value = (file.data.get("properties") or {}).get(PLANNING_PROPERTY)
        if value in ("client", "server"):
            return value
    return "server" if setting == "server" else None


def etag(location: str, mode: str) -> str:
    """Distinct per metadata file and snapshots mode (a refs load and an all load differ)."""
    return '"' + hashlib.blake2b(f"{location},snapshots={mode}".encode(), digest_size=12).hexdigest() + '"'


def _matches(if_none_match: str | None, tag: str) -> bool:
    if not if_none_match:
        return False
    candidates = {t.strip().removeprefix("W/").strip('"') for t in if_none_match.split(",")}
    return tag.strip('"') in candidates or "*" in candidates


async def _delegated(
    location: str, identifier: tuple[tuple[str, ...], str], request: Request, ctx: AppState, creating: bool = False
) -> tuple[bytes, list[dict] | None, dict | None]:
    """A table result's ``config`` (JSON), ``storage-credentials`` and ``remote-signing-config``: the static
    storage config,
    plus the storage access this request gets. Vended credentials when vending is on and the client
    asks for them (``catalog.storage.vending``: scoped STS credentials and their refresh route); else the
    remote-signing settings when signing is on and the client asks for it, or asks for vended
    credentials the server does not vend (``catalog.storage.signing.offered``); else nothing: the client
    brings its own storage access."""
    header = request.headers.get("x-iceberg-access-delegation")
    if ctx.vendor is not None and vending.wants_vended(header):
        access = await _access(request, identifier, creating)
        refresh = vending.credentials_path(ctx.prefix, *identifier)
        found = await wire.blocking(vending.delegate, ctx.vendor, header, access, location, refresh)
        if found is not None:
            return orjson.dumps({**ctx.client_io, **found.config}), found.credentials, None
    signer = ctx.signer
    if signer is not None and signing.offered(signer.settings, header):
        config = orjson.dumps({**ctx.client_io, **signing.properties_for(signer.prefix, *identifier)})
        return config, None, signing.REMOTE_SIGNING_CONFIG
    return ctx.table_config, None, None


ROUTES = [
    list_tables,
    create_table,
    load_table,
    table_exists,
    update_table,
    drop_table,
    unregister_table,
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
