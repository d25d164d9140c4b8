"""The API, browsable: ``GET /openapi.json`` is ``spec/openapi.yaml`` (the document of what this server
serves, kept true by tests/test_spec.py) as JSON, converted once when the app is made; ``GET /docs`` is
a small self-contained HTML page listing its operations, linking the JSON. No script, stylesheet or
font from elsewhere: it works offline and under any content security policy. Both are open (no token),
like the health routes, and not advertised in ``/v1/config`` (they are not catalog operations).

The document ships in the wheel as ``catalog/_spec/openapi.yaml``; in a checkout it is ``spec/``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import orjson
import yaml
from litestar import Response, get
from litestar.handlers import HTTPRouteHandler

from catalog import __version__, errors
from catalog.api import wire

PATHS = ("/docs", "/openapi.json")
_METHODS = ("get", "head", "post", "put", "delete")


def spec_path() -> Path | None:
    package = Path(__file__).resolve().parent.parent  # catalog/
    for candidate in (package / "_spec" / "openapi.yaml", package.parent / "spec" / "openapi.yaml"):
        if candidate.is_file():
            return candidate
    return None


def load_spec() -> dict[str, Any] | None:
    """The OpenAPI document, or None when it is not installed (the routes then answer 404)."""
    path = spec_path()
    return None if path is None else yaml.safe_load(path.read_text(encoding="utf-8"))


def page(spec: dict[str, Any]) -> str:
    """The /docs page: every operation by tag, its method, path and summary, and the JSON's link."""
    title = html.escape(str(spec.get("info", {}).get("title") or "iceberg-catalog API"))  # says "API" itself
    rows: dict[str, list[str]] = {}
    for path, item in (spec.get("paths") or {}).items():
        for method in _METHODS:
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            tag = (op.get("tags") or ["Other"])[0]
            codes = ", ".join(str(c) for c in (op.get("responses") or {}))
            rows.setdefault(tag, []).append(
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(str(op.get('summary') or ''))}</td><td>{html.escape(codes)}</td></tr>"
            )
    sections = "".join(
        f"<h2>{html.escape(tag)}</h2><table><tr><th>Method</th><th>Path</th><th>What</th><th>Status codes</th></tr>"
        + "".join(lines)
        + "</table>"
        for tag, lines in rows.items()
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{title}</title><style>body{{font-family:sans-serif;margin:2em;max-width:70em}}"
        "table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.3em;"
        "text-align:left;vertical-align:top}code{white-space:nowrap}</style></head><body>"
        f"<h1>{title} {html.escape(__version__)}</h1>"
        '<p>The whole document, schemas included: <a href="/openapi.json">/openapi.json</a> (OpenAPI '
        "3.1; open it in any OpenAPI viewer). Catalog routes live under <code>/v1/{prefix}</code>; "
        "<code>{prefix}</code> is optional.</p>"
        f"{sections}</body></html>"
    )


def routes(spec: dict[str, Any] | None) -> list[HTTPRouteHandler]:
    """The two handlers, their bodies made now (once per process)."""
    document = orjson.dumps(spec) if spec is not None else None
    text = page(spec) if spec is not None else None

    def missing() -> errors.IcebergError:
        return errors.NotFound("The OpenAPI document is not installed with this server")

    @get("/openapi.json", sync_to_thread=False, include_in_schema=False)
    def openapi_json() -> Response:
        if document is None:
            raise missing()
        return wire.raw_json_response(document)

    @get("/docs", sync_to_thread=False, include_in_schema=False)
    def docs_page() -> Response:
        if text is None:
            raise missing()
        return Response(content=text, media_type="text/html; charset=utf-8")

    return [openapi_json, docs_page]
