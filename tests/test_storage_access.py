"""How clients reach storage: the client-facing endpoint, and vended STS credentials scoped to one table.

The compose shape: the server reaches S3 under one name, clients under another. Two TCP proxies
stand in front of one SeaweedFS (with STS): ``internal`` is the server's endpoint and refuses (403,
connection closed) any connection whose first request lacks the server's User-Agent marker;
``public`` is the endpoint clients are told. A third proxy carries the server's STS calls, so a test
can take STS down. Clients are pyiceberg with no S3 setting at all (only the catalog URI and their
catalog credential): what they know about storage comes from the catalog.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import pyarrow as pa
import pytest
import requests
from botocore.config import Config
from botocore.exceptions import ClientError

from catalog.storage.bounds import USER_AGENT
from catalog.storage.vending import credentials_path
from tests import services as svc
from tests.services import duckdb_connection
from tests.support import CLIENTS, TOKEN_SECRET, Server, as_, assert_error, skip_or_fail, start_server, token

DURATION = 900
BOOTSTRAP = """
grants:
  - {principal: user:admin, privileges: [admin], on: catalog}
  - {principal: user:analyst, privileges: [read], on: {namespace: lake}}
"""
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"], pa.string())})
VENDED = {"X-Iceberg-Access-Delegation": "vended-credentials"}


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``port``. With ``marker``, a connection whose first request's
    User-Agent lacks it is answered 403 and closed. ``take_down()``: open connections are cut and
    new ones closed at once, until ``bring_up()``."""

    def __init__(self, port: int, marker: str | None = None) -> None:
        self.target, self.marker = port, marker
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.agents: list[str] = []  # User-Agent of each forwarded connection's first request
        self.refused: list[str] = []
        self.down = False
        self.open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        if self.down:
            conn.close()
            return
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = conn.recv(65536)
            if not chunk:
                conn.close()
                return
            head += chunk
        lines = head.split(b"\r\n")
        agent = next((x.split(b":", 1)[1].strip().decode() for x in lines if x.lower().startswith(b"user-agent:")), "")
        if self.marker and self.marker not in agent:
            self.refused.append(agent)
            conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
            return
        self.agents.append(agent)
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self.open |= {conn, upstream}
        upstream.sendall(head)
        back = threading.Thread(target=self._pump, args=(upstream, conn), daemon=True)
        back.start()
        self._pump(conn, upstream)
        back.join(30)  # either pump's end shuts both sockets down: the other one ends too
        for s in (conn, upstream):
            self.open.discard(s)
            s.close()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def take_down(self) -> None:
        self.down = True
        for s in list(self.open):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.open.clear()

    def bring_up(self) -> None:
        self.down = False

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("storage-access")
    try:
        s3 = svc.start_seaweedfs(workdir / "s3", sts=True)
    except svc.ServiceUnavailable as e:
        skip_or_fail(f"SeaweedFS is unavailable: {e}")
    s3.client().create_bucket(Bucket="elsewhere")
    internal, public, sts = Proxy(s3.port, USER_AGENT), Proxy(s3.port), Proxy(s3.port)
    policy = workdir / "grants.yaml"
    policy.write_text(BOOTSTRAP)
    env = {
        "CATALOG_WAREHOUSE": f"s3://{s3.bucket}/access",
        "CATALOG_S3_ENDPOINT": internal.endpoint,
        "CATALOG_S3_CLIENT_ENDPOINT": public.endpoint,
        "CATALOG_S3_REGION": s3.region,
        "CATALOG_S3_ACCESS_KEY_ID": s3.access_key,
        "CATALOG_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_S3_VEND_CREDENTIALS": "true",
        "CATALOG_S3_STS_ENDPOINT": sts.endpoint,
        "CATALOG_S3_STS_ROLE_ARN": s3.sts_role_arn,
        "CATALOG_S3_STS_DURATION_SECONDS": str(DURATION),
        "CATALOG_STORAGE_TIMEOUT_SECONDS": "3",
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(policy),
    }
    server = start_server(workdir / "server", "sqlite", env)
    admin = as_(server, "admin")
    admin.create_namespace("lake")
    for name in ("events", "events2"):  # events2: a neighbour whose prefix extends events' key
        admin.create_table(f"lake.{name}", ROWS.schema).append(ROWS)
    yield {"s3": s3, "server": server, "internal": internal, "public": public, "sts": sts}
    server.stop()
    for proxy in (internal, public, sts):
        proxy.close()
    s3.stop()


