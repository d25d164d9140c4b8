"""Data compaction by the catalog (``rewrite-data-files``), on both backends, with real clients.

Small files written by pyiceberg and Spark are rewritten per partition into fewer files; every row
reads the same in pyiceberg, DuckDB and Spark, now and by time travel; merge-on-read deletes are
applied and their delete files leave the table; v3 rows keep their ``_row_id``. A compaction whose
head moved lands on the new head when what it rewrote is untouched, and yields otherwise; writers
never fail because of it: appends are rebased over it, and a Spark MERGE/UPDATE/DELETE whose base is
older than it lands on that base (the compaction is rolled back).
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.transforms import IdentityTransform

from catalog.maintenance import compaction, compaction_plan
from tests.support import (
    PART_SCHEMA,
    PART_SPEC,
    Server,
    answered_409s,
    backends,
    care_server,
    duckdb_attached,
    part_batch,
    part_ids,
    part_table,
    register_catalog,
    run_care,
    run_job_racing,
    sql_rows,
    start_server,
    wait_task,
)


@pytest.fixture(scope="module", params=backends())
def care(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    srv = care_server(
        request.param,
        tmp_path_factory.mktemp(f"compaction-{request.param}"),
        services,
        CATALOG_MAINTENANCE_COMPACTION_QUIET_SECONDS="0",  # a test that wants the quiet period sets it on its table
    )
    yield srv
    srv.stop()


def _data_files(table) -> list[str]:  # noqa: ANN001
    return [t.file.file_path for t in table.scan().plan_files()]


def _compact(server: Server, ns: str, table: str = "t", **body: object) -> dict:
    [task] = run_care(server, ns, table, kinds=[compaction.KIND], **body)
    assert task["state"] == "done", task
    return task["result"]


def test_small_files_are_compacted_per_partition_and_read_the_same(care: Server) -> None:
    catalog, ns, table = part_table(care, "dc")
    for i in range(8):
        table.append(part_batch(i))
    table = catalog.load_table(f"{ns}.t")
    before = table.current_snapshot()
    assert len(_data_files(table)) == 16  # two partitions an append

    result = _compact(care, ns)
    assert result["engine"] == "in-process" and result["strategy"] == "binpack", result
    assert result["rewritten-data-files"] == 16 and result["added-data-files"] == 2, result
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "replace" and head.parent_snapshot_id == before.snapshot_id
    summary = head.summary.additional_properties
    assert summary["catalog.maintenance-job"] == "rewrite-data-files"
    assert summary["deleted-data-files"] == "16" and summary["added-data-files"] == "2"
    assert summary["total-records"] == before.summary.additional_properties["total-records"]
    assert summary["total-data-files"] == "2"
    files = _data_files(table)
    assert len(files) == 2 and all(f.startswith(table.location()) for f in files)
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids(range(8))
    # time travel reads the small files, still there
    assert sorted(table.scan(snapshot_id=before.snapshot_id).to_arrow()["id"].to_pylist()) == part_ids(range(8))
    # the new files keep the data sequence number of the snapshot the compaction started from
    for task in table.scan().plan_files():
        assert task.file.partition is not None
    entries = [e for m in head.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)]
    added = [e for e in entries if e.snapshot_id == head.snapshot_id]
    assert len(added) == 2 and {e.sequence_number for e in added} == {before.sequence_number}

    duck = duckdb_attached(care)
    try:
        got = sorted(r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t").fetchall())
    finally:
        duck.close()
    assert got == part_ids(range(8))

    # nothing more to do now; an append after it lands (no 409: nothing raced)
    assert _compact(care, ns)["rewritten-data-files"] == 0
    catalog.load_table(f"{ns}.t").append(part_batch(50))
    assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == part_ids([*range(8), 50])


def test_a_dry_run_says_what_it_would_rewrite_and_commits_nothing(care: Server) -> None:
    catalog, ns, table = part_table(care, "dc")
    for i in range(6):
        table.append(part_batch(i))
    head = catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id
    result = _compact(care, ns, **{"dry-run": True})
    assert result["dry-run"] is True and result["data-files-to-rewrite"] == 12 and result["groups"] == 2, result
    assert catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id == head


def test_few_small_files_are_left_alone_as_java_plans(care: Server) -> None:
    """Fewer than min-input-files (5) per partition, and little content: nothing to rewrite."""
    catalog, ns, table = part_table(care, "dc")
    for i in range(3):
        table.append(part_batch(i))
    result = _compact(care, ns)
    assert result["rewritten-data-files"] == 0, result
    assert catalog.load_table(f"{ns}.t").current_snapshot().summary.operation.value == "append"


def test_a_sorted_table_is_compacted_in_its_sort_order(care: Server) -> None:
    catalog, ns, table = part_table(care, "dc")
    with table.update_sort_order() as order:
        from pyiceberg.table.sorting import SortDirection

        order.asc("id", IdentityTransform())
        del SortDirection
    table = catalog.load_table(f"{ns}.t")
    for i in reversed(range(6)):
        table.append(part_batch(i))
    result = _compact(care, ns)
    assert result["strategy"] == "sort" and result["added-data-files"] == 2, result
    table = catalog.load_table(f"{ns}.t")
    for task in table.scan().plan_files():
        ids = table.io.new_input(task.file.file_path)
        import pyarrow.parquet as pq

        with ids.open() as f:
            column = pq.read_table(f)["id"].to_pylist()
        assert column == sorted(column)


def test_an_append_from_before_the_compaction_is_rebased_over_it_with_rebase_off(care: Server) -> None:
    """Rebase is off (the default): an append whose parent is older than the catalog's compaction
    lands anyway; the compaction is the only thing between them."""
    catalog, ns, table = part_table(care, "dc")
    for i in range(6):
        table.append(part_batch(i))
    stale = catalog.load_table(f"{ns}.t")  # a writer that read the table before the compaction
    assert _compact(care, ns)["rewritten-data-files"] == 12
    stale.append(part_batch(77))  # asserts main is at its parent: the server rebases it
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "append"
    assert table.snapshot_by_id(head.parent_snapshot_id).summary.operation.value == "replace"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids([*range(6), 77])
    metrics = requests.get(f"{care.url}/metrics", timeout=10).text
    assert 'catalog_writer_commits_met_maintenance_total{action="rebased"}' in metrics


def test_appends_on_top_of_a_compaction_are_rebased_though_they_drop_its_deleted_only_manifests(
    care: Server,
) -> None:
    """A compaction leaves manifests that hold only DELETED entries; a writer whose parent is that
    snapshot leaves them out of its list (pyiceberg and Java do). With append rebase on, such an
    append is still rebased when another append landed first (found by the bench: 409s before)."""
    catalog, ns, table = part_table(care, "dc", **{"catalog.append-rebase.enabled": "true"})
    for i in range(6):
        table.append(part_batch(i))
    assert _compact(care, ns)["rewritten-data-files"] == 12
    first, second = catalog.load_table(f"{ns}.t"), catalog.load_table(f"{ns}.t")
    first.append(part_batch(60))
    before = answered_409s(care.url)
    second.append(part_batch(61))  # its parent is the compaction; main moved on: rebased, not a 409
    assert answered_409s(care.url) == before  # (pyiceberg would retry a 409 by itself: counted on the server)
    table = catalog.load_table(f"{ns}.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids([*range(6), 60, 61])
    assert [s.summary.operation.value for s in table.metadata.snapshots][-3:] == ["replace", "append", "append"]


def test_a_row_level_write_from_before_the_compaction_lands_and_the_compaction_is_rolled_back(care: Server) -> None:
    """pyiceberg's copy-on-write delete (an ``overwrite`` that removes a file the compaction also
    rewrote) planned before the compaction landed: without the rollback its commit is a 409 and its
    retry fails validation; the catalog lands it on its base and removes the compaction."""
    catalog, ns, table = part_table(care, "dc")
    for i in range(6):
        table.append(part_batch(i))
    table = catalog.load_table(f"{ns}.t")
    base = table.current_snapshot().snapshot_id
    tx = table.transaction()
    tx.delete("id = 31")
    result = _compact(care, ns)
    assert result["rewritten-data-files"] == 12, result
    tx.commit_transaction()
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value in ("overwrite", "delete")
    assert head.parent_snapshot_id == base
    assert result["snapshot-id"] not in {s.snapshot_id for s in table.metadata.snapshots}
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [i for i in part_ids(range(6)) if i != 31]
    metrics = requests.get(f"{care.url}/metrics", timeout=10).text
    assert 'catalog_writer_commits_met_maintenance_total{action="rolled-back"}' in metrics
    # the next compaction compacts again, on the writer's result
    assert _compact(care, ns)["rewritten-data-files"] >= 10
    assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == [
        i for i in part_ids(range(6)) if i != 31
    ]


def test_a_client_cannot_mark_its_snapshot_as_the_catalogs(care: Server) -> None:
    """Only the catalog's own snapshots may be rolled back for a writer: a client that marks its
    snapshot as maintenance is refused (400), so nobody's data can be made to look disposable."""
    catalog, ns, table = part_table(care, "dc")
    table.append(part_batch(1))
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    forged = {
        "snapshot-id": 4242,
        "parent-snapshot-id": head.snapshot_id,
        "sequence-number": head.sequence_number + 1,
        "timestamp-ms": head.timestamp_ms + 1,
        "manifest-list": head.manifest_list,
        "summary": {"operation": "replace", "catalog.maintenance-job": "rewrite-data-files"},
        "schema-id": 0,
    }
    body = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head.snapshot_id}],
        "updates": [
            {"action": "add-snapshot", "snapshot": forged},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 4242},
        ],
    }
    resp = requests.post(f"{care.url}/v1/namespaces/{ns}/tables/t", json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    assert "catalog.maintenance-job" in resp.json()["error"]["message"]
    assert catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id == head.snapshot_id


def test_a_compaction_whose_head_moved_by_an_append_lands_on_the_new_head(two_processes) -> None:  # noqa: ANN001
    srv, local = two_processes
    catalog, ns, table = part_table(srv, "dc")
    for i in range(6):
        table.append(part_batch(i))
    result = run_job_racing(
        local,
        ns,
        compaction.Compactor(local.storage, local.engine, 2**30, 0),
        lambda: catalog.load_table(f"{ns}.t").append(part_batch(99)),
    )
    assert result["landed-on-moved-head"] == 1 and result["replanned"] == 0, result
    table = catalog.load_table(f"{ns}.t")
    head = table.current_snapshot()
    assert head.summary.operation.value == "replace"
    assert table.snapshot_by_id(head.parent_snapshot_id).summary.operation.value == "append"  # the writer's
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids([*range(6), 99])
    assert len(_data_files(table)) == 4  # the two compacted files and the append's two


def test_a_compaction_that_meets_a_row_level_writer_yields_and_leaves_nothing(two_processes) -> None:  # noqa: ANN001
    """A writer's delete lands while the compaction runs: the compaction does not land (the writer
    may write again soon), deletes every file it wrote, and the table is the writer's."""
    srv, local = two_processes
    catalog, ns, table = part_table(srv, "dc")
    for i in range(6):
        table.append(part_batch(i))
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    files_before = {str(p) for p in data_dir.rglob("*.parquet")}
    result = run_job_racing(
        local,
        ns,
        compaction.Compactor(local.storage, local.engine, 2**30, 0),
        lambda: catalog.load_table(f"{ns}.t").delete("id = 31"),
    )
    assert "row-level writer" in result["yielded"], result
    table = catalog.load_table(f"{ns}.t")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [i for i in part_ids(range(6)) if i != 31]
    ops = [s.summary.operation.value for s in table.metadata.snapshots]
    assert ops[:6] == ["append"] * 6 and ops[6:] in (["overwrite"], ["delete"])  # the writer's, nothing after
    new = {str(p) for p in data_dir.rglob("*.parquet")} - files_before
    live = {f.removeprefix("file://") for f in _data_files(table)}
    assert new <= live, new - live  # the writer's files only: the compaction's were deleted


def test_a_compaction_whose_files_another_compaction_took_plans_again(two_processes) -> None:  # noqa: ANN001
    """Another compaction lands first: what this one rewrote is gone from the head (Java's
    ``RewriteFiles`` validation), so it deletes its files and plans again on the new head."""
    srv, local = two_processes
    catalog, ns, table = part_table(srv, "dc")
    for i in range(6):
        table.append(part_batch(i))
    other = compaction.Compactor(local.storage, local.engine, 2**30, 0)

    def compact_first() -> None:
        entry = local.pointers.get_entry((ns,), "t")
        other.run(entry, local.files.read(entry.metadata_location), False, lambda: None)

    result = run_job_racing(local, ns, compaction.Compactor(local.storage, local.engine, 2**30, 0), compact_first)
    assert result["replanned"] == 1 and result["rewritten-data-files"] == 0, result  # nothing left to do
    table = catalog.load_table(f"{ns}.t")
    assert [s.summary.operation.value for s in table.metadata.snapshots][6:] == ["replace"]
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids(range(6))
    data_dir = Path(table.location().removeprefix("file://")) / "data"
    live = {f.removeprefix("file://") for f in _data_files(table)}
    assert all(_referenced_anywhere(table, f"file://{p}") for p in data_dir.rglob("*.parquet")), live


def _referenced_anywhere(table, path: str) -> bool:  # noqa: ANN001
    for snapshot in table.metadata.snapshots:
        for m in snapshot.manifests(table.io):
            if any(e.data_file.file_path == path for e in m.fetch_manifest_entry(table.io, discard_deleted=False)):
                return True
    return False


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize("version", [2, 3])
def test_merge_on_read_deletes_are_applied_and_agree_with_sparks_rewrite_data_files(
    care: Server,
    spark,
    version: int,  # noqa: ANN001
) -> None:
    """Spark's merge-on-read deletes (v2 position delete files, v3 deletion vectors) on small files:
    the catalog's compaction and Spark's ``rewrite_data_files`` on a twin leave the same rows and the
    same number of data files, and the delete files go (every row they delete is applied). v3: every
    row keeps its ``_row_id`` and ``_last_updated_sequence_number``."""
    lake = register_catalog(spark, care)
    ns = f"dc_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    for name in ("t", "twin"):
        t = f"{lake}.{ns}.{name}"
        spark.sql(
            f"CREATE TABLE {t} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) TBLPROPERTIES "
            f"('format-version' = '{version}', 'write.delete.mode' = 'merge-on-read', "
            "'write.update.mode' = 'merge-on-read')"
        )
        for i in range(6):
            spark.sql(f"INSERT INTO {t} VALUES ({i * 10}, 'p{i % 2}'), ({i * 10 + 1}, 'p{i % 2}')")
        for i in range(3):
            spark.sql(f"DELETE FROM {t} WHERE id = {i * 10 + 1}")
        spark.sql(f"UPDATE {t} SET id = id + 1000 WHERE id = 50")
    t = f"{lake}.{ns}.t"
    spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")  # _row_id reads (tests/test_v3.py)
    try:
        lineage = f"SELECT id, _row_id, _last_updated_sequence_number FROM {t}" if version >= 3 else None
        before = sorted(sql_rows(spark, lineage)) if lineage else None
        result = _compact(care, ns)
        spark.sql(
            f"CALL {lake}.system.rewrite_data_files(table => '{ns}.twin', options => map('min-input-files', '2'))"
        )
        spark.sql(f"REFRESH TABLE {t}")
        if lineage:
            assert sorted(sql_rows(spark, lineage)) == before
            assert len({r[1] for r in before}) == len(before)
    finally:
        spark.conf.unset("spark.sql.iceberg.vectorization.enabled")
    assert result["removed-delete-files"] >= 1, result
    expected = sorted(
        [i * 10 + k for i in range(6) for k in range(2) if not (k == 1 and i < 3) and i * 10 + k != 50] + [1050]
    )
    catalog = care.catalog()
    ours, theirs = catalog.load_table(f"{ns}.t"), catalog.load_table(f"{ns}.twin")
    assert sorted(ours.scan().to_arrow()["id"].to_pylist()) == expected
    assert sorted(theirs.scan().to_arrow()["id"].to_pylist()) == expected
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t}")) == expected
    duck = duckdb_attached(care)
    try:
        assert sorted(r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t").fetchall()) == expected
    finally:
        duck.close()
    tasks = list(ours.scan().plan_files())
    assert len(tasks) == len(list(theirs.scan().plan_files())) == 2  # one file per partition
    assert all(not task.delete_files for task in tasks)  # no delete applies any more


class _Compacting:
    """Compaction run again and again on one table (through the management API, as an operator or
    the scheduler would) until stopped: the writers under test never wait for it."""

    def __init__(self, server: Server, ns: str) -> None:
        self.server, self.ns = server, ns
        self.results: list[dict] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Compacting:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(300)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                [task] = run_care(self.server, self.ns, "t", kinds=[compaction.KIND])
                assert task["state"] == "done", task
                self.results.append(task["result"])
                self._stop.wait(0.3)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                self.errors.append(e)
                return

    def wait_landed(self, timeout: float = 180) -> None:
        """Until one run landed (the writers may all have finished before the first run could)."""
        deadline = time.monotonic() + timeout
        while not self.landed and not self.errors and time.monotonic() < deadline:
            time.sleep(0.2)

    @property
    def landed(self) -> int:
        return sum(1 for r in self.results if r.get("snapshot-id"))

    @property
    def deferred(self) -> int:
        return sum(1 for r in self.results if r.get("deferred"))


def test_an_appender_never_fails_while_compaction_runs_continuously(care: Server) -> None:
    """pyiceberg fast appends, rebase off (the default), while the catalog compacts the same table
    over and over: every append lands at its first try and every row is there once."""
    catalog, ns, table = part_table(care, "dc")
    table.append(part_batch(0))  # the branch exists: no append asserts that it does not
    before = answered_409s(care.url)
    with _Compacting(care, ns) as compacting:
        for i in range(1, 40):
            catalog.load_table(f"{ns}.t").append(part_batch(i))
        compacting.wait_landed()
    assert answered_409s(care.url) == before  # not one 409 (pyiceberg would retry one by itself: counted on the server)
    assert not compacting.errors, compacting.errors
    assert compacting.landed >= 1, compacting.results
    assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == part_ids(range(40))


@pytest.mark.spark
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("version", "mode"), [(2, "copy-on-write"), (2, "merge-on-read"), (3, "merge-on-read")])
def test_spark_writers_never_fail_while_compaction_runs_continuously(
    care: Server,
    spark,
    version: int,
    mode: str,  # noqa: ANN001
) -> None:
    """Spark on defaults (its own commit retries) while the catalog compacts the table over and over.
    INSERTs (appends) land whatever the compaction does: it lands between them. UPDATE, DELETE and
    MERGE (row-level, validated by Spark against the table as it is when they commit) keep the
    compaction off while they keep coming (the quiet period), and it lands once they pause. No
    statement fails; the table holds exactly the rows the statements imply, in Spark, pyiceberg and
    DuckDB; v3 row ids stay unique."""
    lake = register_catalog(spark, care)
    ns = f"dc_{uuid.uuid4().hex[:8]}"
    t = f"{lake}.{ns}.t"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    modes = ", ".join(f"'write.{op}.mode' = '{mode}'" for op in ("delete", "update", "merge"))
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, part STRING) USING iceberg PARTITIONED BY (part) "
        f"TBLPROPERTIES ('format-version' = '{version}', {modes}, '{compaction_plan.QUIET}' = '0')"
    )
    expected: dict[int, str] = {}
    with _Compacting(care, ns) as appending:
        for i in range(12):
            spark.sql(f"INSERT INTO {t} VALUES ({i * 10}, 'p{i % 2}'), ({i * 10 + 1}, 'p{i % 2}')")
            expected.update({i * 10: f"p{i % 2}", i * 10 + 1: f"p{i % 2}"})
        appending.wait_landed()
    assert not appending.errors, appending.errors
    assert appending.landed >= 1, appending.results  # compactions landed between the INSERTs
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('{compaction_plan.QUIET}' = '120')")
    spark.sql(f"DELETE FROM {t} WHERE id = 1")  # the first row-level write: the quiet period starts
    expected.pop(1)
    with _Compacting(care, ns) as compacting:
        for round_ in range(1, 4):
            base = 1000 * round_
            spark.sql(f"UPDATE {t} SET id = id + 100000 WHERE id = {round_ * 10}")
            expected[round_ * 10 + 100000] = expected.pop(round_ * 10)
            spark.sql(f"DELETE FROM {t} WHERE id = {round_ * 10 + 1}")
            expected.pop(round_ * 10 + 1)
            spark.sql(
                f"MERGE INTO {t} AS target USING (SELECT {base} AS id, 'p9' AS part UNION ALL "
                f"SELECT 20 AS id, 'p7' AS part) AS source ON target.id = source.id "
                "WHEN MATCHED THEN UPDATE SET part = source.part WHEN NOT MATCHED THEN INSERT *"
            )
            expected[base] = "p9"
            expected[20] = "p7"  # matched: updated; once UPDATE moved it away: inserted again
    assert not compacting.errors, compacting.errors
    assert compacting.landed == 0 and compacting.deferred >= 1, compacting.results
    # the writers paused: with the quiet period over, the compaction lands
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('{compaction_plan.QUIET}' = '0')")
    for k in range(3):
        spark.sql(f"INSERT INTO {t} VALUES ({50000 + k}, 'p9')")
        expected[50000 + k] = "p9"
    result = _compact(care, ns)
    assert "deferred" not in result and result["rewritten-data-files"] >= 5, result
    want = sorted(expected.items())
    spark.sql(f"REFRESH TABLE {t}")
    assert sorted(sql_rows(spark, f"SELECT id, part FROM {t}")) == want
    table = care.catalog().load_table(f"{ns}.t")
    got = table.scan().to_arrow()
    assert sorted(zip(got["id"].to_pylist(), got["part"].to_pylist(), strict=True)) == want
    duck = duckdb_attached(care)
    try:
        assert sorted(duck.execute(f"SELECT id, part FROM lake.{ns}.t").fetchall()) == want
    finally:
        duck.close()
    if version >= 3:
        spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")
        try:
            ids = [r[0] for r in sql_rows(spark, f"SELECT _row_id FROM {t}")]
        finally:
            spark.conf.unset("spark.sql.iceberg.vectorization.enabled")
        assert len(set(ids)) == len(ids) == len(want)


