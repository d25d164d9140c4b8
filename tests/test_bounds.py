"""Requests are bounded: no body, cached file or connection a client controls can exhaust the server.

Each backend gets its own server with small limits; the assertions read the server process itself
(/proc/<pid>: resident memory, open descriptors) and its /metrics, not only status codes.
"""

from __future__ import annotations

import http.client
import os
import re
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import requests

from catalog.storage.metadata_files import COST_PER_JSON_BYTE
from tests.support import Http, Server, assert_error, backends, create, load, s3_client_props, s3_env, start_server

MAX_BODY = 1_000_000
CACHE_BUDGET = 3_000_000
MAX_CONNECTIONS = 40
HEAD_TIMEOUT = 1.0
BODY_TIMEOUT = 2.0
MAX_HEAD = 16_384
SEND_BUFFER = 256 * 1024  # the streaming client's: small, so that what it sent is near what the server got
LIMITS = {
    "CATALOG_MAX_REQUEST_BYTES": str(MAX_BODY),
    "CATALOG_METADATA_CACHE_BYTES": str(CACHE_BUDGET),
    "CATALOG_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
    "CATALOG_HEADER_TIMEOUT_SECONDS": str(HEAD_TIMEOUT),
    "CATALOG_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
    "CATALOG_MAX_HEADER_BYTES": str(MAX_HEAD),
}


@pytest.fixture(scope="module", params=backends())
def bounded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = dict(LIMITS)
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        env.update({"CATALOG_DATABASE_URL": services["pg"].url, **s3_env(services["s3"], "bounds")})
    srv = start_server(tmp_path_factory.mktemp(f"bounds-{request.param}"), request.param, env)
    if request.param == "postgres-s3":
        srv.io_props = s3_client_props(services["s3"])
    yield srv
    srv.stop()


@pytest.fixture
def web(bounded: Server) -> Iterator[requests.Session]:
    with requests.Session() as session:
        yield session


def _port(srv: Server) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def _connect(srv: Server, timeout: float = 5.0) -> socket.socket:
    return socket.create_connection(("127.0.0.1", _port(srv)), timeout=timeout)


def _receive_buffer_max() -> int:
    """The most a TCP socket's receive buffer grows to (Linux: tcp_rmem's third value)."""
    return int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _answer(sock: socket.socket, timeout: float) -> tuple[int, bytes]:
    """The server's response on ``sock`` (status, body); (0, b"") if none came within ``timeout``."""
    sock.settimeout(timeout)
    resp = http.client.HTTPResponse(sock)
    try:
        resp.begin()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException):
        return 0, b""


def _error_type(body: bytes) -> str:
    return orjson.loads(body)["error"]["type"]


