"""``Idempotency-Key``: a retried request gets the final response of its first run, with no
second effect.

For an operation marked ``opt={"idempotent": True}`` that carries the header (and while
``/v1/config`` advertises ``idempotency-key-lifetime``):

1. Keys are scoped per client, as the spec says: with authentication on, the key is recorded as the
   SHA-256 of the principal and the key (``scoped``), so another principal's use of the same key is
   a key this one never used: its request runs as its own, and nothing tells it the key was taken.
   The request's fingerprint is the SHA-256 of its method, path, principal and body. A key already
   recorded (by this principal) with another fingerprint is a 400; a recorded key is answered with its
   recorded response, and the handler does not run.
2. Commits record the key in their own CAS transaction (``key_of``): a commit that landed is
   replayed, never run again, even when the server died before it could answer. Its 200 is stored
   as the new metadata file's location, not as a copy of the metadata, and rebuilt in the shape of
   the route's result (``entries.COMMIT_RESULT`` / ``LOAD_RESULT``).
3. Other final responses (2xx, and 4xx other than 401, 403, 408 and 429) are recorded after the
   handler, before the response is sent. If a concurrent request with the same key recorded first,
   its response is sent instead. 5xx responses are never recorded.

Records older than the lifetime (plus a grace period) are deleted now and then.

A read the spec documents the header on (scan planning: ``wire.IDEMPOTENT_READ``) has its key
checked and nothing more: it runs again on a retry, and no answer is stored under the key.

The body has to be read whole before the handler runs (it is part of the fingerprint), so this
middleware applies ``max_request_bytes`` itself, as Litestar does for other requests: a body declared
or received over the limit is answered 413 at once, without reading the rest.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

from litestar import Request, Response
from litestar.params import RawBody

from catalog import errors
from catalog.api import selection, wire
from catalog.api.context import AppState
from catalog.database.pointers import KeyRecord
from catalog.usecases import Committed

log = logging.getLogger("catalog.idempotency")

_NOT_FINAL = {401, 403, 408, 429}
_GRACE_MS = 5 * 60 * 1000
_EXPIRE_EVERY_S = 60.0


def key_of(request: Request, status: int) -> KeyRecord | None:
    """The record a commit writes in its CAS transaction, if the request has a key: its status
    (the commit engine adds the new metadata location of a 200)."""
    pending = request.scope.get("idempotency")
    return None if pending is None else KeyRecord(pending.key, pending.fingerprint, status)


def settle(request: Request, outcome: Committed) -> None:
    """Tell the middleware the commit recorded the key itself (so it records nothing more)."""
    pending = request.scope.get("idempotency")
    if pending is not None and outcome.recorded:
        pending.settled = True


async def replay(request: Request) -> Response:
    """The recorded response for this request's key (a commit lost its key to a concurrent twin)."""
    ctx, pending = selection.current(request.scope["app"].state), request.scope["idempotency"]
    record = await wire.blocking(ctx.catalog.recorded, pending.key)
    if record is None:  # the twin's transaction rolled back after all: let the client retry
        raise errors.CommitFailed("Commit failed: a request with the same Idempotency-Key did not complete")
    pending.settled = True
    status, headers, body = await _recorded_response(request.scope, record)
    return Response(content=body, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


def scoped(key: str, principal: str | None) -> str:
    """The key as recorded: a principal's own (64 hex characters, within the column's 128), or the
    key itself without authentication (one client)."""
    if principal is None:
        return key
    return hashlib.sha256(f"{principal}\n{key}".encode()).hexdigest()


class _Pending:
    """The key of the request being handled; ``settled`` once its record exists and the response
    is the one it stands for (set by ``settle`` and ``replay``, in this layer only)."""

    __slots__ = ("key", "fingerprint", "settled")

    def __init__(self, key: str, fingerprint: str) -> None:
        self.key, self.fingerprint = key, fingerprint
        self.settled = False


class Idempotency:
    """ASGI middleware: steps 1 and 3 of the module docstring."""

    def __init__(self, app: Any, lifetime_seconds: int, max_body_bytes: int) -> None:
        self.app, self.lifetime_ms, self.max_body_bytes = app, lifetime_seconds * 1000, max_body_bytes
        self._next_expiry = 0.0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        handler = scope.get("route_handler")
        idempotent = self.lifetime_ms and handler is not None and handler.opt.get("idempotent")
        key = dict(scope.get("headers") or ()).get(b"idempotency-key") if idempotent else None
        if key is None:  # loads and the rest pass straight through
            await self.app(scope, receive, send)
            return
        ctx = selection.current(scope["app"].state)
        key_text = key.decode("latin-1").strip()
        if not 0 < len(key_text) <= 128:
            await _send(
                send, *errors.render(errors.BadRequest("Invalid Idempotency-Key: expected 1 to 128 characters"))
            )
            return
        if idempotent == "read":  # ``wire.IDEMPOTENT_READ``: it runs again, as any read
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(scope, receive, self.max_body_bytes)
        except errors.RequestTooLarge as e:
            await _send(send, *errors.render(e))
            return
        if body is None:  # the client left before sending all of it: nothing to run, no one to answer
            return
        # The principal is part of the request: a key is replayed only to the principal that used it.
        who = scope.get("principal")
        head = f"{scope['method']} {scope['path']} {who.name if who is not None else ''}\n"
        digest = hashlib.sha256(head.encode() + body).hexdigest()
        key_text = scoped(key_text, who.name if who is not None else None)
        try:
            recorded = await wire.blocking(ctx.catalog.recorded, key_text)
        except errors.IcebergError as e:  # the database is away: nothing ran
            await _send(send, *errors.render(e))
            return
        if recorded is not None:
            await _send(send, *await _replay_or_refuse(scope, recorded, digest))
            return

        pending = _Pending(key_text, digest)
        scope = {**scope, "idempotency": pending}
        response: dict[str, Any] = {"status": 500, "headers": []}
        chunks: list[bytes] = []  # joined once: growing one bytes object is quadratic

        async def capture(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                response["status"], response["headers"] = message["status"], message.get("headers", [])
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, _replayed(body), capture)
        response["body"] = b"".join(chunks)
        status = response["status"]
        if status < 500 and status not in _NOT_FINAL and not pending.settled:
            mine = KeyRecord(key_text, digest, status, response["body"] or None)
            try:
                first = await wire.blocking(ctx.catalog.record, mine)
            except errors.IcebergError as e:  # the operation's own outcome still stands: answer it
                log.warning("could not record Idempotency-Key %s: %s", key_text, e.message)
                first = None
            if first is not None:  # a concurrent twin recorded first: its response is the answer
                status, response["headers"], response["body"] = await _recorded_response(scope, first)
        await _send(send, status, response["headers"], response["body"])
        await self._expire(ctx)

    async def _expire(self, ctx: AppState) -> None:
        now = time.monotonic()
        if now < self._next_expiry:
            return
        self._next_expiry = now + _EXPIRE_EVERY_S
        cutoff = int(time.time() * 1000) - self.lifetime_ms - _GRACE_MS
        try:
            await wire.blocking(ctx.catalog.expire_keys, cutoff)
        except Exception as e:  # noqa: BLE001 - the response is sent; the next request tries again
            log.warning("could not expire idempotency keys: %s", e)
            self._next_expiry = 0.0


async def _replay_or_refuse(scope: dict[str, Any], record: KeyRecord, fingerprint: str) -> tuple[int, list, bytes]:
    if record.fingerprint != fingerprint:
        return errors.render(errors.BadRequest("Idempotency-Key was already used for a different request"))
    return await _recorded_response(scope, record)


async def _recorded_response(scope: dict[str, Any], record: KeyRecord) -> tuple[int, list, bytes]:
    """The response a record stands for. A commit's 200 is rebuilt from its metadata file, in the
    shape its route answers (the route's ``result`` option: a commit or a load result)."""
    if record.metadata_location is None:
        headers = [(b"content-type", wire.JSON.encode())] if record.body else []
        return record.status, headers, record.body or b""
    ctx = selection.current(scope["app"].state)
    try:
        file = await wire.blocking(ctx.catalog.read_file, record.metadata_location)
    except errors.NotFound:
        return errors.render(
            errors.NotFound(f"The response's metadata file no longer exists: {record.metadata_location}")
        )
    except errors.IcebergError as e:  # storage is away
        return errors.render(e)
    handler = scope.get("route_handler")
    config = ctx.table_config if handler is not None and handler.opt.get("result") == "load" else None
    body = wire.load_result(record.metadata_location, file.raw, config)
    return record.status, [(b"content-type", wire.JSON.encode())], body


async def _read_body(scope: dict[str, Any], receive: Any, limit: int) -> bytes | None:
    """The whole body, in linear time; ``RequestTooLarge`` as soon as the declared length or the
    bytes received pass ``limit``; None if the client disconnected first."""
    declared = dict(scope.get("headers") or ()).get(b"content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise errors.RequestTooLarge()
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise errors.RequestTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replayed(body: RawBody) -> Any:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _send(send: Any, status: int, headers: list, body: RawBody) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
