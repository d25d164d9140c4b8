"""Change events' settings (catalog/events/, database/outbox.py, delivery/; docs/events.md)."""

from __future__ import annotations

from pydantic import Field, field_validator

from catalog.settings.group import Group, duration_seconds


class EventSettings(Group):
    """``CATALOG_EVENTS_*``."""

    events_enabled: bool = Field(
        default=True,
        description="Every change writes an event row in its own transaction (the outbox), served by "
        "POST /v1/events and pushed to the configured sinks (docs/events.md).",
    )
    events_retention: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="Events older than this are pruned (seconds, or with a unit: 30m, 12h, 7d).",
    )
    events_max_rows: int = Field(
        default=1_000_000, ge=1000, description="At most this many events are kept: the oldest go first."
    )
    events_webhooks: str | None = Field(
        default=None,
        description="Webhook sinks: comma-separated name=url pairs (name: letters, digits, - and _).",
    )
    events_webhook_secret: str | None = Field(
        default=None, description="HMAC-SHA256 key of the webhooks' X-Catalog-Signature header."
    )
    events_nats_url: str | None = Field(default=None, description="A NATS server the events are published to.")
    events_nats_subject: str = Field(
        default="iceberg.catalog.events", description="Subject prefix: <prefix>.<operation-type>."
    )
    events_delivery_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often an idle sink looks for new events."
    )
    events_delivery_lease_seconds: float = Field(
        default=30.0, ge=2, description="A sink's delivery lease: one replica delivers to a sink at a time."
    )

    @field_validator("events_retention", mode="before")
    @classmethod
    def _events_retention(cls, value: object) -> object:
        return duration_seconds(value)
