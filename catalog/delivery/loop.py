"""The delivery loops: the outbox's housekeeping, and one loop per sink.

``Outbox``: in every process, one thread; whichever process holds the lease ``events-outbox``
orders what committed (``store.sequence``: the feed and the sinks read by position) and prunes events
older than ``CATALOG_EVENTS_RETENTION`` or beyond ``CATALOG_EVENTS_MAX_ROWS``.

``SinkLoop``: in every process, one thread per sink; whichever holds the lease ``events-sink:<name>``
delivers. It reads the events after the sink's durable cursor (``event_sinks``, starting at the
oldest event kept), sends them in feed order, and moves the cursor past what the sink accepted. A
failure leaves the cursor where it is and the same events go again after a backoff (0.5 s doubled
up to 60 s): at least once, in order (so in commit order per table), each with its stable id. A
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
from catalog.delivery.sinks import DeliveryFailed, Sink
from catalog.settings import Settings
from catalog.store.entries import Store

log = logging.getLogger("catalog.events")

BATCH = 100
MAX_BACKOFF_SECONDS = 60.0
PRUNE_EVERY_SECONDS = 60.0
OUTBOX_LEASE = "events-outbox"


def owner_name(role: str) -> str:
    """A lease owner naming the host, the process and this loop."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{role[:40]}:{uuid.uuid4().hex[:8]}"


class _Loop:
    lease: str = ""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store, self.settings = store, settings
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
            self.store.release_lease(self.lease, self.owner)
        except Exception:  # noqa: BLE001 - it expires by itself
            pass

    def _holds(self) -> bool:
        return self.store.take_lease(self.lease, self.owner, int(self.settings.events_delivery_lease_seconds * 1000))

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
                self.store.sequence()
                now = self.store.event_bounds()[1]
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
        gone = self.store.prune_events(older, self.settings.events_max_rows)
        if gone:
            log.info("pruned %d events (retention)", gone)
        return gone


class SinkLoop(_Loop):
    def __init__(self, store: Store, settings: Settings, sink: Sink) -> None:
        self.sink = sink
        self.lease = f"events-sink:{sink.name}"
        super().__init__(store, settings)

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
                moved = self.deliver_once()
                backoff = 0.0
                if not moved:
                    self._stop.wait(self.settings.events_delivery_interval_seconds * random.uniform(0.8, 1.2))
            except Exception as e:  # noqa: BLE001 - the sink or the database failed: back off, try again
                backoff = min(MAX_BACKOFF_SECONDS, max(0.5, backoff * 2))
                metrics.EVENTS_DELIVERY_FAILURES.labels(self.sink.name).inc()
                log.warning("events to %s not delivered, again in %.1f s: %s", self.sink.name, backoff, e)
                self._stop.wait(backoff)

    def deliver_once(self) -> int:
        """Send the next batch after the sink's cursor and move it past what was accepted: how many."""
        name = self.sink.name
        position = self.store.sink_position(name)
        if position is None:
            self.store.start_sink(name, 0)
            position = self.store.sink_position(name) or 0
        self.store.sequence()
        batch = self.store.read_events(position, BATCH)
        head = self.store.event_bounds()[1]
        metrics.EVENTS_SINK_LAG.labels(name).set(max(0, head - position))
        if not batch:
            return 0
        sent = self.sink.send(batch)
        if sent:
            self.store.advance_sink(name, batch[sent - 1].position)
            metrics.EVENTS_DELIVERED.labels(name).inc(sent)
            metrics.EVENTS_SINK_LAG.labels(name).set(max(0, head - batch[sent - 1].position))
        if sent < len(batch):
            raise DeliveryFailed(f"{name} accepted {sent} of {len(batch)} events")
        return sent


def start_delivery(store: Store, settings: Settings, sinks: list[Sink]) -> list[_Loop]:
    """The outbox's loop and one loop per sink, started (nothing when events are off)."""
    if not settings.events_enabled:
        return []
    loops: list[_Loop] = [Outbox(store, settings), *(SinkLoop(store, settings, s) for s in sinks)]
    for loop in loops:
        loop.start()
    return loops
