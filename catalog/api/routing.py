"""Routing on the raw path: the optional ``{prefix}`` segment removed (it names the warehouse the
request is for, ``api.selection.WAREHOUSE``), percent-encoding kept."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from catalog import errors
from catalog.api.exceptions import send_error
from catalog.api.observation import RequestObservation
from catalog.api.selection import WAREHOUSE

# /v1/<prefix>/<resource>...: the optional prefix segment clients insert after /v1/.
_PREFIXED = re.compile(r"^/v1/([^/]+)/(namespaces|tables|views|transactions|events)(/.*)?$")
_UNPREFIXED_FIRST = {"namespaces", "tables", "views", "transactions", "events", "config", "oauth"}


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
        # Outside Litestar, so that requests no route matches (404) are observed and logged too.
        self.observed = RequestObservation(app)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            path = raw.decode("latin-1") if raw else scope["path"]
            match = _PREFIXED.match(path)
            warehouse = None
            if match and match.group(1) not in _UNPREFIXED_FIRST:
                warehouse = match.group(1)
                if self.knows is not None and not self.knows(warehouse):
                    await send_error(send, errors.NoSuchWarehouse.named(warehouse))
                    return
                path = f"/v1/{match.group(2)}{match.group(3) or ''}"
            WAREHOUSE.set(warehouse)  # the handlers' ``ctx`` is this warehouse's (api.selection)
            scope = {**scope, "path": path}
        await self.observed(scope, receive, send)
