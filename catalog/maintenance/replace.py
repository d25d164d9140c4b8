"""What both rewrites of table maintenance share (``rewrite_manifests.py``, ``compaction.py``): the main
branch's head and the live entries of its manifests, read with what they inherit made explicit,
and the ``replace`` snapshot each commits through the commit engine, marked as maintenance so the
engine tells it apart from a writer's."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile

from catalog import errors
from catalog.commit.changes import TABLE, Change
from catalog.commit.engine import CommitEngine
from catalog.database.pointers import Entry
from catalog.storage.backends import Storage
from catalog.storage.manifests import ENTRY_READ, FILE_ROW_ID, FIRST_ROW_ID, read_records

log = logging.getLogger("catalog.maintenance")

READ_THREADS = 8


def main_head(metadata: dict[str, Any]) -> dict[str, Any] | None:
    ref = (metadata.get("refs") or {}).get("main") or {}
    head_id = ref.get("snapshot-id", metadata.get("current-snapshot-id"))
    return next((s for s in metadata.get("snapshots") or [] if s.get("snapshot-id") == head_id), None)


def read_manifests(storage: Storage, manifests: Sequence[ManifestFile]) -> list[bytes]:
    """The bytes of ``manifests``, in their order, read ``READ_THREADS`` at a time."""
    with ThreadPoolExecutor(READ_THREADS, thread_name_prefix="maintenance-manifests") as pool:
        return list(pool.map(lambda m: storage.read(m.manifest_path), manifests))


def read_live_entries(storage: Storage, manifests: Sequence[ManifestFile]) -> list[ManifestEntry]:
    """Every live entry of ``manifests``, in their order, with what it inherits made explicit."""
    out: list[ManifestEntry] = []
    for m, raw in zip(manifests, read_manifests(storage, manifests), strict=True):
        out.extend(live_entries(m, read_records(raw, ENTRY_READ)[0]))
    return out


def live_entries(m: ManifestFile, entries: tuple[ManifestEntry, ...]) -> list[ManifestEntry]:
    """The live entries of ``m`` with their snapshot id, sequence numbers and (v3) first row id made
    explicit, as a reader inherits them (spec: "Sequence Number Inheritance", "First Row ID Inheritance")."""
    next_row_id = m._data[FIRST_ROW_ID] if len(m._data) > FIRST_ROW_ID else None
    out = []
    for e in entries:
        if e.status == ManifestEntryStatus.DELETED:
            continue
        if e.snapshot_id is None:
            e.snapshot_id = m.added_snapshot_id
        if e.sequence_number is None:
            e.sequence_number = m.sequence_number
        if e.file_sequence_number is None:
            e.file_sequence_number = m.sequence_number
        if m.content == ManifestContent.DATA and next_row_id is not None and e.data_file[FILE_ROW_ID] is None:
            e.data_file[FILE_ROW_ID] = next_row_id
            next_row_id += e.data_file.record_count
        e.data_file.spec_id = m.partition_spec_id
        out.append(e)
    return out


def replace_on_main(
    entry: Entry,
    metadata: dict[str, Any],
    head: dict[str, Any],
    snapshot_id: int,
    manifest_list: str,
    summary: dict[str, str],
    next_row_id: int,
) -> Change:
    """The catalog's own commit of a ``replace`` snapshot on main (a manifest rewrite, a compaction):
    parent ``head``, the next sequence number, v3's row-id range up to ``next_row_id`` (the list
    writer's), asserting main is still at ``head``; marked as maintenance."""
    version = metadata["format-version"]
    first_row_id = metadata.get("next-row-id", 0)
    snapshot: dict[str, Any] = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": head["snapshot-id"],
        "timestamp-ms": max(int(time.time() * 1000), int(head.get("timestamp-ms", 0))),
        "manifest-list": manifest_list,
        "summary": summary,
    }
    if head.get("schema-id") is not None:
        snapshot["schema-id"] = head["schema-id"]
    if version >= 2:
        snapshot["sequence-number"] = metadata.get("last-sequence-number", 0) + 1
    if version >= 3:
        snapshot["first-row-id"] = first_row_id
        snapshot["added-rows"] = next_row_id - first_row_id
    return Change(
        TABLE,
        entry.namespace,
        entry.name,
        requirements=[
            {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]},
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head["snapshot-id"]},
        ],
        updates=[
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
        maintenance=True,
    )


def commit_replace(
    engine: CommitEngine,
    change: Change,
    paths: list[str],
    mine: list[str],
    delete: Callable[[list[str]], None],
    what: str,
) -> Any | None:
    """Commit a maintenance job's ``replace`` snapshot (``replace_on_main``'s change): the committed
    metadata file, or None when a writer moved main (or replaced the table) meanwhile: the engine's
    409 goes to the job, never to the writer, and ``mine`` (the files written for this landing only,
    all in ``paths``: the job's written files) are deleted and dropped from ``paths``. Refused before
    the swap (``ServiceUnavailable``): certainly not committed, raised with ``paths`` kept for the job
    to delete. Any other failure may have landed (``CommitStateUnknown``): ``paths`` is emptied, the
    files are kept (orphans for orphan removal when it did not land)."""
    try:
        committed = engine.commit([change])
    except errors.CommitFailed as e:
        log.info("%s met a moved head: %s", what, e.message)
        for p in mine:
            paths.remove(p)
        delete(list(mine))
        return None
    except errors.ServiceUnavailable:
        raise
    except BaseException:
        paths.clear()
        raise
    return committed.files[0]  # type: ignore[union-attr]  # no key: never Replayed


def listed(m: ManifestFile, version: int) -> ManifestFile:
    """A copy the list writer may change (it assigns sequence numbers and v3 row ids in place); a
    manifest pyiceberg's writer made has no first_row_id field yet: v3 gives it one, unassigned."""
    if version < 3:
        return ManifestFile(*m._data[:FIRST_ROW_ID])
    return ManifestFile(*m._data, *([None] * (FIRST_ROW_ID + 1 - len(m._data))))


def metadata_dir(metadata: dict[str, Any]) -> str:
    props = metadata.get("properties") or {}
    return (props.get("write.metadata.path") or f"{metadata['location'].rstrip('/')}/metadata").rstrip("/")


def new_snapshot_id(metadata: dict[str, Any]) -> int:
    """A random positive id no snapshot of the table has (Java: from a random UUID)."""
    used = {s.get("snapshot-id") for s in metadata.get("snapshots") or []}
    while True:
        candidate = uuid.uuid4().int & ((1 << 63) - 1)
        if candidate not in used and candidate:
            return candidate
