"""Scan planning's parts in process (docs/planning.md): the delete index against cases worked out by
hand from Java's ``DeleteFileIndex`` rules (equality deletes and deletion vectors, where pyiceberg's
own planner differs from Java and so cannot be the oracle), the filter pre-pass, the ContentFile
encoder (checked by pyiceberg's own REST parsers), the token sealer and the manifest cache."""

from __future__ import annotations

import datetime
import struct
import uuid
from decimal import Decimal

import orjson
import pytest
from pyiceberg.catalog.rest.scan_planning import PlanCompleted
from pyiceberg.expressions import And, EqualTo, GreaterThan
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    FixedType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from catalog import errors, sealing
from catalog.planning import content, filters, request, task_tokens
from catalog.planning.cache import ManifestCache
from catalog.planning.deletes import FILE_PATH_ID, DeleteIndex

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "c", StringType(), required=False),
    NestedField(3, "b", BinaryType(), required=False),
    NestedField(4, "k", LongType(), required=True),
)
PARTITIONED, UNPARTITIONED = 1, 0
P, Q = Record("p"), Record("q")


def with_spec(file: DataFile, spec: int) -> DataFile:
    file.spec_id = spec  # as the planner sets it from the manifest
    return file


def data(path: str, partition: Record = P, spec: int = PARTITIONED, **stats) -> DataFile:
    return with_spec(DataFile.from_args(
        _table_format_version=3, content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
        partition=partition, record_count=10, file_size_in_bytes=100, **stats,
    ), spec)  # fmt: skip


def pos(path: str, partition: Record = P, spec: int = PARTITIONED, **extra) -> DataFile:
    return with_spec(DataFile.from_args(
        _table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=path,
        file_format=extra.pop("file_format", FileFormat.PARQUET), partition=partition, record_count=1,
        file_size_in_bytes=10, **extra,
    ), spec)  # fmt: skip


def eq(path: str, partition: Record = P, spec: int = PARTITIONED, ids: tuple = (1,), **stats) -> DataFile:
    return with_spec(DataFile.from_args(
        _table_format_version=3, content=DataFileContent.EQUALITY_DELETES, file_path=path,
        file_format=FileFormat.PARQUET, partition=partition, record_count=1, file_size_in_bytes=10,
        equality_ids=list(ids), **stats,
    ), spec)  # fmt: skip


def index(*deletes: tuple[DataFile, int]) -> DeleteIndex:
    built = DeleteIndex(SCHEMA, [UNPARTITIONED])
    for file, seq in deletes:
        built.add(file, seq)
    return built


def paths(files: list[DataFile]) -> list[str]:
    return sorted(f.file_path for f in files)


def long(v: int) -> bytes:
    return struct.pack("<q", v)


# -- position deletes ----------------------------------------------------------------------------------


def test_partition_position_deletes_apply_at_an_equal_or_newer_sequence_in_the_same_spec_and_partition() -> None:
    idx = index((pos("same"), 5), (pos("older"), 4), (pos("newer"), 6), (pos("other", Q), 6),
                (pos("other-spec", P, spec=2), 6))  # fmt: skip
    assert paths(idx.for_data_file(5, data("d"))) == ["newer", "same"]


def test_file_scoped_position_deletes_apply_to_their_file_only() -> None:
    by_bounds = pos("bounds", lower_bounds={FILE_PATH_ID: b"d1"}, upper_bounds={FILE_PATH_ID: b"d1"})
    by_field = pos("field", referenced_data_file="d2")
    ranged = pos("ranged", lower_bounds={FILE_PATH_ID: b"d1"}, upper_bounds={FILE_PATH_ID: b"d9"})  # partition
    idx = index((by_bounds, 3), (by_field, 3), (ranged, 3))
    assert paths(idx.for_data_file(3, data("d1"))) == ["bounds", "ranged"]
    assert paths(idx.for_data_file(3, data("d2"))) == ["field", "ranged"]
    assert paths(idx.for_data_file(4, data("d1"))) == []


# -- deletion vectors ------------------------------------------------------------------------------------


def dv(path: str, target: str, partition: Record = P, spec: int = PARTITIONED) -> DataFile:
    return pos(path, partition, spec, file_format=FileFormat.PUFFIN, referenced_data_file=target, content_offset=4,
               content_size_in_bytes=40)  # fmt: skip


def test_a_deletion_vector_applies_to_its_file_only_and_masks_its_position_deletes() -> None:
    idx = index((dv("dv1", "d1"), 7), (pos("partition-wide"), 7), (eq("eq"), 8))
    assert paths(idx.for_data_file(5, data("d1"))) == ["dv1", "eq"]  # equality deletes still apply
    assert paths(idx.for_data_file(5, data("d2"))) == ["eq", "partition-wide"]


def test_a_deletion_vector_older_than_its_file_or_a_second_one_is_invalid() -> None:
    with pytest.raises(errors.ValidationFailed):
        index((dv("dv1", "d1"), 4)).for_data_file(5, data("d1"))
    with pytest.raises(errors.ValidationFailed):
        index((dv("dv1", "d1"), 6), (dv("dv2", "d1"), 7))


