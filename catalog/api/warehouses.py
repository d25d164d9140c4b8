"""``/management/v1/warehouses``: the warehouses, for admins (``admin`` on the catalog when grants
are enforced). The default warehouse is listed (``"default": true``) and cannot be changed here.

- ``GET /management/v1/warehouses`` -> ``{"warehouses": [...]}``; ``GET .../{name}`` -> one.
- ``POST /management/v1/warehouses`` ``{name, location, s3|azure|gcs|maintenance: {...}}`` -> 201:
  the location confined first (``catalog.warehouse_profiles.confined``: under ``CATALOG_WAREHOUSE_ROOTS``,
  off the server's own files and system directories, else 403), then the storage profile probed (a
  file written, read back and deleted at the location).
- ``PUT /management/v1/warehouses/{name}`` (the same body) -> 200, probed again.
- ``DELETE /management/v1/warehouses/{name}`` -> 204; 409 while it has namespaces.

Secrets (``secret-access-key``, ``account-key``) are never shown. Errors are in the Iceberg shape.
"""

from __future__ import annotations

from typing import Any

import orjson
from litestar import Request, Response, delete, get, post, put
from litestar.params import FromPath, RawBody

from catalog import errors
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth.policy import ROOT, Privilege

BASE = "/management/v1/warehouses"
MAX_BODY = 64 * 1024


@get(BASE)
async def list_warehouses(request: Request, ctx: Ctx) -> Response:
    await guard.require(request, [(Privilege.ADMIN, ROOT)])
    return wire.json_response({"warehouses": await wire.blocking(ctx.registry().list)})


@get(BASE + "/{name:str}")
async def get_warehouse(name: FromPath[str], request: Request, ctx: Ctx) -> Response:
    await guard.require(request, [(Privilege.ADMIN, ROOT)])
    return wire.json_response(await wire.blocking(ctx.registry().get, _name(name)))


@post(BASE, status_code=201)
async def create_warehouse(body: RawBody, request: Request, ctx: Ctx) -> Response:
    await guard.require(request, [(Privilege.ADMIN, ROOT)])
    created = await wire.blocking(ctx.registry().create, _json(body))
    return wire.json_response(created.to_json(), status=201)


@put(BASE + "/{name:str}")
async def update_warehouse(name: FromPath[str], body: RawBody, request: Request, ctx: Ctx) -> Response:
    await guard.require(request, [(Privilege.ADMIN, ROOT)])
    changed = await wire.blocking(ctx.registry().update, _name(name), _json(body))
    return wire.json_response(changed.to_json())


@delete(BASE + "/{name:str}", status_code=204)
async def delete_warehouse(name: FromPath[str], request: Request, ctx: Ctx) -> None:
    await guard.require(request, [(Privilege.ADMIN, ROOT)])
    await wire.blocking(ctx.registry().delete, _name(name))


def _name(name: str) -> str:
    if len(name) > 63:
        raise errors.NoSuchWarehouse("Warehouse does not exist")
    return name


def _json(body: RawBody) -> Any:
    if len(body) > MAX_BODY:
        raise errors.BadRequest(f"A warehouse is at most {MAX_BODY} bytes of JSON")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Malformed request: the body is not JSON") from None
    if not isinstance(doc, dict):
        raise errors.BadRequest("A warehouse is a JSON object")
    return doc


ROUTES = [list_warehouses, get_warehouse, create_warehouse, update_warehouse, delete_warehouse]
