"""Fixtures only (plain helpers are in tests/support.py): a real server process per backend, real
pyiceberg clients, raw HTTP, the Spark session; and the suite's markers (``fast``: see
``pytest_collection_modifyitems``).

Backends: ``sqlite`` (the embedded default: SQLite file + local warehouse) always; ``postgres-s3``
(PostgreSQL + SeaweedFS S3) when those can be started here. With ``CI=true`` a backend that cannot
be started is a failure, never a silent skip.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support import (
    CARE_ON_REQUEST,
    PEERS,
    PEERS_GRANTS,
    TOKEN_SECRET,
    Http,
    Server,
    backends,
    duckdb_attached,
    new_pg_database,
    register_catalog,
    s3_client_props,
    s3_env,
    skip_or_fail,
    spark_conf,
    spark_unavailable,
    start_server,
    warehouse_roots,
)

# The fast tier (``pytest -m fast``, with CATALOG_TEST_BACKENDS=sqlite): what runs on SQLite and a
# local warehouse in this process's own servers, without a Spark session, PostgreSQL, S3 or a soak.
# The Java differential check (marker ``java``: a plain JVM, no Spark) is in it.
NOT_FAST_MARKERS = frozenset({"spark", "soak", "postgres", "s3", "azure", "gcs", "slow"})
NOT_FAST_FIXTURES = frozenset({"spark", "services", "pg_s3_server", "azurite", "gcs_emulator"})


# PySpark's DataFrame.collect() (pyspark.rdd._load_from_socket) leaves its local socket to the
# garbage collector: with warnings as errors every Spark test would fail on it. Ignored for the
# tests on a Spark session only, and only for sockets.
PYSPARK_SOCKET_LEAKS = [
    pytest.mark.filterwarnings("ignore:unclosed <socket.socket:ResourceWarning"),
    pytest.mark.filterwarnings("ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"),
]


def _give_every_item_its_own_nodeid(items: list[pytest.Item]) -> None:
    """schemathesis 4 under pytest 9 gives each operation's item (``test_operations_conform[GET
    /v1/config]``) the bare function's node id. pytest-xdist schedules by node id, so a parallel
    run kept one item per id and silently dropped the other 112 fuzz tests (no failure, no skip).
    Such an item gets the id pytest gives any parametrized test: its parent's and its own name."""
    count = Counter(item.nodeid for item in items)
    for item in items:
        if count[item.nodeid] > 1 and item.parent is not None and item.nodeid != f"{item.parent.nodeid}::{item.name}":
            nodeid = f"{item.parent.nodeid}::{item.name}"
            if hasattr(item, "_id"):  # pytest 9 keeps the id structured, parsed from the same text
                from _pytest.nodeid import NodeId

                item._id = NodeId.parse(nodeid)
            else:
                item._nodeid = nodeid
    shared = [nodeid for nodeid, n in Counter(item.nodeid for item in items).items() if n > 1]
    if shared:
        raise pytest.UsageError(f"tests share a node id (a parallel run would drop all but one): {shared[:5]}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _give_every_item_its_own_nodeid(items)
    for item in items:
        if item.get_closest_marker("spark") or "spark" in getattr(item, "fixturenames", ()):
            for mark in PYSPARK_SOCKET_LEAKS:
                item.add_marker(mark)
        if not NOT_FAST_MARKERS.isdisjoint(m.name for m in item.iter_markers()):
            continue
        if not NOT_FAST_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "postgres-s3" in callspec.params.values():
            continue
        item.add_marker(pytest.mark.fast)


@pytest.fixture(scope="session", params=backends())
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per backend for the whole session; tests isolate themselves by namespace."""
    backend = request.param
    workdir = tmp_path_factory.mktemp(backend)
    if backend == "postgres-s3":
        yield request.getfixturevalue("pg_s3_server")  # stopped by its own fixture
        return
    if backend != "sqlite":
        raise ValueError(f"unknown backend {backend}")
    # tests create warehouses in their own temporary directories (tests/test_boundary.py)
    srv = start_server(workdir, extra_env={**CARE_ON_REQUEST, **warehouse_roots(tmp_path_factory.getbasetemp())})
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
        skip_or_fail(f"a required service is unavailable: {e}")
    yield started
    for handle in started.values():
        handle.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Azurite's blob service for the session, containers ``lake`` and ``other`` (skipped locally,
    fatal in CI, when it cannot start)."""
    from tests import services as svc

    try:
        handle = svc.start_azurite(tmp_path_factory.mktemp("azurite"))
    except svc.ServiceUnavailable as e:
        skip_or_fail(f"Azurite is unavailable: {e}")
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The GCS emulator for the session, buckets ``lake`` and ``other`` (skipped locally, fatal in CI)."""
    from tests import services as svc

    try:
        handle = svc.start_gcs_emulator(tmp_path_factory.mktemp("gcs"))
    except svc.ServiceUnavailable as e:
        skip_or_fail(f"the GCS emulator is unavailable: {e}")
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def pg_s3_server(services: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("pg-s3")
    # its own database: its maintenance worker claims the queue's tasks (purges), which must be its own
    url = new_pg_database(services["pg"], "suite")
    env = {"CATALOG_DATABASE_URL": url, **s3_env(services["s3"], "suite"), **CARE_ON_REQUEST}
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


@pytest.fixture(scope="module")
def spark():
    """A local Spark session with the Iceberg runtime, one per module that asks for it (the
    catalogs of the servers are registered on it at run time: ``support.register_catalog``)."""
    missing = spark_unavailable()
    if missing:
        skip_or_fail(f"Spark cannot run: {missing}")
    from pyspark.sql import SparkSession

    base = {k: v for k, v in spark_conf("http://unused").items() if not k.startswith("spark.sql.catalog.")}
    builder = SparkSession.builder.master("local[2]").appName("catalog-tests")
    for key, value in {
        **base,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "2g",
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def java() -> Iterator:
    """Iceberg Java's builders as an oracle process (tests/java_oracle.py), one per module."""
    from tests.java_oracle import JavaOracle, classpath

    cp, missing = classpath()
    if cp is None:
        skip_or_fail(f"the Java oracle cannot run: {missing}")
    oracle = JavaOracle(cp)
    yield oracle
    oracle.close()


@pytest.fixture
def lake(spark, server: Server) -> str:
    """The Spark catalog name for this backend's server."""
    return register_catalog(spark, server)


@pytest.fixture
def spark_ns(spark, lake: str) -> str:
    """A fresh Spark namespace: ``<catalog>.<namespace>``."""
    name = f"{lake}.sp_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {name}")
    return name


