"""Routing on the raw path: the optional ``{prefix}`` segment removed (it names the warehouse the
request is for, ``api.selection.WAREHOUSE``), percent-encoding kept. The management routes of one
warehouse's catalog (maintenance, dropped entries) name it in their ``?warehouse=`` instead.

The path is first normalised as Litestar's router normalises it (``//`` runs collapsed, the trailing
``/`` dropped), so the warehouse is chosen from the path the route is then matched on: a request to
``//management/v1/...?warehouse=w2`` acts on w2, never on another warehouse."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from litestar.utils import normalize_path

from catalog import errors
from catalog.api.exceptions import send_error
from catalog.api.observation import RequestObservation
from catalog.api.selection import WAREHOUSE

# /v1/<prefix>/<resource>...: the optional prefix segment clients insert after /v1/.
_PREFIXED = re.compile(r"^/v1/([^/]+)/(namespaces|tables|views|transactions|events)(/.*)?$")
_UNPREFIXED_FIRST = {"namespaces", "tables", "views", "transactions", "events", "config", "oauth"}
# /management/v1/<resource>...: routes inside one warehouse's catalog, which take it as ``?warehouse=``.
_QUERIED = re.compile(r"^/management/v1/(maintenance|dropped)(/|$)")
_REFUSED = "catalog.refused"  # in the scope of a request refused here: the error it is answered


async def _refused(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send_error(send, scope[_REFUSED])


class RawPathRouting:
    """Route on the raw (still percent-encoded) path, with the optional ``{prefix}`` removed.

    ASGI's ``path`` is already decoded, which would turn a ``%2F`` inside a name into a path
    separator and lose the ``%1F`` boundaries between namespace levels. Handlers decode their path
    parameters themselves (``api.wire``).
    """

    def __init__(self, app: Any, knows: Callable[[str], bool] | None = None) -> None:
        """``knows``: whether a prefix names a warehouse (the default's, or one created); None: any."""
        self.app = app
        self.knows = knows
        # Outside Litestar, so that requests no route matches (404) are observed and logged too,
        # and so are those refused here (a warehouse named that does not exist), never reaching it.
        self.observed = RequestObservation(app)
        self.refused = RequestObservation(_refused)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            path = normalize_path(raw.decode("latin-1") if raw else scope["path"])
            try:
                warehouse, path = _addressed(path, scope.get("query_string", b""))
                if warehouse is not None and self.knows is not None and not self.knows(warehouse):
                    raise errors.NoSuchWarehouse.named(warehouse)
            except errors.IcebergError as e:
                await self.refused({**scope, _REFUSED: e}, receive, send)
                return
            WAREHOUSE.set(warehouse)  # the handlers' ``ctx`` is this warehouse's (api.selection)
            scope = {**scope, "path": path}
        await self.observed(scope, receive, send)


def _addressed(path: str, query: bytes) -> tuple[str | None, str]:
    """The warehouse a request names (None: the default) and its path without the prefix."""
    match = _PREFIXED.match(path)
    if match and match.group(1) not in _UNPREFIXED_FIRST:
        return match.group(1), f"/v1/{match.group(2)}{match.group(3) or ''}"
    if not _QUERIED.match(path):
        return None, path
    asked = parse_qs(query.decode("latin-1")).get("warehouse", [])
    if len(asked) > 1:
        raise errors.BadRequest("Give the warehouse once")
    return (asked[0] if asked else None), path  # none, or empty: the default warehouse
