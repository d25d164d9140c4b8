"""The spec's expression JSON (``Expression`` in the REST spec) to a pyiceberg expression.

pyiceberg parses most of it itself (``BooleanExpression``'s pydantic validator); what it lacks is
done here, before it: ``{"type": "reference", "term": name}`` terms become plain names, binary and
fixed literals given as hex become bytes (that needs the schema), and every node is checked, so a
malformed or unknown node is a 400 that names it, never a 500. Transform terms are refused (400):
a predicate on a transform cannot be evaluated by pyiceberg's evaluators, and dropping it inside a
``not`` would prune wrongly. The result is bound once to the schema to check names and literals.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, FixedType

from catalog import errors

UNARY = frozenset({"is-null", "not-null", "is-nan", "not-nan"})
LITERAL = frozenset({"lt", "lt-eq", "gt", "gt-eq", "eq", "not-eq", "starts-with", "not-starts-with"})
SET = frozenset({"in", "not-in"})
MAX_DEPTH = 64
MAX_NODES = 10_000
MAX_SET = 100_000


def parse(node: Any, schema: Schema, case_sensitive: bool = True) -> BooleanExpression:
    """The unbound expression of ``node`` (None: no filter), checked against ``schema``; 400 otherwise."""
    if node is None:
        return AlwaysTrue()
    counter = [0]
    plain = _normalise(node, schema, case_sensitive, 0, counter)
    try:
        expr = BooleanExpression.model_validate(plain)  # type: ignore[attr-defined]
        bind(schema, expr, case_sensitive)
    except errors.IcebergError:
        raise
    except Exception as e:  # noqa: BLE001 - pydantic, pyiceberg's ValueError/TypeError: the client's filter
        raise errors.BadRequest(f"Invalid filter: {_short(e)}") from None
    return expr


def _normalise(node: Any, schema: Schema, case_sensitive: bool, depth: int, counter: list[int]) -> Any:
    counter[0] += 1
    if depth > MAX_DEPTH or counter[0] > MAX_NODES:
        raise errors.BadRequest(f"Invalid filter: deeper than {MAX_DEPTH} or more than {MAX_NODES} nodes")
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict):
        raise errors.BadRequest(f"Invalid filter: expected an expression object or a boolean, got {_kind(node)}")
    kind = node.get("type")
    if not isinstance(kind, str):
        raise errors.BadRequest("Invalid filter: an expression without a string 'type'")
    if kind in ("true", "false"):
        return kind == "true"
    if kind in ("and", "or"):
        return {
            "type": kind,
            "left": _normalise(_need(node, "left", kind), schema, case_sensitive, depth + 1, counter),
            "right": _normalise(_need(node, "right", kind), schema, case_sensitive, depth + 1, counter),
        }
    if kind == "not":
        child = _normalise(_need(node, "child", kind), schema, case_sensitive, depth + 1, counter)
        return {"type": kind, "child": child}
    if kind in UNARY:
        return {"type": kind, "term": _term(_need(node, "term", kind))}
    if kind in LITERAL:
        name = _term(_need(node, "term", kind))
        return {"type": kind, "term": name, "value": _literal(_need(node, "value", kind), name, schema, case_sensitive)}
    if kind in SET:
        name = _term(_need(node, "term", kind))
        values = _need(node, "values", kind)
        if not isinstance(values, list) or len(values) > MAX_SET:
            raise errors.BadRequest(f"Invalid filter: '{kind}' needs a list of at most {MAX_SET} values")
        return {"type": kind, "term": name, "values": [_literal(v, name, schema, case_sensitive) for v in values]}
    raise errors.BadRequest(f"Invalid filter: unknown expression type {_shown(kind)}")


def _need(node: dict, key: str, kind: str) -> Any:
    if key not in node:
        raise errors.BadRequest(f"Invalid filter: '{kind}' without '{key}'")
    return node[key]


def _term(term: Any) -> str:
    if isinstance(term, str):
        return term
    if isinstance(term, dict) and term.get("type") == "reference" and isinstance(term.get("term"), str):
        return term["term"]
    if isinstance(term, dict) and term.get("type") == "transform":
        raise errors.BadRequest("Invalid filter: transform terms are not supported by this server's planning")
    raise errors.BadRequest(f"Invalid filter: a term must be a column name or a reference, got {_kind(term)}")


def _literal(value: Any, name: str, schema: Schema, case_sensitive: bool) -> Any:
    if isinstance(value, (dict, list)) or value is None:
        raise errors.BadRequest(f"Invalid filter: the value for {_shown(name)} must be a single value")
    try:
        field = schema.find_field(name, case_sensitive)
    except ValueError:
        raise errors.BadRequest(f"Invalid filter: no column {_shown(name)}") from None
    if isinstance(field.field_type, (BinaryType, FixedType)) and isinstance(value, str):
        try:
            return bytes.fromhex(value)
        except ValueError:
            raise errors.BadRequest(f"Invalid filter: the value for {_shown(name)} must be hex") from None
    return value


def _kind(value: Any) -> str:
    return type(value).__name__


def _shown(text: str) -> str:
    return repr(text if len(text) <= 64 else text[:64] + "...")


def _short(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:200]
