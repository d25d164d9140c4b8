"""Data compaction by the catalog (``rewrite-data-files``), on both backends, with real clients.

Small files written by pyiceberg and Spark are rewritten per partition into fewer files; every row
reads the same in pyiceberg, DuckDB and Spark, now and by time travel; merge-on-read deletes are
applied and their delete files leave the table; v3 rows keep their ``_row_id``. A compaction whose
head moved lands on the new head when what it rewrote is untouched, and yields otherwise; writers
never fail because of it: appends are rebased over it, and a Spark MERGE/UPDATE/DELETE whose base is
older than it lands on that base (the compaction is rolled back).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from catalog.maintenance import compaction
from tests.support import (
    Server,
    backends,
    care_server,
    duckdb_attached,
    register_catalog,
    run_care,
    sql_rows,
    start_server,
)

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "part", StringType(), required=False))
SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))


@pytest.fixture(scope="module", params=backends())
def care(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    srv = care_server(request.param, tmp_path_factory.mktemp(f"compaction-{request.param}"), services)
    yield srv
    srv.stop()


def _batch(i: int, n: int = 3) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([i * 10 + k for k in range(n)], pa.int64()),
            "part": pa.array([f"p{(i + k) % 2}" for k in range(n)], pa.string()),
        }
    )


def _ids(appends, n: int = 3) -> list[int]:  # noqa: ANN001
    return sorted(i * 10 + k for i in appends for k in range(n))


def _table(server: Server, **props: str):  # noqa: ANN202
    catalog = server.catalog()
    ns = f"dc_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    return catalog, ns, catalog.create_table(f"{ns}.t", SCHEMA, partition_spec=SPEC, properties=props)


def _data_files(table) -> list[str]:  # noqa: ANN001
    return [t.file.file_path for t in table.scan().plan_files()]


def _compact(server: Server, ns: str, table: str = "t", **body: object) -> dict:
    [task] = run_care(server, ns, table, kinds=[compaction.KIND], **body)
    assert task["state"] == "done", task
    return task["result"]


def test_small_files_are_compacted_per_partition_and_read_the_same(care: Server) -> None:
    catalog, ns, table = _table(care)
    for i in range(8):
        table.append(_batch(i))
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
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == _ids(range(8))
    # time travel reads the small files, still there
    assert sorted(table.scan(snapshot_id=before.snapshot_id).to_arrow()["id"].to_pylist()) == _ids(range(8))
    # the new files keep the data sequence number of the snapshot the compaction started from
    for task in table.scan().plan_files():
        assert task.file.partition is not None
    entries = [
        e for m in head.manifests(table.io) for e in m.fetch_manifest_entry(table.io, discard_deleted=True)
    ]
    added = [e for e in entries if e.snapshot_id == head.snapshot_id]
    assert len(added) == 2 and {e.sequence_number for e in added} == {before.sequence_number}

    duck = duckdb_attached(care)
    try:
        got = sorted(r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t").fetchall())
    finally:
        duck.close()
    assert got == _ids(range(8))

    # nothing more to do now; an append after it lands (no 409: nothing raced)
    assert _compact(care, ns)["rewritten-data-files"] == 0
    catalog.load_table(f"{ns}.t").append(_batch(50))
    assert sorted(catalog.load_table(f"{ns}.t").scan().to_arrow()["id"].to_pylist()) == _ids([*range(8), 50])


def test_a_dry_run_says_what_it_would_rewrite_and_commits_nothing(care: Server) -> None:
    catalog, ns, table = _table(care)
    for i in range(6):
        table.append(_batch(i))
    head = catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id
    result = _compact(care, ns, **{"dry-run": True})
    assert result["dry-run"] is True and result["data-files-to-rewrite"] == 12 and result["groups"] == 2, result
    assert catalog.load_table(f"{ns}.t").current_snapshot().snapshot_id == head


def test_few_small_files_are_left_alone_as_java_plans(care: Server) -> None:
    """Fewer than min-input-files (5) per partition, and little content: nothing to rewrite."""
    catalog, ns, table = _table(care)
    for i in range(3):
        table.append(_batch(i))
    result = _compact(care, ns)
    assert result["rewritten-data-files"] == 0, result
    assert catalog.load_table(f"{ns}.t").current_snapshot().summary.operation.value == "append"


def test_a_sorted_table_is_compacted_in_its_sort_order(care: Server) -> None:
    catalog, ns, table = _table(care)
    with table.update_sort_order() as order:
        from pyiceberg.table.sorting import SortDirection

        order.asc("id", IdentityTransform())
        del SortDirection
    table = catalog.load_table(f"{ns}.t")
    for i in reversed(range(6)):
        table.append(_batch(i))
    result = _compact(care, ns)
    assert result["strategy"] == "sort" and result["added-data-files"] == 2, result
    table = catalog.load_table(f"{ns}.t")
    for task in table.scan().plan_files():
        ids = table.io.new_input(task.file.file_path)
        import pyarrow.parquet as pq

        with ids.open() as f:
            column = pq.read_table(f)["id"].to_pylist()
        assert column == sorted(column)
