"""Status codes tell the truth, measured on real server processes:

- a commit the server knows did not land is a 503 (never ``CommitStateUnknown``), and leaves no file;
- what no name can be (NUL, too long, too deep, bad page tokens and parents) is a 400 on every
  backend, answered before any SQL;
- no response body carries SQL, parameters or a stack trace;
- an un-migrated database is a 503 that tells the operator to run ``iceberg-catalog migrate``.
"""

from __future__ import annotations

import base64
import errno
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
import requests
import sqlalchemy as sa

from catalog import errors, logs
from catalog.api import exceptions
from catalog.database.db import create_engine
from catalog.database.pointers import Swap
from catalog.database.sql import short as _short
from catalog.database.sql import translate as _translate
from catalog.database.store import Store
from catalog.settings import Settings
from tests.support import (
    JSON_SCHEMA,
    assert_error,
    commit_with_its_connection_killed,
    create,
    s3_client_props,
    s3_env,
    skip_or_fail,
    start_server,
)

LEAKS = ("SELECT", "INSERT", "UPDATE", "[SQL", "Traceback", "psycopg", "sqlalchemy")
SET_PROP = {"action": "set-properties", "updates": {"k": "v"}}


def assert_clean(resp: requests.Response) -> None:
    """No SQL, parameters or stack trace in the body."""
    for leak in LEAKS:
        assert leak not in resp.text, resp.text


def assert_400(resp: requests.Response, contains: str = "") -> None:
    assert_error(resp, 400, "BadRequestException", contains)
    assert_clean(resp)


# -- 1. a failure known not to have committed is a 503, and leaves no file -------------------------


@contextmanager
def _table_on_a_full_disk(tmp_path: Path, size: str, env: Callable[[Path], dict]) -> Iterator[tuple[str, Path, str]]:
    """A server whose ``env(mount)`` puts its database or warehouse on a small tmpfs, with table n.t
    created, then the tmpfs filled up: yields (server URL, the filler file, the table's metadata
    location). Skipped where no tmpfs can be mounted, except under CI=true, where that fails."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if out.returncode != 0:
        reason = f"cannot mount a tmpfs here: {out.stderr.decode(errors='replace').strip()}"
        skip_or_fail(reason)
    server = None
    try:
        server = start_server(tmp_path / "srv", extra_env=env(mnt))
        base = server.url
        assert requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).status_code == 200
        resp = requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "t", "schema": JSON_SCHEMA}, timeout=30)
        assert resp.status_code == 200, resp.text
        filler = mnt / "filler"
        assert _fill(filler) > 0
        yield base, filler, resp.json()["metadata-location"]
    finally:
        if server is not None:
            server.stop()
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(path: Path) -> int:
    """Write until the filesystem is full; returns the bytes written."""
    written = 0
    with path.open("wb", buffering=0) as f:
        for block in (1 << 16, 1 << 12, 1 << 9):
            while True:
                try:
                    written += f.write(b"\0" * block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break
    return written


def _files_of(location: str) -> list[str]:
    """The files in the folder of a local metadata file."""
    return sorted(os.listdir(Path(location.removeprefix("file://")).parent))


def test_sqlite_disk_full_is_503_and_moves_nothing(tmp_path):
    """The database file on a full filesystem: the pointer cannot move, and the server knows it."""
    env = lambda mnt: {"CATALOG_DATABASE_URL": f"sqlite:///{mnt / 'catalog.db'}"}  # noqa: E731
    with _table_on_a_full_disk(tmp_path, "2m", env) as (base, filler, created):
        files_before = _files_of(created)
        failed = requests.post(f"{base}/v1/namespaces/n/tables/t", json={"updates": [SET_PROP]}, timeout=60)
        err = assert_error(failed, 503, "ServiceUnavailableException")
        assert "full" in err["message"], err
        assert failed.headers.get("Retry-After")
        assert_clean(failed)
        loaded = requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30)
        assert loaded.json()["metadata-location"] == created
        assert _files_of(created) == files_before  # the uncommitted file was deleted

        filler.unlink()
        ok = requests.post(f"{base}/v1/namespaces/n/tables/t", json={"updates": [SET_PROP]}, timeout=60)
        assert ok.status_code == 200, ok.text
        moved = requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).json()
        assert moved["metadata-location"] == ok.json()["metadata-location"] != created
        assert moved["metadata"]["properties"]["k"] == "v"


def test_local_warehouse_full_is_503_and_leaves_no_partial_file(tmp_path):
    """The warehouse on a full filesystem: writing the new metadata file fails before the CAS, so
    the commit is a known failure, and the partly written file is removed."""
    with _table_on_a_full_disk(tmp_path, "1m", lambda mnt: {"CATALOG_WAREHOUSE": str(mnt / "wh")}) as (
        base,
        filler,
        created,
    ):
        files_before = _files_of(created)
        for failed in (
            requests.post(f"{base}/v1/namespaces/n/tables/t", json={"updates": [SET_PROP]}, timeout=60),
            requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "u", "schema": JSON_SCHEMA}, timeout=60),
        ):
            err = assert_error(failed, 503, "ServiceUnavailableException")
            assert "space" in err["message"], err
            assert_clean(failed)
        assert _files_of(created) == files_before  # no partial file
        assert requests.get(f"{base}/v1/namespaces/n/tables/u", timeout=30).status_code == 404
        assert requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).json()["metadata-location"] == created

        filler.unlink()
        ok = requests.post(f"{base}/v1/namespaces/n/tables/t", json={"updates": [SET_PROP]}, timeout=60)
        assert ok.status_code == 200, ok.text
        again = requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "u", "schema": JSON_SCHEMA}, timeout=60)
        assert again.status_code == 200, again.text


def new_database(pg, name: str) -> tuple[str, str]:
    """A fresh database on the suite's PostgreSQL: (SQLAlchemy URL, superuser DSN of it)."""
    with psycopg.connect(pg.superuser_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER catalog')
    return pg.url.rsplit("/", 1)[0] + f"/{name}", pg.superuser_dsn.rsplit("/", 1)[0] + f"/{name}"


def _s3_keys(services, prefix: str) -> list[str]:
    listed = services["s3"].client().list_objects_v2(Bucket=services["s3"].bucket, Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


@pytest.mark.postgres
@pytest.mark.s3
def test_postgres_connection_lost_before_commit_is_503_and_leaves_no_file(services, tmp_path):
    """The connection dies while the pointer UPDATE runs, before COMMIT was sent: the transaction
    cannot have committed, so the answer is a known failure and the new metadata file is deleted."""
    url, su_dsn = new_database(services["pg"], f"lost_{uuid.uuid4().hex[:8]}")
    prefix = f"lost-{uuid.uuid4().hex[:6]}"
    server = start_server(tmp_path, "postgres-s3", {"CATALOG_DATABASE_URL": url, **s3_env(services["s3"], prefix)})
    try:
        base = server.url
        assert requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).status_code == 200
        resp = requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "t", "schema": JSON_SCHEMA}, timeout=30)
        created = resp.json()["metadata-location"]
        keys_before = _s3_keys(services, f"{prefix}/n/t/metadata/")
        with psycopg.connect(su_dsn, autocommit=True) as su:
            resp = commit_with_its_connection_killed(su, base, at="update")
        assert_error(resp, 503, "ServiceUnavailableException")
        assert resp.headers.get("Retry-After")
        assert_clean(resp)
        loaded = requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=30).json()
        assert loaded["metadata-location"] == created
        assert _s3_keys(services, f"{prefix}/n/t/metadata/") == keys_before  # no orphan
        ok = requests.post(f"{base}/v1/namespaces/n/tables/t", json={"updates": [SET_PROP]}, timeout=30)
        assert ok.status_code == 200, ok.text
    finally:
        server.stop()


