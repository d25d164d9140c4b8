"""Server-side rebase of pure appends (catalog/rebase.py), with real pyiceberg clients over HTTP on both
backends, and in process for what needs hand-built files (v3 row ids, a lost CAS, hostile lists).

Clients here never retry a 409 themselves (``commit.retry.num-retries=0``): every conflict the server
does not absorb surfaces as ``CommitFailedException``."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter

import pytest
import requests
from pyiceberg.exceptions import CommitFailedException

from tests.support import (
    JSON_ID_SCHEMA,
    PY_SCHEMA,
    answered_409s,
    create_events,
    insert_events,
    local_catalog,
    metric_total,
    race,
    register_catalog,
    rows,
    start_server,
)

NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}
REBASE = {**NO_CLIENT_RETRY, "catalog.append-rebase.enabled": "true"}


def chain(table) -> list:
    """The main branch's snapshots, oldest first, following parent ids from the head."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    out, head = [], table.current_snapshot()
    while head is not None:
        out.append(head)
        head = by_id.get(head.parent_snapshot_id) if head.parent_snapshot_id is not None else None
    return out[::-1]


def check_table(table, expected_ids: list[int]) -> None:
    """Every acknowledged row exactly once, a linear chain holding every snapshot, sequence numbers
    strictly increasing along it, and the head's summary totals equal to a full scan."""
    scanned = table.scan().to_arrow()
    assert sorted(scanned["id"].to_pylist()) == sorted(expected_ids)
    snaps = chain(table)
    assert len(snaps) == len(table.snapshots())
    seqs = [s.sequence_number for s in snaps]
    assert seqs == sorted(set(seqs)), seqs
    files = [task.file for task in table.scan().plan_files()]
    summary = table.current_snapshot().summary
    assert int(summary["total-records"]) == scanned.num_rows
    assert int(summary["total-data-files"]) == len(files)
    assert int(summary["total-files-size"]) == sum(f.file_size_in_bytes for f in files)
    assert int(summary["total-delete-files"]) == 0


def test_concurrent_appends_land_without_409(server, ns, tmp_path):
    """8 writers x 4 appends, through two server processes on one database (so both paths run: the
    in-process queue, where the requirement fails, and a lost CAS between processes): no client sees
    a 409, every append lands once, and the rebases are counted."""
    server.catalog().create_table(f"{ns}.hot", PY_SCHEMA, properties=REBASE).append(rows(0, 1))
    shared = {k: v for k, v in server.env.items() if k.startswith(("CATALOG_", "AWS_")) and k != "CATALOG_PORT"}
    other = start_server(tmp_path / "second", server.backend, shared)
    other.io_props = server.io_props
    try:
        urls = [server.url, other.url]
        before = sum(metric_total(url, "catalog_commit_append_rebase_total") for url in urls)
        writers, appends = 8, 4
        tables = [(server if w % 2 else other).catalog().load_table(f"{ns}.hot") for w in range(writers)]

        def write(w: int) -> list[int]:
            for i in range(appends):
                tables[w].append(rows(1000 * (w + 1) + i, 1))
            return [1000 * (w + 1) + i for i in range(appends)]

        acknowledged = [row for done in race(writers, write) for row in done]
        rebased = sum(metric_total(url, "catalog_commit_append_rebase_total") for url in urls) - before
    finally:
        other.stop()
    table = server.catalog().load_table(f"{ns}.hot")
    check_table(table, [0, *acknowledged])
    assert len(table.snapshots()) == 1 + writers * appends
    assert rebased > 0  # the writers really raced, and the server absorbed it


def test_rebase_off_answers_409_as_before(server, ns):
    """Without the property (and the catalog default off), a stale append is a 409 and nothing moves."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.plain", PY_SCHEMA, properties=NO_CLIENT_RETRY).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.plain")
    catalog.load_table(f"{ns}.plain").append(rows(1, 1))
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        stale.append(rows(2, 1))
    table = catalog.load_table(f"{ns}.plain")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1]
    # switched off per table while the default is on is covered in process (test_property_overrides)


def test_overwrites_are_never_rebased_and_appends_rebase_on_them(server, ns):
    """An overwrite whose branch moved is a 409 as before; an append that was stale before an
    overwrite landed is rebased on top of it: the rows the overwrite removed stay removed."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.mixed", PY_SCHEMA, properties=REBASE).append(rows(0, 3))
    overwriter = catalog.load_table(f"{ns}.mixed")
    appender = catalog.load_table(f"{ns}.mixed")
    catalog.load_table(f"{ns}.mixed").append(rows(10, 1))  # both are stale now
    with pytest.raises(CommitFailedException):
        overwriter.overwrite(rows(20, 1))
    with pytest.raises(CommitFailedException):
        overwriter.delete("id == 0")
    catalog.load_table(f"{ns}.mixed").overwrite(rows(30, 2))  # a fresh overwrite lands
    appender.append(rows(40, 1))  # stale across the overwrite: rebased on it
    table = catalog.load_table(f"{ns}.mixed")
    assert table.current_snapshot().snapshot_id == appender.current_snapshot().snapshot_id
    ops = [s.summary.operation.value for s in chain(table)]
    assert ops[-1] == "append" and ("overwrite" in ops or "delete" in ops), ops
    check_table(table, [30, 31, 40])


