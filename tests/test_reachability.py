"""The reachable-file planner (catalog/maintenance/reachability.py) on tables pyiceberg writes through
the server: its answer against pyiceberg's own view of each snapshot, unreadable files refused, v1
snapshots without a manifest list, statistics files. Spark's deletions are the other oracle
(tests/test_expire_spark.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from catalog.maintenance import expire, reachability
from catalog.metadata import tables

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64())})


@pytest.fixture
def written(catalog, ns, http):
    """A table with five snapshots: three appends, a delete of one row (a rewrite), an overwrite."""
    table = catalog.create_table(f"{ns}.t", SCHEMA)
    table.append(rows(1, 2))
    table.append(rows(3))
    table.append(rows(4, 5))
    table.delete(EqualTo("id", 3))
    table.overwrite(rows(6))
    table = catalog.load_table(f"{ns}.t")
    meta = http.get(f"/v1/namespaces/{ns}/tables/t").json()["metadata"]
    assert len(meta["snapshots"]) >= 5
    return table, meta


def expire_to(meta: dict, keep: int) -> dict:
    """The metadata after expiring all but the last ``keep`` snapshots of main."""
    plan = expire.plan(meta, 2**62, expire.Retention(), older_than_ms=2**62, retain_last=keep)
    return tables.apply(meta, [], plan.updates(), base_location="unused.metadata.json", now_ms=2**62)


def live_files(table, snapshot_id: int) -> set[str]:
    return {task.file.file_path for task in table.scan(snapshot_id=snapshot_id).plan_files()}


def manifests(table, snapshot_id: int) -> set[str]:
    return {m.manifest_path for m in table.metadata.snapshot_by_id(snapshot_id).manifests(table.io)}


@pytest.mark.parametrize("keep", [1, 2, 4])
def test_unreachable_is_what_no_remaining_snapshot_sees(written, keep: int) -> None:
    table, before = written
    after = expire_to(before, keep)
    kept = {s["snapshot-id"] for s in after["snapshots"]}
    gone = [s for s in before["snapshots"] if s["snapshot-id"] not in kept]
    assert len(kept) == keep and gone

    got = reachability.after_expiry(before, after, table.io)

    seen_after = set().union(*(live_files(table, sid) for sid in kept))
    seen_before = set().union(*(live_files(table, s["snapshot-id"]) for s in gone))
    assert set(got.content_files) == seen_before - seen_after
    listed_after = set().union(*(manifests(table, sid) for sid in kept))
    listed_before = set().union(*(manifests(table, s["snapshot-id"]) for s in gone))
    assert set(got.manifests) == listed_before - listed_after
    assert set(got.manifest_lists) == {s["manifest-list"] for s in gone}
    assert got.statistics == ()
    assert all(table.io.new_input(p).exists() for p in got.all())
    assert got.all()[: len(got.content_files)] == list(got.content_files)  # data first, manifest lists late


def test_nothing_removed_nothing_unreachable(written) -> None:
    table, before = written
    assert reachability.after_expiry(before, before, table.io) == reachability.Unreachable((), (), (), ())


@pytest.mark.parametrize("which", ["kept manifest", "removed manifest", "removed manifest list"])
def test_an_unreadable_file_raises_never_a_guess(written, which: str) -> None:
    table, before = written
    after = expire_to(before, 1)
    head = after["snapshots"][0]
    gone = next(s for s in before["snapshots"] if s["snapshot-id"] != head["snapshot-id"])
    if which == "kept manifest":
        victim = sorted(manifests(table, head["snapshot-id"]))[0]
    elif which == "removed manifest":
        victim = sorted(manifests(table, gone["snapshot-id"]) - manifests(table, head["snapshot-id"]))[0]
    else:
        victim = gone["manifest-list"]
    table.io.delete(victim)
    with pytest.raises(reachability.ReachabilityUnknown) as caught:
        reachability.after_expiry(before, after, table.io)
    assert caught.value.path == victim


def test_v1_snapshots_naming_their_manifests_without_a_list(written) -> None:
    """Format v1 let a snapshot carry ``manifests`` instead of a manifest list."""
    table, before = written
    after = expire_to(before, 1)
    expected = reachability.after_expiry(before, after, table.io)

    def embedded(meta: dict) -> dict:
        snaps = []
        for s in meta["snapshots"]:
            s = dict(s)
            s["manifests"] = sorted(manifests(table, s["snapshot-id"]))
            del s["manifest-list"]
            snaps.append(s)
        return {**meta, "snapshots": snaps}

    got = reachability.after_expiry(embedded(before), embedded(after), table.io)
    assert got.manifest_lists == ()
    assert (got.manifests, got.content_files) == (expected.manifests, expected.content_files)


def test_statistics_of_removed_snapshots_only(written) -> None:
    table, before = written
    head = before["current-snapshot-id"]
    old = before["snapshots"][0]["snapshot-id"]

    def stats(sid: int, kind: str) -> dict:
        return {"snapshot-id": sid, "statistics-path": f"file:/nowhere/{kind}-{sid}", "file-size-in-bytes": 1}

    before = {
        **before,
        "statistics": [
            {**stats(sid, "puffin"), "file-footer-size-in-bytes": 1, "blob-metadata": []} for sid in (old, head)
        ],
        "partition-statistics": [stats(old, "part"), stats(head, "part")],
    }
    after = expire_to(before, 1)
    got = reachability.after_expiry(before, after, table.io)
    assert got.statistics == (f"file:/nowhere/part-{old}", f"file:/nowhere/puffin-{old}")
