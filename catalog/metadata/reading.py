"""Reading request and metadata JSON field by field, the way Iceberg's Java ``JsonUtil`` does.

A missing or ill-typed field is a malformed request (``BadRequest``); a number that does not fit the
Java type it is read into (``int`` for ids, ``long`` otherwise) is refused as Java refuses it
(``ValidationFailed``). orjson turns integers beyond 64 bits into floats: an integral float is such a
number, not a decimal. Messages show at most a short excerpt of the offending value.
"""

from __future__ import annotations

from typing import Any

import orjson

from catalog import errors

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
_MISSING = object()


def show(value: Any, limit: int = 80) -> str:
    """A short JSON excerpt of ``value`` for an error message."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def obj(value: Any, what: str) -> dict:
    if not isinstance(value, dict):
        raise errors.BadRequest(f"Cannot parse {what} from non-object: {show(value)}")
    return value


def _number(node: dict, key: str, kind: str, low: int, high: int, default: Any) -> Any:
    value = node.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        raise errors.BadRequest(f"Cannot parse missing {kind}: {key}")
    article, kind = ("an", "integer") if kind == "int" else ("a", kind)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise errors.BadRequest(f"Cannot parse to {article} {kind} value: {key}: {show(value)}")
    if isinstance(value, float):
        if not value.is_integer():
            raise errors.BadRequest(f"Cannot parse to {article} {kind} value: {key}: {show(value)}")
        raise errors.ValidationFailed(f"Cannot parse to {article} {kind} value: {key}: {show(value)}")
    if not low <= value <= high:
        raise errors.ValidationFailed(f"Cannot parse to {article} {kind} value: {key}: {value}")
    return value


def int_(node: dict, key: str, default: Any = _MISSING) -> int:
    return _number(node, key, "int", INT_MIN, INT_MAX, default)


def long_(node: dict, key: str, default: Any = _MISSING) -> int:
    return _number(node, key, "long", LONG_MIN, LONG_MAX, default)


def int_or_none(node: dict, key: str) -> int | None:
    return int_(node, key, None)


def long_or_none(node: dict, key: str) -> int | None:
    return long_(node, key, None)


def check_int(value: Any, what: str) -> int:
    return _number({what: value}, what, "int", INT_MIN, INT_MAX, _MISSING)


def check_long(value: Any, what: str) -> int:
    return _number({what: value}, what, "long", LONG_MIN, LONG_MAX, _MISSING)


def str_(node: dict, key: str, default: Any = _MISSING) -> str:
    value = node.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        raise errors.BadRequest(f"Cannot parse missing string: {key}")
    if not isinstance(value, str):
        raise errors.BadRequest(f"Cannot parse to a string value: {key}: {show(value)}")
    return value


def str_or_none(node: dict, key: str) -> str | None:
    return str_(node, key, None)


def bool_(node: dict, key: str) -> bool:
    value = node.get(key, _MISSING)
    if value is _MISSING or value is None:
        raise errors.BadRequest(f"Cannot parse missing boolean: {key}")
    if not isinstance(value, bool):
        raise errors.BadRequest(f"Cannot parse to a boolean value: {key}: {show(value)}")
    return value


def str_map(node: dict, key: str, default: Any = _MISSING) -> dict[str, str]:
    value = node.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        raise errors.BadRequest(f"Cannot parse missing map: {key}")
    if not isinstance(value, dict):
        raise errors.BadRequest(f"Cannot parse string map from non-object value: {key}: {show(value)}")
    for name, item in value.items():
        if not isinstance(item, str):
            raise errors.BadRequest(f"Cannot parse to a string value: {name}: {show(item)}")
    return value


def array(node: dict, key: str, default: Any = _MISSING) -> list:
    value = node.get(key, _MISSING)
    if value is _MISSING or value is None:
        if default is not _MISSING:
            return default
        raise errors.BadRequest(f"Cannot parse missing list: {key}")
    if not isinstance(value, list):
        raise errors.BadRequest(f"Cannot parse JSON array from non-array value: {key}: {show(value)}")
    return value


def str_list(node: dict, key: str, default: Any = _MISSING) -> list[str]:
    items = array(node, key, default)
    for item in items or ():
        if not isinstance(item, str):
            raise errors.BadRequest(f"Cannot parse string from non-text value in {key}: {show(item)}")
    return items


def int_list(node: dict, key: str, default: Any = _MISSING) -> list[int]:
    items = array(node, key, default)
    return items if items is None else [check_int(item, key) for item in items]


def long_list(node: dict, key: str, default: Any = _MISSING) -> list[int]:
    items = array(node, key, default)
    return items if items is None else [check_long(item, key) for item in items]
