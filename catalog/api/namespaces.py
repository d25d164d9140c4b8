"""Namespace routes: list, create, load, exists, drop, update properties."""

from __future__ import annotations

from litestar import Request, Response, delete, get, head, post
from litestar.datastructures import State

from .. import errors
from . import wire
from .models import CreateNamespaceRequest, UpdateNamespacePropertiesRequest

NS = "/v1/namespaces/{namespace:str}"


@get("/v1/namespaces")
async def list_namespaces(request: Request, state: State) -> Response:
    parent = wire.decode_parent(request.query_params.get("parent"))
    after, size = wire.page_params(request.query_params)
    found = await wire.blocking(state.catalog.list_namespaces, parent, after, wire.fetch_limit(size))
    page, token = wire.paginate(found, size, wire.namespace_key)
    return wire.json_response({"namespaces": [list(ns) for ns in page], "next-page-token": token})


@post("/v1/namespaces", opt=wire.IDEMPOTENT)
async def create_namespace(payload: bytes, state: State) -> Response:
    req = wire.parse(CreateNamespaceRequest, payload)
    await wire.blocking(state.catalog.create_namespace, tuple(req.namespace), req.properties)
    return wire.json_response({"namespace": req.namespace, "properties": req.properties})


@get(NS)
async def load_namespace(namespace: str, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    return wire.json_response(
        {"namespace": list(ns), "properties": await wire.blocking(state.catalog.load_namespace, ns)}
    )


@head(NS, status_code=204)
async def namespace_exists(namespace: str, state: State) -> None:
    await wire.blocking(state.catalog.load_namespace, wire.decode_namespace(namespace))


@delete(NS, status_code=204, opt=wire.IDEMPOTENT)
async def drop_namespace(namespace: str, state: State) -> None:
    await wire.blocking(state.catalog.drop_namespace, wire.decode_namespace(namespace))


@post(NS + "/properties", opt=wire.IDEMPOTENT)
async def update_properties(namespace: str, payload: bytes, state: State) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(UpdateNamespacePropertiesRequest, payload)
    both = set(req.removals) & set(req.updates)
    if both:
        raise errors.UnprocessableEntity(f"Cannot remove and update the same key(s): {sorted(both)}")
    updated, removed, missing = await wire.blocking(
        state.catalog.update_namespace_properties, ns, req.removals, req.updates
    )
    return wire.json_response({"updated": updated, "removed": removed, "missing": missing})


ROUTES = [list_namespaces, create_namespace, load_namespace, namespace_exists, drop_namespace, update_properties]