def test_merged_manifests_are_rebased(server, ns):
    """pyiceberg's merge-append rewrites its parent's manifests into its new one (EXISTING entries):
    a stale one that merged exactly its parent's live files is rebased as a fast append would be
    (its added file in a new manifest, then the head's manifests): every file live once."""
    catalog = server.catalog()
    props = {**REBASE, "commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}
    catalog.create_table(f"{ns}.merged", PY_SCHEMA, properties=props).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.merged")
    catalog.load_table(f"{ns}.merged").append(rows(1, 1))  # merged too: main's one manifest holds 0 and 1
    stale.append(rows(2, 1))  # its list: one merged manifest (0 EXISTING + 2 ADDED), on the old main
    table = catalog.load_table(f"{ns}.merged")
    check_table(table, [0, 1, 2])
    head = table.current_snapshot()
    assert head.snapshot_id == stale.current_snapshot().snapshot_id
    manifests = head.manifests(table.io)
    assert manifests[0].added_snapshot_id == head.snapshot_id
    assert (manifests[0].added_files_count, manifests[0].existing_files_count) == (1, 0)
    paths = [e.data_file.file_path for m in manifests for e in m.fetch_manifest_entry(table.io)]
    assert len(paths) == len(set(paths)) == 3


def test_a_client_that_asserted_no_branch_is_not_rebased(server, ns):
    """The first append of an empty table asserts that main does not exist (snapshot-id null): if
    another append created main meanwhile, it is a 409 as before."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.empty", PY_SCHEMA, properties=REBASE)
    stale = catalog.load_table(f"{ns}.empty")
    catalog.load_table(f"{ns}.empty").append(rows(0, 1))
    with pytest.raises(CommitFailedException, match="created concurrently"):
        stale.append(rows(1, 1))


def test_a_manifest_list_outside_the_table_is_refused(server, ns, http):
    """A hostile client names another table's manifest list: a 409 as before, nothing written."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.victim", PY_SCHEMA, properties=REBASE).append(rows(0, 1))
    victim = catalog.load_table(f"{ns}.victim")
    catalog.create_table(f"{ns}.t", PY_SCHEMA, properties=REBASE).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.t")
    catalog.load_table(f"{ns}.t").append(rows(1, 1))
    parent = stale.current_snapshot()
    snapshot_id = uuid.uuid4().int >> 66
    snapshot = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent.snapshot_id,
        "sequence-number": parent.sequence_number + 1,
        "timestamp-ms": parent.timestamp_ms + 1,
        "manifest-list": victim.current_snapshot().manifest_list,
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    body = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent.snapshot_id}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
    }
    resp = http.post(f"/v1/namespaces/{ns}/tables/t", json=body)
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["type"] == "CommitFailedException"
    listed = Counter(s.manifest_list.rsplit("/", 1)[0] for s in catalog.load_table(f"{ns}.victim").snapshots())
    assert len(listed) == 1  # and nothing was written next to the victim's list:
    if server.backend == "sqlite":
        directory = next(iter(listed)).removeprefix("file://")
        import os

        assert not [n for n in os.listdir(directory) if "rebased" in n]


# --- in process: hand-built appends (pyiceberg's Avro writers), v3 row ids, a lost CAS ----------------


@pytest.fixture
def local(tmp_path):
    """The catalog in process on SQLite + a local warehouse, rebase on by default."""
    with local_catalog(tmp_path, append_rebase=True) as cat:
        yield cat


def new_table(cat, name: str, **properties: str) -> dict:
    from catalog.usecases import TABLE

    cat.create_table(("n",), name, None, {"schema": JSON_ID_SCHEMA, "properties": properties})
    return cat.load(TABLE, ("n",), name).data


def read_list(location: str) -> list:
    """A manifest list as pyiceberg reads it, with the v3 fields (first_row_id)."""
    from pyiceberg.avro.file import AvroFile
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import MANIFEST_LIST_FILE_SCHEMAS, ManifestContent, ManifestFile, PartitionFieldSummary

    with AvroFile[ManifestFile](
        PyArrowFileIO().new_input(location),
        MANIFEST_LIST_FILE_SCHEMAS[3],
        read_types={-1: ManifestFile, 508: PartitionFieldSummary},
        read_enums={517: ManifestContent},
    ) as reader:
        return list(reader)


