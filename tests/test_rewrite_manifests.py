"""Manifest rewrite by the catalog (``rewrite-manifests``), on both backends, with real clients.

A table fed by pyiceberg appends (one manifest each) past ``commit.manifest.min-count-to-merge``
gets its manifests merged by the scheduler into a ``replace`` snapshot; every entry keeps its snapshot
id and sequence numbers, every row still reads in pyiceberg, DuckDB and Spark, and time travel to the
older snapshots reads them as before. Appends racing the rewrite all land (the server rebases them
over its ``replace`` snapshot); a rewrite whose head moved lands on the new head or plans again, and
never makes a writer fail. Spark's own ``CALL system.rewrite_manifests`` on a twin table is the
differential oracle (Iceberg 1.9's ``RewriteManifestsSparkAction``).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from pyiceberg.manifest import ManifestContent, ManifestFile

from catalog.maintenance import rewrite_manifests
from tests.support import (
    PART_SCHEMA,
    PART_SPEC,
    Server,
    backends,
    care_server,
    duckdb_attached,
    live_entries,
    part_batch,
    part_ids,
    part_table,
    register_catalog,
    run_care,
    run_job_racing,
    sql_rows,
)

REBASE = {"catalog.append-rebase.enabled": "true"}
_batch = partial(part_batch, n=2, parts=3)  # two rows an append, over three partitions
_ids = partial(part_ids, n=2)


@pytest.fixture(scope="module", params=backends())
def care(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose scheduler looks every second (manifest rewrite considered at every change)."""
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    srv = care_server(
        request.param,
        tmp_path_factory.mktemp(f"manifests-{request.param}"),
        services,
        CATALOG_MAINTENANCE_INTERVAL_SECONDS="1",
        CATALOG_MAINTENANCE_MANIFESTS_EVERY_MINUTES="0",
    )
    yield srv
    srv.stop()


def _wait_for_replace(catalog, name: str, timeout: float = 180):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        table = catalog.load_table(name)
        if any(s.summary and s.summary.operation.value == "replace" for s in table.metadata.snapshots):
            return table
        time.sleep(0.5)
    raise AssertionError(f"{name} was never rewritten")


def _assert_entries_kept(table) -> None:  # noqa: ANN001
    """Every live entry names the append that added it, with that append's sequence number."""
    by_id = {s.snapshot_id: s for s in table.metadata.snapshots}
    for path, (snapshot_id, seq, file_seq, _, _) in live_entries(table).items():
        added = by_id[snapshot_id]
        assert added.summary.operation.value == "append", path
        assert seq == file_seq == added.sequence_number, (path, seq, file_seq, added.sequence_number)


