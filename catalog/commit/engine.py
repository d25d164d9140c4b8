"""The commit engine: the one loop that moves pointers. updateTable, transactions/commit,
replaceView and creates (plain and staged) all run through ``CommitEngine.commit``; tables and views
plug in only their pure requirement-and-update function (``catalog.metadata``).

Per attempt, under the entries' process-local locks:
  1. read each entry's pointer and that metadata file (cached by location: files are immutable);
  2. apply: check the requirements and apply the updates (pure). A failed requirement is a 409 and
     is NOT retried: the client's premise is stale. An unchanged result ends the commit;
  3. check the locations the new metadata claims (``ownership``), write the new file create-only;
  4. compare-and-swap every pointer in ONE transaction, with the Idempotency-Key's row (a create
     inserts its row instead).
Losing the CAS means another commit landed in between: the orphan files are deleted, the
requirements are checked on the new pointer at once (a 409 needs no backoff), and after a jittered
backoff the loop goes again from 1 (a server-side rebase). A failed COMMIT is settled by a fresh
read of the pointers; if that cannot tell, the answer is 500 CommitStateUnknown and the files are
kept, since one of them may be the committed one.

The locks make a commit that queued behind another read the pointer that one left, so a stale
requirement is refused without writing a file. Between processes and replicas the CAS alone
decides, as it does for correctness everywhere.

The engine has one mode. What a failed requirement becomes (a rebase, a rollback over the
catalog's maintenance, the 409) is ``conflicts.py``'s; group commit (``grouping.py``) and the
inline committer on the event loop (``inline.py``) drive the public steps from outside.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

from catalog import errors, logs, metrics, tracing
from catalog.commit import rebase, rollback
from catalog.commit.changes import (
    MAINTENANCE_JOB,
    SLOTS,
    TABLE,
    Change,
    Committed,
    Grouping,
    Outcome,
    Replayed,
    Staged,
    WouldWait,
    changed_concurrently,
    not_committed,
    slot,
)
from catalog.commit.cleanup import MetadataCleanup
from catalog.commit.conflicts import Conflicts, Resolved
from catalog.database.entries import Entries, name_taken
from catalog.database.ownership import Ownership
from catalog.database.pointers import Entry, InlineBusy, KeyRecord, PointerOutcomeUnknown, Pointers, Swap, Swapped
from catalog.database.sql import what_failed
from catalog.settings import CommitSettings
from catalog.storage.metadata_files import MetadataFile, MetadataFiles, next_location

log = logging.getLogger("catalog.commit")


class CommitEngine:
    """The loop (``commit``) and its public steps (``read``, ``apply``, ``write``, ``swap``,
    ``discard``, under ``serialised``), which group commit (``grouping.py``) and the inline
    committer (``inline.py``) drive from outside. ``grouping``: builds the group committer this
    engine offers each commit first (the wiring passes ``grouping.GroupCommitter``; None: no group
    commit)."""

    def __init__(
        self,
        settings: CommitSettings,
        pointers: Pointers,
        entries: Entries,
        files: MetadataFiles,
        ownership: Ownership,
        grouping: Callable[[CommitEngine], Grouping] | None = None,
    ) -> None:
        self.settings = settings
        self.pointers = pointers  # the read and the CAS (with its events and Idempotency-Key)
        self.entries = entries  # a create's insert
        self.files = files
        self.ownership = ownership
        self.rebaser = rebase.Rebaser(files.storage)
        self.conflicts = Conflicts(settings, self.rebaser, self._delete_quietly, _step)
        self.groups = grouping(self) if grouping is not None else None
        self._locks = [threading.Lock() for _ in range(SLOTS)]
        self.cleanup = MetadataCleanup(settings, files, ownership)  # delete-after-commit, in the background

    def commit(self, changes: Sequence[Change], key: KeyRecord | None = None) -> Outcome:
        """Apply ``changes`` atomically: every pointer moves, or none does. ``key``: the request's
        Idempotency-Key record, written in the CAS transaction (its ``metadata_location`` is filled
        in with the first change's new file)."""
        if self.groups is not None and self.groups.eligible(changes, key):
            grouped = self.groups.commit(changes[0])
            if grouped is not None:
                return grouped
        with self.measuring(changes) as kind:
            return self._loop(changes, key, kind)
        raise AssertionError("only a bounded attempt (``WouldWait``) ends the block quietly")

    @contextmanager
    def measuring(self, changes: Sequence[Change], **span: Any) -> Iterator[str]:
        """The commit's span (with the ``span`` attributes) and duration metric around the block,
        which gets the commit's kind. A bounded attempt that stops (``WouldWait``: an inline commit
        going to a thread) is counted there instead (its span says why) and ends the block quietly,
        and the thread's commit is measured."""
        kind = changes[0].kind.name if len(changes) == 1 else "transaction"
        start: float | None = time.perf_counter()
        entries = ", ".join(c.ident for c in changes)[:512] if tracing.enabled() else None
        with tracing.span("commit", commit_kind=kind, catalog_entries=entries, **span) as current:
            try:
                yield kind
            except WouldWait as e:
                start = None
                metrics.COMMITS_TO_THREAD.labels(e.reason).inc()
                if current is not None:
                    current.set_attribute("commit.to_thread", e.reason)
            finally:
                if start is not None:
                    metrics.COMMIT_SECONDS.labels(kind).observe(time.perf_counter() - start)

    def _loop(self, changes: Sequence[Change], key: KeyRecord | None, kind: str) -> Outcome:
        """The attempts: stage, swap; rebase on a lost CAS (see the module docstring)."""
        for attempt in range(self.settings.commit_max_attempts):
            with self.serialised(changes):
                try:
                    current, staged = self._stage(changes, kind)
                except errors.AlreadyExists:  # a create whose twin (same key) created it first
                    if key is not None and changes[0].creates and self.pointers.get_key(key.key) is not None:
                        return Replayed()
                    raise
                if not staged:  # nothing changed
                    return Committed(tuple(current), recorded=False)
                outcome = self.swap(current, staged, key, kind)
                if outcome is not None:
                    if isinstance(outcome, Committed):
                        log_landed(staged, attempt + 1)
                    return outcome
            self._lost(changes, staged, attempt, kind)
        names = ", ".join(c.ident for c in changes)
        metrics.CONFLICTS.labels("cas").inc()
        log.warning("commit conflict: %s=%s cause=cas attempts=%d", kind, names, attempt + 1)
        raise changed_concurrently(names, attempt + 1)

    # -- steps 1-3 -------------------------------------------------------------------------------

    def _stage(self, changes: Sequence[Change], kind: str) -> tuple[list[MetadataFile], list[Staged]]:
        """Read, apply and write every change: each change's file after the commit (the new one, or
        the base when the change is a no-op) and the written-but-uncommitted ones. A failure deletes
        the files already written."""
        current: list[MetadataFile] = []
        staged: list[Staged] = []
        try:
            for change in changes:
                one = self._stage_one(change, kind, alone=len(changes) == 1)
                if isinstance(one, Staged):
                    staged.append(one)
                    current.append(one.new)
                else:
                    current.append(one)
        except BaseException:
            self.discard(staged)
            raise
        return current, staged

    def _stage_one(self, change: Change, kind: str, alone: bool) -> Staged | MetadataFile:
        with _step(kind, "read"):
            entry, base = self.read(change)
        if base is not None:
            self.note(change, base.data)
        with _step(kind, "apply"):
            new, rebased = self.apply(change, base, rebasable=alone)
        if base is not None and new is base.data:
            return base
        if rebased is None:
            return self.write(change, entry, base, new, kind)
        return self.write(change, entry, base, new, kind, (rebased.manifest_list,), manifests=rebased.manifests)

    def write(
        self,
        change: Change,
        entry: Entry | None,
        base: MetadataFile | None,
        new: dict[str, Any],
        kind: str,
        lists: tuple[str, ...] = (),
        commits: int = 1,
        manifests: tuple[str, ...] = (),
    ) -> Staged:
        """Step 3: the new metadata file, written create-only after the location rules are checked.
        If it fails, the manifest lists (and manifests) rebases wrote for it are deleted."""
        try:
            with _step(kind, "write"):
                return self._staged(change, entry, base, new, self._written, lists, commits, manifests)
        except BaseException:
            for location in (*lists, *manifests):
                self._delete_quietly(location)
            raise

    def encode(
        self, change: Change, entry: Entry | None, base: MetadataFile | None, new: dict[str, Any], kind: str
    ) -> Staged:
        """``write``, but the file's bytes are kept in ``Staged.unwritten`` for the caller to write
        (the inline committer, which makes the file durable off the event loop)."""
        with _step(kind, "encode"):  # the file's write is the caller's own step
            return self._staged(change, entry, base, new, self.files.prepare)

    def _written(self, at: str, new: dict[str, Any], base: MetadataFile | None) -> tuple[MetadataFile, None]:
        return self.files.write(at, new, base), None

    def _staged(
        self,
        change: Change,
        entry: Entry | None,
        base: MetadataFile | None,
        new: dict[str, Any],
        make: Callable[[str, dict[str, Any], MetadataFile | None], tuple[MetadataFile, bytes | None]],
        lists: tuple[str, ...] = (),
        commits: int = 1,
        manifests: tuple[str, ...] = (),
    ) -> Staged:
        location, paths = self.ownership.check_new(
            entry.id if entry else None, base.data if base else None, new, change.superseding
        )
        try:
            written, unwritten = make(next_location(new, entry.metadata_location if entry else None), new, base)
        except errors.IcebergError as e:
            raise not_committed(e) from e
        return Staged(change, entry, base, written, location, lists, commits, manifests, unwritten, paths)

    def locate(self, change: Change, wait: float | None = None) -> Entry | None:
        """Step 1's pointer read: the change's entry (None for a create), or the 404 (or, for a
        create, the 409). ``wait``: the most seconds to wait for the database (SQLite), then
        ``WouldWait``."""
        try:
            entry = self.pointers.get_entry(change.namespace, change.name, wait)
        except InlineBusy:
            raise WouldWait("writer") from None
        if change.creates:
            if entry is not None:
                raise name_taken(change.kind.name, entry.kind, change.ident)
            return None
        if entry is None or entry.kind != change.kind.name:
            raise change.kind.missing(f"{change.kind.noun} does not exist: {change.ident}")
        return entry

    def read(self, change: Change) -> tuple[Entry | None, MetadataFile | None]:
        """Step 1: the entry and its metadata file."""
        entry = self.locate(change)
        return entry, None if entry is None else self.files.read(entry.metadata_location)

    def note(self, change: Change, data: dict[str, Any]) -> None:
        """Tell group commit what a table's metadata, as just read or written, says of append rebase."""
        if self.groups is not None and change.kind is TABLE:
            self.groups.note(change, data)

    def apply(
        self,
        change: Change,
        base: MetadataFile | None,
        rebasable: bool = False,
        resolve: Callable[..., Resolved] | None = None,
    ) -> Resolved:
        """Step 2: the new metadata (``base.data`` itself when nothing changed). A failed requirement
        goes to ``resolve`` (``Conflicts.resolve`` unless given): a 409, unless the commit is a
        pure append whose branch moved and rebase is on: then it is rebuilt on the branch's head
        (``catalog.commit.rebase``) and the second value is that rebase, whose manifest list is
        written; or unless it landed on its base over the catalog's maintenance
        (``catalog.commit.rollback``). Only a commit of one table is ``rebasable`` (a multi-table
        transaction may rely on what it read)."""
        if change.created is not None:
            return change.created, None
        if not change.maintenance and rollback.marked(change.updates):
            raise errors.BadRequest(f"A snapshot summary may not carry {MAINTENANCE_JOB}: it marks the catalog's own")
        now_ms = int(time.time() * 1000)
        try:
            new = change.kind.apply(
                base.data if base else None,
                list(change.requirements),
                list(change.updates),
                base_location=base.location if base else None,
                now_ms=now_ms,
            )
            if change.guard is not None and base is not None:
                change.guard(base.data, new)
            return new, None
        except errors.RequirementFailed as e:
            return (resolve or self.conflicts.resolve)(change, base, e, now_ms, rebasable)
        except errors.CommitFailed as e:  # the client's premise no longer holds: refused, not retried
            raise self.conflicts.refused(change, e) from None

    # -- step 4 ----------------------------------------------------------------------------------

    def swap(
        self,
        current: list[MetadataFile],
        staged: list[Staged],
        key: KeyRecord | None,
        kind: str,
        wait: float | None = None,
    ) -> Outcome | None:
        """Step 4: the CAS (or, for a create, the insert). None: lost, go again. ``wait``: the most
        seconds to wait for the database's writer (SQLite), then ``WouldWait`` with the files deleted."""
        if key is not None and key.status == 200:  # a 200 is the (first) entry's new metadata
            key = KeyRecord(key.key, key.fingerprint, key.status, metadata_location=current[0].location)
        creates = [s for s in staged if s.entry is None]
        metrics.COMMIT_ATTEMPTS.inc()
        with _step(kind, "cas"):
            if creates:  # a create commits alone (the API refuses creates in transactions)
                if not self._insert(creates[0], key):
                    return Replayed()
                return self._won(current, staged, kind, recorded=key is not None)
            swaps = [
                Swap(
                    s.entry.id,
                    s.entry.metadata_location,
                    s.new.location,
                    s.location,
                    s.location != s.entry.location,
                    s.write_paths,
                )
                for s in staged
            ]
            events = [s.event() for s in staged] if self.pointers.events_on else []
            try:
                result = self.pointers.swap_pointers(swaps, key, events, wait=wait)
            except PointerOutcomeUnknown as e:
                return self._settle(current, staged, swaps, e, kind, key is not None)
            except Exception:
                self.discard(staged)  # known not committed: nothing points at these files
                raise
        if result is Swapped.WON:
            return self._won(current, staged, kind, recorded=key is not None)
        if result is Swapped.KEY_TAKEN:
            self.discard(staged)
            return Replayed()
        if result is Swapped.BUSY:
            self.discard(staged)
            raise WouldWait("writer")
        return None

    def _insert(self, staged: Staged, key: KeyRecord | None) -> bool:
        """A create's "CAS": insert the row, with the Idempotency-Key's. False: the key was recorded
        by a twin request first (nothing inserted; its response is the answer)."""
        change = staged.change
        event = staged.event() if self.pointers.events_on else None
        try:
            result = self.entries.insert_entry(
                change.namespace,
                change.name,
                change.kind.name,
                staged.new.location,
                staged.location,
                key,
                event,
                staged.write_paths,
                change.superseding,
            )
        except errors.AlreadyExists:
            self.discard([staged])  # known not committed: the row was never inserted
            # a twin with the same key may have created it meanwhile: then its response is the answer
            if key is not None and self.pointers.get_key(key.key) is not None:
                return False
            raise
        except errors.IcebergError:
            self.discard([staged])
            raise
        if result is Swapped.KEY_TAKEN:
            self.discard([staged])
            return False
        return True

    def _won(self, current: list[MetadataFile], staged: list[Staged], kind: str, recorded: bool) -> Committed:
        metrics.COMMITS.labels(kind).inc(staged[0].commits if len(staged) == 1 else 1)
        for one in staged:
            self.files.remember(one.new)
            if one.base is not None:
                self.files.superseded(one.base)
            self.note(one.change, one.new.data)
            metrics.APPEND_REBASES.inc(len(one.lists))
            if one.base is not None and one.entry is not None:
                self.cleanup.committed(one)
        return Committed(tuple(current), recorded)

    def _settle(
        self,
        current: list[MetadataFile],
        staged: list[Staged],
        swaps: list[Swap],
        e: PointerOutcomeUnknown,
        kind: str,
        keyed: bool,
    ) -> Outcome:
        """After a failed COMMIT: a fresh read of the pointers. One new pointer in place proves the
        whole transaction landed (its file name is fresh, and the transaction is atomic)."""
        try:
            now = [self.pointers.read_pointer(s.entry_id) for s in swaps]
        except Exception:  # noqa: BLE001 - still unreachable: the outcome stays unknown
            now = None
        if now is not None and any(p == s.new for p, s in zip(now, swaps, strict=True)):
            return self._won(current, staged, kind, recorded=keyed)
        if now is not None and e.settled and all(p == s.expected for p, s in zip(now, swaps, strict=True)):
            self.discard(staged)
            raise errors.ServiceUnavailable(
                f"Database unavailable, nothing was committed: {what_failed(str(e).lower())}", detail=str(e)
            ) from e
        metrics.UNKNOWN.inc()
        log.error("commit outcome unknown for %s: %s", [s.new.location for s in staged], e)
        raise errors.CommitStateUnknown("Commit state unknown, the database connection failed", detail=str(e)) from e

    # -- lost: rebase ----------------------------------------------------------------------------

    def _lost(self, changes: Sequence[Change], staged: list[Staged], attempt: int, kind: str) -> None:
        """Delete the orphans; answer a requirement that no longer holds at once (409, no backoff,
        no file written); else back off before rebasing on the new pointers."""
        self.discard(staged)
        metrics.REBASES.inc()
        log.info("commit to %s lost the CAS (attempt %d), rebasing", ", ".join(c.ident for c in changes), attempt + 1)
        for change in changes:
            _, base = self.read(change)
            self.apply(change, base, rebasable=len(changes) == 1, resolve=self.conflicts.check)
        backoff(self.settings, attempt)

    @contextmanager
    def serialised(self, changes: Sequence[Change], wait: float = -1) -> Iterator[None]:
        """Hold the locks of these entries, taken in one order so that transactions cannot deadlock.
        ``wait``: the most seconds to wait for each, then ``WouldWait``; -1: no bound."""
        slots = sorted({slot(c) for c in changes})
        with ExitStack() as stack:
            for i in slots:
                lock = self._locks[i]
                if not lock.acquire(timeout=wait):
                    raise WouldWait("lock")
                stack.callback(lock.release)
            yield

    def discard(self, staged: Sequence[Staged]) -> None:
        for one in staged:
            for location in (one.new.location, *one.lists, *one.manifests):
                self._delete_quietly(location)

    def _delete_quietly(self, location: str) -> None:
        try:
            self.files.delete(location)
        except Exception:  # noqa: BLE001 - an orphan file is harmless; never mask the real outcome
            log.warning("could not delete uncommitted file %s", location)

    def close(self) -> None:
        """Stop the background clean-up (what is queued is left to snapshot expiry's sweep)."""
        self.cleanup.close()


def backoff(settings: CommitSettings, attempt: int) -> None:
    """THE wait after a lost CAS: full jitter over an exponential bound (``commit_backoff_ms`` x
    2^attempt, capped at 2^6), so that writers who lost together do not collide again."""
    delay = settings.commit_backoff_ms / 1000 * (2 ** min(attempt, 6))
    time.sleep(random.uniform(0, delay))


@contextmanager
def _step(kind: str, step: str) -> Iterator[None]:
    """One step of a commit: its latency histogram, and its span when traces are on."""
    start = time.perf_counter()
    try:
        with tracing.span(f"commit.{step}", commit_kind=kind):
            yield
    finally:
        series = _step_series.get((kind, step))
        if series is None:  # looked up once: kinds and steps are the engine's own, a handful
            series = _step_series[kind, step] = metrics.COMMIT_STEP_SECONDS.labels(kind, step)
        series.observe(time.perf_counter() - start)


_step_series: dict[tuple[str, str], Any] = {}
step = _step  # for the steps driven from outside (``inline.py``); profiles know it as ``_step``


def log_landed(staged: Sequence[Staged], attempts: int) -> None:
    """One info line per entry a commit moved: its name, the table's new current snapshot (when the
    commit changed it) and the attempts it took (more than 1: it was rebased on others' commits)."""
    if not log.isEnabledFor(logging.INFO):
        return
    for one in staged:
        fields: dict[str, Any] = {
            "kind": one.change.kind.name,
            "name": one.change.ident,
            "attempts": attempts,
            "metadata_location": one.new.location,
        }
        snapshot, group = "", ""
        if one.lists:
            fields["rebased"] = len(one.lists)  # pure appends rebuilt on their branch's new head
        if one.commits > 1:
            fields["group"] = one.commits
            group = f", {one.commits} commits in one group"
        if one.change.kind is TABLE:
            now = one.new.data.get("current-snapshot-id")
            if now not in (None, -1) and (one.base is None or one.base.data.get("current-snapshot-id") != now):
                fields["snapshot_id"] = now
                snapshot = f" snapshot {now}"
        verb = "created" if one.entry is None else "committed"
        plural = "s" if attempts > 1 else ""
        message = f"{verb} {one.change.kind.name} {one.change.ident}{snapshot} ({attempts} attempt{plural}{group})"
        logs.line(log, logging.INFO, message, fields)
