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
from catalog.console import routes as console
from catalog.database import migrate
from catalog.database.db import create_engine
from catalog.database.store import Store
from catalog.planning.task_tokens import PlanTokens
from catalog.server import startup
from catalog.server.background import start_parts
from catalog.server.memory import large_buffers_from_the_heap
from catalog.server.warehouses import Registry
from catalog.settings import Settings
from catalog.storage import signing, vending
from catalog.storage.backends import create_storage
from catalog.storage.metadata_files import MetadataFiles
from catalog.usecases import Catalog

log = logging.getLogger("catalog")

CATALOG_ROUTES = [*namespaces.ROUTES, *entries.ROUTES, *planning.ROUTES]


def build_catalog(settings: Settings, migrated: bool = False) -> Catalog:
    """The catalog service over its database and storage. ``migrated``: bring the schema to head
    first (what ``serve`` does for SQLite, or with ``CATALOG_AUTO_MIGRATE``). The caller owns it:
    ``catalog.close()`` when done."""
    engine = create_engine(settings.database)
    if migrated and not migrate.is_at_head(engine):
        migrate.upgrade(engine)
    storage = create_storage(settings.storage)
    store = Store(engine, settings.events.events_enabled)  # the parts, on one database: each goes where it is used
    return Catalog(
        settings,
        storage,
        MetadataFiles(storage, settings.storage.metadata_cache_bytes),
        db=store.db,
        pointers=store.pointers,
        entries=store.entries,
        dropped=store.dropped,
        tasks=store.tasks,
        outbox=store.outbox,
        leases=store.leases,
        grants=store.grants,
    )


class Serving:
    """What one app serves: its settings, the authentication it shares across warehouses, and the
    warehouses, which its ``lifespan`` opens before the first request (``registry``; None until then).
    The handlers' ``ctx`` and the raw-path router's ``knows`` read the registry from here."""

    def __init__(self, settings: Settings) -> None:
        for warning in startup.check_settings(settings):  # ConfigurationError: refused before anything starts
            log.warning("%s", warning)
        self.settings = settings
        self.authenticator = Authenticator.from_settings(settings.auth)
        self.limiter = FailureLimiter(parse_trusted_proxies(settings.auth.trusted_proxies))
        self.registry: Registry | None = None
        self._pages: paging.PageTokens | None = None
        self._plan_tokens: PlanTokens | None = None

    def ctx(self) -> AppState:
        """The handlers' ``ctx``: the AppState of the request's warehouse (``api.context.WAREHOUSE``).
        No parameters, so that resolving it costs no other injection (a ``State`` per request)."""
        return self.registry.state(WAREHOUSE.get())  # type: ignore[union-attr]  # opened before any request

    def knows(self, name: str) -> bool:
        """Whether a path's first segment names a warehouse served (every name, before the lifespan)."""
        return self.registry is None or self.registry.knows(name)

    @asynccontextmanager
    async def lifespan(self, app: Litestar) -> AsyncIterator[None]:
        settings = self.settings
        # `serve` migrated before starting the workers; this covers other ways of running the app.
        catalog = build_catalog(settings, migrated=settings.database.is_sqlite or settings.database.auto_migrate)
        default_names = settings.warehouses.default_warehouse_names
        access = Access(settings.auth, catalog.grants, default_names)
        if settings.auth.auth_required:  # grants from before principal kinds, settled against the built-in clients
            _settle_legacy_grants(access)
        if settings.auth.authz_bootstrap:
            access.bootstrap(settings.auth.authz_bootstrap)
        # Rows from before migrations 0003 and 0011 get their locations and write paths in the
        # background (a no-op after); each created warehouse's as it opens.
        threading.Thread(target=_backfill, args=(catalog,), name="backfill", daemon=True).start()
        self._pages = paging.PageTokens(settings.auth.token_secret, os.environ.get(paging.SHARED_KEY_ENV))
        self._plan_tokens = PlanTokens(settings.auth.token_secret, os.environ.get(paging.SHARED_KEY_ENV))

        def open_warehouse(of: Settings, name: str) -> tuple[AppState, list]:
            """Another warehouse: a catalog of its own on its database and storage (the grants are the
            server's, seen from that warehouse: ``auth.grants.in_warehouse``)."""
            opened = build_catalog(of)
            threading.Thread(target=_backfill, args=(opened,), name=f"backfill-{name}", daemon=True).start()
            seen = Access(of.auth, catalog.grants, default_names, warehouse=name)
            return self._state(of, opened, seen), start_parts(opened, name)

        app.state.ctx = self._state(settings, catalog, access)
        registry = self.registry = Registry(settings, app.state.ctx, open_warehouse, grants_changed=access.changed)
        registry.start()
        if settings.warehouses.warehouses_file:
            registry.bootstrap(settings.warehouses.warehouses_file)
        app.state.warehouses = registry
        _publish_gauges(registry)
        publishing = metrics.GAUGES.publish_every(metrics.GAUGE_PUBLISH_SECONDS)  # several workers only
        maintenance = start_parts(catalog)
        try:
            yield
        finally:
            registry.stop()
            for part in maintenance:
                part.stop()
            publishing.set()
            tracing.shutdown()
            metrics.process_exited()
            catalog.close()

    def _state(self, of: Settings, catalog: Catalog, access: Access) -> AppState:
        # Remote signing is served, and advertised, only when switched on for an S3 warehouse.
        signs = of.storage.s3_remote_signing and signing.is_s3(of.storage.warehouse)
        served = [
            *CATALOG_ROUTES,
            *(signing_api.ROUTES if signs else []),
            *(events.ROUTES if of.events.events_enabled else []),
        ]
        client_io = vending.client_io_properties(of.storage)
        lifetime = of.server.idempotency_key_lifetime_seconds
        config = config_api.body(of.warehouses.prefix, of.planning, lifetime, client_io, served)
        assert self._pages is not None and self._plan_tokens is not None  # made by the lifespan before any state
        return AppState(
            catalog=catalog,
            access=access,
            authenticator=self.authenticator,
            limiter=self.limiter,
            pages=self._pages,
            plan_tokens=self._plan_tokens,
            signer=signing.Signer(of.storage, of.warehouses.prefix) if signs else None,
            vendor=vending.create_vendor(of.storage),
            client_io=client_io,
            table_config=orjson.dumps(client_io),
            config_body=orjson.dumps(config),
            prefix=of.warehouses.prefix,
            registry=lambda: self.registry,
        )


