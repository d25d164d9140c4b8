"""The console's page bodies, from what the routes read (and were allowed to read): pure functions of
their arguments to HTML, with no I/O, so a page of a 10,000-snapshot table is timed here alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from catalog.commit.changes import MAINTENANCE_JOB
from catalog.console import charts
from catalog.console.html import attr, entry_url, esc, form, link, ns_url, pairs, table, url, when

SNAPSHOTS_PER_PAGE = 50
# The summary values of the timeline's columns (the rest are in the row's details).
_ADDED_REMOVED = (
    ("added-data-files", "+files"),
    ("deleted-data-files", "−files"),
    ("added-records", "+rows"),
    ("deleted-records", "−rows"),
)
# Who committed a snapshot, when its summary says: engines write the first two (Spark both), the
# catalog's own maintenance commits the last.
_WHO = ("engine-name", "app-id", MAINTENANCE_JOB)


def warehouses(names: Sequence[tuple[str, str | None]]) -> str:
    rows = [[link(url("", w), shown)] for shown, w in names]
    return table(["Warehouse"], rows, "list", "No warehouse you may see.")


def namespace(
    ns: Sequence[str],
    children: Sequence[tuple[str, ...]],
    tables: Sequence[str],
    views: Sequence[str],
    properties: dict[str, str] | None,
    warehouse: str | None,
) -> str:
    parts = []
    if properties is not None:
        parts.append(f"<section><h2>Properties</h2>{pairs(properties)}</section>")
    rows = [[link(ns_url(c, warehouse), ".".join(c))] for c in children]
    parts.append(f"<section><h2>Namespaces</h2>{table(['Namespace'], rows, 'list', 'No namespaces.')}</section>")
    rows = [[link(entry_url("table", ns, t, warehouse), t)] for t in tables]
    parts.append(f"<section><h2>Tables</h2>{table(['Table'], rows, 'list tables', 'No tables.')}</section>")
    rows = [[link(entry_url("view", ns, v, warehouse), v)] for v in views]
    parts.append(f"<section><h2>Views</h2>{table(['View'], rows, 'list views', 'No views.')}</section>")
    return search_box("", warehouse) + "".join(parts)


def search_box(query: str, warehouse: str | None) -> str:
    hidden = f'<input type="hidden" name="warehouse" value="{attr(warehouse)}">' if warehouse else ""
    return (
        f'<form method="get" action="{attr(url("/search"))}" class="search" role="search">{hidden}'
        '<label for="q">Find tables and views by name</label> '
        f'<input id="q" name="q" type="search" value="{attr(query)}" maxlength="200"> '
        '<button type="submit">Search</button></form>'
    )


def search(query: str, found: Sequence[tuple[str, tuple[str, ...], str]], warehouse: str | None, capped: bool) -> str:
    rows = [
        [esc(kind), esc(".".join(ns)), link(entry_url(kind, ns, name, warehouse), name)] for kind, ns, name in found
    ]
    note = '<p class="note">Only the first matches are shown: narrow the search.</p>' if capped else ""
    results = table(["Kind", "Namespace", "Name"], rows, "list results", "Nothing matches.") if query else ""
    return search_box(query, warehouse) + results + note


# -- a table ------------------------------------------------------------------------------------------


def _type(t: Any) -> str:
    if isinstance(t, str):
        return t
    if isinstance(t, dict):
        kind = t.get("type")
        if kind == "list":
            return f"list<{_type(t.get('element'))}>"
        if kind == "map":
            return f"map<{_type(t.get('key'))}, {_type(t.get('value'))}>"
        if kind == "struct":
            return "struct"
    return str(t)


def _fields(fields: Iterable[Any], prefix: str = "") -> list[list[str]]:
    rows: list[list[str]] = []
    for f in fields:
        if not isinstance(f, dict):
            continue
        name = prefix + str(f.get("name", ""))
        required = "required" if f.get("required") else "optional"
        rows.append(
            [esc(f.get("id")), f"<code>{esc(name)}</code>", esc(_type(f.get("type"))), required, esc(f.get("doc"))]
        )
        t = f.get("type")
        if isinstance(t, dict) and t.get("type") == "struct":
            rows += _fields(t.get("fields") or (), name + ".")
    return rows


def schema(doc: dict[str, Any]) -> str:
    current = doc.get("current-schema-id")
    schemas = [s for s in doc.get("schemas") or () if isinstance(s, dict)]
    shown = next((s for s in schemas if s.get("schema-id") == current), schemas[-1] if schemas else None)
    if shown is None:
        return '<p class="empty">No schema.</p>'
    rows = _fields(shown.get("fields") or ())
    older = len(schemas) - 1
    note = f'<p class="note">Schema {esc(shown.get("schema-id"))}; {older} earlier schema(s).</p>'
    return note + table(["Id", "Name", "Type", "Required", "Doc"], rows, "schema")


def specs(doc: dict[str, Any]) -> str:
    rows = []
    default = doc.get("default-spec-id")
    for spec in doc.get("partition-specs") or ():
        if not isinstance(spec, dict):
            continue
        fields = ", ".join(
            f"{f.get('name')}={f.get('transform')}({f.get('source-id')})"
            for f in spec.get("fields") or ()
            if isinstance(f, dict)
        )
        mark = " (default)" if spec.get("spec-id") == default else ""
        rows.append([esc(f"{spec.get('spec-id')}{mark}"), esc(fields or "unpartitioned")])
    return table(["Spec", "Fields"], rows, "specs", "No partition specs.")


def orders(doc: dict[str, Any]) -> str:
    rows = []
    default = doc.get("default-sort-order-id")
    for order in doc.get("sort-orders") or ():
        if not isinstance(order, dict):
            continue
        fields = ", ".join(
            f"{f.get('transform')}({f.get('source-id')}) {f.get('direction')} {f.get('null-order')}"
            for f in order.get("fields") or ()
            if isinstance(f, dict)
        )
        mark = " (default)" if order.get("order-id") == default else ""
        rows.append([esc(f"{order.get('order-id')}{mark}"), esc(fields or "unsorted")])
    return table(["Order", "Fields"], rows, "orders", "No sort orders.")


def refs(doc: dict[str, Any]) -> str:
    rows = []
    for name, ref in sorted((doc.get("refs") or {}).items()):
        if isinstance(ref, dict):
            rows.append([esc(name), esc(ref.get("type")), esc(ref.get("snapshot-id"))])
    return table(["Ref", "Type", "Snapshot"], rows, "refs", "No branches or tags.")


def _who(summary: dict[str, Any]) -> str:
    found = [f"{k}: {summary[k]}" for k in _WHO if summary.get(k)]
    return "; ".join(found)


def timeline(doc: dict[str, Any], page: int, here: str) -> str:
    """The snapshots, newest first, ``SNAPSHOTS_PER_PAGE`` a page (``page`` from 1)."""
    snaps = [s for s in doc.get("snapshots") or () if isinstance(s, dict)]
    snaps.sort(key=lambda s: (s.get("timestamp-ms") or 0, s.get("sequence-number") or 0), reverse=True)
    pages = max(1, -(-len(snaps) // SNAPSHOTS_PER_PAGE))
    page = min(max(page, 1), pages)
    start = (page - 1) * SNAPSHOTS_PER_PAGE
    current = doc.get("current-snapshot-id")
    rows = []
    for s in snaps[start : start + SNAPSHOTS_PER_PAGE]:
        summary = s.get("summary") if isinstance(s.get("summary"), dict) else {}
        sid = s.get("snapshot-id")
        mark = " (current)" if sid == current else ""
        counts = [esc(summary.get(k, "")) for k, _ in _ADDED_REMOVED]
        rows.append(
            [
                esc(f"{sid}{mark}"),
                esc(when(s.get("timestamp-ms"))),
                esc(summary.get("operation")),
                *counts,
                esc(_who(summary)),
            ]
        )
    headers = ["Snapshot", "Committed", "Operation", *(label for _, label in _ADDED_REMOVED), "Committed by"]
    nav = ""
    if pages > 1:
        prev = (
            link(f"{here}&page={page - 1}" if "?" in here else f"{here}?page={page - 1}", "Newer") if page > 1 else ""
        )
        nxt = (
            link(f"{here}&page={page + 1}" if "?" in here else f"{here}?page={page + 1}", "Older")
            if page < pages
            else ""
        )
        nav = f'<nav class="pager" aria-label="Snapshot pages">{prev} <span>page {page} of {pages}</span> {nxt}</nav>'
    return f'<p class="note">{len(snaps)} snapshots.</p>' + table(headers, rows, "snapshots", "No snapshots yet.") + nav


def metadata_log(doc: dict[str, Any], at_most: int = 50) -> str:
    log = [e for e in doc.get("metadata-log") or () if isinstance(e, dict)][-at_most:]
    rows = [[esc(when(e.get("timestamp-ms"))), f"<code>{esc(e.get('metadata-file'))}</code>"] for e in reversed(log)]
    return table(["When", "Metadata file"], rows, "metadata-log", "No earlier metadata files.")


def tasks(found: Sequence[Any]) -> str:
    rows = []
    for t in found:
        result = t.result or {}
        said = result.get("summary") if isinstance(result, dict) else None
        if t.state == "failed":
            said = f"error: {t.last_error}"
        elif t.state in ("queued", "running"):
            said = t.state
        dry = "dry run" if t.options.get("dry-run") else "run"
        rows.append(
            [
                esc(t.id),
                esc(t.kind),
                esc(dry),
                esc(t.state),
                esc(when(t.finished_ms or t.created_ms)),
                esc(said or "done"),
            ]
        )
    return table(["Task", "Kind", "Mode", "State", "When", "Result"], rows, "tasks", "No maintenance tasks yet.")


def maintenance(found: Sequence[Any], may_run: bool, action: str, csrf: str) -> str:
    buttons = ""
    if may_run:
        buttons = (
            '<div class="actions">'
            + form(action, csrf, "Dry run", {"mode": "dry-run"}, "dry-run")
            + form(action, csrf, "Run now", {"mode": "run"}, "run-now")
            + "</div>"
        )
    return buttons + tasks(found)


def table_page(doc: dict[str, Any], page: int, here: str, maintenance_html: str, location: str | None) -> str:
    snaps = [s for s in doc.get("snapshots") or () if isinstance(s, dict)]
    sections = [
        (
            "overview",
            "Overview",
            pairs(
                {
                    "format version": doc.get("format-version"),
                    "table uuid": doc.get("table-uuid"),
                    "location": doc.get("location"),
                    "current snapshot": doc.get("current-snapshot-id"),
                    "last updated": when(doc.get("last-updated-ms")),
                    "metadata file": location,
                }
            ),
        ),
        ("health", "Health over time", charts.health(snaps)),
        ("snapshots", "Snapshots", timeline(doc, page, here)),
        ("maintenance", "Table maintenance", maintenance_html),
        ("schema", "Schema", schema(doc)),
        ("partitioning", "Partition specs", specs(doc)),
        ("sorting", "Sort orders", orders(doc)),
        ("properties", "Properties", pairs(doc.get("properties") or {})),
        ("refs", "Branches and tags", refs(doc)),
        ("metadata-log", "Metadata log", metadata_log(doc)),
    ]
    toc = " ".join(link(f"#{key}", title) for key, title, _ in sections)
    body = "".join(
        f'<section id="{key}" aria-labelledby="h-{key}"><h2 id="h-{key}">{esc(title)}</h2>{html}</section>'
        for key, title, html in sections
    )
    return f'<nav class="toc" aria-label="On this page">{toc}</nav>{body}'


def view_page(doc: dict[str, Any]) -> str:
    versions = {v.get("version-id"): v for v in doc.get("versions") or () if isinstance(v, dict)}
    current = versions.get(doc.get("current-version-id")) or {}
    sqls = [r for r in current.get("representations") or () if isinstance(r, dict) and r.get("type") == "sql"]
    sql = "".join(f"<h3>{esc(r.get('dialect'))}</h3><pre><code>{esc(r.get('sql'))}</code></pre>" for r in sqls)
    return (
        f"<section><h2>SQL</h2>{sql or '<p class=empty>No SQL.</p>'}</section>"
        f"<section><h2>Schema</h2>{schema(doc)}</section>"
        f"<section><h2>Properties</h2>{pairs(doc.get('properties') or {})}</section>"
        f"<section><h2>Versions</h2><p>{len(versions)} version(s); "
        f"current {esc(doc.get('current-version-id'))}.</p></section>"
    )


def dropped(found: Sequence[tuple[Any, bool]], csrf: str, warehouse: str | None) -> str:
    rows = []
    for d, may_undrop in found:
        action = form(url(f"/dropped/{d.id}/undrop", warehouse), csrf, "Undrop", None, "undrop") if may_undrop else ""
        rows.append(
            [
                esc(d.id),
                esc(d.kind),
                esc(".".join(d.namespace)),
                esc(d.name),
                esc(when(d.dropped_ms)),
                esc(d.dropped_by),
                esc(when(d.expires_ms)),
                "purging" if d.purging_ms is not None else action,
            ]
        )
    return table(
        ["Id", "Kind", "Namespace", "Name", "Dropped", "By", "Kept until", ""],
        rows,
        "dropped",
        "Nothing dropped that you may see.",
    )


def events(found: Sequence[Any], ident: str, warehouse: str | None) -> str:
    hidden = f'<input type="hidden" name="warehouse" value="{attr(warehouse)}">' if warehouse else ""
    filt = (
        f'<form method="get" action="{attr(url("/events"))}" class="search">{hidden}'
        '<label for="object">Only events of (namespace.table)</label> '
        f'<input id="object" name="object" value="{attr(ident)}" maxlength="500"> '
        '<button type="submit">Filter</button></form>'
    )
    rows = []
    for e in found:
        obj = ".".join((*e.namespace, e.name) if e.name is not None else e.namespace)
        rows.append([esc(e.position), esc(when(e.created_ms)), esc(e.type), esc(e.object_kind), esc(obj)])
    return filt + table(["#", "When", "Operation", "Kind", "Object"], rows, "events", "No events you may see.")


def login(csrf: str, message: str | None, clients: bool = True, oidc: bool = False) -> str:
    said = f'<p class="error" role="alert">{esc(message)}</p>' if message else ""
    provider = '<p><a class="button" href="/ui/login/oidc">Sign in with your identity provider</a></p>' if oidc else ""
    if not clients:
        return said + provider
    return (
        f'{said}{provider}<form method="post" action="/ui/login" class="login">'
        f'<input type="hidden" name="csrf" value="{attr(csrf)}">'
        '<p><label for="client_id">Client id</label><br>'
        '<input id="client_id" name="client_id" autocomplete="username" required></p>'
        '<p><label for="client_secret">Client secret</label><br>'
        '<input id="client_secret" name="client_secret" type="password" autocomplete="current-password" required></p>'
        '<p><button type="submit">Sign in</button></p></form>'
        '<p class="note">Sign in with a built-in client of this catalog (CATALOG_OAUTH_CLIENTS).</p>'
    )


def problem(message: str) -> str:
    return f'<p class="error" role="alert">{esc(message)}</p><p>{link("/ui", "Back to the start")}</p>'
