"""``POST /v1/{prefix}/namespaces/{ns}/tables/{table}/sign``: S3 remote signing (``catalog.storage.signing``).

The order: parse and classify the request (400/403 before anything is read), the caller's
privilege for that access (403), the table (404), the confinement to its location (403), then
botocore's signature. Every 403 counts as ``denied``, every answer as ``signed``.
"""

from __future__ import annotations

from typing import Any

import orjson
from litestar import Request, Response, post
from litestar.params import FromPath, RawBody
from pydantic import BaseModel, ConfigDict, Field

from catalog import errors, metrics
from catalog.api import guard, wire
from catalog.api.context import AppState, Ctx
from catalog.api.entries import TABLE_PATH
from catalog.auth import policy
from catalog.auth.policy import Privilege
from catalog.storage import signing
from catalog.usecases import TABLE

NO_CACHE = {"Cache-Control": "no-cache"}


class RemoteSignRequest(BaseModel):
    """The contract's RemoteSignRequest; unknown fields are ignored like everywhere else."""

    model_config = ConfigDict(extra="ignore")

    region: str = Field(max_length=64)
    uri: str = Field(max_length=signing.MAX_URI_CHARS)
    method: str = Field(pattern="^(PUT|GET|HEAD|POST|DELETE|PATCH|OPTIONS)$")
    headers: dict[str, list[str]]
    properties: dict[str, str] | None = None
    body: str | None = Field(default=None, max_length=signing.MAX_BODY_BYTES)
    provider: str | None = None


@post(TABLE_PATH + "/sign", status_code=200)
async def sign_request(
    namespace: FromPath[str], table: FromPath[str], body: RawBody, request: Request, ctx: Ctx
) -> Response:
    ns, name = wire.decode_namespace(namespace), wire.decode_name(table)
    signer: signing.Signer | None = ctx.signer
    if signer is None:
        raise errors.NotImplementedOperation(
            "Not implemented: remote signing is switched off (CATALOG_S3_REMOTE_SIGNING) or the warehouse is not S3"
        )
    if len(body) > signing.MAX_BODY_BYTES + 64 * 1024:
        raise errors.BadRequest("Malformed request: larger than a sign request can be")
    req = wire.parse(RemoteSignRequest, body)
    if (req.provider or "s3").lower() != "s3":
        raise errors.BadRequest(f"Malformed request: provider {req.provider[:20]!r} is not signed here")
    sign_req = signing.SignRequest(req.method, req.uri, req.headers, req.body)
    try:
        planned = signing.plan(sign_req, signer.hosts, signer.settings.s3_remote_signing_bulk_delete)
        signing.confine(planned, await _location(ns, name, planned, request, ctx))
    except errors.Forbidden:
        metrics.SIGN_REQUESTS.labels("denied").inc()
        raise
    headers: dict[str, Any] = await wire.blocking(signer.sign, sign_req, planned)
    metrics.SIGN_REQUESTS.labels("signed").inc()
    return wire.raw_json_response(orjson.dumps({"uri": planned.uri, "headers": headers}), headers=NO_CACHE)


async def _location(ns: tuple[str, ...], name: str, planned: signing.Plan, request: Request, ctx: AppState) -> str:
    """The location a sign request must stay in: the table's, for a caller holding read (GET/HEAD)
    or write (the rest) on it. A table that does not exist yet is a staged create's: a caller that
    may create tables in the namespace gets its writes signed in the location the server would
    choose for it (``Catalog.staged_location``); a staged create at a location of the client's own
    choosing is not signed before it commits."""
    privilege = Privilege.READ if planned.access == signing.READ else Privilege.WRITE
    target = policy.entry("table", ns, name)
    if await guard.holds(request, privilege, target):
        try:
            file = ctx.catalog.load_inline(TABLE, ns, name) or await wire.blocking(ctx.catalog.load, TABLE, ns, name)
            return file.data["location"]
        except errors.NoSuchTable:
            if not await guard.holds(request, Privilege.CREATE, policy.namespace(ns)):
                raise
    elif not await guard.holds(request, Privilege.CREATE, policy.namespace(ns)):
        await guard.require(request, [(privilege, target)])  # the 403, audited like every refusal
    location = await wire.blocking(ctx.catalog.staged_location, ns, name)
    if location is None:  # the table exists after all, or another entry holds its place
        await guard.require(request, [(privilege, target)])
        raise errors.NoSuchTable(f"Table does not exist: {'.'.join((*ns, name))}")
    return location


ROUTES = [sign_request]
