"""The tables scan-planning tests plan over, and the filters they plan with: written once per module
with pyiceberg, plus what pyiceberg 0.12 cannot write (position and equality delete files), committed
through the catalog's REST API. Used by tests/test_planning.py (the server against pyiceberg) and
tests/test_planning_java.py (the server against Iceberg Java's own planner)."""

from __future__ import annotations

import datetime
import io
import random
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.expressions import (
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    Not,
    NotEqualTo,
    NotNull,
    Or,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
)
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType, TimestampType

from catalog.storage.manifests import FIRST_ROW_ID, LIST_READ, BufferOutput, list_writer, manifest_writer, read_records

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "c", StringType(), required=False),
    NestedField(3, "d", DateType(), required=False),
    NestedField(4, "x", DoubleType(), required=False),
    NestedField(5, "ts", TimestampType(), required=False),
)
LETTERS = ["a", "b", "c", "ab"]


def some_rows(rng: random.Random, start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            # no null partition values: pyiceberg 0.12's REST parser refuses a null in ``partition``
            "id": pa.array(ids, pa.int64()),
            "c": pa.array([rng.choice(LETTERS) for _ in ids], pa.string()),
            "d": pa.array([datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 7) for i in ids], pa.date32()),
            "x": pa.array([None if i % 17 == 3 else rng.random() * 10 for i in ids], pa.float64()),
            "ts": pa.array(
                [datetime.datetime(2024, 3, 1) + datetime.timedelta(hours=5 * i) for i in ids], pa.timestamp("us")
            ),
        }
    )


def add_position_deletes(
    srv, table: Table, files: list[DataFile], file_scoped: bool, rng: random.Random, equality: bool = False
) -> int:
    """Commit a ``delete`` snapshot of position delete files (pyiceberg 0.12 writes none itself):
    one per data file when ``file_scoped`` (with equal ``file_path`` bounds, as Java writes them), else
    one per partition; each deletes a few random positions of its data files. ``equality``: files
    marked as equality deletes on ``id`` instead (for the plan only: no client reads them here)."""
    meta = table.metadata
    head = meta.current_snapshot()
    snapshot_id = rng.randrange(1, 2**62)
    sequence = meta.last_sequence_number + 1
    groups: dict = {}
    for f in files:
        groups.setdefault(f.file_path if file_scoped else (f.spec_id, f.partition), []).append(f)
    written = []
    for group in groups.values():
        pairs = sorted(
            (f.file_path, p) for f in group for p in rng.sample(range(f.record_count), min(3, f.record_count))
        )
        arrow = pa.table(
            {"file_path": pa.array([p[0] for p in pairs], pa.string()), "pos": pa.array([p[1] for p in pairs])},
            schema=pa.schema(
                [
                    pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": b"2147483546"}),
                    pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": b"2147483545"}),
                ]
            ),
        )
        buf = io.BytesIO()
        pq.write_table(arrow, buf)
        path = f"{meta.location}/data/pos-del-{uuid.uuid4().hex}.parquet"
        write_file(table, path, buf.getvalue())
        bounds = {2147483546: group[0].file_path.encode()} if file_scoped else {}
        delete_file = DataFile.from_args(
            content=DataFileContent.EQUALITY_DELETES if equality else DataFileContent.POSITION_DELETES,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=group[0].partition,
            record_count=len(pairs),
            file_size_in_bytes=len(buf.getvalue()),
            lower_bounds=bounds,
            upper_bounds=bounds,
            equality_ids=[1] if equality else None,
        )
        delete_file.spec_id = group[0].spec_id  # from_args does not take it
        written.append(delete_file)
    manifests = []
    for spec_id in sorted({f.spec_id for f in written}):  # one delete manifest per spec
        manifest_path = f"{meta.location}/metadata/del-{uuid.uuid4().hex}-m{spec_id}.avro"
        out = BufferOutput(manifest_path)
        spec = meta.specs()[spec_id]
        with manifest_writer(2, ManifestContent.DELETES, spec, meta.schema(), out, snapshot_id, "null") as writer:
            for f in written:
                if f.spec_id == spec_id:
                    entry = ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=f
                    )
                    writer.add(entry)
        manifests.append(writer.to_manifest_file())
        write_file(table, manifest_path, out.value)
    list_path = f"{meta.location}/metadata/snap-{snapshot_id}-del.avro"
    out = BufferOutput(list_path)
    with list_writer(2, out, snapshot_id, head.snapshot_id, sequence, 0, "null") as lw:
        lw.add_manifests([*manifests, *head.manifests(table.io)])
    write_file(table, list_path, out.value)
    snapshot = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": head.snapshot_id,
        "sequence-number": sequence,
        "timestamp-ms": meta.last_updated_ms + 1,
        "manifest-list": list_path,
        "summary": {"operation": "delete"},
        "schema-id": meta.current_schema_id,
    }
    commit_snapshot(srv, table, snapshot)
    return sum(f.record_count for f in written)


def write_file(table: Table, path: str, data: bytes) -> None:
    with table.io.new_output(path).create() as f:
        f.write(data)


def client_planning(srv) -> RestCatalog:
    return srv.catalog(**{"scan-planning-mode": "client"})