def create_app(settings: Settings | None = None) -> Litestar:
    return _litestar(Serving(settings or Settings()))


def _litestar(serving: Serving) -> Litestar:
    settings = serving.settings
    events_on = settings.events.events_enabled  # the feed's routes, and the console's events page (/ui)
    handlers = [
        *config_api.ROUTES,
        *CATALOG_ROUTES,
        *(events.ROUTES if events_on else []),
        *signing_api.ROUTES,
        *operations.ROUTES,
        *oauth.ROUTES,
        *management.ROUTES,
        *warehouses_api.ROUTES,
        *maintenance.ROUTES,
        *dropped.ROUTES,
        *unserved.ROUTES,
        *docs.routes(docs.load_spec()),  # /docs and /openapi.json: the spec read and converted once, here
        *([console.router(settings.console, settings.auth, events_on)] if settings.console.console_enabled else []),
    ]
    return Litestar(
        route_handlers=handlers,
        dependencies={
            "ctx": Provide(serving.ctx, use_cache=False, sync_to_thread=False),
        },
        lifespan=[serving.lifespan],
        exception_handlers={Exception: error_response},
        request_max_body_size=settings.server.max_request_bytes,
        middleware=[
            DefineMiddleware(
                oauth.BearerAuth,
                authenticator=serving.authenticator,
                required=settings.auth.auth_required,
                metrics_token=settings.server.metrics_token,
                console=console.BASE if settings.console.console_enabled else None,
            ),
            DefineMiddleware(
                idempotency.Idempotency,
                lifetime_seconds=settings.server.idempotency_key_lifetime_seconds,
                max_body_bytes=settings.server.max_request_bytes,
            ),
        ],
        logging_config=None,  # logging is configured once, by the CLI (catalog.logs)
        openapi_config=None,
        debug=False,
    )


def app_from_env() -> RawPathRouting:
    """Factory for uvicorn (``--factory``), in each worker process: settings from the environment."""
    large_buffers_from_the_heap()
    settings = Settings()
    logs.configure(
        settings.server.log_level, settings.server.log_format
    )  # worker processes start without it (audit lines)
    serving = Serving(settings)
    app = _litestar(serving)
    if tracing.configure():  # OTEL_* asks for traces: a span per request, the commit's steps under it
        return RawPathRouting(Traced(app), serving.knows)
    return RawPathRouting(app, serving.knows)


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
