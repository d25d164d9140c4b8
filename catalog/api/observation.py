"""What every request leaves behind: its id (``X-Request-Id``), its count and latency by route
template and status, its access line, and the audit line of each mutating request and refusal."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from catalog import logs, metrics
from catalog.api import guard
from catalog.api.selection import WAREHOUSE
from catalog.auth.principals import ANONYMOUS

audit_log = logging.getLogger("catalog.audit")
access_log = logging.getLogger("catalog.access")
# Probes and scrapes come every few seconds: their access lines are at debug, the others at info.
_QUIET_ROUTES = frozenset({"/health/live", "/health/ready", "/metrics"})
_MUTATING = frozenset({"POST", "PUT", "DELETE", "PATCH"})
# Set in the request's scope when the client disconnected before the request was answered.
CLIENT_GONE = "catalog.client_gone"
CLIENT_CLOSED = 499


class Pending:
    """The requests this process has read the head of and not yet answered. The HTTP protocol
    counts them (``server.connections``) as it parses each head, before the request's handler runs;
    zero under any other server. An inline commit syncs its file off the event loop only when
    another request is pending (``commit.inline.InlineCommitter``)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


PENDING = Pending()


class RequestObservation:
    """Per request: an id (``X-Request-Id``, taken from the client or made up) in logs and the
    response, the request count and latency by route template and status, the access line (method,
    route template, status, duration, principal when authentication is on; info, probes and scrapes
    at debug), and the audit line of each mutating request and each refusal (principal, action,
    object, outcome, request id; the principal and object as the route's authorization check
    recorded them).

    A client that goes away before its request was answered (its body never came in whole, say)
    is counted and logged with status 499, nginx's "client closed request": it is not a server
    error, and no one is left to receive an answer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id").decode("latin-1")[:64]
        rid = incoming or os.urandom(8).hex()  # 16 hex digits, as random as uuid4's first 16
        token = logs.request_id.set(rid)
        scope["audit"] = audit = {}
        status = 500
        start = time.perf_counter()

        async def receive_watched() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope[CLIENT_GONE] = True
            return message

        async def send_with_id(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive_watched, send_with_id)
        finally:
            if scope.get(CLIENT_GONE) and status >= 500:
                status = CLIENT_CLOSED
            handler = scope.get("route_handler")
            route = _route(handler)
            seconds = time.perf_counter() - start
            count, latency = _series(scope["method"], route, status)
            count.inc()
            latency.observe(seconds)
            _access(scope, route, status, seconds, audit)
            if scope["method"] in _MUTATING or status in (401, 403) or audit.get("denied"):
                _audit(scope, handler, audit, status)
            logs.request_id.reset(token)


def _header(scope: dict[str, Any], name: bytes) -> bytes:
    """The header's value (the last one, if sent twice), without copying the headers into a dict."""
    found = b""
    for key, value in scope.get("headers") or ():
        if key == name:
            found = value
    return found


def _route(handler: Any) -> str:
    if handler is None:
        return "unmatched"
    return handler.paths and min(handler.paths)


_children: dict[tuple[str, str, int], tuple[Any, Any]] = {}  # the request metrics' series, looked up once


def _series(method: str, route: str, status: int) -> tuple[Any, Any]:
    """The request counter's and latency histogram's series of (method, route, status)."""
    key = (method, route, status)
    found = _children.get(key)
    if found is None:
        if len(_children) > 4096:  # methods are the client's to choose: keep the cache bounded
            _children.clear()
        found = _children[key] = (
            metrics.REQUESTS.labels(method, route, str(status)),
            metrics.REQUEST_SECONDS.labels(method, route),
        )
    return found


def _access(scope: dict[str, Any], route: str, status: int, seconds: float, audit: dict[str, Any]) -> None:
    level = logging.DEBUG if route in _QUIET_ROUTES else logging.INFO
    if not access_log.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "method": scope["method"],
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
    }
    who = scope.get("principal")
    if who is not None and who is not ANONYMOUS:  # authentication is on
        fields["principal"] = audit.get("principal") or who.name
    logs.line(access_log, level, f"{scope['method']} {route} -> {status} in {seconds * 1000:.1f} ms", fields)


def _audit(scope: dict[str, Any], handler: Any, audit: dict[str, Any], status: int) -> None:
    who = scope.get("principal")
    target, privileges = guard.audited(audit)
    fields = {
        "principal": audit.get("principal") or (who.name if who is not None else None),
        "action": handler.handler_name if handler is not None else "unmatched",
        "object": target,
        "privileges": privileges,
        # denied: also a refusal answered as a missing id (``guard.require_seen``)
        "outcome": "denied" if status in (401, 403) or audit.get("denied") else "allowed" if status < 400 else "failed",
        "status": status,
        "method": scope["method"],
        "path": scope.get("path"),
    }
    if (warehouse := WAREHOUSE.get()) is not None:  # a request under /v1/<warehouse>/
        fields["warehouse"] = warehouse
    if audit_log.isEnabledFor(logging.INFO):
        message = f"{fields['principal']} {fields['action']} {fields['object'] or '-'} -> {status}"
        logs.line(audit_log, logging.INFO, message, fields)
