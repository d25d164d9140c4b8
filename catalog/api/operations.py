"""Operational routes (not part of the Iceberg API): an index, liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future

from litestar import Response, get
from prometheus_client import CONTENT_TYPE_LATEST

from catalog import __version__
from catalog.api import wire
from catalog.api.context import Ctx
from catalog.metrics import exposition

DOCS = "https://github.com/apache/iceberg/blob/main/open-api/rest-catalog-open-api.yaml"


@get("/")
async def index() -> Response:
    """What this server is and where to go next (a browser or curl pointed at the bare URL)."""
    return wire.json_response(
        {
            "name": "iceberg-catalog",
            "description": "Apache Iceberg REST catalog",
            "version": __version__,
            "links": {
                "config": "/v1/config",
                "live": "/health/live",
                "ready": "/health/ready",
                "metrics": "/metrics",
                "docs": "/docs",
                "openapi": "/openapi.json",
                "iceberg_rest_spec": DOCS,
            },
        }
    )


@get("/health/live")
async def live() -> Response:
    """The process is up and serving HTTP."""
    return wire.json_response({"status": "ok"})


# Readiness answers within this bound whatever its dependencies do (a stalled store, a hung database).
READY_WITHIN_S = 2.0


@get("/health/ready")
async def ready(ctx: Ctx) -> Response:
    """Database reachable, schema at head, storage reachable: 200; otherwise 503 with the reasons.
    ``checks`` are the default warehouse's; ``warehouses`` (when any was created) each created
    warehouse's own database and schema, by name, so a 503 says which warehouse is not ready.

    The checks run on the services' own threads and are awaited here, never on a request thread:
    when every request thread waits on a stalled dependency, readiness still answers."""
    probes = ctx.catalog.probe()
    theirs = {name: state.catalog.probe(storage=False) for name, state in ctx.registry().opened().items()}
    waited = [*probes.values(), *(f for each in theirs.values() for f in each.values())]
    await asyncio.wait([asyncio.wrap_future(f) for f in waited], timeout=READY_WITHIN_S)
    checks = {name: _outcome(f) for name, f in probes.items()}
    warehouses = {w: {name: _outcome(f) for name, f in each.items()} for w, each in sorted(theirs.items())}
    ok = all(v == "ok" for v in [*checks.values(), *(v for each in warehouses.values() for v in each.values())])
    body = {"status": "ready" if ok else "not ready", "checks": checks}
    if warehouses:
        body["warehouses"] = warehouses
    return wire.json_response(body, status=200 if ok else 503)


def _outcome(probe: Future) -> str:
    if not probe.done():
        return f"no answer within {READY_WITHIN_S:g} s"
    error = probe.exception()
    # an Iceberg error's message says what failed, not where (no paths, hosts, driver text); any other
    # error's text may: only its type
    return "ok" if error is None else (getattr(error, "message", None) or type(error).__name__)[:300]


@get("/metrics")
async def metrics() -> Response:
    return Response(content=exposition(), media_type=CONTENT_TYPE_LATEST)


ROUTES = [index, live, ready, metrics]
