"""Change events pushed to sinks (docs/events.md): a webhook that is down for a while gets every event
afterwards, in order, signed; two replicas deliver each event (deduplicable by id) across a SIGKILL of
the one delivering; NATS receives the same events; a flaky receiver (every 50th POST refused) is kept
up with, a backlog and an outage included, and the log says when a sink fails and recovers, not what
each event did. Real servers, a real HTTP receiver, a real nats-server."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import FAST, PY_SCHEMA, Receiver, Server, Start, free_port, read_all, rows, skip_or_fail, wait_for

SECRET = "webhook-secret"
INFO = {"CATALOG_LOG_LEVEL": "info"}  # the tests' servers log at warning; the log tests read info lines


def some_changes(srv: Server, ns: str, appends: int = 3) -> None:
    catalog = srv.catalog()
    catalog.create_namespace(ns)
    for t in ("a", "b"):
        table = catalog.create_table(f"{ns}.{t}", PY_SCHEMA)
        for i in range(appends):
            table.append(rows(i, 1))


def in_feed_order(events: list[dict[str, Any]]) -> list[str]:
    return [e["event-id"] for e in events]


def assert_arrived_in_feed_order(ids: list[str], url: str) -> None:
    """The ids that arrived, deduplicated, are the feed's order from its start, nothing skipped. The feed
    is read after what arrived was taken: the maintenance worker may have written events since."""
    arrived = list(dict.fromkeys(ids))
    feed = read_all(url)
    shown = [(e["event-id"], e["sequence"], e["operation"]["operation-type"]) for e in feed]
    assert arrived == in_feed_order(feed)[: len(arrived)], f"arrived {ids} (in this order); the feed: {shown}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver(free_port())
    yield hook
    hook.down()


@pytest.mark.slow  # the sink is down a whole minute: that minute is what it proves
def test_a_webhook_down_for_a_minute_gets_every_event_afterwards_in_order_signed(
    fresh: Start, receiver: Receiver
) -> None:
    srv = fresh({
        "CATALOG_EVENTS_WEBHOOKS": f"hook={receiver.url}",
        "CATALOG_EVENTS_WEBHOOK_SECRET": SECRET,
        "CATALOG_MAINTENANCE_WORKERS": "1",
        **FAST,
    })  # fmt: skip
    some_changes(srv, "w")
    time.sleep(60)  # the sink is down a minute: deliveries fail and back off; commits went on regardless
    assert receiver.received == []
    receiver.up()
    feed = read_all(srv.url)
    wait_for(lambda: len(set(receiver.ids())) >= len(feed), "every event at the webhook")
    # in order (so per table too), each at least once: what arrived, deduplicated by id, is the feed
    assert_arrived_in_feed_order(receiver.ids(), srv.url)
    assert set(in_feed_order(feed)) <= set(receiver.ids())
    for headers, event, body in receiver.received:
        assert headers["content-type"].startswith("application/cloudevents+json")
        expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-catalog-signature"], expected)
        assert event["specversion"] == "1.0" and event["type"].startswith("iceberg.catalog.")
        assert event["data"]["event-id"] == event["id"] and event["sequence"] == str(event["data"]["sequence"])
    subjects = {e["id"]: e["subject"] for _, e, _ in receiver.received}
    assert [subjects[i] for i in in_feed_order(feed)[:3]] == ["w", "w.a", "w.a"]
    # the sink down again, then up: what happened meanwhile arrives, after what came before
    receiver.down()
    srv.catalog().load_table("w.a").append(rows(9, 1))
    time.sleep(1)
    receiver.up()
    feed = read_all(srv.url)
    wait_for(lambda: len(set(receiver.ids())) >= len(feed), "the event written while the sink was down")
    assert_arrived_in_feed_order(receiver.ids(), srv.url)


@pytest.mark.slow
def test_two_replicas_deliver_each_event_across_a_sigkill_of_the_one_delivering(
    fresh: Start, receiver: Receiver
) -> None:
    receiver.up()
    env = {"CATALOG_EVENTS_WEBHOOKS": f"hook={receiver.url}", **FAST}
    first = fresh(env)
    second = fresh(env, same=True)
    some_changes(first, "r1", appends=2)
    wait_for(lambda: len(receiver.received) >= len(read_all(first.url)), "the first events")
    os.kill(first.proc.pid, signal.SIGKILL)  # whoever held the lease, the other takes over when it expires
    first.proc.wait(10)
    some_changes(second, "r2", appends=2)
    feed = read_all(second.url)
    wait_for(lambda: set(receiver.ids()) >= set(in_feed_order(feed)), "every event after the takeover")
    assert_arrived_in_feed_order(receiver.ids(), second.url)


@pytest.mark.slow
def test_nats_receives_the_same_events_as_the_feed(fresh: Start, tmp_path: Path) -> None:
    from tests import services

    try:
        nats_server = services.start_nats(tmp_path / "nats")
    except services.ServiceUnavailable as e:
        skip_or_fail(f"nats-server is unavailable: {e}")
    try:
        got: list[dict[str, Any]] = []
        ready, stop = threading.Event(), threading.Event()

        def subscribe() -> None:
            async def run() -> None:
                import nats

                conn = await nats.connect(nats_server.url)

                async def on(msg: Any) -> None:
                    message = json.loads(msg.data)
                    got.append({**message, "nats-subject": msg.subject, "msg-id": msg.headers["Nats-Msg-Id"]})

                await conn.subscribe("lake.>", cb=on)
                await conn.flush()
                ready.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)
                await conn.drain()

            asyncio.run(run())

        listener = threading.Thread(target=subscribe, daemon=True)
        listener.start()
        assert ready.wait(10)
        srv = fresh({"CATALOG_EVENTS_NATS_URL": nats_server.url, "CATALOG_EVENTS_NATS_SUBJECT": "lake", **FAST})
        ns = f"n{uuid.uuid4().hex[:6]}"
        some_changes(srv, ns, appends=2)
        feed = read_all(srv.url)
        wait_for(lambda: len(got) >= len(feed), "every event on NATS")
        arrived = list(got)
        feed = read_all(srv.url)[: len(arrived)]  # read after: the maintenance worker may have added events
        assert [m["id"] for m in arrived] == [m["msg-id"] for m in arrived] == in_feed_order(feed)
        assert [m["nats-subject"] for m in arrived] == [f"lake.{e['operation']['operation-type']}" for e in feed]
        assert [m["data"] for m in arrived] == feed
    finally:
        stop.set()
        listener.join(10)
        nats_server.stop()


@pytest.mark.slow
def test_a_maintenance_worker_process_delivers_when_the_servers_have_no_sinks(fresh: Start, receiver: Receiver) -> None:
    from tests.support import start_worker

    receiver.up()
    srv = fresh(FAST)  # the server itself pushes nowhere
    some_changes(srv, "mw", appends=1)
    worker = start_worker(srv, CATALOG_EVENTS_WEBHOOKS=f"hook={receiver.url}", **FAST)
    try:
        feed = read_all(srv.url)
        wait_for(lambda: len(set(receiver.ids())) >= len(feed), "the worker's deliveries")
        assert_arrived_in_feed_order(receiver.ids(), srv.url)
    finally:
        worker.kill()
        worker.wait(10)


# -- a flaky receiver, a receiver down for a while: delivery keeps up, the log says what changed ---------


def namespace_updates(url: str, ns: str, count: int, pause: float = 0.0, stop: threading.Event | None = None) -> int:
    """Cheap events: the namespace ``ns`` created, then ``count`` property updates (fewer if ``stop`` is
    set first), ``pause`` seconds apart. How many updates were made."""
    with requests.Session() as http:
        made = http.post(f"{url}/v1/namespaces", json={"namespace": [ns]}, timeout=30)
        assert made.status_code == 200, made.text
        for i in range(count):
            if stop is not None and stop.is_set():
                return i
            resp = http.post(f"{url}/v1/namespaces/{ns}/properties", json={"updates": {"i": str(i)}}, timeout=30)
            assert resp.status_code == 200, resp.text
            time.sleep(pause)
    return count


def all_arrived(receiver: Receiver, feed: list[dict[str, Any]]) -> Callable[[], bool]:
    return lambda: set(receiver.ids()) >= set(in_feed_order(feed))


def delivery_lags(receiver: Receiver, feed: list[dict[str, Any]]) -> dict[str, float]:
    """Each event's delay: its first arrival at the receiver less its commit time (the same clock)."""
    first: dict[str, float] = {}
    for at, event_id in list(receiver.arrivals):
        first.setdefault(event_id, at)
    return {e["event-id"]: first[e["event-id"]] - e["timestamp-ms"] / 1000 for e in feed}


