"""Pagination of the list routes (namespaces, tables, views): pages of what the caller may see, and
opaque page tokens.

A page is filled with names the caller may see: the store is read in batches after the cursor,
each batch filtered by the caller's grants (``guard.visible``), until the page is full or the list
ends. So a page, its length and whether a next page exists depend only on visible names, and the
cursor a token resumes after is always the last name of a page the caller was shown.

A token is that cursor sealed with AES-GCM: opaque to the client, and bound to its list (the route,
the namespace or parent) and to the caller, so it cannot be altered, forged, moved to another list
or handed to another principal; any of those is a 400. The key is derived from
``CATALOG_TOKEN_SECRET``, the same on every worker and replica. Without it, ``serve`` draws one
random key for its workers (passed to them in ``SHARED_KEY_ENV``): tokens work across the workers of
one server, but a token that reaches another replica or outlives a restart is refused with a 400 that
says to list again (``identity.check_settings`` warns about it when replicas are possible).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from typing import Any, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from litestar import Request

from catalog import errors, names
from catalog.api import guard, wire
from catalog.auth.policy import Target

T = TypeVar("T")
# The key ``serve`` draws for its workers when CATALOG_TOKEN_SECRET is not set (hex; not a setting).
SHARED_KEY_ENV = "ICEBERG_CATALOG_WORKERS_PAGE_KEY"
# pageSize is an upper bound the server may lower; this one keeps the SQL LIMIT within 64 bits.
MAX_PAGE_SIZE = 2**31 - 1
# Rows read per round trip while a page is filled: callers who see few of the names still get
# their page in a few reads.
MIN_BATCH = 200
_VERSION = "1"
_NONCE = 12
# Longer than any cursor a token can carry (a key within names.MAX_KEY_BYTES, sealed, base64).
MAX_TOKEN_CHARS = 8192


class PageTokens:
    """Seals and opens the cursors of page tokens (see the module docstring)."""

    def __init__(self, secret: str | None, shared: str | None = None) -> None:
        """``secret``: CATALOG_TOKEN_SECRET; ``shared``: the workers' key when there is none."""
        if secret:
            key = hmac.new(secret.encode(), b"iceberg-catalog page tokens v1", hashlib.sha256).digest()
        elif shared and len(shared) == 64:
            key = bytes.fromhex(shared)
        else:
            key = os.urandom(32)
        self._aead = AESGCM(key)

    def seal(self, cursor: str, context: str) -> str:
        nonce = os.urandom(_NONCE)
        sealed = nonce + self._aead.encrypt(nonce, cursor.encode(), context.encode())
        return _VERSION + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def open(self, token: str, context: str) -> str:
        """The cursor of a token this catalog issued for this list and caller; 400 for anything else."""
        try:
            if len(token) > MAX_TOKEN_CHARS or not token.startswith(_VERSION):
                raise ValueError
            raw = base64.urlsafe_b64decode(token[1:] + "=" * (-(len(token) - 1) % 4))
            cursor = self._aead.decrypt(raw[:_NONCE], raw[_NONCE:], context.encode()).decode()
        except (ValueError, InvalidTag, UnicodeDecodeError):
            raise errors.BadRequest(
                "Invalid pageToken: not a token this catalog issued for this list (altered, from another list "
                "or caller, or from before a restart); list again from the start"
            ) from None
        names.check_key_fits(cursor, "pageToken")
        return cursor


def page_size(query: Any) -> int | None:
    """Pagination happens only when pageSize is given."""
    size_raw = query.get("pageSize")
    if size_raw in (None, ""):
        return None
    try:
        size = int(size_raw)
    except ValueError as e:
        raise errors.BadRequest(f"Invalid pageSize: {names.shown(size_raw)}") from e
    if size < 1:
        raise errors.BadRequest(f"Invalid pageSize: {size}, must be at least 1")
    return min(size, MAX_PAGE_SIZE)


async def visible_page(
    request: Request,
    tokens: PageTokens,
    list_id: str,
    fetch: Callable[[str | None, int | None], list[T]],
    target_of: Callable[[T], Target],
    key_of: Callable[[T], str],
) -> tuple[list[T], str | None]:
    """(the page of what the caller may see, the next page's token or None). ``fetch(after, limit)``
    reads the store in name order; ``list_id`` names the list (route and namespace or parent). An
    empty ``pageToken`` (Java always sends one) starts at the beginning."""
    size = page_size(request.query_params)
    context = list_id + "\0" + guard.grantee(request)
    token = request.query_params.get("pageToken")
    cursor = tokens.open(token, context) if token else None
    if size is None:
        found = await wire.blocking(fetch, cursor, None)
        return await _shown(request, found, target_of), None
    batch, page = max(size + 1, MIN_BATCH), []
    while True:
        found = await wire.blocking(fetch, cursor, batch)
        page += await _shown(request, found, target_of)
        if len(page) > size:
            page = page[:size]
            return page, tokens.seal(key_of(page[-1]), context)
        if len(found) < batch:
            return page, None
        cursor = key_of(found[-1])


async def _shown(request: Request, found: list[T], target_of: Callable[[T], Target]) -> list[T]:
    shown = await guard.visible(request, [target_of(x) for x in found])
    return [x for x, ok in zip(found, shown, strict=True) if ok]


def namespace_key(ns: tuple[str, ...]) -> str:
    return names.SEP.join(ns)
