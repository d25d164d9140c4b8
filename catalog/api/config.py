"""``GET /v1/config``: what a client merges into its properties before anything else.

The ``endpoints`` list is derived from the routes the app actually serves (see ``advertised``), so
it can never claim an operation that is not there, nor hide one that is.
"""

from __future__ import annotations

import re

from litestar import Response, get
from litestar.datastructures import State
from litestar.handlers import HTTPRouteHandler

from catalog.api import wire

_PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")
_NOT_ADVERTISED = ("/v1/config", "/v1/oauth/tokens")


@get("/v1/config", sync_to_thread=False)
def get_config(state: State) -> Response:
    return wire.raw_json_response(state.config_body)


def advertised(handlers: list[HTTPRouteHandler]) -> list[str]:
    """``"<METHOD> /v1/{prefix}/..."`` for every catalog route, in the form clients match on."""
    out = []
    for handler in handlers:
        for path in handler.paths:
            if not path.startswith("/v1/") or path in _NOT_ADVERTISED:
                continue
            template = "/v1/{prefix}/" + _PARAM.sub(r"{\1}", path[len("/v1/") :])
            out.extend(f"{method} {template}" for method in sorted(handler.http_methods))
    return sorted(set(out))


ROUTES = [get_config]