PARTITIONS = 300  # enough groups that the worker is caught after writing some files, before its commit


def _five_files_a_partition(server: Server, partitions: int):  # noqa: ANN202
    """(catalog, ns, table as it is now, the ids written): five appends of a row in each partition."""
    catalog, ns, table = part_table(server, "dc", **{compaction_plan.QUIET: "0"})
    rows = []
    for i in range(5):
        batch = pa.table(
            {
                "id": pa.array([i * 1000 + p for p in range(partitions)], pa.int64()),
                "part": pa.array([f"p{p}" for p in range(partitions)], pa.string()),
            }
        )
        table.append(batch)
        rows.extend(batch["id"].to_pylist())
    return catalog, ns, catalog.load_table(f"{ns}.t"), rows


def _enqueued(server: Server, ns: str, kind: str) -> dict:
    """The task of ``kind`` queued on ``ns.t`` through the management API (not waited for)."""
    resp = requests.post(f"{server.url}/management/v1/maintenance/tables/{ns}/t", json={"kinds": [kind]}, timeout=30)
    assert resp.status_code == 202, resp.text
    return resp.json()["tasks"][0]


def _orphans_removed(server: Server, ns: str, leftovers: set[str]) -> None:
    """Orphan removal on ``ns.t`` by a worker whose orphan age is under a second: ``leftovers`` went."""
    time.sleep(1)  # older than the orphan age given to the worker
    orphans = wait_task(server.url, _enqueued(server, ns, "remove-orphans")["id"], timeout=120)
    assert orphans["state"] == "done" and orphans["result"]["deleted-files"] >= len(leftovers), orphans
    assert not any(os.path.exists(p) for p in leftovers)


