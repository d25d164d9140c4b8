"""Built-in tokens: JWTs this catalog issues at ``/v1/oauth/tokens`` to the clients of
``CATALOG_OAUTH_CLIENTS``, signed HS256 with ``CATALOG_TOKEN_SECRET``. Each carries a keyed hash of
its client's secret, so removing a client or changing its secret invalidates its tokens at the next
start. Replicas that share the secret accept each other's tokens; nothing is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

import jwt

from catalog.auth.principals import CLIENT, InvalidToken, Principal
from catalog.settings import ConfigurationError

BUILTIN_ISSUER = "urn:iceberg-catalog:builtin"
TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
BUILTIN_LEEWAY_S = 30  # replicas' clocks may differ a little: iat/exp of a token minted by another one


def parse_clients(spec: str | None) -> dict[str, str]:
    """``"id1:secret1,id2:secret2"`` -> {id: secret}."""
    clients = {}
    for item in (spec or "").split(","):
        if item.strip():
            client_id, sep, secret = item.strip().partition(":")
            if not sep or not client_id or not secret:
                raise ConfigurationError("CATALOG_OAUTH_CLIENTS entries must look like id:secret (comma-separated)")
            clients[client_id] = secret
    return clients


class BuiltinTokens:
    def __init__(self, clients: dict[str, str], secret: str | None, ttl_seconds: int) -> None:
        self.clients = clients
        self.key = (secret or secrets.token_urlsafe(32)).encode()
        self.ttl = ttl_seconds

    def authenticate(self, client_id: str, client_secret: str) -> bool:
        expected = self.clients.get(client_id)
        # Compared even for unknown clients, so timing does not tell which ids exist.
        ok = hmac.compare_digest((expected or "\0").encode(), client_secret.encode())
        return expected is not None and ok

    def issue(self, client_id: str, now: float | None = None) -> dict[str, Any]:
        iat = int(now if now is not None else time.time())
        claims = {"iss": BUILTIN_ISSUER, "sub": client_id, "iat": iat, "exp": iat + self.ttl}
        claims["cb"] = self._binding(client_id, self.clients[client_id])
        token = jwt.encode(claims, self.key, algorithm="HS256")
        return {"access_token": token, "token_type": "bearer", "expires_in": self.ttl, "issued_token_type": TOKEN_TYPE}

    def verify(self, token: str, now: float | None = None) -> Principal:
        if not self.clients:
            raise InvalidToken("built-in tokens are not enabled on this catalog (no CATALOG_OAUTH_CLIENTS)")
        try:
            claims = _decode_builtin(token, self.key, now)
        except jwt.ExpiredSignatureError as e:
            raise InvalidToken("token expired") from e
        except jwt.InvalidSignatureError as e:
            raise InvalidToken("token signature does not verify (another key signed it)") from e
        except jwt.PyJWTError as e:
            raise InvalidToken(f"invalid token: {e}") from e
        client_id, binding = claims["sub"], claims["cb"]
        secret = self.clients.get(client_id) if isinstance(client_id, str) else None
        if secret is None or not isinstance(binding, str):
            raise InvalidToken("the token's client no longer exists")
        if not hmac.compare_digest(binding, self._binding(client_id, secret)):
            raise InvalidToken("the token's client secret has changed since it was issued")
        return Principal(client_id, kind=CLIENT)

    def _binding(self, client_id: str, secret: str) -> str:
        """Ties a token to the client's current secret. Keyed: the token (readable by its holder)
        gives no way to test guesses of the secret offline."""
        mac = hmac.new(self.key, b"client-binding\0" + client_id.encode() + b"\0" + secret.encode(), hashlib.sha256)
        return mac.hexdigest()[:22]


def _decode_builtin(token: str, key: bytes, now: float | None) -> dict[str, Any]:
    """The claims of a built-in token signed with ``key``; exp/iat checked against ``now`` (tests) or the clock."""
    claims = jwt.decode(
        token,
        key,
        algorithms=["HS256"],
        issuer=BUILTIN_ISSUER,
        leeway=BUILTIN_LEEWAY_S,
        options={"require": ["iss", "sub", "iat", "exp", "cb"], "verify_sub": False, "verify_exp": now is None},
    )
    if now is not None and (not isinstance(claims["exp"], int) or claims["exp"] + BUILTIN_LEEWAY_S < now):
        raise jwt.ExpiredSignatureError("Signature has expired")
    return claims
