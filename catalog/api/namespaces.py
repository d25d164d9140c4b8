"""Namespace routes: list, create, load, exists, drop, update properties."""

from __future__ import annotations

from litestar import Request, Response, delete, get, head, post
from litestar.params import FromPath, RawBody

from catalog import errors
from catalog.api import guard, paging, wire
from catalog.api.context import Ctx
from catalog.api.models import CreateNamespaceRequest, UpdateNamespacePropertiesRequest
from catalog.auth import policy
from catalog.auth.policy import Privilege

NS = "/v1/namespaces/{namespace:str}"


@get("/v1/namespaces")
async def list_namespaces(request: Request, ctx: Ctx) -> Response:
    parent = wire.decode_parent(request.query_params.get("parent"))
    if parent:
        await guard.require_visible(request, policy.namespace(parent))
    page, token = await paging.visible_page(
        request,
        ctx.pages,
        "namespaces\0" + paging.namespace_key(parent),
        lambda after, limit: ctx.catalog.list_namespaces(parent, after, limit),
        policy.namespace,
        paging.namespace_key,
    )
    return wire.json_response({"namespaces": [list(ns) for ns in page], "next-page-token": token})


@post("/v1/namespaces", opt=wire.IDEMPOTENT)
async def create_namespace(body: RawBody, request: Request, ctx: Ctx) -> Response:
    req = wire.parse(CreateNamespaceRequest, body)
    await guard.require(request, [(Privilege.CREATE, policy.namespace(req.namespace[:-1]))])
    await wire.blocking(ctx.catalog.create_namespace, tuple(req.namespace), req.properties)
    return wire.json_response({"namespace": req.namespace, "properties": req.properties})


@get(NS)
async def load_namespace(namespace: FromPath[str], request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    await guard.require_visible(request, policy.namespace(ns))
    return wire.json_response(
        {"namespace": list(ns), "properties": await wire.blocking(ctx.catalog.load_namespace, ns)}
    )


@head(NS, status_code=204)
async def namespace_exists(namespace: FromPath[str], request: Request, ctx: Ctx) -> None:
    ns = wire.decode_namespace(namespace)
    await guard.require_visible(request, policy.namespace(ns))
    await wire.blocking(ctx.catalog.load_namespace, ns)


@delete(NS, status_code=204, opt=wire.IDEMPOTENT)
async def drop_namespace(namespace: FromPath[str], request: Request, ctx: Ctx) -> None:
    ns = wire.decode_namespace(namespace)
    await guard.require(request, [(Privilege.DROP, policy.namespace(ns))])
    await wire.blocking(ctx.catalog.drop_namespace, ns)


@post(NS + "/properties", opt=wire.IDEMPOTENT)
async def update_properties(namespace: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    ns = wire.decode_namespace(namespace)
    req = wire.parse(UpdateNamespacePropertiesRequest, body)
    await guard.require(request, [(Privilege.MANAGE_PROPERTIES, policy.namespace(ns))])
    both = set(req.removals) & set(req.updates)
    if both:
        raise errors.UnprocessableEntity(f"Cannot remove and update the same key(s): {sorted(both)}")
    updated, removed, missing = await wire.blocking(
        ctx.catalog.update_namespace_properties, ns, req.removals, req.updates
    )
    return wire.json_response({"updated": updated, "removed": removed, "missing": missing})


ROUTES = [list_namespaces, create_namespace, load_namespace, namespace_exists, drop_namespace, update_properties]
