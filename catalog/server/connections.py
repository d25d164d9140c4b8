"""The HTTP connection protocol: uvicorn's httptools protocol plus the deadlines it lacks.

uvicorn (0.54) arms a timer only between requests (``timeout_keep_alive``, after a response). A
connection that sends nothing after connecting, or sends its request head a byte at a time
(slowloris), or a body that never ends, is held forever: each holds a file descriptor, and 1,100 of
them exhausted the server's. uvicorn's ``limit_concurrency`` does not help there: it is checked
only when a request head is complete, so a connection that never completes one is never counted
against it. httptools also buffers a header of any length (uvicorn's ``h11_max_incomplete_event_size``
applies to the h11 protocol only).

This protocol adds, per connection:

- a head deadline (``header_timeout_seconds``), from connecting or from the first byte of a next
  request on a kept-alive connection, to the end of the request head;
- a body deadline (``body_timeout_seconds``), from the end of the head to the end of the body;
- a head size cap (``max_header_bytes``): 431 and close;
- the connection cap (``max_connections``): a connection over it is answered 503 and closed as soon
  as it is accepted, instead of holding a descriptor until its request head is complete.

A deadline that passes closes the connection. The idle time between requests stays uvicorn's
keep-alive timer (``idle_timeout_seconds``).
"""

from __future__ import annotations

import functools
from asyncio import TimerHandle
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from catalog import errors
from catalog.api.observation import PENDING
from catalog.server.coalescing import Coalescing
from catalog.settings import ServerSettings


@functools.cache
def _limits() -> ServerSettings:
    # uvicorn builds the protocol itself (in each worker process): the limits come from the
    # environment, where the CLI puts every setting.
    return ServerSettings()


def _response(err: errors.IcebergError, reason: str) -> bytes:
    """A complete HTTP response, written before any request reached the app."""
    status, headers, body = errors.render(err)
    head = f"HTTP/1.1 {status} {reason}\r\nconnection: close\r\n".encode()
    head += b"".join(name + b": " + value + b"\r\n" for name, value in headers)
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


_UNAVAILABLE = _response(errors.ServiceUnavailable("Too many open connections"), "Service Unavailable")
_HEAD_TOO_LARGE = _response(errors.HeadTooLarge("Request head is too large"), "Request Header Fields Too Large")


class BoundedHttpProtocol(HttpToolsProtocol):
    """Passed to uvicorn as ``http=``; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = _limits()
        self._max_connections = limits.max_connections
        self._head_timeout = limits.header_timeout_seconds
        self._body_timeout = limits.body_timeout_seconds
        self._max_head = limits.max_header_bytes
        self._deadline: float | None = None  # loop time by which the current phase must end
        self._timer: TimerHandle | None = None  # fires at or before ``_deadline`` (see ``_arm``)
        self._reading_head = False
        self._head_bytes = 0
        self._draining = False
        self._pending = False  # a request of this connection counted in ``observation.PENDING``

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = Coalescing(transport, self.loop)  # one write per response: coalescing.py
        if len(self.connections) > self._max_connections:
            self._refuse(_UNAVAILABLE)
            return
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._answered()
        self._disarm()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._draining:  # answered and closing: what the client still sends is discarded
            return
        counting = self._reading_head
        super().data_received(data)
        # A chunk that completes the head is let through whole: the head is at most one read over.
        if counting and self._reading_head:
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head:
                self._refuse(_HEAD_TOO_LARGE, linger=2.0)

    # httptools parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._reading_head:  # a next request on a kept-alive connection
            self._start_head()

    def on_headers_complete(self) -> None:
        if not self._pending:
            self._pending = True
            PENDING.count += 1
        self._reading_head = False
        self._arm(self._body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._answered()
        super().on_response_complete()

    def _answered(self) -> None:
        if self._pending:
            self._pending = False
            PENDING.count -= 1

    def _start_head(self) -> None:
        self._reading_head, self._head_bytes = True, 0
        self._arm(self._head_timeout)

    def _arm(self, seconds: float) -> None:
        """The current phase must end within ``seconds``. Each request moves the deadline two or
        three times: the deadline is a number, and one timer per connection checks it when it fires
        (re-armed for what is left if the deadline moved later), instead of a timer scheduled and
        cancelled per phase. A deadline earlier than the timer gets a new timer."""
        self._deadline = deadline = self.loop.time() + seconds
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.loop.call_at(deadline, self._check)

    def _disarm(self) -> None:
        self._deadline = None  # a pending timer finds nothing due and lapses

    def _check(self) -> None:
        self._timer = None
        if self._deadline is None:
            return
        if self.loop.time() < self._deadline:  # moved later since: wait for what is left
            self._timer = self.loop.call_at(self._deadline, self._check)
            return
        self._expired()

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()  # a handler still reading the body sees a disconnect

    def _refuse(self, response: bytes, linger: float = 0.0) -> None:
        """Answer and close. ``linger``: half-close first and discard what the client still sends for
        up to that long: closing a socket with unread data resets the connection, and a reset can
        destroy the answer before the client reads it (a client still sending its head, for one)."""
        self._disarm()
        self._reading_head = False
        if self.transport.is_closing():
            return
        self.transport.write(response)
        if linger and self.transport.can_write_eof():
            self._draining = True
            self.transport.write_eof()
            self._arm(linger)
        else:
            self.transport.close()
