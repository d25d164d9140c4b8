"""Who runs table maintenance: workers that claim tasks, and the one scheduler that enqueues them.

``Workers``: ``CATALOG_MAINTENANCE_WORKERS`` threads per server process (or a dedicated
``iceberg-catalog maintenance worker`` process). Each claims the oldest due task under a lease,
renews the lease while it runs (a heartbeat every third of it), and finishes it with its result; a
failed attempt is queued again after an exponential backoff (``CATALOG_MAINTENANCE_RETRY_SECONDS``,
doubled each time), until ``CATALOG_MAINTENANCE_MAX_ATTEMPTS``
make it ``failed`` with its error. A worker killed mid-task leaves a running task whose lease
expires: another worker claims it again. Every job is safe to repeat: an expiry re-plans on the table
as it is, deletes of deleted files are no-ops. Maintenance I/O is bounded by the storage's own
concurrency bound, shared with requests, and by the few threads here, so it never starves requests.

``Scheduler``: every process runs one; only the holder of the database lease ``scheduler`` (one per
deployment, taken over when its holder stops renewing it) looks for tables due for maintenance and
enqueues their tasks: snapshot expiry on a table whose pointer moved since its last run, at most
every ``CATALOG_MAINTENANCE_EXPIRE_EVERY_MINUTES``, or sooner once it took
``CATALOG_MAINTENANCE_EXPIRE_EVERY_COMMITS`` commits; orphan removal every
``CATALOG_MAINTENANCE_ORPHANS_EVERY_HOURS``; manifest rewrite on a table whose pointer moved, at most
every ``CATALOG_MAINTENANCE_MANIFESTS_EVERY_MINUTES``, when its main branch has more manifests than
its ``commit.manifest.min-count-to-merge`` (and it did not set ``commit.manifest-merge.enabled`` to
false); data compaction on a table whose pointer moved, at most every
``CATALOG_MAINTENANCE_COMPACTION_EVERY_MINUTES``, when its data files are many and small. Tables
whose ``catalog.maintenance.enabled`` is false (on the table or a namespace above it) are left alone.
It also ends the retention of dropped entries (``CATALOG_DROP_RETENTION``): released, or purged by
a ``purge`` task.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid

from catalog import errors, metrics
from catalog.database.leases import Leases
from catalog.database.tasks import Task, now_ms
from catalog.maintenance import compaction_plan, explain, rewrite_manifests
from catalog.maintenance.jobs import COMPACT, EXPIRE, ORPHANS, PURGE, REWRITE_MANIFESTS, Jobs
from catalog.storage.metadata_files import MetadataFile

log = logging.getLogger("catalog.maintenance")

IDLE_POLL_SECONDS = 2.0  # a worker with nothing to do looks again after this (with jitter)
SCHEDULED_PER_SCAN = 200  # tables enqueued per kind and scan; the next scan takes the rest
SCHEDULER_LEASE = "scheduler"


def owner_name(role: str) -> str:
    """A lease owner that names the host and process, unique per thread of work."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{role}:{uuid.uuid4().hex[:8]}"


class Workers:
    def __init__(self, jobs: Jobs, threads: int) -> None:
        self.jobs = jobs
        self.tasks = jobs.tasks
        self.settings = jobs.settings
        self.threads = threads
        self._stop = threading.Event()
        self._running: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.threads):
            thread = threading.Thread(target=self._loop, name=f"maintenance-{i}", daemon=True)
            thread.start()
            self._running.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in self._running:
            thread.join(timeout)

    def _loop(self) -> None:
        owner = owner_name("worker")
        while not self._stop.is_set():
            try:
                ran = self.run_one(owner)
            except Exception as e:  # noqa: BLE001 - the database is away: try again later
                log.warning("maintenance worker could not claim a task: %s", e)
                ran = False
            if not ran:
                self._stop.wait(IDLE_POLL_SECONDS * random.uniform(0.5, 1.5))

    def run_one(self, owner: str) -> bool:
        """Claim one due task and run it to its end; False when none was due."""
        lease_ms = int(self.settings.maintenance_lease_seconds * 1000)
        task = self.tasks.claim(owner, lease_ms)
        if task is None:
            return False
        lost = threading.Event()
        beating = threading.Event()
        beat = threading.Thread(
            target=self._heartbeat, args=(task, owner, lease_ms, beating, lost), name="maintenance-lease", daemon=True
        )
        beat.start()
        start = time.perf_counter()
        try:
            result, pointer = self.jobs.run(task)
        except Exception as e:  # noqa: BLE001 - any failure: retried with backoff, then failed visibly
            self._failed(task, owner, e)
        else:
            outcome = "skipped" if "skipped" in result else "done"
            result = {**result, "summary": explain.summary(task.kind, result)}
            if lost.is_set() or not self.tasks.finish(task, owner, result, pointer):
                log.warning(
                    "maintenance task %d (%s of %s) lost its lease: its result is dropped",
                    task.id,
                    task.kind,
                    task.ident,
                )
            else:
                metrics.MAINTENANCE_TASKS.labels(task.kind, outcome).inc()
                log.info(
                    "maintenance %s of %s %s: %s",
                    task.kind,
                    task.ident,
                    outcome,
                    result["summary"],
                    extra={"fields": {"task": task.id, "kind": task.kind, "table": task.ident, "result": result}},
                )
        finally:
            beating.set()
            metrics.MAINTENANCE_SECONDS.labels(task.kind).observe(time.perf_counter() - start)
        return True

    def _heartbeat(self, task: Task, owner: str, lease_ms: int, done: threading.Event, lost: threading.Event) -> None:
        while not done.wait(lease_ms / 3000):
            try:
                if not self.tasks.heartbeat(task.id, owner, lease_ms):
                    lost.set()
                    return
            except Exception as e:  # noqa: BLE001 - the next beat tries again; the lease may lapse
                log.warning("maintenance task %d: lease not renewed: %s", task.id, e)

    def _failed(self, task: Task, owner: str, e: Exception) -> None:
        message = e.message if isinstance(e, errors.IcebergError) else f"{type(e).__name__}: {e}"
        final = task.attempts >= self.settings.maintenance_max_attempts
        backoff = min(3600.0, self.settings.maintenance_retry_seconds * 2 ** (task.attempts - 1))
        retry_at = None if final else now_ms() + int(1000 * backoff)
        self.tasks.fail(task, owner, message, retry_at)
        metrics.MAINTENANCE_TASKS.labels(task.kind, "failed" if final else "retry").inc()
        log.log(
            logging.ERROR if final else logging.WARNING,
            "maintenance %s of %s %s (attempt %d): %s",
            task.kind,
            task.ident,
            "failed" if final else "will be retried",
            task.attempts,
            message,
            exc_info=e if not isinstance(e, errors.IcebergError) else None,
        )


