"""Production backends: replicas sharing one PostgreSQL, S3 metadata, faults with nothing lost."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
import requests
from pyiceberg.exceptions import CommitFailedException

from tests import services as svc
from tests.support import (
    JSON_SCHEMA,
    PY_SCHEMA,
    assert_error,
    check_migrations_round_trip,
    commit_with_its_connection_killed,
    new_pg_database,
    race,
    rows,
    s3_client_props,
    s3_env,
    start_server,
)
from tests.writers import CLIENT_RETRY, NO_CLIENT_RETRY, assert_exactly_once_linear, counter_total, hammer

pytestmark = [pytest.mark.postgres, pytest.mark.s3]


def migrate(url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "catalog", "migrate", "--database-url", url], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr


@pytest.fixture(scope="module")
def replicas(services, tmp_path_factory):
    """`iceberg-catalog migrate`, then two servers on one database, as replicas behind a balancer."""
    url = new_pg_database(services["pg"], "replicas")
    migrate(url)
    env = {"CATALOG_DATABASE_URL": url, "CATALOG_AUTO_MIGRATE": "false", **s3_env(services["s3"], "replicas")}
    servers = [start_server(tmp_path_factory.mktemp(f"replica{i}"), "postgres-s3", env) for i in range(2)]
    for s in servers:
        s.io_props = s3_client_props(services["s3"])
    yield servers
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def hot_replicas(services, tmp_path_factory):
    """Two replicas with append rebase on catalog-wide (CATALOG_APPEND_REBASE). Across replicas the
    CAS decides: a replica whose group lost it re-reads and rebuilds the whole group, and while the
    other replica keeps landing groups on a table 32 writers hammer, it can lose many times in a row
    (measured: with commit_max_attempts' 10, a pure append was answered 409), which is why a group
    of appends has its own, higher bound (append_rebase_max_attempts)."""
    url = new_pg_database(services["pg"], "hot_replicas")
    migrate(url)
    env = {
        "CATALOG_DATABASE_URL": url,
        "CATALOG_AUTO_MIGRATE": "false",
        "CATALOG_APPEND_REBASE": "true",
        **s3_env(services["s3"], "hot_replicas"),
    }
    servers = [start_server(tmp_path_factory.mktemp(f"hot_replica{i}"), "postgres-s3", env) for i in range(2)]
    for s in servers:
        s.io_props = s3_client_props(services["s3"])
    yield servers
    for s in servers:
        s.stop()


def test_readiness_waits_for_migrations(services, tmp_path):
    """A server that does not migrate itself is not ready until `iceberg-catalog migrate` ran."""
    url = new_pg_database(services["pg"], f"r_{uuid.uuid4().hex[:8]}")
    env = {"CATALOG_DATABASE_URL": url, "CATALOG_AUTO_MIGRATE": "false", **s3_env(services["s3"], "ready")}
    server = start_server(tmp_path, "postgres-s3", env)
    try:
        resp = requests.get(f"{server.url}/health/ready", timeout=10)
        assert resp.status_code == 503 and resp.json()["checks"]["migrations"] == "schema is not at head"
        migrate(url)
        assert requests.get(f"{server.url}/health/ready", timeout=10).status_code == 200
    finally:
        server.stop()


def test_postgres_migrations_round_trip(services):
    check_migrations_round_trip(new_pg_database(services["pg"], f"m_{uuid.uuid4().hex[:8]}"))


def test_metadata_files_are_in_the_bucket(replicas, services):
    catalog = replicas[0].catalog()
    ns = f"b_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 3))
    location = replicas[1].catalog().load_table(f"{ns}.t").metadata_location
    assert location.startswith(f"s3://{services['s3'].bucket}/replicas/{ns}/t/metadata/00001-")
    key = location.split("/", 3)[3]
    assert services["s3"].client().head_object(Bucket=services["s3"].bucket, Key=key)["ContentLength"] > 0
    assert replicas[1].catalog().load_table(f"{ns}.t").scan().to_arrow().num_rows == 3


def test_config_tells_clients_how_to_reach_storage(replicas, services):
    defaults = requests.get(f"{replicas[0].url}/v1/config", timeout=10).json()["defaults"]
    assert defaults["s3.endpoint"] == services["s3"].endpoint
    assert defaults["s3.path-style-access"] == "true" and defaults["s3.region"] == "us-east-1"


def test_barrier_race_across_replicas(replicas):
    ns = f"r_{uuid.uuid4().hex[:8]}"
    replicas[0].catalog().create_namespace(ns)
    replicas[0].catalog().create_table(f"{ns}.t", PY_SCHEMA, properties={"commit.retry.num-retries": "0"})
    for _ in range(3):
        tables = [r.catalog().load_table(f"{ns}.t") for r in replicas]

        def write(i, tables=tables):
            try:
                tables[i].append(rows(0, 1))
                return "won"
            except CommitFailedException:
                return "409"

        assert Counter(race(2, write)) == Counter({"won": 1, "409": 1})


# Counters summed over both replicas, read before and after a hammer: (metric, label regex)
METRICS = {
    "409": ("catalog_http_requests_total", r'method="POST".*status="409"'),
    "5xx": ("catalog_http_requests_total", r'status="5\d\d"'),
    "rebases": ("catalog_commit_append_rebase_total", ""),
}
SEED = 10**6  # the row of the table's first append (the writers' rows are w * 1000 + i)
# pyiceberg's retry for a handful of writers: a short first wait, its own 10% jitter
CLIENT_RETRY_SHORT = {**CLIENT_RETRY, "commit.retry.min-wait-ms": "20", "commit.retry.max-wait-ms": "2000"}


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_32_writers_25_appends_through_two_replicas(hot_replicas):
    """The headline proof (issue 17): 800 appends from 32 pyiceberg writers, spread over two server
    processes sharing one PostgreSQL, with the servers' append rebase on and pyiceberg's retry off.
    Every append lands exactly once on a linear chain, no writer sees a 409 (it would fail: no client
    retry), no request gets a 5xx, and the servers did rebase."""
    writers, appends = 32, 25
    urls = [r.url for r in hot_replicas]
    ns = f"h_{uuid.uuid4().hex[:8]}"
    catalog = hot_replicas[0].catalog()
    catalog.create_namespace(ns)
    # the first append: the server rebases onto a branch that moved, not onto one created meanwhile
    catalog.create_table(f"{ns}.hot", PY_SCHEMA, properties=NO_CLIENT_RETRY).append(rows(SEED, 1))
    before = {k: counter_total(urls, *q) for k, q in METRICS.items()}
    started = time.monotonic()
    acknowledged = [SEED, *hammer(urls, f"{ns}.hot", writers, appends, hot_replicas[0].io_props)]
    wall = time.monotonic() - started
    after = {k: counter_total(urls, *q) for k, q in METRICS.items()}
    assert len(acknowledged) == writers * appends + 1
    assert_exactly_once_linear(hot_replicas[1].catalog().load_table(f"{ns}.hot"), acknowledged)
    assert after["409"] == before["409"], "a pure append got a 409 with the rebase on"
    assert after["5xx"] == before["5xx"]
    assert after["rebases"] > before["rebases"], "the writers raced, so the servers must have rebased"
    rebases = after["rebases"] - before["rebases"]
    print(f"32 x 25 appends through two replicas, rebase on: {wall:.0f} s, {rebases:.0f} server rebases")


@pytest.mark.timeout(600)
def test_contention_without_rebase_is_409_and_client_retry(replicas):
    """Rebase off (the default): the same race is settled by 409s and pyiceberg's own retry, and still
    every acknowledged append lands exactly once on a linear chain, with no 5xx."""
    writers, appends = 4, 4
    urls = [r.url for r in replicas]
    ns = f"h_{uuid.uuid4().hex[:8]}"
    catalog = replicas[0].catalog()
    catalog.create_namespace(ns)
    catalog.create_table(f"{ns}.warm", PY_SCHEMA, properties=CLIENT_RETRY_SHORT)
    before = {k: counter_total(urls, *q) for k, q in METRICS.items()}
    acknowledged = hammer(urls, f"{ns}.warm", writers, appends, replicas[0].io_props, processes=2)
    after = {k: counter_total(urls, *q) for k, q in METRICS.items()}
    assert len(acknowledged) == writers * appends
    assert_exactly_once_linear(replicas[1].catalog().load_table(f"{ns}.warm"), acknowledged)
    assert after["409"] > before["409"], "four writers on one table must have raced"
    assert after["rebases"] == before["rebases"]
    assert after["5xx"] == before["5xx"]


def test_concurrent_creates_of_one_name_exactly_one_wins(replicas):
    ns = f"c_{uuid.uuid4().hex[:8]}"
    requests.post(f"{replicas[0].url}/v1/namespaces", json={"namespace": [ns]}, timeout=10)
    n = 16

    def create(i):
        url = f"{replicas[i % 2].url}/v1/namespaces/{ns}/tables"
        return requests.post(url, json={"name": "dup", "schema": JSON_SCHEMA}, timeout=60).status_code

    codes = Counter(race(n, create))
    assert codes == Counter({200: 1, 409: n - 1}), codes
    listed = requests.get(f"{replicas[1].url}/v1/namespaces/{ns}/tables", timeout=10).json()["identifiers"]
    assert listed == [{"namespace": [ns], "name": "dup"}]


# -- faults ---------------------------------------------------------------------------------------


def create_n_t(base: str) -> dict:
    """Namespace n and table t on a test's own server; returns the create response."""
    assert requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).status_code == 200
    resp = requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "t", "schema": JSON_SCHEMA}, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture
