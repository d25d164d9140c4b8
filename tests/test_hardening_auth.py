"""Issue 28, items 2 and 3: an identity provider's user cannot become a built-in client, and the
token endpoint's brake on guessing cannot be turned against the client being guessed or against
everyone behind a proxy.
"""

from __future__ import annotations

import http.client
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import requests

from catalog.auth.lockout import MAX_DELAY_S, FailureLimiter, parse_trusted_proxies
from tests.support import Server, assert_error, backends, start_server

SECRET = "hardening-test-token-secret-" + "h" * 32
CLIENTS = {"victim": "victim-secret", "bi": "bi-secret", "relay": "relay-secret"}
PROXY = "127.0.0.50"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_AUTHORIZATION": "none",
        "CATALOG_TRUSTED_PROXIES": f"{PROXY},10.9.0.0/16",
        "CATALOG_LOG_LEVEL": "info",
    }
    server = start_server(tmp_path_factory.mktemp("lockout"), "sqlite", env)
    yield server
    server.stop()


def token_request(
    server: Server, client_id: str, secret: str, source: str, forwarded: str | None = None
) -> tuple[int, dict, dict]:
    """POST /v1/oauth/tokens from a chosen loopback address (each 127.x.y.z is its own peer)."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    try:
        body = urlencode({"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
        conn.request("POST", "/v1/oauth/tokens", body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def audit_sources(server: Server, client_id: str) -> set[str]:
    """The sources the audit log counted failed token requests of ``client_id`` against."""
    found = set()
    for line in server.log.read_text().splitlines():
        if '"catalog.audit"' in line and "wrong secret" in line and f"client_id={client_id!r}" in line:
            found.add(json.loads(line)["message"].rsplit("source=", 1)[1])
    return found


# -- item 3: slowed down, never locked out ------------------------------------------------------------


def test_the_right_secret_gets_a_token_after_thirty_wrong_ones_from_the_same_address(token_server):
    source = "127.0.0.20"
    with ThreadPoolExecutor(10) as pool:
        wrong = list(pool.map(lambda i: token_request(token_server, "victim", f"guess-{i}", source), range(30)))
    assert all(status in (401, 429) for status, _, _ in wrong)
    status, headers, body = token_request(token_server, "victim", "wrong-again", source)
    assert status == 429 and body["error"] == "slow_down" and 1 <= int(headers["retry-after"]) <= MAX_DELAY_S
    started = time.monotonic()
    status, _, body = token_request(token_server, "victim", CLIENTS["victim"], source)
    assert status == 200 and body["access_token"], body
    assert time.monotonic() - started < MAX_DELAY_S + 1.5, "slowed by at most a small bounded delay"
    # The client's other users, elsewhere, were never slowed.
    started = time.monotonic()
    assert token_request(token_server, "victim", CLIENTS["victim"], "127.0.0.21")[0] == 200
    assert time.monotonic() - started < 1.0
    log = token_server.log.read_text()
    assert "victim-secret" not in log and "guess-" not in log


def test_forwarded_for_from_an_untrusted_peer_is_ignored(token_server):
    peer = "127.0.0.1"  # a local peer: uvicorn's default would have believed its header
    statuses = []
    for i in range(FailureLimiter.PAIR_FREE + 1):
        statuses.append(token_request(token_server, "bi", f"guess-{i}", peer, forwarded=f"203.0.113.{i + 1}")[0])
    assert statuses[-1] == 429, statuses  # counted together, against the peer
    assert audit_sources(token_server, "bi") == {peer}
    assert token_request(token_server, "bi", CLIENTS["bi"], peer, forwarded="203.0.113.99")[0] == 200


def test_forwarded_for_from_a_trusted_proxy_is_the_source(token_server):
    client = "198.51.100.7"
    statuses = [
        token_request(token_server, "relay", f"guess-{i}", PROXY, forwarded=f"{client}, {PROXY}")[0]
        for i in range(FailureLimiter.PAIR_FREE + 1)
    ]
    assert statuses[-1] == 429, statuses
    assert audit_sources(token_server, "relay") == {client}
    # Another client behind the same proxy is its own source: not slowed.
    assert token_request(token_server, "relay", "wrong", PROXY, forwarded="198.51.100.8")[0] == 401
    assert audit_sources(token_server, "relay") == {client, "198.51.100.8"}


def test_limiter_counts_pairs_and_addresses_and_reads_forwarded_for_only_from_proxies():
    now = [0.0]
    limiter = FailureLimiter(parse_trusted_proxies("10.0.0.1, 10.9.0.0/16"), max_entries=3, clock=lambda: now[0])
    for _ in range(FailureLimiter.PAIR_FREE - 1):
        assert limiter.failed("c", "192.0.2.1") == 0
    assert limiter.failed("c", "192.0.2.1") > 0
    assert limiter.delay("c", "192.0.2.1") <= MAX_DELAY_S
    assert limiter.delay("c", "192.0.2.2") == 0  # the same client elsewhere: not slowed
    assert limiter.delay("d", "192.0.2.1") == 0  # another client from there: not yet
    for _ in range(40):
        limiter.failed("c", "192.0.2.1")
    assert limiter.delay("c", "192.0.2.1") == MAX_DELAY_S  # bounded
    now[0] = 1000.0
    assert limiter.delay("c", "192.0.2.1") == 0  # forgotten after the window
    limiter.succeeded("c", "192.0.2.1")
    for i in range(10):
        limiter.failed("x", f"192.0.2.{100 + i}")
    assert len(limiter.pairs) <= 3 and len(limiter.addresses) <= 3  # bounded memory
    assert limiter.source("192.0.2.9", "1.2.3.4") == "192.0.2.9"
    assert limiter.source("10.0.0.1", "1.2.3.4") == "1.2.3.4"
    assert limiter.source("10.0.0.1", "6.6.6.6, 1.2.3.4, 10.9.3.3") == "1.2.3.4"  # the right-most untrusted
    assert limiter.source("10.0.0.1", "junk, 10.9.3.3") == "10.9.3.3"
    assert limiter.source("10.0.0.1", None) == "10.0.0.1"
    with pytest.raises(Exception, match="CATALOG_TRUSTED_PROXIES"):
        parse_trusted_proxies("10.0.0.0/33")


# -- item 2: built-in clients are client:<id>, an identity provider's users user:<name> ---------------

AUDIENCE = "iceberg-catalog"
BUILTIN = {"admin": "admin-secret", "reader": "reader-secret"}
# A bootstrap file written before principal kinds: its user:admin meant the built-in client.
OLD_BOOTSTRAP = """
grants:
  - {principal: user:admin, privileges: [manage-grants], "on": catalog}
