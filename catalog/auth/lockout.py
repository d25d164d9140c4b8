"""The failed-attempt limiter of the token endpoint."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass
class _Record:
    failures: int = 0
    first_failure: float = 0.0
    locked_until: float = 0.0
    strikes: int = 0  # lockouts so far: each one is twice as long as the previous
    last_seen: float = 0.0


@dataclass(frozen=True)
class LimitPolicy:
    max_failures: int
    window_s: float
    base_lock_s: float
    max_lock_s: float


class FailureLimiter:
    """Locks out a client id, or a source address, after too many failed token requests.

    A client id is locked after ``CLIENT.max_failures`` failures within its window (a guess at one
    client's secret), an address after ``ADDRESS.max_failures`` (guesses spread over many ids, looser
    since several users may share a proxy's address). Each lockout of the same key lasts twice as
    long as the previous (up to ``max_lock_s``); a success resets both. While locked, attempts are
    refused without checking the secret, and not counted. Memory is bounded: only configured client
    ids are tracked (guesses at unknown ids count against the address), and at most ``max_addresses``
    addresses, the least recently seen forgotten first. In-process: each worker counts on its own.
    """

    CLIENT = LimitPolicy(max_failures=5, window_s=300, base_lock_s=10, max_lock_s=900)
    ADDRESS = LimitPolicy(max_failures=20, window_s=300, base_lock_s=10, max_lock_s=300)

    def __init__(self, max_addresses: int = 10_000, clock: Any = time.monotonic) -> None:
        self.clients: dict[str, _Record] = {}
        self.addresses: OrderedDict[str, _Record] = OrderedDict()
        self.max_addresses = max_addresses
        self.clock = clock

    def locked_for(self, client_id: str | None, address: str) -> float:
        """Seconds until the attempt may be made (0: go ahead)."""
        now = self.clock()
        waits = [r.locked_until - now for r in (self._client(client_id), self.addresses.get(address)) if r]
        return max([0.0, *waits])

    def failed(self, client_id: str | None, address: str) -> float:
        """Record a failure; the lockout it starts, in seconds (0: none)."""
        now = self.clock()
        locks = []
        if (record := self._client(client_id)) is not None:
            locks.append(self._fail(record, self.CLIENT, now))
        record = self.addresses.pop(address, None) or _Record()
        self.addresses[address] = record  # most recently seen last
        while len(self.addresses) > self.max_addresses:
            self.addresses.popitem(last=False)
        locks.append(self._fail(record, self.ADDRESS, now))
        return max(locks)

    def succeeded(self, client_id: str, address: str) -> None:
        if client_id in self.clients:
            self.clients[client_id] = _Record()
        self.addresses.pop(address, None)

    def track(self, client_ids: list[str]) -> None:
        self.clients = {c: _Record() for c in client_ids}

    def _client(self, client_id: str | None) -> _Record | None:
        return self.clients.get(client_id) if client_id else None

    @staticmethod
    def _fail(record: _Record, policy: LimitPolicy, now: float) -> float:
        if now - record.last_seen > 4 * policy.max_lock_s:
            record.strikes = 0  # quiet for long: forgiven
        record.last_seen = now
        if record.failures == 0 or now - record.first_failure > policy.window_s:
            record.failures, record.first_failure = 0, now
        record.failures += 1
        if record.failures < policy.max_failures:
            return 0.0
        lock = min(policy.base_lock_s * 2**record.strikes, policy.max_lock_s)
        record.strikes += 1
        record.failures = 0
        record.locked_until = now + lock
        return lock
