"""``POST /v1/{prefix}/events``: the feed of change events (the shape of the upstream proposal,
apache/iceberg#12584; docs/events.md), served only with ``CATALOG_EVENTS_ENABLED``.

Request: ``{"continuation-token", "page-size", "operation-types": [...], "catalog-objects-by-name":
[[level, ..., name?], ...], "object-types": ["namespace" | "table" | "view"]}``, every field optional.
An object filter matches the namespace or entry of that name and everything under it. Answer:
``{"events": [...], "next-page-token", "highest-processed-timestamp-ms"}``; ``next-page-token`` is
always given: a client that is caught up asks again with it later (``events tail --follow``).

The token is the feed's position (and the highest timestamp shown so far), sealed
(``paging.PageTokens``) and bound to the warehouse, the caller and the filter: altered, forged,
another warehouse's, another caller's or another filter's is a 400, and so is one whose next events
were pruned (retention) meanwhile. A caller sees only events of objects it may see (grants): a
rename whose destination it may not read comes without its ``destination``, and
``highest-processed-timestamp-ms`` is the newest timestamp among the events it was shown (carried
in the token; 0 before any), so the events it may not see tell it nothing, not even when they happened.
One request reads at most ``MAX_SCANNED`` rows: a page may be short (even empty) with a token that
moved on, when the filters or grants leave little.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from litestar import Request, Response, post
from litestar.params import RawBody

from catalog import errors, names
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth import policy
from catalog.auth.policy import Target
from catalog.events.records import RENAME, TYPES, StoredEvent

DEFAULT_PAGE = 100
MAX_PAGE = 1000
BATCH = 500
MAX_SCANNED = 10_000
MAX_FILTERS = 100
OBJECT_TYPES = ("namespace", "table", "view")
_FIELDS = {"continuation-token", "page-size", "operation-types", "catalog-objects-by-name", "object-types"}


@post("/v1/events", status_code=200)
async def query_events(body: RawBody, request: Request, ctx: Ctx) -> Response:
    query = _parse(body)
    # bound to its warehouse (the default's: ""), its filter and its caller
    context = "\0".join(("events", ctx.access.warehouse or "", query["fingerprint"], guard.grantee(request)))
    feed = ctx.catalog
    low = await wire.blocking(feed.event_start)
    cursor, highest = low, 0
    token = query["token"]
    if token:
        cursor, highest = _open(ctx, token, context)
        if cursor < low:
            raise errors.BadRequest(
                "Invalid continuation-token: the events after it were pruned (retention); read the feed from the start"
            )
    page: list[StoredEvent] = []
    scanned, size = 0, query["size"]
    while len(page) < size and scanned < MAX_SCANNED:
        found = await wire.blocking(feed.events_after, cursor, BATCH, query["types"])
        scanned += BATCH
        wanted = [e for e in found if _matches(e, query)]
        seen = await _shown(request, wanted)
        for event, ok in zip(wanted, seen, strict=True):
            if ok and len(page) < size:
                page.append(event)
        if len(page) >= size:
            cursor = page[-1].position
            break
        if found:
            cursor = found[-1].position
        if len(found) < BATCH:
            break
    # only what the caller was shown moves it: the events it may not see tell it nothing, not even when
    highest = max([highest, *(e.created_ms for e in page)])
    destinations = await _destinations_shown(request, page)
    answer: dict[str, Any] = {
        "events": [_shaped(e, destinations) for e in page],
        "next-page-token": ctx.pages.seal(f"{cursor:019d}.{highest:019d}", context),
        "highest-processed-timestamp-ms": highest,
    }
    return wire.json_response(answer)


def _open(ctx: Ctx, token: str, context: str) -> tuple[int, int]:
    """The position a token resumes after and the highest timestamp its caller was shown so far.
    Both are fixed-width in the sealed token, so its length tells nothing either."""
    try:
        cursor = ctx.pages.open(token, context)
    except errors.BadRequest:
        cursor = ""
    position, dot, highest = cursor.partition(".")
    if not (dot and len(position) == len(highest) == 19 and position.isdigit() and highest.isdigit()):
        raise errors.BadRequest(
            "Invalid continuation-token: not a token this catalog issued for this warehouse, filter and caller "
            "(altered, forged, or from before a restart without CATALOG_TOKEN_SECRET); read the feed from the start"
        )
    return int(position), int(highest)


def _parse(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body) if body else {}
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Malformed request: the body is not JSON") from None
    if not isinstance(doc, dict):
        raise errors.BadRequest("Malformed request: the body must be a JSON object")
    unknown = sorted(set(doc) - _FIELDS)
    if unknown:
        raise errors.BadRequest(f"Malformed request: unknown field {names.shown(unknown[0])}")
    token = doc.get("continuation-token")
    if token is not None and not isinstance(token, str):
        raise errors.BadRequest("Malformed request: continuation-token must be a string")
    size = doc.get("page-size", DEFAULT_PAGE)
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise errors.BadRequest("Invalid page-size: a whole number of at least 1")
    types = _strings(doc.get("operation-types"), "operation-types")
    for t in types:
        if t not in TYPES:
            raise errors.BadRequest(f"Invalid operation-types: unknown operation type {names.shown(t)}")
    kinds = _strings(doc.get("object-types"), "object-types")
    for k in kinds:
        if k not in OBJECT_TYPES:
            raise errors.BadRequest(f"Invalid object-types: {names.shown(k)} is not one of {', '.join(OBJECT_TYPES)}")
    objects = doc.get("catalog-objects-by-name") or []
    if not isinstance(objects, list) or len(objects) > MAX_FILTERS:
        raise errors.BadRequest(f"Invalid catalog-objects-by-name: a list of at most {MAX_FILTERS} names")
    paths = []
    for path in objects:
        if not isinstance(path, list) or not path or not all(isinstance(p, str) and p for p in path):
            raise errors.BadRequest("Invalid catalog-objects-by-name: each name is a list of non-empty strings")
        names.check_namespace_fits(path, "catalog-objects-by-name")
        paths.append(tuple(path))
    normal = {"types": sorted(set(types)), "kinds": sorted(set(kinds)), "paths": sorted(set(paths))}
    return {
        **normal,
        "token": token,
        "size": min(size, MAX_PAGE),
        "fingerprint": hashlib.sha256(orjson.dumps(normal)).hexdigest(),
    }


def _strings(value: Any, what: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_FILTERS or not all(isinstance(v, str) for v in value):
        raise errors.BadRequest(f"Invalid {what}: a list of at most {MAX_FILTERS} strings")
    return value


def _matches(event: StoredEvent, query: dict[str, Any]) -> bool:
    if query["kinds"] and event.object_kind not in query["kinds"]:
        return False
    if not query["paths"]:
        return True
    full = event.namespace if event.name is None else (*event.namespace, event.name)
    return any(full[: len(p)] == p for p in query["paths"])


async def _shown(request: Request, found: list[StoredEvent]) -> list[bool]:
    """Whether the caller may see each event: a namespace's if it may see the namespace (as
    loadNamespace), a table's or view's if it may read it (as loadTable: its snapshots, its files)."""
    spaces = [i for i, e in enumerate(found) if e.object_kind == "namespace"]
    entries = [i for i, e in enumerate(found) if e.object_kind != "namespace"]
    shown = [False] * len(found)
    for indexes, check in ((spaces, guard.visible), (entries, guard.readable)):
        if indexes:
            for i, ok in zip(indexes, await check(request, [_target(found[i]) for i in indexes]), strict=True):
                shown[i] = ok
    return shown


def _target(event: StoredEvent) -> Target:
    if event.object_kind == "namespace":
        return policy.namespace(event.namespace)
    return policy.entry(event.object_kind, event.namespace, event.name or "")


def _destination(event: StoredEvent) -> Target | None:
    """A rename's destination (its payload's ``destination``), None for any other event."""
    dest = event.payload.get("destination") if event.type in RENAME.values() else None
    if not isinstance(dest, dict) or not isinstance(dest.get("name"), str):
        return None
    return policy.entry(event.object_kind, tuple(dest.get("namespace") or ()), dest["name"])


async def _destinations_shown(request: Request, page: list[StoredEvent]) -> set[int]:
    """The positions of the renames on ``page`` whose destination the caller may read: the others
    are served without it (the caller may read the old name, not the new one)."""
    renames = [(e.position, t) for e in page if (t := _destination(e)) is not None]
    if not renames:
        return set()
    shown = await guard.readable(request, [t for _, t in renames])
    return {position for (position, _), ok in zip(renames, shown, strict=True) if ok}


def _shaped(event: StoredEvent, destinations: set[int]) -> dict[str, Any]:
    shaped = event.to_json()
    if event.type in RENAME.values() and event.position not in destinations:
        shaped["operation"].pop("destination", None)
    return shaped


ROUTES = [query_events]
