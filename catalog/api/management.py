"""``/management/v1``: who the caller is, and the grants (``catalog.auth.policy``).

- ``GET /management/v1/whoami``: the caller's principal, its ``grantee`` (the principal as grants
  name it: ``user:<name>``, or ``client:<id>`` for a built-in client), groups/roles and the grants
  that apply to them directly (to the grantee or one of its ``role:<name>``).
- ``GET /management/v1/grants``: the grants on objects the caller may manage (``manage-grants`` on
  the object or above it), optionally only those of one ``principal``.
- ``POST /management/v1/grants``: ``{"principal", "privileges": [...], "on": {...}}`` -> 201 with
  the stored grants (a grant already held is returned as it is).
- ``DELETE /management/v1/grants/{id}`` -> 204; 404 for an id that names no grant, and the same
  404 for a grant on an object the caller may not manage (it is not shown that grant either).

Changing a grant needs ``manage-grants`` on its object (or above), decided by the grants of the
object's warehouse (``guard.deciding``): an admin of a warehouse manages the grants inside it. A
grant naming a warehouse that is none is 404 ``NoSuchWarehouseException``. Documented in
spec/management.yaml.
"""

from __future__ import annotations

from typing import Any

import orjson
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath, RawBody

from catalog import errors
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth import policy
from catalog.auth.policy import Grant, Privilege, principal_keys

BASE = "/management/v1"
MAX_GRANTS_PER_REQUEST = 100


@get(BASE + "/whoami")
async def whoami(request: Request, ctx: Ctx) -> Response:
    who = guard.principal(request)
    keys = set(principal_keys(who.name, who.groups, who.kind))
    grants = await wire.blocking(ctx.access.grants.list_grants)
    return wire.json_response(
        {
            "principal": who.name,
            "grantee": guard.grantee(request),
            "groups": sorted(who.groups),
            "unrestricted": who.unrestricted or not ctx.access.enforced,
            "grants": [g.to_json() for g in _ordered(grants) if g.principal in keys],
        }
    )


@get(BASE + "/grants")
async def list_grants(request: Request, ctx: Ctx) -> Response:
    wanted = request.query_params.get("principal")
    grants = [g for g in await wire.blocking(ctx.access.grants.list_grants) if wanted in (None, g.principal)]
    manageable = [await guard.holds(request, Privilege.MANAGE_GRANTS, g.target) for g in grants]
    return wire.json_response({"grants": [g.to_json() for g, ok in zip(grants, manageable, strict=True) if ok]})


@post(BASE + "/grants", status_code=201)
async def add_grants(body: RawBody, request: Request, ctx: Ctx) -> Response:
    doc = _json(body)
    grants = [Grant(g.principal, g.privilege, g.target) for g in policy.parse_grants({"grants": [doc]})]
    if len(grants) > MAX_GRANTS_PER_REQUEST:
        raise errors.BadRequest(f"At most {MAX_GRANTS_PER_REQUEST} privileges per request")
    target = grants[0].target
    await guard.require(request, [(Privilege.MANAGE_GRANTS, target)])
    where = target.where()[0]
    if where is not None and not ctx.registry().knows(where):  # told only to who may manage the catalog's grants
        raise errors.NoSuchWarehouse.named(where)
    access, _ = guard.deciding(request, target)  # its warehouse's snapshot reloads at once
    stored = await wire.blocking(access.grant, grants)
    return wire.json_response({"grants": [g.to_json() for g in _ordered(stored)]}, status=201)


@delete(BASE + "/grants/{grant_id:str}", status_code=204)
async def revoke_grant(grant_id: FromPath[str], request: Request, ctx: Ctx) -> None:
    if not grant_id.isdigit() or len(grant_id) > 18:
        raise errors.BadRequest("A grant id is a number")
    found = [g for g in await wire.blocking(ctx.access.grants.list_grants) if g.id == int(grant_id)]
    missing = errors.NotFound(f"No grant with id {int(grant_id)}")
    if not found:
        raise missing
    # a grant the caller may not manage is one it is not shown (``list_grants``): as missing
    await guard.require_seen(request, found[0].target, missing, Privilege.MANAGE_GRANTS)
    access, _ = guard.deciding(request, found[0].target)
    await wire.blocking(access.revoke, found[0].id)


def _json(body: RawBody) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Malformed request: the body is not JSON") from None


def _ordered(grants: list[Grant]) -> list[Grant]:
    return sorted(grants, key=lambda g: g.id or 0)


ROUTES = [whoami, list_grants, add_grants, revoke_grant]
