"""Group commit: appends queued on one hot table land together, in ONE metadata file and ONE CAS.

Only commits that are shaped like an append (one table, ``add-snapshot`` + ``set-snapshot-ref``, no
Idempotency-Key) of a table with append rebase on are grouped; everything else takes the engine's
ordinary path. Per table and process, one committer at a time (the leader) takes what queued while
the previous group was landing, in arrival order, bounded by ``group_commit_max_commits`` and
``group_commit_max_bytes``. Nobody waits for a group to fill: a lone commit is a group of one and
lands at once, and a group is exactly what arrived while the one before it was committing.

The leader applies the members one after the other, each on the result of the one before (as the
engine's lock would have made them, so a member stale by then is rebased or refused exactly as it
would have been alone), writes one metadata file holding all their snapshots, and swaps the pointer
once. A member whose requirements fail is answered its own 409 (or 400) and left out; the others
land. Every member that landed is answered with that file, which contains its snapshot. A lost CAS
(another process or replica) rebuilds the whole group on the new pointer; an unknown outcome is
every member's 500, as it would be alone. The metadata log gains one entry per group, and each
snapshot its own snapshot-log entry.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from catalog import errors, metrics, tracing
from catalog.commit import rebasable, rebase
from catalog.commit.changes import TABLE, Change, Committed, changed_concurrently
from catalog.commit.engine import CommitEngine, backoff, log_landed
from catalog.database.pointers import KeyRecord
from catalog.storage.metadata_files import MetadataFile

_REMEMBERED = 100_000  # tables whose rebase is known off


@dataclass(eq=False)
class _Member:
    change: Change
    size: int
    done: bool = False
    outcome: Committed | None = None
    error: BaseException | None = None


@dataclass(eq=False)
class _Table:
    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: deque[_Member] = field(default_factory=deque)
    leading: bool = False


class GroupCommitter:
    def __init__(self, engine: CommitEngine) -> None:
        self.engine = engine
        self.settings = engine.settings
        self._tables: dict[tuple, _Table] = {}
        self._lock = threading.Lock()
        # Tables whose metadata, as this process last read or wrote it, has append rebase off: their
        # appends take the ordinary path without the pointer read that ``commit`` would make only to
        # find that out again. A stale entry costs nothing but grouping: the ordinary path reads the
        # pointer under the lock and rebases (or not) on what it finds, and records it here.
        self._rebase_off: set[tuple] = set()

    def eligible(self, changes: Sequence[Change], key: KeyRecord | None) -> bool:
        if self.settings.group_commit_max_commits <= 1 or key is not None or len(changes) != 1:
            return False
        change = changes[0]
        return change.kind is TABLE and not change.creates and rebasable.append_shaped(change.updates)

    def commit(self, change: Change) -> Committed | None:
        """Queue ``change``; lead a group or wait for the leader that takes it. Raises its error.
        None: the table's rebase is off, so the engine commits it alone, as before."""
        if (change.namespace, change.name) in self._rebase_off:
            return None
        try:
            _, base = self.engine.read(change)
        except errors.IcebergError:
            return None  # the ordinary path gives the answer (404...)
        if base is not None:
            self.note(change, base.data)
        if base is None or not rebasable.enabled(base.data, self.settings.append_rebase):
            return None
        start = time.perf_counter()
        try:
            return self._queue(change)
        finally:
            metrics.COMMIT_SECONDS.labels("table").observe(time.perf_counter() - start)

    def note(self, change: Change, data: dict) -> None:
        """What the table's metadata (read or just written by the engine) says of append rebase."""
        key = (change.namespace, change.name)
        if rebasable.enabled(data, self.settings.append_rebase):
            self._rebase_off.discard(key)
        elif key not in self._rebase_off:
            if len(self._rebase_off) >= _REMEMBERED:
                self._rebase_off.clear()  # forgetting costs one pointer read per table
            self._rebase_off.add(key)

    def known_off(self, change: Change) -> bool:
        """Whether the table's metadata, as this process last saw it, has append rebase off: its
        appends take the ordinary path, never a group."""
        return (change.namespace, change.name) in self._rebase_off

    def _queue(self, change: Change) -> Committed:
        member = _Member(change, len(orjson.dumps(list(change.updates))))
        key = (change.namespace, change.name)
        with self._lock:
            table = self._tables.setdefault(key, _Table())
        with table.cond:
            table.queue.append(member)
            while not member.done and table.leading:
                table.cond.wait()
            if member.done:  # landed by a leader: this thread never led, so it must not clear `leading`
                return self._answer(member)
            table.leading = True
        try:
            while not member.done:  # lead until this member's own group has landed
                batch = self._take(table)
                if not batch:  # its member is in no queue and not done: cannot happen, never spin
                    member.error, member.done = errors.IcebergError("group commit lost a commit"), True
                    break
                try:
                    self._land(batch)
                except BaseException as e:  # noqa: BLE001 - every member of a failed group gets the error
                    for one in batch:
                        if not one.done:
                            one.error, one.done = e, True
                with table.cond:
                    table.cond.notify_all()
        finally:
            with table.cond:
                table.leading = False
                table.cond.notify_all()
                if not table.queue:
                    with self._lock:
                        if self._tables.get(key) is table:
                            del self._tables[key]
        return self._answer(member)

    @staticmethod
    def _answer(member: _Member) -> Committed:
        if member.error is not None:
            raise member.error
        assert member.outcome is not None
        return member.outcome

    def _take(self, table: _Table) -> list[_Member]:
        limit, budget = self.settings.group_commit_max_commits, self.settings.group_commit_max_bytes
        batch: list[_Member] = []
        with table.cond:
            while table.queue and len(batch) < limit:
                if batch and sum(m.size for m in batch) + table.queue[0].size > budget:
                    break
                batch.append(table.queue.popleft())
        return batch

    def _land(self, batch: list[_Member]) -> None:
        """Apply, write and swap the group until it lands or fails; settles every member."""
        engine, change = self.engine, batch[0].change
        with (
            tracing.span("commit.group", catalog_entries=change.ident, commit_group_size=len(batch)),
            engine.serialised([change]),
            engine.rebaser.for_group() as files,
        ):
            live = batch
            for attempt in range(self.settings.append_rebase_max_attempts):
                live, landed = self._attempt(live, attempt + 1, files)
                if landed:
                    break
                metrics.REBASES.inc()
                backoff(self.settings, attempt)
            else:
                metrics.CONFLICTS.labels("cas").inc()
                failed = changed_concurrently(change.ident, attempt + 1)
                for one in live:
                    one.error, one.done = failed, True

    def _attempt(self, members: list[_Member], attempts: int, files: rebase.GroupFiles) -> tuple[list[_Member], bool]:
        """One read-apply-write-CAS of the group, through the engine's steps. Returns the members
        still in it and whether the attempt settled them (landed, or failed for all); False: the CAS
        was lost, go again. ``files``: the members' manifest lists, read and written in parallel."""
        engine, change = self.engine, members[0].change
        entry, base = engine.read(change)
        assert entry is not None and base is not None
        files.fetch([one.change.updates[0]["snapshot"] for one in members], base.data)
        current, lists, manifests, live = base, [], [], []
        for one in members:
            try:
                new, rebased = engine.apply(one.change, current, rebasable=True)
            except errors.IcebergError as e:
                one.error, one.done = e, True
                continue
            if rebased is not None:
                lists.append(rebased.manifest_list)
                manifests.extend(rebased.manifests)
            if new is not current.data:
                current = MetadataFile(None, b"", new)  # type: ignore[arg-type]  # no file: no log entry
            live.append(one)
        if current is base:
            for one in live:
                one.outcome, one.done = _committed(base), True
            return live, True
        files.flush()  # the rebased lists, before the metadata file that names them
        staged = engine.write(change, entry, base, current.data, "table", tuple(lists), len(live), tuple(manifests))
        if engine.swap([staged.new], [staged], None, "table") is None:  # lost: the files are orphans
            engine.discard([staged])
            return live, False
        metrics.GROUP_COMMIT_SIZE.observe(len(live))
        for one in live:
            one.outcome, one.done = _committed(staged.new), True
        log_landed([staged], attempts)
        return live, True


def _committed(file: MetadataFile) -> Committed:
    return Committed((file,), recorded=False)
