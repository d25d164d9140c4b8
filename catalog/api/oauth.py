"""``POST /v1/oauth/tokens`` (client-credentials grant) and the bearer-token gate.

OAuth errors use RFC 6749's shape (``{"error": "invalid_client", ...}``), not the Iceberg error body;
a request without a valid token gets the Iceberg body with ``NotAuthorizedException`` (401) and an
RFC 6750 ``WWW-Authenticate`` challenge.

Failed token requests slow their source down (``lockout.FailureLimiter``): past a few failures of a
client id from one address (or many from one address), each attempt from there waits a short,
bounded delay before its secret is checked, and a wrong secret is answered ``429`` with
``Retry-After`` and ``{"error": "slow_down"}`` (the OAuth error registered for "ask less often",
RFC 8628 3.5). The right secret always gets its token: nobody is locked out, neither the client
whose secret is being guessed nor everyone behind a shared proxy.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import math
from typing import Any
from urllib.parse import parse_qs

from litestar import Request, Response, post
from litestar.params import RawBody

from catalog import errors
from catalog.api import docs, wire
from catalog.api.context import AppState, Ctx
from catalog.auth.identity import Authenticator
from catalog.auth.lockout import FailureLimiter
from catalog.auth.principals import ANONYMOUS, UNAUTHENTICATED, IdentityProviderUnavailable, InvalidToken

TOKEN_PATH = "/v1/oauth/tokens"
audit = logging.getLogger("catalog.audit")
log = logging.getLogger("catalog.auth")


@post(TOKEN_PATH, status_code=200)
async def get_token(request: Request, body: RawBody, ctx: Ctx) -> Response:
    form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    client_id, client_secret = form.get("client_id", ""), form.get("client_secret", "")
    basic = request.headers.get("authorization", "")
    if basic.lower().startswith("basic "):
        try:
            client_id, _, client_secret = base64.b64decode(basic[6:], validate=True).decode().partition(":")
        except ValueError:
            return _oauth_error(400, "invalid_request", "malformed Basic authorization")
    if form.get("grant_type") != "client_credentials":
        return _oauth_error(400, "unsupported_grant_type", "only client_credentials is supported")
    refused = await check_client(request, ctx, client_id, client_secret)
    if refused is not None:
        return _oauth_error(*refused)
    return wire.json_response(ctx.authenticator.builtin.issue(client_id))


async def check_client(
    request: Request, ctx: AppState, client_id: str, client_secret: str
) -> tuple[int, str, str, dict[str, str] | None] | None:
    """None when the built-in client's secret is right; else the refusal (status, OAuth error,
    description, headers). Failures slow their source down (``FailureLimiter``) and are audited:
    the token endpoint's rule, also the console's sign-in (``catalog/console``)."""
    authenticator: Authenticator = ctx.authenticator
    tokens = authenticator.builtin
    if not tokens.clients:
        return 400, "invalid_client", "no OAuth clients are configured on this catalog", None
    limiter: FailureLimiter = ctx.limiter
    peer = request.client.host if request.client else "unknown"
    source = limiter.source(peer, request.headers.get("x-forwarded-for"))
    shown = repr(client_id[:100])
    counted = client_id if client_id in tokens.clients else None  # guesses at unknown ids: on the address
    if wait := limiter.delay(counted, source):
        await asyncio.sleep(wait)
    if not tokens.authenticate(client_id, client_secret):
        slowed = limiter.failed(counted, source)
        audit.warning("token request refused, wrong secret or unknown client: client_id=%s source=%s", shown, source)
        if slowed:
            slow = "token requests slowed by %.2f s after repeated failures: client_id=%s source=%s"
            audit.warning(slow, slowed, shown, source)
            return 429, "slow_down", "too many failed attempts: ask less often", {"Retry-After": str(math.ceil(slowed))}
        return 401, "invalid_client", "unknown client or wrong secret", None
    limiter.succeeded(counted, source)
    return None


def _oauth_error(status: int, error: str, description: str, headers: dict[str, str] | None = None) -> Response:
    return wire.json_response({"error": error, "error_description": description}, status=status, headers=headers)


class BearerAuth:
    """ASGI middleware: who is calling, in ``scope["principal"]``.

    With auth required, every route needs a valid ``Authorization: Bearer <token>`` except the token
    endpoint, ``/health/*``, ``/docs``, ``/openapi.json`` and ``/metrics`` (open by default: new routes
    are closed unless listed here). With auth off the header is ignored (pyiceberg sends ``Bearer None``
    when it has no token) and the caller is ``ANONYMOUS``. ``/metrics`` needs ``Bearer <metrics_token>``
    when one is set.
    """

    def __init__(
        self,
        app: Any,
        authenticator: Authenticator,
        required: bool,
        metrics_token: str | None,
        console: str | None = None,
    ) -> None:
        self.app, self.authenticator, self.required = app, authenticator, required
        # The web console's path: its pages sign their caller in from its session cookie themselves.
        self.console = console
        self.metrics_token = metrics_token.encode() if metrics_token else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == "/metrics" and self.metrics_token is not None:
            sent = _bearer(scope)
            if sent is None or not hmac.compare_digest(sent.encode("latin-1"), self.metrics_token):
                await _refuse(scope, send, errors.NotAuthorized("Not authorized: /metrics needs the metrics token"))
                return
        if not self.required:
            scope["principal"] = ANONYMOUS
        elif path == TOKEN_PATH or path == "/metrics" or path.startswith("/health/") or path in docs.PATHS:
            scope["principal"] = UNAUTHENTICATED
        elif self.console and (path == self.console or path.startswith(self.console + "/")):
            scope["principal"] = UNAUTHENTICATED  # until the console's session names someone
        else:
            token = _bearer(scope)
            if not token or token in _NO_TOKEN:
                await _refuse(scope, send, errors.NotAuthorized(_MISSING))
                return
            try:
                scope["principal"] = await self.authenticator.verify(token)
            except InvalidToken as e:
                audit.info("bearer token refused: %s (source %s)", e, _source(scope))
                await _refuse(scope, send, errors.NotAuthorized(f"Not authorized: {e}", invalid_token=True))
                return
            except IdentityProviderUnavailable as e:
                log.warning("identity provider unavailable: %s", e)
                await _refuse(
                    scope, send, errors.ServiceUnavailable("Identity provider unavailable: cannot verify the token")
                )
                return
        await self.app(scope, receive, send)


# What clients send when they have no token: pyiceberg without a token or credential sends "Bearer None".
_NO_TOKEN = frozenset({"None", "null", "undefined"})
_MISSING = (
    "Not authorized: missing bearer token (this catalog requires authentication: configure the client with "
    "a credential, client_id:client_secret for /v1/oauth/tokens, or a token)"
)


def _bearer(scope: dict[str, Any]) -> str | None:
    header = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def _source(scope: dict[str, Any]) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


async def _refuse(scope: dict[str, Any], send: Any, err: errors.IcebergError) -> None:
    status, headers, body = errors.render(err, head=scope["method"] == "HEAD")
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


ROUTES = [get_token]
