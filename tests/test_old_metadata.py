"""Snapshot expiry deletes the metadata files that fell out of a table's metadata log, on both
backends, through a real server and real pyiceberg, asserted on the directory or bucket listing.

A table keeping 5 previous versions takes 40 set-properties commits (no snapshot: nothing to expire,
the metadata files alone) in two directories, ``<location>/metadata`` and then its
``write.metadata.path``. Afterwards its metadata files are exactly the current one and the log's,
each of which loads; a metadata file younger than the age is kept, and so is everything that is not
named like a metadata file, a metadata file below a subdirectory, and every file of the neighbour
table whose location shares the ``write.metadata.path`` as a string prefix. A dry run deletes
nothing and says what would go. An expiry that commits (snapshots expired) deletes them after its
commit too. A table with ``gc.enabled=false`` keeps every file.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.serializers import FromInputFile

from tests.support import Http, Server, backends, care_server, commit, create, run_care, stored_files

AGE_S = 15  # CATALOG_MAINTENANCE_METADATA_FILE_AGE_SECONDS of the server below
# The tables here keep what falls out of their log at commit (Iceberg's default), so that the
# sweep is what deletes it; the catalog's own default deletes it after each commit (test_tables.py).
KEEP = {"write.metadata.delete-after-commit.enabled": "false"}


@pytest.fixture(params=backends())
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    srv = care_server(
        request.param,
        tmp_path_factory.mktemp(f"old-metadata-{request.param}"),
        services,
        CATALOG_MAINTENANCE_METADATA_FILE_AGE_SECONDS=str(AGE_S),
    )
    yield srv
    srv.stop()


def _put(server: Server, location: str, data: bytes) -> None:
    """A file written straight to the storage, as a crashed writer or another tool leaves one."""
    if location.startswith("s3://"):
        import boto3

        bucket, _, key = location[len("s3://") :].partition("/")
        boto3.client(
            "s3",
            endpoint_url=server.env["CATALOG_S3_ENDPOINT"],
            region_name=server.env.get("CATALOG_S3_REGION") or "us-east-1",
            aws_access_key_id=server.env["CATALOG_S3_ACCESS_KEY_ID"],
            aws_secret_access_key=server.env["CATALOG_S3_SECRET_ACCESS_KEY"],
        ).put_object(Bucket=bucket, Key=key, Body=data)
        return
    path = Path(location.removeprefix("file://").removeprefix("file:"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _metadata_files(files: set[str], directory: str) -> set[str]:
    """The files directly in ``directory`` named like metadata files."""
    return {f for f in files if f.rsplit("/", 1)[0] == directory and f.endswith(".metadata.json")}


def _set(http: Http, ns: str, name: str, **props: str) -> None:
    resp = commit(http, ns, name, updates=[{"action": "set-properties", "updates": props}])
    assert resp.status_code == 200, resp.text


def _spelled(location: str) -> str:
    """A location as ``stored_files`` spells the files below it (no ``file:`` on local disk paths)."""
    return location.rstrip("/")


@pytest.mark.slow
def test_metadata_files_out_of_the_log_are_deleted_and_nothing_else(server: Server) -> None:
    ns = f"meta_{uuid.uuid4().hex[:8]}"
    with Http(server.url) as http:
        assert http.post("/v1/namespaces", json={"namespace": [ns]}).status_code == 200
        table = create(http, ns, "t", properties={"write.metadata.previous-versions-max": "5", **KEEP})
        location = _spelled(table["metadata"]["location"])
        for i in range(20):
            _set(http, ns, "t", n=str(i))
        custom = f"{location}-meta"  # write.metadata.path, outside <location>/metadata
        _set(http, ns, "t", **{"write.metadata.path": custom})
        for i in range(20, 40):
            _set(http, ns, "t", n=str(i))
        # A neighbour whose location starts with the same characters as the write path (not below it).
        neighbour = create(http, ns, "n", location=f"{custom}2")
        neighbour_location = _spelled(neighbour["metadata"]["location"])
        current = http.get(f"/v1/namespaces/{ns}/tables/t").json()
        # gc.enabled=false: the job touches nothing of the table, as Iceberg refuses to expire it.
        gc_off = create(http, ns, "g", properties={"write.metadata.previous-versions-max": "1", "gc.enabled": "false"})
        for i in range(5):
            _set(http, ns, "g", n=str(i))
    gc_off_location = _spelled(gc_off["metadata"]["location"])
    # Snapshots to expire as well: the expiry commits, then deletes what fell out of the log.
    catalog = server.catalog()
    appended = catalog.create_table(
        f"{ns}.s",
        pa.schema([pa.field("id", pa.int64())]),
        properties={
            "write.metadata.previous-versions-max": "2",
            **KEEP,
            "history.expire.max-snapshot-age-ms": "1",
            "history.expire.min-snapshots-to-keep": "1",
        },
    )
    for i in range(6):
        appended.append(pa.table({"id": pa.array([i], pa.int64())}))
    appended_location = _spelled(appended.location())
    log = [e["metadata-file"] for e in current["metadata"]["metadata-log"]]
    assert len(log) == 5, log

    # What no metadata-log rule may touch, all old enough to go if it were taken for a metadata file.
    stray = f"{uuid.uuid4()}.metadata.json"
    keep_anyway = {
        f"{location}/metadata/version-hint.text",
        f"{location}/metadata/notes.json",
        f"{location}/metadata/00001-{uuid.uuid4()}.metadata.json.tmp",
        f"{location}/metadata/sub/00002-{uuid.uuid4()}.metadata.json",  # not directly in the directory
        f"{neighbour_location}/metadata/00077-{stray}",
        f"{neighbour_location}/00078-{stray}",
    }
    for path in keep_anyway:
        _put(server, path, b"{}")
    time.sleep(AGE_S + 1)  # every file so far is older than the age
    young = f"{custom}/00099-{uuid.uuid4()}.metadata.json"
    _put(server, young, b"{}")  # a commit in flight, as far as anyone can tell

    dirs = (f"{location}/metadata", custom)
    neighbour_before = stored_files(server, neighbour_location)
    before = stored_files(server, location) | stored_files(server, custom)
    metadata_before = set().union(*(_metadata_files(before, d) for d in dirs))
    assert len(metadata_before) == 1 + 40 + 1 + 1, sorted(metadata_before)  # create, commits, path, young
    live = {current["metadata-location"], *log}
    assert live <= metadata_before
    expected_gone = metadata_before - live - {young}

    dry = run_care(server, ns, "t", kinds=["expire-snapshots"], **{"dry-run": True})[0]
    assert dry["state"] == "done" and dry["result"]["dry-run"], dry
    assert set(dry["result"]["metadata-files-to-delete"]) == expected_gone, dry
    assert dry["result"]["metadata-files-to-delete-count"] == len(expected_gone) == 36
    assert stored_files(server, location) | stored_files(server, custom) == before, "a dry run deleted files"

    task = run_care(server, ns, "t", kinds=["expire-snapshots"])[0]
    assert task["state"] == "done", task
    assert task["result"]["deleted-metadata-files"] == len(expected_gone), task
    after = stored_files(server, location) | stored_files(server, custom)
    assert set().union(*(_metadata_files(after, d) for d in dirs)) == live | {young}
    assert after == before - expected_gone, "something other than a stale metadata file was deleted"
    assert {p for p in keep_anyway if p.startswith(f"{location}/")} <= after
    assert stored_files(server, neighbour_location) == neighbour_before, "the neighbour table's files were touched"

    loaded = catalog.load_table(f"{ns}.t")
    assert loaded.metadata.properties["n"] == "39"
    for path in live:  # every file the log names still loads, with the table's identity
        assert FromInputFile.table_metadata(loaded.io.new_input(path)).table_uuid == loaded.metadata.table_uuid
    assert catalog.load_table(f"{ns}.n").metadata.location.rstrip("/") == neighbour["metadata"]["location"].rstrip("/")

    again = run_care(server, ns, "t", kinds=["expire-snapshots"])[0]
    assert again["state"] == "done" and again["result"]["deleted-metadata-files"] == 0, again

    expired = run_care(server, ns, "s", kinds=["expire-snapshots"])[0]
    assert expired["state"] == "done" and expired["result"]["expired-snapshots-count"] == 5, expired
    appended = catalog.load_table(f"{ns}.s")
    remaining = _metadata_files(stored_files(server, appended_location), f"{appended_location}/metadata")
    logged = {appended.metadata_location, *(e.metadata_file for e in appended.metadata.metadata_log)}
    assert remaining == logged and len(logged) == 3, (remaining, logged)
    assert expired["result"]["deleted-metadata-files"] == 1 + 6 + 1 - 3, expired  # create, appends, expiry
    assert appended.scan().to_arrow().num_rows == 6

    gc_before = stored_files(server, gc_off_location)
    assert len(_metadata_files(gc_before, f"{gc_off_location}/metadata")) == 6
    skipped = run_care(server, ns, "g", kinds=["expire-snapshots"])[0]
    assert skipped["state"] == "done" and "gc.enabled" in skipped["result"]["skipped"], skipped
    assert stored_files(server, gc_off_location) == gc_before


def test_only_files_named_like_metadata_directly_in_the_directory_old_unlogged_and_owned_are_stale() -> None:
    """The pure rule (``catalog.maintenance.old_metadata``) on a made-up listing."""
    from catalog.maintenance import old_metadata
    from catalog.storage.bounds import StoredFile

    d = "s3://bucket/wh/ns/t/metadata"
    logged = f"{d}/00003-{uuid.uuid4()}.metadata.json"
    names = {
        f"{d}/00001-{uuid.uuid4()}.metadata.json": True,
        f"{d}/00002-{uuid.uuid4()}.gz.metadata.json": True,
        f"{d}/v7.metadata.json": True,
        logged: False,  # in the log
        f"{d}/00004-{uuid.uuid4()}.metadata.json.tmp": False,
        f"{d}/.metadata.json": False,
        f"{d}/metadata.json": False,
        f"{d}/snap-1-1-{uuid.uuid4()}.avro": False,
        f"{d}/version-hint.text": False,
        f"{d}/sub/00005-{uuid.uuid4()}.metadata.json": False,  # below a subdirectory
        f"{d}/00006-foreign.metadata.json": False,  # not owned (another entry's, say)
    }
    listing = [StoredFile(p, 1_000, 10) for p in names]
    listing.append(StoredFile(f"{d}/00009-{uuid.uuid4()}.metadata.json", 5_000, 10))  # younger than the cutoff
    stale = old_metadata.stale(
        listing,
        d,
        old_metadata.kept({"metadata-log": [{"metadata-file": logged}]}, f"{d}/x.metadata.json"),
        2_000,
        lambda p: "foreign" not in p,
    )
    assert {f.location for f in stale} == {p for p, gone in names.items() if gone}
    doc = {"location": "s3://bucket/wh/ns/t/", "properties": {"write.metadata.path": "s3://bucket/meta/t/"}}
    assert old_metadata.directories(doc) == [d, "s3://bucket/meta/t"]


def test_a_superseded_version_is_stale_at_once_and_a_higher_one_waits_for_the_age() -> None:
    """The pure rule with the current file's version: a file of a version at most the current one's
    was named for a pointer that is no longer current (its commit landed long ago or lost its CAS),
    so it goes however young; a higher version may be a commit in flight and waits for the age."""
    from catalog.maintenance import old_metadata
    from catalog.storage.bounds import StoredFile

    d = "s3://bucket/wh/ns/t/metadata"
    current = f"{d}/00010-{uuid.uuid4()}.metadata.json"
    young = 5_000  # younger than the cutoff below
    names = {
        f"{d}/00003-{uuid.uuid4()}.metadata.json": True,
        f"{d}/00010-{uuid.uuid4()}.gz.metadata.json": True,  # the same version: a CAS that lost
        f"{d}/00011-{uuid.uuid4()}.metadata.json": False,  # the next version: maybe in flight
        f"{d}/v2.metadata.json": False,  # named otherwise: the age decides
        current: False,
    }
    listing = [StoredFile(p, young, 10) for p in names]
    keep = old_metadata.kept({"metadata-log": []}, current)
    stale = old_metadata.stale(listing, d, keep, 2_000, lambda p: True, current_version=10)
    assert {f.location for f in stale} == {p for p, gone in names.items() if gone}
    unnamed = old_metadata.stale(listing, d, keep, 2_000, lambda p: True, current_version=-1)
    assert list(unnamed) == []  # a current file named otherwise: every young file waits for the age


@pytest.mark.parametrize("backend", backends())
def test_at_the_default_age_an_expiry_leaves_only_the_log_and_keeps_a_commit_in_flight(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A server at the default age (600 s): every file out of the log goes at the next expiry, not
    ten minutes later; a file of the next version (a commit in flight, as far as anyone can tell)
    stays."""
    services = request.getfixturevalue("services") if backend == "postgres-s3" else None
    server = care_server(backend, tmp_path / "srv", services)
    try:
        ns = f"meta_{uuid.uuid4().hex[:8]}"
        with Http(server.url) as http:
            assert http.post("/v1/namespaces", json={"namespace": [ns]}).status_code == 200
            table = create(http, ns, "t", properties={"write.metadata.previous-versions-max": "3", **KEEP})
            location = _spelled(table["metadata"]["location"])
            for i in range(12):
                _set(http, ns, "t", n=str(i))
            current = http.get(f"/v1/namespaces/{ns}/tables/t").json()
        directory = f"{location}/metadata"
        in_flight = f"{directory}/00013-{uuid.uuid4()}.metadata.json"
        lost = f"{directory}/00012-{uuid.uuid4()}.metadata.json"  # the current version, another uuid: a lost CAS
        _put(server, in_flight, b"{}")
        _put(server, lost, b"{}")
        live = {current["metadata-location"], *(e["metadata-file"] for e in current["metadata"]["metadata-log"])}
        assert len(live) == 4

        task = run_care(server, ns, "t", kinds=["expire-snapshots"])[0]
        assert task["state"] == "done" and task["result"]["deleted-metadata-files"] == 13 - 4 + 1, task
        assert _metadata_files(stored_files(server, location), directory) == live | {in_flight}
        assert server.catalog().load_table(f"{ns}.t").metadata.properties["n"] == "11"
    finally:
        server.stop()
