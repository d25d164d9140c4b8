"""Authentication and authorization: built-in OAuth2 client credentials and/or an OIDC identity provider
(off unless auth_required), and the grants. Given to ``auth/`` (and the console's sign-in)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from catalog.settings.group import Group


class AuthSettings(Group):
    """``CATALOG_AUTH_REQUIRED``, ``CATALOG_OAUTH_CLIENTS``, ``CATALOG_TOKEN_*``, ``CATALOG_OIDC_*``,
    ``CATALOG_TRUSTED_PROXIES``, ``CATALOG_AUTHORIZATION``, ``CATALOG_AUTHZ_*``."""

    auth_required: bool = Field(
        default=False,
        description="Require a valid bearer token on every /v1 and /management route (not /v1/oauth/tokens, "
        "/health/*, /metrics).",
    )
    oauth_clients: str | None = Field(
        default=None, description="Built-in clients of /v1/oauth/tokens (client credentials): id:secret,id2:secret2"
    )
    token_secret: str | None = Field(
        default=None,
        description="Key signing built-in tokens (JWT HS256), at least 32 bytes; the same value on every worker "
        "and replica. Required with oauth_clients unless one SQLite process (then random, lost at restart).",
    )
    token_ttl_seconds: int = Field(default=3600, ge=60, description="Lifetime of a built-in token.")
    oidc_issuer: str | None = Field(
        default=None,
        description="Issuer URL of an OIDC identity provider whose tokens are accepted (their iss must match); "
        "its keys are found by discovery at <issuer>/.well-known/openid-configuration.",
    )
    oidc_audience: str | None = Field(default=None, description="Required aud of OIDC tokens (not checked if unset).")
    oidc_jwks_url: str | None = Field(
        default=None,
        description="JWKS URL of the identity provider's signing keys (skips discovery; alone, without "
        "oidc_issuer, tokens of any issuer signed by these keys are accepted).",
    )
    oidc_principal_claim: str = Field(
        default="sub", description="OIDC claim naming the principal (e.g. sub, preferred_username, email, azp)."
    )
    oidc_groups_claim: str = Field(
        default="groups",
        description="OIDC claim carrying the caller's groups/roles, a string or a list of strings; a dotted path "
        "reaches into objects (Keycloak: realm_access.roles).",
    )
    oidc_leeway_seconds: int = Field(
        default=60, ge=0, description="Clock skew tolerated on OIDC tokens' exp, nbf and iat."
    )
    trusted_proxies: str = Field(
        default="",
        description="Comma-separated IP addresses or CIDR networks of reverse proxies whose X-Forwarded-For "
        "names the client's address (the token endpoint slows failing sources down by address); from any other "
        "peer the header is ignored. Empty: none trusted.",
    )
    # Authorization (grants; see catalog/auth/policy.py). Only with auth_required: without it, anyone may do anything.
    authorization: Literal["grants", "none"] = Field(
        default="grants",
        description="grants: every request is checked against the grants (management API, CLI, bootstrap file); "
        "none: any valid token may do anything.",
    )
    authz_bootstrap: str | None = Field(
        default=None,
        description="YAML file of grants applied at start-up; grants that came from it and left it are removed, "
        "grants made through the API or CLI stay.",
    )
    authz_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="How long each process reuses its copy of the grants: a grant or revoke takes effect in every "
        "worker and replica within this time.",
    )