def own_pg(tmp_path):
    """A PostgreSQL cluster of this test's own, free to be stopped or sabotaged."""
    pg = svc.start_postgres(tmp_path / "pg")
    yield pg
    pg.close()


def test_database_down_is_503_and_service_resumes(own_pg, services, tmp_path):
    server = start_server(
        tmp_path / "srv", "postgres-s3", {"CATALOG_DATABASE_URL": own_pg.url, **s3_env(services["s3"], "dbdown")}
    )
    try:
        base = server.url
        created = create_n_t(base)
        assert requests.get(f"{base}/health/ready", timeout=30).status_code == 200
        own_pg.stop()
        not_ready = requests.get(f"{base}/health/ready", timeout=30)
        assert not_ready.status_code == 503 and not_ready.json()["checks"]["database"] != "ok"
        assert requests.get(f"{base}/health/live", timeout=30).status_code == 200
        err = assert_error(requests.get(f"{base}/v1/namespaces", timeout=30), 503, "ServiceUnavailableException")
        assert "Database unavailable" in err["message"]
        resp = requests.post(
            f"{base}/v1/namespaces/n/tables/t",
            json={"updates": [{"action": "set-properties", "updates": {"a": "b"}}]},
            timeout=30,
        )
        assert_error(resp, 503, "ServiceUnavailableException")
        assert resp.headers.get("Retry-After")
        own_pg.start()
        deadline = time.monotonic() + 30
        while requests.get(f"{base}/v1/namespaces", timeout=30).status_code != 200:
            assert time.monotonic() < deadline, "service did not resume"
            time.sleep(0.2)
        loaded = requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).json()
        assert loaded["metadata-location"] == created["metadata-location"]  # the failed commit moved nothing
        assert requests.get(f"{base}/health/ready", timeout=30).status_code == 200
    finally:
        server.stop()


