"""What ``iceberg-catalog serve`` does before the workers start, in the parent process, in order:

1. the settings are valid (a refusal is one line naming the variable and its flag: ``invalid``);
2. the port is bound (``listen``): a busy port fails here, before the database is touched;
3. a local warehouse is created if missing and proved writable (``prepare_warehouse``): one line naming
   ``CATALOG_WAREHOUSE``;
4. the database is reached and migrated (``prepare_database``): one line saying what failed where;
5. the summary (version, URL, database with its password masked, warehouse, auth, workers) and one
   warning per risky setting (``summary``, ``risky``).

A refusal raises ``Refused`` (the CLI prints its message and exits 2); with ``--log-level debug`` the
CLI prints the traceback too.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import sqlalchemy.exc
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from catalog import __version__, logs
from catalog.auth import identity
from catalog.database import migrate
from catalog.database.db import create_engine
from catalog.delivery import sinks
from catalog.server.flags import FLAGS
from catalog.settings import Settings, unknown_variables
from catalog.storage import azure, gcs, vending

log = logging.getLogger("catalog")

# Settings whose value is never repeated in a message (they may hold a password or a key).
_SECRET = ("database_url", "secret", "token", "clients", "key")


class Refused(Exception):
    """The server cannot start; the message is one line naming the setting and what to do."""


def check_settings(settings: Settings) -> list[str]:
    """Raise ``ConfigurationError`` for a configuration the server must not run with (each wing checks
    its own settings); return the warnings."""
    storage = settings.storage
    azure.check_settings(storage)  # an Azure or GCS warehouse the server could not reach
    gcs.check_settings(storage)
    vending.check_settings(storage)  # storage access: vending without STS
    sinks.parse_webhooks(settings.events.events_webhooks)  # change events: the webhook sinks
    auth = identity.check_settings(settings.auth, settings.server.workers, settings.database.is_sqlite)
    return [*gcs.client_access_warnings(storage), *auth]


def setting_name(field: str) -> str:
    """``CATALOG_PORT (--port)`` for a settings field."""
    env = f"CATALOG_{field.upper()}"
    return f"{env} ({FLAGS[field]})" if field in FLAGS else env


def invalid(e: ValidationError) -> list[str]:
    """One line per invalid setting, naming it, saying what is wrong and what it got."""
    lines = []
    for err in e.errors():
        field = str(err["loc"][0]) if err["loc"] else "?"
        message = err["msg"].removeprefix("Value error, ")
        got = "" if any(s in field for s in _SECRET) else f"; got {err.get('input')!r}"
        lines.append(f"{setting_name(field)}: {message}{got}")
    return lines


def masked(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - validated before; never print a password by accident
        return url.split("://", 1)[0] + "://..."


def sqlite_path(settings: Settings) -> Path | None:
    """The SQLite file (absolute), or None for PostgreSQL and in-memory SQLite."""
    if not settings.database.is_sqlite:
        return None
    database = make_url(settings.database.database_url).database
    if not database or database == ":memory:":
        return None
    return Path(database).expanduser().resolve()


def local_warehouse(settings: Settings) -> Path | None:
    """The local warehouse directory (absolute), or None for an S3, Azure or GCS warehouse."""
    if settings.storage.storage_kind != "local":
        return None
    return Path(settings.storage.warehouse.removeprefix("file://")).expanduser().resolve()


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: assume it is reachable from elsewhere
        return False


def url(settings: Settings) -> str:
    host = settings.server.host
    shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{settings.server.port}"


def auth_mode(settings: Settings) -> str:
    if not settings.auth.auth_required:
        return "off (no token needed; anyone who reaches the port may do anything)"
    from catalog.auth.tokens import parse_clients

    ways = []
    if clients := parse_clients(settings.auth.oauth_clients):
        ways.append(f"{len(clients)} built-in client{'s' if len(clients) > 1 else ''}")
    if settings.auth.oidc_issuer or settings.auth.oidc_jwks_url:
        ways.append(f"OIDC {settings.auth.oidc_issuer or settings.auth.oidc_jwks_url}")
    return f"on ({', '.join(ways)}; authorization: {settings.auth.authorization})"


def dropped_mode(settings: Settings) -> str:
    seconds = settings.maintenance.drop_retention
    if seconds == 0:
        kept = "not kept (CATALOG_DROP_RETENTION=0): released at once, a requested purge queued at once"
    else:
        span = f"{seconds / 86400:g} days" if seconds >= 86400 else f"{seconds / 3600:g} h"
        kept = f"kept {span}, restorable (`iceberg-catalog tables undrop`), then purged or released"
    if settings.maintenance.maintenance_workers == 0:
        kept += "; purges need a maintenance worker (none in this process)"
    return kept


def care_mode(settings: Settings) -> str:
    care = settings.maintenance
    if not care.maintenance_enabled:
        return "off (CATALOG_MAINTENANCE_ENABLED=false; a table or namespace may still turn it on)"
    days = care.maintenance_max_snapshot_age_ms / 86_400_000
    where = (
        f"{care.maintenance_workers} thread(s) per worker"
        if care.maintenance_workers
        else "no threads here (a `maintenance worker` process runs it)"
    )
    return (
        f"on: snapshots older than {days:g} days expired (at least {care.maintenance_min_snapshots_to_keep} "
        f"kept), orphan files older than {care.maintenance_orphan_age_hours:g} h removed; {where}; "
        "CATALOG_MAINTENANCE_ENABLED=false turns it off"
    )


def risky(settings: Settings) -> list[str]:
    """One warning per setting that works but is likely to surprise (the refused ones are refused), and
    per ``CATALOG_*`` variable that is no setting (a typo)."""
    warnings = unknown_variables(os.environ)
    raw_db = make_url(settings.database.database_url).database or ""
    if (path := sqlite_path(settings)) is not None and not Path(raw_db).expanduser().is_absolute():
        warnings.append(
            f"CATALOG_DATABASE_URL is a relative path: the catalog is {path}, in the directory the server was "
            f"started from (started elsewhere, it is another, empty catalog); set an absolute one: sqlite:///{path}"
        )
    raw_wh = settings.storage.warehouse.removeprefix("file://")
    if (wh := local_warehouse(settings)) is not None and not Path(raw_wh).expanduser().is_absolute():
        warnings.append(
            f"CATALOG_WAREHOUSE is a relative path: tables are written under {wh}, in the directory the server "
            f"was started from; set an absolute one: --warehouse {wh}"
        )
    storage, open_to_all = settings.storage, not settings.auth.auth_required
    if open_to_all and not _loopback(settings.server.host):
        warnings.append(
            f"CATALOG_AUTH_REQUIRED is false and the server listens on {settings.server.host}: anyone who can reach "
            f"port {settings.server.port} can read, change and drop every table (see README, Authentication)"
        )
    endpoint = storage.s3_endpoint or ""
    if local_warehouse(settings) is None and endpoint.startswith("http://"):
        host = make_url(endpoint.replace("http://", "s3://", 1)).host or ""
        if not _loopback(host):
            warnings.append(
                f"CATALOG_S3_ENDPOINT {endpoint} is plain HTTP: keys, request signatures and data cross the network "
                "unencrypted (fine on a private network; use https:// elsewhere)"
            )
    cloud_endpoint = {"azure": "azure_blob_endpoint", "gcs": "gcs_endpoint"}.get(storage.storage_kind)
    value = getattr(storage, cloud_endpoint) or "" if cloud_endpoint else ""
    if value.startswith("http://") and not _loopback(make_url(value.replace("http://", "s3://", 1)).host or ""):
        warnings.append(
            f"CATALOG_{cloud_endpoint.upper()} {value} is plain HTTP: requests and data cross the network "
            "unencrypted (fine for an emulator on a private network; use https:// elsewhere)"
        )
    if storage.storage_kind == "azure" and storage.azure_vend_credentials and storage.azure_sas_scope == "container":
        warnings.append(
            "CATALOG_AZURE_SAS_SCOPE is container: every vended SAS reaches the whole container "
            f"{storage.warehouse.partition('://')[2].partition('@')[0]}, not only its table; keep one warehouse per "
            "container, or use an account with a hierarchical namespace and the directory scope"
        )
    for flag, what in (("azure_vend_credentials", "Azure SAS tokens"), ("gcs_vend_credentials", "GCS tokens")):
        if getattr(storage, flag) and open_to_all:
            warnings.append(
                f"CATALOG_{flag.upper()} is on and CATALOG_AUTH_REQUIRED is false: anyone who reaches the port gets "
                f"read-write {what} for any table"
            )
    if storage.s3_vend_credentials and open_to_all:
        warnings.append(
            "CATALOG_S3_VEND_CREDENTIALS is on and CATALOG_AUTH_REQUIRED is false: anyone who reaches the port gets "
            "read-write S3 credentials for any table"
        )
    return warnings


def summary(settings: Settings) -> tuple[list[str], dict[str, Any]]:
    """The start-up summary: lines for people, fields for the structured log line."""
    db = sqlite_path(settings)
    database = f"sqlite:///{db}" if db is not None else masked(settings.database.database_url)
    wh = local_warehouse(settings)
    warehouse = str(wh) if wh is not None else settings.storage.warehouse
    storage = settings.storage
    endpoint = {"s3": storage.s3_endpoint, "azure": storage.azure_blob_endpoint, "gcs": storage.gcs_endpoint}.get(
        storage.storage_kind
    )
    if wh is None and endpoint:
        warehouse += f" (endpoint {endpoint})"
    fields = {
        "version": __version__,
        "url": url(settings),
        "database": database,
        "warehouse": warehouse,
        "auth": auth_mode(settings),
        "workers": settings.server.workers,
        "maintenance": care_mode(settings),
        "dropped": dropped_mode(settings),
    }
    lines = [
        f"iceberg-catalog {__version__} listening on {fields['url']} (GET / lists the routes)",
        f"  database:  {database}",
        f"  warehouse: {warehouse}",
        f"  auth:      {fields['auth']}",
        f"  workers:   {settings.server.workers}",
        f"  table maintenance: {fields['maintenance']}",
        f"  dropped tables: {fields['dropped']}",
    ]
    return lines, fields


def announce(settings: Settings) -> None:
    """Print the summary and the warnings: as plain lines for a person (a terminal, or the text log
    format), as one structured log line plus one warning line each for a log pipeline (JSON)."""
    lines, fields = summary(settings)
    warnings = risky(settings)
    if logs.resolve(settings.server.log_format) == "text":
        print("\n".join([*lines, *(f"warning: {w}" for w in warnings)]), file=sys.stderr, flush=True)
        return
    log.info(
        "iceberg-catalog %s listening on %s: database %s, warehouse %s, auth %s, %d worker(s)",
        __version__,
        fields["url"],
        fields["database"],
        fields["warehouse"],
        fields["auth"].split(" ", 1)[0],
        settings.server.workers,
        extra={"fields": fields},
    )
    for warning in warnings:
        log.warning("%s", warning)


def listen(settings: Settings) -> socket.socket:
    """The listening socket, bound before anything else touches the database or the warehouse."""
    family = socket.AF_INET6 if ":" in settings.server.host else socket.AF_INET
    sock = socket.socket(family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.server.host, settings.server.port))
    except (OSError, UnicodeError) as e:  # in use, not an address of this host, a name that does not resolve
        sock.close()
        reason = getattr(e, "strerror", None) or str(e)
        hint = {
            errno.EADDRINUSE: "another server is running there; pick another CATALOG_PORT / --port",
            errno.EACCES: "ports below 1024 need privileges; pick another CATALOG_PORT / --port",
        }.get(getattr(e, "errno", None), "CATALOG_HOST / --host must be an address of this machine")
        raise Refused(f"cannot listen on {settings.server.host}:{settings.server.port}: {reason} ({hint})") from e
    sock.set_inheritable(True)
    return sock


def warehouse_refusal(settings: Settings, create: bool = True) -> str | None:
    """Why a local warehouse cannot be used (one line naming ``CATALOG_WAREHOUSE``), or None (S3, or it is
    usable). With ``create`` the directory is made if missing (as the server does); without it (doctor),
    only what blocks making it is looked at: the nearest existing ancestor must be a directory that
    takes a new entry. Either way a probe file (or directory) is written and removed."""
    path = local_warehouse(settings)
    if path is None:
        return None
    target = path
    try:
        if create:
            path.mkdir(parents=True, exist_ok=True)
        elif not path.exists():
            target = next(p for p in path.parents if p.exists() or p == Path(p.anchor))
            if not target.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(target))
            os.rmdir(tempfile.mkdtemp(prefix=".iceberg-catalog-probe-", dir=target))
            return None
        if not path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))
        with tempfile.NamedTemporaryFile(prefix=".iceberg-catalog-probe-", dir=path):
            pass
    except OSError as e:
        # Named the same whether it was found creating (serve) or looking (doctor): the nearest entry there.
        where = next((p for p in (path, *path.parents) if p.exists()), target)
        reason = {
            errno.ENOTDIR: f"{where} is not a directory",
            errno.EEXIST: f"{where} is not a directory",
            errno.EACCES: f"{where} is not writable",
            errno.EPERM: f"{where} does not take new files",
            errno.EROFS: f"{where} is on a read-only file system",
            errno.ENOENT: f"{where} does not take new directories",
        }.get(e.errno, f"{where}: {e.strerror or type(e).__name__}")
        return (
            f"cannot use the warehouse {path} (CATALOG_WAREHOUSE / --warehouse): {reason}; "
            "set it to a directory the server can create and write"
        )
    return None


def prepare_warehouse(settings: Settings) -> None:
    """Create a local warehouse and prove it writable, in the parent process: a warehouse the server
    cannot use is one line, not a traceback from every worker's start."""
    if (refusal := warehouse_refusal(settings)) is not None:
        raise Refused(refusal)