def client_append(meta: dict, snapshot_id: int, records: int, existing_files_count: int = 0) -> tuple[list, list]:
    """What a client's FastAppend sends for ``records`` rows in one new data file on ``meta``'s main:
    a manifest and a manifest list written with pyiceberg's writers (v3 lists with the catalog's
    writer: pyiceberg 0.12 writes none), and the commit's requirements and updates."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import (
        ManifestFile,
        write_manifest,
        write_manifest_list,
    )
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from catalog.storage import manifests as manifest_io

    io, version, where = PyArrowFileIO(), meta["format-version"], meta["location"] + "/metadata"
    parent_id = meta.get("current-snapshot-id")
    parent_id = None if parent_id in (None, -1) else parent_id
    parent = next((s for s in meta["snapshots"] if s["snapshot-id"] == parent_id), None)
    sequence = meta["last-sequence-number"] + 1
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    path = f"{where}/{uuid.uuid4()}-m0.avro"
    with write_manifest(2, UNPARTITIONED_PARTITION_SPEC, schema, io.new_output(path), snapshot_id, "null") as w:
        w.add(_added_entry(meta, snapshot_id, records))
    manifest = w.to_manifest_file()
    if existing_files_count:  # as a merged manifest says of the files it carried over
        manifest._data[8] = existing_files_count
    kept = read_list(parent["manifest-list"]) if parent else []
    location = f"{where}/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    if version >= 3:
        writer = manifest_io.ListWriterV3(
            io.new_output(location), snapshot_id, parent_id, sequence, meta["next-row-id"], "null"
        )
        with writer:
            writer.add_manifests([ManifestFile(*manifest._data, None), *kept])
    else:
        with write_manifest_list(version, io.new_output(location), snapshot_id, parent_id, sequence, "null") as writer:
            writer.add_manifests([manifest, *[ManifestFile(*m._data[:15]) for m in kept]])
    total = int((parent or {}).get("summary", {}).get("total-records", 0)) + records
    snapshot = {
        "snapshot-id": snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": meta["last-updated-ms"] + 1,
        "manifest-list": location,
        "summary": {
            "operation": "append",
            "added-records": str(records),
            "added-data-files": "1",
            "added-files-size": str(100 + records),
            "total-records": str(total),
            "total-data-files": str(len(kept) + 1),
        },
        "schema-id": 0,
    }
    if parent_id is not None:
        snapshot["parent-snapshot-id"] = parent_id
    if version >= 3:
        snapshot["first-row-id"], snapshot["added-rows"] = meta["next-row-id"], records
    requirements = [
        {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent_id},
    ]
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
    ]
    return requirements, updates


def commit(cat, name: str, requirements: list, updates: list) -> dict:
    from catalog.usecases import TABLE, Change

    return cat.commit([Change(TABLE, ("n",), name, requirements, updates)]).files[0].data


def test_v3_row_ids_stay_disjoint(local):
    """Three appends built on the same parent: the second and third are rebased; each gets the table's
    next-row-id as first-row-id, its manifest fresh row ids and the new sequence number."""
    base = commit(local, "v3", *client_append(new_table(local, "v3", **{"format-version": "3"}), 1, 5))
    stale = [client_append(base, 10 + i, 3 + i) for i in range(3)]
    for requirements, updates in stale:
        final = commit(local, "v3", requirements, updates)
    snaps = {s["snapshot-id"]: s for s in final["snapshots"]}
    ordered = [snaps[i] for i in (1, 10, 11, 12)]
    assert [s.get("parent-snapshot-id") for s in ordered] == [None, 1, 10, 11]
    assert [s["sequence-number"] for s in ordered] == [1, 2, 3, 4]
    assert [(s["first-row-id"], s["added-rows"]) for s in ordered] == [(0, 5), (5, 3), (8, 4), (12, 5)]
    assert final["next-row-id"] == 17
    assert [s["summary"]["total-records"] for s in ordered] == ["5", "8", "12", "17"]
    manifests = read_list(snaps[12]["manifest-list"])
    ranges = sorted((m._data[15], m._data[15] + m.added_rows_count) for m in manifests)
    assert ranges == [(0, 5), (5, 8), (8, 12), (12, 17)]  # disjoint, and every row has one
    seqs = {m.added_snapshot_id: (m.sequence_number, m.min_sequence_number) for m in manifests}
    assert seqs == {1: (1, 1), 10: (2, 2), 11: (3, 3), 12: (4, 4)}
    assert snaps[12]["manifest-list"] != stale[2][1][0]["snapshot"]["manifest-list"]  # a new list, next to it


@pytest.mark.parametrize("version", [2, 3])
def test_the_head_list_is_carried_as_bytes(local, monkeypatch, version):
    """A rebase copies the head list's Avro blocks instead of re-encoding them (one block more per
    rebase) until MAX_BLOCKS, then writes the whole list as one block again. Every list of the chain
    reads back as a full re-encode would: the new manifest first, each manifest once, its own
    sequence number and, v3, row ids that are disjoint and cover every row."""
    from catalog.commit import rebase
    from catalog.storage import manifests as manifest_io

    monkeypatch.setattr(rebase, "MAX_BLOCKS", 4)
    name = f"bytes{version}"
    base = commit(local, name, *client_append(new_table(local, name, **{"format-version": str(version)}), 1, 2))
    stale = [client_append(base, 10 + i, 1 + i) for i in range(7)]  # all built on the first snapshot
    blocks = []
    for i, (requirements, updates) in enumerate(stale):
        final = commit(local, name, requirements, updates)
        listed = final["snapshots"][-1]["manifest-list"]
        with open(listed.removeprefix("file://"), "rb") as f:
            manifests, body = manifest_io.read_records(f.read())
        blocks.append(body.blocks)
        assert [m.added_snapshot_id for m in manifests] == [10 + j for j in range(i, -1, -1)] + [1]
        assert [m.sequence_number for m in manifests] == list(range(i + 2, 0, -1))
        assert [m.added_snapshot_id for m in read_list(listed)] == [m.added_snapshot_id for m in manifests]
        if version >= 3:
            ranges = sorted((m._data[15], m._data[15] + m.added_rows_count) for m in manifests)
            assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
            assert ranges[-1][1] == final["next-row-id"]
    # the first lands as sent (the client's list); the first rebase re-encodes it (codec null; the
    # server writes gzip); each next one carries the one before it until the fourth block; then one
    assert blocks == [1, 1, 2, 3, 4, 1, 2]


def test_refusals_are_the_original_409(local, caplog):
    """Existing entries, a manifest list outside the table, another failing requirement, a branch that
    went back: each a 409 naming the moved branch, with nothing written."""
    from catalog import errors
    from catalog.usecases import TABLE, Change

    base = commit(local, "t", *client_append(new_table(local, "t"), 1, 1))
    commit(local, "t", *client_append(base, 2, 1))  # main moves on
    merged = client_append(base, 3, 1, existing_files_count=1)
    wrong_schema = client_append(base, 4, 1)
    wrong_schema[0].append({"type": "assert-current-schema-id", "current-schema-id": 7})
    outside = client_append(base, 5, 1)
    outside[1][0]["snapshot"]["manifest-list"] = "file:///etc/passwd"
    in_transaction = client_append(base, 6, 1)
    new_table(local, "u")
    before = sorted(p.name for p in _metadata_dir(local, "t").iterdir())
    with pytest.raises(errors.RequirementFailed):  # a multi-table transaction may rely on what it read
        local.commit([Change(TABLE, ("n",), "t", *in_transaction), Change(TABLE, ("n",), "u")])
    cases = [(merged, "existing or deleted entries"), (wrong_schema, None), (outside, "outside the table's location")]
    for (requirements, updates), reason in cases:
        caplog.clear()
        with (
            caplog.at_level(logging.DEBUG, logger="catalog.commit"),
            pytest.raises(errors.RequirementFailed, match="branch main has changed"),
        ):
            commit(local, "t", requirements, updates)
        refused = [r.getMessage() for r in caplog.records if "not rebased" in r.getMessage()]
        assert refused == ([] if reason is None else [refused[0]]) and all(reason in m for m in refused), refused
    assert [n for n in sorted(p.name for p in _metadata_dir(local, "t").iterdir()) if n not in before] == []


def merged_append(meta: dict, snapshot_id: int, records: int, merge=None, tamper=None) -> tuple[list, list]:
    """What Java's MergeAppend sends past ``commit.manifest.min-count-to-merge`` on ``meta``'s main:
    ONE new manifest holding the live files of the parent's manifests that ``merge`` picks (all by
    default) as EXISTING entries (snapshot ids and sequence numbers explicit, as read) and a new
    file ADDED, then the parent's other manifests. ``tamper`` rewrites the carried entries first: a
    list of (status, entry), "existing" or "deleted"."""
    from pyiceberg.io.pyarrow import PyArrowFileIO
    from pyiceberg.manifest import ManifestFile, write_manifest, write_manifest_list
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from catalog.storage import manifests as manifest_io

    io, version, where = PyArrowFileIO(), meta["format-version"], meta["location"] + "/metadata"
    parent = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    listed = read_list(parent["manifest-list"])
    merged = listed if merge is None else merge(listed)
    kept = [m for m in listed if m.manifest_path not in {n.manifest_path for n in merged}]
    carried = [("existing", e) for m in merged for e in m.fetch_manifest_entry(io, discard_deleted=True)]
    if tamper is not None:
        carried = tamper(carried)
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    path = f"{where}/{uuid.uuid4()}-m0.avro"
    with write_manifest(2, UNPARTITIONED_PARTITION_SPEC, schema, io.new_output(path), snapshot_id, "null") as w:
        w.add(_added_entry(meta, snapshot_id, records))
        for status, entry in carried:
            (w.existing if status == "existing" else w.delete)(entry)
    manifest = w.to_manifest_file()
    sequence = meta["last-sequence-number"] + 1
    location = f"{where}/snap-{snapshot_id}-0-{uuid.uuid4()}.avro"
    if version >= 3:
        writer = manifest_io.ListWriterV3(
            io.new_output(location), snapshot_id, parent["snapshot-id"], sequence, meta["next-row-id"], "null"
        )
        with writer:
            writer.add_manifests([ManifestFile(*manifest._data, None), *kept])
        added_rows = writer.next_row_id - meta["next-row-id"]
    else:
        with write_manifest_list(version, io.new_output(location), snapshot_id, parent["snapshot-id"], sequence,
                                 "null") as writer:  # fmt: skip
            writer.add_manifests([manifest, *[ManifestFile(*m._data[:15]) for m in kept]])
    snapshot = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent["snapshot-id"],
        "sequence-number": sequence,
        "timestamp-ms": meta["last-updated-ms"] + 1,
        "manifest-list": location,
        "summary": {"operation": "append", "added-records": str(records), "added-data-files": "1"},
        "schema-id": 0,
    }
    if version >= 3:
        snapshot["first-row-id"], snapshot["added-rows"] = meta["next-row-id"], added_rows
    requirements = [
        {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent["snapshot-id"]},
    ]
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
    ]
    return requirements, updates


def _added_entry(meta: dict, snapshot_id: int, records: int, status=None):
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=f"{meta['location']}/data/{uuid.uuid4()}.parquet",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=records,
        file_size_in_bytes=100 + records,
    )
    status = ManifestEntryStatus.ADDED if status is None else status
    return ManifestEntry.from_args(status=status, snapshot_id=snapshot_id, data_file=data_file)


def live_files(meta: dict) -> list[tuple]:
    """The main branch's live files as a reader sees them: (path, snapshot id, data sequence number),
    and (v3) their first row ids and record counts."""
    from pyiceberg.io.pyarrow import PyArrowFileIO

    head = next(s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"])
    out = []
    for m in read_list(head["manifest-list"]):
        for e in m.fetch_manifest_entry(PyArrowFileIO(), discard_deleted=True):
            out.append((e.data_file.file_path, e.snapshot_id, e.sequence_number))
    return out


@pytest.mark.parametrize("version", [2, 3])
def test_a_merged_append_that_merged_its_parent_is_rebased(local, version):
    """Java's MergeAppend racing another append: its list is one manifest holding its parent's live
    files EXISTING and its new file ADDED (or, merging only some of the parent's manifests, those
    and the rest of the parent's). Rebased: its added file in a new manifest of the server's, then
    the head's manifests; every file of both commits live exactly once, each with its own sequence
    number, and (v3) row ids disjoint and covering every row."""
    name = f"merge{version}"
    meta = commit(local, name, *client_append(new_table(local, name, **{"format-version": str(version)}), 1, 2))
    for i in (2, 3):
        meta = commit(local, name, *client_append(meta, i, 1))  # three manifests of one file each
    x = meta
    racer = client_append(x, 4, 3)
    merging = merged_append(x, 5, 4)  # merged every manifest of its parent
    partial = merged_append(x, 6, 5, merge=lambda ms: ms[:2])  # merged two of three, kept the third
    for requirements, updates in (racer, merging, partial):
        meta = commit(local, name, requirements, updates)
    assert meta["current-snapshot-id"] == 6
    files = live_files(meta)
    assert len(files) == len({f[0] for f in files}) == 6  # three of x, one each of 4, 5 and 6
    by_snapshot = {f[1]: f[2] for f in files}
    assert by_snapshot == {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 6}
    snaps = {s["snapshot-id"]: s for s in meta["snapshots"]}
    assert [snaps[i]["parent-snapshot-id"] for i in (4, 5, 6)] == [3, 4, 5]
    assert [snaps[i]["summary"]["total-records"] for i in (4, 5, 6)] == ["7", "11", "16"]
    assert [snaps[i]["summary"]["total-data-files"] for i in (4, 5, 6)] == ["4", "5", "6"]
    manifests = read_list(snaps[6]["manifest-list"])
    assert [(m.added_snapshot_id, m.added_files_count, m.existing_files_count) for m in manifests[:2]] == [
        (6, 1, 0),
        (5, 1, 0),
    ]
    assert all("/rebased-" in m.manifest_path for m in manifests[:2])
    if version >= 3:
        ranges = sorted((m._data[15], m._data[15] + m.added_rows_count + m.existing_rows_count) for m in manifests)
        assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
        assert ranges[-1][1] == meta["next-row-id"] == 16
        assert [(snaps[i]["first-row-id"], snaps[i]["added-rows"]) for i in (5, 6)] == [(7, 4), (11, 5)]


def test_wrong_merges_are_refused(local, caplog):
    """A merged append is rebased only when what it carried is exactly its parent's live files: a
    file of the parent missing, an extra EXISTING file, a carried file with another sequence number,
    a DELETED entry, a file carried twice: each the original 409, nothing written, the table as it was."""
    from pyiceberg.manifest import ManifestEntryStatus

    from catalog import errors

    meta = commit(local, "w", *client_append(new_table(local, "w"), 1, 1))
    for i in (2, 3):
        meta = commit(local, "w", *client_append(meta, i, 1))
    x = meta
    head = commit(local, "w", *client_append(x, 4, 1))  # main moves on

    def shifted(carried):
        status, entry = carried[0]
        entry.sequence_number = entry.file_sequence_number = 7
        return carried

    extra = _added_entry(x, 2, 1, ManifestEntryStatus.EXISTING)  # as if snapshot 2 had added it
    extra.sequence_number = extra.file_sequence_number = 2
    not_live = "not its parent's live files"
    cases = {
        "missing": (lambda carried: carried[1:], not_live),
        "extra": (lambda carried: [*carried, ("existing", extra)], not_live),
        "sequence": (shifted, not_live),
        "deleted": (lambda carried: [("deleted", carried[0][1]), *carried[1:]], "deleted entries"),
        "twice": (lambda carried: [*carried, carried[0]], not_live),
    }
    before = sorted(p.name for p in _metadata_dir(local, "w").iterdir())
    for i, (case, (tamper, reason)) in enumerate(cases.items()):
        attempt = merged_append(x, 10 + i, 1, tamper=tamper)
        written = sorted(p.name for p in _metadata_dir(local, "w").iterdir())
        caplog.clear()
        with (
            caplog.at_level(logging.DEBUG, logger="catalog.commit"),
            pytest.raises(errors.RequirementFailed, match="branch main has changed"),
        ):
            commit(local, "w", *attempt)
        refused = [r.getMessage() for r in caplog.records if "not rebased" in r.getMessage()]
        assert len(refused) == 1 and reason in refused[0], (case, refused)
        assert sorted(p.name for p in _metadata_dir(local, "w").iterdir()) == written, case
    from catalog.usecases import TABLE

    now = local.load(TABLE, ("n",), "w").data
    assert now["current-snapshot-id"] == head["current-snapshot-id"] == 4
    assert now["snapshots"] == head["snapshots"]
    assert not [n for n in sorted(p.name for p in _metadata_dir(local, "w").iterdir()) if "rebased" in n]
    assert len(before) < len(written)  # the clients' own files were there, nothing of the server's


def test_a_client_list_is_checked_by_its_bytes(local, monkeypatch):
    """A stale append's list is the new manifest followed by its parent's records byte for byte: the
    server takes the new manifests without decoding the rest. A list that keeps its parent's
    manifests in another order is decoded and compared by path (rebased); one that drops a manifest
    is refused either way."""
    from catalog import errors
    from catalog.commit import rebase
    from catalog.storage import manifests as manifest_io

    shown = []

    def spy(raw, snapshot_id, parent):
        found = manifest_io.added_by(raw, snapshot_id, parent)
        shown.append(found is not None)
        return found

    monkeypatch.setattr(rebase, "added_by", spy)
    base = commit(local, "b", *client_append(new_table(local, "b"), 1, 1))
    base = commit(local, "b", *client_append(base, 2, 1))
    commit(local, "b", *client_append(base, 3, 1))  # main moves on
    commit(local, "b", *client_append(base, 4, 1))  # rebased: the new manifest, then 2's and 1's bytes
    assert shown == [True]

    def rewritten(append, keep):
        """``append`` with its list rewritten to hold its new manifest and ``keep`` of its parent's."""
        requirements, updates = append
        listed = updates[0]["snapshot"]["manifest-list"]
        path = listed.removeprefix("file://")
        with open(path, "rb") as f:
            manifests, _ = manifest_io.read_records(f.read())
        out = manifest_io.BufferOutput(listed)
        writer = manifest_io.list_writer(2, out, updates[0]["snapshot"]["snapshot-id"], 2, 3, 0, "null")
        with writer:
            writer.add_manifests([manifests[0], *keep(list(manifests[1:]))])
        with open(path, "wb") as f:
            f.write(out.value)
        return requirements, updates

    final = commit(local, "b", *rewritten(client_append(base, 5, 1), lambda kept: kept[::-1]))
    assert shown == [True, False] and final["current-snapshot-id"] == 5
    with pytest.raises(errors.RequirementFailed, match="branch main has changed"):
        commit(local, "b", *rewritten(client_append(base, 6, 1), lambda kept: kept[:1]))
    assert shown == [True, False, False]


def test_a_compressed_bomb_is_refused_without_inflating_it(local, monkeypatch):
    """A manifest list whose one block inflates to 64 MiB of zeros (64 KB on disk), against a bound
    set to 1 MiB here: the rebase stops inflating at the bound and answers the original 409."""
    import zlib

    from catalog import errors
    from catalog.storage import manifests as manifest_io

    monkeypatch.setattr(manifest_io, "MAX_RECORD_BYTES", 2**20)
    base = commit(local, "z", *client_append(new_table(local, "z"), 1, 1))
    commit(local, "z", *client_append(base, 2, 1))
    requirements, updates = client_append(base, 3, 1)
    path = updates[0]["snapshot"]["manifest-list"].removeprefix("file://")
    out = manifest_io.BufferOutput(path)
    with manifest_io.list_writer(2, out, 3, 1, 3, 0, "deflate") as writer:
        writer.add_manifests([])
    body = manifest_io.body_of(out.value)
    header = out.value[: len(out.value) - len(body.data)]
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = b"".join(squeeze.compress(bytes(2**20)) for _ in range(64)) + squeeze.flush()
    block = bytearray()
    for value in (1, len(bomb)):  # Avro longs: zig-zag varints
        value = value << 1
        while value > 0x7F:
            block.append(value & 0x7F | 0x80)
            value >>= 7
        block.append(value)
    with open(path, "wb") as f:
        f.write(header + bytes(block) + bomb + body.sync)
    with pytest.raises(manifest_io.Unreadable, match="inflated"):
        manifest_io.read_records(header + bytes(block) + bomb + body.sync)
    with pytest.raises(errors.RequirementFailed, match="branch main has changed"):
        commit(local, "z", requirements, updates)


def test_the_table_property_overrides_the_default(local):
    from catalog import errors

    base = commit(
        local, "off", *client_append(new_table(local, "off", **{"catalog.append-rebase.enabled": "false"}), 1, 1)
    )
    commit(local, "off", *client_append(base, 2, 1))
    with pytest.raises(errors.RequirementFailed):
        commit(local, "off", *client_append(base, 3, 1))
    local.settings.commits.append_rebase = False
    base = commit(
        local, "on", *client_append(new_table(local, "on", **{"catalog.append-rebase.enabled": "true"}), 1, 1)
    )
    commit(local, "on", *client_append(base, 2, 1))
    assert commit(local, "on", *client_append(base, 3, 1))["current-snapshot-id"] == 3


def test_a_crash_before_the_cas_leaves_only_orphans(local, monkeypatch):
    """The rebased manifest list and metadata file are written, then the process dies in the CAS: the
    table is unchanged, what was written is referenced by nothing, and the client's retry lands."""
    from catalog import metrics
    from catalog.usecases import TABLE

    base = commit(local, "c", *client_append(new_table(local, "c"), 1, 1))
    head = commit(local, "c", *client_append(base, 2, 1))
    stale = client_append(base, 3, 1)
    pointer = local.load(TABLE, ("n",), "c").location
    real = local.pointers.swap_pointers

    def crash(*args, **kwargs):
        raise SystemExit("killed in the CAS")  # not an Exception: nothing after it runs, like a crash

    monkeypatch.setattr(local.pointers, "swap_pointers", crash)
    with pytest.raises(SystemExit):
        commit(local, "c", *stale)
    assert local.load(TABLE, ("n",), "c").location == pointer
    written = [p for p in _metadata_dir(local, "c").iterdir() if "rebased" in p.name]
    assert len(written) == 1  # the orphan: no snapshot of the table names it
    assert all(s["manifest-list"] != f"file://{written[0]}" for s in head["snapshots"])
    monkeypatch.setattr(local.pointers, "swap_pointers", real)
    landed = metrics.APPEND_REBASES._value.get()
    final = commit(local, "c", *stale)
    assert final["current-snapshot-id"] == 3 and metrics.APPEND_REBASES._value.get() == landed + 1

    def lose(*args, **kwargs):  # a known failure (the database refused): the written files are deleted
        raise RuntimeError("refused")

    monkeypatch.setattr(local.pointers, "swap_pointers", lose)
    before = set(_metadata_dir(local, "c").iterdir())
    with pytest.raises(RuntimeError):
        commit(local, "c", *client_append(head, 4, 1))
    left = set(_metadata_dir(local, "c").iterdir()) - before  # the client's own manifest and list only
    assert len(left) == 2 and not [p for p in left if "rebased" in p.name or p.name.endswith(".metadata.json")]


def _metadata_dir(cat, name: str):
    from pathlib import Path

    from catalog.usecases import TABLE

    return Path(cat.load(TABLE, ("n",), name).data["location"].removeprefix("file://")) / "metadata"


def test_queued_appends_land_as_one_group(local, monkeypatch):
    """Eight appends queue while the table's lock is held (as behind a commit in flight): the first
    lands alone (it did not wait), the other seven, one of them a merged manifest, land as ONE
    metadata file and ONE swap; the merged one alone gets its 409, each other member is answered with
    that file, which holds its snapshot; the snapshot log keeps every snapshot in order. The group's
    client lists and new manifests were read ahead, in parallel, each once."""
    from catalog import errors, metrics
    from catalog.usecases import TABLE

    base = commit(local, "g", *client_append(new_table(local, "g"), 1, 1))
    appends = [client_append(base, 10 + i, 1, existing_files_count=1 if i == 4 else 0) for i in range(8)]
    storage, reads, writes = local.engine.rebaser.storage, [], []
    real_read, real_write = storage.read, storage.write_new
    monkeypatch.setattr(
        storage, "read", lambda loc: reads.append((threading.current_thread().name, loc)) or real_read(loc)
    )
    monkeypatch.setattr(
        storage, "write_new", lambda loc, b: writes.append((threading.current_thread().name, loc)) or real_write(loc, b)
    )
    sizes = metrics.GROUP_COMMIT_SIZE.collect()[0].samples
    before = {s.labels.get("le"): s.value for s in sizes if s.name.endswith("_bucket")}
    results = land_queued(local, "g", appends)
    assert isinstance(results[4], errors.RequirementFailed)
    landed = [results[i] for i in range(8) if i != 4]
    assert len({f.location for f in landed[1:]}) == 1 and landed[0].location != landed[1].location
    for i, file in zip([0, 1, 2, 3, 5, 6, 7], landed, strict=True):
        assert 10 + i in {s["snapshot-id"] for s in file.data["snapshots"]}
    final = local.load(TABLE, ("n",), "g").data  # the group's members in their order of arrival:
    by_id = {s["snapshot-id"]: s for s in final["snapshots"]}
    chain = [final["current-snapshot-id"]]
    while by_id[chain[-1]].get("parent-snapshot-id") is not None:
        chain.append(by_id[chain[-1]]["parent-snapshot-id"])
    chain.reverse()
    assert chain[:2] == [1, 10] and sorted(chain[2:]) == [11, 12, 13, 15, 16, 17]
    assert [e["snapshot-id"] for e in final["snapshot-log"]] == chain
    assert [by_id[i]["sequence-number"] for i in chain] == list(range(1, 9))
    assert len(final["metadata-log"]) == len(base["metadata-log"]) + 2  # two files: the lone one, the group
    after = {
        s.labels.get("le"): s.value
        for s in metrics.GROUP_COMMIT_SIZE.collect()[0].samples
        if s.name.endswith("_bucket")
    }
    assert after["8.0"] - after["4.0"] == before["8.0"] - before["4.0"] + 1  # one group of 6 (5 to 8)
    assert after["1.0"] == before["1.0"] + 1  # and the lone commit
    lists = {a[1][0]["snapshot"]["manifest-list"] for a in appends[1:]}
    read = [(thread, loc) for thread, loc in reads if loc in lists or loc.endswith("-m0.avro")]
    assert {loc for _, loc in read} >= lists and len(read) == 2 * len(lists)  # each list and manifest once
    assert all(thread.startswith("rebase-io") for thread, _ in read), read
    rebased = [(thread, loc) for thread, loc in writes if "-rebased-" in loc]  # the group's six, in parallel
    assert len(rebased) == 6 and all(thread.startswith("rebase-io") for thread, _ in rebased), rebased


def test_a_merge_too_large_to_check_is_refused(local, monkeypatch, caplog):
    """The parent's manifests a merged append left out are read to check it, bounded: more of them
    than MAX_MERGED_MANIFESTS, or more bytes than MAX_MERGED_BYTES, is the original 409."""
    from catalog import errors
    from catalog.commit import rebase

    meta = commit(local, "big", *client_append(new_table(local, "big"), 1, 1))
    meta = commit(local, "big", *client_append(meta, 2, 1))
    commit(local, "big", *client_append(meta, 3, 1))  # main moves on
    for i, (bound, value, reason) in enumerate(
        [("MAX_MERGED_MANIFESTS", 1, "2 of its parent's manifests merged"), ("MAX_MERGED_BYTES", 100, "too large")]
    ):
        monkeypatch.setattr(rebase, bound, value)
        caplog.clear()
        with (
            caplog.at_level(logging.DEBUG, logger="catalog.commit"),
            pytest.raises(errors.RequirementFailed, match="branch main has changed"),
        ):
            commit(local, "big", *merged_append(meta, 10 + i, 1))
        assert any(reason in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
        monkeypatch.undo()
    assert commit(local, "big", *merged_append(meta, 12, 1))["current-snapshot-id"] == 12  # unbounded: lands


def test_merged_appends_land_in_a_group(local):
    """Merged appends queued behind a commit in flight land in one group: each rebased (its added
    files in a new manifest of the server's, written before the group's metadata file), one refused
    (it merged less than its parent's live files) with its own 409, its files never written."""
    from catalog import errors
    from catalog.usecases import TABLE

    meta = commit(local, "mg", *client_append(new_table(local, "mg"), 1, 1))
    meta = commit(local, "mg", *client_append(meta, 2, 1))
    appends = [
        client_append(meta, 10, 1),
        merged_append(meta, 11, 2),
        merged_append(meta, 12, 3, tamper=lambda carried: carried[1:]),  # lost one of its parent's files
        merged_append(meta, 13, 4, merge=lambda ms: ms[:1]),
    ]
    results = land_queued(local, "mg", appends)
    assert isinstance(results[2], errors.RequirementFailed), results[2]
    assert results[1].location == results[3].location != results[0].location
    final = local.load(TABLE, ("n",), "mg").data
    files = live_files(final)
    assert sorted(f[1] for f in files) == [1, 2, 10, 11, 13] and len({f[0] for f in files}) == 5
    assert final["snapshots"][-1]["summary"]["total-records"] == str(1 + 1 + 1 + 2 + 4)
    listed = read_list(final["snapshots"][-1]["manifest-list"])
    unmerged = [m.manifest_path for m in listed if "/rebased-" in m.manifest_path]
    assert len(unmerged) == 2 and not [n for n in _metadata_dir(local, "mg").iterdir() if "-rebased-" in n.name and
                                       "snap-12-" in n.name]  # fmt: skip
    assert len([n for n in _metadata_dir(local, "mg").iterdir() if n.name.startswith("rebased-")]) == 2


def test_a_group_whose_lists_cannot_be_written_lands_nothing(local, monkeypatch):
    """The group's rebased lists are written together before its metadata file; when one PUT fails,
    every member gets a 503 (the store failed, nothing was committed: a 409 would send the clients to
    retry into the same failure), the table is unchanged and the lists that were written are deleted."""
    from catalog import errors
    from catalog.usecases import TABLE

    base = commit(local, "w", *client_append(new_table(local, "w"), 1, 1))
    appends = [client_append(base, 10 + i, 1) for i in range(5)]
    storage = local.engine.rebaser.storage
    real_write, calls = storage.write_new, []

    def flaky(location, data):
        if "-rebased-" in location:
            calls.append(location)
            if len(calls) == 2:
                raise OSError("the store refused")
        return real_write(location, data)

    monkeypatch.setattr(storage, "write_new", flaky)
    results = land_queued(local, "w", appends)
    assert not isinstance(results[0], Exception)  # the lone first one landed as sent
    assert all(isinstance(results[i], errors.ServiceUnavailable) for i in range(1, 5)), results
    assert local.load(TABLE, ("n",), "w").data["current-snapshot-id"] == 10
    assert len(calls) == 4 and not [p for p in _metadata_dir(local, "w").iterdir() if "-rebased-" in p.name]


def test_a_group_never_reads_outside_the_table(local, monkeypatch, tmp_path):
    """A queued member whose snapshot names a manifest list outside the table (another table's, a
    file elsewhere on disk): the group's read-ahead never opens it, the member gets its 409, the
    others land, and nothing is written next to the foreign file."""
    from catalog import errors
    from catalog.usecases import TABLE

    victim = commit(local, "victim", *client_append(new_table(local, "victim"), 1, 1))
    foreign = tmp_path / "elsewhere" / "snap-9-list.avro"
    foreign.parent.mkdir()
    foreign.write_bytes(b"not for the catalog")
    base = commit(local, "h", *client_append(new_table(local, "h"), 1, 1))
    appends = [client_append(base, 10 + i, 1) for i in range(5)]
    appends[2][1][0]["snapshot"]["manifest-list"] = victim["snapshots"][0]["manifest-list"]
    appends[3][1][0]["snapshot"]["manifest-list"] = f"file://{foreign}"
    storage, reads = local.engine.rebaser.storage, []
    real_read = storage.read
    monkeypatch.setattr(storage, "read", lambda loc: reads.append(loc) or real_read(loc))
    results = land_queued(local, "h", appends)
    assert all(isinstance(results[i], errors.RequirementFailed) for i in (2, 3)), results
    assert all(not isinstance(results[i], Exception) for i in (0, 1, 4)), results
    assert "victim" not in " ".join(reads) and "elsewhere" not in " ".join(reads)
    assert sorted(p.name for p in foreign.parent.iterdir()) == ["snap-9-list.avro"]
    assert local.load(TABLE, ("n",), "h").data["current-snapshot-id"] == 14


def land_queued(cat, name: str, appends: list) -> dict[int, object]:
    """Commit ``appends`` (requirements, updates) to table ``name`` so that the first one lands alone
    and the others queue behind it (the table's lock is held until they all have): each one's
    metadata file or error, by index."""
    from catalog import errors
    from catalog.usecases import TABLE, Change

    results: dict[int, object] = {}

    def run(i: int) -> None:
        try:
            results[i] = cat.commit([Change(TABLE, ("n",), name, *appends[i])]).files[0]
        except errors.IcebergError as e:
            results[i] = e

    groups, key = cat.engine.groups, (("n",), name)
    with cat.engine.serialised([Change(TABLE, ("n",), name)]):
        first = threading.Thread(target=run, args=(0,))
        first.start()
        _wait_for(lambda: key in groups._tables and groups._tables[key].leading and not groups._tables[key].queue)
        threads = [threading.Thread(target=run, args=(i,)) for i in range(1, len(appends))]
        for t in threads:
            t.start()
        _wait_for(lambda: len(groups._tables[key].queue) == len(appends) - 1)
    for t in [first, *threads]:
        t.join(30)
    return results


def _wait_for(condition, timeout: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


# --- Spark: Java's MergeAppend through the rebase ---------------------------------------------------


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", ["2", "3"])
def test_spark_concurrent_inserts_land_without_409(spark, server, version):
    """Concurrent INSERTs from four threads of one Spark session, with Iceberg's own retry off
    (``commit.retry.num-retries=0``: a 409 fails the INSERT) and rebase on: every INSERT lands once,
    and Java's manifest lists (MergeAppend, sequence numbers and row ids inherited) were rebased."""
    lake = register_catalog(spark, server)
    table = f"{lake}.sp_{uuid.uuid4().hex[:8]}.hot"
    spark.sql(f"CREATE NAMESPACE {table.rsplit('.', 1)[0]}")
    props = {"format-version": version, "commit.retry.num-retries": "0", "catalog.append-rebase.enabled": "true"}
    create_events(spark, table, **props)
    insert_events(spark, table, range(-1, 0))  # main exists: a first append is never rebased
    before = metric_total(server.url, "catalog_commit_append_rebase_total")
    threads, inserts = 4, 2

    def insert(t: int) -> None:
        for i in range(inserts):
            insert_events(spark, table, range(100 * t + 10 * i, 100 * t + 10 * i + 2))

    race(threads, insert)
    ids = sorted(r[0] for r in spark.sql(f"SELECT id FROM {table}").collect())
    assert ids == sorted(
        [-1, *(100 * t + 10 * i + k for t in range(threads) for i in range(inserts) for k in range(2))]
    )
    history = spark.sql(f"SELECT snapshot_id, parent_id FROM {table}.history").collect()
    parents = {r[0]: r[1] for r in history}
    head, length = spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at DESC").first()[0], 0
    while head is not None:
        head, length = parents.get(head), length + 1
    assert length == 1 + threads * inserts == len(parents)  # one linear chain
    assert metric_total(server.url, "catalog_commit_append_rebase_total") > before
    if version == "3":  # row lineage: every row its own _row_id, the snapshots' ranges back to back
        spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")  # see tests/test_v3.py
        try:
            row_ids = [r[0] for r in spark.sql(f"SELECT _row_id FROM {table}").collect()]
        finally:
            spark.conf.unset("spark.sql.iceberg.vectorization.enabled")
        assert len(set(row_ids)) == len(row_ids) == len(ids)
        namespace, name = table.split(".", 1)[1].split(".")
        meta = requests.get(f"{server.url}/v1/namespaces/{namespace}/tables/{name}", timeout=30).json()["metadata"]
        ordered = sorted(meta["snapshots"], key=lambda s: s["sequence-number"])
        assert [s["first-row-id"] for s in ordered] == [
            sum(s["added-rows"] for s in ordered[:i]) for i in range(len(ordered))
        ]
        assert meta["next-row-id"] == sum(s["added-rows"] for s in ordered)


@pytest.mark.spark
def test_lists_carrying_blocks_read_in_spark_and_pyiceberg(spark, server, ns):
    """Six pyiceberg writers loaded at the same snapshot append one after another: each append after
    the first is rebased on the one before, the server carrying the head list's blocks as bytes, so
    the last list holds several blocks under one sync marker. Java (Spark's scan and its manifests
    table) and pyiceberg read every row and manifest from it."""
    from catalog.storage import manifests as manifest_io

    catalog = server.catalog()
    table = catalog.create_table(f"{ns}.blocks", PY_SCHEMA, properties=REBASE)
    table.append(rows(0, 1))
    writers = [server.catalog().load_table(f"{ns}.blocks") for _ in range(6)]
    for i, writer in enumerate(writers, start=1):
        writer.append(rows(i * 10, 2))
    table = catalog.load_table(f"{ns}.blocks")
    check_table(table, [0, *(i * 10 + k for i in range(1, 7) for k in range(2))])
    listed = table.current_snapshot().manifest_list
    with table.io.new_input(listed).open() as f:
        _, body = manifest_io.read_records(f.read())
    assert body.blocks > 2, body.blocks
    lake = register_catalog(spark, server)
    name = f"{lake}.{ns}.blocks"
    ids = sorted(r[0] for r in spark.sql(f"SELECT id FROM {name}").collect())
    assert ids == sorted([0, *(i * 10 + k for i in range(1, 7) for k in range(2))])
    added = [r[0] for r in spark.sql(f"SELECT added_snapshot_id FROM {name}.manifests").collect()]
    assert sorted(added) == sorted(s.snapshot_id for s in table.snapshots())


@pytest.mark.spark
@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", ["2", "3"])
def test_spark_merging_inserts_racing_appenders_get_no_409(spark, server, ns, version):
    """Spark's INSERT is Java's MergeAppend: with ``commit.manifest.min-count-to-merge=3`` nearly
    every one merges its parent's manifests into its new one (EXISTING entries). Racing appenders
    that keep moving main (pyiceberg's fast appends on v2; on v3, which pyiceberg 0.12 does not
    write, more Spark INSERTs), each merged INSERT meets a moved head and is rebased by the server:
    no 409 is answered at all (clients retry 409s silently, so the server counts them), and every
    row written is in the table once."""
    catalog = server.catalog()
    props = {
        "format-version": version,
        "catalog.append-rebase.enabled": "true",
        "commit.manifest.min-count-to-merge": "3",
    }
    catalog.create_table(f"{ns}.merging", PY_SCHEMA, properties=props)
    lake = register_catalog(spark, server)
    name = f"{lake}.{ns}.merging"
    spark.sql(f"INSERT INTO {name} VALUES (0, 'n0', NULL)")  # main exists, the session's table is loaded
    before, rebased = answered_409s(server.url), metric_total(server.url, "catalog_commit_append_rebase_total")
    done, inserts, appenders = threading.Event(), 6, 2
    written: list[int] = [0]

    def work(i: int) -> list[int]:
        if i == 0:  # Spark: one INSERT after another, each built on the head it last saw
            try:
                for k in range(inserts):
                    spark.sql(f"INSERT INTO {name} VALUES ({10 + 2 * k}, 'a', NULL), ({11 + 2 * k}, 'b', NULL)")
            finally:
                done.set()
            return [10 + k for k in range(2 * inserts)]
        table, ids = (catalog.load_table(f"{ns}.merging") if version == "2" else None), []
        while not done.is_set() and len(ids) < 200:
            row = 1000 * i + len(ids)
            if table is not None:
                table.append(rows(row, 1))
            else:
                spark.sql(f"INSERT INTO {name} VALUES ({row}, 'r', NULL)")
            ids.append(row)
        return ids

    for ids in race(1 + appenders, work):
        written.extend(ids)
    answered_409 = answered_409s(server.url) - before
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {name}").collect()) == sorted(written)
    if version == "2":
        check_table(catalog.load_table(f"{ns}.merging"), written)  # and totals, one chain, sequence numbers
    else:  # row lineage: every row its own _row_id
        spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")  # see tests/test_v3.py
        try:
            row_ids = [r[0] for r in spark.sql(f"SELECT _row_id FROM {name}").collect()]
        finally:
            spark.conf.unset("spark.sql.iceberg.vectorization.enabled")
        assert len(set(row_ids)) == len(row_ids) == len(written)
    assert metric_total(server.url, "catalog_commit_append_rebase_total") > rebased
    assert answered_409 == 0, f"{answered_409} commits were answered 409"
    # and merged INSERTs were among the rebased: their added files got a manifest of the server's
    paths = [r[0] for r in spark.sql(f"SELECT path FROM {name}.all_manifests").collect()]
    assert any("/rebased-" in p for p in paths), "no merged INSERT was rebased"


def test_what_qualifies_for_a_rebase():
    """``candidate`` on the commit's JSON alone: only a pure append whose branch moved forward from
    its parent, with every other requirement holding."""
    from catalog.commit import rebasable

    snapshots = [{"snapshot-id": i, **({"parent-snapshot-id": i - 1} if i > 1 else {})} for i in (1, 2, 3)]
    snapshots.append({"snapshot-id": 9, "parent-snapshot-id": 1})  # a side branch "b" off snapshot 1
    base = {
        "format-version": 2,
        "table-uuid": "u",
        "properties": {},
        "snapshots": snapshots,
        "refs": {"main": {"snapshot-id": 3, "type": "branch"}, "b": {"snapshot-id": 9, "type": "branch"}},
        "current-snapshot-id": 3,
    }

    def commit(parent=1, branch="main", operation="append", expected="parent", extra=(), ref_type="branch"):
        snapshot = {"snapshot-id": 50, "parent-snapshot-id": parent, "summary": {"operation": operation}}
        requirements = [
            {"type": "assert-table-uuid", "uuid": "u"},
            {
                "type": "assert-ref-snapshot-id",
                "ref": branch,
                "snapshot-id": parent if expected == "parent" else expected,
            },
        ]
        updates = [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": branch, "type": ref_type, "snapshot-id": 50},
            *extra,
        ]
        return requirements, updates

    def qualifies(*args, table=base, default=True):
        return rebasable.candidate(*args, table, default) is not None

    assert qualifies(*commit())  # main moved 1 -> 3
    assert qualifies(*commit(branch="b"))  # any branch: b moved 1 -> 9
    assert not qualifies(*commit(), default=False)  # rebase off
    off = {**base, "properties": {rebasable.PROPERTY: "false"}}
    assert not qualifies(*commit(), table=off)  # the table says no
    assert not qualifies(*commit(parent=9))  # main is not a descendant of 9 (rolled back or replaced)
    assert not qualifies(*commit(parent=3))  # main did not move: some other requirement failed
    assert not qualifies(*commit(expected=None))  # the client asserted main does not exist
    assert not qualifies(*commit(branch="gone"))  # the branch was dropped
    assert not qualifies(*commit(operation="overwrite"))
    assert not qualifies(*commit(ref_type="tag"))
    assert not qualifies(*commit(extra=[{"action": "set-properties", "updates": {"k": "v"}}]))
    wrong_uuid = commit()
    wrong_uuid[0][0]["uuid"] = "other"
    assert not qualifies(*wrong_uuid)
