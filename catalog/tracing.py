"""OpenTelemetry traces: off unless the standard ``OTEL_*`` variables say where to send them.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set, or
``OTEL_TRACES_EXPORTER`` is ``otlp`` (``none``, or ``OTEL_SDK_DISABLED=true``, keeps them off): spans
are batched and exported over OTLP/HTTP (``opentelemetry-exporter-otlp-proto-http``, which reads the
rest of ``OTEL_EXPORTER_OTLP_*`` itself: headers, timeout, protocol). ``OTEL_SERVICE_NAME`` names
the service (default ``iceberg-catalog``).

``span(name, **attributes)`` is what the code calls: a real span when traces are on, a shared no-op
context otherwise (the commit path pays one attribute read). The request span and W3C
``traceparent`` handling are ``api/tracing.py``'s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

_tracer: Any = None
_NOOP = nullcontext()


def wanted(environ: dict[str, str] | os._Environ = os.environ) -> bool:
    if environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    exporter = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    return exporter == "otlp" or bool(
        environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure() -> bool:
    """Set up the exporter once per process when the environment asks for traces: whether it did."""
    global _tracer
    if _tracer is not None or not wanted():
        return _tracer is not None
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    service = os.environ.get("OTEL_SERVICE_NAME") or "iceberg-catalog"
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _tracer = trace.get_tracer("catalog")
    return True


def enabled() -> bool:
    return _tracer is not None


def tracer() -> Any:
    return _tracer


def shutdown() -> None:
    """Flush what is batched (at process exit)."""
    if _tracer is not None:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
        if hasattr(provider, "shutdown"):
            provider.shutdown()


@contextmanager
def _span(name: str, attributes: dict[str, Any]) -> Iterator[Any]:
    with _tracer.start_as_current_span(name, attributes=attributes) as current:
        yield current


def span(name: str, **attributes: Any) -> Any:
    """A span named ``name`` around a block (``with tracing.span("commit.cas", table=...)``)."""
    if _tracer is None:
        return _NOOP
    return _span(name, {k.replace("_", "."): v for k, v in attributes.items() if v is not None})
