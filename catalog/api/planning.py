"""Server-side scan planning routes (``catalog.planning`` does the planning):

- ``POST .../plan`` (planTableScan): always ``completed``, with a ``plan-id`` (sealed to the caller
  and the table: ``planning.task_tokens``) and the tasks inline when the matching data manifests fit
  one plan task (``CATALOG_PLANNING_MANIFESTS_PER_TASK``), else with ``plan-tasks``: sealed tokens each
  naming a group of manifests. With vending on and the client asking for vended credentials
  (``X-Iceberg-Access-Delegation``), ``storage-credentials``: read-only, scoped to the table's
  location; ``GET .../credentials?planId=`` gives the same for a plan id of this caller and table.
- ``POST .../tasks`` (fetchScanTasks): one token's ``file-scan-tasks`` with the ``delete-files``
  they reference (never delete files without tasks).
- ``GET .../plan/{plan-id}``: no plan is ever ``submitted`` and nothing of a completed one is kept,
  so there is no result to fetch: 404 ``NoSuchPlanIdException``.
- ``DELETE .../plan/{plan-id}``: cancelling a plan this caller made on this table is 204 (nothing was
  held); any other id is 404 ``NoSuchPlanIdException``.

Each is authorised exactly as loadTable: READ on the table, checked on every call.
"""

from __future__ import annotations

from typing import Any

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
from catalog.storage import vending
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
    context = _context(request, ctx)
    head = {"status": "completed", "plan-id": ctx.plan_tokens.plan_id(uuid, context)}
    header = request.headers.get("x-iceberg-access-delegation")
    if ctx.vendor is not None and vending.wants_vended(header):
        location = prepared.metadata.location
        found = await wire.blocking(vending.delegate, ctx.vendor, header, vending.READ, location, None)
        if found is not None:
            head["storage-credentials"] = found.credentials
    if answer.tasks is not None:
        metrics.PLANNING_PLANS.labels("inline").inc()
        return wire.json_response({**head, **answer.tasks})
    metrics.PLANNING_PLANS.labels("tasks").inc()
    canonical = orjson.loads(prepared.key)
    sealed = [
        ctx.plan_tokens.seal(
            task_tokens.PlanTask(uuid, prepared.scope.key(), prepared.manifest_list, group, canonical), context
        )
        for group in answer.groups
    ]
    return wire.json_response({**head, "plan-tasks": sealed})


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
    ns, name = await _table(namespace, table, request)
    await wire.blocking(ctx.catalog.entry, TABLE, ns, name)  # 404 for a table that is none
    raise errors.NoSuchPlanId(
        f"No plan result for id {_shown(plan_id)}: this catalog answers every plan when it is asked "
        "(status completed) and keeps nothing to fetch later"
    )


@delete(T + "/plan/{plan_id:str}", status_code=204, opt=wire.IDEMPOTENT)
async def cancel_planning(
    namespace: FromPath[str], table: FromPath[str], plan_id: FromPath[str], request: Request, ctx: Ctx
) -> None:
    """A plan of this caller on this table is cancelled at once: nothing was held for it."""
    ns, name = await _table(namespace, table, request)
    file = ctx.catalog.load_inline(TABLE, ns, name) or await wire.blocking(ctx.catalog.load, TABLE, ns, name)
    plan_of(plan_id, file.data.get("table-uuid"), request, ctx)


def plan_of(plan_id: str, table_uuid: Any, request: Request, ctx: Ctx) -> None:
    """``loadCredentials``' ``planId``: a plan this caller made on this table, else 404."""
    if table_uuid is None or not ctx.plan_tokens.is_plan(plan_id, table_uuid, _context(request, ctx)):
        raise errors.NoSuchPlanId(f"No plan with id {_shown(plan_id)} by this caller on this table")


def _shown(plan_id: str) -> str:
    return repr(plan_id if len(plan_id) <= 64 else plan_id[:64] + "...")


ROUTES = [plan_table_scan, fetch_scan_tasks, fetch_planning_result, cancel_planning]
