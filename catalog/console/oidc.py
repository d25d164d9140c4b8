"""The console's sign-in with the configured OIDC provider: the authorization-code flow with PKCE
(RFC 7636, S256), for people rather than programs.

``start`` draws a state, a nonce and a code verifier, keeps them sealed in a short-lived cookie
(``session.Sessions``), and sends the browser to the provider's ``authorization_endpoint`` (from its
discovery document, ``CATALOG_OIDC_ISSUER``). ``finish`` takes the provider's answer on the callback:
the state must be the cookie's, the code is exchanged at the ``token_endpoint`` with the verifier,
and the access token it gives must be one the catalog accepts (``Authenticator.verify``: the same
issuer, keys and audience as a bearer token on the REST API). Blocking HTTP: call them on a thread.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.parse
import urllib.request
from typing import Any

from catalog import errors

FETCH_TIMEOUT_S = 10
FLOW_SECONDS = 600  # a sign-in not finished in ten minutes starts again
MAX_ANSWER = 1 << 20


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _get_json(url: str, data: bytes | None = None) -> dict[str, Any]:
    headers = {"Accept": "application/json"}
    if data is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    req = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 - the configured issuer's URLs
    try:
        with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT_S) as resp:  # noqa: S310
            doc = json.loads(resp.read(MAX_ANSWER))
    except urllib.error.HTTPError as e:
        raise errors.Forbidden(f"Not signed in: the identity provider refused the sign-in (HTTP {e.code})") from None
    except (OSError, ValueError):
        raise errors.ServiceUnavailable("The identity provider cannot be reached") from None
    if not isinstance(doc, dict):
        raise errors.ServiceUnavailable("The identity provider answered something else than a JSON object")
    return doc


class Flow:
    def __init__(self, issuer: str, client_id: str, client_secret: str | None, scopes: str) -> None:
        self.issuer = issuer.rstrip("/")
        self.client_id, self.client_secret, self.scopes = client_id, client_secret, scopes
        self._endpoints: dict[str, str] | None = None

    def endpoints(self) -> dict[str, str]:
        if self._endpoints is None:
            doc = _get_json(f"{self.issuer}/.well-known/openid-configuration")
            found = {k: doc.get(k) for k in ("authorization_endpoint", "token_endpoint")}
            if not all(isinstance(v, str) and v.startswith(("https://", "http://")) for v in found.values()):
                raise errors.ServiceUnavailable("The identity provider's discovery document has no code flow endpoints")
            self._endpoints = found  # type: ignore[assignment]
        return self._endpoints  # type: ignore[return-value]

    def start(self, redirect_uri: str) -> tuple[str, str]:
        """(the provider's authorization URL to send the browser to, the pending flow to seal)."""
        state, nonce, verifier = _b64(os.urandom(24)), _b64(os.urandom(24)), _b64(os.urandom(48))
        challenge = _b64(hashlib.sha256(verifier.encode()).digest())
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": redirect_uri,
            "scope": self.scopes,
            "state": state,
            "nonce": nonce,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
        pending = json.dumps({"state": state, "verifier": verifier, "redirect_uri": redirect_uri})
        return f"{self.endpoints()['authorization_endpoint']}?{urllib.parse.urlencode(query)}", pending

    def finish(self, pending: str | None, code: str | None, state: str | None) -> str:
        """The access token the provider gives for ``code``; 403 for a callback that is not the
        answer to this browser's own sign-in (no pending flow, another state, no code)."""
        try:
            flow = json.loads(pending) if pending else None
        except ValueError:
            flow = None
        if not isinstance(flow, dict) or not code or not state or len(code) > 4096:
            raise errors.Forbidden("Not signed in: no sign-in of this browser is waiting for that answer")
        if not hmac.compare_digest(str(flow.get("state")), state):
            raise errors.Forbidden("Not signed in: the answer is for another sign-in (state)")
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": flow["redirect_uri"],
            "client_id": self.client_id,
            "code_verifier": flow["verifier"],
        }
        if self.client_secret:
            form["client_secret"] = self.client_secret
        answer = _get_json(self.endpoints()["token_endpoint"], urllib.parse.urlencode(form).encode())
        token = answer.get("access_token")
        if not isinstance(token, str) or not token:
            raise errors.Forbidden("Not signed in: the identity provider gave no access token")
        return token
