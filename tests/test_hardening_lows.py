"""Hardening over HTTP (issue 28, the "lows"): what a commit may point a table at, what error bodies may
reveal, how an I/O failure in a rebase is answered, and the names and tokens the server must refuse.

Each test drives a real server process; attacks are checked on the response body and on the files.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import requests

from catalog import errors
from tests.support import IN_CI, Http, assert_error, start_server

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}


def create_table(http, ns: str, name: str, **extra) -> dict:
    resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": SCHEMA, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()["metadata"]


def commit(http, ns: str, name: str, updates: list[dict], requirements: list[dict] | None = None, **kw):
    body = {"requirements": requirements or [], "updates": updates}
    return http.post(f"/v1/namespaces/{ns}/tables/{name}", json=body, **kw)


def snapshot_update(snapshot_id: int, manifest_list: str, sequence_number: int = 1) -> dict:
    return {
        "action": "add-snapshot",
        "snapshot": {
            "snapshot-id": snapshot_id,
            "sequence-number": sequence_number,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": manifest_list,
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
    }


# --- c. a commit may add only files of the table's own --------------------------------------------


def test_a_commit_adding_a_manifest_list_outside_the_table_is_refused(http, ns):
    victim = create_table(http, ns, "victim")
    mine = create_table(http, ns, "mine")
    before = http.get(f"/v1/namespaces/{ns}/tables/mine").json()["metadata-location"]
    for foreign in (
        f"{victim['location']}/metadata/snap-1.avro",  # another table's files
        "s3://somebody-elses-bucket/x/snap-1.avro",  # outside the allowed locations
        "file:///etc/passwd",
    ):
        resp = commit(http, ns, "mine", [snapshot_update(1, foreign)])
        err = assert_error(resp, 403, "ForbiddenException", "manifest-list")
        assert "victim" not in err["message"]
    assert http.get(f"/v1/namespaces/{ns}/tables/mine").json()["metadata-location"] == before  # nothing committed
    resp = commit(http, ns, "mine", [snapshot_update(1, "relative/snap.avro")])
    assert_error(resp, 400, "BadRequestException")
    # the table's own metadata folder is where Spark and pyiceberg write them
    own = f"{mine['location']}/metadata/snap-1.avro"
    resp = commit(http, ns, "mine", [snapshot_update(1, own)])
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["snapshots"][0]["manifest-list"] == own


def test_write_metadata_path_inside_the_allowed_roots_is_the_tables_own(http, ns, server):
    warehouse = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    elsewhere = f"{warehouse}/custom-{uuid.uuid4().hex[:8]}/meta"
    if "://" not in elsewhere:
        elsewhere = "file://" + elsewhere
    create_table(http, ns, "t", properties={"write.metadata.path": elsewhere})
    resp = commit(http, ns, "t", [snapshot_update(1, f"{elsewhere}/snap-1.avro")])
    assert resp.status_code == 200, resp.text
    # the snapshots it has keep loading and committing: only added files are checked
    resp = commit(http, ns, "t", [{"action": "set-properties", "updates": {"k": "v"}}])
    assert resp.status_code == 200, resp.text


# --- j. a full disk during an append rebase is a 503, not the 409 ----------------------------------


@contextmanager
def small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` at ``where`` (needs root): skipped where it cannot be mounted, failed under CI."""
    where.mkdir(parents=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if out.returncode != 0:
        reason = f"cannot mount a tmpfs here: {out.stderr.decode(errors='replace').strip()}"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}")
        pytest.skip(reason)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(path: Path) -> None:
    """Write until the filesystem is full."""
    with path.open("wb", buffering=0) as f:
        for block in (1 << 16, 1 << 12, 1 << 9, 1):
            while True:
                try:
                    f.write(b"\0" * block)
                except OSError as e:
                    assert e.errno == errno.ENOSPC, e
                    break


