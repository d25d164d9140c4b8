"""What a failing dependency (a full disk, an unreachable database) answers (issue 28, items i, j): a
503 that says what kind of dependency failed and carries the request id, never where (no server
path, host, port or driver text); a full disk during an append rebase is a 503, not the 409, and
commits nothing. Real server processes on a small tmpfs.
"""

from __future__ import annotations

import errno
import subprocess
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


# --- a full disk during an append rebase is a 503, not the 409 -----------------------------------


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


# --- a 503 says what kind of dependency failed and the request id, not where ---------------------


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

    from catalog.database.sql import translate

    text = 'connection failed: connection to server at "10.1.2.3", port 5433 failed: FATAL: password for user "cat"'
    err = translate(psycopg.OperationalError(text))
    assert isinstance(err, errors.ServiceUnavailable)
    assert err.message == "Database unavailable: the database cannot be reached or failed"
    assert "10.1.2.3" in err.detail  # for the log
    full = translate(psycopg.errors.DiskFull('could not extend file "/var/lib/postgresql/data/base/1": No space left'))
    assert full.message == "Database unavailable: the database or its disk is full" and "/var/lib" not in full.message