@pytest.mark.slow
def test_a_compaction_killed_mid_rewrite_loses_nothing_and_its_files_are_orphans(tmp_path: Path) -> None:
    """kill -9 of a dedicated worker process while it writes the compacted files: the table is as it
    was, the task is claimed again and lands, and the first attempt's files, referenced by nothing,
    are taken by orphan removal (the only files it deletes)."""
    import signal

    from tests.support import start_worker

    srv = start_server(tmp_path, "sqlite", {"CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600"})  # runs no task
    workers = []
    try:
        catalog, ns, table, rows = _five_files_a_partition(srv, PARTITIONS)
        head = table.current_snapshot().snapshot_id
        data = Path(table.location().removeprefix("file://")) / "data"
        referenced = {str(p) for p in data.rglob("*.parquet")}
        assert len(referenced) == 5 * PARTITIONS
        task = _enqueued(srv, ns, compaction.KIND)
        workers.append(start_worker(srv))
        deadline = time.monotonic() + 120
        while len(list(data.rglob("*.parquet"))) < len(referenced) + 20:
            assert time.monotonic() < deadline, "the worker never started writing"
            time.sleep(0.005)
        os.kill(workers[0].pid, signal.SIGKILL)
        workers[0].wait(10)
        table = catalog.load_table(f"{ns}.t")
        assert table.current_snapshot().snapshot_id == head, "caught after its commit: raise PARTITIONS"
        leftovers = {str(p) for p in data.rglob("*.parquet")} - referenced
        assert leftovers and all(os.path.exists(p) for p in referenced)
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(rows)

        workers.append(start_worker(srv, CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS="0.0001"))
        done = wait_task(srv.url, task["id"], timeout=300)
        assert done["state"] == "done" and done["attempts"] == 2, done
        assert done["result"]["rewritten-data-files"] == 5 * PARTITIONS, done
        table = catalog.load_table(f"{ns}.t")
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(rows)
        assert all(os.path.exists(p) for p in leftovers)  # nobody deleted them yet: orphans
        _orphans_removed(srv, ns, leftovers)
        live = {t.file.file_path.removeprefix("file://") for t in table.scan().plan_files()}
        assert all(os.path.exists(p) for p in live) and all(os.path.exists(p) for p in referenced)
        assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == sorted(rows)
    finally:
        for worker in workers:
            worker.kill()
            worker.wait(10)
        srv.stop()


