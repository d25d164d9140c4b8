"""``/management/v1/dropped``: dropped tables and views, kept for ``CATALOG_DROP_RETENTION``, of the
warehouse of ``?warehouse=`` (absent: the default; ``api.routing`` selects it, grants decide as in it).

- ``GET /management/v1/dropped?namespace=a.b&name=t&limit=100``: the most recently dropped first,
  only those the caller may see (any privilege on the entry's name).
- ``POST /management/v1/dropped/{id}/undrop`` -> 200 ``{"kind", "namespace", "name"}``: back under
  its name with its history and grants; needs ``drop`` on it (who may drop it may restore it) and
  ``create`` on its namespace. 409 when the name or the location was taken since, or its purge has
  begun.
- ``DELETE /management/v1/dropped/{id}`` -> 202 with the entry: its retention ends now, so it is
  purged (dropped with ``purgeRequested``: a ``purge`` task is queued, needs ``purge``) or released
  with its files kept and its location held (needs ``drop``; ``database/dropped.py``).

An id naming an entry the caller may not see (no privilege on its name) is answered as an id that
names none (404, the same body); one it sees but may not change is a 403.
"""

from __future__ import annotations

from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from catalog import errors
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth import policy
from catalog.auth.policy import Privilege
from catalog.database.dropped import Dropped
from catalog.drops import missing_dropped

BASE = "/management/v1/dropped"
MAX_LIMIT = 1000


@get(BASE)
async def list_dropped(request: Request, ctx: Ctx) -> Response:
    query = request.query_params
    ns_raw, name = query.get("namespace"), query.get("name")
    if name is not None and ns_raw is None:
        raise errors.BadRequest("Give the namespace with the name")
    ns = tuple(ns_raw.split(".")) if ns_raw is not None else None
    limit_raw = query.get("limit") or "100"
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= MAX_LIMIT:
        raise errors.BadRequest(f"limit must be a number from 1 to {MAX_LIMIT}")
    found = await wire.blocking(ctx.catalog.dropped, ns, name, int(limit_raw))
    seen = await guard.visible(request, [_target(d) for d in found])
    return wire.json_response({"dropped": [d.to_json() for d, ok in zip(found, seen, strict=True) if ok]})


@post(BASE + "/{dropped_id:str}/undrop", status_code=200)
async def undrop(dropped_id: FromPath[str], request: Request, ctx: Ctx) -> Response:
    gone = await wire.blocking(ctx.catalog.dropped_entry, _id(dropped_id))
    await guard.require_seen(request, _target(gone), missing_dropped(gone.id))
    await guard.require(
        request, [(Privilege.DROP, _target(gone)), (Privilege.CREATE, policy.namespace(gone.namespace))]
    )
    entry = await wire.blocking(ctx.catalog.undrop, gone.id)
    return wire.json_response({"kind": entry.kind, "namespace": list(entry.namespace), "name": entry.name})


@delete(BASE + "/{dropped_id:str}", status_code=202)
async def end_retention(dropped_id: FromPath[str], request: Request, ctx: Ctx) -> Response:
    gone = await wire.blocking(ctx.catalog.dropped_entry, _id(dropped_id))
    await guard.require_seen(request, _target(gone), missing_dropped(gone.id))
    await guard.require(request, [(Privilege.PURGE if gone.purge else Privilege.DROP, _target(gone))])
    ended = await wire.blocking(ctx.catalog.end_retention, gone.id)
    return wire.json_response(ended.to_json(), status=202)


def _id(raw: str) -> int:
    if not raw.isdigit() or len(raw) > 18:
        raise errors.BadRequest("A dropped entry's id is a number")
    return int(raw)


def _target(gone: Dropped) -> policy.Target:
    return policy.entry(gone.kind, gone.namespace, gone.name)


ROUTES = [list_dropped, undrop, end_retention]