@pytest.mark.slow
def test_a_table_past_min_count_gets_its_manifests_merged_and_reads_the_same(care: Server) -> None:
    catalog, ns, table = part_table(care, "mr")
    for i in range(105):
        table.append(_batch(i))
    table = _wait_for_replace(catalog, f"{ns}.t")
    replace = next(s for s in table.metadata.snapshots if s.summary.operation.value == "replace")
    summary = replace.summary.additional_properties
    assert int(summary["manifests-replaced"]) > rewrite_manifests.MIN_COUNT_DEFAULT, summary
    assert summary["manifests-created"] == "1", summary  # 100+ small manifests are far below 8 MB
    assert int(summary["entries-processed"]) == 2 * int(summary["manifests-replaced"])  # two partitions an append
    parent = table.snapshot_by_id(replace.parent_snapshot_id)
    assert replace.sequence_number == parent.sequence_number + 1
    for key in ("total-records", "total-data-files", "total-files-size"):
        assert summary[key] == parent.summary.additional_properties[key]
    rewritten = [m for m in replace.manifests(table.io) if m.added_snapshot_id == replace.snapshot_id]
    assert len(rewritten) == 1 and rewritten[0].existing_files_count == int(summary["entries-processed"])
    assert rewritten[0].added_files_count == 0 and rewritten[0].sequence_number == replace.sequence_number
    # the scheduler does not come back: a handful of manifests now
    assert len(table.current_snapshot().manifests(table.io)) < 10
    _assert_entries_kept(table)

    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == _ids(range(105))
    appends = [s for s in table.metadata.snapshots if s.summary.operation.value == "append"]
    fiftieth = appends[49]
    assert sorted(table.scan(snapshot_id=fiftieth.snapshot_id).to_arrow()["id"].to_pylist()) == _ids(range(50))
    assert live_entries(table, parent.snapshot_id) == live_entries(table, replace.snapshot_id)

    duck = duckdb_attached(care)
    try:
        got = sorted(r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t").fetchall())
    finally:
        duck.close()
    assert got == _ids(range(105))


def test_the_scheduler_respects_min_count_and_merge_enabled(care: Server) -> None:
    """min-count-to-merge is the table's (5 here); a table with commit.manifest-merge.enabled=false is
    left alone by the scheduler (Java's appends would not merge it either), but an operator's run does
    it whatever the count."""
    low = {"commit.manifest.min-count-to-merge": "5"}
    catalog, ns, merged = part_table(care, "mr", **low)
    off = catalog.create_table(
        f"{ns}.off", PART_SCHEMA, partition_spec=PART_SPEC, properties={**low, rewrite_manifests.MERGE_ENABLED: "false"}
    )
    few = catalog.create_table(f"{ns}.few", PART_SCHEMA, partition_spec=PART_SPEC)
    for i in range(7):
        merged.append(_batch(i))
        off.append(_batch(i))
    for i in range(3):
        few.append(_batch(i))
    _wait_for_replace(catalog, f"{ns}.t")
    time.sleep(3)  # more rounds of the scheduler
    for name in ("off", "few"):
        ops = {s.summary.operation.value for s in catalog.load_table(f"{ns}.{name}").metadata.snapshots}
        assert ops == {"append"}, (name, ops)
    [task] = run_care(care, ns, "few", kinds=["rewrite-manifests"])
    assert task["state"] == "done" and task["result"]["manifests-replaced"] == 3, task
    assert task["result"]["manifests-after"] == 1
    few = catalog.load_table(f"{ns}.few")
    assert len(few.current_snapshot().manifests(few.io)) == 1
    assert sorted(few.scan().to_arrow()["id"].to_pylist()) == _ids(range(3))


def test_a_dry_run_says_what_it_would_merge_and_commits_nothing(care: Server) -> None:
    catalog, ns, table = part_table(care, "mr")
    for i in range(4):
        table.append(_batch(i))
    head = catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id
    [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"], **{"dry-run": True})
    assert task["result"]["manifests-to-replace"] == 4 and task["result"]["manifests-to-create"] == 1, task
    assert catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id == head


@pytest.mark.slow
def test_appends_racing_the_rewrite_all_land_without_a_409(care: Server) -> None:
    """Writers append (each from its own, soon stale, table object: the server rebases) while the
    rewrite runs again and again: every append lands at its first try, no row is lost or doubled,
    and the rewrites land too (on the new head when a writer got there first)."""
    catalog, ns, table = part_table(care, "mr", **REBASE)
    for i in range(30):
        table.append(_batch(i))
    failures: list[BaseException] = []

    def writer(w: int) -> None:
        mine = care.catalog().load_table(f"{ns}.t")
        for i in range(10):
            try:
                mine.append(_batch(1000 + w * 100 + i))
            except Exception as e:  # noqa: BLE001 - a 409 or anything else is a failed writer
                failures.append(e)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    runs = []
    while any(t.is_alive() for t in threads):
        runs.append(run_care(care, ns, "t", kinds=["rewrite-manifests"])[0])
    for t in threads:
        t.join()
    assert not failures, failures
    assert all(r["state"] == "done" for r in runs), runs
    landed = [r["result"] for r in runs if r["result"].get("manifests-replaced")]
    assert landed, runs
    table = catalog.load_table(f"{ns}.t")
    expected = _ids([*range(30), *(1000 + w * 100 + i for w in range(4) for i in range(10))])
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(expected)
    _assert_entries_kept(table)
    # once more, quietly: everything ends in one manifest
    [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"])
    table = catalog.load_table(f"{ns}.t")
    assert len(table.current_snapshot().manifests(table.io)) == 1, task
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(expected)


def test_an_append_that_started_before_the_rewrite_is_rebased_over_it(care: Server) -> None:
    """A writer loaded the table before the rewrite landed and commits after it: the server rebases
    its append over the catalog's replace snapshot (its new manifest first, then the merged one)."""
    catalog, ns, table = part_table(care, "mr", **REBASE)
    for i in range(5):
        table.append(_batch(i))
    stale = care.catalog().load_table(f"{ns}.t")
    [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"])
    replace_id = task["result"]["snapshot-id"]
    stale.append(_batch(5))  # asserts main is still the last append: rebased, never a 409
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "append" and head.parent_snapshot_id == replace_id
    assert head.sequence_number == table.snapshot_by_id(replace_id).sequence_number + 1
    assert len(head.manifests(table.io)) == 2
    assert head.summary.additional_properties["total-records"] == str(len(_ids(range(6))))
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == _ids(range(6))
    _assert_entries_kept(table)


# -- a moved head, deterministically: the job in this process, the server as the other writer -----


def test_a_rewrite_whose_head_moved_lands_on_the_new_head(two_processes) -> None:  # noqa: ANN001
    srv, local = two_processes
    catalog, ns, table = part_table(srv, "mr")
    for i in range(6):
        table.append(_batch(i))
    result = run_job_racing(
        local,
        ns,
        rewrite_manifests.Rewriter(local.storage, local.engine),
        lambda: catalog.load_table(f"{ns}.t").append(_batch(99)),
    )
    assert result["landed-on-moved-head"] == 1 and result["replanned"] == 0, result
    assert result["manifests-replaced"] == 6 and result["manifests-created"] == 1 and result["manifests-kept"] == 1
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "replace"
    assert table.snapshot_by_id(head.parent_snapshot_id).summary.operation.value == "append"  # the writer's
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == _ids([*range(6), 99])
    _assert_entries_kept(table)


def test_a_rewrite_whose_manifests_were_rewritten_meanwhile_plans_again(two_processes) -> None:  # noqa: ANN001
    srv, local = two_processes
    catalog, ns, table = part_table(srv, "mr")
    for i in range(6):
        table.append(_batch(i))
    other = rewrite_manifests.Rewriter(local.storage, local.engine)

    def rewrite_first() -> None:  # another rewrite lands first: the manifests this one replaces are gone
        entry = local.pointers.get_entry((ns,), "t")
        other.run(entry, local.files.read(entry.metadata_location), False, lambda: None)

    result = run_job_racing(local, ns, rewrite_manifests.Rewriter(local.storage, local.engine), rewrite_first)
    assert result["replanned"] == 1 and result["manifests-replaced"] == 0, result  # one manifest: nothing to do
    table = catalog.load_table(f"{ns}.t")
    replaces = [s for s in table.metadata.snapshots if s.summary.operation.value == "replace"]
    assert len(replaces) == 1
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == _ids(range(6))
    metadata_dir = Path(srv.env["CATALOG_WAREHOUSE"]) / ns / "t" / "metadata"
    referenced = {
        Path(m.manifest_path.removeprefix("file:").removeprefix("//")).name
        for s in table.metadata.snapshots
        for m in s.manifests(table.io)
    }
    lists = {Path(s.manifest_list.removeprefix("file:").removeprefix("//")).name for s in table.metadata.snapshots}
    written = {p.name for p in metadata_dir.glob("*.avro")}
    assert written == referenced | lists  # the refused attempt's files were deleted


# -- the plan --------------------------------------------------------------------------------------


def _manifest(content: ManifestContent, spec_id: int, length: int) -> ManifestFile:
    return ManifestFile.from_args(
        manifest_path=f"m-{uuid.uuid4().hex}",
        manifest_length=length,
        partition_spec_id=spec_id,
        content=content,
        added_files_count=1,
        existing_files_count=0,
        deleted_files_count=0,
    )


def test_the_plan_groups_by_content_and_spec_and_sizes_by_the_target() -> None:
    data0 = [_manifest(ManifestContent.DATA, 0, 100) for _ in range(10)]
    data1 = [_manifest(ManifestContent.DATA, 1, 100)]  # one manifest that stays one: left alone (Java)
    deletes = [_manifest(ManifestContent.DELETES, 0, 100) for _ in range(3)]
    groups = rewrite_manifests.plan((*data0, *deletes, *data1), 250)
    assert [(g.content, g.spec_id, len(g.manifests), g.count) for g in groups] == [
        (ManifestContent.DATA, 0, 10, 4),  # ceil(1000 / 250)
        (ManifestContent.DELETES, 0, 3, 2),
    ]
    assert rewrite_manifests.plan(tuple(data0), 50) == []  # the target is below the manifests' own size


# -- Spark: reads the rewritten table, and its own rewrite_manifests as the oracle ----------------


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_spark_reads_the_rewrite_and_its_own_rewrite_manifests_agrees(care: Server, spark) -> None:  # noqa: ANN001
    lake = register_catalog(spark, care)
    catalog, ns, ours = part_table(
        care, "mr", **{rewrite_manifests.MERGE_ENABLED: "false"}
    )  # not the scheduler's: ours to run
    theirs = catalog.create_table(
        f"{ns}.twin", PART_SCHEMA, partition_spec=PART_SPEC, properties={rewrite_manifests.MERGE_ENABLED: "false"}
    )
    for i in range(30):
        ours.append(_batch(i))
        theirs.append(_batch(i))
    before = catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id
    [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"])
    assert task["state"] == "done", task
    spark.sql(f"CALL {lake}.system.rewrite_manifests('{ns}.twin')").collect()

    ours, theirs = catalog.load_table(f"{ns}.t"), catalog.load_table(f"{ns}.twin")
    mine, spark_made = ours.current_snapshot(), theirs.current_snapshot()
    assert mine.summary.operation.value == spark_made.summary.operation.value == "replace"
    assert len(mine.manifests(ours.io)) == len(spark_made.manifests(theirs.io)) == 1
    ours_summary, spark_summary = mine.summary.additional_properties, spark_made.summary.additional_properties
    # the catalog marks its own snapshots (what lets a writer's commit win against them); Spark's has no mark
    assert ours_summary.pop("catalog.maintenance-job") == "rewrite-manifests"
    # the same summary but Spark's engine keys, and entries-processed: Spark's action writes the
    # manifests itself and hands them to RewriteManifests (0 processed there); the catalog rewrites
    # entries as BaseRewriteManifests' clusterBy path does, and counts them
    engine = {"engine-name", "engine-version", "app-id", "iceberg-version"}
    assert set(ours_summary) == set(spark_summary) - engine
    assert {k: v for k, v in ours_summary.items() if k != "entries-processed"} == {
        k: v for k, v in spark_summary.items() if k not in engine | {"entries-processed"}
    }
    assert ours_summary["entries-processed"] == ours_summary["total-data-files"]

    # the live files: the same shape (sequence numbers, which append added each, record counts)
    def shape(table) -> list[tuple]:  # noqa: ANN001
        order = {s.snapshot_id: n for n, s in enumerate(table.metadata.snapshots)}
        return sorted(
            (order[sid], seq, fseq, content, count) for sid, seq, fseq, content, count in live_entries(table).values()
        )

    assert shape(ours) == shape(theirs)
    statuses = {e.status.name for m in mine.manifests(ours.io) for e in m.fetch_manifest_entry(ours.io)}
    assert statuses == {"EXISTING"}

    # Spark reads the rewritten table, now and as it was
    t = f"{lake}.{ns}.t"
    spark.sql(f"REFRESH TABLE {t}")
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t}")) == _ids(range(30))
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t} VERSION AS OF {before}")) == _ids(range(30))
    first = ours.metadata.snapshots[0].snapshot_id
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t} VERSION AS OF {first}")) == _ids(range(1))
    # and Spark writes on it: its append lands on the replace snapshot
    spark.sql(f"INSERT INTO {t} VALUES (123456, 'p9')")
    assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == sorted(
        [*_ids(range(30)), 123456]
    )


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_v3_rewrite_keeps_every_rows_row_id(care: Server, spark) -> None:  # noqa: ANN001
    """v3: the rewritten entries carry their files' first_row_id explicitly (as Java's reader assigns
    it), so every row keeps its _row_id and _last_updated_sequence_number; the new manifest takes a
    fresh first_row_id range in the list, as Java's V3 list writer gives it (added-rows), and the
    table's next-row-id moves by exactly that."""
    lake = register_catalog(spark, care)
    ns = f"mr_{uuid.uuid4().hex[:8]}"
    t = f"{lake}.{ns}.t"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        f"TBLPROPERTIES ('format-version' = '3', '{rewrite_manifests.MERGE_ENABLED}' = 'false')"
    )
    for i in range(12):
        spark.sql(f"INSERT INTO {t} VALUES ({i * 10}, 'p{i % 3}'), ({i * 10 + 1}, 'p{(i + 1) % 3}')")
    spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")  # see tests/test_v3.py
    try:
        query = f"SELECT id, _row_id, _last_updated_sequence_number FROM {t}"
        before = sorted(sql_rows(spark, query))
        next_row_id = care.catalog().load_table(f"{ns}.t").metadata.next_row_id
        [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"])
        assert task["state"] == "done" and task["result"]["manifests-replaced"] == 12, task
        spark.sql(f"REFRESH TABLE {t}")
        after = sorted(sql_rows(spark, query))
    finally:
        spark.conf.unset("spark.sql.iceberg.vectorization.enabled")
    assert after == before
    assert len({r[1] for r in after}) == len(after) == 24
    table = care.catalog().load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "replace"
    assert head.first_row_id == next_row_id and table.metadata.next_row_id == next_row_id + head.added_rows
    assert head.added_rows == 24  # the existing rows of the new manifest, as Java's V3 writer counts them


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_delete_manifests_are_rewritten_apart_from_data_manifests_as_spark_does(care: Server, spark) -> None:  # noqa: ANN001
    """A merge-on-read table (Spark's position deletes, v2) and its twin: the catalog's rewrite and
    Spark's rewrite_manifests leave the same data and delete manifests, the same live files with the
    same sequence numbers, and every engine reads the same rows (the deletes still apply: their data
    sequence numbers are kept)."""
    lake = register_catalog(spark, care)
    ns = f"mr_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    for name in ("t", "twin"):
        t = f"{lake}.{ns}.{name}"
        spark.sql(
            f"CREATE TABLE {t} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) TBLPROPERTIES "
            f"('format-version' = '2', 'write.delete.mode' = 'merge-on-read', "
            f"'{rewrite_manifests.MERGE_ENABLED}' = 'false')"
        )
        for i in range(6):
            spark.sql(f"INSERT INTO {t} VALUES ({i * 10}, 'p{i % 2}'), ({i * 10 + 1}, 'p{i % 2}')")
        for i in range(4):
            spark.sql(f"DELETE FROM {t} WHERE id = {i * 10 + 1}")
    [task] = run_care(care, ns, "t", kinds=["rewrite-manifests"])
    assert task["state"] == "done", task
    spark.sql(f"CALL {lake}.system.rewrite_manifests('{ns}.twin')").collect()

    catalog = care.catalog()
    ours, theirs = catalog.load_table(f"{ns}.t"), catalog.load_table(f"{ns}.twin")

    def contents(table) -> list[str]:  # noqa: ANN001
        return sorted(m.content.name for m in table.current_snapshot().manifests(table.io))

    assert contents(ours) == contents(theirs) == ["DATA", "DELETES"]
    assert task["result"]["manifests-replaced"] == 10 and task["result"]["manifests-created"] == 2, task

    def shape(table) -> list[tuple]:  # noqa: ANN001
        order = {s.snapshot_id: n for n, s in enumerate(table.metadata.snapshots)}
        return sorted(
            (order[sid], seq, fseq, content, count) for sid, seq, fseq, content, count in live_entries(table).values()
        )

    assert shape(ours) == shape(theirs)
    expected = sorted(i * 10 + k for i in range(6) for k in range(2) if not (k == 1 and i < 4))
    assert sorted(ours.scan().to_arrow()["id"].to_pylist()) == expected
    spark.sql(f"REFRESH TABLE {lake}.{ns}.t")
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {lake}.{ns}.t")) == expected
    duck = duckdb_attached(care)
    try:
        assert sorted(r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t").fetchall()) == expected
    finally:
        duck.close()
