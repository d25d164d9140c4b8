"""The pure computations of a rebase (no I/O): what a new manifest's entry in the client's list
must say (``check_counts``), a live file's inherited identity (``identity``), which files a rebase
may read (``owned``, ``bounded``), the records of the rebuilt manifest list (``numbered``, ``fresh``,
``renumbered``: the new manifests' sequence number and, v3, their ``first_row_id``s left to the list
writer) and the rebased snapshot's summary totals (``with_totals``, Java's ``updateTotal``).
``rebase.Rebaser`` does the reading and writing around them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyiceberg.manifest import UNASSIGNED_SEQ, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile

from catalog import errors
from catalog.locations import is_within, normalise
from catalog.storage.manifests import FIRST_ROW_ID

# The largest manifest list or new manifest a rebase reads (a list of 10,000 manifests is ~2 MB);
# larger ones are refused (the client retries as before) rather than parsed under the table's lock.
MAX_FILE_BYTES = 16 * 2**20
TOTALS = (  # Java's SnapshotProducer.summary: total <- previous total + added - removed
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    ("total-data-files", "added-data-files", "deleted-data-files"),
    ("total-delete-files", "added-delete-files", "removed-delete-files"),
    ("total-position-deletes", "added-position-deletes", "removed-position-deletes"),
    ("total-equality-deletes", "added-equality-deletes", "removed-equality-deletes"),
)


class NotRebasable(Exception):
    """This commit cannot be rebased; the caller answers the original 409."""


def identity(entry: ManifestEntry, m: ManifestFile) -> tuple:
    """A live entry's snapshot id and sequence numbers as Java's reader inherits them from its
    manifest (spec: "Sequence Number Inheritance": only ADDED entries, or any in v1's sequence 0)."""
    inherits = m.sequence_number == 0 or entry.status == ManifestEntryStatus.ADDED
    snapshot_id = m.added_snapshot_id if entry.snapshot_id is None else entry.snapshot_id
    sequence = m.sequence_number if entry.sequence_number is None and inherits else entry.sequence_number
    file_sequence = m.sequence_number if entry.file_sequence_number is None and inherits else entry.file_sequence_number
    return snapshot_id, sequence, file_sequence


def holds_files(m: ManifestFile) -> bool:
    """Whether a manifest has live (ADDED or EXISTING) entries, or may have (counts missing)."""
    added, existing = m.added_files_count, m.existing_files_count
    return added is None or existing is None or added + existing > 0


def bounded(raw: bytes) -> bytes:
    if len(raw) > MAX_FILE_BYTES:
        raise NotRebasable(f"a manifest file of {len(raw)} bytes")
    return raw


def check_counts(m: ManifestFile, snapshot: dict, version: int) -> None:
    """What the list says of a new manifest: data files, added ones with inherited sequence numbers,
    and existing ones only in a merged manifest (whose least sequence number is then its oldest
    file's), never deleted ones."""
    if m.content != ManifestContent.DATA:
        raise NotRebasable("a delete manifest")
    counts = (m.added_files_count, m.added_rows_count, m.existing_files_count, m.existing_rows_count)
    if None in counts or (m.deleted_files_count, m.deleted_rows_count) != (0, 0):
        raise NotRebasable("a manifest with deleted entries (or without its counts)")
    if version >= 2:
        expected = {snapshot.get("sequence-number"), UNASSIGNED_SEQ}
        least_ok = m.existing_files_count > 0 or m.min_sequence_number in expected
        if m.sequence_number not in expected or not least_ok:
            raise NotRebasable("a manifest with sequence numbers of its own")


def owned(location: Any, base: dict) -> str:
    """A file the rebase reads: inside the table's location or its metadata path, else refused."""
    try:
        normal = normalise(location)
        roots = [base["location"], *[(base.get("properties") or {}).get("write.metadata.path") or ""]]
        if any(root and is_within(normal, normalise(root)) for root in roots):
            return location
    except errors.IcebergError:
        pass
    raise NotRebasable(f"a file outside the table's location: {location!r}")


def with_totals(summary: dict, previous: dict) -> dict:
    """Java's ``updateTotal``: each total from the head's, when the head has it and it parses."""
    out = {k: v for k, v in summary.items() if k not in {total for total, _, _ in TOTALS}}
    for total, added, removed in TOTALS:
        try:
            value = int(previous[total]) + int(summary.get(added, 0)) - int(summary.get(removed, 0))
        except (KeyError, TypeError, ValueError):
            continue
        if value >= 0:
            out[total] = str(value)
    return out


def numbered(head: Sequence[ManifestFile], version: int) -> bool:
    """Whether the head's manifests can be carried as they are: in v3, only when every data manifest
    already has its first_row_id (the list writer assigns the missing ones, which changes them)."""
    return version < 3 or all(m.content != ManifestContent.DATA or m._data[FIRST_ROW_ID] is not None for m in head)


def fresh(m: ManifestFile, version: int) -> ManifestFile:
    """A copy the writer may change (pyiceberg's writers copy shallowly, sharing the field list)."""
    return ManifestFile(*(m._data if version >= 3 else m._data[:FIRST_ROW_ID]))


def renumbered(m: ManifestFile, version: int, sequence: int) -> ManifestFile:
    """A new manifest with the rebased commit's sequence number (its entries inherit it; checked)
    and, v3, no row ids yet: the list writer assigns them."""
    copy = fresh(m, version)
    if version >= 2:
        copy.sequence_number = copy.min_sequence_number = sequence
    if version >= 3:
        copy._data[FIRST_ROW_ID] = None
    return copy
