"""``GET /v1/config``: what a client merges into its properties before anything else.

The ``endpoints`` list is derived from the routes the app actually serves (see ``advertised``), so
it can never claim an operation that is not there, nor hide one that is.
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.params import FromQuery

from catalog import errors
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.settings import PlanningSettings

_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_NOT_ADVERTISED = ("/v1/config", "/v1/oauth/tokens")


@get("/v1/config")
async def get_config(request: Request, ctx: Ctx, warehouse: FromQuery[str | None] = None) -> Response:
    """``?warehouse=<name>``: that warehouse's answer (its ``prefix`` and storage defaults); 404
    (``NoSuchWarehouseException``) for a name that is none (``server.warehouses.Registry.for_config``)
    and, when grants are enforced, for a created warehouse the caller holds no grant in (none on
    the catalog, the warehouse or anything in it): the same answer, so a name tells nothing."""
    if warehouse is None or ctx.prefix == warehouse:
        return wire.raw_json_response(ctx.config_body)
    if len(warehouse) > 1024:
        raise errors.NoSuchWarehouse("Warehouse does not exist")
    chosen = ctx.registry().for_config(warehouse)
    if chosen.access.warehouse is not None and not await guard.holds_any(request, chosen.access):
        raise errors.NoSuchWarehouse.named(warehouse)
    return wire.raw_json_response(chosen.config_body)


def body(
    prefix: str,
    planning: PlanningSettings,
    idempotency_lifetime: int,
    client_io: dict[str, str],
    served: list[HTTPRouteHandler],
) -> dict[str, Any]:
    """The config answer: the storage properties every client is told, the overrides (the
    namespace separator, the warehouse's ``prefix``), the scan planning mode, the idempotency-key
    lifetime (seconds, 0: keys off) and the served endpoints."""
    overrides: dict[str, str] = {"namespace-separator": "%1F"}
    if prefix:
        overrides["prefix"] = prefix
    defaults = dict(client_io)
    if planning.scan_planning_mode == "server":  # pyiceberg reads the mode here only
        (overrides if planning.scan_planning_config == "overrides" else defaults)["scan-planning-mode"] = "server"
    config: dict[str, Any] = {"defaults": defaults, "overrides": overrides}
    if idempotency_lifetime:
        config["idempotency-key-lifetime"] = f"PT{idempotency_lifetime}S"
    return {**config, "endpoints": advertised(served)}


def advertised(handlers: list[HTTPRouteHandler]) -> list[str]:
    """``"<METHOD> /v1/{prefix}/..."`` for every catalog route, in the form clients match on."""
    out = []
    for handler in handlers:
        for path in handler.paths:
            if not path.startswith("/v1/") or path in _NOT_ADVERTISED:
                continue
            # Java's ResourcePaths spells the plan id ``{plan-id}``; a Litestar parameter cannot
            template = "/v1/{prefix}/" + _PARAM.sub(r"{\1}", path[len("/v1/") :]).replace("{plan_id}", "{plan-id}")
            out.extend(f"{method} {template}" for method in sorted(handler.http_methods))
    return sorted(set(out))


ROUTES = [get_config]
