"""OAuth2 client-credentials tokens (``/v1/oauth/tokens``) and their verification. No I/O.

A token is ``<payload>.<signature>``: the payload is base64url JSON ``{"sub", "exp"}``, the signature
an HMAC-SHA256 of it under the server's token secret. Replicas that share ``CATALOG_TOKEN_SECRET``
accept each other's tokens; nothing is stored.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time

import orjson

TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


class InvalidToken(Exception):
    pass


def parse_clients(spec: str | None) -> dict[str, str]:
    """``"id1:secret1,id2:secret2"`` -> {id: secret}."""
    clients = {}
    for item in (spec or "").split(","):
        if item.strip():
            client_id, sep, secret = item.strip().partition(":")
            if not sep or not client_id or not secret:
                raise ValueError("CATALOG_OAUTH_CLIENTS entries must look like id:secret")
            clients[client_id] = secret
    return clients


class Tokens:
    def __init__(self, clients: dict[str, str], secret: str | None, ttl_seconds: int) -> None:
        self.clients = clients
        self.key = (secret or secrets.token_urlsafe(32)).encode()
        self.ttl = ttl_seconds

    def authenticate(self, client_id: str, client_secret: str) -> bool:
        expected = self.clients.get(client_id)
        return expected is not None and hmac.compare_digest(expected.encode(), client_secret.encode())

    def issue(self, client_id: str, now: float | None = None) -> dict[str, object]:
        exp = int((now or time.time()) + self.ttl)
        payload = _b64(orjson.dumps({"sub": client_id, "exp": exp}))
        token = f"{payload}.{_b64(self._sign(payload))}"
        return {"access_token": token, "token_type": "bearer", "expires_in": self.ttl, "issued_token_type": TOKEN_TYPE}

    def verify(self, token: str, now: float | None = None) -> str:
        """The client id of a valid, unexpired token; ``InvalidToken`` otherwise."""
        payload, _, signature = token.partition(".")
        if not payload or not signature or not hmac.compare_digest(_b64(self._sign(payload)), signature):
            raise InvalidToken("invalid token")
        try:
            claims = orjson.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        except ValueError as e:
            raise InvalidToken("invalid token") from e
        if claims.get("exp", 0) < (now or time.time()):
            raise InvalidToken("token expired")
        return str(claims["sub"])

    def _sign(self, payload: str) -> bytes:
        return hmac.new(self.key, payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
