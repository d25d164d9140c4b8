"""Plan-task tokens: what ``fetchScanTasks`` redeems, sealed (``sealing.Sealer``) so that only this
catalog can read or make one. The payload names the table (uuid), the plan's scope (snapshot, or
start and end), the manifest list it was planned on, the manifests (ordinals into the scope's
candidates) and the request (filter, case sensitivity, schema choice, stats fields). The sealing
context binds it to the warehouse and the caller: altered, or replayed by another caller, it does
not open: a 400, as for any malformed token (the server cannot tell those apart, and says why it may
be). A token that opens on another table (or a table dropped and recreated under the name: another
uuid), or whose snapshot is gone from the table, is a 404 ``NoSuchPlanTaskException``.
Nothing is stored: any server process holding the same ``CATALOG_TOKEN_SECRET`` redeems it.

Plan ids are sealed the same way, under a label of their own: a completed plan's ``plan-id`` (the
spec requires one) names the table's uuid, sealed to the warehouse and the caller, so that
``/credentials?planId=`` and a cancel can tell a plan this caller made on this table from any other
string. They hold nothing else: the plan was answered whole."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from catalog import errors, sealing

LABEL = b"iceberg-catalog plan tasks v1"
PLAN_ID_LABEL = b"iceberg-catalog plan ids v1"
MAX_PLAN_ID_CHARS = 512
MAX_TOKEN_CHARS = 65536
MAX_PAYLOAD = 4 * 2**20


@dataclass(frozen=True)
class PlanTask:
    table_uuid: str
    scope: list[int | None]
    manifest_list: str | None
    ordinals: list[int]
    request: Any  # ScanRequest.canonical() parsed


class PlanTokens:
    def __init__(self, secret: str | None, shared: str | None) -> None:
        self._sealer = sealing.Sealer(secret, shared, LABEL, MAX_TOKEN_CHARS)
        self._plan_ids = sealing.Sealer(secret, shared, PLAN_ID_LABEL, MAX_PLAN_ID_CHARS)

    def plan_id(self, table_uuid: str, context: str) -> str:
        """A new plan's id: the table's uuid, sealed to ``context`` (each id differs: a fresh nonce)."""
        return self._plan_ids.seal(orjson.dumps([1, table_uuid]), context)

    def is_plan(self, plan_id: Any, table_uuid: str, context: str) -> bool:
        """Whether ``plan_id`` is one this catalog gave ``context``'s caller for the table ``table_uuid``."""
        opened = self._plan_ids.open(plan_id, context)
        if opened is None:
            return False
        try:
            version, uuid = orjson.loads(opened)
        except (orjson.JSONDecodeError, ValueError, TypeError):
            return False
        return version == 1 and uuid == table_uuid

    def seal(self, task: PlanTask, context: str) -> str:
        payload = orjson.dumps([1, task.table_uuid, task.scope, task.manifest_list, task.ordinals, task.request])
        return self._sealer.seal(zlib.compress(payload), context)

    def open(self, token: Any, context: str) -> PlanTask:
        sealed = self._sealer.open(token, context)
        if sealed is None:
            raise errors.BadRequest(
                "Invalid plan-task: not a token this catalog issued to this caller for this table "
                "(altered, replayed, or from a server with another CATALOG_TOKEN_SECRET)"
            )
        try:
            inflater = zlib.decompressobj()
            version, uuid, scope, manifest_list, ordinals, req = orjson.loads(inflater.decompress(sealed, MAX_PAYLOAD))
        except (zlib.error, orjson.JSONDecodeError, ValueError, TypeError):
            raise errors.BadRequest("Invalid plan-task: not a token this catalog issued") from None
        if version != 1:
            raise errors.BadRequest("Invalid plan-task: a token of another version")
        return PlanTask(uuid, scope, manifest_list, ordinals, req)


def context(warehouse: str, caller: str) -> str:
    """What a token is sealed to: the warehouse and the caller (the table is checked by its uuid,
    which the sealed payload carries)."""
    return "\0".join(("plan-task", warehouse, caller))
