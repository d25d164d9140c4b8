"""Operational routes (not part of the Iceberg API): liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from litestar import Response, get
from litestar.datastructures import State
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..metrics import REGISTRY
from . import wire


@get("/health/live")
async def live() -> Response:
    """The process is up and serving HTTP."""
    return wire.json_response({"status": "ok"})


@get("/health/ready")
async def ready(state: State) -> Response:
    """Database reachable, schema at head, storage reachable: 200; otherwise 503 with the reasons."""
    checks = await wire.blocking(state.catalog.readiness)
    ok = all(v == "ok" for v in checks.values())
    return wire.json_response({"status": "ready" if ok else "not ready", "checks": checks}, status=200 if ok else 503)


@get("/metrics")
async def metrics() -> Response:
    return Response(content=generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)


ROUTES = [live, ready, metrics]
