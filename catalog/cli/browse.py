"""Look inside a running catalog: ``namespaces``, ``tables`` and ``views`` talk to a RUNNING server
over the REST protocol (pyiceberg's ``RestCatalog``), like any client: nothing here reads the database
or the warehouse directly, so what is shown is what clients see, with the same authentication and
grants. Human output is a ``rich`` table; ``--json`` prints one JSON document for scripts.

Exit status: 0 done; 1 the catalog answered "no" or could not be reached (not found, server down);
2 the command cannot run as given (bad arguments, refused credentials).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from catalog.cli.common import CliError, connection_options, first_line
from catalog.names import dotted

REST_COMMANDS = ("namespaces", "tables", "views")
COMMANDS = REST_COMMANDS

# Snapshot summary entries worth a column in `tables history` (the rest is in --json).
_HIGHLIGHTS = (
    "added-records",
    "deleted-records",
    "total-records",
    "added-data-files",
    "deleted-data-files",
    "total-data-files",
    "added-files-size",
)


# ---------------------------------------------------------------------------------------------
# Registration (called by catalog/__main__.py)
# ---------------------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> tuple[argparse._SubParsersAction, argparse.ArgumentParser]:
    """Add ``namespaces``, ``tables`` and ``views`` to the top-level parser; returns the actions of
    ``tables`` and the connection options, for the commands of other modules under ``tables``."""
    client = connection_options()

    ns = sub.add_parser("namespaces", help="list and show namespaces of a running catalog")
    ns_sub = ns.add_subparsers(dest="action", required=True)
    p = ns_sub.add_parser("list", parents=[client], help="list namespaces (top level, or under --parent)")
    p.add_argument("--parent", help="list the namespaces under this one (a.b)")
    p = ns_sub.add_parser("show", parents=[client], help="a namespace's properties")
    p.add_argument("namespace", help="a.b")

    tables = sub.add_parser("tables", help="list tables, show a table's schema and snapshots, its history")
    t_sub = tables.add_subparsers(dest="action", required=True)
    p = t_sub.add_parser("list", parents=[client], help="the tables of a namespace")
    p.add_argument("namespace")
    p = t_sub.add_parser(
        "show", parents=[client], help="schema, partition spec, sort order, properties, current snapshot, refs"
    )
    p.add_argument("table", help="namespace.table")
    p = t_sub.add_parser("history", parents=[client], help="the table's snapshots, oldest first")
    p.add_argument("table", help="namespace.table")

    views = sub.add_parser("views", help="list views, show a view's schema and SQL")
    v_sub = views.add_subparsers(dest="action", required=True)
    p = v_sub.add_parser("list", parents=[client], help="the views of a namespace")
    p.add_argument("namespace")
    p = v_sub.add_parser("show", parents=[client], help="schema, SQL, versions and properties of a view")
    p.add_argument("view", help="namespace.view")
    return t_sub, client


def run(args: argparse.Namespace) -> int:
    try:
        return _rest(args)
    except CliError as e:
        print(f"iceberg-catalog {args.command}: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# ---------------------------------------------------------------------------------------------
# Talking to a running server
# ---------------------------------------------------------------------------------------------


def _connect(args: argparse.Namespace) -> Any:
    from pyiceberg.catalog.rest import RestCatalog

    props = {"uri": args.uri}
    if args.token:
        props["token"] = args.token
    if args.credential:
        props["credential"] = args.credential
        # The server's own token endpoint, said explicitly: pyiceberg's implicit default is deprecated (a warning).
        props["oauth2-server-uri"] = f"{args.uri.rstrip('/')}/v1/oauth/tokens"
    if args.rest_warehouse:
        props["warehouse"] = args.rest_warehouse
    with _errors(args.uri):
        return RestCatalog("cli", **props)


class _errors:
    """Turn what pyiceberg and requests raise into one CliError line."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, e: BaseException | None, _tb: Any) -> bool:
        if e is None or isinstance(e, CliError | KeyboardInterrupt | SystemExit):
            return False
        import requests
        from pyiceberg import exceptions as x

        name = type(e).__name__
        text = first_line(e)
        if isinstance(e, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            raise CliError(
                f"cannot reach the catalog at {self.uri} (is the server running? set --uri or CATALOG_URI)"
            ) from None
        if isinstance(e, x.UnauthorizedError | x.OAuthError | x.AuthorizationExpiredError):
            raise CliError(f"not authenticated at {self.uri}: {text} (pass --token or --credential)", 2) from None
        if isinstance(e, x.ForbiddenError):
            raise CliError(f"forbidden: {text} (the principal lacks a grant)", 2) from None
        if isinstance(e, x.NoSuchNamespaceError | x.NoSuchTableError | x.NoSuchViewError | x.NoSuchIdentifierError):
            raise CliError(text) from None
        if isinstance(e, x.BadRequestError | ValueError):
            raise CliError(f"refused: {text}", 2) from None
        if isinstance(e, x.RESTError | requests.exceptions.RequestException):
            raise CliError(f"the catalog at {self.uri} failed: {name}: {text}") from None
        return False  # a bug here: let the traceback show


def _split(name: str, what: str, min_parts: int = 1) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    if len(parts) < min_parts or not all(parts):
        raise CliError(f"{name!r} is not a {what} (expected {'namespace.name' if min_parts > 1 else 'a.b'})", 2)
    return parts


def _rest(args: argparse.Namespace) -> int:
    out = Output(args.json)
    handler = _HANDLERS[(args.command, args.action)]
    catalog = _connect(args)
    with _errors(args.uri):
        handler(catalog, args, out)
    return 0


def _namespaces_list(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    parent = _split(args.parent, "namespace") if args.parent else ()
    names = sorted(dotted(n) for n in catalog.list_namespaces(parent))
    out.rows("Namespaces", ["namespace"], [[n] for n in names], {"namespaces": names})


def _namespaces_show(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ns = _split(args.namespace, "namespace")
    props = catalog.load_namespace_properties(ns)
    children = sorted(dotted(n) for n in catalog.list_namespaces(ns))
    tables = sorted(t[-1] for t in catalog.list_tables(ns))
    doc = {"namespace": dotted(ns), "properties": props, "namespaces": children, "tables": tables}
    if out.json:
        return out.document(doc)
    out.title(f"Namespace {dotted(ns)}")
    out.properties(props)
    out.line(f"namespaces: {', '.join(children) or '-'}")
    out.line(f"tables: {', '.join(tables) or '-'}")


def _tables_list(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ns = _split(args.namespace, "namespace")
    names = sorted(dotted(t) for t in catalog.list_tables(ns))
    out.rows(f"Tables in {dotted(ns)}", ["table"], [[n] for n in names], {"tables": names})


def _schema_fields(schema: Any) -> list[dict[str, Any]]:
    """Every field, nested ones under dotted names (struct members; list elements and map values too)."""
    from pyiceberg.types import ListType, MapType, StructType

    rows: list[dict[str, Any]] = []

    def walk(fields: Any, prefix: str) -> None:
        for f in fields:
            name = f"{prefix}{f.name}"
            rows.append({"id": f.field_id, "name": name, "type": str(f.field_type), "required": f.required})
            if f.doc:
                rows[-1]["doc"] = f.doc
            t = f.field_type
            if isinstance(t, StructType):
                walk(t.fields, f"{name}.")
            elif isinstance(t, ListType):
                walk([t.element_field], f"{name}.")
            elif isinstance(t, MapType):
                walk([t.key_field, t.value_field], f"{name}.")

    walk(schema.fields, "")
    return rows


def _snapshot(s: Any) -> dict[str, Any]:
    summary = dict(s.summary.additional_properties) if s.summary else {}
    return {
        "snapshot-id": s.snapshot_id,
        "parent-snapshot-id": s.parent_snapshot_id,
        "sequence-number": s.sequence_number,
        "timestamp-ms": s.timestamp_ms,
        "time": _time(s.timestamp_ms),
        "operation": s.summary.operation.value if s.summary else None,
        "summary": summary,
        "manifest-list": s.manifest_list,
        "schema-id": s.schema_id,
    }


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _tables_show(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ident = _split(args.table, "table", 2)
    table = catalog.load_table(ident)
    meta = table.metadata
    schema = table.schema()
    by_id = {f["id"]: f["name"] for f in _schema_fields(schema)}
    spec = table.spec()
    partition = [
        {"source-id": f.source_id, "source": by_id.get(f.source_id), "transform": str(f.transform), "name": f.name}
        for f in spec.fields
    ]
    order = [
        {
            "source-id": f.source_id,
            "source": by_id.get(f.source_id),
            "transform": str(f.transform),
            "direction": f.direction.value,
            "null-order": f.null_order.value,
        }
        for f in table.sort_order().fields
    ]
    current = table.current_snapshot()
    refs = {
        name: {"snapshot-id": ref.snapshot_id, "type": ref.snapshot_ref_type.value} for name, ref in meta.refs.items()
    }
    doc = {
        "identifier": dotted(ident),
        "table-uuid": str(meta.table_uuid),
        "format-version": meta.format_version,
        "location": meta.location,
        "metadata-location": table.metadata_location,
        "schema": {"schema-id": schema.schema_id, "fields": _schema_fields(schema)},
        "partition-spec": {"spec-id": spec.spec_id, "fields": partition},
        "sort-order": {"order-id": table.sort_order().order_id, "fields": order},
        "properties": dict(meta.properties),
        "current-snapshot": _snapshot(current) if current else None,
        "refs": refs,
        "snapshot-count": len(meta.snapshots),
    }
    if out.json:
        return out.document(doc)
    out.title(f"Table {dotted(ident)}")
    out.line(f"location: {meta.location}")
    out.line(f"format version: {meta.format_version}   uuid: {meta.table_uuid}")
    out.line(f"metadata: {table.metadata_location}")
    fields = doc["schema"]["fields"]
    out.rows(
        f"Schema (id {schema.schema_id})",
        ["id", "name", "type", "required"],
        [[f["id"], f["name"], f["type"], "yes" if f["required"] else "no"] for f in fields],
    )
    if partition:
        out.rows(
            f"Partition spec (id {spec.spec_id})",
            ["source", "transform", "name"],
            [[p["source"], p["transform"], p["name"]] for p in partition],
        )
    else:
        out.line("partition spec: unpartitioned")
    if order:
        out.rows(
            "Sort order",
            ["source", "transform", "direction", "nulls"],
            [[o["source"], o["transform"], o["direction"], o["null-order"]] for o in order],
        )
    else:
        out.line("sort order: unsorted")
    if current:
        s = doc["current-snapshot"]
        out.line(
            f"current snapshot: {s['snapshot-id']} ({s['operation']}, {s['time']}, "
            f"{s['summary'].get('total-records', '?')} records)"
        )
    else:
        out.line("current snapshot: none (empty table)")
    if refs:
        out.rows("Refs", ["name", "type", "snapshot"], [[n, r["type"], r["snapshot-id"]] for n, r in refs.items()])
    out.properties(doc["properties"])


def _tables_history(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ident = _split(args.table, "table", 2)
    table = catalog.load_table(ident)
    meta = table.metadata
    snapshots = sorted((_snapshot(s) for s in meta.snapshots), key=lambda s: (s["timestamp-ms"], s["sequence-number"]))
    current = meta.current_snapshot_id
    for s in snapshots:
        s["current"] = s["snapshot-id"] == current
    rows = [
        [
            ("* " if s["current"] else "") + str(s["snapshot-id"]),
            s["parent-snapshot-id"] if s["parent-snapshot-id"] is not None else "-",
            s["time"],
            s["operation"],
            ", ".join(f"{k}={s['summary'][k]}" for k in _HIGHLIGHTS if k in s["summary"]),
        ]
        for s in snapshots
    ]
    out.rows(
        f"History of {dotted(ident)} (* = current)",
        ["snapshot", "parent", "time (UTC)", "operation", "summary"],
        rows,
        {"identifier": dotted(ident), "current-snapshot-id": current, "snapshots": snapshots},
    )


def _views_list(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ns = _split(args.namespace, "namespace")
    names = sorted(dotted(v) for v in catalog.list_views(ns))
    out.rows(f"Views in {dotted(ns)}", ["view"], [[n] for n in names], {"views": names})


def _views_show(catalog: Any, args: argparse.Namespace, out: Output) -> None:
    ident = _split(args.view, "view", 2)
    view = catalog.load_view(ident)
    meta = view.metadata
    version = view.current_version()
    sql = [{"dialect": r.root.dialect, "sql": r.root.sql} for r in version.representations]
    doc = {
        "identifier": dotted(ident),
        "view-uuid": str(meta.view_uuid),
        "location": meta.location,
        "current-version-id": meta.current_version_id,
        "schema": {"schema-id": view.schema().schema_id, "fields": _schema_fields(view.schema())},
        "representations": sql,
        "default-namespace": dotted(version.default_namespace),
        "versions": [
            {"version-id": v.version_id, "time": _time(v.timestamp_ms), "schema-id": v.schema_id, "summary": v.summary}
            for v in meta.versions
        ],
        "properties": dict(meta.properties),
    }
    if out.json:
        return out.document(doc)
    out.title(f"View {dotted(ident)}")
    out.line(f"location: {meta.location}")
    out.line(f"current version: {meta.current_version_id} of {len(meta.versions)}")
    out.rows(
        "Schema",
        ["id", "name", "type", "required"],
        [[f["id"], f["name"], f["type"], "yes" if f["required"] else "no"] for f in doc["schema"]["fields"]],
    )
    for r in sql:
        out.line(f"SQL ({r['dialect']}): {r['sql']}")
    out.properties(doc["properties"])


_HANDLERS: dict[tuple[str, str], Callable[[Any, argparse.Namespace, Output], None]] = {
    ("namespaces", "list"): _namespaces_list,
    ("namespaces", "show"): _namespaces_show,
    ("tables", "list"): _tables_list,
    ("tables", "show"): _tables_show,
    ("tables", "history"): _tables_history,
    ("views", "list"): _views_list,
    ("views", "show"): _views_show,
}


class Output:
    """rich tables for people, or one JSON document."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self._console: Any = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            # Not a terminal (a pipe, a file): wide enough that ids and paths are never wrapped.
            self._console = Console(width=None if sys.stdout.isatty() else 200, highlight=False, soft_wrap=False)
        return self._console

    def document(self, doc: Any) -> None:
        print(json.dumps(doc, indent=2, default=str))

    def title(self, text: str) -> None:
        self.console.print(f"[bold]{text}[/bold]")

    def line(self, text: str) -> None:
        self.console.print(text, markup=False)

    def rows(self, title: str, columns: list[str], rows: list[list[Any]], doc: Any = None) -> None:
        if self.json:
            return self.document(doc)
        from rich.table import Table

        table = Table(title=title, title_justify="left", min_width=len(title))
        for c in columns:
            table.add_column(c, overflow="fold")
        for row in rows:
            table.add_row(*("" if v is None else str(v) for v in row))
        self.console.print(table)
        if not rows:
            self.line("(none)")

    def properties(self, props: dict[str, str]) -> None:
        if props:
            self.rows("Properties", ["key", "value"], [[k, v] for k, v in sorted(props.items())])
        else:
            self.line("properties: none")
