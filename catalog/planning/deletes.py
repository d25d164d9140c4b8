"""Which delete files apply to a data file: Java's ``DeleteFileIndex`` (1.9) rules, written here
because pyiceberg's index has no equality deletes and files deletion vectors by partition.

- Position deletes apply when the delete's data sequence number is at least the data file's: by
  the data file's path when the delete names one file (``referenced_data_file``, or equal
  ``file_path`` bounds), else to every data file of the same spec and partition.
- A deletion vector (a position delete in a Puffin file) applies to its referenced data file only,
  and masks that file's other position deletes; one with an older sequence number than its data
  file, or two for one file, is a ``ValidationFailed``.
- Equality deletes apply when strictly newer (delete sequence - 1 >= data sequence): to every data
  file when their spec is unpartitioned (global), else to the same spec and partition; and only
  when the data file's null counts and bounds on the equality columns can hold a deleted row.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DATA_FILE_TYPE, DataFile, DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, PrimitiveType

from catalog import errors

FILE_PATH_ID = 2147483546  # the reserved ``file_path`` column of position delete files
REFERENCED = [f.field_id for f in DATA_FILE_TYPE[3].fields].index(143)


@dataclass(frozen=True, slots=True)
class Delete:
    """A live delete file with its data sequence number."""

    file: DataFile
    sequence: int


def referenced_file(file: DataFile) -> str | None:
    """The one data file a position delete names (Java's ``ContentFileUtil.referencedDataFileLocation``)."""
    ref = file._data[REFERENCED] if len(file._data) > REFERENCED else None
    if ref is not None:
        return ref
    lower, upper = (file.lower_bounds or {}).get(FILE_PATH_ID), (file.upper_bounds or {}).get(FILE_PATH_ID)
    if lower is not None and lower == upper:
        return lower.decode("utf-8", "replace")
    return None


def is_dv(file: DataFile) -> bool:
    return file.content == DataFileContent.POSITION_DELETES and file.file_format == FileFormat.PUFFIN


class _BySequence:
    """Deletes sorted by sequence number: those at or after a bound, in O(log n)."""

    def __init__(self) -> None:
        self._items: list[Delete] = []
        self._seqs: list[int] | None = None

    def add(self, delete: Delete) -> None:
        self._items.append(delete)
        self._seqs = None

    def at_least(self, seq: int) -> list[Delete]:
        if self._seqs is None:
            self._items.sort(key=lambda d: d.sequence)
            self._seqs = [d.sequence for d in self._items]
        return self._items[bisect.bisect_left(self._seqs, seq) :]


class DeleteIndex:
    """Built from a snapshot's live delete files (``add``); asked per data file (``for_data_file``).
    ``schema``: the table's schema (equality columns' types and nullability); ``unpartitioned``:
    the ids of the table's unpartitioned specs."""

    def __init__(self, schema: Schema, unpartitioned: Iterable[int]) -> None:
        self.schema = schema
        self.unpartitioned = frozenset(unpartitioned)
        self._global_eq = _BySequence()
        self._eq: dict[tuple[int, Any], _BySequence] = defaultdict(_BySequence)
        self._pos: dict[tuple[int, Any], _BySequence] = defaultdict(_BySequence)
        self._by_path: dict[str, _BySequence] = defaultdict(_BySequence)
        self._dvs: dict[str, Delete] = {}
        self.files: list[Delete] = []

    def __bool__(self) -> bool:
        return bool(self.files)

    def add(self, file: DataFile, sequence: int) -> None:
        delete = Delete(file, sequence)
        self.files.append(delete)
        if file.content == DataFileContent.EQUALITY_DELETES:
            if file.spec_id in self.unpartitioned:
                self._global_eq.add(delete)
            else:
                self._eq[(file.spec_id, file.partition)].add(delete)
        elif file.content == DataFileContent.POSITION_DELETES:
            path = referenced_file(file)
            if is_dv(file) and path is not None:
                if path in self._dvs:
                    raise errors.ValidationFailed(f"More than one deletion vector for the data file {path}")
                self._dvs[path] = delete
            elif path is not None:
                self._by_path[path].add(delete)
            else:
                self._pos[(file.spec_id, file.partition)].add(delete)

    def for_data_file(self, sequence: int, file: DataFile) -> list[DataFile]:
        """The delete files that apply to ``file`` of data sequence number ``sequence``."""
        if not self.files:
            return []
        key = (file.spec_id, file.partition)
        found = [d.file for d in self._global_eq.at_least(sequence + 1) if self._may_match(file, d.file)]
        if key in self._eq:
            found += [d.file for d in self._eq[key].at_least(sequence + 1) if self._may_match(file, d.file)]
        dv = self._dvs.get(file.file_path)
        if dv is not None:
            if dv.sequence < sequence:
                raise errors.ValidationFailed(
                    f"DV data sequence number ({dv.sequence}) must be greater than or equal to data file "
                    f"sequence number ({sequence})"
                )
            return [*found, dv.file]
        if key in self._pos:
            found += [d.file for d in self._pos[key].at_least(sequence)]
        if file.file_path in self._by_path:
            found += [d.file for d in self._by_path[file.file_path].at_least(sequence)]
        return found

    def _may_match(self, data: DataFile, delete: DataFile) -> bool:
        """Java's ``canContainEqDeletesForFile``: whether ``data`` may hold a row ``delete`` removes."""
        data_lower, data_upper = data.lower_bounds, data.upper_bounds
        check_ranges = data_lower is not None and data_upper is not None
        check_ranges = check_ranges and delete.lower_bounds is not None and delete.upper_bounds is not None
        for field_id in delete.equality_ids or []:
            field = self._field(field_id)
            if field is None or not isinstance(field.field_type, PrimitiveType):
                continue
            if _contains_null(data.null_value_counts, field) and _contains_null(delete.null_value_counts, field):
                continue
            if _all_null(data.null_value_counts, data.value_counts, field) and _all_non_null(
                delete.null_value_counts, field
            ):
                return False
            if _all_null(delete.null_value_counts, delete.value_counts, field) and _all_non_null(
                data.null_value_counts, field
            ):
                return False
            if not check_ranges:
                continue
            bounds = (data_lower.get(field_id), data_upper.get(field_id))
            bounds += (delete.lower_bounds.get(field_id), delete.upper_bounds.get(field_id))
            if any(b is None for b in bounds):
                continue
            lo, hi, del_lo, del_hi = (from_bytes(field.field_type, b) for b in bounds)
            try:
                if lo > del_hi or del_lo > hi:
                    return False
            except TypeError:  # values of no order: assume they overlap
                continue
        return True

    def _field(self, field_id: int) -> NestedField | None:
        try:
            return self.schema.find_field(field_id)
        except ValueError:
            return None


def _contains_null(null_counts: dict[int, int] | None, field: NestedField) -> bool:
    if field.required:
        return False
    if null_counts is None or null_counts.get(field.field_id) is None:
        return True
    return null_counts[field.field_id] > 0


def _all_null(null_counts: dict[int, int] | None, value_counts: dict[int, int] | None, field: NestedField) -> bool:
    if field.required or null_counts is None or value_counts is None:
        return False
    nulls, values = null_counts.get(field.field_id), value_counts.get(field.field_id)
    return nulls is not None and values is not None and nulls == values


def _all_non_null(null_counts: dict[int, int] | None, field: NestedField) -> bool:
    if field.required:
        return True
    if null_counts is None or null_counts.get(field.field_id) is None:
        return False
    return null_counts[field.field_id] <= 0
