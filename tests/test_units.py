"""Unit tests of pure logic: the commit step and the wire codec."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.update import AssertCreate, AssertCurrentSchemaId, SetPropertiesUpdate
from pyiceberg.types import LongType, NestedField

from catalog import commit, errors
from catalog.api import wire

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def fresh():
    return commit.new_metadata(
        "file:///wh/ns/t", SCHEMA, None, None, {"format-version": "2", "owner": "x", "uuid": "bad"}
    )


def test_new_metadata_strips_reserved_and_adds_defaults():
    md = fresh()
    assert md.properties == {"owner": "x", "write.parquet.compression-codec": "zstd"}
    assert md.format_version == 2 and md.last_partition_id == 999 and md.metadata_log == []


def test_version_and_next_location():
    assert commit.version_of("s3://b/t/metadata/00012-6c97e413-d51b-4538-ac70-12fe2a85cb83.metadata.json") == 12
    assert commit.version_of("s3://b/t/metadata/v3.metadata.json") == -1
    loc = commit.next_location(
        fresh(), "file:///wh/ns/t/metadata/00004-6c97e413-d51b-4538-ac70-12fe2a85cb83.metadata.json"
    )
    assert loc.startswith("file:///wh/ns/t/metadata/00005-") and loc.endswith(".metadata.json")
    assert commit.next_location(fresh(), None).split("/")[-1].startswith("00000-")


def test_requirement_failure_names_requirement():
    with pytest.raises(errors.CommitFailed) as e:
        commit.check_requirements([AssertCurrentSchemaId(current_schema_id=4)], fresh())
    assert "Requirement failed" in e.value.message and "assert-current-schema-id" in e.value.message
    assert "expected 4, found 0" in e.value.message


def test_create_requirement_must_be_alone():
    assert commit.is_create([AssertCreate()])
    assert not commit.is_create([AssertCurrentSchemaId(current_schema_id=0)])
    with pytest.raises(errors.IllegalArgument):
        commit.is_create([AssertCreate(), AssertCurrentSchemaId(current_schema_id=0)])


def test_apply_updates_noop_and_change():
    md = fresh()
    assert commit.apply_updates(md, [], "loc") is md
    new = commit.apply_updates(md, [SetPropertiesUpdate(updates={"a": "b"})], "file:///wh/ns/t/metadata/00000-x.json")
    assert new.properties["a"] == "b" and new.metadata_log[-1].metadata_file.endswith("00000-x.json")


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


def test_pagination_tokens_round_trip():
    keys = ["a", "b", "c"]
    page, token = wire.paginate(keys, 2, lambda k: k)
    assert page == ["a", "b"] and token
    after, size = wire.page_params({"pageToken": token, "pageSize": "2"})
    assert after == "b" and size == 2
    assert wire.paginate(["c"], 2, lambda k: k) == (["c"], None)
    assert wire.page_params({"pageToken": ""}) == (None, None)


def _local(path, **env):
    from catalog.settings import Settings
    from catalog.storage import LocalStorage

    return LocalStorage(Settings(warehouse=str(path), **env))


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
    assert secret.exists() and not (outside / "new.json").exists()
    storage.write_new((tmp_path / "extra" / "t" / "m.json").as_uri(), b"{}")  # the allow-list is writable
    assert storage.read((tmp_path / "extra" / "t" / "m.json").as_uri()) == b"{}"


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


def _append(md, sid: int, base_location: str):
    """One append commit, as clients send it: add-snapshot then move main."""
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, SetSnapshotRefUpdate

    parent = md.current_snapshot_id
    snap = Snapshot(
        snapshot_id=sid,
        parent_snapshot_id=parent,
        sequence_number=getattr(md, "last_sequence_number", 0) + 1,
        timestamp_ms=md.last_updated_ms + 1,  # not before the table's last update (Java's time-order rule)
        manifest_list=f"file:///wh/ns/t/metadata/snap-{sid}.avro",
        summary=Summary(Operation.APPEND, **{"added-records": "1"}),
        schema_id=md.current_schema_id,
        **({"first_row_id": md.next_row_id or 0, "added_rows": 1} if md.format_version == 3 else {}),
    )
    updates = [
        AddSnapshotUpdate(snapshot=snap),
        SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=sid),
    ]
    return commit.apply_updates(md, updates, base_location)


@pytest.mark.parametrize("format_version", ["1", "2", "3"])
def test_spliced_dump_equals_full_dump_through_a_history(format_version):
    """The incremental dump reuses the previous file's bytes: it must still equal the full dump as
    appends, schema changes, snapshot expiry and log trimming add, replace and drop elements."""
    import orjson
    from pyiceberg.table.update import AddSchemaUpdate, RemoveSnapshotsUpdate, SetCurrentSchemaUpdate

    md = commit.new_metadata(
        "file:///wh/ns/t",
        SCHEMA,
        None,
        None,
        {"format-version": format_version, "write.metadata.previous-versions-max": "4"},
    )
    dumped = commit.dump_spliced(md)
    steps = [("append", 10 + i) for i in range(6)] + [("schema", 0), ("expire", 0)] + [("append", 30), ("append", 31)]
    for n, (step, sid) in enumerate(steps):
        location = f"file:///wh/ns/t/metadata/{n:05d}-x.metadata.json"
        if step == "append":
            new = _append(md, sid, location)
        elif step == "schema":
            wider = Schema(*SCHEMA.fields, NestedField(2, "v", LongType(), required=False), schema_id=1)
            new = commit.apply_updates(
                md, [AddSchemaUpdate(schema_=wider), SetCurrentSchemaUpdate(schema_id=-1)], location
            )
        else:
            new = commit.apply_updates(md, [RemoveSnapshotsUpdate(snapshot_ids=[10, 11, 12])], location)
        previous, dumped = dumped, commit.dump_spliced(new, dumped)
        full = commit.dump(new)
        assert orjson.loads(dumped.raw) == orjson.loads(full), step
        assert list(orjson.loads(dumped.raw)) == list(orjson.loads(full))  # same key order
        if format_version != "3":  # V3's full dump goes through orjson: equal as JSON, not as bytes
            assert dumped.raw == full
        assert dumped.lists and dumped.raw is not previous.raw
        md = new
    final = orjson.loads(dumped.raw)
    assert [s["snapshot-id"] for s in final["snapshots"]] == [13, 14, 15, 30, 31]
    assert len(final["metadata-log"]) == 4
