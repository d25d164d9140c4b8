"""``/management/v1/maintenance``: the catalog's own table maintenance, seen and started over HTTP, in the
warehouse of ``?warehouse=`` (absent: the default; ``api.routing`` selects it, grants decide as in it).

- ``POST /management/v1/maintenance/tables/{namespace}/{table}`` with ``{"kinds": [...],
  "dry-run": bool, "writer-grace-seconds": n}`` (default: every kind, not a dry run, the server's
  grace) -> 202 ``{"tasks": [...]}``: the tasks, queued to run now (a kind already queued or
  running is returned as it is, ``"created": false``). Needs ``alter`` on the table, and ``admin``
  on it to set ``writer-grace-seconds`` (this run's writer grace for snapshot expiry and quiet
  period for compaction: 0 lets a policy just set on a table act now, at the cost of writers who
  loaded the table before the run retrying their commit). The body is checked first: at most one of each known kind (a
  repeated kind counts once), an unknown one is a 400 that does not repeat it.
- ``GET /management/v1/maintenance/tasks?namespace=a.b&table=t&state=queued&limit=100``: the
  newest tasks first, only those of tables the caller may read (as loadTable: a task's result names
  files and snapshots). With a table that is gone (dropped, purged), its former incarnations' tasks:
  its history ends with its purge.
- ``GET /management/v1/maintenance/tasks/{id}``: one task, to who may read its table; to anyone
  else the same 404 as an id that names no task.
"""

from __future__ import annotations

from typing import Any

import orjson
from litestar import Request, Response, get, post
from litestar.params import FromPath, RawBody

from catalog import errors
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth import policy
from catalog.auth.policy import Privilege
from catalog.database.tasks import Task
from catalog.maintenance.jobs import KINDS, WRITER_GRACE
from catalog.usecases import missing_task

BASE = "/management/v1/maintenance"
STATES = ("queued", "running", "done", "failed")
MAX_LIMIT = 1000
MAX_GRACE = 30 * 86400  # a week of grace is already more than any writer takes; a month bounds the input


@post(BASE + "/tables/{namespace:str}/{table:str}", status_code=202)
async def run_maintenance(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    doc = _json(body) if body else {}
    kinds, dry_run = _kinds(doc.get("kinds", list(KINDS))), doc.get("dry-run", False)
    if not isinstance(dry_run, bool):
        raise errors.BadRequest('Malformed request: {"kinds": [names], "dry-run": true|false}')
    grace = _grace(doc.get(WRITER_GRACE))
    target = policy.entry("table", ns, name)
    needs = [(Privilege.ALTER, target)] + ([(Privilege.ADMIN, target)] if grace is not None else [])
    await guard.require(request, needs)
    queued = await wire.blocking(ctx.catalog.maintain, ns, name, kinds, dry_run, grace)
    return wire.json_response({"tasks": [{**t.to_json(), "created": created} for t, created in queued]}, status=202)


@get(BASE + "/tasks")
async def list_tasks(request: Request, ctx: Ctx) -> Response:
    query = request.query_params
    ns_raw, name = query.get("namespace"), query.get("table")
    if (ns_raw is None) != (name is None):
        raise errors.BadRequest("Give both namespace and table, or neither")
    ns = tuple(ns_raw.split(".")) if ns_raw is not None else None
    states = [s for s in (query.get("state") or "").split(",") if s]
    if any(s not in STATES for s in states):
        raise errors.BadRequest(f"Unknown state: choose from {', '.join(STATES)}")
    limit_raw = query.get("limit") or "100"
    if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= MAX_LIMIT:
        raise errors.BadRequest(f"limit must be a number from 1 to {MAX_LIMIT}")
    if ns is not None and name is not None:
        await guard.require(request, [(Privilege.READ, policy.entry("table", ns, name))])
    tasks = await wire.blocking(ctx.catalog.maintenance_tasks, ns, name, states, int(limit_raw))
    seen = await guard.readable(request, [_target(t) for t in tasks])
    return wire.json_response({"tasks": [t.to_json() for t, ok in zip(tasks, seen, strict=True) if ok]})


@get(BASE + "/tasks/{task_id:str}")
async def get_task(task_id: FromPath[str], request: Request, ctx: Ctx) -> Response:
    if not task_id.isdigit() or len(task_id) > 18:
        raise errors.BadRequest("A task id is a number")
    task = await wire.blocking(ctx.catalog.maintenance_task, int(task_id))
    await guard.require_seen(request, _target(task), missing_task(task.id), Privilege.READ)
    return wire.json_response(task.to_json())


def _kinds(kinds: object) -> list[str]:
    """The kinds asked for, each once, in their order. Checked before anything else is done: at most
    as many as there are kinds (a repeat within that counts once), and an unknown kind is refused
    without being repeated back."""
    if not isinstance(kinds, list) or not 1 <= len(kinds) <= len(KINDS):
        raise errors.BadRequest(f"Malformed request: kinds is a list of 1 to {len(KINDS)} of {', '.join(KINDS)}")
    if not all(isinstance(k, str) and k in KINDS for k in kinds):
        raise errors.BadRequest(f"Unknown maintenance kind: choose from {', '.join(KINDS)}")
    return list(dict.fromkeys(kinds))


def _grace(value: object) -> float | None:
    """A run's writer grace in seconds (absent: the server's), a number from 0 to ``MAX_GRACE``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_GRACE:
        raise errors.BadRequest(f"Malformed request: {WRITER_GRACE} is a number of seconds from 0 to {MAX_GRACE}")
    return float(value)


def _target(task: Task) -> policy.Target:
    return policy.entry("table", task.namespace, task.name)


def _json(body: bytes) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Malformed request: the body is not JSON") from None
    if not isinstance(doc, dict):
        raise errors.BadRequest("Malformed request: the body is not a JSON object")
    return doc


ROUTES = [run_maintenance, list_tasks, get_task]
