"""The web console's settings (catalog/console/, docs/console.md)."""

from __future__ import annotations

from pydantic import Field

from catalog.settings.group import Group


class ConsoleSettings(Group):
    """``CATALOG_CONSOLE_*``."""

    console_enabled: bool = Field(
        default=True,
        description="Serve the web console at /ui: server-rendered pages over the same authorization as "
        "the REST API (docs/console.md); false: no /ui routes.",
    )
    console_oidc_client_id: str | None = Field(
        default=None,
        description="The OIDC client the console signs people in with (authorization code + PKCE at "
        "oidc_issuer, redirect URI <catalog URL>/ui/login/callback); unset: built-in clients only.",
    )
    console_oidc_client_secret: str | None = Field(
        default=None, description="That client's secret, for a provider that requires one (else a public client)."
    )
    console_oidc_scopes: str = Field(default="openid", description="The scopes the console asks the provider for.")
