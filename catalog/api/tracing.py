"""The request span: one SERVER span per HTTP request, child of the client's W3C trace context
(``traceparent``/``tracestate`` headers) when it sent one. Installed only when traces are on
(``catalog.tracing``); the commit engine's step spans nest under it."""

from __future__ import annotations

from typing import Any

from catalog import tracing


class Traced:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not tracing.enabled():
            await self.app(scope, receive, send)
            return
        from opentelemetry import context, propagate, trace

        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers") or ()}
        parent = propagate.extract(carrier)
        path = scope["path"]
        resource = "/".join(path.split("/")[:3]) if path.startswith("/v1/") else path.split("/")[1][:32]
        name = f"{scope['method']} {resource}"
        status: dict[str, int] = {}

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        span = tracing.tracer().start_span(
            name,
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": scope["method"], "url.path": path[:512]},
        )
        token = context.attach(trace.set_span_in_context(span, parent))
        try:
            await self.app(scope, receive, sending)
        finally:
            code = status.get("code", 500)
            span.set_attribute("http.response.status_code", code)
            if code >= 500:
                span.set_status(trace.Status(trace.StatusCode.ERROR))
            span.end()
            context.detach(token)
