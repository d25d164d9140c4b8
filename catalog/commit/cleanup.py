"""Delete-after-commit: the previous metadata files a commit pushed out of the metadata log are
deleted in the background, off the request path (``write.metadata.delete-after-commit.enabled``,
the table's, else ``CATALOG_METADATA_DELETE_AFTER_COMMIT`` unless the table has
``gc.enabled=false``). Only the files the table owns are deleted; when this falls behind, snapshot
expiry's sweep (maintenance/old_metadata.py) takes the rest. The engine hands it every commit that
moved a pointer (``CommitEngine._won``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from catalog.commit.changes import Staged
from catalog.database.ownership import Ownership
from catalog.settings import CommitSettings
from catalog.storage.metadata_files import MetadataFiles

log = logging.getLogger("catalog.commit")

DELETE_AFTER_COMMIT = "write.metadata.delete-after-commit.enabled"
CLEANUP_BACKLOG = 1000  # metadata files waiting for the background delete, at most
# How long the background delete waits before it takes what is pending: the commits of a busy table
# in that time share one ownership query (one per prefix) and, on S3, one DeleteObjects request,
# instead of one each. Measured with ``python -m bench --compare HEAD --ref-server-env
# CATALOG_METADATA_DELETE_AFTER_COMMIT=false``: one query per commit cost a hot table ~2.6 ms of
# server CPU per commit (docs/performance.md).
GATHER_SECONDS = 1.0


class MetadataCleanup:
    def __init__(self, settings: CommitSettings, files: MetadataFiles, ownership: Ownership) -> None:
        self.settings = settings
        self.files = files
        self.ownership = ownership
        self._cleanup = ThreadPoolExecutor(1, thread_name_prefix="metadata-cleanup")
        self._lock = threading.Lock()
        # entry id -> (its newest metadata, the files its commits pushed out of the log), not yet taken
        self._pending: dict[int, tuple[dict[str, Any], set[str]]] = {}
        self._pending_files = 0
        self._scheduled = False
        self._closed = threading.Event()

    def committed(self, one: Staged) -> None:
        """After ``one`` moved its entry's pointer: its dropped metadata files to delete, if wanted."""
        assert one.base is not None and one.entry is not None
        new = one.new.data
        properties = new.get("properties") or {}
        setting = properties.get(DELETE_AFTER_COMMIT)
        if setting is not None:
            wanted = str(setting).lower() == "true"
        else:  # the catalog's default, not on a table that keeps its files (gc.enabled=false)
            wanted = self.settings.metadata_delete_after_commit and str(properties.get("gc.enabled")).lower() != "false"
        if not wanted:
            return
        before = {e["metadata-file"] for e in one.base.data.get("metadata-log") or []} | {one.base.location}
        dropped = before.difference(e["metadata-file"] for e in new.get("metadata-log") or [])
        if not dropped:
            return
        with self._lock:
            if self._pending_files >= CLEANUP_BACKLOG:
                return  # behind: expiry's sweep deletes these
            _, files = self._pending.setdefault(one.entry.id, (new, set()))
            self._pending[one.entry.id] = (new, files)  # the newest metadata says what the table owns now
            self._pending_files += len(dropped - files)
            files |= dropped
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._cleanup.submit(self._delete_pending)
        except RuntimeError:  # shut down (the catalog is closing): expiry's sweep deletes them
            pass

    def _delete_pending(self) -> None:
        """After a short wait (the commits meanwhile join in), each table's pending files that it owns
        by its newest metadata, one ownership check per table."""
        self._closed.wait(GATHER_SECONDS)
        with self._lock:
            taken, self._pending, self._pending_files, self._scheduled = self._pending, {}, 0, False
        if self._closed.is_set():
            return  # closing: expiry's sweep deletes them
        for entry_id, (new, dropped) in taken.items():
            try:
                owned = self.ownership.owned(new, entry_id)
                mine = [location for location in sorted(dropped) if owned(location)]
                if mine:
                    self.files.delete_many(mine)
            except Exception:  # noqa: BLE001 - housekeeping after a successful commit must not fail anything
                log.warning("could not delete old metadata files %s", sorted(dropped)[:3])

    def close(self) -> None:
        """Stop the background clean-up (what is pending is left to snapshot expiry's sweep)."""
        self._closed.set()
        self._cleanup.shutdown(wait=False, cancel_futures=True)
