"""OIDC tokens: JWTs from an identity provider (Keycloak, Entra ID, Auth0, Dex...), verified with
the keys of its JWKS (asymmetric algorithms only). The key set is fetched lazily, cached, and fetched
again when a token names a key the cache does not have (at most once per ``REFRESH_INTERVAL_S``),
off the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import jwt

from catalog.auth.principals import IdentityProviderUnavailable, InvalidToken, Principal

log = logging.getLogger("catalog.auth")

# Asymmetric algorithms only for OIDC: an HS* token would be checked against a *public* key, and
# "none" is no signature at all.
OIDC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
REFRESH_INTERVAL_S = 10.0  # unknown kids and failed fetches trigger at most one JWKS fetch per this
JWKS_MAX_AGE_S = 3600.0  # the key set is fetched again when older (a revoked key stops being accepted)
FETCH_TIMEOUT_S = 5.0
MAX_FETCH_BYTES = 1024 * 1024


@dataclass
class _KeySet:
    keys: dict[str | None, jwt.PyJWK] = field(default_factory=dict)
    loaded_at: float = float("-inf")
    kid_refresh_at: float = float("-inf")
    failed_at: float = float("-inf")
    failure: str = ""


class OidcVerifier:
    def __init__(
        self,
        issuer: str | None,
        audience: str | None,
        jwks_url: str | None,
        principal_claim: str,
        groups_claim: str,
        leeway: int,
    ) -> None:
        self.issuer = issuer.rstrip("/") if issuer else None
        self.raw_issuer = issuer
        self.audience = audience
        self.jwks_url = jwks_url
        self.principal_claim = principal_claim
        self.groups_claim = groups_claim
        self.leeway = leeway
        self.cache = _KeySet()
        self._lock: asyncio.Lock | None = None

    def accepts_issuer(self, iss: object) -> bool:
        if self.raw_issuer is None:
            return True  # only a JWKS URL configured: its keys are the trust anchor, any iss
        return isinstance(iss, str) and iss.rstrip("/") == self.issuer

    async def verify(self, token: str) -> Principal:
        header = jwt.get_unverified_header(token)
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in OIDC_ALGORITHMS:
            raise InvalidToken(f"signing algorithm {str(alg)[:20]!r} is not accepted (asymmetric algorithms only)")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's kid is not a string")
        key = await self._key(kid)
        if key.key_type != _KEY_TYPES[alg[:2]] or getattr(key, "algorithm_name", alg) not in (alg, None):
            raise InvalidToken(f"key {kid!r} is not a {alg} key")
        options: dict[str, Any] = {"require": ["exp", "iat"], "verify_sub": False, "verify_aud": bool(self.audience)}
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.raw_issuer if self.raw_issuer else None,
                leeway=self.leeway,
                options=options,
            )
        except jwt.ExpiredSignatureError as e:
            raise InvalidToken("token expired") from e
        except jwt.InvalidAudienceError as e:
            raise InvalidToken(f"token audience is not {self.audience!r}") from e
        except jwt.InvalidIssuerError as e:
            raise InvalidToken(f"token issuer is not {self.raw_issuer!r}") from e
        except jwt.PyJWTError as e:
            raise InvalidToken(f"invalid token: {e}") from e
        for claim in ("exp", "iat", "nbf"):  # PyJWT takes int("1e10"-like strings): RFC 7519 says a number
            value = claims.get(claim)
            if claim in claims and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise InvalidToken(f"token claim {claim!r} is not a NumericDate (a JSON number)")
        return Principal(self._name(claims), self._groups(claims))

    def _name(self, claims: dict[str, Any]) -> str:
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name or len(name) > 1024:
            raise InvalidToken(f"token claim {self.principal_claim!r} (the principal) is missing or not a string")
        return name

    def _groups(self, claims: dict[str, Any]) -> frozenset[str]:
        value = claim_at(claims, self.groups_claim)
        if value is None:
            return frozenset()
        if isinstance(value, str):
            return frozenset({value})
        if isinstance(value, list) and all(isinstance(g, str) for g in value):
            return frozenset(value)
        raise InvalidToken(f"token claim {self.groups_claim!r} (the groups) must be a string or a list of strings")

    # -- the key set ------------------------------------------------------------------------------

    async def _key(self, kid: str | None) -> jwt.PyJWK:
        cache, now = self.cache, time.monotonic()
        key = _pick(cache.keys, kid)
        stale = now - cache.loaded_at > JWKS_MAX_AGE_S
        if key is not None and not stale:
            return key
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # one fetch at a time; those waiting use its result
            now = time.monotonic()
            key = _pick(cache.keys, kid)
            empty = not cache.keys
            stale = now - cache.loaded_at > JWKS_MAX_AGE_S
            may_fetch = now - cache.failed_at >= REFRESH_INTERVAL_S and (
                empty or stale or now - cache.kid_refresh_at >= REFRESH_INTERVAL_S
            )
            if (key is None or stale) and may_fetch:
                if key is None and not empty and not stale:
                    cache.kid_refresh_at = now  # an unknown kid: limited so random kids cannot hammer the IdP
                try:
                    cache.keys = await anyio.to_thread.run_sync(self._fetch)
                    cache.loaded_at, cache.failure = time.monotonic(), ""
                except IdentityProviderUnavailable as e:
                    cache.failed_at, cache.failure = time.monotonic(), str(e)
                    log.warning("%s", e)
                key = _pick(cache.keys, kid)
        if key is not None:
            return key  # a stale set whose refresh failed still serves: the provider may be briefly down
        if cache.failure and (not cache.keys or cache.failed_at >= cache.loaded_at):
            raise IdentityProviderUnavailable(f"cannot verify the token: {cache.failure}")
        if kid is None:
            raise InvalidToken("the token names no key (kid) and the identity provider has several")
        raise InvalidToken(f"the token's signing key {kid[:64]!r} is not one of the identity provider's keys")

    def _fetch(self) -> dict[str | None, jwt.PyJWK]:
        """The provider's keys (blocking: runs on a worker thread)."""
        url = self.jwks_url
        if url is None:
            discovery = f"{self.issuer}/.well-known/openid-configuration"
            doc = _get_json(discovery)
            url = doc.get("jwks_uri") if isinstance(doc, dict) else None
            if not isinstance(url, str) or not url.startswith(("https://", "http://")):
                raise IdentityProviderUnavailable(f"{discovery} names no jwks_uri")
        jwks = _get_json(url)
        entries = jwks.get("keys") if isinstance(jwks, dict) else None
        if not isinstance(entries, list):
            raise IdentityProviderUnavailable(f"{url} is not a JWKS (no keys list)")
        keys: dict[str | None, jwt.PyJWK] = {}
        for entry in entries:
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
                continue
            try:
                key = jwt.PyJWK(entry)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue  # a key type or curve this server cannot use: the others still serve
            keys[entry.get("kid") if isinstance(entry.get("kid"), str) else None] = key
        if not keys:
            raise IdentityProviderUnavailable(f"{url} has no usable signing keys")
        return keys


def _pick(keys: dict[str | None, jwt.PyJWK], kid: str | None) -> jwt.PyJWK | None:
    if kid is not None:
        return keys.get(kid)
    return next(iter(keys.values())) if len(keys) == 1 else None


def _get_json(url: str) -> Any:
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "iceberg-catalog"})
        with urllib.request.urlopen(req, timeout=FETCH_TIMEOUT_S) as resp:  # noqa: S310 - http(s) checked at start
            body = resp.read(MAX_FETCH_BYTES + 1)
        if len(body) > MAX_FETCH_BYTES:
            raise ValueError("response too large")
        return json.loads(body)
    except Exception as e:  # noqa: BLE001 - any failure: the provider is unreachable or broken
        raise IdentityProviderUnavailable(f"identity provider unreachable: GET {url}: {e}") from e


def claim_at(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by dotted path into nested objects (``realm_access.roles``). A name that
    itself contains dots (``https://example.com/groups``) is found as it is first."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict):
            if value is claims:
                return None
            raise InvalidToken(f"token claim {path!r}: {part!r} is not inside an object")
        if part not in value:
            return None
        value = value[part]
    return value
