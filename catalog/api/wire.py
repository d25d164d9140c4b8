"""What crosses the wire: JSON bodies in and out, the path codec, the error body (pagination: ``paging``).

Paths are routed on the RAW request path (see ``app.RawPathRouting``), so path parameters arrive
still percent-encoded and are decoded here: namespace levels are split on ``%1F`` (the advertised
separator) before decoding, so a level may itself contain ``.``, ``/`` or ``%``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, unquote_plus

import anyio.to_thread
import orjson
from litestar import Response
from pydantic import BaseModel, ValidationError

from catalog import errors, names

JSON = "application/json"
# Route option of the operations that honour an Idempotency-Key (see ``api.idempotency``).
IDEMPOTENT = {"idempotent": True}
# Of the reads the spec documents the header on (scan planning): a retry runs again, so the key is
# checked and nothing is recorded, and no answer (a plan can be megabytes) is stored under a client's key.
IDEMPOTENT_READ = {"idempotent": "read"}
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
_LEVEL_SPLIT = re.compile(r"%1[fF]|\x1f")


async def blocking(fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking service call (SQL, object storage) in the worker thread pool."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response[bytes]:
    return raw_json_response(orjson.dumps(body), status, headers)


def raw_json_response(content: bytes, status: int = 200, headers: dict[str, str] | None = None) -> Response[bytes]:
    return Response(content=content, status_code=status, media_type=JSON, headers=headers)


def load_result(
    location: str | None,
    raw_metadata: bytes,
    config: bytes | None = None,
    credentials: list[dict] | None = None,
    remote_signing: dict | None = None,
) -> bytes:
    """The body of every table and view result: ``{"metadata-location", "metadata"`` (the file's
    JSON as stored, spliced in without re-serialising it), then ``config`` (a JSON object),
    ``storage-credentials`` and ``remote-signing-config`` when given: a CommitTableResponse,
    LoadTableResult, LoadViewResult or UnregisterTableResult."""
    body = b'{"metadata-location":' + orjson.dumps(location) + b',"metadata":' + raw_metadata
    if config is not None:
        body += b',"config":' + config
    if credentials:
        body += b',"storage-credentials":' + orjson.dumps(credentials)
    if remote_signing is not None:
        body += b',"remote-signing-config":' + orjson.dumps(remote_signing)
    return body + b"}"


def no_content() -> Response[None]:
    return Response(content=None, status_code=204)


def parse(model: type[M], data: bytes) -> M:
    """Parse a request body; anything malformed is a 400 naming the first problem."""
    if not data:
        raise errors.BadRequest("Malformed request: empty body")
    try:
        return model.model_validate_json(data)
    except ValidationError as e:
        raise errors.BadRequest(f"Malformed request: {describe(e)}") from e
    except Exception as e:  # noqa: BLE001 - a validator may raise a plain error on an odd shape
        raise errors.BadRequest(f"Malformed request: {type(e).__name__}: {e}") from e


def describe(e: ValidationError) -> str:
    first = e.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return f"{where}: {first.get('msg', 'invalid')}"


def decode_namespace(raw: str) -> tuple[str, ...]:
    """A namespace path segment: levels joined by %1F (or a raw 0x1F), each level URL-encoded.
    400 for what no stored namespace can be (see ``catalog.names``), before any SQL."""
    levels = _namespaces.get(raw)
    if levels is not None:
        return levels
    levels = tuple(unquote_plus(level) for level in _LEVEL_SPLIT.split(raw))
    if not levels or any(level == "" for level in levels):
        raise errors.BadRequest(f"Invalid namespace: {names.shown(unquote_plus(raw))}")
    names.check_namespace_fits(levels)
    _remember(_namespaces, raw, levels)
    return levels


def decode_name(raw: str) -> str:
    name = _names.get(raw)
    if name is not None:
        return name
    name = unquote_plus(raw)
    names.check_name_fits(name)
    _remember(_names, raw, name)
    return name


# Every request to a table decodes and checks the same few path segments: the answers (only the
# valid ones) are kept, a bounded number of them.
_namespaces: dict[str, tuple[str, ...]] = {}
_names: dict[str, str] = {}
_DECODED = 4096


def _remember(cache: dict, raw: str, value: Any) -> None:
    if len(cache) >= _DECODED:
        cache.clear()
    cache[raw] = value


def decode_parent(value: str | None) -> tuple[str, ...]:
    """The ``parent`` query parameter: levels joined by 0x1F (Java) or by a still-encoded %1F (pyiceberg)."""
    if not value:
        return ()
    levels = tuple(unquote(level) for level in _LEVEL_SPLIT.split(value))
    names.check_namespace_fits(levels, "parent")
    return levels


# The views a load may come through (``referenced-by``): more than this is no view chain.
MAX_REFERENCED_BY = 32


def referenced_by(query_string: bytes) -> list[tuple[tuple[str, ...], str]]:
    """The ``referenced-by`` query parameter of loadTable, loadView and loadCredentials: the chain of
    views (outermost first) the entity is loaded through, each ``{namespace}{separator}{view}``, split
    at the last separator (0x1F, sent as ``%1F``; a still-encoded ``%1F`` as pyiceberg sends ``parent``),
    the views separated by commas, a comma inside a name sent as ``%2C``. Read from the raw query string,
    so that ``%2C`` is not taken for a separator. 400 for an identifier that is not one."""
    raw = None
    for pair in query_string.decode("latin-1").split("&"):
        key, _, value = pair.partition("=")
        if unquote_plus(key) == "referenced-by":
            raw = value
    if raw is None:
        return []
    items = raw.split(",")
    if len(items) > MAX_REFERENCED_BY:
        raise errors.BadRequest(f"Invalid referenced-by: more than {MAX_REFERENCED_BY} views")
    chain = []
    for item in items:
        levels = [unquote(level) for level in _LEVEL_SPLIT.split(unquote_plus(item))]
        if len(levels) < 2:
            shown = names.shown(unquote_plus(item))
            raise errors.BadRequest(f"Invalid referenced-by: {shown} is not a view identifier (namespace%1Fview)")
        ns, name = tuple(levels[:-1]), levels[-1]
        names.check_namespace_fits(ns, "referenced-by namespace")
        names.check_name_fits(name, "referenced-by view name")
        chain.append((ns, name))
    return chain


def identifier(ident: Any) -> tuple[tuple[str, ...], str]:
    """A table or view identifier from a body (rename, transactions): (namespace, name), with the
    same checks as one in the path."""
    ns = tuple(ident.namespace)
    names.check_namespace_fits(ns)
    names.check_name_fits(ident.name)
    return ns, ident.name


def is_true(value: str | None) -> bool:
    """Query booleans arrive as true/false (Java) or True/False (pyiceberg)."""
    return (value or "").strip().lower() == "true"