# -- equality deletes ------------------------------------------------------------------------------------


def test_equality_deletes_apply_only_when_strictly_newer() -> None:
    idx = index((eq("same"), 5), (eq("newer"), 6))
    assert paths(idx.for_data_file(5, data("d"))) == ["newer"]


def test_equality_deletes_of_an_unpartitioned_spec_are_global() -> None:
    idx = index((eq("global", Record(), spec=UNPARTITIONED), 9), (eq("in-q", Q), 9))
    assert paths(idx.for_data_file(1, data("d", P))) == ["global"]
    assert paths(idx.for_data_file(1, data("d", Q))) == ["global", "in-q"]
    assert paths(idx.for_data_file(1, data("d", P, spec=UNPARTITIONED))) == ["global"]


def test_equality_deletes_are_pruned_by_the_data_files_bounds() -> None:
    ranged = {"lower_bounds": {1: long(1)}, "upper_bounds": {1: long(10)}, "null_value_counts": {1: 0}}
    idx = index(
        (eq("above", lower_bounds={1: long(20)}, upper_bounds={1: long(30)}), 9),
        (eq("overlap", lower_bounds={1: long(5)}, upper_bounds={1: long(30)}), 9),
        (eq("touching", lower_bounds={1: long(10)}, upper_bounds={1: long(10)}), 9),
        (eq("no-bounds"), 9),
    )
    assert paths(idx.for_data_file(1, data("d", **ranged))) == ["no-bounds", "overlap", "touching"]
    assert len(idx.for_data_file(1, data("d"))) == 4  # a data file without bounds: all may match
    # Java checks ranges only past the null test: nulls possible on both sides (unknown counts) match
    unknown_nulls = {"lower_bounds": {1: long(1)}, "upper_bounds": {1: long(10)}}
    assert len(idx.for_data_file(1, data("d", **unknown_nulls))) == 4


def test_equality_deletes_are_pruned_by_null_counts() -> None:
    all_null = {"null_value_counts": {1: 10}, "value_counts": {1: 10}}
    no_nulls = {"null_value_counts": {1: 0}, "value_counts": {1: 10}}
    idx = index(
        (eq("deletes-values", null_value_counts={1: 0}, value_counts={1: 1}), 9),
        (eq("deletes-nulls", null_value_counts={1: 1}, value_counts={1: 1}), 9),
    )
    assert paths(idx.for_data_file(1, data("nulls", **all_null))) == ["deletes-nulls"]
    assert paths(idx.for_data_file(1, data("values", **no_nulls))) == ["deletes-values"]
    # a required column never holds nulls: only the ranges decide
    required = index((eq("on-k", ids=(4,), lower_bounds={4: long(50)}, upper_bounds={4: long(60)}), 9))
    inside = {"lower_bounds": {4: long(55)}, "upper_bounds": {4: long(70)}}
    assert paths(required.for_data_file(1, data("d", **inside))) == ["on-k"]


def test_an_empty_index_answers_nothing() -> None:
    assert index().for_data_file(1, data("d")) == [] and not index()


# -- filters ---------------------------------------------------------------------------------------------


def test_filters_take_reference_terms_and_hex_binary_literals() -> None:
    node = {
        "type": "and",
        "left": {"type": "gt", "term": {"type": "reference", "term": "id"}, "value": 5},
        "right": {"type": "eq", "term": "b", "value": "78797A"},
    }
    expr = filters.parse(node, SCHEMA)
    assert expr == And(GreaterThan("id", 5), EqualTo("b", b"xyz"))
    assert filters.parse(True, SCHEMA) == filters.parse(None, SCHEMA)
    assert filters.parse({"type": "eq", "term": "ID", "value": 1}, SCHEMA, case_sensitive=False) == EqualTo("ID", 1)


@pytest.mark.parametrize(
    "node",
    [
        {"type": "eq", "term": "ID", "value": 1},  # case-sensitive by default
        {"type": "eq", "term": {"type": "transform", "transform": "day", "term": "id"}, "value": 1},
        {"type": "between", "term": "id"},
        {"type": "eq", "term": "b", "value": "not hex"},
        {"type": "eq", "term": "id", "value": [1]},
        {"type": "in", "term": "id", "values": [1, "x"]},
        {"type": "not"},
        {"term": "id"},
        "id > 5",
        [],
    ],
)
def test_bad_filters_are_400s_naming_what_is_wrong(node) -> None:  # noqa: ANN001
    with pytest.raises(errors.BadRequest, match="Invalid filter"):
        filters.parse(node, SCHEMA)


