"""The delivery loops: the outbox's housekeeping, and one loop per sink.

``Outbox``: in every process, one thread; whichever process holds the lease ``events-outbox``
orders what committed (``outbox.sequence``: the feed and the sinks read by position) and prunes events
older than ``CATALOG_EVENTS_RETENTION`` or beyond ``CATALOG_EVENTS_MAX_ROWS``.

``SinkLoop``: in every process, one thread per sink; whichever holds the lease ``events-sink:<name>``
delivers. It reads the events after the sink's durable cursor (``event_sinks``, starting at the
oldest event kept), sends them in feed order, and moves the cursor past what the sink accepted. A
failure leaves the cursor where it is and the same events go again: right away when the batch moved
the cursor (a sink refusing one event in fifty is not a sink that is down), else after a backoff
(0.5 s doubled up to 60 s, reset by the next batch that moves the cursor): at least once, in order
(so in commit order per table), each with its stable id. The log says when a sink starts failing,
delivers again, falls behind and catches up (``SinkHealth``); the rest is in the metrics. A
replica killed between a send and the cursor's move lets the next holder send that batch again;
the receiver deduplicates by id. Commits never wait for any of this: they write the outbox row and
return; a slow or dead sink only grows its lag (``catalog_events_sink_lag``), until retention.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid

from catalog import metrics
from catalog.database.leases import Leases
from catalog.database.outbox import EventRows
from catalog.delivery.sinks import DeliveryFailed, Sink
from catalog.settings import EventSettings

log = logging.getLogger("catalog.events")

BATCH = 100
MAX_BACKOFF_SECONDS = 60.0
FAILING_AFTER = 3  # attempts in a row that deliver nothing before the log says a sink is failing
BEHIND_SECONDS = 60.0  # a sink whose oldest undelivered event is older is logged as behind, once
PRUNE_EVERY_SECONDS = 60.0
OUTBOX_LEASE = "events-outbox"


def owner_name(role: str) -> str:
    """A lease owner naming the host, the process and this loop."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{role[:40]}:{uuid.uuid4().hex[:8]}"


class _Loop:
    lease: str = ""

    def __init__(self, outbox: EventRows, leases: Leases, settings: EventSettings) -> None:
        self.outbox, self.leases, self.settings = outbox, leases, settings
        self.owner = owner_name(self.lease)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.lease, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.leases.release_lease(self.lease, self.owner)
        except Exception:  # noqa: BLE001 - it expires by itself
            pass

    def _holds(self) -> bool:
        return self.leases.take_lease(self.lease, self.owner, int(self.settings.events_delivery_lease_seconds * 1000))

    def _run(self) -> None:
        raise NotImplementedError


class Outbox(_Loop):
    lease = OUTBOX_LEASE

    def _run(self) -> None:
        interval, pruned, head = self.settings.events_delivery_interval_seconds, 0.0, None
        while not self._stop.wait(interval * random.uniform(0.8, 1.2)):
            try:
                if not self._holds():
                    head = None
                    continue
                self.outbox.sequence()
                now = self.outbox.event_bounds()[1]
                if head is not None:  # counted by the holder, from the feed's head: each event once
                    metrics.EVENTS_SEQUENCED.inc(max(0, now - head))
                head = now
                if time.monotonic() - pruned > PRUNE_EVERY_SECONDS:
                    pruned = time.monotonic()
                    self.prune()
            except Exception as e:  # noqa: BLE001 - the database is away: the next round tries again
                log.warning("events outbox: %s", e)

    def prune(self) -> int:
        older = int(time.time() * 1000 - self.settings.events_retention * 1000)
        gone = self.outbox.prune_events(older, self.settings.events_max_rows)
        if gone:
            log.info("pruned %d events (retention)", gone)
        return gone


