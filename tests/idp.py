"""A tiny OIDC identity provider for tests: discovery, a JWKS, a client-credentials token endpoint,
and the authorization-code flow with PKCE (S256) for the console's sign-in: ``/authorize`` approves
at once as ``idp.person`` (``(sub, groups)``; None refuses), and the code is good once.

    with LocalIdP(audience="catalog", clients={"spark": ("s3cret", ["analysts"])}) as idp:
        env = {"CATALOG_OIDC_ISSUER": idp.issuer, "CATALOG_OIDC_AUDIENCE": "catalog"}
        token = idp.mint("alice", groups=["analysts"])          # a signed RS256 access token
        RestCatalog(..., credential="spark:s3cret", **{"oauth2-server-uri": idp.token_url, "scope": "catalog"})

``rotate()`` adds a new key (new kid) to the JWKS and signs with it from then on; the old keys stay
published, as providers do. ``mint(..., key=<rsa key>)`` signs with a key the JWKS does not have.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class LocalIdP:
    def __init__(
        self,
        audience: str | None = "iceberg-catalog",
        clients: dict[str, tuple[str, list[str]]] | None = None,
        groups_claim: str = "groups",
        ttl: int = 3600,
    ) -> None:
        self.audience = audience
        self.clients = dict(clients or {})  # client id -> (secret, groups)
        self.groups_claim = groups_claim
        self.ttl = ttl
        self.keys: list[tuple[str, rsa.RSAPrivateKey]] = []
        self.requests: list[str] = []  # paths served, to see when the catalog fetched keys
        self.person: tuple[str, list[str]] | None = None  # who /authorize signs in (sub, groups)
        self.codes: dict[str, dict[str, Any]] = {}  # authorization code -> what it was issued for
        self.rotate()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.issuer = f"http://127.0.0.1:{self.server.server_port}"
        self.token_url = f"{self.issuer}/token"
        self.authorize_url = f"{self.issuer}/authorize"
        self.jwks_url = f"{self.issuer}/jwks"
        self.thread = threading.Thread(target=self.server.serve_forever, name="local-idp", daemon=True)
        self.thread.start()

    def __enter__(self) -> LocalIdP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    @property
    def kid(self) -> str:
        return self.keys[-1][0]

    def rotate(self) -> str:
        """A new signing key (published next to the old ones); its kid."""
        kid = f"k-{uuid.uuid4().hex[:8]}"
        self.keys.append((kid, new_key()))
        return kid

    def mint(
        self,
        sub: str,
        groups: Any = (),
        *,
        key: rsa.RSAPrivateKey | None = None,
        kid: str | None = None,
        algorithm: str = "RS256",
        headers: dict[str, Any] | None = None,
        **claims: Any,
    ) -> str:
        """An access token for ``sub``. Claims given override the defaults (``iss``, ``aud``, ``exp``...;
        pass ``aud=None`` etc. to leave one out)."""
        now = int(time.time())
        body: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": sub,
            "iat": now,
            "exp": now + self.ttl,
            "jti": uuid.uuid4().hex,
        }
        if groups != ():
            body[self.groups_claim] = list(groups) if isinstance(groups, (list, tuple, set, frozenset)) else groups
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        signing_kid, signing_key = self.keys[-1]
        return jwt.encode(
            body,
            key or signing_key,
            algorithm=algorithm,
            headers={"kid": kid or signing_kid, **(headers or {})},
        )

    def jwks(self) -> dict[str, Any]:
        keys = []
        for kid, key in self.keys:
            numbers = key.public_key().public_numbers()
            jwk = {"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid}
            keys.append({**jwk, "n": _b64int(numbers.n), "e": _b64int(numbers.e)})
        return {"keys": keys}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                idp.requests.append(self.path)
                if self.path == "/.well-known/openid-configuration":
                    self._json(
                        200,
                        {
                            "issuer": idp.issuer,
                            "jwks_uri": idp.jwks_url,
                            "token_endpoint": idp.token_url,
                            "authorization_endpoint": idp.authorize_url,
                            "grant_types_supported": ["client_credentials", "authorization_code"],
                            "code_challenge_methods_supported": ["S256"],
                            "id_token_signing_alg_values_supported": ["RS256"],
                        },
                    )
                elif self.path == "/jwks":
                    self._json(200, idp.jwks())
                elif self.path.startswith("/authorize?"):
                    self._authorize({k: v[-1] for k, v in parse_qs(urlsplit(self.path).query).items()})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:
                idp.requests.append(self.path)
                length = int(self.headers.get("content-length") or 0)
                form = {k: v[-1] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                if self.path != "/token":
                    self._json(404, {"error": "not_found"})
                    return
                if form.get("grant_type") == "authorization_code":
                    self._code(form)
                    return
                if form.get("grant_type") != "client_credentials":
                    self._json(400, {"error": "unsupported_grant_type"})
                    return
                client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
                basic = self.headers.get("authorization", "")
                if basic.lower().startswith("basic "):
                    client_id, _, secret = base64.b64decode(basic[6:]).decode().partition(":")
                known = idp.clients.get(client_id)
                if known is None or known[0] != secret:
                    self._json(401, {"error": "invalid_client", "error_description": "bad credentials"})
                    return
                token = idp.mint(client_id, groups=known[1], scope=form.get("scope"))
                self._json(
                    200,
                    {
                        "access_token": token,
                        "token_type": "Bearer",
                        "expires_in": idp.ttl,
                        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
                    },
                )

            def _authorize(self, q: dict[str, str]) -> None:
                pkce = q.get("code_challenge_method") == "S256" and q.get("code_challenge")
                if q.get("response_type") != "code" or not pkce or q.get("client_id") not in idp.clients:
                    self._json(400, {"error": "invalid_request"})
                    return
                if idp.person is None:
                    self._json(403, {"error": "access_denied"})
                    return
                code = uuid.uuid4().hex
                idp.codes[code] = {**q, "person": idp.person}
                self.send_response(302)
                self.send_header(
                    "Location", f"{q['redirect_uri']}?{urlencode({'code': code, 'state': q.get('state', '')})}"
                )
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _code(self, form: dict[str, str]) -> None:
                issued = idp.codes.pop(form.get("code", ""), None)  # good once
                verifier = form.get("code_verifier", "").encode()
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=").decode()
                if (
                    issued is None
                    or issued["client_id"] != form.get("client_id")
                    or issued["redirect_uri"] != form.get("redirect_uri")
                    or issued["code_challenge"] != challenge
                ):
                    self._json(400, {"error": "invalid_grant"})
                    return
                sub, groups = issued["person"]
                self._json(200, {"access_token": idp.mint(sub, groups=groups), "token_type": "Bearer"})

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _b64int(value: int) -> str:
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
