"""Wiring: settings -> engine, storage, service; routes; the Iceberg error body; raw-path routing.

``create_app(settings)`` returns the ASGI application. Only this module and ``api/`` import litestar.
"""

from __future__ import annotations

import ctypes
import logging
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from litestar import Litestar, Request, Response
from litestar.di import Provide
from litestar.exceptions import HTTPException
from litestar.middleware import DefineMiddleware
from pydantic import ValidationError

from catalog import errors, logs, metrics
from catalog.api import config as config_api
from catalog.api import entries, idempotency, management, namespaces, oauth, operations, unserved, wire
from catalog.api import signing as signing_api
from catalog.auth import identity
from catalog.auth.grants import Access
from catalog.service import Catalog
from catalog.settings import Settings
from catalog.storage import signing, vending
from catalog.storage.backends import create_storage
from catalog.storage.metadata_files import MetadataFiles
from catalog.storage.purge import client_io_properties
from catalog.store import migrate
from catalog.store.db import create_engine
from catalog.store.entries import Store

log = logging.getLogger("catalog")
audit_log = logging.getLogger("catalog.audit")
access_log = logging.getLogger("catalog.access")
# Probes and scrapes come every few seconds: their access lines are at debug, the others at info.
_QUIET_ROUTES = frozenset({"/health/live", "/health/ready", "/metrics"})
_MUTATING = frozenset({"POST", "PUT", "DELETE", "PATCH"})

CATALOG_ROUTES = [*namespaces.ROUTES, *entries.ROUTES]
# /v1/<prefix>/<resource>...: the optional prefix segment clients insert after /v1/.
_PREFIXED = re.compile(r"^/v1/([^/]+)/(namespaces|tables|views|transactions)(/.*)?$")
_UNPREFIXED_FIRST = {"namespaces", "tables", "views", "transactions", "config", "oauth"}