def test_the_first_requests_after_a_database_restart_succeed(own_pg, services, tmp_path):
    """Pooled connections outlive a database restart: each is pinged as it leaves the pool after an
    idle spell, so the requests after the restart find fresh connections, not dead ones (503)."""
    server = start_server(
        tmp_path / "srv", "postgres-s3", {"CATALOG_DATABASE_URL": own_pg.url, **s3_env(services["s3"], "dbrestart")}
    )
    try:
        base = server.url
        create_n_t(base)
        with ThreadPoolExecutor(8) as pool:  # fill the pool with connections
            assert set(
                pool.map(lambda _: requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).status_code, range(64))
            ) == {200}
        own_pg.stop()
        own_pg.start()
        time.sleep(1.5)  # the pooled connections (all dead now) idle past the ping threshold

        def load(_: int) -> int:
            return requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).status_code

        with ThreadPoolExecutor(8) as pool:
            assert sorted(pool.map(load, range(32))) == [200] * 32
        resp = requests.post(
            f"{base}/v1/namespaces/n/tables/t",
            json={"updates": [{"action": "set-properties", "updates": {"after": "restart"}}]},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
    finally:
        server.stop()


def test_storage_down_moves_nothing(own_pg, tmp_path):
    s3 = svc.start_seaweedfs(tmp_path / "s3")
    server = start_server(tmp_path / "srv", "postgres-s3", {"CATALOG_DATABASE_URL": own_pg.url, **s3_env(s3, "s3down")})
    try:
        base = server.url
        created = create_n_t(base)
        s3.stop()
        resp = requests.post(
            f"{base}/v1/namespaces/n/tables/t",
            json={"updates": [{"action": "set-properties", "updates": {"a": "b"}}]},
            timeout=120,
        )
        assert_error(resp, 503, "ServiceUnavailableException", "Storage")
        with psycopg.connect(own_pg.dsn) as conn:
            pointer = conn.execute("SELECT metadata_location FROM catalog_entries WHERE name = 't'").fetchone()[0]
        assert pointer == created["metadata-location"]
    finally:
        server.stop()
        s3.stop()


def test_connection_killed_during_the_update_is_commit_state_unknown(own_pg, services, tmp_path):
    """The connection dies while the COMMIT of the pointer UPDATE is in flight: the client cannot
    know whether it landed, so neither can the server (a kill before COMMIT is a known failure, a
    503: tests/test_status_codes.py)."""
    server = start_server(
        tmp_path / "srv", "postgres-s3", {"CATALOG_DATABASE_URL": own_pg.url, **s3_env(services["s3"], "kill")}
    )
    try:
        base = server.url
        created = create_n_t(base)
        with psycopg.connect(own_pg.superuser_dsn.rsplit("/", 1)[0] + "/catalog", autocommit=True) as su:
            resp = commit_with_its_connection_killed(su, base, at="commit")
        err = assert_error(resp, 500, "CommitStateUnknownException")
        assert "unknown" in err["message"].lower()
        # afterwards the table points at the old or the new file, and either is readable
        loaded = requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30)
        assert loaded.status_code == 200
        assert loaded.json()["metadata-location"] == created["metadata-location"]
        # the possibly-committed file was kept: the metadata dir holds both versions
        prefix = created["metadata-location"].split("/", 3)[3].rsplit("/", 1)[0] + "/"
        s3 = services["s3"].client()
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=services["s3"].bucket, Prefix=prefix)["Contents"]]
        assert any(k.rsplit("/", 1)[1].startswith("00001-") for k in keys), keys
        # and the table keeps working
        ok = requests.post(
            f"{base}/v1/namespaces/n/tables/t",
            json={"updates": [{"action": "set-properties", "updates": {"c": "d"}}]},
            timeout=30,
        )
        assert ok.status_code == 200, ok.text
    finally:
        server.stop()
