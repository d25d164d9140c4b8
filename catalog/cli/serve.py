"""``iceberg-catalog serve``: the REST catalog server (uvicorn, one process or several workers)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from catalog.cli import local
from catalog.server.flags import FLAGS

if TYPE_CHECKING:
    from catalog.settings import Settings


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the REST catalog server")
    for field, flag in FLAGS.items():
        serve.add_argument(flag, dest=field, help=f"overrides CATALOG_{field.upper()}")


def run(args: argparse.Namespace) -> int:
    settings = local.settings_from(args)
    if isinstance(settings, int):
        return settings
    from catalog.server import startup
    from catalog.settings import ConfigurationError

    try:
        startup.check_settings(settings)  # here too, so that a refusal is one line, not a traceback per worker
    except ConfigurationError as e:
        print(f"iceberg-catalog: configuration error: {e}", file=sys.stderr)
        return 2
    if settings.auth.authz_bootstrap:  # refuse a broken policy file before serving, in one line
        from catalog.auth.grants import read_bootstrap

        try:
            read_bootstrap(settings.auth.authz_bootstrap)
        except ValueError as e:
            print(f"iceberg-catalog: {e}", file=sys.stderr)
            return 2
    try:
        return _serve(settings)
    except startup.Refused as e:
        local.traceback_if_debug()
        print(f"iceberg-catalog: {e}", file=sys.stderr)
        return 2


def _serve(settings: Settings) -> int:
    """Bind the port, then migrate, then start the workers: a busy port fails before the database is
    touched, and a database that cannot be reached is one line (``startup``), in the parent process."""
    import shutil
    import tempfile

    import uvicorn
    from uvicorn.supervisors import Multiprocess

    from catalog import logs
    from catalog.server import startup
    from catalog.server.connections import BoundedHttpProtocol

    # One process answers /metrics from its own registry; several get a fresh directory below.
    # (Before anything imports prometheus-client, which reads this variable once.)
    os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    max_connections = _fit_connections(settings.server.max_connections)
    # The protocol reads its limits from the environment in each worker process: pass the lowered cap.
    os.environ["CATALOG_MAX_CONNECTIONS"] = str(max_connections)
    if settings.auth.token_secret is None:  # one page-token key for all the workers (catalog/api/paging.py)
        import secrets

        from catalog.api.paging import SHARED_KEY_ENV

        os.environ.setdefault(SHARED_KEY_ENV, secrets.token_hex(32))
    sock = startup.listen(settings)
    startup.prepare_warehouse(settings)
    startup.prepare_database(settings)
    if settings.warehouses.warehouses_file:  # checked here, in one line; applied (and probed) by each worker at start
        from catalog.server.warehouses import read_file

        try:
            read_file(settings.warehouses.warehouses_file, settings)
        except ValueError as e:
            raise startup.Refused(str(e)) from None
    config = uvicorn.Config(
        "catalog.server.app:app_from_env",
        factory=True,
        host=settings.server.host,
        port=settings.server.port,
        workers=settings.server.workers,
        log_level=settings.server.log_level,
        # Applied by uvicorn in this process and first thing in every worker process: JSON everywhere.
        log_config=logs.dict_config(settings.server.log_level, settings.server.log_format),
        access_log=False,  # the access lines are catalog.access's (app.RequestObservation)
        # The peer is the client: X-Forwarded-For is read only from CATALOG_TRUSTED_PROXIES (auth/lockout.py),
        # not from any local peer as uvicorn's default would.
        proxy_headers=False,
        timeout_graceful_shutdown=30,
        # Deadlines for incomplete requests and the connection cap (uvicorn has neither): connections.py.
        http=BoundedHttpProtocol,
        ws="none",  # no WebSocket routes: an Upgrade request is served as plain HTTP
        # +1: uvicorn counts the connection asking among the open ones; it also bounds running requests.
        limit_concurrency=max_connections + 1,
        # Longer than clients' pooled-connection idle time: a server closing an idle keep-alive
        # connection just as a client reuses it makes the client see "connection aborted".
        timeout_keep_alive=settings.server.idle_timeout_seconds,
    )
    startup.announce(settings)
    if settings.server.workers == 1:
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
        return 0 if server.started else 1
    # Several workers: each writes its metrics into files in a fresh directory that /metrics, in
    # whichever worker serves it, adds up (prometheus-client's multiprocess mode, see metrics.py).
    try:
        shared = tempfile.mkdtemp(prefix="iceberg-catalog-metrics-")
    except OSError as e:
        raise startup.Refused(
            f"--workers {settings.server.workers} needs a writable temporary directory for the workers' metrics: {e} "
            "(set TMPDIR to one)"
        ) from e
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = shared
    try:
        Multiprocess(config, sockets=[sock]).run()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    return 0


# Descriptors the process needs besides client connections: database pool, storage clients, logs...
_FD_RESERVE = 256


def _fit_connections(wanted: int) -> int:
    """Raise the soft open-file limit to the hard one, and lower the connection cap so that the
    connections, plus what the process needs besides, fit in it: refusing a connection with a 503 is
    better than failing accept() or a database connection with EMFILE."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:  # e.g. an unlimited hard limit some systems refuse
            logging.getLogger("catalog").warning("could not raise the open-file limit to %s: %s", hard, e)
    if soft == resource.RLIM_INFINITY or wanted + _FD_RESERVE <= soft:
        return wanted
    fitted = max(1, soft - _FD_RESERVE)
    logging.getLogger("catalog").warning(
        "max_connections %d does not fit the open-file limit %d: serving at most %d", wanted, soft, fitted
    )
    return fitted