def delivery_lines(srv: Server, sink: str) -> list[dict[str, Any]]:
    """The server's log lines about delivering events: the sink loop's, and any HTTP client's."""
    found = []
    for text in srv.log.read_text().splitlines():
        try:
            line = json.loads(text)
        except ValueError:
            continue
        if line.get("logger", "").startswith(("httpx", "httpcore")) or (
            line.get("logger") == "catalog.events" and sink in line.get("message", "")
        ):
            found.append(line)
    return found


def sink_metric(url: str, name: str, sink: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(float(x.split()[-1]) for x in text.splitlines() if x.startswith(f'{name}{{sink="{sink}"}}'))


@pytest.mark.slow
def test_a_backlog_at_a_receiver_refusing_one_post_in_fifty_arrives_in_seconds_in_a_handful_of_log_lines(
    fresh: Start,
) -> None:
    """A webhook added to a catalog holding 500 events refuses every 50th POST, so nearly every batch of
    100 is accepted in part. The refused event goes again right away (the batch moved the cursor)
    rather than after a backoff doubled at each such batch (that was 0.5 + 1 + ... + 60 s: minutes).
    Every event arrives, in order; the server log says next to nothing about it (no line per event:
    the metrics count them)."""
    hook = Receiver(free_port(), refuse_every=50)
    hook.up()
    try:
        first = fresh(FAST)  # no sink: the events wait in the feed
        namespace_updates(first.url, "backlog", 500)
        feed = read_all(first.url)
        assert len(feed) >= 501
        second = fresh({"CATALOG_EVENTS_WEBHOOKS": f"hook={hook.url}", **FAST, **INFO}, same=True)
        wait_for(all_arrived(hook, feed), "the backlog at the flaky webhook", timeout=60)
        assert hook.refused >= 9
        assert_arrived_in_feed_order(hook.ids(), second.url)
        lines = delivery_lines(second, "hook")
        assert len(lines) <= 3 and not [x for x in lines if x["logger"] != "catalog.events"], lines
        assert sink_metric(second.url, "catalog_events_delivered_total", "hook") >= len(feed)
        assert sink_metric(second.url, "catalog_events_delivery_failures_total", "hook") >= 1
    finally:
        hook.down()


@pytest.mark.slow  # 20 s down, 8 s of commits, the catch-up: these durations are what it proves
def test_a_receiver_down_for_20_s_is_caught_up_with_and_the_log_says_failing_then_recovered(fresh: Start) -> None:
    """A flaky receiver (every 50th POST refused) goes down for 20 s while commits go on. Once it
    answers again, what it missed arrives and the lag is back to seconds; every event arrives in
    order, at least once. The log holds one line for the failure and one for the recovery."""
    hook = Receiver(free_port(), refuse_every=50)
    hook.up()
    stop = threading.Event()
    try:
        srv = fresh({"CATALOG_EVENTS_WEBHOOKS": f"hook={hook.url}", **FAST, **INFO})
        writer = threading.Thread(target=namespace_updates, args=(srv.url, "down", 100_000, 0.1, stop), daemon=True)
        writer.start()
        wait_for(lambda: len(hook.ids()) >= 10, "the first deliveries")
        hook.down()
        time.sleep(20)
        hook.up()
        back = time.time()
        missed = read_all(srv.url)
        wait_for(all_arrived(hook, missed), "what was written while the receiver was down", timeout=90)
        caught_up = time.time()
        # the next attempt comes within the backoff reached while down (16 s after 20 s), then it is quick
        assert caught_up - back < 45, f"caught up {caught_up - back:.1f} s after the receiver answered again"
        time.sleep(8)  # commits go on: these arrive within seconds
        stop.set()
        writer.join(30)
        feed = read_all(srv.url)
        wait_for(all_arrived(hook, feed), "every event", timeout=60)
        assert_arrived_in_feed_order(hook.ids(), srv.url)
        lags = delivery_lags(hook, feed)
        after = [lags[e["event-id"]] for e in feed if e["timestamp-ms"] / 1000 > caught_up + 1]
        assert len(after) >= 10 and max(after) < 15, f"lags after catching up: {after}"
        lines = delivery_lines(srv, "hook")
        failing = [x for x in lines if "failing" in x["message"]]
        recovered = [x for x in lines if "delivered again" in x["message"]]
        assert len(failing) == 1 and failing[0]["level"] == "warning", lines
        assert len(recovered) == 1 and recovered[0]["ts"] > failing[0]["ts"], lines
        assert len(lines) <= 4, lines
        metrics = requests.get(f"{srv.url}/metrics", timeout=10).text
        assert 'catalog_events_sink_failing{sink="hook"} 0.0' in metrics
        assert 'catalog_events_sink_lag_seconds{sink="hook"}' in metrics
    finally:
        stop.set()
        hook.down()
