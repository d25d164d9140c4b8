"""View routes: list, create, load, exists, replace (commit), drop, rename, register."""

from __future__ import annotations

from litestar import Request, Response, delete, get, head, post
from litestar.datastructures import State

from .. import errors
from ..files import MetadataFile
from ..store import KeyTaken
from . import idempotency, wire
from .models import CommitViewRequest, CreateViewRequest, RegisterViewRequest, RenameTableRequest

VIEWS = "/v1/namespaces/{namespace:str}/views"
VIEW = VIEWS + "/{view:str}"


@get(VIEWS)
async def list_views(namespace: str, request: Request, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    after, size = wire.page_params(request.query_params)
    names = await wire.blocking(state.views.list, ns, after, wire.fetch_limit(size))
    page, token = wire.paginate(names, size, lambda name: name)
    return wire.json_response(
        {"identifiers": [{"namespace": list(ns), "name": n} for n in page], "next-page-token": token}
    )


@post(VIEWS)
async def create_view(namespace: str, payload: bytes, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(CreateViewRequest, payload)
    file = await wire.blocking(
        state.views.create, ns, req.name, req.location, req.view_schema, req.view_version, dict(req.properties)
    )
    return _load_result(file, state)


@get(VIEW)
async def load_view(namespace: str, view: str, state: State) -> Response:
    file = await wire.blocking(state.views.load, wire.decode_namespace(namespace), wire.decode_name(view))
    return _load_result(file, state)


@head(VIEW, status_code=204)
async def view_exists(namespace: str, view: str, state: State) -> None:
    await wire.blocking(state.views.entry, wire.decode_namespace(namespace), wire.decode_name(view))


@post(VIEW, opt=wire.IDEMPOTENT)
async def replace_view(namespace: str, view: str, payload: bytes, request: Request, state: State) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(view)
    req = wire.parse(CommitViewRequest, payload)
    if req.identifier is not None and (tuple(req.identifier.namespace), req.identifier.name) != (ns, name):
        raise errors.BadRequest("Malformed request: identifier in the body does not match the path")
    key = idempotency.claim(request, 200, _after_metadata(state))
    try:
        file = await wire.blocking(state.views.replace, ns, name, req.requirements, req.updates, key)
    except KeyTaken:
        return await idempotency.replay(request)
    return _load_result(file, state)


@delete(VIEW, status_code=204, opt=wire.IDEMPOTENT)
async def drop_view(namespace: str, view: str, state: State) -> None:
    await wire.blocking(state.views.drop, wire.decode_namespace(namespace), wire.decode_name(view))


@post("/v1/views/rename", status_code=204, opt=wire.IDEMPOTENT)
async def rename_view(payload: bytes, state: State) -> None:
    req = wire.parse(RenameTableRequest, payload)
    await wire.blocking(state.views.rename, wire.identifier(req.source), wire.identifier(req.destination))


@post("/v1/namespaces/{namespace:str}/register-view", opt=wire.IDEMPOTENT)
async def register_view(namespace: str, payload: bytes, state: State) -> Response:
    req = wire.parse(RegisterViewRequest, payload)
    file = await wire.blocking(state.views.register, wire.decode_namespace(namespace), req.name, req.metadata_location)
    return _load_result(file, state)


def _load_result(file: MetadataFile, state: State) -> Response:
    return wire.raw_json_response(wire.metadata_body(file.location, file.raw, _after_metadata(state)))


def _after_metadata(state: State) -> bytes:
    return b',"config":' + state.table_config + b"}"


ROUTES = [list_views, create_view, load_view, view_exists, replace_view, drop_view, rename_view, register_view]
