"""The push sinks: each sends a batch of events, in order, or raises. An event goes out as a
CloudEvents 1.0 structured-mode JSON document (the ``cloudevents`` SDK): ``id`` is the event's id (the
same on every redelivery: receivers deduplicate on it), ``type`` ``iceberg.catalog.<operation-type>``,
``subject`` the object's dotted name, ``sequence`` (an extension) its feed position, ``data`` the
event as the feed serves it (docs/events.md).

- ``Webhook``: one POST per event; a 2xx is delivered, anything else (or no answer within the
  timeout) is a failure the loop retries. ``X-Catalog-Signature: sha256=<hex>`` is the HMAC-SHA256 of
  the body with ``CATALOG_EVENTS_WEBHOOK_SECRET``, when set.
- ``Nats``: one message per event on ``<subject prefix>.<operation-type>``, with ``Nats-Msg-Id`` the
  event id (JetStream deduplicates on it), then a flush.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from catalog.events.records import StoredEvent
from catalog.names import dotted
from catalog.settings import ConfigurationError, EventSettings

SIGNATURE_HEADER = "X-Catalog-Signature"
TYPE_PREFIX = "iceberg.catalog."
SOURCE = "/iceberg-catalog/events"
TIMEOUT_SECONDS = 10.0
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")


class Sink(Protocol):
    name: str

    def send(self, events: Sequence[StoredEvent]) -> int:
        """Send in order; the number sent before a failure (raises only when none was)."""
        ...

    def close(self) -> None: ...


def structured(event: StoredEvent, source: str = SOURCE) -> tuple[dict[str, str], bytes]:
    """The event as a structured-mode CloudEvent: (headers, body). ``source``: ``SOURCE``, or
    ``SOURCE/<warehouse>`` for a warehouse besides the default one."""
    # imported here: a server without sinks never loads the SDK
    from cloudevents.core.bindings.http import to_structured_event
    from cloudevents.core.v1.event import CloudEvent

    subject = dotted(event.namespace, event.name)
    cloud = CloudEvent(
        attributes={
            "id": event.event_id,
            "type": TYPE_PREFIX + event.type,
            "source": source,
            "subject": subject,
            "time": datetime.fromtimestamp(event.created_ms / 1000, UTC),
            "datacontenttype": "application/json",
            "sequence": str(event.position),
        },
        data=event.to_json(),
    )
    message = to_structured_event(cloud)
    return dict(message.headers), message.body


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Webhook:
    def __init__(self, name: str, url: str, secret: str | None, source: str = SOURCE) -> None:
        import httpx

        self.name, self.url, self.secret, self.source = name, url, secret, source
        self._http = httpx
        self._client = httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False)

    def send(self, events: Sequence[StoredEvent]) -> int:
        for sent, event in enumerate(events):
            headers, body = structured(event, self.source)
            if self.secret:
                headers[SIGNATURE_HEADER] = signature(self.secret, body)
            try:
                resp = self._client.post(self.url, content=body, headers=headers)
                ok = 200 <= resp.status_code < 300
                reason = f"HTTP {resp.status_code}"
            except self._http.HTTPError as e:
                ok, reason = False, type(e).__name__
            if not ok:
                if sent:
                    return sent
                raise DeliveryFailed(f"webhook {self.name}: {reason}")
        return len(events)

    def close(self) -> None:
        self._client.close()


class Nats:
    def __init__(self, name: str, url: str, subject: str, source: str = SOURCE) -> None:
        self.name, self.url, self.subject, self.source = name, url, subject, source
        self._loop = asyncio.new_event_loop()
        self._conn: Any = None

    def send(self, events: Sequence[StoredEvent]) -> int:
        try:
            return self._loop.run_until_complete(self._send(events))
        except Exception as e:  # noqa: BLE001 - any failure: reconnect next time, the loop retries
            self._drop()
            raise DeliveryFailed(f"nats {self.name}: {type(e).__name__}: {e}") from e

    async def _send(self, events: Sequence[StoredEvent]) -> int:
        import nats

        if self._conn is None or self._conn.is_closed:
            self._conn = await nats.connect(
                self.url, connect_timeout=5, max_reconnect_attempts=0, allow_reconnect=False
            )
        for event in events:
            headers, body = structured(event, self.source)
            await self._conn.publish(
                f"{self.subject}.{event.type}", body, headers={**headers, "Nats-Msg-Id": event.event_id}
            )
        await self._conn.flush(timeout=TIMEOUT_SECONDS)
        return len(events)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._loop.run_until_complete(conn.close())
            except Exception:  # noqa: BLE001 - it is gone either way
                pass

    def close(self) -> None:
        self._drop()
        self._loop.close()


class DeliveryFailed(Exception):
    pass


def configured(settings: EventSettings, warehouse: str | None = None) -> list[Sink]:
    """The sinks the settings name (``CATALOG_EVENTS_WEBHOOKS``, ``CATALOG_EVENTS_NATS_URL``). The
    events of a warehouse besides the default one say which: their CloudEvents ``source`` is
    ``/iceberg-catalog/events/<warehouse>`` and their NATS subject ``<prefix>.<warehouse>.<type>``."""
    source = f"{SOURCE}/{warehouse}" if warehouse else SOURCE
    subject = f"{settings.events_nats_subject}.{warehouse}" if warehouse else settings.events_nats_subject
    sinks: list[Sink] = []
    for name, url in parse_webhooks(settings.events_webhooks):
        sinks.append(Webhook(name, url, settings.events_webhook_secret, source))
    if settings.events_nats_url:
        sinks.append(Nats("nats", settings.events_nats_url, subject, source))
    return sinks


def parse_webhooks(value: str | None) -> list[tuple[str, str]]:
    """``name=url,name=url`` -> pairs; ``ConfigurationError`` names what is wrong."""
    pairs: list[tuple[str, str]] = []
    for part in (value or "").split(","):
        if not part.strip():
            continue
        name, sep, url = part.strip().partition("=")
        if not sep or not _NAME.match(name) or not url.startswith(("http://", "https://")):
            raise ConfigurationError(
                "CATALOG_EVENTS_WEBHOOKS: each entry is name=http(s)://url, the name letters, digits, - and _"
            )
        if name == "nats" or any(name == n for n, _ in pairs):
            raise ConfigurationError(f"CATALOG_EVENTS_WEBHOOKS: the sink name {name} is taken")
        pairs.append((name, url))
    return pairs
