"""The console's HTML: escaping, the page around every body, and the few pieces pages share
(tables, links, forms). Plain strings built from escaped parts, no template engine: every value
that comes from a table, a name or a request goes through ``esc`` (or ``attr``) on its way in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

BASE = "/ui"
STYLESHEET = BASE + "/static/console.css"
SEP = "\x1f"  # a namespace's levels in a path segment, as the REST API's (%1F)


def esc(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def attr(value: Any) -> str:
    return escape("" if value is None else str(value), quote=True)


def segment(text: str) -> str:
    """One path segment, every reserved character encoded (so a name with ``/`` stays one segment)."""
    return quote(text, safe="")


def ns_segment(ns: Sequence[str]) -> str:
    return "%1F".join(segment(level) for level in ns)


def url(path: str, warehouse: str | None = None, **query: Any) -> str:
    """A console URL: ``path`` under /ui, the warehouse kept (``?warehouse=``), other query values
    given (None left out)."""
    params = {"warehouse": warehouse, **query}
    shown = {k: v for k, v in params.items() if v is not None and v != ""}
    return BASE + path + ("?" + urlencode(shown) if shown else "")


def ns_url(ns: Sequence[str], warehouse: str | None) -> str:
    return url("/ns/" + ns_segment(ns), warehouse) if ns else url("", warehouse)


def entry_url(kind: str, ns: Sequence[str], name: str, warehouse: str | None, **query: Any) -> str:
    letter = "t" if kind == "table" else "v"
    return url(f"/{letter}/{ns_segment(ns)}/{segment(name)}", warehouse, **query)


def link(href: str, text: Any, **attrs: Any) -> str:
    extra = "".join(f' {k.rstrip("_").replace("_", "-")}="{attr(v)}"' for k, v in attrs.items())
    return f'<a href="{attr(href)}"{extra}>{esc(text)}</a>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "", empty: str = "Nothing here.") -> str:
    """A table whose cells are already HTML (escape them when building the rows)."""
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{esc(empty)}</p>'
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    return f'<table class="{attr(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def pairs(values: dict[str, Any], empty: str = "None.") -> str:
    """A definition list of key -> value, sorted by key."""
    if not values:
        return f'<p class="empty">{esc(empty)}</p>'
    items = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in sorted(values.items()))
    return f"<dl>{items}</dl>"


def form(action: str, csrf: str, label: str, fields: dict[str, Any] | None = None, cls: str = "") -> str:
    """A POST form of one button, its CSRF token and hidden ``fields``."""
    hidden = "".join(
        f'<input type="hidden" name="{attr(k)}" value="{attr(v)}">' for k, v in (fields or {}).items() if v is not None
    )
    return (
        f'<form method="post" action="{attr(action)}" class="inline {attr(cls)}">'
        f'<input type="hidden" name="csrf" value="{attr(csrf)}">{hidden}'
        f'<button type="submit">{esc(label)}</button></form>'
    )


def crumbs(parts: Sequence[tuple[str, str | None]]) -> str:
    """The breadcrumb trail: (text, href or None for the current page)."""
    items = "".join(
        f"<li>{link(href, text)}</li>" if href else f'<li aria-current="page">{esc(text)}</li>' for text, href in parts
    )
    return f'<nav aria-label="Breadcrumb"><ol class="crumbs">{items}</ol></nav>'


def page(title: str, body: str, who: str | None = None, csrf: str | None = None, warehouse: str | None = None) -> str:
    """A whole page: the header (who is signed in, the sections), ``body``, no script."""
    signed = ""
    if who is not None:
        out = form(BASE + "/logout", csrf, "Sign out") if csrf else ""
        signed = f'<span class="who">Signed in as <strong>{esc(who)}</strong></span> {out}'
    nav = " ".join(
        link(href, text)
        for text, href in (
            ("Namespaces", url("", warehouse)),
            ("Search", url("/search", warehouse)),
            ("Dropped", url("/dropped", warehouse)),
            ("Events", url("/events", warehouse)),
        )
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · Iceberg catalog</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>'
        f'<header><a class="brand" href="{BASE}">Iceberg catalog</a>'
        f'<nav aria-label="Sections" class="sections">{nav}</nav><div class="session">{signed}</div></header>'
        f'<main id="main"><h1>{esc(title)}</h1>{body}</main></body></html>'
    )


def when(ms: Any) -> str:
    """A millisecond timestamp as UTC text (what a table's snapshots and logs carry)."""
    import datetime as dt

    if not isinstance(ms, int) or isinstance(ms, bool):
        return ""
    try:
        return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return str(ms)
