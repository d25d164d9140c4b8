"""The token endpoint's brake on guessing secrets: slowed down, never locked out, and counted per
(client, source) so that it cannot be turned against the client being guessed, nor against everyone
behind a proxy (``X-Forwarded-For`` is read only from ``CATALOG_TRUSTED_PROXIES``). Issue 28, item 3.
"""

from __future__ import annotations

import http.client
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from catalog.auth.lockout import MAX_DELAY_S, FailureLimiter, parse_trusted_proxies
from tests.support import Server, start_server

SECRET = "lockout-test-token-secret-" + "h" * 32
CLIENTS = {"victim": "victim-secret", "bi": "bi-secret", "relay": "relay-secret"}
PROXY = "127.0.0.50"


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_AUTHORIZATION": "none",
        "CATALOG_TRUSTED_PROXIES": f"{PROXY},10.9.0.0/16",
        "CATALOG_LOG_LEVEL": "info",
    }
    server = start_server(tmp_path_factory.mktemp("lockout"), "sqlite", env)
    yield server
    server.stop()


def token_request(
    server: Server, client_id: str, secret: str, source: str, forwarded: str | None = None
) -> tuple[int, dict, dict]:
    """POST /v1/oauth/tokens from a chosen loopback address (each 127.x.y.z is its own peer)."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30, source_address=(source, 0))
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    try:
        body = urlencode({"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
        conn.request("POST", "/v1/oauth/tokens", body, headers)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def audit_sources(server: Server, client_id: str) -> set[str]:
    """The sources the audit log counted failed token requests of ``client_id`` against."""
    found = set()
    for line in server.log.read_text().splitlines():
        if '"catalog.audit"' in line and "wrong secret" in line and f"client_id={client_id!r}" in line:
            found.add(json.loads(line)["message"].rsplit("source=", 1)[1])
    return found


def test_the_right_secret_gets_a_token_after_thirty_wrong_ones_from_the_same_address(token_server):
    source = "127.0.0.20"
    with ThreadPoolExecutor(10) as pool:
        wrong = list(pool.map(lambda i: token_request(token_server, "victim", f"guess-{i}", source), range(30)))
    assert all(status in (401, 429) for status, _, _ in wrong)
    status, headers, body = token_request(token_server, "victim", "wrong-again", source)
    assert status == 429 and body["error"] == "slow_down" and 1 <= int(headers["retry-after"]) <= MAX_DELAY_S
    started = time.monotonic()
    status, _, body = token_request(token_server, "victim", CLIENTS["victim"], source)
    assert status == 200 and body["access_token"], body
    assert time.monotonic() - started < MAX_DELAY_S + 1.5, "slowed by at most a small bounded delay"
    # The client's other users, elsewhere, were never slowed.
    started = time.monotonic()
    assert token_request(token_server, "victim", CLIENTS["victim"], "127.0.0.21")[0] == 200
    assert time.monotonic() - started < 1.0
    log = token_server.log.read_text()
    assert "victim-secret" not in log and "guess-" not in log


def test_forwarded_for_from_an_untrusted_peer_is_ignored(token_server):
    peer = "127.0.0.1"  # a local peer: uvicorn's default would have believed its header
    statuses = []
    for i in range(FailureLimiter.PAIR_FREE + 1):
        statuses.append(token_request(token_server, "bi", f"guess-{i}", peer, forwarded=f"203.0.113.{i + 1}")[0])
    assert statuses[-1] == 429, statuses  # counted together, against the peer
    assert audit_sources(token_server, "bi") == {peer}
    assert token_request(token_server, "bi", CLIENTS["bi"], peer, forwarded="203.0.113.99")[0] == 200


def test_forwarded_for_from_a_trusted_proxy_is_the_source(token_server):
    client = "198.51.100.7"
    statuses = [
        token_request(token_server, "relay", f"guess-{i}", PROXY, forwarded=f"{client}, {PROXY}")[0]
        for i in range(FailureLimiter.PAIR_FREE + 1)
    ]
    assert statuses[-1] == 429, statuses
    assert audit_sources(token_server, "relay") == {client}
    # Another client behind the same proxy is its own source: not slowed.
    assert token_request(token_server, "relay", "wrong", PROXY, forwarded="198.51.100.8")[0] == 401
    assert audit_sources(token_server, "relay") == {client, "198.51.100.8"}


def test_limiter_counts_pairs_and_addresses_and_reads_forwarded_for_only_from_proxies():
    now = [0.0]
    limiter = FailureLimiter(parse_trusted_proxies("10.0.0.1, 10.9.0.0/16"), max_entries=3, clock=lambda: now[0])
    for _ in range(FailureLimiter.PAIR_FREE - 1):
        assert limiter.failed("c", "192.0.2.1") == 0
    assert limiter.failed("c", "192.0.2.1") > 0
    assert limiter.delay("c", "192.0.2.1") <= MAX_DELAY_S
    assert limiter.delay("c", "192.0.2.2") == 0  # the same client elsewhere: not slowed
    assert limiter.delay("d", "192.0.2.1") == 0  # another client from there: not yet
    for _ in range(40):
        limiter.failed("c", "192.0.2.1")
    assert limiter.delay("c", "192.0.2.1") == MAX_DELAY_S  # bounded
    now[0] = 1000.0
    assert limiter.delay("c", "192.0.2.1") == 0  # forgotten after the window
    limiter.succeeded("c", "192.0.2.1")
    for i in range(10):
        limiter.failed("x", f"192.0.2.{100 + i}")
    assert len(limiter.pairs) <= 3 and len(limiter.addresses) <= 3  # bounded memory
    assert limiter.source("192.0.2.9", "1.2.3.4") == "192.0.2.9"
    assert limiter.source("10.0.0.1", "1.2.3.4") == "1.2.3.4"
    assert limiter.source("10.0.0.1", "6.6.6.6, 1.2.3.4, 10.9.3.3") == "1.2.3.4"  # the right-most untrusted
    assert limiter.source("10.0.0.1", "junk, 10.9.3.3") == "10.9.3.3"
    assert limiter.source("10.0.0.1", None) == "10.0.0.1"
    with pytest.raises(Exception, match="CATALOG_TRUSTED_PROXIES"):
        parse_trusted_proxies("10.0.0.0/33")