def prepare_database(settings: Settings) -> None:
    """Reach the database and migrate it to head (SQLite always; PostgreSQL unless auto_migrate is
    off, when readiness waits for ``iceberg-catalog migrate`` instead). One log line if it migrated."""
    if not (settings.database.is_sqlite or settings.database.auto_migrate):
        return
    engine = create_engine(settings.database)
    try:
        before = migrate.current(engine)
        if before != migrate.heads():
            migrate.upgrade(engine)
            log.info(
                "database schema migrated from %s to %s",
                ", ".join(sorted(before)) or "empty",
                ", ".join(sorted(migrate.heads())),
            )
    except sqlalchemy.exc.DBAPIError as e:
        raise Refused(unreachable(settings, e)) from e
    except Exception as e:
        raise Refused(
            f"database migration failed ({masked(settings.database.database_url)}, CATALOG_DATABASE_URL): {e}"
        ) from e
    finally:
        engine.dispose()


def unreachable(settings: Settings, e: Exception) -> str:
    """``cannot use the database at host:port (CATALOG_DATABASE_URL): <the driver's first line>``."""
    orig = getattr(e, "orig", None) or e
    reason = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    # psycopg: 'connection to server at "h", port p failed: FATAL:  <why>'
    reason = reason.rsplit(" failed: ", 1)[-1].removeprefix("FATAL:").strip()
    parsed = make_url(settings.database.database_url)
    if settings.database.is_sqlite:
        where = str(sqlite_path(settings) or parsed.database)
        hint = " (does its directory exist and is it writable?)" if "unable to open" in reason else ""
        return f"cannot open the SQLite database {where} (CATALOG_DATABASE_URL): {reason}{hint}"
    where = f"{parsed.host or 'localhost'}:{parsed.port or 5432}"
    return f"cannot use the PostgreSQL database {parsed.database or ''!s} at {where} (CATALOG_DATABASE_URL): {reason}"