@pytest.fixture
def duck(server: Server):
    """A DuckDB connection with the catalog attached as ``lake`` (on local disk, or on S3 with its own secret)."""
    try:
        con = duckdb_attached(server)
    except ImportError:
        skip_or_fail("duckdb is not installed: pip install -e '.[test]'")
    yield con
    con.close()


@pytest.fixture(params=backends())
def fresh(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers on a database of their own (``start(env)``; a second call with ``same=True``
    shares the first one's database and storage). All are stopped at the end."""
    started: list[Server] = []
    base: dict[str, str] = {}
    io: dict[str, str] = {}
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        name = f"ev_{uuid.uuid4().hex[:8]}"
        base = {"CATALOG_DATABASE_URL": new_pg_database(services["pg"], name), **s3_env(services["s3"], name)}
        io = s3_client_props(services["s3"])

    def start(env: dict[str, str] | None = None, same: bool = False) -> Server:
        if same and started:
            shared = {k: v for k, v in started[0].env.items() if k.startswith(("CATALOG_", "AWS_"))}
            shared.pop("CATALOG_PORT")
            env = {**shared, **(env or {})}
        else:
            env = {**base, **(env or {})}
        srv = start_server(tmp_path / f"s{len(started)}", request.param, env)
        srv.io_props = io
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[tuple[Server, object]]:
    """A server (the writers' catalog) and the catalog service in this process on the same SQLite
    database and warehouse (a maintenance job's side: its commits race the server's through the CAS;
    ``support.run_job_racing``)."""
    from catalog.server.app import build_catalog
    from catalog.settings import Settings

    srv = start_server(tmp_path / "srv", "sqlite")
    local = build_catalog(
        Settings(database_url=srv.env["CATALOG_DATABASE_URL"], warehouse=srv.env["CATALOG_WAREHOUSE"]), migrated=True
    )
    yield srv, local
    local.db.engine.dispose()
    srv.stop()


@pytest.fixture(scope="module")
def peers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A SQLite server with authentication and grants: the ``PEERS`` alice and bob may do anything, eve
    only in the namespace ``eve`` (``support.As`` signs in as one of them)."""
    workdir = tmp_path_factory.mktemp("peers")
    (workdir / "grants.yaml").write_text(PEERS_GRANTS)
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in PEERS.items()),
        "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
    }
    server = start_server(workdir, extra_env=env)
    yield server
    server.stop()
