"""What a grant may name. Its principal names a kind: built-in clients are ``client:<id>``, an identity
provider's users ``user:<name>``, so a user cannot become a built-in client by its name (issue 28,
item 2: the migration, the start-up settling of old grants, the API and the CLI). Its target is
named like every namespace, table and view (issue 28, item a: the API, the CLI and the bootstrap file).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest
import requests

from tests.support import As, Server, assert_error, backends, start_server

SECRET = "grant-names-test-token-secret-" + "h" * 32
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

    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.settings import Settings

    engine = create_engine(Settings(database_url=url).database)
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

    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.database.store import Store
    from catalog.settings import Settings

    url = fresh_database
    _database_before_principal_kinds(url)
    engine = create_engine(Settings(database_url=url).database)
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


@pytest.mark.slow
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


# --- grant targets are named like every namespace, table and view ---------------------------------

BAD_TARGETS = [
    {"namespace": ["m", ".."]},
    {"namespace": "m\x00x"},
    {"namespace": ["a/../b"]},  # "/" alone is a valid name now; a relative segment is not
    {"table": ["db", "t\x01"]},
    {"view": ["..", "v"]},
]


def test_grant_targets_are_validated_like_names(peers, tmp_path):
    alice = As(peers, "alice")
    for target in BAD_TARGETS:
        doc = {"principal": "client:bob", "privileges": ["read"], "on": target}
        resp = alice.post("/management/v1/grants", json=doc)
        assert_error(resp, 400, "BadRequestException", "Invalid")
    listed = alice.get("/management/v1/grants").json()["grants"]
    assert not [g for g in listed if g["principal"] == "client:bob" and g["privilege"] == "read"], listed

    # the CLI and the bootstrap file parse the same way
    env = {**os.environ, "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}"}
    subprocess.run([sys.executable, "-m", "catalog", "migrate"], env=env, check=True, capture_output=True)
    for on in ("namespace=m\x01", "table=db.a/../b", "view=a..v"):
        added = subprocess.run(
            [
                sys.executable,
                "-m",
                "catalog",
                "grants",
                "add",
                "--principal",
                "user:x",
                "--privilege",
                "read",
                "--on",
                on,
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert added.returncode == 2 and "Traceback" not in added.stderr, (on, added.stderr)
    bootstrap = tmp_path / "bad.yaml"
    bootstrap.write_text('grants:\n  - {principal: "user:x", privileges: [read], on: {namespace: ["m", ".."]}}\n')
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"],
        env={**env, "CATALOG_AUTHZ_BOOTSTRAP": str(bootstrap), "CATALOG_PORT": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 2 and "relative path segment" in served.stderr, served.stderr