"""


def _grant_row(principal: str, privilege: str, kind: str, name: str, source: str = "api") -> dict[str, Any]:
    return {
        "principal": principal,
        "privilege": privilege,
        "object_kind": kind,
        "object_name": name,
        "source": source,
        "created_ms": 0,
    }


def _database_before_principal_kinds(url: str) -> None:
    """A database at revision 0004 holding grants made through the API before this change."""
    import sqlalchemy as sa

    from catalog.settings import Settings
    from catalog.store import migrate
    from catalog.store.db import create_engine

    engine = create_engine(Settings(database_url=url))
    migrate.upgrade(engine, "0004")
    rows = [
        _grant_row("user:admin", "admin", "catalog", ""),  # meant for the built-in client admin
        _grant_row("user:alice", "read", "namespace", "pub"),  # an identity provider's user
    ]
    with engine.begin() as conn:
        conn.execute(sa.table("grants", *(sa.column(c) for c in rows[0])).insert(), rows)
    engine.dispose()


@pytest.fixture(scope="module")
def idp() -> Any:
    from tests.idp import LocalIdP

    with LocalIdP(audience=AUDIENCE) as provider:
        yield provider


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory, idp: Any) -> Any:
    workdir = tmp_path_factory.mktemp("kinds")
    _database_before_principal_kinds(f"sqlite:///{workdir / 'catalog.db'}")
    (workdir / "grants.yaml").write_text(OLD_BOOTSTRAP)
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in BUILTIN.items()),
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_OIDC_ISSUER": idp.issuer,
        "CATALOG_OIDC_AUDIENCE": AUDIENCE,
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
        "CATALOG_LOG_LEVEL": "info",
    }
    server = start_server(workdir, "sqlite", env)
    yield server
    server.stop()


def _builtin(server: Server, client: str) -> dict[str, str]:
    form = {"grant_type": "client_credentials", "client_id": client, "client_secret": BUILTIN[client]}
    resp = requests.post(f"{server.url}/v1/oauth/tokens", data=form, timeout=10)
    assert resp.status_code == 200, resp.text
    return {"Authorization": f"Bearer {resp.json()['access_token']}"}


def test_an_identity_providers_user_named_like_a_builtin_client_gets_none_of_its_grants(upgraded, idp):
    admin = _builtin(upgraded, "admin")
    impostor = {"Authorization": f"Bearer {idp.mint('admin')}"}  # sub: admin, from the identity provider
    resp = requests.post(f"{upgraded.url}/v1/namespaces", json={"namespace": ["pub"]}, headers=admin)
    assert resp.status_code == 200, resp.text  # the built-in client kept its (upgraded) grant
    resp = requests.post(f"{upgraded.url}/v1/namespaces", json={"namespace": ["stolen"]}, headers=impostor)
    assert_error(resp, 403, "ForbiddenException")
    assert requests.get(f"{upgraded.url}/v1/namespaces", headers=impostor).json()["namespaces"] == []
    me = requests.get(f"{upgraded.url}/management/v1/whoami", headers=impostor).json()
    assert me["principal"] == "admin" and me["grantee"] == "user:admin" and me["grants"] == []
    mine = requests.get(f"{upgraded.url}/management/v1/whoami", headers=admin).json()
    assert mine["principal"] == "admin" and mine["grantee"] == "client:admin"
    mine = mine["grants"]
    assert {(g["principal"], g["privilege"], g["source"]) for g in mine} == {
        ("client:admin", "admin", "api"),
        ("client:admin", "manage-grants", "bootstrap"),  # user:admin in the file: the built-in client
    }
    # The identity provider's user alice keeps her grant: she is not a built-in client.
    alice = {"Authorization": f"Bearer {idp.mint('alice')}"}
    assert requests.get(f"{upgraded.url}/v1/namespaces", headers=alice).json()["namespaces"] == [["pub"]]
    log = upgraded.log.read_text()
    assert "user:admin" in log and "client:admin" in log  # the rewrites are logged


def test_grants_name_the_kind_and_an_ambiguous_user_grant_is_refused(upgraded, idp):
    admin, reader = _builtin(upgraded, "admin"), _builtin(upgraded, "reader")
    requests.post(f"{upgraded.url}/v1/namespaces", json={"namespace": ["pub"]}, headers=admin)
    grant = {"principal": "user:reader", "privileges": ["read"], "on": {"namespace": "pub"}}
    resp = requests.post(f"{upgraded.url}/management/v1/grants", json=grant, headers=admin)
    assert_error(resp, 400, "BadRequestException", "client:reader")
    grant["principal"] = "client:reader"
    assert requests.post(f"{upgraded.url}/management/v1/grants", json=grant, headers=admin).status_code == 201
    assert requests.get(f"{upgraded.url}/v1/namespaces/pub", headers=reader).status_code == 200
    impostor = {"Authorization": f"Bearer {idp.mint('reader')}"}
    assert_error(requests.get(f"{upgraded.url}/v1/namespaces/pub", headers=impostor), 403, "ForbiddenException")


@pytest.fixture(params=backends())
def fresh_database(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    """An empty database of each backend: a SQLite file, or a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    import psycopg

    pg = request.getfixturevalue("services")["pg"]
    name = f"h28_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg.superuser_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER catalog")
    yield pg.url.rsplit("/", 1)[0] + "/" + name
    with psycopg.connect(pg.superuser_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def test_the_migration_marks_old_user_grants_and_start_up_settles_them_and_it_goes_back(fresh_database):
    import sqlalchemy as sa

    from catalog.settings import Settings
    from catalog.store import migrate
    from catalog.store.db import create_engine
    from catalog.store.entries import Store

    url = fresh_database
    _database_before_principal_kinds(url)
    engine = create_engine(Settings(database_url=url))
    with engine.begin() as conn:
        conn.execute(
            sa.table("grants", *(sa.column(c) for c in _grant_row("x", "x", "x", ""))).insert(),
            [
                _grant_row("user:admin", "read", "catalog", "", source="bootstrap"),
                _grant_row("role:r", "read", "catalog", ""),
            ],
        )
    migrate.upgrade(engine)
    assert migrate.is_at_head(engine)

    def rows() -> set[tuple[str, str, str, bool]]:
        with engine.connect() as conn:
            found = conn.execute(sa.text("SELECT principal, privilege, source, legacy FROM grants")).all()
        return {(p, priv, src, bool(legacy)) for p, priv, src, legacy in found}

    assert rows() == {
        ("user:admin", "admin", "api", True),
        ("user:alice", "read", "api", True),
        ("user:admin", "read", "bootstrap", False),  # the file decides these, at every start
        ("role:r", "read", "api", False),
    }
    store = Store(engine)
    moved = store.settle_legacy({"admin", "spark"})
    assert [(g.principal, str(g.privilege)) for g in moved] == [("user:admin", "admin")]
    assert rows() == {
        ("client:admin", "admin", "api", False),
        ("user:alice", "read", "api", False),
        ("user:admin", "read", "bootstrap", False),
        ("role:r", "read", "api", False),
    }
    # Settled once: a user:admin granted afterwards (an identity provider's user) is left alone.
    from catalog.auth.policy import ROOT, Grant, Privilege

    store.add_grants([Grant("user:admin", Privilege.WRITE, ROOT), Grant("client:admin", Privilege.READ, ROOT)])
    assert store.settle_legacy({"admin"}) == []
    assert ("user:admin", "write", "api", False) in rows()
    # Down: client:<id> is user:<id> again, a grant held under both names kept once.
    migrate.downgrade(engine, "0004")
    with engine.connect() as conn:
        back = conn.execute(sa.text("SELECT principal, privilege, source FROM grants")).all()
    assert sorted(back) == sorted(
        [
            ("user:admin", "admin", "api"),
            ("user:alice", "read", "api"),
            ("user:admin", "read", "bootstrap"),
            ("role:r", "read", "api"),
            ("user:admin", "write", "api"),
        ]
    )
    migrate.upgrade(engine)
    assert migrate.is_at_head(engine)
    engine.dispose()


def test_the_grants_cli_takes_client_principals_and_refuses_an_ambiguous_user(tmp_path):
    import os
    import subprocess
    import sys

    env = {**os.environ, "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}", "CATALOG_OAUTH_CLIENTS": "ingest:x"}
    subprocess.run([sys.executable, "-m", "catalog", "migrate"], env=env, check=True, capture_output=True)

    def cli(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "catalog", "grants", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True)

    refused = cli("add", "--principal", "user:ingest", "--privilege", "write", "--on", "catalog")
    assert refused.returncode == 2 and "client:ingest" in refused.stderr and "Traceback" not in refused.stderr
    assert cli("list").stdout == ""
    added = cli("add", "--principal", "client:ingest", "--privilege", "write", "--on", "catalog")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["principal"] == "client:ingest"
    assert cli("add", "--principal", "user:alice", "--privilege", "read", "--on", "catalog").returncode == 0