def test_requests_are_checked_field_by_field() -> None:
    req = request.parse(b'{"snapshot-id": 1, "select": ["id"], "case-sensitive": false, "min-rows-requested": 3}')
    assert req.snapshot_id == 1 and req.select == ("id",) and not req.case_sensitive
    assert request.check_columns(("ID", "c"), SCHEMA, False, "select") == [1, 2]
    with pytest.raises(errors.BadRequest, match="select"):
        request.check_columns(("nope",), SCHEMA, True, "select")
    with pytest.raises(errors.BadRequest, match="start-snapshot-id"):
        request.parse(b'{"start-snapshot-id": 1}')
    with pytest.raises(errors.BadRequest, match="boolean"):
        request.parse(b'{"use-snapshot-schema": 1}')


# -- the ContentFile JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,value,expected",
    [
        (DateType(), 19724, "2024-01-02"),
        (DateType(), datetime.date(2024, 1, 2), "2024-01-02"),
        (TimeType(), 3_600_000_001, "01:00:00.000001"),
        (TimestampType(), 1_704_153_600_000_000, "2024-01-02T00:00:00.000000"),
        (TimestamptzType(), 1_704_153_600_000_001, "2024-01-02T00:00:00.000001+00:00"),
        (DecimalType(9, 2), Decimal("12.3"), "12.30"),
        (BinaryType(), b"xyz", "78797A"),
        (FixedType(2), b"\x01\xff", "01FF"),
        (UUIDType(), uuid.UUID(int=1).bytes, "00000000-0000-0000-0000-000000000001"),
        (LongType(), 5, 5),
        (StringType(), "s", "s"),
        (LongType(), None, None),
    ],
)
def test_single_values_are_written_as_javas_single_value_parser(kind, value, expected) -> None:  # noqa: ANN001
    assert content.single_value(kind, value) == expected


def test_content_files_parse_with_pyicebergs_rest_models() -> None:
    schema = Schema(
        NestedField(1, "id", LongType()), NestedField(2, "d", DateType()), NestedField(3, "c", StringType())
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, DayTransform(), "d_day"), PartitionField(3, 1001, IdentityTransform(), "c"), spec_id=1
    )
    stats = {"lower_bounds": {1: long(1), 3: b"a"}, "upper_bounds": {1: long(9), 3: b"z"}, "value_counts": {1: 10}}
    file = data("s3://b/t/data/a.parquet", Record(19724, "x"), **stats)
    deletion = dv("s3://b/t/data/dv.puffin", "s3://b/t/data/a.parquet", Record(19724, "x"))
    out = content.content_file(file, spec, schema, stats=[1])
    assert out["partition"] == ["2024-01-02", "x"]
    assert out["lower-bounds"] == {"keys": [1], "values": ["0100000000000000"]}
    dv_json = content.content_file(deletion, spec, schema)
    assert dv_json["referenced-data-file"] == "s3://b/t/data/a.parquet" and dv_json["content-offset"] == 4
    task = {"data-file": out, "delete-file-references": [0], "residual-filter": True}
    body = {"status": "completed", "delete-files": [dv_json], "file-scan-tasks": [task]}
    parsed = PlanCompleted.model_validate(orjson.loads(orjson.dumps(body)))
    assert parsed.file_scan_tasks[0].data_file.file_path == "s3://b/t/data/a.parquet"
    assert parsed.delete_files[0].content == "position-deletes"
    assert "lower-bounds" not in content.content_file(file, spec, schema)  # no stats unless asked


# -- tokens and the cache ------------------------------------------------------------------------------------


def test_plan_task_tokens_open_only_for_their_caller_and_server_secret() -> None:
    sealer = task_tokens.PlanTokens("s" * 40, None)
    task = task_tokens.PlanTask("uuid-1", [5, None, None], "s3://b/list.avro", [0, 2], [None, True, False, None])
    token = sealer.seal(task, task_tokens.context("", "user:alice"))
    assert (
        task_tokens.PlanTokens("s" * 40, None).open(token, task_tokens.context("", "user:alice")) == task
    )  # another process
    for other, context in (
        (task_tokens.PlanTokens("s" * 40, None), task_tokens.context("", "user:bob")),
        (task_tokens.PlanTokens("t" * 40, None), task_tokens.context("", "user:alice")),
        (task_tokens.PlanTokens("s" * 40, None), task_tokens.context("w2", "user:alice")),
    ):
        with pytest.raises(errors.BadRequest):
            other.open(token, context)


def test_a_page_token_key_never_opens_a_plan_task() -> None:
    page = sealing.Sealer("s" * 40, None, b"iceberg-catalog page tokens v1")
    token = page.seal(b"x", task_tokens.context("", "user:alice"))
    with pytest.raises(errors.BadRequest):
        task_tokens.PlanTokens("s" * 40, None).open(token, task_tokens.context("", "user:alice"))


def test_the_manifest_cache_keeps_the_most_recently_used() -> None:
    cache = ManifestCache(2)
    loads = []
    for path in ["a", "b", "a", "c", "a", "b"]:
        cache.get(path, lambda p=path: loads.append(p) or p)
    assert loads == ["a", "b", "c", "b"] and len(cache) == 2
    off = ManifestCache(0)
    off.get("a", lambda: 1)
    assert len(off) == 0