def test_the_spark_identifier_cannot_be_broken_out_of() -> None:
    from catalog.maintenance.spark import identifier

    assert identifier(["db", "t"]) == "'`db`.`t`'"
    assert identifier(["a`b", "x'y\\z"]) == "'`a``b`.`x\\'y\\\\z`'"


@pytest.mark.spark
@pytest.mark.timeout(900)
def test_work_beyond_the_in_process_bound_is_compacted_by_spark(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """With a Spark configured (``local[1]`` here) and a bound smaller than the work, the catalog
    hands the table to Iceberg's ``rewrite_data_files`` on that Spark: the task says which engine
    ran, the rows are the same, the small files are gone from the head."""
    import json

    from tests.support import skip_or_fail, spark_unavailable

    if missing := spark_unavailable():
        skip_or_fail(f"Spark cannot run: {missing}")
    backend = backends()[-1]
    services = request.getfixturevalue("services") if backend == "postgres-s3" else None
    srv = care_server(
        backend,
        tmp_path,
        services,
        CATALOG_MAINTENANCE_COMPACTION_QUIET_SECONDS="0",
        CATALOG_MAINTENANCE_COMPACTION_MAX_BYTES="1024",
        CATALOG_MAINTENANCE_COMPACTION_SPARK="local[1]",
        CATALOG_MAINTENANCE_COMPACTION_SPARK_CONF=json.dumps(
            {"spark.jars": os.environ["ICEBERG_SPARK_JARS"], "spark.ui.enabled": "false"}
        ),
    )
    try:
        catalog, ns, table = part_table(srv, "dc")
        for i in range(6):
            table.append(part_batch(i))
        result = _compact(srv, ns)
        assert result["engine"] == "spark" and result["bytes-to-rewrite"] > 1024, result
        assert result["rewritten-data-files-count"] == 12 and result["added-data-files-count"] == 2, result
        table = catalog.load_table(f"{ns}.t")
        assert table.current_snapshot().summary.operation.value == "replace"
        assert len(_data_files(table)) == 2
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == part_ids(range(6))
    finally:
        srv.stop()


# A file group (a Spark job) each, 5 at a time: seconds between Spark's first file and its commit.
SPARK_PARTITIONS = 40


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_spark_compaction_killed_mid_rewrite_leaves_the_table_whole(tmp_path: Path) -> None:
    """kill -9 of a dedicated worker and its Spark JVM (one process group: what a container's kill
    does) while Spark's ``rewrite_data_files`` writes its files: the table is as it was, every row
    once, every file it referenced still there; the task's lease runs out and a new worker's Spark
    compacts; orphan removal then takes what the killed attempt wrote and nothing else."""
    import json

    from tests.support import group_members, kill_group, skip_or_fail, spark_unavailable, start_worker

    if missing := spark_unavailable():
        skip_or_fail(f"Spark cannot run: {missing}")
    conf = {
        "spark.jars": os.environ["ICEBERG_SPARK_JARS"],
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.local.dir": str(tmp_path / "spark-local"),  # what a killed JVM leaves behind stays here
    }
    srv = start_server(
        tmp_path,
        "sqlite",
        {
            "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600",  # runs no task: the workers below do
            "CATALOG_MAINTENANCE_COMPACTION_QUIET_SECONDS": "0",
            "CATALOG_MAINTENANCE_COMPACTION_MAX_BYTES": "1024",  # beyond it: Spark
            "CATALOG_MAINTENANCE_COMPACTION_SPARK": "local[2]",
            "CATALOG_MAINTENANCE_COMPACTION_SPARK_CONF": json.dumps(conf),
        },
    )
    lease = {"CATALOG_MAINTENANCE_LEASE_SECONDS": "5"}
    workers = []
    try:
        catalog, ns, table, rows = _five_files_a_partition(srv, SPARK_PARTITIONS)
        head = table.current_snapshot().snapshot_id
        warehouse = Path(srv.env["CATALOG_WAREHOUSE"])
        location = Path(table.location().removeprefix("file://"))
        data = location / "data"
        before = _files(warehouse)
        referenced = _referenced(table)
        assert referenced == before, "pyiceberg left a file its table does not reference"
        assert len(_data_files(table)) == 5 * SPARK_PARTITIONS

        task = _enqueued(srv, ns, compaction.KIND)
        workers.append(start_worker(srv, own_group=True, **lease))
        deadline = time.monotonic() + 120
        while not {str(p) for p in data.rglob("*.parquet")} - before:  # Spark's first rewritten file
            assert workers[0].poll() is None, "the worker exited"
            assert time.monotonic() < deadline, "Spark never started writing"
            time.sleep(0.01)
        assert len(group_members(workers[0].pid)) > 1  # the worker and its Spark JVM
        kill_group(workers[0])  # the worker and its JVM, reaped: nothing of them runs on

        table = catalog.load_table(f"{ns}.t")
        assert table.current_snapshot().snapshot_id == head, "caught after Spark's commit: raise SPARK_PARTITIONS"
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(rows)  # every row, once
        assert all(os.path.exists(p) for p in before)
        leftovers = _files(warehouse) - before
        assert leftovers and all(p.startswith(f"{location}/") for p in leftovers), leftovers
        stuck = requests.get(f"{srv.url}/management/v1/maintenance/tasks/{task['id']}", timeout=30).json()
        assert stuck["state"] == "running" and stuck["attempts"] == 1, stuck  # until its lease runs out

        workers.append(start_worker(srv, own_group=True, CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS="0.0001", **lease))
        done = wait_task(srv.url, task["id"], timeout=180)
        assert done["state"] == "done" and done["attempts"] == 2, done
        result = done["result"]
        assert result["engine"] == "spark" and result["data-files-before"] == 5 * SPARK_PARTITIONS, result
        assert result["rewritten-data-files-count"] == 5 * SPARK_PARTITIONS, result
        assert result["added-data-files-count"] == SPARK_PARTITIONS, result
        table = catalog.load_table(f"{ns}.t")
        assert table.current_snapshot().summary.operation.value == "replace"
        assert len(_data_files(table)) == SPARK_PARTITIONS
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(rows)
        assert all(os.path.exists(p) for p in leftovers)  # nobody deleted them yet: orphans

        _orphans_removed(srv, ns, leftovers)
        table = catalog.load_table(f"{ns}.t")
        referenced = _referenced(table)
        assert before <= referenced  # the table's history still references every file it had
        assert _files(warehouse) == referenced  # the killed attempt's files gone, every referenced file there
        assert sorted(table.scan().to_arrow()["id"].to_pylist()) == sorted(rows)
    finally:
        for worker in workers:
            kill_group(worker)
        srv.stop()


def _files(root: Path) -> set[str]:
    return {str(p) for p in root.rglob("*") if p.is_file()}


def _referenced(table) -> set[str]:  # noqa: ANN001
    """Every file the table's metadata references (its metadata files, and every snapshot's list,
    manifests and data and delete files), as local paths (Spark writes ``file:/a``, pyiceberg ``file:///a``)."""
    meta = table.metadata
    found = {table.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    for snapshot in meta.snapshots:
        found.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            found.add(manifest.manifest_path)
            found.update(e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False))
    return {p.removeprefix("file://") if p.startswith("file://") else p.removeprefix("file:") for p in found}


# -- the pure rules, case by case ------------------------------------------------------------------


def _meta(*snapshots: dict, refs: dict | None = None, version: int = 2) -> dict:
    head = snapshots[-1]["snapshot-id"]
    return {
        "format-version": version,
        "table-uuid": "u",
        "location": "file:///w/t",
        "last-sequence-number": max(s.get("sequence-number", 0) for s in snapshots),
        "next-row-id": 1000,
        "snapshots": list(snapshots),
        "refs": refs or {"main": {"type": "branch", "snapshot-id": head}},
        "properties": {},
    }


def _snap(sid: int, parent: int | None, seq: int, op: str, ts: int = 0, catalog: bool = False) -> dict:
    summary = {"operation": op, **({"catalog.maintenance-job": "rewrite-data-files"} if catalog else {})}
    return {"snapshot-id": sid, "parent-snapshot-id": parent, "sequence-number": seq, "timestamp-ms": ts,
            "summary": summary}  # fmt: skip


def _writer_commit(parent: int, seq: int, op: str = "overwrite") -> tuple[list, list]:
    snapshot = {"snapshot-id": 99, "parent-snapshot-id": parent, "sequence-number": seq, "timestamp-ms": 5,
                "manifest-list": "file:///w/t/metadata/snap-99.avro", "summary": {"operation": op}}  # fmt: skip
    requirements = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}]
    updates = [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 99},
    ]
    return requirements, updates


