"""Who is calling: bearer tokens -> ``Principal``. Built-in client-credentials tokens and OIDC tokens.

Two kinds of token are accepted, told apart by their (unverified) ``iss`` claim:

* built-in: JWTs this catalog issues at ``/v1/oauth/tokens`` to the clients of ``CATALOG_OAUTH_CLIENTS``,
  signed HS256 with ``CATALOG_TOKEN_SECRET``. Each carries a keyed hash of its client's secret, so
  removing a client or changing its secret invalidates its tokens at the next start. Replicas that
  share the secret accept each other's tokens; nothing is stored.
* OIDC: JWTs from an identity provider (Keycloak, Entra ID, Auth0, Dex...), verified with the keys of its
  JWKS (asymmetric algorithms only). The key set is fetched lazily, cached, and fetched again when a
  token names a key the cache does not have (at most once per ``REFRESH_INTERVAL_S``), off the event loop.

``check_settings`` refuses configurations that would lock everyone out or make tokens fail at random.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import secrets
import time
import urllib.request
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import jwt

from catalog.settings import Settings

log = logging.getLogger("catalog.auth")

BUILTIN_ISSUER = "urn:iceberg-catalog:builtin"
TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
MAX_TOKEN_BYTES = 16 * 1024
# Asymmetric algorithms only for OIDC: an HS* token would be checked against a *public* key, and
# "none" is no signature at all.
OIDC_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
_KEY_TYPES = {"RS": "RSA", "PS": "RSA", "ES": "EC", "Ed": "OKP"}
BUILTIN_LEEWAY_S = 30  # replicas' clocks may differ a little: iat/exp of a token minted by another one
REFRESH_INTERVAL_S = 10.0  # unknown kids and failed fetches trigger at most one JWKS fetch per this
JWKS_MAX_AGE_S = 3600.0  # the key set is fetched again when older (a revoked key stops being accepted)
FETCH_TIMEOUT_S = 5.0
MAX_FETCH_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Principal:
    name: str
    groups: frozenset[str] = frozenset()
    unrestricted: bool = False


ANONYMOUS = Principal("anonymous", unrestricted=True)  # auth off: everyone may do everything
UNAUTHENTICATED = Principal("unauthenticated")  # auth on, on a route open to all (health, token endpoint)


class InvalidToken(Exception):
    """The token is not acceptable: 401."""


class IdentityProviderUnavailable(Exception):
    """The token could not be checked because the identity provider's keys cannot be fetched: 503.

    Not a 401: the token may well be valid, and a 401 would tell the client its credentials are wrong
    (clients then drop their token or give up); 503 with Retry-After says "try again" and points the
    operator at the provider."""


class ConfigurationError(Exception):
    """A setting combination the server refuses to start with; the message names the variable."""


# ---------------------------------------------------------------------------------------------------
# Configuration check


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


def _check_auth(settings: Settings) -> list[str]:
    clients = parse_clients(settings.oauth_clients)
    oidc = bool(settings.oidc_issuer or settings.oidc_jwks_url)
    if settings.auth_required and not clients and not oidc:
        raise ConfigurationError(
            "CATALOG_AUTH_REQUIRED is true but no client could ever get a token: set CATALOG_OAUTH_CLIENTS "
            "(built-in tokens) or CATALOG_OIDC_ISSUER / CATALOG_OIDC_JWKS_URL (an identity provider)"
        )
    for name in ("oidc_issuer", "oidc_jwks_url"):
        value = getattr(settings, name)
        if value and not value.startswith(("https://", "http://")):
            raise ConfigurationError(f"CATALOG_{name.upper()} must be an http(s) URL, got {value!r}")
    secret = settings.token_secret
    if secret is not None and len(secret.encode()) < 32:
        raise ConfigurationError(
            "CATALOG_TOKEN_SECRET must be at least 32 bytes (e.g. `openssl rand -base64 32`): it signs the tokens"
        )
    if clients and secret is None:
        if settings.workers > 1 or not settings.is_sqlite:
            raise ConfigurationError(
                "CATALOG_OAUTH_CLIENTS is set without CATALOG_TOKEN_SECRET: with several workers or replicas "
                "each process would sign tokens with its own random key and refuse the others'; set "
                "CATALOG_TOKEN_SECRET to the same random value (>= 32 bytes) everywhere"
            )
        warning = "CATALOG_TOKEN_SECRET is not set: built-in tokens are signed with a random key and do not "
        return [warning + "survive a restart (clients fetch a new one)"]
    return []


def check_settings(settings: Settings) -> list[str]:
    """Raise ``ConfigurationError`` for a configuration the server must not run with; return warnings."""
    from catalog.storage import vending

    vending.check_settings(settings)  # storage access: vending without STS
    return _check_auth(settings)


# ---------------------------------------------------------------------------------------------------
# Built-in tokens


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
        return Principal(client_id)

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


# ---------------------------------------------------------------------------------------------------
# OIDC tokens


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


# ---------------------------------------------------------------------------------------------------
# Routing


class Authenticator:
    """A bearer token -> Principal, by whichever verifier its issuer names."""

    def __init__(self, builtin: BuiltinTokens, oidc: OidcVerifier | None) -> None:
        self.builtin = builtin
        self.oidc = oidc

    @classmethod
    def from_settings(cls, settings: Settings) -> Authenticator:
        clients = parse_clients(settings.oauth_clients)
        builtin = BuiltinTokens(clients, settings.token_secret, settings.token_ttl_seconds)
        oidc = None
        if settings.oidc_issuer or settings.oidc_jwks_url:
            oidc = OidcVerifier(
                settings.oidc_issuer,
                settings.oidc_audience,
                settings.oidc_jwks_url,
                settings.oidc_principal_claim,
                settings.oidc_groups_claim,
                settings.oidc_leeway_seconds,
            )
        return cls(builtin, oidc)

    async def verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken(f"token longer than {MAX_TOKEN_BYTES} bytes")
        try:
            # Peeked, not trusted: only to pick the verifier, which checks everything.
            iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
            if iss == BUILTIN_ISSUER:
                return self.builtin.verify(token)
            if self.oidc is not None and self.oidc.accepts_issuer(iss):
                return await self.oidc.verify(token)
            if iss is None:
                raise InvalidToken("token has no issuer (iss)")
            raise InvalidToken(f"token issuer {str(iss)[:200]!r} is not trusted by this catalog")
        except (InvalidToken, IdentityProviderUnavailable):
            raise
        except jwt.PyJWTError as e:
            raise InvalidToken(f"malformed token: {e}") from e
        except Exception as e:  # noqa: BLE001 - e.g. RecursionError on deeply nested JSON: never a 500
            raise InvalidToken("malformed token") from e


# ---------------------------------------------------------------------------------------------------
# Failed-attempt limiter of the token endpoint


@dataclass
class _Record:
    failures: int = 0
    first_failure: float = 0.0
    locked_until: float = 0.0
    strikes: int = 0  # lockouts so far: each one is twice as long as the previous
    last_seen: float = 0.0


@dataclass(frozen=True)
class LimitPolicy:
    max_failures: int
    window_s: float
    base_lock_s: float
    max_lock_s: float


class FailureLimiter:
    """Locks out a client id, or a source address, after too many failed token requests.

    A client id is locked after ``CLIENT.max_failures`` failures within its window (a guess at one
    client's secret), an address after ``ADDRESS.max_failures`` (guesses spread over many ids, looser
    since several users may share a proxy's address). Each lockout of the same key lasts twice as
    long as the previous (up to ``max_lock_s``); a success resets both. While locked, attempts are
    refused without checking the secret, and not counted. Memory is bounded: only configured client
    ids are tracked (guesses at unknown ids count against the address), and at most ``max_addresses``
    addresses, the least recently seen forgotten first. In-process: each worker counts on its own.
    """

    CLIENT = LimitPolicy(max_failures=5, window_s=300, base_lock_s=10, max_lock_s=900)
    ADDRESS = LimitPolicy(max_failures=20, window_s=300, base_lock_s=10, max_lock_s=300)

    def __init__(self, max_addresses: int = 10_000, clock: Any = time.monotonic) -> None:
        self.clients: dict[str, _Record] = {}
        self.addresses: OrderedDict[str, _Record] = OrderedDict()
        self.max_addresses = max_addresses
        self.clock = clock

    def locked_for(self, client_id: str | None, address: str) -> float:
        """Seconds until the attempt may be made (0: go ahead)."""
        now = self.clock()
        waits = [r.locked_until - now for r in (self._client(client_id), self.addresses.get(address)) if r]
        return max([0.0, *waits])

    def failed(self, client_id: str | None, address: str) -> float:
        """Record a failure; the lockout it starts, in seconds (0: none)."""
        now = self.clock()
        locks = []
        if (record := self._client(client_id)) is not None:
            locks.append(self._fail(record, self.CLIENT, now))
        record = self.addresses.pop(address, None) or _Record()
        self.addresses[address] = record  # most recently seen last
        while len(self.addresses) > self.max_addresses:
            self.addresses.popitem(last=False)
        locks.append(self._fail(record, self.ADDRESS, now))
        return max(locks)

    def succeeded(self, client_id: str, address: str) -> None:
        if client_id in self.clients:
            self.clients[client_id] = _Record()
        self.addresses.pop(address, None)

    def track(self, client_ids: list[str]) -> None:
        self.clients = {c: _Record() for c in client_ids}

    def _client(self, client_id: str | None) -> _Record | None:
        return self.clients.get(client_id) if client_id else None

    @staticmethod
    def _fail(record: _Record, policy: LimitPolicy, now: float) -> float:
        if now - record.last_seen > 4 * policy.max_lock_s:
            record.strikes = 0  # quiet for long: forgiven
        record.last_seen = now
        if record.failures == 0 or now - record.first_failure > policy.window_s:
            record.failures, record.first_failure = 0, now
        record.failures += 1
        if record.failures < policy.max_failures:
            return 0.0
        lock = min(policy.base_lock_s * 2**record.strikes, policy.max_lock_s)
        record.strikes += 1
        record.failures = 0
        record.locked_until = now + lock
        return lock
