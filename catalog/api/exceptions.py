"""The Iceberg error body for whatever a request raised: THE map from framework and unexpected
exceptions to Iceberg errors (rendered by ``errors.render``, the one renderer)."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException
from pydantic import ValidationError

from catalog import errors, logs
from catalog.api import wire
from catalog.api.observation import CLIENT_CLOSED, CLIENT_GONE

log = logging.getLogger("catalog")


def error_response(request: Request, exc: Exception) -> Response:
    err = as_iceberg(exc)
    if err.code >= 500 and request.scope.get(CLIENT_GONE):  # no one to answer; not the server's fault
        log.info("%s %s: the client went away before it was answered", request.method, request.url.path)
        return Response(content=None, status_code=CLIENT_CLOSED)
    if err.code == 503:  # an unreachable dependency: expected in operation, no traceback needed
        rid = logs.request_id.get() or "none"
        detail = f" ({err.detail})" if err.detail else ""
        log.warning("%s %s -> 503 (request id %s): %s%s", request.method, request.url.path, rid, err.message, detail)
        err = with_request_id(err, rid)
    elif err.code >= 500:  # the details (SQL, stack) go to the log only; the body has the request id
        detail = err.message if err is exc else f"{type(exc).__name__}: {exc}"
        if err.detail:
            detail += f" ({err.detail})"
        log.error("%s %s -> %s: %s", request.method, request.url.path, err.code, detail, exc_info=exc)
    elif err.detail:  # what the client may not be told (another entry, a server path): the log has it
        log.warning("%s %s -> %s: %s (%s)", request.method, request.url.path, err.code, err.message, err.detail)
    status, headers, body = errors.render(err, head=request.method == "HEAD")
    return Response(content=body or None, status_code=status, headers={k.decode(): v.decode() for k, v in headers})


def with_request_id(err: errors.IcebergError, rid: str) -> errors.IcebergError:
    """A 503 as the client sees it: what kind of dependency failed, and the request id that finds the
    log line with where and why."""
    if "request id" in err.message:
        return err
    out = errors.ServiceUnavailable(f"{err.message} (request id {rid})")
    out.type, out.code = err.type, err.code
    return out


def as_iceberg(exc: Exception) -> errors.IcebergError:
    """The Iceberg error for any exception. One that is not an Iceberg error is a bug: its text may
    hold SQL, parameters or file content, so the client gets a fixed message with the request id
    (the log line with the details carries the same id)."""
    if isinstance(exc, errors.IcebergError):
        return exc
    if isinstance(exc, ValidationError):
        return errors.BadRequest(f"Malformed request: {wire.describe(exc)}")
    if isinstance(exc, HTTPException) and exc.status_code < 500:
        code = exc.status_code
        if code == 404:
            return errors.FromFramework(f"No route for this path: {exc.detail}", 404, "NotFoundException")
        if code == 413:  # Litestar's request_max_body_size; the same error as api.idempotency's
            return errors.RequestTooLarge()
        if code == 405:
            return errors.FromFramework(f"Malformed request: {exc.detail}", 405, "MethodNotAllowedException")
        return errors.FromFramework(f"Malformed request: {exc.detail}", code)
    rid = logs.request_id.get() or "none"
    message = f"Internal server error (request id {rid}); the details are in the server log"
    code = exc.status_code if isinstance(exc, HTTPException) else 500
    return errors.FromFramework(message, code, "InternalServerError")


async def send_error(send: Any, err: errors.IcebergError) -> None:
    status, headers, body = errors.render(err)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
