"""Errors carrying the Iceberg REST error ``type`` and HTTP status.

Clients branch on the ``type`` string (Java's exception simple name), so these names are part of the
protocol. This module imports no web framework; ``render`` is the one place an error becomes the
wire's status, headers and body ``{"error": {"message", "type", "code"}}``.
"""

from __future__ import annotations

import orjson


class IcebergError(Exception):
    """Base: ``type`` and ``code`` go to the wire as they are."""

    type: str = "InternalServerError"
    code: int = 500

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail  # for the server log only (paths, hosts, driver text): never in a body


class BadRequest(IcebergError):
    type, code = "BadRequestException", 400


class IllegalArgument(IcebergError):
    type, code = "IllegalArgumentException", 400


class ValidationFailed(IcebergError):
    type, code = "ValidationException", 400


class NotAuthorized(IcebergError):
    """401, with the RFC 6750 challenge: ``error="invalid_token"`` when a token was sent and refused
    (none when the request had no credentials at all)."""

    type, code = "NotAuthorizedException", 401

    def __init__(self, message: str, invalid_token: bool = False) -> None:
        super().__init__(message)
        self.challenge = 'Bearer realm="iceberg-catalog"' + (', error="invalid_token"' if invalid_token else "")


class Forbidden(IcebergError):
    """403: the request is understood and refused, e.g. a location outside the warehouse."""

    type, code = "ForbiddenException", 403


class NoSuchNamespace(IcebergError):
    type, code = "NoSuchNamespaceException", 404


class NoSuchTable(IcebergError):
    type, code = "NoSuchTableException", 404


class NoSuchView(IcebergError):
    type, code = "NoSuchViewException", 404


class NoSuchPlanId(IcebergError):
    type, code = "NoSuchPlanIdException", 404


class NoSuchPlanTask(IcebergError):
    type, code = "NoSuchPlanTaskException", 404


class NoSuchWarehouse(IcebergError):
    type, code = "NoSuchWarehouseException", 404

    @classmethod
    def named(cls, name: str) -> NoSuchWarehouse:
        """The one answer for a warehouse that is none or that the caller may not see (the name is
        the client's: shortened)."""
        return cls(f"Warehouse does not exist: {name if len(name) <= 64 else name[:64] + '...'}")


class NotFound(IcebergError):
    type, code = "NotFoundException", 404


class Unsupported(IcebergError):
    type, code = "UnsupportedOperationException", 406


class AlreadyExists(IcebergError):
    type, code = "AlreadyExistsException", 409


class NamespaceNotEmpty(IcebergError):
    type, code = "NamespaceNotEmptyException", 409


class Conflict(IcebergError):
    """409: the request conflicts with what is there (a warehouse that is not empty, overlapping ones)."""

    type, code = "ConflictException", 409


class CommitFailed(IcebergError):
    """409: nothing happened; the client may refresh and retry."""

    type, code = "CommitFailedException", 409


class RequirementFailed(CommitFailed):
    """409: a commit's requirement (assert-...) does not hold on the current metadata; the message names it."""


class RetryableValidation(CommitFailed):
    """409: Java's RetryableValidationException (a stale sequence number or first-row-id): the client
    must rebuild its change on the new metadata and retry."""


class RequestTooLarge(IcebergError):
    """413: the request body is over ``max_request_bytes``; it was not read further."""

    type, code = "RequestTooLargeException", 413

    def __init__(self, message: str = "Request body is larger than the server accepts") -> None:
        super().__init__(message)


class HeadTooLarge(IcebergError):
    """431: the request head is over ``max_header_bytes`` (answered before any route runs)."""

    type, code = "RequestHeaderFieldsTooLargeException", 431


class FromFramework(IcebergError):
    """An error the web framework raised (no route, wrong method...), with its status."""

    def __init__(self, message: str, code: int, type_: str = "BadRequestException") -> None:
        super().__init__(message)
        self.code, self.type = code, type_


class UnprocessableEntity(IcebergError):
    type, code = "UnprocessableEntityException", 422


class CommitStateUnknown(IcebergError):
    """500: the commit may or may not have happened. Clients must not retry or clean up."""

    type, code = "CommitStateUnknownException", 500


class ServiceUnavailable(IcebergError):
    """503: a dependency (database, storage) is unreachable; nothing was changed. The message says
    which kind of dependency failed and how, never where (no server paths, database host or port, or
    driver text): that goes to ``detail``, which the server logs with the request id."""

    type, code = "ServiceUnavailableException", 503


class NotImplementedOperation(IcebergError):
    type, code = "NotImplementedException", 501


def render(err: IcebergError, head: bool = False) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """(status, headers, body) of an error response. Every 503 means nothing was changed and the
    dependency may come back: it tells clients when to retry. A HEAD response has no body."""
    headers = [(b"content-type", b"application/json")]
    if err.code == 503:
        headers.append((b"retry-after", b"1"))
    elif err.code == 401:
        challenge = getattr(err, "challenge", 'Bearer realm="iceberg-catalog"')
        headers.append((b"www-authenticate", challenge.encode()))
    body = b"" if head else orjson.dumps({"error": {"message": err.message, "type": err.type, "code": err.code}})
    return err.code, headers, body
