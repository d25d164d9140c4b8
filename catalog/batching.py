"""Leader batching: callers that arrive while a batch is being landed queue; whoever finds no
leader becomes one and lands what queued, batch after batch, until its own call is settled.

Nobody waits for a batch to fill: a lone call is a batch of one and runs at once, and a batch is
exactly what arrived while the one before it was landing. ``take`` chooses the next batch from the
queue (in arrival order; what it leaves stays queued for the next one); ``land`` settles every
member of a batch (``done``, with ``result`` or ``error``). A ``land`` that raises settles the members
it left unsettled with that error.

Used by the CAS transaction (``store/pointers.py``: pointer swaps of different tables in one
database transaction); hand-written because the pattern is a dozen lines around one condition
variable and no library offers it with "a lone caller never waits".
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(eq=False, slots=True)
class Member:
    """One queued call: ``item`` in, ``result`` or ``error`` out once ``done``."""

    item: Any
    done: bool = False
    result: Any = None
    error: BaseException | None = None

    def settle(self, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True


class Batcher:
    def __init__(
        self,
        take: Callable[[deque[Member]], list[Member]],
        land: Callable[[list[Member]], None],
    ) -> None:
        self._take, self._land = take, land
        self._cond = threading.Condition()
        self._queue: deque[Member] = deque()
        self._leading = False

    def submit(self, item: Any) -> Any:
        """Queue ``item``; lead or wait for the leader that lands it. Returns its result or raises its error."""
        member = Member(item)
        with self._cond:
            self._queue.append(member)
            while not member.done and self._leading:
                self._cond.wait()
            if not member.done:
                self._leading = True
        if not member.done:
            self._lead(member)
        if member.error is not None:
            raise member.error
        return member.result

    def _lead(self, member: Member) -> None:
        try:
            while not member.done:  # lead until this member's own batch has landed
                with self._cond:
                    batch = self._take(self._queue)
                if not batch:  # its member is in no queue and not done: cannot happen, never spin
                    member.settle(error=RuntimeError("batching lost a call"))
                    break
                try:
                    self._land(batch)
                except BaseException as e:  # noqa: BLE001 - every unsettled member of a failed batch gets the error
                    for one in batch:
                        if not one.done:
                            one.settle(error=e)
                with self._cond:
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._leading = False
                self._cond.notify_all()
