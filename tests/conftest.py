"""Fixtures: a real server process per backend, real pyiceberg clients, raw HTTP.

Backends: ``sqlite`` (the embedded default: SQLite file + local warehouse) always; ``postgres-s3``
(PostgreSQL + SeaweedFS S3) when those can be started here. With ``CI=true`` a backend that cannot
be started is a failure, never a silent skip.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running ``iceberg-catalog serve`` process."""

    url: str
    env: dict[str, str]
    proc: subprocess.Popen
    log: Path
    backend: str
    io_props: dict[str, str] = field(default_factory=dict)

    def catalog(self, **props: str) -> RestCatalog:
        return RestCatalog(f"test-{uuid.uuid4().hex[:6]}", uri=self.url, **{**self.io_props, **props})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_server(workdir: Path, backend: str = "sqlite", extra_env: dict[str, str] | None = None) -> Server:
    """Start the server as its own process on a free port and wait until it answers /health/live."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{workdir / 'catalog.db'}",
        "CATALOG_WAREHOUSE": str(workdir / "warehouse"),
        "CATALOG_PORT": str(port),
        "CATALOG_HOST": "127.0.0.1",
        "CATALOG_LOG_LEVEL": "warning",
        "CATALOG_LOG_FORMAT": "json",
        # The shared test servers run no table care (tests/test_maintenance.py starts its own): tests
        # write snapshots with old timestamps, which expiry would remove under them.
        "CATALOG_MAINTENANCE_WORKERS": "0",
        **(extra_env or {}),
    }
    log = workdir / f"server-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog", "serve"],
        env=env,
        cwd=workdir,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{url}/health/live", timeout=1).status_code == 200:
                return Server(url, env, proc, log, backend)
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")


def _backends() -> list[str]:
    wanted = os.environ.get("CATALOG_TEST_BACKENDS", "sqlite,postgres-s3")
    return [b.strip() for b in wanted.split(",") if b.strip()]


@pytest.fixture(scope="session", params=_backends())
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per backend for the whole session; tests isolate themselves by namespace."""
    backend = request.param
    workdir = tmp_path_factory.mktemp(backend)
    if backend == "postgres-s3":
        yield request.getfixturevalue("pg_s3_server")  # stopped by its own fixture
        return
    if backend != "sqlite":
        raise ValueError(f"unknown backend {backend}")
    srv = start_server(workdir)
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """PostgreSQL + SeaweedFS for the session (skipped locally, fatal in CI, when unavailable)."""
    from tests import services as svc

    workdir = tmp_path_factory.mktemp("services")
    started: dict = {}
    try:
        started["pg"] = svc.start_postgres(workdir / "pg")
        started["s3"] = svc.start_seaweedfs(workdir / "s3")
    except svc.ServiceUnavailable as e:
        for handle in started.values():
            handle.stop()
        if IN_CI:
            pytest.fail(f"CI=true and a required service is unavailable: {e}")
        pytest.skip(f"service unavailable: {e}")
    yield started
    for handle in started.values():
        handle.stop()


def s3_env(s3, prefix: str) -> dict[str, str]:
    return {
        "CATALOG_WAREHOUSE": f"s3://{s3.bucket}/{prefix}",
        "CATALOG_S3_ENDPOINT": s3.endpoint,
        "CATALOG_S3_REGION": s3.region,
        "CATALOG_S3_ACCESS_KEY_ID": s3.access_key,
        "CATALOG_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
    }


def s3_client_props(s3) -> dict[str, str]:
    """What a client supplies itself: credentials. Endpoint and path style come from /v1/config."""
    return {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}


@pytest.fixture(scope="session")
def pg_s3_server(services: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("pg-s3")
    env = {"CATALOG_DATABASE_URL": services["pg"].url, **s3_env(services["s3"], "suite")}
    srv = start_server(workdir, "postgres-s3", env)
    srv.io_props = s3_client_props(services["s3"])
    yield srv
    srv.stop()  # also when only a test that asks for it directly ran (no server[postgres-s3])


@pytest.fixture
def catalog(server: Server) -> RestCatalog:
    return server.catalog()


@pytest.fixture
def ns(catalog: RestCatalog) -> str:
    """A fresh namespace per test."""
    name = f"ns_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name)
    return name


@pytest.fixture
def http(server: Server) -> Iterator[Http]:
    with requests.Session() as session:
        yield Http(server.url, session)


class Http:
    """Raw HTTP against the server: for what no client would send."""

    def __init__(self, base: str, session: requests.Session) -> None:
        self.base = base
        self.session = session

    def __call__(self, method: str, path: str, **kw) -> requests.Response:
        return self.session.request(method, self.base + path, timeout=60, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self("GET", path, **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self("POST", path, **kw)


def assert_error(resp: requests.Response, code: int, type_: str, contains: str = "") -> dict:
    """The Iceberg error body: {"error": {"message", "type", "code"}} with code == status."""
    assert resp.status_code == code, resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["code"] == code and err["type"] == type_, err
    assert isinstance(err["message"], str) and contains in err["message"], err
    return err


def commit_with_its_connection_killed(su, base: str, at: str) -> requests.Response:
    """POST a set-properties commit to table n.t of the server at ``base`` and kill its database
    connection while the pointer UPDATE runs (``at="update"``: before COMMIT is sent) or while its
    COMMIT runs (``at="commit"``). ``su``: an autocommit superuser psycopg connection to the
    server's database. A trigger sleeping 3 s makes the moment last long enough to be caught."""
    su.execute(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$"
    )
    if at == "update":
        su.execute("CREATE TRIGGER slow BEFORE UPDATE ON catalog_entries FOR EACH ROW EXECUTE FUNCTION slow()")
        running = "query LIKE 'UPDATE catalog_entries%'"
    else:  # a deferred constraint trigger runs at COMMIT
        su.execute(
            "CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON catalog_entries DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION slow()"
        )
        running = "query = 'COMMIT'"
    result: dict = {}

    def commit() -> None:
        body = {"updates": [{"action": "set-properties", "updates": {"killed": "during " + at}}]}
        result["resp"] = requests.post(f"{base}/v1/namespaces/n/tables/t", json=body, timeout=60)

    worker = threading.Thread(target=commit)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not su.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND state = 'active' AND {running}"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, f"the {at} never started"
            time.sleep(0.05)
    finally:
        worker.join(60)
        su.execute("DROP TRIGGER slow ON catalog_entries")
        su.execute("DROP FUNCTION slow()")
    return result["resp"]