def test_rollback_only_removes_the_catalogs_own_snapshots() -> None:
    from catalog.commit import rollback

    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True))
    requirements, updates = _writer_commit(1, 2)
    rolled = rollback.rollback(requirements, updates, base)
    assert rolled is not None and rolled.removed == [2]
    assert rolled.base["last-sequence-number"] == 1
    assert rolled.updates[0] == {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}
    assert rolled.updates[1] == {"action": "remove-snapshots", "snapshot-ids": [2]}
    # a writer's own snapshot in between: never rolled back
    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True), _snap(3, 2, 3, "append"))
    assert rollback.rollback(*_writer_commit(1, 2), base) is None
    # a tag holds the compaction: not the writer's to remove
    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True))
    base["refs"]["keep"] = {"type": "tag", "snapshot-id": 2}
    assert rollback.rollback(*_writer_commit(1, 2), base) is None
    # another branch took a later sequence number: the writer's would not be the newest
    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True), _snap(3, 1, 3, "append"))
    base["refs"] = {"main": {"type": "branch", "snapshot-id": 2}, "b": {"type": "branch", "snapshot-id": 3}}
    assert rollback.rollback(*_writer_commit(1, 2), base) is None
    # the branch did not move: a 409 about something else
    base = _meta(_snap(1, None, 1, "append"))
    assert rollback.rollback(*_writer_commit(1, 2), base) is None


