"""The token endpoint's brake on guessing: failing sources are slowed down, never locked out.

Failed token requests are counted per (client id, source address) pair, and per source address
(guesses spread over many ids, or ids that do not exist). Past a number of free failures within a
window, every further attempt from that pair (or address) waits before its secret is checked: a
delay that doubles with each failure up to ``MAX_DELAY_S``. A wrong secret is then answered 429
``slow_down``; the right secret always gets its token (at most ``MAX_DELAY_S`` late) and clears its
pair's count. So a guesser is slowed where it guesses, and nobody - not the client whose id is being
guessed, not the others behind the same proxy - is locked out.

The source address is the TCP peer, or, when the peer is one of ``CATALOG_TRUSTED_PROXIES``, the
address the proxies recorded in ``X-Forwarded-For`` (the right-most one not itself a trusted proxy).
``X-Forwarded-For`` from anyone else is ignored: a client cannot pick the address it is counted as.

Memory is bounded (at most ``max_entries`` pairs and addresses each, the least recently seen
forgotten first). In-process: each worker counts on its own.
"""

from __future__ import annotations

import ipaddress
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from catalog.settings import ConfigurationError

MAX_DELAY_S = 2.0  # the most any attempt waits, the right secret included
BASE_DELAY_S = 0.25
WINDOW_S = 300.0  # failures older than this are forgotten
MAX_FORWARDED_CHARS = 2048

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass
class _Record:
    failures: int = 0
    first_failure: float = 0.0


class FailureLimiter:
    # Failures within the window before attempts are slowed (the one that reaches it is answered 429):
    PAIR_FREE = 5  # of one client id from one address
    ADDRESS_FREE = 20  # from one address, whatever the ids

    def __init__(
        self, trusted_proxies: list[Network] | None = None, max_entries: int = 10_000, clock: Any = time.monotonic
    ) -> None:
        self.pairs: OrderedDict[tuple[str, str], _Record] = OrderedDict()
        self.addresses: OrderedDict[str, _Record] = OrderedDict()
        self.trusted = list(trusted_proxies or ())
        self.max_entries = max_entries
        self.clock = clock

    def delay(self, client_id: str | None, address: str) -> float:
        """Seconds this attempt waits before its secret is checked (0: none). ``client_id`` is None
        for an id that is not a configured client: such guesses count on the address alone."""
        now = self.clock()
        pair = _delay(self.pairs.get((client_id, address)), self.PAIR_FREE, now) if client_id is not None else 0.0
        return max(pair, _delay(self.addresses.get(address), self.ADDRESS_FREE, now))

    def failed(self, client_id: str | None, address: str) -> float:
        """Record a failure; the delay the next attempt from there will wait (0: none)."""
        now = self.clock()
        if client_id is not None:
            _count(_touch(self.pairs, (client_id, address), self.max_entries), now)
        _count(_touch(self.addresses, address, self.max_entries), now)
        return self.delay(client_id, address)

    def succeeded(self, client_id: str | None, address: str) -> None:
        """The right secret: its pair starts afresh (the address keeps counting others' failures)."""
        self.pairs.pop((client_id, address), None)

    def source(self, peer: str, forwarded_for: str | None) -> str:
        """The address an attempt is counted against (see the module docstring)."""
        if not forwarded_for or not self._trusted(peer):
            return peer
        source = peer
        for hop in reversed(forwarded_for[:MAX_FORWARDED_CHARS].split(",")):
            try:
                address = str(ipaddress.ip_address(hop.strip()))
            except ValueError:
                return source  # not an address: what follows it cannot be trusted
            source = address
            if not self._trusted(address):
                return address
        return source

    def _trusted(self, address: str) -> bool:
        if not self.trusted:
            return False
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in net for net in self.trusted)


def parse_trusted_proxies(value: str | None) -> list[Network]:
    """``CATALOG_TRUSTED_PROXIES``: comma-separated IP addresses or CIDR networks."""
    found = []
    for item in (value or "").split(","):
        if item.strip():
            try:
                found.append(ipaddress.ip_network(item.strip(), strict=False))
            except ValueError:
                raise ConfigurationError(
                    f"CATALOG_TRUSTED_PROXIES: {item.strip()[:60]!r} is not an IP address or CIDR network "
                    "(e.g. 10.0.0.5,10.1.0.0/16)"
                ) from None
    return found


def _touch(records: OrderedDict, key: Any, limit: int) -> _Record:
    record = records.pop(key, None) or _Record()
    records[key] = record  # most recently seen last
    while len(records) > limit:
        records.popitem(last=False)
    return record


def _count(record: _Record, now: float) -> None:
    if record.failures == 0 or now - record.first_failure > WINDOW_S:
        record.failures, record.first_failure = 0, now
    record.failures += 1


def _delay(record: _Record | None, free: int, now: float) -> float:
    if record is None or record.failures < free or now - record.first_failure > WINDOW_S:
        return 0.0
    return min(BASE_DELAY_S * 2 ** min(record.failures - free, 16), MAX_DELAY_S)
