"""A compaction's rows: read through the server's storage (pyiceberg's Arrow reader, deletes and
deletion vectors applied, v3 row lineage made explicit), sorted by the table's sort order when it has
one, and written by pyiceberg's writer into files of the table's target size, create-only.
``compaction.py`` commits what ``rewrite`` wrote.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.io.pyarrow import ArrowScan, _combine_positional_deletes, _read_deletes, write_file
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, ManifestEntry
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, WriteTask
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField

from catalog import errors
from catalog.database.ownership import PATH_PROPERTIES
from catalog.locations import normalise
from catalog.maintenance.compaction_plan import FileGroup, delete_key, inside, target_bytes
from catalog.storage.backends import Storage, delete_quietly
from catalog.storage.manifests import FILE_ROW_ID, BufferOutput, BytesInput

log = logging.getLogger("catalog.maintenance")

ROW_ID, LAST_UPDATED = 2147483540, 2147483539  # the spec's reserved field ids of row lineage
LINEAGE = (
    NestedField(ROW_ID, "_row_id", LongType(), required=False),
    NestedField(LAST_UPDATED, "_last_updated_sequence_number", LongType(), required=False),
)
V3_FIELDS = len(DATA_FILE_TYPE[3].fields)
STATS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts", "lower_bounds", "upper_bounds")


class StorageIO(FileIO):
    """pyiceberg's FileIO over the server's storage: reads confined and capped, writes kept in memory
    and written create-only by the job (``written``)."""

    def __init__(self, storage: Storage, limit: int) -> None:
        super().__init__({})
        self.storage = storage
        self.limit = limit
        self.cache: dict[str, bytes] = {}
        self.outputs: dict[str, BufferOutput] = {}

    def new_input(self, location: str) -> InputFile:
        if location not in self.cache:
            self.cache[location] = self.storage.read(location, self.limit)
        return BytesInput(location, self.cache[location])

    def new_output(self, location: str) -> OutputFile:
        out = BufferOutput(location)
        self.outputs[location] = out
        return out

    def delete(self, location: str | InputFile | OutputFile) -> None:
        raise NotImplementedError("compaction deletes through the storage, never through the FileIO")


@dataclass(slots=True)
class Rewritten:
    """What one run wrote (not yet committed) and what it replaces."""

    added: list[DataFile] = field(default_factory=list)
    replaced: dict[str, ManifestEntry] = field(default_factory=dict)  # data file path -> entry
    removed_deletes: set[tuple[str, str | None]] = field(default_factory=set)  # (path, referenced file)
    paths: list[str] = field(default_factory=list)  # every file written
    strategy: str = "binpack"


class _Key:
    """A partition key for pyiceberg's writer: the group's partition as the manifests hold it."""

    def __init__(self, partition: Record, spec: PartitionSpec, schema: Schema) -> None:
        self.partition, self._spec, self._schema = partition, spec, schema

    def to_path(self) -> str:
        return self._spec.partition_to_path(self.partition, self._schema)


def sort_keys(table: Any, schema: Schema) -> list[tuple[str, str, str]] | None:
    """The table's default sort order as pyarrow sort keys (column, direction, where nulls go, per
    field), when every field is an identity transform of a top-level column (else None: bin-pack)."""
    order = table.sort_order()
    if order is None or not order.fields:
        return None
    keys = []
    for f in order.fields:
        if str(f.transform) != "identity":
            return None
        try:
            name = schema.find_column_name(f.source_id)
        except ValueError:
            return None
        if name is None or "." in name:
            return None
        direction = "ascending" if f.direction.name == "ASC" else "descending"
        keys.append((name, direction, "at_start" if f.null_order.name == "NULLS_FIRST" else "at_end"))
    return keys


def _with_lineage(rows: pa.Table, raw: bytes, e: ManifestEntry) -> pa.Table:
    """``rows`` (one data file's, in file order) with its lineage columns: the file's own values where
    it has them (a file rewritten before), else what a reader inherits (spec: "Row Lineage")."""
    f = e.data_file
    n = rows.num_rows
    physical = _lineage_columns(raw)
    first = f[FILE_ROW_ID] if len(f._data) > FILE_ROW_ID else None
    inherited_ids = pa.array(range(first, first + n), pa.int64()) if first is not None else pa.nulls(n, pa.int64())
    row_id = physical.get(ROW_ID)
    row_id = inherited_ids if row_id is None else pc.coalesce(row_id, inherited_ids)
    seq = pa.array([e.sequence_number] * n, pa.int64())
    updated = physical.get(LAST_UPDATED)
    updated = seq if updated is None else pc.coalesce(updated, seq)
    return rows.append_column(_arrow_field(LINEAGE[0]), row_id).append_column(_arrow_field(LINEAGE[1]), updated)


def _lineage_columns(raw: bytes) -> dict[int, pa.ChunkedArray]:
    parquet = pq.ParquetFile(pa.BufferReader(raw))
    out = {}
    for i, name in enumerate(parquet.schema_arrow.names):
        meta = parquet.schema_arrow.field(i).metadata or {}
        fid = meta.get(b"PARQUET:field_id")
        if fid is not None and int(fid) in (ROW_ID, LAST_UPDATED):
            out[int(fid)] = parquet.read(columns=[name]).column(0).cast(pa.int64())
    return out


def _arrow_field(f: NestedField) -> pa.Field:
    return pa.field(f.name, pa.int64(), nullable=True, metadata={b"PARQUET:field_id": str(f.field_id).encode()})


def rewrite(storage: Storage, metadata: dict[str, Any], groups: list[FileGroup], limit: int) -> Rewritten:
    """Read each group's rows (deletes applied, v3 lineage kept) and write them into files of the
    table's target size, create-only through ``storage``: what was written and what it replaces.
    A failure deletes what was written."""
    table = TableMetadataUtil.parse_obj(metadata)
    version = table.format_version
    schema = table.schema()
    spec = table.spec()
    io = StorageIO(storage, limit)
    written = Rewritten()
    order = sort_keys(table, schema)
    written.strategy = "sort" if order else "binpack"
    write_schema = Schema(*schema.fields, *LINEAGE, schema_id=schema.schema_id) if version >= 3 else schema
    # The new files go under the table's own location: a write.*.path property elsewhere (another
    # table's directory, whose orphan removal would take them) is not followed; the default layout is.
    own = [normalise(metadata["location"])]
    properties = {k: v for k, v in table.properties.items() if k not in PATH_PROPERTIES or inside(v, own)}
    write_meta = table.model_copy(
        update={
            "schemas": [write_schema if s.schema_id == schema.schema_id else s for s in table.schemas],
            "properties": properties,
        }
    )
    target = target_bytes(metadata)
    try:
        for n, group in enumerate(groups):
            rows, referenced = _read_group(table, schema, io, group, version)
            if order:
                rows = rows.take(pc.sort_indices(rows, sort_keys=order))
            input_bytes = max(1, group.bytes)
            per_file = max(1, -(-rows.num_rows * target // input_bytes)) if rows.num_rows else 1
            tasks = [
                WriteTask(
                    write_uuid=uuid.uuid4(),
                    task_id=n * 1000 + i,
                    schema=write_schema,
                    record_batches=rows.slice(offset, per_file).to_batches(),
                    partition_key=_Key(group.partition, spec, schema) if spec.fields else None,  # type: ignore[arg-type]
                )
                for i, offset in enumerate(range(0, rows.num_rows, per_file))
            ]
            for data_file in write_file(io, write_meta, iter(tasks)):
                out = io.outputs.pop(data_file.file_path)
                storage.write_new(data_file.file_path, out.value)
                written.paths.append(data_file.file_path)
                if version >= 3:  # pyiceberg's DataFile is v2's: v3's fields, unassigned (the list assigns)
                    data_file._data.extend([None] * (V3_FIELDS - len(data_file._data)))
                    for name in STATS:  # no metrics for the lineage columns (not table columns)
                        values = getattr(data_file, name) or {}
                        values.pop(ROW_ID, None)
                        values.pop(LAST_UPDATED, None)
                written.added.append(data_file)
            for e in group.files:
                written.replaced[e.data_file.file_path] = e
            rewritten = set(written.replaced)
            for path_deletes in group.deletes.values():
                for d in path_deletes:
                    key = delete_key(d)
                    if referenced.get(key, set()) <= rewritten:
                        written.removed_deletes.add(key)
            io.cache.clear()
    except BaseException:
        delete_quietly(storage, written.paths, "compaction")
        raise
    return written


def _read_group(
    table: Any, schema: Schema, io: StorageIO, group: FileGroup, version: int
) -> tuple[pa.Table, dict[tuple[str, str | None], set[str]]]:
    """The group's rows (deletes applied; v3 with their lineage) and, for each delete file that
    applies, every data file it points at (read from the file: exact)."""
    referenced: dict[tuple[str, str | None], set[str]] = {}
    positions: dict[str, list[pa.ChunkedArray]] = {}
    for deletes in group.deletes.values():
        for d in deletes:
            key = delete_key(d)
            if key in referenced:
                continue
            by_path = _read_deletes(io, d)
            if d.file_format.name == "PUFFIN" and key[1] is not None:
                by_path = {key[1]: by_path[key[1]]} if key[1] in by_path else {}
            referenced[key] = set(by_path)
            for path, pos in by_path.items():
                positions.setdefault(path, []).append(pos)
    scan = ArrowScan(table, io, schema, AlwaysTrue())
    parts = []
    for e in group.files:
        f = e.data_file
        rows = scan.to_table([FileScanTask(f)])
        if rows.num_rows != f.record_count:
            raise errors.BadRequest(
                f"Data file {f.file_path} holds {rows.num_rows} rows, its manifest says {f.record_count}"
            )
        if version >= 3:
            rows = _with_lineage(rows, io.cache[f.file_path], e)
        if f.file_path in positions:
            rows = rows.take(_combine_positional_deletes(positions[f.file_path], 0, rows.num_rows))
        parts.append(rows)
    return pa.concat_tables(parts, promote_options="default"), referenced
