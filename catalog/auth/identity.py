"""Who is calling: a bearer token -> ``Principal``, by whichever verifier its (unverified) ``iss``
claim names: built-in client-credentials tokens (``tokens.py``) or an identity provider's OIDC
tokens (``oidc.py``). ``check_settings`` refuses authentication settings that would lock everyone
out or make tokens fail at random.
"""

from __future__ import annotations

import jwt

from catalog.auth.lockout import parse_trusted_proxies
from catalog.auth.oidc import OidcVerifier
from catalog.auth.principals import IdentityProviderUnavailable, InvalidToken, Principal
from catalog.auth.tokens import BUILTIN_ISSUER, BuiltinTokens, parse_clients
from catalog.settings import AuthSettings, ConfigurationError

MAX_TOKEN_BYTES = 16 * 1024


def check_settings(settings: AuthSettings, workers: int, sqlite: bool) -> list[str]:
    """Raise ``ConfigurationError`` for authentication settings the server must not run with;
    return warnings. ``workers``: the server's processes; ``sqlite``: whether its database is SQLite
    (one host: without both, tokens signed by one process must verify in another)."""
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
    parse_trusted_proxies(settings.trusted_proxies)
    secret = settings.token_secret
    if secret is not None and len(secret.encode()) < 32:
        raise ConfigurationError(
            "CATALOG_TOKEN_SECRET must be at least 32 bytes (e.g. `openssl rand -base64 32`): it signs the tokens"
        )
    if clients and secret is None:
        if workers > 1 or not sqlite:
            raise ConfigurationError(
                "CATALOG_OAUTH_CLIENTS is set without CATALOG_TOKEN_SECRET: with several workers or replicas "
                "each process would sign tokens with its own random key and refuse the others'; set "
                "CATALOG_TOKEN_SECRET to the same random value (>= 32 bytes) everywhere"
            )
        warning = "CATALOG_TOKEN_SECRET is not set: built-in tokens are signed with a random key and do not "
        return [warning + "survive a restart (clients fetch a new one)"]
    if secret is None and not sqlite:
        return [
            "CATALOG_TOKEN_SECRET is not set: each server seals the list routes' page tokens and scan planning's "
            "plan tasks with its own random key, so with several replicas a paged list (pageSize) or a plan task "
            "that moves to another one is refused (400); set CATALOG_TOKEN_SECRET to the same random value "
            "(>= 32 bytes) everywhere"
        ]
    return []


class Authenticator:
    """A bearer token -> Principal, by whichever verifier its issuer names."""

    def __init__(self, builtin: BuiltinTokens, oidc: OidcVerifier | None) -> None:
        self.builtin = builtin
        self.oidc = oidc

    @classmethod
    def from_settings(cls, settings: AuthSettings) -> Authenticator:
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
