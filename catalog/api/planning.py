"""Server-side scan planning routes (``catalog.planning`` does the planning):

- ``POST .../plan`` (planTableScan): always ``completed``, with the tasks inline when the matching
  data manifests fit one plan task (``CATALOG_PLANNING_MANIFESTS_PER_TASK``), else with
  ``plan-tasks``: sealed tokens (``planning.task_tokens``) each naming a group of manifests.
- ``POST .../tasks`` (fetchScanTasks): one token's ``file-scan-tasks`` with the ``delete-files``
  they reference (never delete files without tasks).
- ``GET``/``DELETE .../plan/{plan-id}``: no plan is ever ``submitted`` (nothing is stored), so
  every plan id is unknown: 404 ``NoSuchPlanIdException``.

Each is authorised exactly as loadTable: READ on the table, checked on every call.
"""

from __future__ import annotations

import orjson
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath, RawBody

from catalog import errors, metrics
from catalog.api import guard, wire
from catalog.api.context import Ctx
from catalog.auth import policy
from catalog.auth.policy import Privilege
from catalog.planning import request as scan_request
from catalog.planning import task_tokens
from catalog.planning.request import ScanRequest
from catalog.usecases import TABLE

T = "/v1/namespaces/{namespace:str}/tables/{table:str}"


async def _table(namespace: str, table: str, request: Request) -> tuple[tuple[str, ...], str]:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    await guard.require(request, [(Privilege.READ, policy.entry("table", ns, name))])
    return ns, name


def _context(request: Request, ctx: Ctx) -> str:
    return task_tokens.context(ctx.prefix, guard.grantee(request))


@post(T + "/plan", status_code=200, opt=wire.IDEMPOTENT_READ)
async def plan_table_scan(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    ns, name = await _table(namespace, table, request)
    req = scan_request.parse(body)
    uuid, prepared, answer = await wire.blocking(ctx.catalog.scan_plan, ns, name, req)
    if answer.tasks is not None:
        metrics.PLANNING_PLANS.labels("inline").inc()
        return wire.json_response({"status": "completed", **answer.tasks})
    metrics.PLANNING_PLANS.labels("tasks").inc()
    context = _context(request, ctx)
    canonical = orjson.loads(prepared.key)
    sealed = [
        ctx.plan_tokens.seal(
            task_tokens.PlanTask(uuid, prepared.scope.key(), prepared.manifest_list, group, canonical), context
        )
        for group in answer.groups
    ]
    return wire.json_response({"status": "completed", "plan-tasks": sealed})


@post(T + "/tasks", status_code=200, opt=wire.IDEMPOTENT_READ)
async def fetch_scan_tasks(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    ns, name = await _table(namespace, table, request)
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise errors.BadRequest("Invalid FetchScanTasksRequest: malformed JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plan-task"), str):
        raise errors.BadRequest("Invalid FetchScanTasksRequest: 'plan-task' must be a string")
    task = ctx.plan_tokens.open(doc["plan-task"], _context(request, ctx))
    metrics.PLANNING_TASKS_FETCHED.inc()
    try:
        filter_json, case_sensitive, use_snapshot_schema, stats = scan_request.from_token(task.request)
        snapshot_id, start, end = task.scope
        ordinals = [int(i) for i in task.ordinals]
    except (TypeError, ValueError):
        raise errors.BadRequest("Invalid plan-task: not a token this catalog issued") from None
    req = ScanRequest(
        snapshot_id=snapshot_id,
        start_snapshot_id=start,
        end_snapshot_id=end,
        filter_json=filter_json,
        select=None,
        stats_fields=stats,
        case_sensitive=case_sensitive,
        use_snapshot_schema=use_snapshot_schema,
        min_rows_requested=None,
    )
    found = await wire.blocking(ctx.catalog.scan_tasks, ns, name, task.table_uuid, task.manifest_list, req, ordinals)
    return wire.json_response(found)


@get(T + "/plan/{plan_id:str}")
async def fetch_planning_result(
    namespace: FromPath[str], table: FromPath[str], plan_id: FromPath[str], request: Request, ctx: Ctx
) -> None:
    await _unknown_plan(namespace, table, plan_id, request, ctx)


@delete(T + "/plan/{plan_id:str}", status_code=204, opt=wire.IDEMPOTENT)
async def cancel_planning(
    namespace: FromPath[str], table: FromPath[str], plan_id: FromPath[str], request: Request, ctx: Ctx
) -> None:
    await _unknown_plan(namespace, table, plan_id, request, ctx)


async def _unknown_plan(namespace: str, table: str, plan_id: str, request: Request, ctx: Ctx) -> None:
    ns, name = await _table(namespace, table, request)
    await wire.blocking(ctx.catalog.entry, TABLE, ns, name)  # 404 for a table that is none
    shown = plan_id if len(plan_id) <= 64 else plan_id[:64] + "..."
    raise errors.NoSuchPlanId(f"No plan with id {shown!r}: this catalog answers every plan at once")


ROUTES = [plan_table_scan, fetch_scan_tasks, fetch_planning_result, cancel_planning]