def test_catalog_made_follows_the_chain_back_to_the_parent() -> None:
    from catalog.commit.rollback import MAX_DISTANCE, catalog_made

    ours = [_snap(2, 1, 2, "replace", catalog=True), _snap(4, 2, 4, "replace", catalog=True)]
    other_branch = _snap(3, 1, 3, "append")  # committed in between on another branch: skipped
    snapshots = [_snap(1, None, 1, "append"), ours[0], other_branch, ours[1]]
    assert catalog_made(snapshots, 4, 1) == [ours[1], ours[0]]
    assert catalog_made(snapshots, 4, 2) == [ours[1]]
    assert catalog_made(snapshots, 1, 1) is None  # the branch did not move
    assert catalog_made(snapshots, 3, 1) is None  # a writer's snapshot
    assert catalog_made(snapshots, 4, 99) is None  # the parent is not on the chain
    assert catalog_made(snapshots, 77, 1) is None  # no such head
    broken = [_snap(1, None, 1, "append"), _snap(2, None, 2, "replace", catalog=True)]
    assert catalog_made(broken, 2, 1) is None  # a chain without its parent link
    far = [_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True)]
    far += [_snap(10 + i, None, 3 + i, "append") for i in range(MAX_DISTANCE)]
    far.append(_snap(5, 2, 9, "replace", catalog=True))
    assert catalog_made(far, 5, 2) == [far[-1]]
    assert catalog_made(far, 5, 1) is None  # its parent lies further back than MAX_DISTANCE