class RequestObservation:
    """Per request: an id (``X-Request-Id``, taken from the client or made up) in logs and the
    response, the request count and latency by route template and status, the access line (method,
    route template, status, duration, principal when authentication is on; info, probes and scrapes
    at debug), and the audit line of each mutating request and each refusal (principal, action,
    object, outcome, request id; the principal and object as the route's authorization check
    recorded them)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")[:64]
        rid = incoming or uuid.uuid4().hex[:16]
        token = logs.request_id.set(rid)
        scope["audit"] = audit = {}
        status = 500
        start = time.perf_counter()

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            handler = scope.get("route_handler")
            route = handler.paths and sorted(handler.paths)[0] if handler is not None else "unmatched"
            seconds = time.perf_counter() - start
            metrics.REQUESTS.labels(scope["method"], route, str(status)).inc()
            metrics.REQUEST_SECONDS.labels(scope["method"], route).observe(seconds)
            _access(scope, route, status, seconds, audit)
            if scope["method"] in _MUTATING or status in (401, 403):
                _audit(scope, handler, audit, status)
            logs.request_id.reset(token)


def _access(scope: dict[str, Any], route: str, status: int, seconds: float, audit: dict[str, Any]) -> None:
    level = logging.DEBUG if route in _QUIET_ROUTES else logging.INFO
    if not access_log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "method": scope["method"],
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
    }
    who = scope.get("principal")
    if who is not None and who is not identity.ANONYMOUS:  # authentication is on
        fields["principal"] = audit.get("principal") or who.name
    access_log.log(
        level, "%s %s -> %s in %.1f ms", scope["method"], route, status, seconds * 1000, extra={"fields": fields}
    )


def _audit(scope: dict[str, Any], handler: Any, audit: dict[str, Any], status: int) -> None:
    who = scope.get("principal")
    fields = {
        "principal": audit.get("principal") or (who.name if who is not None else None),
        "action": handler.handler_name if handler is not None else "unmatched",
        "object": audit.get("object"),
        "privileges": audit.get("privileges"),
        "outcome": "allowed" if status < 400 else ("denied" if status in (401, 403) else "failed"),
        "status": status,
        "method": scope["method"],
        "path": scope.get("path"),
    }
    audit_log.info(
        "%s %s %s -> %s",
        fields["principal"],
        fields["action"],
        fields["object"] or "-",
        status,
        extra={"fields": fields},
    )


class RawPathRouting:
    """Route on the raw (still percent-encoded) path, with the optional ``{prefix}`` removed.

    ASGI's ``path`` is already decoded, which would turn a ``%2F`` inside a name into a path
    separator and lose the ``%1F`` boundaries between namespace levels. Handlers decode their path
    parameters themselves (``api.wire``).
    """

    def __init__(self, app: Litestar, prefix: str) -> None:
        self.app = app
        self.prefix = prefix
        # Outside Litestar, so that requests no route matches (404) are observed and logged too.
        self.observed = RequestObservation(app)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            path = raw.decode("latin-1") if raw else scope["path"]
            match = _PREFIXED.match(path)
            if match and match.group(1) not in _UNPREFIXED_FIRST:
                if self.prefix and match.group(1) != self.prefix:
                    await _send_error(send, errors.NoSuchWarehouse(f"Warehouse does not exist: {match.group(1)}"))
                    return
                path = f"/v1/{match.group(2)}{match.group(3) or ''}"
            scope = {**scope, "path": path}
        await self.observed(scope, receive, send)

    def __getattr__(self, name: str) -> Any:  # expose the Litestar app's attributes (state, routes)
        return getattr(self.app, name)


def create_app(settings: Settings | None = None) -> RawPathRouting:
    settings = settings or Settings()
    handlers = [
        *config_api.ROUTES,
        *CATALOG_ROUTES,
        *signing_api.ROUTES,
        *operations.ROUTES,
        *oauth.ROUTES,
        *management.ROUTES,
        *unserved.ROUTES,
    ]
    for warning in identity.check_settings(settings):  # ConfigurationError: refused before anything starts
        log.warning("%s", warning)
    authenticator = identity.Authenticator.from_settings(settings)
    limiter = identity.FailureLimiter()
    limiter.track(list(authenticator.builtin.clients))

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        engine = create_engine(settings)
        # `serve` migrated before starting the workers; this covers other ways of running the app.
        if (settings.is_sqlite or settings.auto_migrate) and not migrate.is_at_head(engine):
            migrate.upgrade(engine)
        storage = create_storage(settings)
        files = MetadataFiles(storage, settings.metadata_cache_bytes)
        store = Store(engine)
        app.state.catalog = Catalog(settings, store, storage, files)
        app.state.access = Access(settings, store)
        if settings.authz_bootstrap:
            app.state.access.bootstrap(settings.authz_bootstrap)
        # Rows from before migration 0003 get their locations in the background (a no-op after).
        threading.Thread(target=_backfill, args=(app.state.catalog,), name="backfill", daemon=True).start()
        app.state.authenticator = authenticator
        app.state.limiter = limiter
        # Remote signing is served, and advertised, only when switched on for an S3 warehouse.
        signs = settings.s3_remote_signing and signing.is_s3(settings.warehouse)
        app.state.signer = signing.Signer(settings) if signs else None
        served = [*CATALOG_ROUTES, *(signing_api.ROUTES if signs else [])]
        app.state.config_body = orjson.dumps(_config(settings, config_api.advertised(served)))
        app.state.client_io = client_io_properties(settings)
        app.state.table_config = orjson.dumps(app.state.client_io)
        app.state.vendor = vending.Vendor(settings) if settings.s3_vend_credentials else None
        app.state.prefix = settings.prefix
        metrics.GAUGES.add("catalog_metadata_cache_hits", "Metadata file reads served from memory", lambda: files.hits)
        metrics.GAUGES.add("catalog_metadata_cache_misses", "Metadata file reads from storage", lambda: files.misses)
        metrics.GAUGES.add(
            "catalog_metadata_cache_bytes", "Memory charged to cached metadata files", lambda: files.cached_bytes
        )
        metrics.GAUGES.add("catalog_db_pool_checked_out", "Database connections in use", engine.pool.checkedout)
        metrics.GAUGES.add("catalog_db_pool_size", "Database pool size", engine.pool.size)
        publishing = metrics.GAUGES.publish_every(metrics.GAUGE_PUBLISH_SECONDS)  # several workers only
        try:
            yield
        finally:
            publishing.set()
            metrics.process_exited()
            engine.dispose()

    app = Litestar(
        route_handlers=handlers,
        dependencies={"payload": Provide(_raw_body)},
        lifespan=[lifespan],
        exception_handlers={Exception: _error_response},
        request_max_body_size=settings.max_request_bytes,
        middleware=[
            DefineMiddleware(
                oauth.BearerAuth,
                authenticator=authenticator,
                required=settings.auth_required,
                metrics_token=settings.metrics_token,
            ),
            DefineMiddleware(
                idempotency.Idempotency,
                lifetime_seconds=settings.idempotency_key_lifetime_seconds,
                max_body_bytes=settings.max_request_bytes,
            ),
        ],
        logging_config=None,  # logging is configured once, by the CLI (catalog.logs)
        openapi_config=None,
        debug=False,
    )
    return RawPathRouting(app, settings.prefix)


def _backfill(catalog: Catalog) -> None:
    try:
        if filled := catalog.backfill_locations():
            log.info("recorded the locations of %d tables and views created before this version", filled)
    except Exception as e:  # noqa: BLE001 - retried at the next start; ownership checks skip NULL rows
        log.warning("could not record the locations of older tables and views: %s", e)


async def _raw_body(request: Request) -> bytes:
    """The request body as bytes: handlers parse it themselves with the Iceberg models."""
    return await request.body()


def _config(settings: Settings, endpoints: list[str]) -> dict[str, Any]:
    overrides: dict[str, str] = {"namespace-separator": "%1F"}
    if settings.prefix:
        overrides["prefix"] = settings.prefix
    config: dict[str, Any] = {"defaults": client_io_properties(settings), "overrides": overrides}
    if settings.idempotency_key_lifetime_seconds:
        config["idempotency-key-lifetime"] = f"PT{settings.idempotency_key_lifetime_seconds}S"
    return {**config, "endpoints": endpoints}


def _error_response(request: Request, exc: Exception) -> Response:
    err = _as_iceberg(exc)
    if err.code == 503:  # an unreachable dependency: expected in operation, no traceback needed
        log.warning("%s %s -> 503: %s", request.method, request.url.path, err.message)
    elif err.code >= 500:  # the details (SQL, stack) go to the log only; the body has the request id
        detail = err.message if err is exc else f"{type(exc).__name__}: {exc}"
        log.error("%s %s -> %s: %s", request.method, request.url.path, err.code, detail, exc_info=exc)
    status, headers, body = errors.render(err, head=request.method == "HEAD")
    return Response(content=body or None, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


def _as_iceberg(exc: Exception) -> errors.IcebergError:
    """The Iceberg error for any exception. One that is not an Iceberg error is a bug: its text may
    hold SQL, parameters or file content, so the client gets a fixed message with the request id
    (the log line with the details carries the same id)."""
    if isinstance(exc, errors.IcebergError):
        return exc
    if isinstance(exc, ValidationError):
        return errors.BadRequest(f"Malformed request: {wire.describe(exc)}")
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        code = exc.status_code
        if code == 404:
            return errors.FromFramework(f"No route for this path: {exc.detail}", 404, "NotFoundException")
        if code == 413:  # Litestar's request_max_body_size; the same error as api.idempotency's
            return errors.RequestTooLarge()
        if code == 405:
            return errors.FromFramework(f"Malformed request: {exc.detail}", 405, "MethodNotAllowedException")
        return errors.FromFramework(f"Malformed request: {exc.detail}", code)
    rid = logs.request_id.get() or "none"
    message = f"Internal server error (request id {rid}); the details are in the server log"
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    return errors.FromFramework(message, code, "InternalServerError")


async def _send_error(send: Any, err: errors.IcebergError) -> None:
    status, headers, body = errors.render(err)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def app_from_env() -> RawPathRouting:
    """Factory for uvicorn (``--factory``), in each worker process: settings from the environment."""
    _large_buffers_from_the_heap()
    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)  # worker processes start without it (audit lines)
    return create_app(settings)


def _large_buffers_from_the_heap() -> None:
    """Serve allocations up to 64 MiB from glibc's heap instead of fresh ``mmap`` pages.

    A commit or load of a big table builds a few buffers of the whole file (its JSON, the response):
    with glibc's default, each comes from new pages that fault in one by one and go back to the
    system on free. Measured on a 4.4 MB metadata file (10,000 snapshots): joining the response
    5.7 ms -> 1.2 ms. Freed memory stays in the process for reuse (up to 128 MiB is kept), a
    bounded cost next to the metadata cache. A no-op where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 2**20)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 2**20)
    except (OSError, AttributeError):  # not glibc (musl, macOS): its defaults stand
        pass


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
