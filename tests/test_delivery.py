"""Change events pushed to sinks (docs/events.md): a webhook that is down for a while gets every event
afterwards, in order, signed; two replicas deliver each event (deduplicable by id) across a SIGKILL of
the one delivering; NATS receives the same events. Real servers, a real HTTP receiver, a real
nats-server."""

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import FAST, PY_SCHEMA, Receiver, Server, free_port, rows, skip_or_fail, wait_for
from tests.test_events import Start, read_all

SECRET = "webhook-secret"


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
