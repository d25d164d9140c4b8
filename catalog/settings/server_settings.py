"""The HTTP server's settings: where it listens, its processes, its logs, and the limits one client meets
(README "Limits" says what happens when each is hit). Given to ``server/`` and the API's middleware."""

from __future__ import annotations

from pydantic import Field, field_validator

from catalog.settings.group import Group

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


class ServerSettings(Group):
    """``CATALOG_HOST``, ``CATALOG_PORT``, ``CATALOG_WORKERS``, ``CATALOG_LOG_*``, the HTTP limits and timeouts,
    ``CATALOG_METRICS_TOKEN``, ``CATALOG_IDEMPOTENCY_KEY_LIFETIME_SECONDS``."""

    host: str = "127.0.0.1"
    port: int = Field(default=8181, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, description="Server processes (uvicorn workers).")
    log_level: str = Field(default="info", description="debug, info, warning, error or critical.")
    log_format: str = Field(
        default="auto",
        pattern="^(auto|json|text)$",
        description="json: one object per line; text: lines for people; auto: text when stderr is a terminal, "
        "json otherwise.",
    )
    max_request_bytes: int = Field(
        default=10_000_000,
        ge=1,
        description="Largest request body; a larger one (declared or received) is refused 413 before it is "
        "buffered, Idempotency-Key requests included.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open HTTP connections per server process; more are answered 503 and closed at once "
        "(lowered at start if the open-file limit cannot hold it).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Time a connection has to send a complete request head (from connecting, or from the "
        "first byte of a next request); the connection is closed after it.",
    )
    body_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Time a request has to send its whole body once its head is complete; closed after it.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest request head (request line and headers); 431 beyond."
    )
    idle_timeout_seconds: int = Field(
        default=75,
        ge=1,
        description="Keep-alive: an idle connection between requests is closed after this. Longer than "
        "clients' pooled-connection idle time, so the server is not the side that closes a reused connection.",
    )
    metrics_token: str | None = Field(
        default=None, description="If set, /metrics needs Authorization: Bearer <metrics_token> (open otherwise)."
    )
    idempotency_key_lifetime_seconds: int = Field(
        default=1800,
        ge=0,
        description="How long the response to a request with an Idempotency-Key is kept for the client's "
        "retries (advertised in /v1/config); 0 switches Idempotency-Key support off.",
    )

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, level: str) -> str:
        if level.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level.lower()
