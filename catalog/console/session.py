"""The console's session and CSRF tokens.

The session cookie holds the caller's bearer token (from the token endpoint's own check, or later an
identity provider's), sealed with ``catalog.sealing``'s Fernet under a key derived from
``CATALOG_TOKEN_SECRET`` (or the workers' shared page key, else one drawn at start): opaque to the
browser, HttpOnly, SameSite=Strict, Secure over https. Each request verifies the token again, as a
bearer token on the REST API is, so a session ends when its token expires.

CSRF: a random nonce in a cookie of its own (HttpOnly, SameSite=Strict), and in every form the
nonce's HMAC under the same key. A POST is refused (403) unless its form's token matches the
cookie's: another site can neither read the cookie nor compute the token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from cryptography.fernet import InvalidToken

from catalog import sealing

SESSION_COOKIE = "iceberg_console"
CSRF_COOKIE = "iceberg_console_csrf"
MAX_COOKIE = 4096


class Sessions:
    def __init__(self, secret: str | None, shared: str | None = None) -> None:
        if secret:
            root = hmac.new(secret.encode(), b"iceberg-catalog console v1", hashlib.sha256).digest()
        elif shared and len(shared) == 64:
            root = hmac.new(bytes.fromhex(shared), b"iceberg-catalog console v1", hashlib.sha256).digest()
        else:
            root = os.urandom(32)
        self._mac = hmac.new(root, b"csrf", hashlib.sha256).digest()
        fernet_key = base64.urlsafe_b64encode(hmac.new(root, b"session", hashlib.sha256).digest()).decode()
        self._fernet = sealing.keys(fernet_key).first

    def seal(self, bearer: str) -> str:
        return self._fernet.encrypt(bearer.encode()).decode()

    def open(self, cookie: str | None, ttl: int) -> str | None:
        """The bearer token of a session cookie this server sealed within ``ttl`` seconds; None else."""
        if not cookie or len(cookie) > MAX_COOKIE:
            return None
        try:
            return self._fernet.decrypt(cookie.encode(), ttl=ttl).decode()
        except (InvalidToken, ValueError, UnicodeError):
            return None

    @staticmethod
    def nonce() -> str:
        return base64.urlsafe_b64encode(os.urandom(18)).decode()

    def csrf(self, nonce: str) -> str:
        return hmac.new(self._mac, nonce.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, nonce: str | None, sent: str | None) -> bool:
        if not nonce or not sent or len(nonce) > 64 or len(sent) > 128:
            return False
        return hmac.compare_digest(self.csrf(nonce), sent)