def _gauge(web: requests.Session, srv: Server, name: str) -> float:
    text = web.get(f"{srv.url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


# Request bodies -------------------------------------------------------------------------------------


def test_keyed_streamed_body_over_the_limit_is_refused_before_it_is_read(bounded):
    """The Idempotency-Key path buffers the body for its fingerprint: 50 MB streamed (chunked, no
    length) must be answered 413 as soon as the limit passes, not buffered whole."""
    pid, total, piece = bounded.proc.pid, 50 * 2**20, b"x" * 65536
    rss_before = _rss_kib(pid)
    head = (
        f"POST /v1/namespaces/ns_{uuid.uuid4().hex[:8]}/tables/t HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Idempotency-Key: {uuid.uuid4()}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"

    def body() -> Iterator[bytes]:
        for _ in range(total // len(piece)):
            yield chunk

    sent, answered = 0, False
    start = time.monotonic()
    with _connect(bounded) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        sock.sendall(head)
        for part in body():
            try:
                sock.sendall(part)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
            if select.select([sock], [], [], 0)[0]:  # the server has answered: stop sending
                answered = True
                break
        status, body = _answer(sock, 5)
    elapsed = time.monotonic() - start
    assert answered, f"no answer while sending {sent} bytes"
    assert status == 413 and _error_type(body) == "RequestTooLargeException", (status, body[:300])
    assert elapsed < 5.0, elapsed  # a bound on behaviour, not a speed target: buffering 50 MB took far longer
    # Answered before the 50 MB were sent. What the client pushed until it saw the answer is the
    # limit plus what the sockets hold meanwhile: the server's receive buffer grows up to the
    # kernel's tcp_rmem maximum (32 MB on the CI machine) while the answer is on its way.
    assert sent < min(total, MAX_BODY + _receive_buffer_max() + 4 * SEND_BUFFER), sent
    assert _rss_kib(pid) - rss_before < 20 * 1024, (rss_before, _rss_kib(pid))


@pytest.mark.parametrize("keyed", [True, False], ids=["with-key", "without-key"])
def test_declared_length_over_the_limit_is_refused_unread(bounded, keyed):
    """A Content-Length over the limit is answered at once: the client sends no body at all."""
    key = f"Idempotency-Key: {uuid.uuid4()}\r\n" if keyed else ""
    head = (
        f"POST /v1/namespaces/ns_{uuid.uuid4().hex[:8]}/tables/t HTTP/1.1\r\nHost: 127.0.0.1\r\n{key}"
        f"Content-Type: application/json\r\nContent-Length: {50 * 2**20}\r\n\r\n"
    ).encode()
    start = time.monotonic()
    with _connect(bounded) as sock:
        sock.sendall(head)
        status, body = _answer(sock, 3)
    assert status == 413 and _error_type(body) == "RequestTooLargeException", (status, body[:300])
    assert time.monotonic() - start < 5.0  # a bound on behaviour: unread, so no waiting on a body


def test_sent_body_over_the_limit_is_the_same_error_with_or_without_key(bounded, web):
    path = f"{bounded.url}/v1/namespaces/ns_{uuid.uuid4().hex[:8]}/tables/t"
    big = b'{"updates": [], "pad": "' + b"x" * (MAX_BODY + 10) + b'"}'
    for headers in ({"Idempotency-Key": str(uuid.uuid4())}, {}):
        resp = web.post(path, data=big, headers={"Content-Type": "application/json", **headers}, timeout=10)
        assert_error(resp, 413, "RequestTooLargeException")


def test_keyed_commit_under_the_limit_still_works(bounded, web):
    http = Http(bounded.url, web, timeout=30)
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    assert web.post(f"{bounded.url}/v1/namespaces", json={"namespace": [ns]}, timeout=10).status_code == 200
    create(http, ns, "t")
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"pad": "y" * (MAX_BODY // 2)}}]}
    key = {"Idempotency-Key": str(uuid.uuid4())}
    first = web.post(f"{bounded.url}/v1/namespaces/{ns}/tables/t", json=body, headers=key, timeout=30)
    assert first.status_code == 200, first.text[:300]
    again = web.post(f"{bounded.url}/v1/namespaces/{ns}/tables/t", json=body, headers=key, timeout=30)
    assert again.status_code == 200 and again.content == first.content


# Metadata cache -------------------------------------------------------------------------------------


def test_metadata_cache_holds_no_more_than_its_budget(bounded, web):
    """Commits of a table with fat properties: each new file is cached (and counted at
    COST_PER_JSON_BYTE times its JSON size); the cache evicts to stay within its byte budget, and a
    file over the whole budget is not cached at all."""
    http = Http(bounded.url, web, timeout=30)
    ns = f"ns_{uuid.uuid4().hex[:10]}"
    assert web.post(f"{bounded.url}/v1/namespaces", json={"namespace": [ns]}, timeout=10).status_code == 200
    create(http, ns, "t")
    path = f"/v1/namespaces/{ns}/tables/t"
    charged = 0
    for i in range(12):  # each file ~100 KB of JSON, charged ~600 KB: 12 of them are 2.4x the budget
        updates = [{"action": "set-properties", "updates": {"fat": f"{i}" + "z" * 100_000}}]
        resp = http.post(path, json={"requirements": [], "updates": updates})
        assert resp.status_code == 200, resp.text[:300]
        charged += COST_PER_JSON_BYTE * len(load(http, ns, "t")["metadata"]["properties"]["fat"])
        held = _gauge(web, bounded, "catalog_metadata_cache_bytes")
        assert 0 < held <= CACHE_BUDGET, (i, held)
    assert charged > 2 * CACHE_BUDGET  # eviction had to happen

    # A file bigger than the whole budget: never cached, so every load of it reads storage.
    updates = [{"action": "set-properties", "updates": {"fat": "w" * (CACHE_BUDGET // COST_PER_JSON_BYTE + 1000)}}]
    assert http.post(path, json={"requirements": [], "updates": updates}).status_code == 200
    misses = _gauge(web, bounded, "catalog_metadata_cache_misses")
    for _ in range(3):
        load(http, ns, "t")
    assert _gauge(web, bounded, "catalog_metadata_cache_misses") == misses + 3
    assert _gauge(web, bounded, "catalog_metadata_cache_bytes") <= CACHE_BUDGET


# Connections ----------------------------------------------------------------------------------------


def _closed_by_server(sock: socket.socket) -> bool:
    """True once the server closed (FIN or reset), without blocking."""
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        sock.settimeout(0.1)
        while True:  # drain what the server said before closing (a 4xx/5xx at most)
            data = sock.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _wait_fds(pid: int, at_most: int, seconds: float) -> int:
    deadline = time.monotonic() + seconds
    fds = _open_fds(pid)
    while fds > at_most and time.monotonic() < deadline:
        time.sleep(0.05)
        fds = _open_fds(pid)
    return fds


def test_idle_and_slow_connections_are_closed_and_others_still_served(bounded, web):
    """Connections that send nothing, or a request head a byte at a time, are closed within the
    head timeout; a normal request is served while they are open."""
    pid = bounded.proc.pid
    assert web.get(f"{bounded.url}/v1/config", timeout=5).status_code == 200
    baseline = _open_fds(pid)
    idle = [_connect(bounded) for _ in range(10)]
    slow = [_connect(bounded) for _ in range(10)]
    opened = time.monotonic()
    for sock in slow:
        sock.sendall(b"GET /v1/config HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    trickle = b"X-Slow: " + b"a" * 200
    assert _wait_fds(pid, baseline + 20, 0) <= baseline + 20 + 2

    with requests.Session() as other:  # a client of its own: its connection is a new one
        assert other.get(f"{bounded.url}/v1/config", timeout=5).status_code == 200

    closed: set[int] = set()
    sockets = idle + slow
    for step in range(int((HEAD_TIMEOUT + 3) / 0.1)):  # bounded: ~4 s
        for i, sock in enumerate(sockets):
            if i in closed:
                continue
            if _closed_by_server(sock):
                closed.add(i)
            elif i >= len(idle):
                try:
                    sock.sendall(trickle[step % len(trickle) : step % len(trickle) + 1])
                except (BrokenPipeError, ConnectionResetError):
                    closed.add(i)
        if len(closed) == len(sockets):
            break
        time.sleep(0.1)
    took = time.monotonic() - opened
    for sock in sockets:
        sock.close()
    assert len(closed) == len(sockets), f"{len(sockets) - len(closed)} connections still open after {took:.1f}s"
    assert took < HEAD_TIMEOUT + 1.5, took
    assert _wait_fds(pid, baseline + 2, 3) <= baseline + 2


def test_pending_requests_are_counted_until_answered_or_gone(bounded, web):
    """``catalog_http_requests_pending``: a request counts from its head until its answer, or
    until its client goes away (the scrape counts itself)."""
    with requests.Session() as other:
        for _ in range(5):
            assert other.get(f"{bounded.url}/v1/config", timeout=5).status_code == 200
    assert _gauge(web, bounded, "catalog_http_requests_pending") == 1
    with _connect(bounded) as sock:  # a head read, its body still to come
        sock.sendall(
            b"POST /v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        deadline = time.monotonic() + BODY_TIMEOUT / 2
        while _gauge(web, bounded, "catalog_http_requests_pending") != 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _gauge(web, bounded, "catalog_http_requests_pending") == 2
    deadline = time.monotonic() + 5
    while _gauge(web, bounded, "catalog_http_requests_pending") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gauge(web, bounded, "catalog_http_requests_pending") == 1


def test_slow_body_is_closed_after_the_body_timeout(bounded):
    with _connect(bounded) as sock:
        sock.sendall(
            b"POST /v1/namespaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 1000\r\n\r\n{"
        )
        start = time.monotonic()
        closed = False
        while not closed and time.monotonic() - start < BODY_TIMEOUT + 3:
            time.sleep(0.2)
            closed = _closed_by_server(sock)
            if not closed:
                try:
                    sock.sendall(b" ")  # a byte now and then: still never done
                except (BrokenPipeError, ConnectionResetError):
                    closed = True
        took = time.monotonic() - start
    assert closed and BODY_TIMEOUT - 0.5 < took < BODY_TIMEOUT + 1.5, took


def test_a_client_that_leaves_mid_body_is_no_server_error(bounded, web):
    """A client killed while sending its body (a CLI stopped with kill, a timed-out job) is counted
    as 499, "client closed request", and logged without a traceback: a 5xx is the server's fault."""

    def count(status: str) -> float:
        text = web.get(f"{bounded.url}/metrics", timeout=10).text
        pattern = rf'catalog_http_requests_total{{method="POST",route="/v1/events",status="{status}"}} (\S+)'
        found = re.search(pattern, text)
        return float(found.group(1)) if found else 0.0

    before_499, before_500 = count("499"), count("500")
    for _ in range(3):
        with _connect(bounded) as sock:
            sock.sendall(
                b"POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{"
            )
            time.sleep(0.3)  # the server is waiting for the rest of the body
    deadline = time.monotonic() + 10
    while count("499") < before_499 + 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert count("499") == before_499 + 3 and count("500") == before_500
    assert "client disconnected prematurely" not in bounded.log.read_text()


def test_endless_request_head_is_refused_431(bounded):
    """A head growing without end is refused once it passes ``max_header_bytes``, before the timeout."""
    with _connect(bounded) as sock:
        head = b"GET /v1/config HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
        sock.sendall(head)
        sent = len(head)
        try:
            for _ in range(40):  # up to 40 x 8 KB, without ever ending the head
                sock.sendall(b"b" * 8192)
                sent += 8192
                if select.select([sock], [], [], 0)[0]:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        status, body = _answer(sock, 3)
    assert status == 431 and _error_type(body) == "RequestHeaderFieldsTooLargeException", (status, body[:200])
    # Without the cap the head (never ended) would get no answer at all: the head timeout closes it silently.
    assert sent > MAX_HEAD


def test_connection_cap_refuses_the_excess_at_once(bounded):
    """Over ``max_connections``, a connection is answered 503 and closed as soon as it is accepted:
    the server never holds more descriptors than the cap, and serves again once they are gone."""
    pid = bounded.proc.pid
    time.sleep(0.2)
    baseline = _open_fds(pid)
    sockets = [_connect(bounded) for _ in range(MAX_CONNECTIONS + 60)]
    refused = 0
    deadline = time.monotonic() + 1.0
    pending = list(sockets)
    while pending and time.monotonic() < deadline:  # bounded: 1 s
        still = []
        for sock in pending:
            if select.select([sock], [], [], 0)[0]:
                status, body = _answer(sock, 0.5)
                if status == 503 and _error_type(body) == "ServiceUnavailableException":
                    refused += 1
            else:
                still.append(sock)
        pending = still
        time.sleep(0.05)
    held_fds = _open_fds(pid)
    for sock in sockets:
        sock.close()
    assert refused >= 55, refused  # the 60 over the cap (a few may have been closed on us first)
    assert held_fds <= baseline + MAX_CONNECTIONS + 5, (baseline, held_fds)
    assert _wait_fds(pid, baseline + 2, HEAD_TIMEOUT + 3) <= baseline + 2
    assert requests.get(f"{bounded.url}/v1/config", timeout=5).status_code == 200