def client_append(meta: dict, snapshot_id: int) -> tuple[list, list]:
    """What a client's fast append of one data file sends on ``meta``'s main (v2): a manifest and a
    manifest list written with pyiceberg's writers in the table's metadata folder, and the commit."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestFile,
        read_manifest_list,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType, NestedField

    io, where = PyArrowFileIO(), meta["location"] + "/metadata"
    parent_id = meta.get("current-snapshot-id")
    parent_id = None if parent_id in (None, -1) else parent_id
    parent = next((s for s in meta["snapshots"] if s["snapshot-id"] == parent_id), None)
    sequence = meta["last-sequence-number"] + 1
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{meta['location']}/data/{uuid.uuid4()}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=1,
        file_size_in_bytes=101,
    )
    schema = Schema(NestedField(1, "id", LongType(), required=True))
    path = f"{where}/{uuid.uuid4()}-m0.avro"
    with write_manifest(2, UNPARTITIONED_PARTITION_SPEC, schema, io.new_output(path), snapshot_id, "null") as w:
        w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=data_file))
    kept = list(read_manifest_list(io.new_input(parent["manifest-list"]))) if parent else []
    location = f"{where}/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    with write_manifest_list(2, io.new_output(location), snapshot_id, parent_id, sequence, "null") as writer:
        writer.add_manifests([w.to_manifest_file(), *[ManifestFile(*m._data[:15]) for m in kept]])
    snapshot = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": location,
        "summary": {
            "operation": "append",
            "added-records": "1",
            "added-data-files": "1",
            "added-files-size": "101",
            "total-records": str(len(kept) + 1),
            "total-data-files": str(len(kept) + 1),
        },
        "schema-id": 0,
    }
    if parent_id is not None:
        snapshot["parent-snapshot-id"] = parent_id
    requirements = [
        {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent_id},
    ]
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
    ]
    return requirements, updates


@pytest.mark.parametrize("group", ["32", "1"], ids=["group-commit", "alone"])
def test_a_full_disk_during_an_append_rebase_is_503_and_commits_nothing(tmp_path, group):
    """The rebased manifest list cannot be written: a 503 (a 409 would send the client to refresh and
    retry into the same full disk), nothing written, nothing committed; with space again it lands.
    Both paths: the group committer's parallel writes, and the engine's own rebase (groups of 1)."""
    with small_tmpfs(tmp_path / "small", "2m") as mnt:
        env = {
            "CATALOG_WAREHOUSE": str(mnt / "wh"),
            "CATALOG_APPEND_REBASE": "true",
            "CATALOG_GROUP_COMMIT_MAX_COMMITS": group,
        }
        server = start_server(tmp_path / "srv", extra_env=env)
        try:
            with requests.Session() as session:
                http = Http(server.url, session)
                assert http.post("/v1/namespaces", json={"namespace": ["n"]}).status_code == 200
                meta = create_table(http, "n", "t")
                first = commit(http, "n", "t", *reversed(client_append(meta, 1)))
                assert first.status_code == 200, first.text
                base = first.json()["metadata"]
                stale = client_append(base, 3)  # built on snapshot 1 ...
                moved = commit(http, "n", "t", *reversed(client_append(base, 2)))  # ... which main leaves
                assert moved.status_code == 200, moved.text
                head = moved.json()["metadata-location"]
                metadata_dir = Path(meta["location"].removeprefix("file://")) / "metadata"
                before = sorted(p.name for p in metadata_dir.iterdir())
                fill(mnt / "filler")

                refused = commit(http, "n", "t", *reversed(stale))
                err = assert_error(refused, 503, "ServiceUnavailableException", "nothing was committed")
                assert str(mnt) not in refused.text  # no server path in the body
                assert http.get("/v1/namespaces/n/tables/t").json()["metadata-location"] == head
                assert sorted(p.name for p in metadata_dir.iterdir()) == before  # no rebased list, no metadata
                assert "rebas" in err["message"]

                (mnt / "filler").unlink()
                landed = commit(http, "n", "t", *reversed(stale))  # the same request, space again: rebased
                assert landed.status_code == 200, landed.text
                assert landed.json()["metadata"]["current-snapshot-id"] == 3
        finally:
            server.stop()


# --- i. a 503 says what kind of dependency failed and the request id, not where -------------------


def test_a_503_shows_no_server_path_and_carries_the_request_id(tmp_path):
    with small_tmpfs(tmp_path / "small", "1m") as mnt:
        server = start_server(tmp_path / "srv", extra_env={"CATALOG_WAREHOUSE": str(mnt / "wh")})
        try:
            assert requests.post(f"{server.url}/v1/namespaces", json={"namespace": ["n"]}, timeout=30).ok
            fill(mnt / "filler")
            err = assert_error(
                requests.post(f"{server.url}/v1/namespaces/n/tables", json={"name": "t", "schema": SCHEMA}, timeout=30),
                503,
                "ServiceUnavailableException",
                "Storage error writing a file: No space left on device (request id ",
            )
            assert str(mnt) not in err["message"] and str(tmp_path) not in err["message"]
            rid = err["message"].rsplit("request id ", 1)[1].rstrip(")")
            logged = [line for line in server.log.read_text().splitlines() if rid in line]
            assert logged and str(mnt) in logged[0]  # where it failed: in the log, under the request id
        finally:
            server.stop()


def test_database_errors_tell_the_kind_not_the_host_port_or_driver_text():
    import psycopg

    from catalog.store.sql import translate

    text = 'connection failed: connection to server at "10.1.2.3", port 5433 failed: FATAL: password for user "cat"'
    err = translate(psycopg.OperationalError(text))
    assert isinstance(err, errors.ServiceUnavailable)
    assert err.message == "Database unavailable: the database cannot be reached or failed"
    assert "10.1.2.3" in err.detail  # for the log
    full = translate(psycopg.errors.DiskFull('could not extend file "/var/lib/postgresql/data/base/1": No space left'))
    assert full.message == "Database unavailable: the database or its disk is full" and "/var/lib" not in full.message


# --- with authentication: two principals who may write, one who may only read one namespace --------

TOKEN_SECRET = "hardening-signing-key-" + "k" * 32
CLIENTS = {"alice": "alice-secret", "bob": "bob-secret", "eve": "eve-secret"}
GRANTS = """
grants:
  - {principal: client:alice, privileges: [admin], on: catalog}
  - {principal: client:bob, privileges: [admin], on: catalog}
  - {principal: client:eve, privileges: [admin], on: {namespace: eve}}
