"""S3 remote signing: clients with no S3 keys write and read tables through the catalog's signer, and
cannot touch anything outside their table.

One server for the module: SQLite catalog, S3 warehouse on SeaweedFS, authentication and grants on
(``writer`` may write the namespace ``sg``, ``reader`` may read it), remote signing on. Refusals are
asserted on the bucket too: its listing is the same before and after.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.utils.concurrent import ExecutorFactory

from catalog import errors
from catalog.settings import Settings
from catalog.storage import signing
from tests.support import (
    CLIENTS,
    PY_SCHEMA,
    TOKEN_SECRET,
    Server,
    rows,
    s3_env,
    spark_conf,
    spark_unavailable,
    start_server,
    token,
)

pytestmark = pytest.mark.timeout(300)

BOOTSTRAP = """
grants:
  - {principal: user:admin, privileges: [admin], on: catalog}
  - {principal: user:ingest, privileges: [write, create], on: {namespace: sg}}
  - {principal: user:analyst, privileges: [read], on: {namespace: sg}}
"""
WRITER, READER = "ingest", "analyst"


@pytest.fixture(scope="module")
def s3(services: dict) -> Any:
    return services["s3"]


@pytest.fixture(scope="module")
def signed(s3: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    workdir = tmp_path_factory.mktemp("signing")
    policy = workdir / "grants.yaml"
    policy.write_text(BOOTSTRAP)
    env = {
        **s3_env(s3, f"sign-{uuid.uuid4().hex[:6]}"),
        "CATALOG_S3_REMOTE_SIGNING": "true",
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(policy),
    }
    server = start_server(workdir, "sqlite", env)
    keyless("admin", server).create_namespace("sg")
    yield server
    server.stop()


def keyless(client: str, server: Server, **props: str) -> RestCatalog:
    """A pyiceberg catalog with a token and NO S3 keys: only the catalog URI."""
    return RestCatalog(
        f"k-{uuid.uuid4().hex[:6]}",
        uri=server.url,
        credential=f"{client}:{CLIENTS[client]}",
        **{"oauth2-server-uri": server.url + "/v1/oauth/tokens", **props},
    )


def bucket_listing(s3: Any) -> dict[str, str]:
    pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=s3.bucket)
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", [])}


class Signer:
    """Raw sign requests for one table, as one principal."""

    def __init__(self, server: Server, client: str, ident: str, prefix: str = "") -> None:
        ns, name = ident.split(".")
        self.url = f"{server.url}/v1/{prefix + '/' if prefix else ''}namespaces/{ns}/tables/{name}/sign"
        self.headers = {"Authorization": f"Bearer {token(server, client)}"}

    def __call__(self, method: str, uri: str, headers: dict | None = None, **extra: Any) -> requests.Response:
        body = {"region": "us-east-1", "uri": uri, "method": method, "headers": headers or {}, **extra}
        return requests.post(self.url, json=body, headers=self.headers, timeout=30)

    def raw(self, data: bytes) -> requests.Response:
        return requests.post(
            self.url, data=data, headers={**self.headers, "Content-Type": "application/json"}, timeout=30
        )


def send(signer: Signer, method: str, uri: str, data: bytes = b"", headers: dict | None = None) -> requests.Response:
    """Sign ``method uri`` and send it to S3 with the answer's headers."""
    headers = dict(headers or {})
    answer = signer(method, uri, {k: [v] for k, v in headers.items()})
    assert answer.status_code == 200, answer.text
    assert answer.headers["cache-control"] == "no-cache"
    for name, values in answer.json()["headers"].items():
        headers[name] = ", ".join(values)
    return requests.request(method, answer.json()["uri"], data=data, headers=headers, timeout=30)


def location_of(server: Server, ident: str) -> tuple[str, str]:
    """(bucket, key prefix) of a table's location."""
    ns, name = ident.split(".")
    resp = requests.get(
        f"{server.url}/v1/namespaces/{ns}/tables/{name}",
        headers={"Authorization": f"Bearer {token(server, 'admin')}"},
        timeout=30,
    )
    location = resp.json()["metadata"]["location"]
    bucket, _, prefix = location.removeprefix("s3://").partition("/")
    return bucket, prefix


