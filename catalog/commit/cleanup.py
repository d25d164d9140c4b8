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
CLEANUP_BACKLOG = 1000  # commits whose dropped metadata files wait for the background delete, at most


class MetadataCleanup:
    def __init__(self, settings: CommitSettings, files: MetadataFiles, ownership: Ownership) -> None:
        self.settings = settings
        self.files = files
        self.ownership = ownership
        self._cleanup = ThreadPoolExecutor(1, thread_name_prefix="metadata-cleanup")
        self._cleanup_pending = 0  # submitted and not done (a soft bound: read without the lock)
        self._cleanup_lock = threading.Lock()

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
        after = {e["metadata-file"] for e in new.get("metadata-log") or []}
        dropped = sorted(before - after)
        if not dropped or self._cleanup_pending >= CLEANUP_BACKLOG:
            return  # nothing fell out, or behind: expiry's sweep deletes these
        with self._cleanup_lock:
            self._cleanup_pending += 1
        try:
            self._cleanup.submit(self._delete_owned, new, one.entry.id, dropped)
        except RuntimeError:  # shut down (the catalog is closing): expiry's sweep deletes them
            with self._cleanup_lock:
                self._cleanup_pending -= 1

    def _delete_owned(self, new: dict[str, Any], entry_id: int, dropped: list[str]) -> None:
        try:
            owned = self.ownership.owned(new, entry_id)
            for location in dropped:
                if owned(location):
                    self.files.delete(location)
        except Exception:  # noqa: BLE001 - housekeeping after a successful commit must not fail anything
            log.warning("could not delete old metadata files %s", dropped[:3])
        finally:
            with self._cleanup_lock:
                self._cleanup_pending -= 1

    def close(self) -> None:
        """Stop the background clean-up (what is queued is left to snapshot expiry's sweep)."""
        self._cleanup.shutdown(wait=False, cancel_futures=True)