"""


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator:
    workdir = tmp_path_factory.mktemp("hardening-auth")
    (workdir / "grants.yaml").write_text(GRANTS)
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
    }
    server = start_server(workdir, extra_env=env)
    yield server
    server.stop()


class As:
    """Raw HTTP as one principal."""

    def __init__(self, server, client: str) -> None:
        resp = requests.post(
            f"{server.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": client, "client_secret": CLIENTS[client]},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        self.base, self.headers = server.url, {"Authorization": f"Bearer {resp.json()['access_token']}"}

    def __call__(self, method: str, path: str, headers: dict | None = None, **kw) -> requests.Response:
        return requests.request(method, self.base + path, headers={**self.headers, **(headers or {})}, timeout=30, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self("GET", path, **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self("POST", path, **kw)


# --- g. an Idempotency-Key is a principal's own ---------------------------------------------------


def test_another_principal_reusing_a_key_gets_its_own_processing_and_learns_nothing(secured):
    alice, bob = As(secured, "alice"), As(secured, "bob")
    ns = f"idem_{uuid.uuid4().hex[:8]}"
    assert alice.post("/v1/namespaces", json={"namespace": [ns]}).status_code == 200
    create_table(alice, ns, "t")
    key = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"by": "alice"}}]}
    first = alice.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert first.status_code == 200, first.text

    # bob, same key, a different request: his own commit, not "already used for a different request"
    mine = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"by": "bob"}}]}
    resp = bob.post(f"/v1/namespaces/{ns}/tables/t", json=mine, headers=key)
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["properties"]["by"] == "bob"
    assert "Idempotency" not in resp.text
    # the key is now bob's own too: his reuse of it for another request is his own 400, never alice's record
    again = bob.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert again.status_code == 400 and "Idempotency-Key" in again.text  # his own key, his own other request
    # alice's retry is still her replay: the same response, nothing applied again
    replay = alice.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert replay.status_code == 200 and replay.json()["metadata-location"] == first.json()["metadata-location"]
    assert alice.get(f"/v1/namespaces/{ns}/tables/t").json()["metadata"]["properties"]["by"] == "bob"


# --- b. a 409 names no entry the caller may not see, and no server path ---------------------------


def test_a_location_conflict_names_neither_the_other_entry_nor_its_path(secured):
    alice, eve = As(secured, "alice"), As(secured, "eve")
    hidden = f"hidden_{uuid.uuid4().hex[:8]}"
    assert alice.post("/v1/namespaces", json={"namespace": [hidden]}).status_code == 200
    secret = create_table(alice, hidden, "payroll_2026")
    if eve.get("/v1/namespaces/eve").status_code == 404:
        assert alice.post("/v1/namespaces", json={"namespace": ["eve"]}).status_code == 200
    assert eve.get(f"/v1/namespaces/{hidden}/tables/payroll_2026").status_code == 403  # eve may not see it
    for location in (secret["location"], secret["location"] + "/sub", secret["location"].rsplit("/", 1)[0]):
        body = {"name": f"t_{uuid.uuid4().hex[:6]}", "schema": SCHEMA, "location": location}
        resp = eve.post("/v1/namespaces/eve/tables", json=body)
        err = assert_error(resp, 409, "AlreadyExistsException", "another table or view")
        for leak in (hidden, "payroll", secured.env["CATALOG_WAREHOUSE"]):
            assert leak not in err["message"], err
    logged = [line for line in secured.log.read_text().splitlines() if "overlaps table" in line]
    assert logged and f"{hidden}.payroll_2026" in logged[-1]  # the details are in the server log


# --- h. a namespace location inside another namespace's directory is refused ----------------------


def test_a_namespace_location_in_another_namespaces_directory_is_refused(http, server):
    warehouse = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    a, b, c = (f"nsloc_{uuid.uuid4().hex[:8]}" for _ in range(3))
    assert http.post("/v1/namespaces", json={"namespace": [a]}).status_code == 200
    create_table(http, a, "t")
    a_dir = f"{warehouse}/{a}"
    for location in (a_dir, f"{a_dir}/x", f"{a_dir}/t/data"):
        resp = http.post("/v1/namespaces", json={"namespace": [b], "properties": {"location": location}})
        err = assert_error(resp, 400, "BadRequestException", "Invalid namespace location")
        assert a not in err["message"] and warehouse not in err["message"], err
    assert http.get(f"/v1/namespaces/{b}").status_code == 404  # nothing created
    # at update too
    assert http.post("/v1/namespaces", json={"namespace": [c]}).status_code == 200
    resp = http.post(f"/v1/namespaces/{c}/properties", json={"updates": {"location": f"{a_dir}/elsewhere"}})
    assert_error(resp, 400, "BadRequestException", "Invalid namespace location")
    assert "location" not in http.get(f"/v1/namespaces/{c}").json()["properties"]
    # a directory of its own is fine, and so is a child namespace inside its parent's
    own = f"{warehouse}/own-{uuid.uuid4().hex[:8]}"
    resp = http.post(f"/v1/namespaces/{c}/properties", json={"updates": {"location": own}})
    assert resp.status_code == 200, resp.text
    resp = http.post("/v1/namespaces", json={"namespace": [a, "child"], "properties": {"location": f"{a_dir}/kids"}})
    assert resp.status_code == 200, resp.text


# --- a. grant targets are named like every namespace, table and view ------------------------------

BAD_TARGETS = [
    {"namespace": ["m", ".."]},
    {"namespace": "m\x00x"},
    {"namespace": ["a/../b"]},  # "/" alone is a valid name now; a relative segment is not
    {"table": ["db", "t\x01"]},
    {"view": ["..", "v"]},
]


def test_grant_targets_are_validated_like_names(secured, tmp_path):
    alice = As(secured, "alice")
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


# --- e. an OIDC token's times are numbers ---------------------------------------------------------


def test_an_oidc_token_whose_exp_is_a_string_is_refused(tmp_path):
    from tests.idp import LocalIdP

    with LocalIdP(audience="catalog") as idp:
        env = {
            "CATALOG_AUTH_REQUIRED": "true",
            "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
            "CATALOG_OIDC_ISSUER": idp.issuer,
            "CATALOG_OIDC_AUDIENCE": "catalog",
            "CATALOG_AUTHORIZATION": "none",
        }
        server = start_server(tmp_path / "oidc", extra_env=env)
        try:

            def get(token: str) -> requests.Response:
                return requests.get(
                    f"{server.url}/v1/namespaces", headers={"Authorization": f"Bearer {token}"}, timeout=10
                )

            assert get(idp.mint("alice")).status_code == 200
            later = int(time.time()) + 3600
            for claims in ({"exp": str(later)}, {"exp": f"{later}.0"}, {"iat": str(int(time.time()))}, {"exp": True}):
                resp = get(idp.mint("alice", **claims))
                assert_error(resp, 401, "NotAuthorizedException")
        finally:
            server.stop()


# --- f. the S3 signer refuses encoded dot segments and backslashes ---------------------------------


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
