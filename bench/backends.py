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
from tests.support import Server, new_pg_database, s3_env, start_server

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
    workdir: Path | None = None
    pg: Any = None  # postgres-s3: the PostgreSQL and SeaweedFS handles, for servers of their own
    s3: Any = None

    @property
    def pid(self) -> int:
        return self.server.proc.pid

    def own_server(self, name: str, env: dict[str, str]) -> Server:
        """Another server on this backend's services with a catalog database and a warehouse of its
        own: a deployment of its own (processes sharing a catalog database share its maintenance
        queue). The caller stops it."""
        assert self.workdir is not None
        env = {"CATALOG_WORKERS": "1", "CATALOG_LOG_LEVEL": "warning", **env}
        if self.name == "sqlite":
            return start_server(self.workdir / name, "sqlite", env)
        url = new_pg_database(self.pg, name)
        return start_server(
            self.workdir / name, "postgres-s3", {**env, "CATALOG_DATABASE_URL": url, **s3_env(self.s3, name)}
        )

    def stop(self) -> None:
        self.server.stop()
        for handle in reversed(self.handles):
            getattr(handle, "close", handle.stop)()


def start(name: str, workdir: Path, workers: int, server_env: dict[str, str] | None = None) -> Backend:
    """Start ``name``'s services and server; ``server_env`` adds/overrides CATALOG_* settings."""
    workdir.mkdir(parents=True, exist_ok=True)
    # Headline numbers are measured at the default settings: the default log level (info, one access
    # line per request) included. Table maintenance stays off, as for the test servers (tests/support.py).
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
            workdir=workdir,
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
            workdir=workdir,
            pg=pg,
            s3=s3,
        )
    raise ValueError(f"unknown backend {name!r}; choose from {', '.join(NAMES)}")


def _sqlite_version() -> str:
    import sqlite3

    return sqlite3.sqlite_version


def _pg_version(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]
