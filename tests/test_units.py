"""Unit tests of pure logic: the commit step, the wire codec, when a sink's state is logged."""

from __future__ import annotations

import base64

import pytest

from catalog import errors
from catalog.api import paging, wire
from catalog.metadata import tables
from catalog.storage.metadata_files import next_location, version_of

NEW_TABLE_JSON_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


def fresh(**properties):
    return tables.new_table(
        location="file:///wh/ns/t",
        schema=NEW_TABLE_JSON_SCHEMA,
        spec=None,
        order=None,
        properties={"format-version": "2", "owner": "x", "uuid": "bad", **properties},
        now_ms=1_700_000_000_000,
    )


def test_new_metadata_strips_reserved_and_adds_defaults():
    md = fresh()
    assert md["properties"] == {"owner": "x", "write.parquet.compression-codec": "zstd"}
    assert md["format-version"] == 2 and md["last-partition-id"] == 999 and md["metadata-log"] == []


def test_version_and_next_location():
    assert version_of("s3://b/t/metadata/00012-6c97e413-d51b-4538-ac70-12fe2a85cb83.metadata.json") == 12
    assert version_of("s3://b/t/metadata/v3.metadata.json") == -1
    loc = next_location(fresh(), "file:///wh/ns/t/metadata/00004-6c97e413-d51b-4538-ac70-12fe2a85cb83.metadata.json")
    assert loc.startswith("file:///wh/ns/t/metadata/00005-") and loc.endswith(".metadata.json")
    assert next_location(fresh(), None).split("/")[-1].startswith("00000-")
    gz = next_location(fresh(**{"write.metadata.compression-codec": "gzip", "write.metadata.path": "s3://m/"}), None)
    assert gz.startswith("s3://m/00000-") and gz.endswith(".gz.metadata.json")


def test_requirement_failure_names_requirement():
    with pytest.raises(errors.RequirementFailed) as e:
        tables.apply(
            fresh(), [{"type": "assert-current-schema-id", "current-schema-id": 4}], [], base_location="l", now_ms=1
        )
    assert e.value.code == 409 and "assert-current-schema-id" in e.value.message


def test_apply_updates_noop_and_change():
    md = fresh()
    assert tables.apply(md, [], [], base_location="loc", now_ms=1) is md
    log = "file:///wh/ns/t/metadata/00000-x.json"
    new = tables.apply(
        md, [], [{"action": "set-properties", "updates": {"a": "b"}}], base_location=log, now_ms=1_700_000_000_001
    )
    assert new["properties"]["a"] == "b" and new["metadata-log"][-1]["metadata-file"] == log
    assert "a" not in md["properties"]  # the base is never modified


@pytest.mark.parametrize(
    "raw,levels",
    [
        ("a", ("a",)),
        ("a%1Fb", ("a", "b")),
        ("a%1fb%1Fc", ("a", "b", "c")),
        ("with+space%1Fx", ("with space", "x")),
        ("with%20space", ("with space",)),
        ("a%2Bb", ("a+b",)),
        ("dot.ted", ("dot.ted",)),
        ("%C3%BC", ("ü",)),
    ],
)
def test_decode_namespace(raw, levels):
    assert wire.decode_namespace(raw) == levels


@pytest.mark.parametrize("raw", ["", "a%1F", "%1Fa", "a%1F%1Fb"])
def test_decode_namespace_rejects_empty_levels(raw):
    with pytest.raises(errors.BadRequest):
        wire.decode_namespace(raw)


def test_page_tokens_round_trip_and_are_bound_to_their_list():
    tokens = paging.PageTokens("k" * 32)
    token = tokens.seal("bookmark", "tables\0ns\0user:u")
    # opaque (a one-letter cursor made this flaky: its letter turns up in the random nonce one time in ten)
    assert "bookmark" not in base64.urlsafe_b64decode(token[1:] + "==").decode("latin-1")
    assert tokens.open(token, "tables\0ns\0user:u") == "bookmark"
    assert paging.PageTokens("k" * 32).open(token, "tables\0ns\0user:u") == "bookmark"  # any worker
    for other in ("tables\0other\0user:u", "tables\0ns\0user:v"):
        with pytest.raises(errors.BadRequest):
            tokens.open(token, other)
    with pytest.raises(errors.BadRequest):
        paging.PageTokens(None).open(token, "tables\0ns\0user:u")
    shared = "ab" * 32  # no secret: the key serve draws for its workers
    assert paging.PageTokens(None, shared).open(paging.PageTokens(None, shared).seal("c", "x"), "x") == "c"
    assert paging.page_size({"pageSize": "2"}) == 2 and paging.page_size({}) is None


