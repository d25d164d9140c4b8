"""The environments a run measures: the server plus what the baselines need to reach the same
database and storage.

- ``sqlite``: the embedded default, a SQLite file and a local warehouse directory;
- ``postgres-s3``: a throwaway PostgreSQL cluster and a SeaweedFS S3 server (``tests/services.py``),
  skipped with a reason when they cannot be started here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import services
from tests.support import Server, s3_env, start_server

ServiceUnavailable = services.ServiceUnavailable
NAMES = ("sqlite", "postgres-s3")


@dataclass
class Backend:
    name: str
    server: Server
    db: dict  # raw-CAS baseline: {"kind": "sqlite", "path"} | {"kind": "pg", "dsn"}
    storage: dict  # metadata-write probe: {"kind": "local", "path"} | {"kind": "s3", ...}
    sqlcatalog: dict  # pyiceberg SqlCatalog properties
    versions: dict[str, str] = field(default_factory=dict)
    handles: list[Any] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.server.proc.pid

    def stop(self) -> None:
        self.server.stop()
        for handle in reversed(self.handles):
            getattr(handle, "close", handle.stop)()


def start(name: str, workdir: Path, workers: int, server_env: dict[str, str] | None = None) -> Backend:
    """Start ``name``'s services and server; ``server_env`` adds/overrides CATALOG_* settings."""
    workdir.mkdir(parents=True, exist_ok=True)
    # Headline numbers are measured at the default settings: the default log level (info, one access
    # line per request) included. Table care stays off, as for the test servers (tests/support.py).
    env = {"CATALOG_WORKERS": str(workers), "CATALOG_LOG_LEVEL": "info", **(server_env or {})}
    if name == "sqlite":
        server = start_server(workdir / "server", "sqlite", env)
        return Backend(
            name,
            server,
            db={"kind": "sqlite", "path": str(workdir / "raw_cas.db")},
            storage={"kind": "local", "path": str(workdir / "server" / "warehouse")},
            sqlcatalog={
                "uri": f"sqlite:///{workdir / 'sqlcatalog.db'}",
                "warehouse": (workdir / "sqlcatalog-warehouse").as_uri(),
            },
            versions={"sqlite": _sqlite_version()},
        )
    if name == "postgres-s3":
        handles: list[Any] = []
        try:
            pg = services.start_postgres(workdir / "pg")
            handles.append(pg)
            s3 = services.start_seaweedfs(workdir / "s3")
            handles.append(s3)
            server = start_server(
                workdir / "server", "postgres-s3", {**env, "CATALOG_DATABASE_URL": pg.url, **s3_env(s3, "bench")}
            )
        except BaseException:
            for handle in reversed(handles):
                getattr(handle, "close", handle.stop)()
            raise
        s3_props = {
            "s3.endpoint": s3.endpoint,
            "s3.access-key-id": s3.access_key,
            "s3.secret-access-key": s3.secret_key,
            "s3.region": s3.region,
        }
        storage = {
            "kind": "s3",
            "endpoint": s3.endpoint,
            "bucket": s3.bucket,
            "region": s3.region,
            "access_key": s3.access_key,
            "secret_key": s3.secret_key,
        }
        return Backend(
            name,
            server,
            db={"kind": "pg", "dsn": pg.dsn},
            storage=storage,
            sqlcatalog={"uri": pg.url, "warehouse": f"s3://{s3.bucket}/sqlcatalog", **s3_props},
            versions={"postgresql": _pg_version(pg.dsn), "s3": "SeaweedFS (weed mini)"},
            handles=handles,
        )
    raise ValueError(f"unknown backend {name!r}; choose from {', '.join(NAMES)}")


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


def _pg_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]