class Scheduler:
    def __init__(self, jobs: Jobs, leases: Leases) -> None:
        self.jobs = jobs
        self.tasks, self.entries, self.dropped = jobs.tasks, jobs.entries, jobs.dropped
        self.leases = leases  # the scheduler's lease (the delivery loops hold theirs in the same part)
        self.settings = jobs.settings
        self.owner = owner_name("scheduler")
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="maintenance-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.leases.release_lease(SCHEDULER_LEASE, self.owner)
        except Exception:  # noqa: BLE001 - it expires by itself
            pass

    def _loop(self) -> None:
        interval = self.settings.maintenance_interval_seconds
        while not self._stop.wait(interval * random.uniform(0.8, 1.2)):
            try:
                if self.leases.take_lease(SCHEDULER_LEASE, self.owner, int(interval * 3000)):
                    self.schedule()
            except Exception as e:  # noqa: BLE001 - the database is away: the next round tries again
                log.warning("maintenance scheduler: %s", e)

    def schedule(self) -> int:
        """Enqueue the due tasks of every kind; the number enqueued."""
        minutes, hours = self.settings.maintenance_expire_every_minutes, self.settings.maintenance_orphans_every_hours
        enqueued = self.settle_dropped()
        for kind, every_ms, changed_only, commits in (
            (EXPIRE, minutes * 60_000, True, self.settings.maintenance_expire_every_commits),
            (ORPHANS, hours * 3_600_000, False, 0),
            (REWRITE_MANIFESTS, self.settings.maintenance_manifests_every_minutes * 60_000, True, 0),
            (COMPACT, self.settings.maintenance_compaction_every_minutes * 60_000, True, 0),
        ):
            for entry_id, _, _ in self.tasks.due_tables(kind, int(every_ms), changed_only, SCHEDULED_PER_SCAN, commits):
                enqueued += self.enqueue(entry_id, kind)
        return enqueued

    def settle_dropped(self) -> int:
        """Dropped entries whose retention ended: released (dropped without purge, files kept) or
        given their purge task (whatever ``catalog.maintenance.enabled`` says: the drop asked for
        it). The number of purges enqueued."""
        expired = self.dropped.expired_dropped(SCHEDULED_PER_SCAN)
        if released := self.dropped.forget_dropped([d.id for d in expired if not d.purge]):
            log.info("released %d dropped tables and views whose retention ended (files kept)", released)
        enqueued = 0
        for gone in expired:
            if gone.purge and gone.purging_ms is None:  # a purge begun has its task (or failed visibly)
                enqueued += int(self.tasks.enqueue(PURGE, gone.id, None, gone.namespace, gone.name)[1])
        return enqueued

    def enqueue(self, entry_id: int, kind: str) -> int:
        entry = self.entries.get_entry_by_id(entry_id)
        if entry is None:
            return 0
        try:
            file = self.jobs.files.read(entry.metadata_location)
        except errors.IcebergError as e:
            log.warning("maintenance of %s not scheduled: %s", entry.ident, e.message)
            return 0
        quiet = compaction_plan.quiet_ms(file.data, self.settings.maintenance_compaction_quiet_seconds)
        if kind == COMPACT and compaction_plan.deferred(file.data, int(time.time() * 1000), quiet):
            return 0  # writers are active: looked at again at the next scan, no run recorded
        if not self.jobs.enabled(entry, file) or not self._due(kind, file):  # looked at again when due again
            self.tasks.record_run(entry.id, kind, entry.metadata_location)
            return 0
        _, created = self.tasks.enqueue(kind, entry.id, file.data.get("table-uuid"), entry.namespace, entry.name)
        return int(created)

    def _due(self, kind: str, file: MetadataFile) -> bool:
        """A kind's own test of whether the table needs it (manifest rewrite and compaction have one)."""
        if kind == COMPACT:
            return compaction_plan.due(file.data, self.settings.maintenance_compaction_enabled)
        if kind != REWRITE_MANIFESTS:
            return True
        try:
            return rewrite_manifests.due(file.data, self.jobs.storage)
        except Exception as e:  # noqa: BLE001 - an unreadable list: not scheduled, looked at again later
            log.warning("manifest rewrite not scheduled: %s", e)
            return False