def test_short_message_of_an_error_without_text():
    """An empty driver message was an IndexError in the translator: a 503 turned into a 500."""

    class Empty(Exception):
        def __str__(self) -> str:
            return "  "

    wrapped = sa.exc.OperationalError("UPDATE x SET y = 1", {"p": 1}, Empty())
    assert _short(wrapped) == "Empty"
    translated = _translate(wrapped)
    assert isinstance(translated, errors.ServiceUnavailable) and "UPDATE" not in translated.message


# -- 2. what no name can be is a 400, on every backend, before any SQL -----------------------------

LONG = "x" * 256  # one byte over the limit of a level or a name
WIDE = "é" * 128  # 128 characters, 256 bytes of UTF-8: the limit counts bytes


@pytest.mark.parametrize("bad", ["a\x00b", LONG, WIDE, "y" * 1100])
def test_bad_names_in_the_path_are_400(http, ns, bad):
    create(http, ns, "t")
    enc = quote(bad, safe="")
    for method, path in [
        ("GET", f"/v1/namespaces/{enc}"),
        ("GET", f"/v1/namespaces/{enc}/tables"),
        ("GET", f"/v1/namespaces/{ns}/tables/{enc}"),
        ("POST", f"/v1/namespaces/{ns}/tables/{enc}"),
        ("DELETE", f"/v1/namespaces/{ns}/tables/{enc}"),
        ("GET", f"/v1/namespaces/{ns}/views/{enc}"),
        ("GET", f"/v1/namespaces/{ns}%1F{enc}/tables/t"),
    ]:
        resp = http(method, path, json={"updates": [SET_PROP]} if method == "POST" else None)
        assert_400(resp, "Invalid")
    assert http("HEAD", f"/v1/namespaces/{ns}/tables/{enc}").status_code == 400
    assert http.get(f"/v1/namespaces/{ns}/tables/t").json()["metadata"].get("properties", {}).get("k") is None


