"""Unit tests (pure logic, no server) of ``wire.blocking``, the hop from the event loop to the worker
threads: what it kept from ``anyio.to_thread.run_sync`` when it replaced it (issue 27)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

from catalog.api import wire
from catalog.api.selection import WAREHOUSE

SEEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("seen", default=None)


def test_runs_off_the_loop_with_the_callers_context_variables():
    def call(a, b):
        SEEN.set("changed in the thread")  # a copy: the caller's value stays
        return a + b, WAREHOUSE.get(), threading.current_thread() is not threading.main_thread()

    async def main():
        WAREHOUSE.set("w2")
        SEEN.set("request")
        result = await wire.blocking(call, 1, 2)
        return result, SEEN.get()

    assert asyncio.run(main()) == ((3, "w2", True), "request")


def test_an_error_reaches_the_caller():
    def fail():
        raise KeyError("gone")

    async def main():
        try:
            await wire.blocking(fail)
        except KeyError as e:
            return e.args

    assert asyncio.run(main()) == ("gone",)


def test_at_most_the_bound_run_at_once_the_rest_queue():
    running, peak, lock = [0], [0], threading.Lock()

    def call():
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1

    async def main():
        await asyncio.gather(*(wire.blocking(call) for _ in range(wire.BLOCKING_THREADS + 20)))

    asyncio.run(main())
    assert peak[0] == wire.BLOCKING_THREADS


def test_a_started_call_finishes_when_its_caller_is_cancelled_and_a_queued_one_never_runs():
    started, release = threading.Event(), threading.Event()
    finished, ran_queued = [], []

    def long_call():
        started.set()
        release.wait(5)
        finished.append(True)

    async def main():
        blockers = [asyncio.ensure_future(wire.blocking(release.wait, 5)) for _ in range(wire.BLOCKING_THREADS - 1)]
        task = asyncio.ensure_future(wire.blocking(long_call))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        queued = asyncio.ensure_future(wire.blocking(ran_queued.append, True))  # every thread is busy
        await asyncio.sleep(0.05)
        task.cancel()
        queued.cancel()
        release.set()
        await asyncio.gather(*blockers)
        for _ in range(100):  # the started call runs on, in its thread
            if finished:
                break
            await asyncio.sleep(0.01)
        return task.cancelled(), queued.cancelled()

    assert asyncio.run(main()) == (True, True)
    assert finished == [True]
    assert ran_queued == []