class SinkLoop(_Loop):
    def __init__(self, outbox: EventRows, leases: Leases, settings: EventSettings, sink: Sink) -> None:
        self.sink = sink
        self.lease = f"events-sink:{sink.name}"
        self.health = SinkHealth(sink.name)
        super().__init__(outbox, leases, settings)

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        self.sink.close()

    def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                if not self._holds():
                    self._stop.wait(self.settings.events_delivery_lease_seconds / 3)
                    continue
                moved, refused = self.deliver_once()
            except Exception as e:  # noqa: BLE001 - the sink or the database failed: back off, try again
                backoff = min(MAX_BACKOFF_SECONDS, max(0.5, backoff * 2))
                metrics.EVENTS_DELIVERY_FAILURES.labels(self.sink.name).inc()
                self.health.failed(e, backoff)
                self._back_off(backoff)
                continue
            # Back off on failure, not on progress: a batch that moved the cursor (even if the sink
            # refused an event in it) resets the backoff, and what is left goes again right away.
            backoff = 0.0
            if refused is not None:
                metrics.EVENTS_DELIVERY_FAILURES.labels(self.sink.name).inc()
                log.debug("events to %s: %s", self.sink.name, refused)
            elif not moved:
                self._stop.wait(self.settings.events_delivery_interval_seconds * random.uniform(0.8, 1.2))

    def _back_off(self, seconds: float) -> None:
        """Wait ``seconds``, keeping the lease: else, with a backoff longer than the lease, another
        replica would take the sink over meanwhile and start again at 0.5 s (the backoff would never
        grow past the lease), and the log's failing and delivered-again lines would come from two."""
        end = time.monotonic() + seconds
        renew = self.settings.events_delivery_lease_seconds / 3
        while (left := end - time.monotonic()) > 0:
            if self._stop.wait(min(renew, left)):
                return
            try:
                if not self._holds():
                    return
            except Exception:  # noqa: BLE001 - the database is away: the loop finds out
                return

    def deliver_once(self) -> tuple[int, str | None]:
        """Send the next batch after the sink's cursor and move it past what was accepted: how many,
        and why the rest was not (None when the whole batch was). Raises when none was accepted."""
        name = self.sink.name
        position = self.outbox.sink_position(name)
        if position is None:
            self.outbox.start_sink(name, 0)
            position = self.outbox.sink_position(name) or 0
        self.outbox.sequence()
        batch = self.outbox.read_events(position, BATCH)
        head = self.outbox.event_bounds()[1]
        self._lag(head - position, batch[0].created_ms if batch else None)
        if not batch:
            return 0, None
        sent = self.sink.send(batch)
        if not sent:  # a sink's send raises then; this is for one that does not
            raise DeliveryFailed(f"{name} accepted none of {len(batch)} events")
        self.outbox.advance_sink(name, batch[sent - 1].position)
        metrics.EVENTS_DELIVERED.labels(name).inc(sent)
        rest = batch[sent:]
        self._lag(head - batch[sent - 1].position, rest[0].created_ms if rest else None)
        self.health.delivered()
        if sent < len(batch):
            return sent, f"{name} accepted {sent} of {len(batch)} events"
        return sent, None

    def _lag(self, events: int, oldest_ms: int | None) -> None:
        """The lag, in events and in seconds (the age of the oldest event not delivered yet, when
        known: after a whole batch went, the next one's age is measured when it is read)."""
        events = max(0, events)
        metrics.EVENTS_SINK_LAG.labels(self.sink.name).set(events)
        if events and oldest_ms is None:
            return
        age = max(0.0, time.time() - oldest_ms / 1000) if events and oldest_ms is not None else 0.0
        metrics.EVENTS_SINK_LAG_SECONDS.labels(self.sink.name).set(age)
        self.health.lag(events, age)


class SinkHealth:
    """What an operator reads in the log of a sink: one line when it is failing (``FAILING_AFTER``
    attempts in a row accepted nothing: one refused POST of a flaky receiver is not a failing sink),
    one when it delivers again, one when it falls behind (its oldest undelivered event older than
    ``BEHIND_SECONDS``) and one when it has caught up. Never a line per batch or per event: those are
    counted in the metrics (``catalog_events_delivered_total``, ``catalog_events_delivery_failures_total``,
    ``catalog_events_sink_lag``, ``catalog_events_sink_lag_seconds``, ``catalog_events_sink_failing``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.first_failure: float | None = None  # of the failures in a row, if any
        self.failures = 0
        self.failing = False
        self.behind = False
        metrics.EVENTS_SINK_FAILING.labels(name).set(0)  # the series is there before any failure

    def failed(self, error: Exception, backoff: float) -> None:
        self.failures += 1
        if self.first_failure is None:
            self.first_failure = time.monotonic()
        if not self.failing and self.failures >= FAILING_AFTER:
            self.failing = True
            metrics.EVENTS_SINK_FAILING.labels(self.name).set(1)
            log.warning(
                "events to %s failing (%d attempts in a row), retried with a backoff doubling to %.0f s: %s",
                self.name, self.failures, MAX_BACKOFF_SECONDS, error,
            )  # fmt: skip
        else:
            log.debug("events to %s not delivered, again in %.1f s: %s", self.name, backoff, error)

    def delivered(self) -> None:
        if self.failing and self.first_failure is not None:
            log.info(
                "events to %s delivered again, after %d failed attempts over %.0f s",
                self.name, self.failures, time.monotonic() - self.first_failure,
            )  # fmt: skip
            metrics.EVENTS_SINK_FAILING.labels(self.name).set(0)
        self.first_failure, self.failures, self.failing = None, 0, False

    def lag(self, events: int, age: float) -> None:
        if not self.behind and age > BEHIND_SECONDS:
            self.behind = True
            log.warning("events to %s behind: %d events, the oldest %.0f s old", self.name, events, age)
        elif self.behind and events == 0:
            self.behind = False
            log.info("events to %s caught up", self.name)


def start_delivery(outbox: EventRows, leases: Leases, settings: EventSettings, sinks: list[Sink]) -> list[_Loop]:
    """The outbox's loop and one loop per sink, started (nothing when events are off)."""
    if not settings.events_enabled:
        return []
    loops: list[_Loop] = [Outbox(outbox, leases, settings), *(SinkLoop(outbox, leases, settings, s) for s in sinks)]
    for loop in loops:
        loop.start()
    return loops