def _load(server: Server, client: str, table: str, headers: dict[str, str] = VENDED) -> requests.Response:
    return requests.get(
        f"{server.url}/v1/namespaces/lake/tables/{table}",
        headers={"Authorization": f"Bearer {token(server, client)}", **headers},
        timeout=30,
    )


def _s3(endpoint: str, config: dict[str, str]):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=config["s3.access-key-id"],
        aws_secret_access_key=config["s3.secret-access-key"],
        aws_session_token=config["s3.session-token"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def _split(location: str) -> tuple[str, str]:
    parsed = urlparse(location)
    return parsed.netloc, parsed.path.lstrip("/")


def _denied(call: Any) -> None:
    with pytest.raises(ClientError) as e:
        call()
    assert e.value.response["Error"]["Code"] in ("AccessDenied", "403"), e.value.response


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_clients_without_s3_settings_use_the_client_endpoint(stack: dict) -> None:
    server, public, internal = stack["server"], stack["public"], stack["internal"]
    config = requests.get(f"{server.url}/v1/config", headers={"Authorization": f"Bearer {token(server, 'admin')}"})
    assert config.json()["defaults"]["s3.endpoint"] == public.endpoint
    assert stack["s3"].secret_key not in config.text
    before = len(public.agents)
    table = as_(server, "admin").load_table("lake.events")
    table.append(ROWS)
    assert table.io.properties["s3.endpoint"] == public.endpoint
    read = as_(server, "analyst").load_table("lake.events").scan().to_arrow()
    assert sorted(read["id"].to_pylist()) == [1, 1, 2, 2, 3, 3]
    # A staged create (no metadata location yet) writes its data with the credentials in config.
    with as_(server, "admin").create_table_transaction("lake.staged", ROWS.schema) as staged:
        staged.append(ROWS)
    assert as_(server, "analyst").load_table("lake.staged").scan().to_arrow().num_rows == 3
    # The clients' data went through the public endpoint; the server's own calls through the
    # internal one, which no client ever reached.
    assert len(public.agents) > before and any(USER_AGENT not in a for a in public.agents[before:])
    assert internal.agents and all(USER_AGENT in a for a in internal.agents)
    assert internal.refused == []


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_vended_credentials_are_scoped_to_the_table_and_expire(stack: dict) -> None:
    server, s3, public = stack["server"], stack["s3"], stack["public"]
    resp = _load(server, "admin", "events")
    assert resp.status_code == 200, resp.text
    assert s3.secret_key not in resp.text  # the server's own key is never vended
    body = resp.json()
    location = body["metadata"]["location"]
    [vended] = body["storage-credentials"]
    assert vended["prefix"] == location
    config = vended["config"]
    assert config["s3.session-token"] and config["s3.access-key-id"] != s3.access_key
    assert config["s3.endpoint"] == public.endpoint and config["s3.path-style-access"] == "true"
    left = int(config["s3.session-token-expires-at-ms"]) / 1000 - time.time()
    assert DURATION / 2 - 30 <= left <= DURATION + 30
    assert body["config"]["client.refresh-credentials-endpoint"] == credentials_path("", ("lake",), "events")
    assert body["config"]["s3.session-token"] == config["s3.session-token"]

    client = _s3(public.endpoint, config)
    bucket, own = _split(body["metadata-location"])
    assert client.get_object(Bucket=bucket, Key=own)["Body"].read()
    client.put_object(Bucket=bucket, Key=_split(location)[1] + "/data/written-by-vended.txt", Body=b"x")
    other = _load(server, "admin", "events2").json()
    _, other_key = _split(other["metadata-location"])
    _, other_prefix = _split(other["metadata"]["location"])
    _denied(lambda: client.get_object(Bucket=bucket, Key=other_key))
    _denied(lambda: client.put_object(Bucket=bucket, Key=other_prefix + "/data/evil.parquet", Body=b"x"))
    _denied(lambda: client.delete_object(Bucket=bucket, Key=other_key))
    _denied(lambda: client.list_objects_v2(Bucket=bucket, Prefix=other_prefix + "/"))
    _denied(lambda: client.list_objects_v2(Bucket=bucket))
    _denied(lambda: client.get_object(Bucket="elsewhere", Key=own))
    _denied(lambda: client.put_object(Bucket="elsewhere", Key=own, Body=b"x"))
    # The other table's files are untouched.
    assert s3.client().get_object(Bucket=bucket, Key=other_key)["Body"].read()


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_a_reader_gets_read_only_credentials_and_can_refresh_them(stack: dict) -> None:
    server, public = stack["server"], stack["public"]
    body = _load(server, "analyst", "events").json()
    [vended] = body["storage-credentials"]
    client = _s3(public.endpoint, vended["config"])
    bucket, own = _split(body["metadata-location"])
    assert client.get_object(Bucket=bucket, Key=own)["Body"].read()
    _denied(lambda: client.put_object(Bucket=bucket, Key=_split(vended["prefix"])[1] + "/data/x.parquet", Body=b"x"))
    _denied(lambda: client.delete_object(Bucket=bucket, Key=own))

    # The refresh route, as a client resolves it against its catalog URI.
    refresh = server.url + body["config"]["client.refresh-credentials-endpoint"]
    fresh = requests.get(refresh, headers={"Authorization": f"Bearer {token(server, 'analyst')}"}, timeout=30)
    assert fresh.status_code == 200, fresh.text
    [again] = fresh.json()["storage-credentials"]
    assert again["prefix"] == vended["prefix"] and again["config"]["s3.session-token"]
    _denied(lambda: _s3(public.endpoint, again["config"]).put_object(Bucket=bucket, Key=own + ".x", Body=b"x"))
    # Readers and writers of one table get different credentials; each kind is cached.
    writer = _load(server, "admin", "events").json()["storage-credentials"][0]["config"]
    assert writer["s3.access-key-id"] != again["config"]["s3.access-key-id"]
    assert _load(server, "admin", "events").json()["storage-credentials"][0]["config"] == writer
    metrics = requests.get(server.url + "/metrics", timeout=10).text
    assert 'catalog_s3_vended_credentials_total{access="read"}' in metrics
    assert 'catalog_s3_vended_credentials_total{access="write"}' in metrics


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_a_plan_carries_read_only_credentials_for_its_table_and_its_id_gets_them_again(stack: dict) -> None:
    """Server-side scan planning with vending on: the completed plan has storage-credentials scoped to
    the table, read-only even for a writer (a plan reads); ``/credentials?planId=`` gives the same."""
    server, public = stack["server"], stack["public"]
    as_(server, "admin").load_table("lake.events").append(ROWS)  # a data file to plan, whatever ran before
    headers = {"Authorization": f"Bearer {token(server, 'admin')}", **VENDED}
    url = f"{server.url}/v1/namespaces/lake/tables/events"
    plan = requests.post(url + "/plan", json={}, headers=headers, timeout=60)
    assert plan.status_code == 200, plan.text
    body = plan.json()
    [vended] = body["storage-credentials"]
    location = _load(server, "admin", "events").json()["metadata"]["location"]
    assert vended["prefix"] == location
    client = _s3(public.endpoint, vended["config"])
    bucket, prefix = _split(location)
    data_file = body["file-scan-tasks"][0]["data-file"]["file-path"]
    assert client.get_object(Bucket=bucket, Key=_split(data_file)[1])["Body"].read()
    _denied(lambda: client.put_object(Bucket=bucket, Key=prefix + "/data/by-a-plan.parquet", Body=b"x"))
    _, other_prefix = _split(_load(server, "admin", "events2").json()["metadata"]["location"])
    _denied(lambda: client.list_objects_v2(Bucket=bucket, Prefix=other_prefix + "/"))
    # without asking for vended credentials, none
    plain = requests.post(url + "/plan", json={}, headers={"Authorization": headers["Authorization"]}, timeout=60)
    assert "storage-credentials" not in plain.json()
    again = requests.get(url + "/credentials", params={"planId": body["plan-id"]}, headers=headers, timeout=30)
    assert again.status_code == 200, again.text
    [fresh] = again.json()["storage-credentials"]
    assert fresh["prefix"] == location
    _denied(lambda: _s3(public.endpoint, fresh["config"]).put_object(Bucket=bucket, Key=prefix + "/x", Body=b"x"))


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_sts_down_is_503_and_never_the_servers_keys(stack: dict) -> None:
    server, sts = stack["server"], stack["sts"]
    name = f"fresh_{uuid.uuid4().hex[:6]}"  # not in the credential cache
    headers = {"Authorization": f"Bearer {token(server, 'admin')}"}
    created = requests.post(
        f"{server.url}/v1/namespaces/lake/tables",
        json={"name": name, "schema": {"type": "struct", "schema-id": 0, "fields": []}},
        headers=headers,
        timeout=30,
    )
    assert created.status_code == 200 and "storage-credentials" not in created.json(), created.text
    sts.take_down()
    try:
        refused = _load(server, "admin", name)
        assert_error(refused, 503, "ServiceUnavailableException", "STS AssumeRole failed")
        fresh = requests.get(server.url + credentials_path("", ("lake",), name), headers=headers | VENDED, timeout=30)
        assert_error(fresh, 503, "ServiceUnavailableException", "STS")
        plain = _load(server, "admin", name, headers={})  # no delegation asked: served as before
        assert plain.status_code == 200 and "storage-credentials" not in plain.json()
        for resp in (refused, fresh, plain):
            assert stack["s3"].secret_key not in resp.text
    finally:
        sts.bring_up()


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_a_location_a_policy_cannot_confine_gets_no_credentials(stack: dict) -> None:
    """``*`` is a wildcard in an IAM policy: credentials for ``t*`` would also open ``t2``."""
    server = stack["server"]
    headers = {"Authorization": f"Bearer {token(server, 'admin')}"}
    created = requests.post(
        f"{server.url}/v1/namespaces/lake/tables",
        json={"name": "wild*", "schema": {"type": "struct", "schema-id": 0, "fields": []}},
        headers=headers,
        timeout=30,
    )
    assert created.status_code == 200, created.text
    assert_error(_load(server, "admin", "wild%2A"), 403, "ForbiddenException", "wildcard")
    assert _load(server, "admin", "wild%2A", headers={}).status_code == 200


def test_credential_cache_is_bounded_and_renews_at_half_life(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pure logic of the cache (the STS answer stubbed): one STS call per (location, access) until
    half the lifetime is gone; the oldest entries go beyond the bound."""
    import datetime

    from catalog.settings import Settings
    from catalog.storage import vending

    calls: list[dict] = []

    class FakeSTS:
        def assume_role(self, **kw: Any) -> dict:
            calls.append(kw)
            expiry = datetime.datetime.fromtimestamp(clock[0] + 1000, datetime.UTC)
            n = str(len(calls))
            return {"Credentials": {"AccessKeyId": n, "SecretAccessKey": n, "SessionToken": n, "Expiration": expiry}}

    clock = [1_000_000.0]
    monkeypatch.setattr(vending.time, "time", lambda: clock[0])
    monkeypatch.setattr(vending, "MAX_CACHED", 3)
    vendor = vending.Vendor(Settings(s3_endpoint="http://127.0.0.1:1", s3_sts_role_arn="arn:aws:iam::1:role/r").storage)
    vendor.sts = FakeSTS()
    first = vendor.credentials("s3://b/ns/t", "read")
    assert vendor.credentials("s3://b/ns/t", "read") is first and len(calls) == 1
    assert vendor.credentials("s3://b/ns/t", "write") is not first and len(calls) == 2
    assert '"s3:PutObject"' in calls[1]["Policy"] and '"s3:PutObject"' not in calls[0]["Policy"]
    clock[0] += 499
    assert vendor.credentials("s3://b/ns/t", "read") is first
    clock[0] += 2  # past half of the 1000 s
    assert vendor.credentials("s3://b/ns/t", "read") is not first and len(calls) == 3
    for i in range(5):
        vendor.credentials(f"s3://b/ns/t{i}", "read")
    assert len(vendor._cache) == 3
    assert vending.wants_vended("remote-signing, Vended-Credentials")
    assert not vending.wants_vended("remote-signing") and not vending.wants_vended(None)


def test_vending_without_an_sts_role_is_refused_at_start(tmp_path: Path) -> None:
    env = {
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
        "CATALOG_WAREHOUSE": "s3://warehouse/x",
        "CATALOG_S3_VEND_CREDENTIALS": "true",
        "CATALOG_PORT": "1",
    }
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 2, served.stderr
    assert "CATALOG_S3_STS_ROLE_ARN" in served.stderr and "Traceback" not in served.stderr
    assert len(served.stderr.strip().splitlines()) == 1, served.stderr


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_duckdb_reads_with_vended_credentials_and_no_s3_secret(stack: dict) -> None:
    """DuckDB's iceberg extension with only a catalog secret (no S3 secret): it reads with the
    credentials the catalog vends, through the client endpoint."""
    server, public = stack["server"], stack["public"]
    try:
        con = duckdb_connection()
    except ImportError:
        skip_or_fail("duckdb is not installed")
    con.execute(
        "CREATE SECRET catalog (TYPE iceberg, CLIENT_ID 'analyst', CLIENT_SECRET ?, OAUTH2_SERVER_URI ?)",
        [CLIENTS["analyst"], f"{server.url}/v1/oauth/tokens"],
    )
    con.execute(f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{server.url}', SECRET catalog)")
    before = len(public.agents)
    expected = as_(server, "analyst").load_table("lake.events").scan().to_arrow().num_rows
    assert con.execute("SELECT count(*) FROM lake.lake.events").fetchone()[0] == expected
    assert len(public.agents) > before
    assert stack["internal"].refused == []


SPARK_SCRIPT = """
import sys
from pyspark.sql import SparkSession

uri, credential, jars = sys.argv[1:4]
builder = SparkSession.builder.master("local[1]").appName("vended")
for key, value in {
    "spark.jars": jars,
    "spark.ui.enabled": "false",
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.catalog.lake.type": "rest",
    "spark.sql.catalog.lake.uri": uri,
    "spark.sql.catalog.lake.credential": credential,
    "spark.sql.catalog.lake.oauth2-server-uri": uri + "/v1/oauth/tokens",
    "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
    "spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation": "vended-credentials",
    "spark.sql.catalog.lake.cache-enabled": "false",
}.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark.sql("CREATE TABLE lake.lake.spark_t (id BIGINT, name STRING) USING iceberg")
spark.sql("INSERT INTO lake.lake.spark_t VALUES (1, 'a'), (2, 'b')")
print("ROWS", spark.sql("SELECT count(*) FROM lake.lake.spark_t").collect()[0][0])
print("EVENTS", spark.sql("SELECT count(*) FROM lake.lake.events").collect()[0][0])
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_spark_without_s3_settings_writes_and_reads_with_vended_credentials(stack: dict, tmp_path: Path) -> None:
    """Spark (Iceberg 1.9 S3FileIO) told nothing about S3: the catalog's endpoint and the vended
    credentials are all it has. Iceberg 1.9's VendedCredentialsProvider starts from the load's
    credentials and calls the advertised refresh route only as they near expiry (STS's minimum
    lifetime, 900 s, is longer than this job), so the route itself is tested with HTTP above."""
    import shutil

    jars = os.environ.get("ICEBERG_SPARK_JARS")
    missing = None if jars and shutil.which("java") else "ICEBERG_SPARK_JARS or java missing"
    if missing:
        skip_or_fail(missing)
    server, public, internal = stack["server"], stack["public"], stack["internal"]
    script = tmp_path / "vended_spark.py"
    script.write_text(SPARK_SCRIPT)
    before = len(public.agents)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run(
        [sys.executable, str(script), server.url, f"admin:{CLIENTS['admin']}", jars],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    events = as_(server, "analyst").load_table("lake.events").scan().to_arrow().num_rows
    assert "ROWS 2" in done.stdout and f"EVENTS {events}" in done.stdout, done.stdout
    assert any("aws-sdk-java" in a for a in public.agents[before:]), public.agents[before:]
    assert internal.refused == []
    assert as_(server, "analyst").load_table("lake.spark_t").scan().to_arrow().num_rows == 2


@pytest.mark.s3  # SeaweedFS with STS, started by the module
def test_vending_inside_created_warehouses_keeps_a_principal_to_its_own(stack: dict, tmp_path: Path) -> None:
    """Two S3 warehouses created with vending in their profiles, on a server whose default is local
    disk: a principal granted one gets credentials scoped to its table there, which reach nothing of
    the other warehouse, and gets no credentials of the other warehouse's tables at all."""
    from tests.support import auth_env, s3_profile, warehouse_admin_grants

    s3 = stack["s3"]
    server = start_server(tmp_path / "srv", "sqlite", auth_env(tmp_path, warehouse_admin_grants("vend-a")))
    admin = {"Authorization": f"Bearer {token(server, 'admin')}"}
    ingest = {"Authorization": f"Bearer {token(server, 'ingest')}", **VENDED}
    try:
        for name in ("vend-a", "vend-b"):
            vending = {"vend-credentials": True, "sts-endpoint": s3.endpoint, "sts-role-arn": s3.sts_role_arn}
            profile = {**s3_profile(s3), **vending}
            doc = {"name": name, "location": f"s3://{s3.bucket}/{name}-{uuid.uuid4().hex[:6]}", "s3": profile}
            made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, headers=admin, timeout=60)
            assert made.status_code == 201, made.text
            base = f"{server.url}/v1/{name}/namespaces"
            assert requests.post(base, json={"namespace": ["lake"]}, headers=admin, timeout=30).status_code == 200
            body = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": []}}
            assert requests.post(f"{base}/lake/tables", json=body, headers=admin, timeout=30).status_code == 200

        mine = requests.get(f"{server.url}/v1/vend-a/namespaces/lake/tables/t", headers=ingest, timeout=30)
        assert mine.status_code == 200, mine.text
        assert s3.secret_key not in mine.text
        [vended] = mine.json()["storage-credentials"]
        assert vended["prefix"] == mine.json()["metadata"]["location"]
        client = _s3(s3.endpoint, vended["config"])
        bucket, own = _split(mine.json()["metadata-location"])
        assert client.get_object(Bucket=bucket, Key=own)["Body"].read()

        theirs = requests.get(f"{server.url}/v1/vend-b/namespaces/lake/tables/t", headers=admin, timeout=30).json()
        _, their_key = _split(theirs["metadata-location"])
        _, their_prefix = _split(theirs["metadata"]["location"])
        _denied(lambda: client.get_object(Bucket=bucket, Key=their_key))
        _denied(lambda: client.put_object(Bucket=bucket, Key=their_prefix + "/data/evil.parquet", Body=b"x"))
        for path in ("", "/credentials"):
            resp = requests.get(f"{server.url}/v1/vend-b/namespaces/lake/tables/t{path}", headers=ingest, timeout=30)
            assert resp.status_code == 403, resp.text
            assert "storage-credentials" not in resp.text and s3.secret_key not in resp.text
    finally:
        server.stop()