def _local(path, **env):
    from catalog.settings import Settings
    from catalog.storage.backends import LocalStorage

    return LocalStorage(Settings(warehouse=str(path), **env).storage)


def test_local_write_refuses_overwrites_and_a_file_in_the_way_is_400(tmp_path):
    storage = _local(tmp_path / "wh")
    target = (tmp_path / "wh" / "m.json").as_uri()
    storage.write_new(target, b"{}")
    with pytest.raises(FileExistsError):
        storage.write_new(target, b"{}")  # create-only
    blocker = tmp_path / "wh" / "file"
    blocker.write_text("x")
    with pytest.raises(errors.BadRequest):
        storage.write_new((blocker / "child.json").as_uri(), b"{}")  # the client's path runs through a file
    with pytest.raises(errors.BadRequest):
        storage.write_new((tmp_path / "wh" / ("x" * 300) / "m.json").as_uri(), b"{}")  # too long for the fs


def test_local_locations_are_literal(tmp_path):
    storage = _local(tmp_path / "my wh")
    assert storage.root() == f"file://{tmp_path}/my wh"
    storage.write_new(f"file://{tmp_path}/my wh/t%41/m.json", b"new")
    assert (tmp_path / "my wh" / "t%41" / "m.json").read_bytes() == b"new"
    assert storage.read(f"file:{tmp_path}/my wh/t%41/m.json") == b"new"  # Hadoop's file:/ form
    with pytest.raises(errors.NotFound):
        storage.read(f"file://{tmp_path}/my wh/missing.json")
    with pytest.raises(errors.BadRequest):
        storage.read("file://elsewhere/tmp/m.json")


