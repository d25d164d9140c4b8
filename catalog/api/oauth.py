"""``POST /v1/oauth/tokens`` (client-credentials grant) and the bearer-token gate on /v1 routes.

OAuth errors use RFC 6749's shape (``{"error": "invalid_client", ...}``), not the Iceberg error body;
a request without a valid token gets the Iceberg body with ``NotAuthorizedException`` (401).
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response, post
from litestar.datastructures import State

from .. import errors
from ..auth import InvalidToken, Tokens
from ..identity import ANONYMOUS, Principal
from . import wire

OPEN_PATHS = ("/v1/oauth/tokens",)


@post("/v1/oauth/tokens", status_code=200)
async def get_token(request: Request, payload: bytes, state: State) -> Response:
    form = {k: v[-1] for k, v in parse_qs(payload.decode("utf-8", "replace")).items()}
    client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
    basic = request.headers.get("authorization", "")
    if basic.lower().startswith("basic "):
        try:
            client_id, _, client_secret = base64.b64decode(basic[6:]).decode().partition(":")
        except ValueError:
            return _oauth_error(400, "invalid_request", "malformed Basic authorization")
    if form.get("grant_type") != "client_credentials":
        return _oauth_error(400, "unsupported_grant_type", "only client_credentials is supported")
    tokens: Tokens = state.tokens
    if not tokens.clients:
        return _oauth_error(400, "invalid_client", "no OAuth clients are configured on this catalog")
    if not tokens.authenticate(client_id, client_secret):
        return _oauth_error(401, "invalid_client", "unknown client or wrong secret")
    return wire.json_response(tokens.issue(client_id))


def _oauth_error(status: int, error: str, description: str) -> Response:
    return wire.json_response({"error": error, "error_description": description}, status=status)


class BearerAuth:
    """ASGI middleware: with auth required, every /v1 route but the token endpoint needs a valid
    ``Authorization: Bearer <token>``. With auth off the header is ignored (pyiceberg sends
    ``Bearer None`` when it has no token)."""

    def __init__(self, app: Any, tokens: Tokens, required: bool) -> None:
        self.app, self.tokens, self.required = app, tokens, required

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if (
            self.required
            and scope["type"] == "http"
            and path.startswith(("/v1/", "/management/"))
            and path not in OPEN_PATHS
        ):
            header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
            scheme, _, token = header.partition(" ")
            try:
                if scheme.lower() != "bearer" or not token:
                    raise InvalidToken("missing bearer token")
                scope["principal"] = Principal(self.tokens.verify(token.strip()))
            except InvalidToken as e:
                status, headers, body = errors.render(
                    errors.NotAuthorized(f"Not authorized: {e}"), head=scope["method"] == "HEAD"
                )
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        scope.setdefault("principal", ANONYMOUS if not self.required else None)
        await self.app(scope, receive, send)


ROUTES = [get_token]