@pytest.mark.parametrize("bad", ["a\x00b", "a\x01b", "a\x7fb", LONG, WIDE])
def test_bad_names_in_bodies_are_400_and_create_nothing(http, ns, server, bad):
    """NUL and over-long names can name nothing: 400 wherever they appear. Other control characters
    are refused in new names (a location URI cannot carry them); a lookup by one finds nothing."""
    cannot_exist = "\x00" in bad or len(bad.encode()) > 255
    created = create(http, ns, "t")
    before_ns = http.get("/v1/namespaces", params={"parent": ns}).json()["namespaces"]
    assert_400(http.post("/v1/namespaces", json={"namespace": [ns, bad]}), "Invalid")
    assert_400(http.post(f"/v1/namespaces/{ns}/tables", json={"name": bad, "schema": JSON_SCHEMA}), "Invalid")
    register = {"name": bad, "metadata-location": created["metadata-location"]}
    assert_400(http.post(f"/v1/namespaces/{ns}/register", json=register), "Invalid")
    view = {
        "name": bad,
        "schema": JSON_SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
            "default-namespace": [ns],
        },
    }
    assert_400(http.post(f"/v1/namespaces/{ns}/views", json=view), "Invalid")
    renames = [((ns, "t"), (ns, bad)), ((ns, "t"), (bad, "t"))]
    lookups = [((ns, bad), (ns, "t2"))]
    for source, destination in renames + (lookups if cannot_exist else []):
        body = {
            "source": {"namespace": [source[0]], "name": source[1]},
            "destination": {"namespace": [destination[0]], "name": destination[1]},
        }
        assert_400(http.post("/v1/tables/rename", json=body), "Invalid")
    for source, destination in lookups if not cannot_exist else []:
        body = {
            "source": {"namespace": [source[0]], "name": source[1]},
            "destination": {"namespace": [destination[0]], "name": destination[1]},
        }
        assert_error(http.post("/v1/tables/rename", json=body), 404, "NoSuchTableException")
    for identifier in [{"namespace": [ns], "name": bad}, {"namespace": [bad], "name": "t"}]:
        txn = {"table-changes": [{"identifier": identifier, "requirements": [], "updates": [SET_PROP]}]}
        resp = http.post("/v1/transactions/commit", json=txn)
        if cannot_exist:
            assert_400(resp, "Invalid")
        else:
            assert resp.status_code == 404 and not any(leak in resp.text for leak in LEAKS), resp.text
    # nothing was created or moved
    assert http.get("/v1/namespaces", params={"parent": ns}).json()["namespaces"] == before_ns
    names = [i["name"] for i in http.get(f"/v1/namespaces/{ns}/tables").json()["identifiers"]]
    assert names == ["t"]
    assert http.get(f"/v1/namespaces/{ns}/views").json()["identifiers"] == []
    assert http.get(f"/v1/namespaces/{ns}/tables/t").json()["metadata-location"] == created["metadata-location"]
    if server.backend == "sqlite":  # the local warehouse: no directory for the refused table
        namespace_dir = Path(created["metadata-location"].removeprefix("file://")).parent.parent.parent
        assert sorted(p.name for p in namespace_dir.iterdir()) == ["t"]


def test_namespace_depth_and_size_limits(http, ns):
    """At most 32 levels and 1024 bytes joined; exactly at the limits works on every backend."""
    assert_400(http.post("/v1/namespaces", json={"namespace": [ns, *["d"] * 32]}), "levels")
    levels = [ns]
    for fill in ("a", "b", "c"):
        levels.append(fill * 255)
        assert http.post("/v1/namespaces", json={"namespace": levels}).status_code == 200
    last = "d" * (1024 - len("\x1f".join(levels)) - 1)
    assert 0 < len(last) <= 255
    wide = [*levels, last + "d"]  # 1025 bytes joined
    assert_400(http.post("/v1/namespaces", json={"namespace": wide}), "1024 bytes")
    assert_400(http.get(f"/v1/namespaces/{'%1F'.join(wide)}"), "1024 bytes")
    levels.append(last)
    assert len("\x1f".join(levels).encode()) == 1024
    assert http.post("/v1/namespaces", json={"namespace": levels}).status_code == 200
    assert http.get(f"/v1/namespaces/{'%1F'.join(levels)}").status_code == 200
    name = WIDE[:-1] + "e"  # 255 bytes
    create(http, ns, name)
    assert http.get(f"/v1/namespaces/{ns}/tables/{quote(name, safe='')}").status_code == 200


