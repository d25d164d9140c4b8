"""Wiring, and only wiring: settings -> database, storage, service, authentication -> one
``AppState`` -> routes. ``create_app(settings)`` returns the Litestar application;
``app_from_env`` (uvicorn's factory, in each worker) wraps it in the raw-path router.
``build_catalog(settings)`` is the one way a ``Catalog`` is put together (the app and the tests).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import orjson
from litestar import Litestar
from litestar.di import Provide
from litestar.middleware import DefineMiddleware

from catalog import logs, metrics, tracing
from catalog.api import config as config_api
from catalog.api import (
    docs,
    dropped,
    entries,
    events,
    idempotency,
    maintenance,
    management,
    namespaces,
    oauth,
    observation,
    operations,
    paging,
    planning,
    unserved,
)
from catalog.api import signing as signing_api
from catalog.api import warehouses as warehouses_api
from catalog.api.context import AppState
from catalog.api.exceptions import error_response
from catalog.api.routing import RawPathRouting
from catalog.api.selection import WAREHOUSE
from catalog.api.tracing import Traced
from catalog.auth.grants import Access
from catalog.auth.identity import Authenticator
from catalog.auth.lockout import FailureLimiter, parse_trusted_proxies
from catalog.planning.tokens import PlanTokens
from catalog.server import startup
from catalog.server.care import start_parts
from catalog.server.memory import large_buffers_from_the_heap
from catalog.server.warehouses import Registry
from catalog.service import Catalog
from catalog.settings import Settings
from catalog.storage import signing, vending
from catalog.storage.backends import create_storage
from catalog.storage.metadata_files import MetadataFiles
from catalog.store import migrate
from catalog.store.db import create_engine
from catalog.store.entries import Store

log = logging.getLogger("catalog")

CATALOG_ROUTES = [*namespaces.ROUTES, *entries.ROUTES, *planning.ROUTES]


def build_catalog(settings: Settings, migrated: bool = False) -> Catalog:
    """The catalog service over its database and storage. ``migrated``: bring the schema to head
    first (what ``serve`` does for SQLite, or with ``CATALOG_AUTO_MIGRATE``). The caller owns it:
    ``catalog.close()`` when done."""
    engine = create_engine(settings)
    if migrated and not migrate.is_at_head(engine):
        migrate.upgrade(engine)
    storage = create_storage(settings)
    store = Store(engine, settings.events_enabled)  # the parts, on one database: each goes where it is used
    return Catalog(
        settings,
        storage,
        MetadataFiles(storage, settings.metadata_cache_bytes),
        db=store.db,
        pointers=store.pointers,
        entries=store.entries,
        dropped=store.dropped,
        tasks=store.tasks,
        outbox=store.outbox,
        leases=store.leases,
        grants=store.grants,
    )


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or Settings()
    handlers = [
        *config_api.ROUTES,
        *CATALOG_ROUTES,
        *(events.ROUTES if settings.events_enabled else []),
        *signing_api.ROUTES,
        *operations.ROUTES,
        *oauth.ROUTES,
        *management.ROUTES,
        *warehouses_api.ROUTES,
        *maintenance.ROUTES,
        *dropped.ROUTES,
        *unserved.ROUTES,
        *docs.routes(docs.load_spec()),  # /docs and /openapi.json: the spec read and converted once, here
    ]
    for warning in startup.check_settings(settings):  # ConfigurationError: refused before anything starts
        log.warning("%s", warning)
    authenticator = Authenticator.from_settings(settings)
    limiter = FailureLimiter(parse_trusted_proxies(settings.trusted_proxies))
    registry: list[Registry] = []  # the warehouses served, once the lifespan opened them

    def ctx() -> AppState:
        """The handlers' ``ctx``: the AppState of the request's warehouse (``api.context.WAREHOUSE``),
        from the registry the lifespan made before the first request. No parameters, so that
        resolving it costs no other injection (a ``State`` per request)."""
        return registry[0].state(WAREHOUSE.get())

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        # `serve` migrated before starting the workers; this covers other ways of running the app.
        catalog = build_catalog(settings, migrated=settings.is_sqlite or settings.auto_migrate)
        access = Access(settings, catalog.grants)
        if settings.auth_required:  # grants from before principal kinds, settled against the built-in clients
            _settle_legacy_grants(access)
        if settings.authz_bootstrap:
            access.bootstrap(settings.authz_bootstrap)
        # Rows from before migrations 0003 and 0011 get their locations and write paths in the
        # background (a no-op after); each created warehouse's as it opens.
        threading.Thread(target=_backfill, args=(catalog,), name="backfill", daemon=True).start()
        pages = paging.PageTokens(settings.token_secret, os.environ.get(paging.SHARED_KEY_ENV))
        plan_tokens = PlanTokens(settings.token_secret, os.environ.get(paging.SHARED_KEY_ENV))

        def state(of: Settings, catalog: Catalog, access: Access) -> AppState:
            # Remote signing is served, and advertised, only when switched on for an S3 warehouse.
            signs = of.s3_remote_signing and signing.is_s3(of.warehouse)
            served = [
                *CATALOG_ROUTES,
                *(signing_api.ROUTES if signs else []),
                *(events.ROUTES if of.events_enabled else []),
            ]
            client_io = vending.client_io_properties(of)
            return AppState(
                catalog=catalog,
                access=access,
                authenticator=authenticator,
                limiter=limiter,
                pages=pages,
                plan_tokens=plan_tokens,
                signer=signing.Signer(of) if signs else None,
                vendor=vending.create_vendor(of),
                client_io=client_io,
                table_config=orjson.dumps(client_io),
                config_body=orjson.dumps(config_api.body(of, client_io, served)),
                prefix=of.prefix,
                registry=lambda: registry[0],
            )

        def open_warehouse(of: Settings, name: str) -> tuple[AppState, list]:
            """Another warehouse: a catalog of its own on its database and storage (the grants are the
            server's, seen from that warehouse: ``auth.grants.in_warehouse``)."""
            opened = build_catalog(of)
            threading.Thread(target=_backfill, args=(opened,), name=f"backfill-{name}", daemon=True).start()
            return state(of, opened, Access(of, catalog.grants, warehouse=name)), start_parts(opened, name)

        app.state.ctx = state(settings, catalog, access)
        registry[:] = [Registry(settings, app.state.ctx, open_warehouse, grants_changed=access.changed)]
        registry[0].start()
        if settings.warehouses_file:
            registry[0].bootstrap(settings.warehouses_file)
        app.state.warehouses = registry[0]
        _publish_gauges(registry[0])
        publishing = metrics.GAUGES.publish_every(metrics.GAUGE_PUBLISH_SECONDS)  # several workers only
        care = start_parts(catalog)
        try:
            yield
        finally:
            registry[0].stop()
            for part in care:
                part.stop()
            publishing.set()
            tracing.shutdown()
            metrics.process_exited()
            catalog.close()

    app = Litestar(
        route_handlers=handlers,
        dependencies={
            "ctx": Provide(ctx, use_cache=False, sync_to_thread=False),
        },
        lifespan=[lifespan],
        exception_handlers={Exception: error_response},
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
    return app


def app_from_env() -> RawPathRouting:
    """Factory for uvicorn (``--factory``), in each worker process: settings from the environment."""
    large_buffers_from_the_heap()
    settings = Settings()
    logs.configure(settings.log_level, settings.log_format)  # worker processes start without it (audit lines)
    app = create_app(settings)

    served: list[Registry] = []  # app.state.warehouses, kept here once set: a State lookup per request cost ~1 us

    def knows(name: str) -> bool:  # the warehouses, once the lifespan opened them
        if not served:
            registry = getattr(app.state, "warehouses", None)
            if registry is None:
                return True
            served.append(registry)
        return served[0].knows(name)

    if tracing.configure():  # OTEL_* asks for traces: a span per request, the commit's steps under it
        return RawPathRouting(Traced(app), knows)
    return RawPathRouting(app, knows)


def _publish_gauges(registry: Registry) -> None:
    """The cache, pool and queue gauges, each the sum over the warehouses served at scrape time (the
    default's alone until one is created: the series dashboards already read keep their meaning)."""

    def each(read: Callable[[Catalog], float]) -> list[float]:
        return [read(s.catalog) for s in [registry.default, *registry.opened().values()]]

    def total(read: Callable[[Catalog], float]) -> Callable[[], float]:
        return lambda: sum(each(read))

    def queued(c: Catalog) -> float:
        return sum(v for k, v in c.tasks.queue_depth().items() if k in ("queued", "running"))

    def oldest(c: Catalog) -> float:
        return c.tasks.queue_depth()["oldest_queued_age_ms"] / 1000

    add = metrics.GAUGES.add
    add("catalog_http_requests_pending", "HTTP requests read and not yet answered", lambda: observation.PENDING.count)
    add("catalog_metadata_cache_hits", "Metadata file reads served from memory", total(lambda c: c.files.hits))
    add("catalog_metadata_cache_misses", "Metadata file reads from storage", total(lambda c: c.files.misses))
    cached = total(lambda c: c.files.cached_bytes)
    add("catalog_metadata_cache_bytes", "Memory charged to cached metadata files", cached)
    add("catalog_db_pool_checked_out", "Database connections in use", total(lambda c: c.db.engine.pool.checkedout()))
    add("catalog_db_pool_size", "Database pool size", total(lambda c: c.db.engine.pool.size()))
    add("catalog_maintenance_queue_depth", "Maintenance tasks queued or running", total(queued), shared_by_workers=True)
    add(
        "catalog_maintenance_oldest_queued_age_seconds",
        "Age of the oldest due maintenance task that waits for a worker",
        lambda: max(each(oldest)),
        shared_by_workers=True,
    )


def _backfill(catalog: Catalog) -> None:
    try:
        if filled := catalog.backfill_locations():
            log.info("recorded the locations of %d tables and views created before this version", filled)
    except Exception as e:  # noqa: BLE001 - retried at the next start; ownership checks skip NULL rows
        log.warning("could not record the locations of older tables and views: %s", e)


def _settle_legacy_grants(access: Access) -> None:
    try:
        access.settle_legacy()
    except Exception as e:  # noqa: BLE001 - e.g. the schema not migrated yet: they stay marked, settled at a later start
        log.warning("could not settle the grants made before principal kinds (retried at the next start): %s", e)