def test_an_append_is_rebased_over_the_catalogs_snapshots_with_rebase_off() -> None:
    from catalog.commit import rebasable

    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "replace", catalog=True))
    requirements, updates = _writer_commit(1, 2, op="append")
    found = rebasable.candidate(requirements, updates, base, default=False)
    assert found is not None and found.over_maintenance
    base = _meta(_snap(1, None, 1, "append"), _snap(2, 1, 2, "append"))  # a writer moved it: rebase is off
    assert rebasable.candidate(requirements, updates, base, default=False) is None


def test_compaction_is_deferred_while_row_level_writes_are_recent() -> None:
    now = 1_000_000
    quiet = 300_000
    recent = _meta(_snap(1, None, 1, "append", ts=now - 400_000), _snap(2, 1, 2, "overwrite", ts=now - 10_000))
    assert "row-level commit" in compaction_plan.deferred(recent, now, quiet)
    assert compaction_plan.deferred(recent, now, 0) == ""
    old = _meta(_snap(1, None, 1, "overwrite", ts=now - 400_000), _snap(2, 1, 2, "append", ts=now - 10_000))
    assert compaction_plan.deferred(old, now, quiet) == ""
    ours = _meta(_snap(1, None, 1, "append", ts=now - 400_000), _snap(2, 1, 2, "replace", ts=now - 1, catalog=True))
    assert compaction_plan.deferred(ours, now, quiet) == ""  # the catalog's own replace is not a writer's
    assert compaction_plan.quiet_ms({"properties": {compaction_plan.QUIET: "7"}}, 300) == 7000
    assert compaction_plan.quiet_ms({"properties": {compaction_plan.QUIET: "x"}}, 300) == 300_000