@pytest.mark.parametrize(
    "token",
    [
        base64.urlsafe_b64encode(b"a\x00").decode(),
        base64.urlsafe_b64encode(b"z" * 1100).decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        "a",  # not base64
    ],
)
def test_bad_page_tokens_are_400(http, ns, token):
    create(http, ns, "t")
    for path in ("/v1/namespaces", f"/v1/namespaces/{ns}/tables", f"/v1/namespaces/{ns}/views"):
        assert_400(http.get(path, params={"pageToken": token, "pageSize": "10"}), "pageToken")


@pytest.mark.parametrize("parent", ["a\x00b", "{ns}\x1f", "{ns}\x1f" + LONG, "\x1f".join(["p"] * 40)])
def test_bad_parents_are_400(http, ns, parent):
    assert_400(http.get("/v1/namespaces", params={"parent": parent.format(ns=ns)}), "parent")


# -- 3. no SQL, parameters or stack trace in a body -----------------------------------------------


def test_an_unexpected_error_is_a_fixed_message_with_the_request_id():
    token = logs.request_id.set("rid-123")
    try:
        err = exceptions.as_iceberg(RuntimeError("SELECT secret FROM t WHERE x = 'p4ssw0rd'"))
    finally:
        logs.request_id.reset(token)
    assert err.code == 500 and "rid-123" in err.message
    assert "secret" not in err.message and "SELECT" not in err.message and "RuntimeError" not in err.message


def _store(url: str) -> Store:
    return Store(create_engine(Settings(database_url=url).database))


def test_sqlite_translator_sends_an_unmigrated_database_to_migrate(tmp_path):
    """A real SQLite file without the schema: every path through the store is the same 503."""
    store = _store(f"sqlite:///{tmp_path / 'empty.db'}")
    try:
        for call in (
            lambda: store.get_namespace(("a",)),
            lambda: store.get_entry(("a",), "t"),
            lambda: store.create_namespace(("a",), {}),
            lambda: store.swap_pointers([Swap(1, "x", "y", "file:///l")]),
        ):
            with pytest.raises(errors.ServiceUnavailable, match="iceberg-catalog migrate"):
                call()
    finally:
        store.engine.dispose()


# -- 4. an un-migrated PostgreSQL database is a 503 naming `iceberg-catalog migrate` ---------------


def _migrate(url: str, revision: str = "head") -> None:
    out = subprocess.run(
        [sys.executable, "-m", "catalog", "migrate", "--database-url", url, "--revision", revision],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr


def assert_migrate(resp: requests.Response) -> None:
    assert_error(resp, 503, "ServiceUnavailableException", "iceberg-catalog migrate")
    assert resp.headers.get("Retry-After")
    assert_clean(resp)


@pytest.mark.postgres
@pytest.mark.s3
def test_postgres_unmigrated_database_is_503_naming_migrate(services, tmp_path):
    url, _ = new_database(services["pg"], f"u_{uuid.uuid4().hex[:8]}")
    env = {"CATALOG_DATABASE_URL": url, "CATALOG_AUTO_MIGRATE": "false", **s3_env(services["s3"], "unmigrated")}
    server = start_server(tmp_path, "postgres-s3", env)
    server.io_props = s3_client_props(services["s3"])
    base = server.url
    try:
        assert_migrate(requests.get(f"{base}/v1/namespaces", timeout=10))
        assert_migrate(requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, timeout=10))
        assert_migrate(requests.get(f"{base}/v1/namespaces/n/tables/t", timeout=10))  # the hot pointer read
        assert_migrate(
            requests.post(f"{base}/v1/namespaces/n/tables", json={"name": "t", "schema": JSON_SCHEMA}, timeout=10)
        )
        assert requests.head(f"{base}/v1/namespaces/n", timeout=10).status_code == 503

        _migrate(url, "0001")  # tables exist, but not the idempotency keys: not at head
        keyed = {"Idempotency-Key": str(uuid.uuid4())}
        assert_migrate(requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, headers=keyed, timeout=10))

        _migrate(url)
        assert requests.post(f"{base}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).status_code == 200
        assert requests.get(f"{base}/v1/namespaces/n", timeout=10).status_code == 200
    finally:
        server.stop()


@pytest.mark.postgres
def test_postgres_translator_refuses_a_nul_without_sql(services):
    """Behind the wire checks, the store's one translator: a real psycopg DataError is a 400 with
    the driver's message only, never SQLAlchemy's text with the statement and its parameters."""
    url, _ = new_database(services["pg"], f"t_{uuid.uuid4().hex[:8]}")
    _migrate(url)
    store = _store(url)
    try:
        for call in (lambda: store.get_namespace(("a\x00b",)), lambda: store.get_entry(("a\x00b",), "t")):
            with pytest.raises(errors.BadRequest) as caught:
                call()
            assert "NUL" in caught.value.message
            assert not any(leak in caught.value.message for leak in LEAKS), caught.value.message
    finally:
        store.engine.dispose()