def random_filter(rng: random.Random, depth: int = 0) -> BooleanExpression:
    if depth < 2 and rng.random() < 0.4:
        kind = rng.choice(["and", "or", "not"])
        if kind == "not":
            return Not(random_filter(rng, depth + 1))
        left, right = random_filter(rng, depth + 1), random_filter(rng, depth + 1)
        return And(left, right) if kind == "and" else Or(left, right)
    column = rng.choice(["id", "c", "d", "x", "ts"])
    value = {
        "id": lambda: rng.randrange(-5, 200),
        "c": lambda: rng.choice([*LETTERS, "zz"]),
        "d": lambda: (datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randrange(-1, 9))).isoformat(),
        "x": lambda: round(rng.random() * 11, 2),
        "ts": lambda: (datetime.datetime(2024, 3, 1) + datetime.timedelta(hours=rng.randrange(0, 800))).isoformat(),
    }[column]
    op = rng.choice(["eq", "neq", "lt", "gte", "in", "null", "notnull"])
    if op == "in":
        return In(column, {value() for _ in range(rng.randrange(1, 4))})
    if op == "null":
        return IsNull(column)
    if op == "notnull":
        return NotNull(column)
    return {"eq": EqualTo, "neq": NotEqualTo, "lt": LessThan, "gte": GreaterThanOrEqual}[op](column, value())


SPEC_CHOICES = [
    [],
    [(2, IdentityTransform(), "c")],
    [(1, BucketTransform(3), "id_bucket")],
    [(3, DayTransform(), "d_day")],
    [(2, IdentityTransform(), "c"), (3, DayTransform(), "d_day")],
    [(5, DayTransform(), "ts_day"), (1, BucketTransform(2), "id_bucket")],
]


# A field a spec gains midway, on a column it does not partition by yet (pyiceberg refuses two on one).
EVOLVE_BY = [(2, "c", TruncateTransform(1)), (3, "d", DayTransform()), (1, "id", BucketTransform(2))]


def v3_position_deletes(table: Table, target: DataFile, fmt: FileFormat) -> DataFile:
    """A position delete file of ``target``'s partition for a v3 table, named and not written (a plan
    does not read delete files): a deletion vector of ``target`` alone when ``fmt`` is Puffin (at
    offset 4, 40 bytes), else a Parquet file for the whole partition."""
    location = table.metadata.location
    extra = (
        {"referenced_data_file": target.file_path, "content_offset": 4, "content_size_in_bytes": 40}
        if fmt == FileFormat.PUFFIN
        else {}
    )
    made = DataFile.from_args(
        _table_format_version=3, content=DataFileContent.POSITION_DELETES,
        file_path=f"{location}/data/del-{uuid.uuid4().hex}.{fmt.name.lower()}", file_format=fmt,
        partition=target.partition, record_count=2, file_size_in_bytes=100, **extra,
    )  # fmt: skip
    made.spec_id = target.spec_id
    return made


def commit_v3_deletes(srv, table: Table, deletes: list[DataFile], rng: random.Random) -> None:
    """Commit a ``delete`` snapshot adding ``deletes`` to a v3 table (pyiceberg 0.12 writes no v3
    manifests): one delete manifest of the table's current spec, and a v3 manifest list with row ids."""
    meta, head = table.metadata, table.metadata.current_snapshot()
    snapshot_id, sequence = rng.randrange(1, 2**62), meta.last_sequence_number + 1
    manifest_path = f"{meta.location}/metadata/dv-{uuid.uuid4().hex}-m0.avro"
    out = BufferOutput(manifest_path)
    with manifest_writer(3, ManifestContent.DELETES, meta.spec(), meta.schema(), out, snapshot_id, "null") as writer:
        for f in deletes:
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=f))
    write_file(table, manifest_path, out.value)
    with table.io.new_input(head.manifest_list).open() as f:
        existing = list(read_records(f.read(), LIST_READ)[0])
    list_path = f"{meta.location}/metadata/snap-{snapshot_id}-dv.avro"
    out = BufferOutput(list_path)
    first_row_id = meta.next_row_id or 0
    with list_writer(3, out, snapshot_id, head.snapshot_id, sequence, first_row_id, "null") as lw:
        made = writer.to_manifest_file()
        lw.add_manifests([ManifestFile(*made._data[:FIRST_ROW_ID], None), *existing])  # v3 has a first_row_id
    write_file(table, list_path, out.value)
    snapshot = {
        "snapshot-id": snapshot_id, "parent-snapshot-id": head.snapshot_id, "sequence-number": sequence,
        "timestamp-ms": meta.last_updated_ms + 1, "manifest-list": list_path, "summary": {"operation": "delete"},
        "schema-id": meta.current_schema_id, "first-row-id": first_row_id,
        "added-rows": lw.next_row_id - first_row_id,
    }  # fmt: skip
    commit_snapshot(srv, table, snapshot)


def commit_snapshot(srv, table: Table, snapshot: dict) -> None:
    """Commit ``snapshot`` (its parent: the main branch's head) as the new head of main, over REST."""
    ns, name = table.name()[-2], table.name()[-1]
    resp = requests.post(
        f"{srv.url}/v1/namespaces/{ns}/tables/{name}",
        json={
            "requirements": [
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": snapshot["parent-snapshot-id"]}
            ],
            "updates": [
                {"action": "add-snapshot", "snapshot": snapshot},
                {
                    "action": "set-snapshot-ref",
                    "ref-name": "main",
                    "type": "branch",
                    "snapshot-id": snapshot["snapshot-id"],
                },
            ],
        },
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