def test_a_hostile_data_path_does_not_send_compacted_files_into_another_tables_location(care: Server) -> None:
    """``write.data.path`` may name any free place in the warehouse (clients write their files
    there), never another table's (409: ``test_ownership.py``); the catalog's own files go under the
    table's own location, not into the data path, which a client may have pointed anywhere."""
    catalog, ns, victim = part_table(care, "dc")
    victim.append(part_batch(0))
    victim = catalog.load_table(f"{ns}.t")
    with pytest.raises(TableAlreadyExistsError, match="write.data.path overlaps"):
        catalog.create_table(
            f"{ns}.h",
            PART_SCHEMA,
            partition_spec=PART_SPEC,
            properties={"write.data.path": victim.location() + "/data"},
        )
    victim_data = victim.location().rstrip("/") + "-beside/data"  # next to it: free, so allowed
    hostile = catalog.create_table(
        f"{ns}.h", PART_SCHEMA, partition_spec=PART_SPEC, properties={"write.data.path": victim_data}
    )
    for i in range(6):
        hostile.append(part_batch(i))
    if care.backend == "postgres-s3":
        s3 = care.s3  # type: ignore[attr-defined]
        bucket, prefix = victim_data.removeprefix("s3://").split("/", 1)
        listing = s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
        before = {f"s3://{bucket}/{o['Key']}" for o in listing}
    else:
        before = {str(p) for p in Path(victim_data.removeprefix("file://")).rglob("*")}
    result = _compact(care, ns, "h")
    assert result["rewritten-data-files"] == 12, result
    hostile = catalog.load_table(f"{ns}.h")
    added = [f for f in _data_files(hostile) if f not in before]
    assert len(added) == 2 and all(f.startswith(hostile.location().rstrip("/") + "/data/") for f in added), added
    if care.backend == "postgres-s3":
        listing = s3.client().list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])
        after = {f"s3://{bucket}/{o['Key']}" for o in listing}
    else:
        after = {str(p) for p in Path(victim_data.removeprefix("file://")).rglob("*")}
    assert after == before  # nothing new in the other table's directory
    assert sorted(hostile.scan().to_arrow()["id"].to_pylist()) == part_ids(range(6))