def test_local_storage_touches_nothing_outside_its_roots(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.json"
    secret.write_text('{"secret": 1}')
    storage = _local(tmp_path / "wh", allowed_locations=str(tmp_path / "extra"))
    for location in (secret.as_uri(), str(secret), f"file://{tmp_path}/wh/../outside/secret.json"):
        with pytest.raises((errors.Forbidden, errors.BadRequest)):
            storage.read(location)
        with pytest.raises((errors.Forbidden, errors.BadRequest)):
            storage.delete(location)
    with pytest.raises(errors.Forbidden):
        storage.write_new((outside / "new.json").as_uri(), b"{}")
    (tmp_path / "wh" / "link").symlink_to(outside)  # a link inside the warehouse to a place outside it
    with pytest.raises(errors.Forbidden):
        storage.read(f"file://{tmp_path}/wh/link/secret.json")
    with pytest.raises(errors.Forbidden):
        storage.write_new(f"file://{tmp_path}/wh/link/new.json", b"{}")
    with pytest.raises(errors.Forbidden):  # a directory still to be made, behind the link
        storage.write_new(f"file://{tmp_path}/wh/link/sub/new.json", b"{}")
    assert secret.exists() and sorted(p.name for p in outside.iterdir()) == ["secret.json"]
    (tmp_path / "wh" / "file").write_text("x")  # a file where a directory should be: the client's 400
    for location in (f"file://{tmp_path}/wh/file/new.json", f"file://{tmp_path}/wh/file/sub/new.json"):
        with pytest.raises(errors.BadRequest):
            storage.write_new(location, b"{}")
    assert (tmp_path / "wh" / "file").read_text() == "x"
    storage.write_new(f"file://{tmp_path}/wh/ns/t/metadata/new.json", b"{}")  # directories made on the way
    with pytest.raises(FileExistsError):  # create-only
        storage.write_new(f"file://{tmp_path}/wh/ns/t/metadata/new.json", b"[]")
    assert (tmp_path / "wh" / "ns" / "t" / "metadata" / "new.json").read_bytes() == b"{}"
    with pytest.raises(errors.BadRequest):  # names a directory, not a file: refused before anything is made
        storage.write_new(f"file://{tmp_path}/wh/ns/t2/metadata/", b"{}")
    assert not (tmp_path / "wh" / "ns" / "t2").exists()
    storage.write_new((tmp_path / "extra" / "t" / "m.json").as_uri(), b"{}")  # the allow-list is writable
    assert storage.read((tmp_path / "extra" / "t" / "m.json").as_uri()) == b"{}"


def test_preparing_a_table_location_creates_its_directories_inside_the_roots_only(tmp_path):
    """A staged create leaves location/, metadata/ and data/ for clients that do not create parent
    directories (DuckDB), confined like every write: nothing outside the roots or through a link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    storage = _local(tmp_path / "wh", allowed_locations=str(tmp_path / "extra"))
    storage.prepare_table_location(f"file://{tmp_path}/wh/ns/t")
    storage.prepare_table_location(f"file://{tmp_path}/wh/ns/t")  # again: existing directories are kept
    storage.prepare_table_location(str(tmp_path / "extra" / "t2"))
    for table in (tmp_path / "wh" / "ns" / "t", tmp_path / "extra" / "t2"):
        assert sorted(p.name for p in table.iterdir()) == ["data", "metadata"]
    for location in (outside.as_uri() + "/t", str(tmp_path / "elsewhere" / "t")):
        with pytest.raises(errors.Forbidden):
            storage.prepare_table_location(location)
    with pytest.raises(errors.BadRequest):
        storage.prepare_table_location(f"file://{tmp_path}/wh/../outside/t")
    (tmp_path / "wh" / "link").symlink_to(outside)
    with pytest.raises(errors.Forbidden):
        storage.prepare_table_location(f"file://{tmp_path}/wh/link/t")
    (tmp_path / "wh" / "file").write_text("x")
    for location in (f"file://{tmp_path}/wh/file", f"file://{tmp_path}/wh/file/t"):
        with pytest.raises(errors.BadRequest):
            storage.prepare_table_location(location)
    assert list(outside.iterdir()) == [] and not (tmp_path / "elsewhere").exists()
    assert (tmp_path / "wh" / "file").read_text() == "x"


def test_preparing_an_s3_table_location_writes_nothing_but_is_still_confined():
    from catalog.settings import Settings
    from catalog.storage.s3 import S3Storage

    storage = S3Storage(Settings(warehouse="s3://bucket/wh", s3_endpoint="http://127.0.0.1:9").storage)
    storage.prepare_table_location("s3://bucket/wh/ns/t")  # no request: the endpoint is not even there
    with pytest.raises(errors.Forbidden):
        storage.prepare_table_location("s3://other/t")


def test_local_reads_take_only_bounded_regular_files(tmp_path):
    import os

    storage = _local(tmp_path / "wh", max_metadata_file_bytes=4096)
    fifo = tmp_path / "wh" / "pipe.json"
    os.mkfifo(fifo)
    (tmp_path / "wh" / "dir.json").mkdir()
    (tmp_path / "wh" / "big.json").write_bytes(b" " * 5000)
    for name in ("pipe.json", "dir.json"):  # a FIFO would block a reader forever; both are 404 at once
        with pytest.raises(errors.NotFound):
            storage.read((tmp_path / "wh" / name).as_uri())
    with pytest.raises(errors.BadRequest, match="over the limit"):
        storage.read((tmp_path / "wh" / "big.json").as_uri())


@pytest.mark.parametrize(
    "raw, normal",
    [
        ("/wh/a", "file:///wh/a"),
        ("file:/wh/a/", "file:///wh/a"),
        ("file:///wh//a", "file:///wh/a"),
        ("file://localhost/wh/a", "file:///wh/a"),
        ("S3A://bucket/wh/a/", "s3://bucket/wh/a"),
        ("s3://bucket//wh/%41", "s3://bucket/wh/%41"),
    ],
)
def test_locations_normalise_to_one_spelling(raw, normal):
    from catalog import locations

    assert locations.normalise(raw) == normal


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "  ",
        "relative/path",
        "file:relative",
        "s3:bucket/x",
        "s3:///x",
        "/wh/../etc",
        "/wh/%2e%2E/etc",
        "/wh/./a",
        "/wh/a\x00b",
        "/wh/a\nb",
        "file://otherhost/wh",
        "/" + "x" * 3000,
        5,
        None,
    ],
)
def test_locations_that_cannot_be_compared_safely_are_refused(raw):
    from catalog import locations

    with pytest.raises(errors.BadRequest):
        locations.normalise(raw)


def test_location_policy_confines_to_the_roots():
    from catalog.locations import Locations, ancestors, overlaps

    policy = Locations("s3://lake/wh", ["file:///mnt/extra/"])
    assert policy.check("s3a://lake/wh/ns/t") == "s3://lake/wh/ns/t"
    assert policy.check("/mnt/extra/t") == "file:///mnt/extra/t"
    for outside in ("s3://lake/wh2/t", "s3://lake/w", "s3://other/wh/t", "/mnt/extra2", "/etc/passwd"):
        with pytest.raises(errors.Forbidden):
            policy.check(outside)
    assert (
        overlaps("s3://b/a", "s3://b/a/x") and overlaps("s3://b/a/x", "s3://b/a") and overlaps("s3://b/a", "s3://b/a")
    )
    assert not overlaps("s3://b/a", "s3://b/ab")
    assert ancestors("s3://b/x/y") == ["s3://b/", "s3://b/x", "s3://b/x/y"]


def test_a_sinks_log_says_each_change_of_state_once(caplog):
    """``SinkHealth``: a refused POST now and then is no line; failing is one line at the third attempt
    in a row that delivered nothing, delivering again one line; behind and caught up one line each."""
    import logging

    from catalog.delivery.loop import BEHIND_SECONDS, FAILING_AFTER, SinkHealth

    health = SinkHealth("unit-hook")
    boom = RuntimeError("HTTP 503")
    with caplog.at_level(logging.INFO, logger="catalog.events"):
        health.failed(boom, 0.5)
        health.delivered()  # one refusal, then delivered: not a failing sink
        assert caplog.messages == []
        for attempt in range(FAILING_AFTER + 5):
            health.failed(boom, 0.5 * 2**attempt)
        for _ in range(3):
            health.delivered()
        for age in (1.0, BEHIND_SECONDS + 1, BEHIND_SECONDS + 50):
            health.lag(500, age)
        health.lag(10, 2.0)
        health.lag(0, 0.0)
        health.lag(0, 0.0)
    assert [(r.levelname, r.getMessage().split(",")[0].split(":")[0]) for r in caplog.records] == [
        ("WARNING", f"events to unit-hook failing ({FAILING_AFTER} attempts in a row)"),
        ("INFO", "events to unit-hook delivered again"),
        ("WARNING", "events to unit-hook behind"),
        ("INFO", "events to unit-hook caught up"),
    ]


@pytest.mark.parametrize("version", [2, 3])
def test_manifests_the_catalog_writes_declare_equality_ids_as_the_spec_does(version: int) -> None:
    """``list<int>``, as Java reads them (pyiceberg 0.12 declares ``list<long>``, which Java's
    manifest reader fails on); read back, the ids are the ones written."""
    import orjson
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
    )
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import Record
    from pyiceberg.types import LongType, NestedField

    from catalog.storage.manifests import ENTRY_READ, BufferOutput, manifest_writer, read_records

    out = BufferOutput("memory://t/metadata/m.avro")
    deletes = DataFile.from_args(
        _table_format_version=version, content=DataFileContent.EQUALITY_DELETES, file_path="memory://t/data/e.parquet",
        file_format=FileFormat.PARQUET, partition=Record(), record_count=1, file_size_in_bytes=10, equality_ids=[1],
    )  # fmt: skip
    deletes.spec_id = 0
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    with manifest_writer(version, ManifestContent.DELETES, PartitionSpec(), schema, out, 7, "null") as writer:
        writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=deletes))
    records, body = read_records(out.value, ENTRY_READ)

    def fields(node):  # every Avro record field, depth first
        if isinstance(node, dict):
            yield from (f for f in node.get("fields", []) if isinstance(f, dict))
            for value in node.values():
                yield from fields(value)
        elif isinstance(node, list):
            for value in node:
                yield from fields(value)

    (equality_ids,) = [f for f in fields(orjson.loads(body.schema)) if f.get("field-id") == 135]
    element = next(t for t in equality_ids["type"] if isinstance(t, dict))
    assert element["type"] == "array" and element["items"] == "int" and element["element-id"] == 136
    assert records[0].data_file.equality_ids == [1]
