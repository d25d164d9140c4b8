"""The inline committer: a commit run on the event loop itself, through the engine's public steps
(``locate``, ``apply``, ``encode``, ``swap``, under ``serialised``), when it can run without
waiting for long: one entry, not a create, its current metadata file cached and at most
``INLINE_MAX_BYTES``, no rebase to build, its slot lock and the database's writer (SQLite) each
free within ``INLINE_WAIT_S``, and the CAS won at the first attempt. At the first of these that
does not hold it stops (``WouldWait``), having landed nothing and left no file, and answers None:
the caller runs ``CommitEngine.commit`` on a thread, from the start.

Only for a store and a storage on local disk: the wiring (``Catalog``) builds one only then, and
hands it the ``LocalStorage`` it writes the new file through.

Why: a commit handed to a worker thread hands the GIL back and forth with the event loop at every
I/O call; measured on 2 cores, that cost about as much CPU as the commit itself
(``docs/performance.md``). One call does leave the loop: the new file's ``fdatasync`` (``_write``),
the commit's one wait on the disk, so that the loop serves other requests meanwhile
(``others_waiting``: the server has other requests in progress; see ``_attempt`` for when else the
sync stays). Inline commits of one slot queue on the loop (``_queued``) while one of them is away,
so a hot table's commits stay inline. (The short waits are what bring a hot table back inline
after a commit on a thread, which holds the table's lock.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from catalog import errors, metrics
from catalog.commit.changes import Change, Committed, Outcome, Staged, WouldWait, not_committed, slot
from catalog.commit.conflicts import Resolved
from catalog.commit.engine import CommitEngine, log_landed, step
from catalog.commit.rebasable import Candidate
from catalog.database.pointers import KeyRecord
from catalog.storage.backends import LocalStorage
from catalog.storage.metadata_files import MetadataFile

# The largest current metadata file a commit is run inline on: building and writing its successor
# then stalls the event loop for about a millisecond at most.
INLINE_MAX_BYTES = 1024 * 1024
# The most an inline commit waits for a lock (its table's, SQLite's writer) before it goes to a thread.
INLINE_WAIT_S = 0.002
# How long after a failed requirement a table's inline commits sync their file on the loop (``_attempt``).
RACING_S = 1.0


class InlineCommitter:
    def __init__(self, engine: CommitEngine, storage: LocalStorage) -> None:
        self.engine = engine
        self.storage = storage  # the engine's, on local disk: the new file is written and synced here
        self._queues: dict[int, _Queue] = {}  # lock slot -> its inline commits' queue (``_queued``)

    async def commit(
        self, changes: Sequence[Change], key: KeyRecord | None = None, others_waiting: bool = True
    ) -> Outcome | None:
        """``CommitEngine.commit`` on the event loop, or None (see the module docstring)."""
        if len(changes) != 1 or changes[0].creates:
            return None
        groups = self.engine.groups
        if groups is not None and groups.eligible(changes, key) and not groups.known_off(changes[0]):
            metrics.COMMITS_TO_THREAD.labels("group").inc()  # a group's leader waits for its members
            return None
        change = changes[0]
        async with self._queued(slot(change)) as queue:
            with self.engine.measuring(changes, commit_inline=True) as kind:
                return await self._attempt(change, key, kind, queue, others_waiting)
        return None  # gone to a thread (``measuring`` counted why)

    async def _attempt(
        self, change: Change, key: KeyRecord | None, kind: str, queue: _Queue, others_waiting: bool
    ) -> Outcome:
        """One attempt of the engine's loop on the event loop; ``WouldWait`` rather than wait long or
        rebase."""
        engine = self.engine
        with engine.serialised([change], INLINE_WAIT_S):
            with step(kind, "read"):
                entry = engine.locate(change, INLINE_WAIT_S)
                base = self._cached(entry.metadata_location)  # type: ignore[union-attr]  # not a create
            engine.note(change, base.data)
            with step(kind, "apply"):
                new, _ = engine.apply(change, base, rebasable=True, resolve=self._resolve)
            if new is base.data:  # nothing changed
                return Committed((base,), recorded=False)
            staged = engine.encode(change, entry, base, new, kind)
            # The sync leaves the loop only when the loop has other work meanwhile and no order is
            # lost by it. A lone request's commit would only pay the hand-over (one writer: 0.95x).
            # A commit that others of its slot queue behind is waited for either way, and its
            # return from a thread lengthened their chain (16 writers on one table: 0.74x). A table
            # whose writers' requirements failed lately keeps strict order: a load served during
            # the sync would hand out the state being replaced, and its client's next commit fail
            # too (16 appenders on one table: 0.81x).
            lately = time.monotonic() - engine.conflicts.refused_at(change)
            off_loop = others_waiting and queue.users == 1 and lately > RACING_S
            await self._write(staged, kind, off_loop)
            outcome = engine.swap([staged.new], [staged], key, kind, INLINE_WAIT_S)
            if outcome is None:  # lost to another process: the thread rebases, with its backoff
                engine.discard([staged])
                metrics.REBASES.inc()
                raise WouldWait("lost")
            if isinstance(outcome, Committed):
                log_landed([staged], 1)
            return outcome

    def _cached(self, location: str) -> MetadataFile:
        """The current metadata file, when it is in memory and at most ``INLINE_MAX_BYTES``."""
        base = self.engine.files.cached(location)
        if base is None or len(base.raw) > INLINE_MAX_BYTES:
            raise WouldWait("file")
        return base

    def _resolve(
        self, change: Change, base: MetadataFile | None, failed: errors.CommitFailed, now_ms: int, rebasable: bool
    ) -> Resolved:
        """A failed requirement on the loop: a rollback lands here; a rebase, which reads and writes
        manifest lists, goes to a thread."""
        conflicts = self.engine.conflicts
        plan = conflicts.plan(change, base, failed, rebasable)
        if isinstance(plan, Candidate):
            raise WouldWait("rebase")
        return conflicts.land(change, base, failed, plan, now_ms)

    async def _write(self, one: Staged, kind: str, off_loop: bool) -> None:
        """Write the new file: created and written on the loop, then made durable (``fdatasync``:
        the commit's one wait on the disk) on a worker thread when ``off_loop``. Nothing points at
        the file yet; if the request is cancelled while it syncs, it is deleted once synced."""
        data, one.unwritten = one.unwritten, None
        assert data is not None  # ``CommitEngine.encode``
        storage, location = self.storage, one.new.location
        with step(kind, "write"):
            try:
                fd = storage.write_unsynced(location, data)
                if not off_loop:
                    storage.sync_new(location, fd)
                    return
                synced = asyncio.get_running_loop().run_in_executor(None, storage.sync_new, location, fd)
                try:
                    await asyncio.shield(synced)
                except asyncio.CancelledError:
                    synced.add_done_callback(
                        lambda done: done.cancelled() or done.exception() or self.engine.discard([one])
                    )
                    raise
            except errors.IcebergError as e:
                raise not_committed(e) from e

    @asynccontextmanager
    async def _queued(self, slot: int) -> AsyncIterator[_Queue]:
        """The event loop's queue for one lock slot: an inline commit waits here, without blocking
        the loop, while another inline commit of the slot is away (its file syncing off the loop)."""
        queue = self._queues.get(slot)
        if queue is None:
            queue = self._queues[slot] = _Queue()
        queue.users += 1
        try:
            async with queue.lock:
                yield queue
        finally:
            queue.users -= 1
            if not queue.users:
                del self._queues[slot]


class _Queue:
    """``InlineCommitter._queued``: a slot's lock on the event loop and the commits using it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0
