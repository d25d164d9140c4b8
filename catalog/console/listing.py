"""What the caller may see, read through the ``Catalog`` service and filtered by the REST API's own
guard (``api.guard``): the warehouses it holds a grant in, a search over names, the newest events.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from catalog.api import guard, wire
from catalog.auth import policy
from catalog.usecases import TABLE, VIEW

LIST_LIMIT = 1000  # names a list shows at most (the REST API pages beyond)
SEARCH_NAMESPACES = 2000  # namespaces a search walks at most
SEARCH_RESULTS = 200
EVENTS_SHOWN = 100
EVENTS_BATCH = 500
EVENTS_SCANNED = 10_000


async def warehouses(request: Request) -> list[tuple[str, str | None]]:
    """(shown name, ``?warehouse=`` value) of the warehouses the caller holds a grant in."""
    registry = request.app.state.ctx.registry()
    candidates = [(registry.default_name, None, registry.default), *((n, n, s) for n, s in registry.opened().items())]
    # the default by its name too, so that its link opens it rather than this list again
    return [(shown, w or shown) for shown, w, state in candidates if await guard.holds_any(request, state.access)]


async def visible(request: Request, items: list[Any], target_of: Any) -> list[Any]:
    seen = await guard.visible(request, [target_of(x) for x in items])
    return [x for x, ok in zip(items, seen, strict=True) if ok]


async def search(request: Request, catalog: Any, q: str) -> tuple[list[tuple[str, tuple[str, ...], str]], bool]:
    """Tables and views whose name holds ``q`` (any case), in the namespaces the caller may see."""
    needle = q.lower()
    found: list[tuple[str, tuple[str, ...], str]] = []
    queue: list[tuple[str, ...]] = [()]
    walked = 0
    while queue and walked < SEARCH_NAMESPACES and len(found) < SEARCH_RESULTS:
        ns = queue.pop(0)
        walked += 1
        children = await wire.blocking(catalog.list_namespaces, ns, None, LIST_LIMIT)
        queue += await visible(request, children, policy.namespace)
        if not ns:
            continue
        for kind in (TABLE, VIEW):
            names = [n for n in await wire.blocking(catalog.list_entries, kind, ns, None, None) if needle in n.lower()]
            names = await visible(request, names, lambda n, k=kind.name, s=ns: policy.entry(k, s, n))
            found += [(kind.name, ns, n) for n in names]
    return found[:SEARCH_RESULTS], bool(queue) or len(found) > SEARCH_RESULTS


async def recent_events(request: Request, catalog: Any, prefix: tuple[str, ...]) -> list[Any]:
    """The newest events the caller may see (a namespace's: it may see the namespace; a table's or
    view's: it may read it, as the feed decides), newest first, of ``prefix`` and what is under it."""
    low, high = await wire.blocking(catalog.event_bounds)
    shown: list[Any] = []
    end, scanned = high, 0
    while end > low and len(shown) < EVENTS_SHOWN and scanned < EVENTS_SCANNED:
        start = max(low, end - EVENTS_BATCH)
        batch = await wire.blocking(catalog.events_after, start, end - start)
        scanned += EVENTS_BATCH
        wanted = [e for e in reversed(batch) if _under(e, prefix)]
        spaces = [e for e in wanted if e.object_kind == "namespace"]
        entries = [e for e in wanted if e.object_kind != "namespace"]
        ok = set()
        for group, check in ((spaces, guard.visible), (entries, guard.readable)):
            targets = [_target(e) for e in group]
            ok |= {e.position for e, seen in zip(group, await check(request, targets), strict=True) if seen}
        shown += [e for e in wanted if e.position in ok]
        end = start
    return shown[:EVENTS_SHOWN]


def _under(event: Any, prefix: tuple[str, ...]) -> bool:
    full = event.namespace if event.name is None else (*event.namespace, event.name)
    return tuple(full[: len(prefix)]) == prefix


def _target(event: Any) -> policy.Target:
    if event.object_kind == "namespace":
        return policy.namespace(event.namespace)
    return policy.entry(event.object_kind, event.namespace, event.name or "")
