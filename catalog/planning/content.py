"""Data and delete files as the REST spec's ``ContentFile`` JSON, the way Java's
``ContentFileParser`` and ``SingleValueParser`` write them (pyiceberg has parsers of this JSON but
no writer, and pydantic would not give the per-type encodings).

- Partition values: a list in the spec's field order, each as a JSON single value of the field's
  *result* type: a day-transform or a date identity value is ``"YYYY-MM-DD"``, a timestamp
  ``"YYYY-MM-DDTHH:MM:SS.ffffff"`` (``+00:00`` with zone), a decimal a string, binary and fixed
  uppercase hex, a uuid its text.
- Bounds: a ``{"keys": [...], "values": [...]}`` map of field id to the uppercase hex of the bound's
  binary serialisation (Java writes the map<int, binary> so); counts the same shape with integers.
- Column stats (sizes, counts, bounds) only for the columns of ``stats-fields``; none without it,
  as Java's reference handler (``ContentFileUtil.copy(file, keepStats, columns)``).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Collection
from decimal import Decimal
from typing import Any

from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DecimalType,
    FixedType,
    IcebergType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

_FIELDS = [f.field_id for f in DATA_FILE_TYPE[3].fields]
FIRST_ROW_ID, REFERENCED, OFFSET, SIZE = (_FIELDS.index(i) for i in (142, 143, 144, 145))
CONTENT = {
    DataFileContent.DATA: "data",
    DataFileContent.POSITION_DELETES: "position-deletes",
    DataFileContent.EQUALITY_DELETES: "equality-deletes",
}
EPOCH = datetime.datetime(1970, 1, 1)
EPOCH_DATE = datetime.date(1970, 1, 1)


def single_value(kind: IcebergType, value: Any) -> Any:
    """``value`` (as pyiceberg holds it in a partition or after ``from_bytes``) as Java's
    ``SingleValueParser.toJson`` writes it for type ``kind``."""
    if value is None:
        return None
    if isinstance(kind, DateType):
        if isinstance(value, int):
            value = EPOCH_DATE + datetime.timedelta(days=value)
        return value.isoformat()
    if isinstance(kind, TimeType):
        if isinstance(value, int):
            value = (EPOCH + datetime.timedelta(microseconds=value)).time()
        return value.isoformat(timespec="microseconds")
    if isinstance(kind, (TimestampType, TimestamptzType, TimestampNanoType, TimestamptzNanoType)):
        nanos = isinstance(kind, (TimestampNanoType, TimestamptzNanoType))
        zoned = isinstance(kind, (TimestamptzType, TimestamptzNanoType))
        return _timestamp(value, nanos, zoned)
    if isinstance(kind, DecimalType):
        if isinstance(value, int):  # unscaled
            value = Decimal(value).scaleb(-kind.scale)
        return format(Decimal(value).quantize(Decimal(1).scaleb(-kind.scale)), "f")
    if isinstance(kind, (BinaryType, FixedType)):
        return bytes(value).hex().upper()
    if isinstance(kind, UUIDType):
        return str(value if isinstance(value, uuid.UUID) else uuid.UUID(bytes=bytes(value)))
    return value


def _timestamp(value: Any, nanos: bool, zoned: bool) -> str:
    if isinstance(value, int):
        whole, frac = divmod(value, 10**9 if nanos else 10**6)
        moment = EPOCH + datetime.timedelta(seconds=whole)
        text = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac:09d}" if nanos else f".{frac:06d}")
    else:
        text = value.replace(tzinfo=None).isoformat(timespec="microseconds")
    return text + ("+00:00" if zoned else "")


def content_file(
    file: DataFile, spec: PartitionSpec, schema: Schema, stats: Collection[int] | None = None
) -> dict[str, Any]:
    """The ``ContentFile`` JSON of ``file`` (its partition by ``spec`` over ``schema``); column stats
    for the field ids in ``stats`` only."""
    out: dict[str, Any] = {
        "content": CONTENT[file.content],
        "file-path": file.file_path,
        "file-format": file.file_format.name.lower(),
        "spec-id": file.spec_id,
        "partition": partition_values(file, spec, schema),
        "file-size-in-bytes": file.file_size_in_bytes,
        "record-count": file.record_count,
    }
    if file.key_metadata is not None:
        out["key-metadata"] = bytes(file.key_metadata).hex().upper()
    if file.split_offsets is not None:
        out["split-offsets"] = list(file.split_offsets)
    if file.sort_order_id is not None:
        out["sort-order-id"] = file.sort_order_id
    data = file._data
    extra = {
        "first-row-id": FIRST_ROW_ID,
        "referenced-data-file": REFERENCED,
        "content-offset": OFFSET,
        "content-size-in-bytes": SIZE,
    }
    for key, pos in extra.items():
        if len(data) > pos and data[pos] is not None:
            if key == "first-row-id" and file.content != DataFileContent.DATA:
                continue
            out[key] = data[pos]
    if file.content == DataFileContent.EQUALITY_DELETES and file.equality_ids is not None:
        out["equality-ids"] = list(file.equality_ids)
    if stats:
        keep = frozenset(stats)
        for key, counts in (
            ("column-sizes", file.column_sizes),
            ("value-counts", file.value_counts),
            ("null-value-counts", file.null_value_counts),
            ("nan-value-counts", file.nan_value_counts),
        ):
            if counts:
                _put_map(out, key, {k: v for k, v in counts.items() if k in keep})
        for key, bounds in (("lower-bounds", file.lower_bounds), ("upper-bounds", file.upper_bounds)):
            if bounds:
                _put_map(out, key, {k: bytes(v).hex().upper() for k, v in bounds.items() if k in keep})
    return out


def partition_values(file: DataFile, spec: PartitionSpec, schema: Schema) -> list[Any]:
    partition = file.partition
    if not spec.fields:
        return []
    types = [f.field_type for f in spec.partition_type(schema).fields]
    return [single_value(kind, partition[i]) for i, kind in enumerate(types)]


def _put_map(out: dict[str, Any], key: str, values: dict[int, Any]) -> None:
    if values:
        ordered = sorted(values)
        out[key] = {"keys": ordered, "values": [values[k] for k in ordered]}
