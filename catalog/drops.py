"""What a drop starts and what ends it (``Catalog``'s collaborator for dropped entries): the drop,
which queues the purge due now; the dropped entries read back; the undrop; and the end of a
retention, a purge queued or the entry released. The rows are ``database/dropped.py``'s, the purge
``maintenance/jobs.py``'s.
"""

from __future__ import annotations

import logging

from catalog import errors
from catalog.database.dropped import Dropped, DroppedRows
from catalog.database.entries import Entries
from catalog.database.pointers import Entry
from catalog.database.tasks import TaskRows
from catalog.maintenance.jobs import PURGE

log = logging.getLogger("catalog.usecases")  # the use cases' logger: their lines are as they were


class Drops:
    """The dropped entries' use cases past the name lookup, over the parts they use."""

    def __init__(self, entries: Entries, dropped: DroppedRows, tasks: TaskRows) -> None:
        self.entries = entries
        self.dropped_rows = dropped
        self.tasks = tasks

    def drop(self, entry: Entry, purge: bool, retention_ms: int, by: str | None) -> Dropped | None:
        """``Catalog.drop`` once the entry is found: kept ``retention_ms``, a purge due now queued."""
        gone = self.entries.drop_entry(entry, purge, retention_ms, by)
        if gone is not None and purge and gone.expires_ms <= gone.dropped_ms:
            self.tasks.enqueue(PURGE, gone.id, None, gone.namespace, gone.name)
        return gone

    def dropped_entry(self, dropped_id: int) -> Dropped:
        gone = self.dropped_rows.get_dropped(dropped_id)
        if gone is None:
            raise missing_dropped(dropped_id)
        return gone

    def undrop(self, dropped_id: int) -> Entry:
        entry = self.entries.undrop_entry(dropped_id)
        log.info("%s %s undropped: %s", entry.kind, entry.ident, entry.metadata_location)
        return entry

    def end_retention(self, dropped_id: int) -> Dropped:
        gone = self.dropped_rows.end_retention(dropped_id)
        if gone is None:
            raise missing_dropped(dropped_id)
        if gone.purge:
            self.tasks.enqueue(PURGE, gone.id, None, gone.namespace, gone.name)
        else:
            self.dropped_rows.forget_dropped([gone.id])
        return gone


def missing_dropped(dropped_id: int) -> errors.NotFound:
    """The answer for a dropped entry's id that names none, and for one the caller may not see."""
    return errors.NotFound(f"Dropped table or view does not exist: {dropped_id}")