def metric(server: Server, outcome: str) -> float:
    text = requests.get(f"{server.url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f'catalog_s3_sign_requests_total{{outcome="{outcome}"}}'):
            return float(line.split()[-1])
    return 0.0


# -- pure parts ------------------------------------------------------------------------------------


def test_the_advertised_endpoint_is_the_route_with_the_prefix_and_the_namespace_separator():
    assert signing.endpoint_path("", ("a", "b c"), "t/1") == "v1/namespaces/a%1Fb%20c/tables/t%2F1/sign"
    assert signing.endpoint_path("wh", ("a",), "t") == "v1/wh/namespaces/a/tables/t/sign"
    on = Settings(warehouse="s3://b/w", s3_remote_signing=True).storage
    assert signing.offered(on, "remote-signing")
    assert signing.offered(on, "vended-credentials")  # nothing vended: signing instead of the server's keys
    assert not signing.offered(on.model_copy(update={"s3_vend_credentials": True}), "vended-credentials")
    assert not signing.offered(on, None)
    assert not signing.offered(Settings(warehouse="/tmp/w", s3_remote_signing=True).storage, "remote-signing")
    assert not signing.offered(Settings(warehouse="s3://b/w").storage, "remote-signing")


HOSTS = [("s3.test", 9000)]
DELETE = "http://s3.test:9000/b?delete"


def _plan(body: str, bulk_delete: bool = True) -> signing.Plan:
    return signing.plan(signing.SignRequest("POST", DELETE, {}, body), HOSTS, bulk_delete)


def test_delete_objects_keys_are_confined_and_the_body_hash_is_what_is_signed():
    body = "<Delete xmlns='http://s3.amazonaws.com/doc/2006-03-01/'><Object><Key>w/t/a</Key></Object></Delete>"
    planned = _plan(body)
    assert planned.keys == ["w/t/a"] and planned.payload == hashlib.sha256(body.encode()).hexdigest()
    signing.confine(planned, "s3://b/w/t")
    for location in ("s3://b/w/other", "s3://other/w/t"):
        with pytest.raises(errors.Forbidden):
            signing.confine(planned, location)
    foreign = _plan(body.replace("</Delete>", "<Object><Key>w/x/secret</Key></Object></Delete>"))
    with pytest.raises(errors.Forbidden):
        signing.confine(foreign, "s3://b/w/t")
    with pytest.raises(errors.Forbidden):
        _plan(body.replace("<Key>w/t/a</Key>", "<Key>w/t/../x/a</Key>"))
    with pytest.raises(errors.Forbidden):
        _plan(body.replace("</Key>", "</Key><VersionId>1</VersionId>"))
    with pytest.raises(errors.Forbidden):  # off: S3-compatible stores that ignore the hash would run any body
        _plan(body, bulk_delete=False)
    laughs = '<!DOCTYPE d [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]><Delete><Object><Key>&b;</Key></Object></Delete>'
    for garbage in ("", "<Delete><Object><Key>x", laughs, "<Other/>", "<Delete></Delete>", "x" * (3 * 2**20)):
        with pytest.raises(errors.BadRequest):
            _plan(garbage)


def test_path_style_and_virtual_hosted_requests_name_the_same_bucket_and_key():
    for uri in ("http://s3.test:9000/b/w/t/a%20b", "http://b.s3.test:9000/w/t/a%20b"):
        planned = signing.plan(signing.SignRequest("GET", uri, {}), HOSTS)
        assert (planned.bucket, planned.keys, planned.access) == ("b", ["w/t/a b"], signing.READ)
        signing.confine(planned, "s3a://b/w/t/")
    aws = signing.endpoint_hosts(Settings(warehouse="s3://b/w", s3_region="eu-west-1").storage)
    planned = signing.plan(signing.SignRequest("PUT", "https://b.s3.eu-west-1.amazonaws.com/w/t/x", {}), aws)
    assert (planned.bucket, planned.access, planned.payload) == ("b", signing.WRITE, signing.UNSIGNED_PAYLOAD)
    for uri in ("http://s3.test:9001/b/w/t/x", "http://evil.test:9000/b/w/t/x", "http://b.evil.test:9000/w/t/x"):
        with pytest.raises(errors.Forbidden):
            signing.plan(signing.SignRequest("GET", uri, {}), HOSTS)


def test_the_query_is_signed_in_its_canonical_spelling():
    req = signing.SignRequest("GET", "http://s3.test:9000/b?prefix=w/t/a%20b+c&list-type=2", {})
    planned = signing.plan(req, HOSTS)
    assert planned.uri == "http://s3.test:9000/b?prefix=w%2Ft%2Fa%20b%20c&list-type=2"
    assert planned.keys == ["w/t/a b c"]


# -- clients without keys --------------------------------------------------------------------------


def test_pyiceberg_without_s3_keys_creates_appends_and_reads_through_signing(signed: Server, monkeypatch):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    # pyiceberg 0.11 registers its signer on one s3fs client; with its worker threads, a request
    # now and then leaves unsigned (seen: a HEAD without Authorization, 403 from S3; never with
    # one worker). A client-side race, not the signer's: one worker here.
    monkeypatch.setattr(ExecutorFactory, "_instance", ThreadPoolExecutor(max_workers=1))
    monkeypatch.setattr(ExecutorFactory, "_instance_pid", os.getpid())
    before = metric(signed, "signed")
    writer = keyless(WRITER, signed, **{"header.X-Iceberg-Access-Delegation": "remote-signing"})
    table = writer.create_table(f"sg.py_{uuid.uuid4().hex[:6]}", PY_SCHEMA)
    assert table.io.properties["s3.remote-signing-enabled"] == "true"
    assert "s3.access-key-id" not in table.io.properties and "s3.secret-access-key" not in table.io.properties
    table.append(rows(0, 5))
    table.append(rows(5, 3))
    # a staged create writes before the table exists: signed in the location the server chooses
    staged = f"sg.staged_{uuid.uuid4().hex[:6]}"
    with writer.create_table_transaction(staged, PY_SCHEMA) as tx:
        tx.append(rows(100, 2))
    assert sorted(writer.load_table(staged).scan().to_arrow().column("id").to_pylist()) == [100, 101]
    # pyiceberg's default delegation header (vended-credentials) gets signing too: nothing is vended
    reader = keyless(READER, signed)
    got = reader.load_table(table.name()).scan().to_arrow()
    assert sorted(got.column("id").to_pylist()) == list(range(8))
    assert metric(signed, "signed") > before


@pytest.mark.spark
def test_spark_without_s3_keys_inserts_and_selects_through_signing(signed: Server, s3: Any):

    if missing := spark_unavailable():
        pytest.skip(missing)
    from pyspark.sql import SparkSession

    name = "signed"
    conf = spark_conf(signed.url, catalog=name)
    conf |= {
        f"spark.sql.catalog.{name}.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        f"spark.sql.catalog.{name}.header.X-Iceberg-Access-Delegation": "remote-signing",
        f"spark.sql.catalog.{name}.credential": f"{WRITER}:{CLIENTS[WRITER]}",
        f"spark.sql.catalog.{name}.oauth2-server-uri": signed.url + "/v1/oauth/tokens",
    }
    builder = SparkSession.builder.master("local[1]").appName("signing")
    for key, value in {**conf, "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    before = metric(signed, "signed")
    try:
        for key, value in conf.items():  # a session that was already running gets the catalog too
            if key.startswith(f"spark.sql.catalog.{name}"):
                spark.conf.set(key, value)
        table = f"{name}.sg.spark_{uuid.uuid4().hex[:6]}"
        spark.sql(f"CREATE TABLE {table} (id BIGINT, label STRING) USING iceberg")
        spark.sql(f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        spark.sql(f"INSERT INTO {table} VALUES (4, 'd')")
        got = [tuple(r) for r in spark.sql(f"SELECT id, label FROM {table} ORDER BY id").collect()]
        # CTAS is a staged create: its files are written, and signed, before the table exists
        spark.sql(f"CREATE TABLE {table}_ctas USING iceberg AS SELECT * FROM {table} WHERE id > 2")
        copied = [r[0] for r in spark.sql(f"SELECT id FROM {table}_ctas ORDER BY id").collect()]
    finally:
        spark.stop()  # the next module builds its own session
    assert got == [(1, "a"), (2, "b"), (3, "c"), (4, "d")] and copied == [3, 4]
    assert metric(signed, "signed") > before  # every S3 request went through the catalog's signer
    bucket, prefix = location_of(signed, table.removeprefix(f"{name}."))
    assert any(k.startswith(prefix + "/data/") for k in bucket_listing(s3))


# -- what the signer refuses -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def tables(signed: Server) -> dict[str, tuple[str, str]]:
    admin = keyless("admin", signed, **{"header.X-Iceberg-Access-Delegation": "remote-signing"})
    out = {}
    for ident in ("sg.mine", "sg.theirs"):
        admin.create_table(ident, PY_SCHEMA).append(rows(0, 2))
        out[ident] = location_of(signed, ident)
    return out


def test_a_writer_gets_only_its_tables_objects_signed_and_nothing_outside_changes(signed, s3, tables):
    bucket, mine = tables["sg.mine"]
    _, theirs = tables["sg.theirs"]
    base = s3.endpoint
    sign = Signer(signed, WRITER, "sg.mine")
    denied = metric(signed, "denied")
    before = bucket_listing(s3)
    foreign = next(k for k in before if k.startswith(theirs + "/"))
    xml = "<Delete><Object><Key>{}</Key></Object><Object><Key>{}</Key></Object></Delete>"
    refused = [
        ("PUT", f"{base}/{bucket}/{theirs}/data/x.parquet", {}),  # another table's prefix
        ("PUT", f"{base}/{bucket}/{mine}x/data/x.parquet", {}),  # a sibling sharing the name's start
        ("PUT", f"{base}/other-bucket/{mine}/data/x.parquet", {}),  # another bucket
        ("PUT", f"{base}/{bucket}/{mine}/../{theirs.rsplit('/', 1)[-1]}/x", {}),  # traversal
        ("PUT", f"{base}/{bucket}/{mine}/%2E%2E/x", {}),  # traversal, encoded
        ("GET", f"{base}/{bucket}/{mine}/data/x.parquet?acl", {}),  # sub-resources
        ("PUT", f"{base}/{bucket}/{mine}/data/x.parquet?tagging", {}),
        ("GET", f"{base}/{bucket}?policy", {}),
        ("DELETE", f"{base}/{bucket}/{mine}/data/x.parquet?versionId=1", {}),
        ("PUT", f"{base}/{bucket}/{mine}/data/copy.parquet", {"x-amz-copy-source": [f"/{bucket}/{foreign}"]}),
        ("PUT", f"{base}/{bucket}/{mine}/data/x.parquet", {"x-amz-acl": ["public-read"]}),
        ("PUT", f"{base}/{bucket}/{mine}/data/x.parquet", {"Host": ["evil.example:80"]}),
        ("PUT", f"http://evil.example:9/{bucket}/{mine}/data/x.parquet", {}),  # another endpoint
        ("GET", f"{base}/{bucket}?list-type=2&prefix={quote(theirs)}/", {}),  # another table's listing
        ("GET", f"{base}/{bucket}?list-type=2", {}),  # the whole bucket
        ("GET", f"{base}/{bucket}?list-type=2&prefix={quote(mine)}", {}),  # also lists mine-something
        ("DELETE", f"{base}/{bucket}", {}),  # DeleteBucket
    ]
    for method, uri, headers in refused:
        resp = sign(method, uri, headers)
        assert resp.status_code == 403, (method, uri, resp.text)
        assert resp.json()["error"]["type"] == "ForbiddenException"
    own = next(k for k in before if k.startswith(mine + "/data/"))
    resp = sign("POST", f"{base}/{bucket}?delete", body=xml.format(own, own))  # bulk delete: off by default
    assert resp.status_code == 403, resp.text
    assert metric(signed, "denied") == denied + len(refused) + 1
    assert bucket_listing(s3) == before

    # What it does sign works, for that object: a PUT inside the table, then its DELETE.
    key = f"{mine}/data/signed-{uuid.uuid4().hex[:6]}.bin"
    assert send(sign, "PUT", f"{base}/{bucket}/{key}", b"payload").status_code == 200
    assert s3.client().get_object(Bucket=s3.bucket, Key=key)["Body"].read() == b"payload"
    assert send(sign, "DELETE", f"{base}/{bucket}/{key}").status_code == 204
    assert bucket_listing(s3) == before


def test_a_reader_gets_reads_signed_and_writes_refused(signed, s3, tables):
    bucket, mine = tables["sg.mine"]
    base = s3.endpoint
    sign = Signer(signed, READER, "sg.mine")
    own = next(k for k in bucket_listing(s3) if k.startswith(mine + "/metadata/"))
    got = send(sign, "GET", f"{base}/{bucket}/{quote(own)}", headers={"Range": "bytes=0-3"})
    assert got.status_code == 206 and len(got.content) == 4
    assert send(sign, "HEAD", f"{base}/{bucket}/{quote(own)}").status_code == 200
    listing = send(sign, "GET", f"{base}/{bucket}?list-type=2&prefix={mine}/metadata/")  # as spelt: re-encoded
    assert listing.status_code == 200 and own.encode() in listing.content
    before = bucket_listing(s3)
    for method, uri in [
        ("PUT", f"{base}/{bucket}/{mine}/data/r.parquet"),
        ("DELETE", f"{base}/{bucket}/{quote(own)}"),
        ("POST", f"{base}/{bucket}/{mine}/data/r.parquet?uploads"),
    ]:
        resp = sign(method, uri)
        assert resp.status_code == 403, (method, resp.text)
    assert bucket_listing(s3) == before
    nobody = Signer(signed, "nobody", "sg.mine")
    assert nobody("GET", f"{base}/{bucket}/{quote(own)}").status_code == 403


def test_malformed_sign_requests_are_400_and_a_missing_table_404(signed, s3, tables):
    bucket, mine = tables["sg.mine"]
    base = s3.endpoint
    sign = Signer(signed, WRITER, "sg.mine")
    for data in [b"", b"not json", b"[]", b'{"uri": 1}', b'{"region": "r", "uri": "u", "method": "GET"}']:
        resp = sign.raw(data)
        assert resp.status_code == 400, (data, resp.text)
    for method, uri, extra in [
        ("FETCH", f"{base}/{bucket}/{mine}/x", {}),
        ("GET", f"ftp://{bucket}/{mine}/x", {}),
        ("GET", "not a uri", {}),
        ("GET", f"{base}/{bucket}/{mine}/%ff%fe", {}),
        ("GET", f"{base}:99999/{bucket}/{mine}/x", {}),
        ("GET", f"{base}/{bucket}/{mine}/x", {"headers": {"a": "not a list"}}),
        ("GET", f"{base}/{bucket}/{mine}/x", {"headers": {"a\nb": ["v"]}}),
        ("GET", f"{base}/{bucket}/{mine}/x", {"provider": "gcs"}),
    ]:
        body = {"region": "us-east-1", "uri": uri, "method": method, "headers": {}, **extra}
        resp = requests.post(sign.url, json=body, headers=sign.headers, timeout=30)
        assert resp.status_code == 400, (method, uri, extra, resp.text)
        assert resp.json()["error"]["type"] == "BadRequestException"
    # a table that does not exist: 404 for a caller that may not create it
    resp = Signer(signed, READER, "sg.missing")("GET", f"{base}/{bucket}/{mine}/x")
    assert resp.status_code == 404 and resp.json()["error"]["type"] == "NoSuchTableException"
    # one that may create it (a staged create) gets signatures only where the server would put it
    staged = Signer(signed, WRITER, "sg.missing")
    assert staged("PUT", f"{base}/{bucket}/{mine.rsplit('/', 1)[0]}/missing/data/x.parquet").status_code == 200
    assert staged("PUT", f"{base}/{bucket}/{mine}/data/x.parquet").status_code == 403
    assert Signer(signed, WRITER, "nope.missing")("GET", f"{base}/{bucket}/{mine}/x").status_code == 403


def test_signing_is_not_served_or_advertised_unless_switched_on(tmp_path: Path, s3):
    server = start_server(tmp_path, "sqlite", s3_env(s3, "sign-off"))
    try:
        config = requests.get(f"{server.url}/v1/config", timeout=10).json()
        assert not any(e.endswith("/sign") for e in config["endpoints"])
        resp = requests.post(
            f"{server.url}/v1/namespaces/a/tables/t/sign",
            json={"region": "r", "uri": "http://h/b/k", "method": "GET", "headers": {}},
            timeout=10,
        )
        assert resp.status_code == 501 and resp.json()["error"]["type"] == "NotImplementedException"
    finally:
        server.stop()


# -- inside created warehouses ---------------------------------------------------------------------


def test_signing_in_created_warehouses_keeps_a_principal_to_its_own(s3, tmp_path: Path, monkeypatch):
    """Two S3 warehouses with remote signing from their profiles: a keyless client writes and reads
    in the warehouse it is granted, through the signer; it gets nothing signed in the other one,
    neither through that warehouse's route nor by naming the other's objects through its own."""
    from tests.support import auth_env, s3_profile, warehouse_admin_grants

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setattr(ExecutorFactory, "_instance", ThreadPoolExecutor(max_workers=1))  # see above
    monkeypatch.setattr(ExecutorFactory, "_instance_pid", os.getpid())
    server = start_server(tmp_path / "srv", "sqlite", auth_env(tmp_path, warehouse_admin_grants("sign-a")))
    admin = {"Authorization": f"Bearer {token(server, 'admin')}"}
    roots = {name: f"wh-{name}-{uuid.uuid4().hex[:6]}" for name in ("sign-a", "sign-b")}
    try:
        for name, root in roots.items():
            profile = {**s3_profile(s3), "remote-signing": True}
            doc = {"name": name, "location": f"s3://{s3.bucket}/{root}", "s3": profile}
            made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, headers=admin, timeout=60)
            assert made.status_code == 201, made.text
        s3_keys = {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}
        other = keyless("admin", server, warehouse="sign-b", **s3_keys)
        other.create_namespace("n")
        other.create_table("n.t", PY_SCHEMA).append(rows(0, 2))

        mine = keyless(WRITER, server, warehouse="sign-a", **{"header.X-Iceberg-Access-Delegation": "remote-signing"})
        mine.create_namespace("n")
        table = mine.create_table("n.t", PY_SCHEMA)
        assert table.io.properties["s3.remote-signing-enabled"] == "true"
        assert "s3.secret-access-key" not in table.io.properties
        table.append(rows(10, 3))
        assert sorted(mine.load_table("n.t").scan().to_arrow().column("id").to_pylist()) == [10, 11, 12]

        before = bucket_listing(s3)
        theirs = next(k for k in before if k.startswith(roots["sign-b"] + "/n/t/metadata/"))
        base = f"{s3.endpoint}/{s3.bucket}"
        through_theirs = Signer(server, WRITER, "n.t", prefix="sign-b")
        through_mine = Signer(server, WRITER, "n.t", prefix="sign-a")
        for sign in (through_theirs, through_mine):
            for method in ("GET", "PUT", "DELETE"):
                resp = sign(method, f"{base}/{quote(theirs)}")
                assert resp.status_code == 403, (sign.url, method, resp.text)
        assert through_mine("PUT", f"{base}/{roots['sign-b']}/n/t/data/x.parquet").status_code == 403
        assert bucket_listing(s3) == before
        mine_key = next(k for k in before if k.startswith(roots["sign-a"] + "/n/t/metadata/"))
        assert through_mine("GET", f"{base}/{quote(mine_key)}").status_code == 200  # its own: signed
    finally:
        server.stop()
        client = s3.client()
        for root in roots.values():
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=f"{root}/"):
                for o in page.get("Contents", []):
                    client.delete_object(Bucket=s3.bucket, Key=o["Key"])


# --- encoded dot segments and backslashes (issue 28, item f) -------------------------------------


def test_the_signer_refuses_encoded_dot_segments_and_backslashes():
    """Pure logic (no store needed): what the sign route plans and confines for a key. The URI is
    decoded once, as S3 decodes it; a segment still '..' after one more decode, or a backslash, is
    refused, since a FileIO, proxy or tool that decodes again or reads '\\' as '/' would climb out."""
    from catalog.storage import signing

    hosts = [("s3.test", 9000)]

    def plan(path: str) -> signing.Plan:
        planned = signing.plan(signing.SignRequest("GET", f"http://s3.test:9000/b/{path}", {}), hosts)
        signing.confine(planned, "s3://b/w/t")
        return planned

    assert plan("w/t/data/a%20b.parquet").keys == ["w/t/data/a b.parquet"]
    for path in (
        "w/t/%2e%2e/other/x",  # decoded once: '..'
        "w/t/%252e%252e/other/x",  # decoded twice: '..'
        "w/t/%252E./other/x",
        "w/t/%252e/x",
        "w/t/..%5Cother/x",  # a backslash
        "w/t/a%5C..%5C..%5Cother",
    ):
        with pytest.raises(errors.Forbidden):
            plan(path)
