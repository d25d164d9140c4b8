"""Partition transforms, partition specs and sort orders as JSON, checked like Iceberg's Java reference
(``Transforms.fromString``, each transform's ``canTransform``, ``PartitionSpec.Builder`` /
``checkCompatibility``, ``SortOrder.Builder`` / ``checkCompatibility``).

Beyond Java 1.9, format v3's multi-argument transforms are accepted: a field may name its sources as
``source-ids`` (v3 only). No transform the spec defines takes more than one argument, so a field with
several sources must use a transform this reference does not know; its sources must still exist and be
primitive. A one-element ``source-ids`` is written back as ``source-id``, as the spec asks.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from catalog import errors
from catalog.metadata import reading as r
from catalog.metadata.schemas import Schema, family, is_primitive, type_str

PARTITION_DATA_ID_START = 1000
_WIDTH = re.compile(r"(\w+)\[(\d+)\]", re.ASCII)
_TIME = frozenset({"year", "month", "day", "hour"})
_BUCKET_TYPES = frozenset(
    ["int", "long", "date", "time", "timestamp", "timestamp_ns", "string", "binary", "fixed", "decimal", "uuid"]
)
_TRUNCATE_TYPES = frozenset({"int", "long", "string", "binary", "decimal"})
_NOT_IDENTITY = frozenset({"variant", "geometry", "geography"})


class Transform(NamedTuple):
    name: str  # identity, bucket, truncate, year, month, day, hour, void, or "" for one unknown here
    text: str  # what Java writes


def parse_transform(text: str) -> Transform:
    if match := _WIDTH.fullmatch(text):
        name = match.group(1).lower()
        if name in ("bucket", "truncate"):
            digits = match.group(2)
            width = int(digits)
            if width > r.INT_MAX:  # Java: NumberFormatException
                raise errors.ValidationFailed(f"Cannot parse to an integer value: {name}[{digits}]")
            if width <= 0:
                what = "number of buckets" if name == "bucket" else "truncate width"
                raise errors.ValidationFailed(f"Invalid {what}: {width} (must be > 0)")
            return Transform(name, f"{name}[{width}]")
    lower = text.lower()
    if lower in ("identity", "void") or lower in _TIME:
        return Transform(lower, lower)
    return Transform("", text)


def can_transform(transform: Transform, type_: Any) -> bool:
    kind = family(type_)
    name = transform.name
    if name == "identity":
        return is_primitive(type_) and kind not in _NOT_IDENTITY
    if name == "bucket":
        return kind in _BUCKET_TYPES
    if name == "truncate":
        return kind in _TRUNCATE_TYPES
    if name == "hour":
        return kind in ("timestamp", "timestamp_ns")
    if name in _TIME:
        return kind in ("date", "timestamp", "timestamp_ns")
    return True  # void, and transforms unknown here


def _bind_error(transform: Transform, type_: Any) -> str | None:
    """What Java's ``Transforms.fromString(type, ...)`` throws for a source column of this type."""
    kind, name = family(type_), transform.name
    if name == "identity" and kind in _NOT_IDENTITY:
        return f"Unsupported type for identity: {type_str(type_)}"
    if name == "bucket" and kind not in _BUCKET_TYPES:
        return f"Cannot bucket by type: {type_str(type_)}"
    if name == "truncate" and kind not in _TRUNCATE_TYPES:
        return f"Cannot truncate type: {type_str(type_)}"
    if name in _TIME and not can_transform(transform, type_):
        return f"Unsupported type: {type_str(type_)}"
    return None


class SourceField(NamedTuple):
    """A partition or sort field as a request states it, before it is bound to a schema."""

    transform: Transform
    source_id: int | None
    source_ids: tuple[int, ...] | None
    name: str | None = None  # partition fields
    field_id: int | None = None  # partition fields
    direction: str | None = None  # sort fields
    null_order: str | None = None  # sort fields


def _sources(node: dict) -> tuple[int | None, tuple[int, ...] | None]:
    source_id = r.int_or_none(node, "source-id")
    ids = r.int_list(node, "source-ids", None)
    if source_id is None and ids is None:
        raise errors.BadRequest("Cannot parse missing int: source-id")
    if ids is not None and not ids:
        raise errors.BadRequest("Invalid source-ids: must not be empty")
    if source_id is not None and ids is not None and ids != [source_id]:
        raise errors.BadRequest(f"Invalid source-ids {r.show(ids)}: does not match source-id {source_id}")
    return source_id, tuple(ids) if ids is not None else None


def resolve_sources(field: SourceField, format_version: int) -> tuple[int, ...]:
    """The source columns of a field: ``source-ids`` only from v3 on (before, Java reads ``source-id``)."""
    if field.source_ids is not None and format_version >= 3:
        if len(field.source_ids) > 1 and field.transform.name:
            raise errors.ValidationFailed(
                f"Invalid source-ids for transform {field.transform.text}: it takes one source column, "
                f"got {len(field.source_ids)}"
            )
        return field.source_ids
    if field.source_id is None:
        raise errors.BadRequest("Cannot parse missing int: source-id")
    return (field.source_id,)


def _write_sources(out: dict, sources: tuple[int, ...]) -> None:
    if len(sources) == 1:
        out["source-id"] = sources[0]
    else:
        out["source-ids"] = list(sources)


def sources_of(field: dict) -> tuple[int, ...]:
    """The source ids of a field already in some metadata."""
    ids = field.get("source-ids")
    return tuple(ids) if ids is not None and field.get("source-id") is None else (field["source-id"],)


# --- partition specs -------------------------------------------------------------------------------


class UnboundSpec(NamedTuple):
    spec_id: int
    fields: tuple[SourceField, ...]


def parse_spec(node: Any, *, require_id: bool = False) -> UnboundSpec:
    """Java's ``PartitionSpecParser.fromJson``; ``spec-id`` may be left out unless ``require_id`` (a
    create's spec: the REST spec makes it optional there)."""
    node = r.obj(node, "partition spec")
    spec_id = r.int_(node, "spec-id") if require_id else r.int_(node, "spec-id", 0)
    return UnboundSpec(spec_id, parse_spec_fields(r.array(node, "fields")))


def parse_spec_fields(items: list) -> tuple[SourceField, ...]:
    fields = []
    for item in items:
        item = r.obj(item, "partition field")
        name = r.str_(item, "name")
        transform = parse_transform(r.str_(item, "transform"))
        source_id, source_ids = _sources(item)
        fields.append(SourceField(transform, source_id, source_ids, name, r.int_or_none(item, "field-id")))
    with_ids = sum(1 for field in fields if field.field_id is not None)
    if with_ids not in (0, len(fields)):
        raise errors.BadRequest(
            f"Cannot parse spec with missing field IDs: {len(fields) - with_ids} missing of {len(fields)} fields."
        )
    return tuple(fields)


class BoundSpec(NamedTuple):
    json: dict  # {"spec-id", "fields"} as Java writes it
    last_assigned_field_id: int


def bind_spec(spec: UnboundSpec, schema: Schema, format_version: int) -> BoundSpec:
    """Java's ``UnboundPartitionSpec.bind``: typed transforms, partition names, field ids, then
    ``checkCompatibility``."""
    names: set[str] = set()
    last = PARTITION_DATA_ID_START - 1
    out = []
    for field in spec.fields:
        sources = resolve_sources(field, format_version)
        if len(sources) == 1:
            type_ = schema.find_type(sources[0])
            if type_ is not None and (message := _bind_error(field.transform, type_)):
                raise errors.ValidationFailed(message)
        same_column = schema.find_id(field.name)
        if same_column is not None and (len(sources) != 1 or same_column != sources[0]):
            raise errors.ValidationFailed(
                f"Cannot create identity partition sourced from different field in schema: {field.name}"
            )
        if not field.name:
            raise errors.ValidationFailed(f"Cannot use empty partition name: {field.name}")
        if field.name in names:
            raise errors.ValidationFailed(f"Cannot use partition name more than once: {field.name}")
        names.add(field.name)
        field_id = field.field_id if field.field_id is not None else last + 1
        last = max(last, field_id)
        bound = {"name": field.name, "transform": field.transform.text}
        _write_sources(bound, sources)
        bound["field-id"] = field_id
        out.append(bound)
    check_spec(out, schema)
    return BoundSpec({"spec-id": spec.spec_id, "fields": out}, last)


def check_spec(fields: list[dict], schema: Schema) -> None:
    """Java's ``PartitionSpec.checkCompatibility`` of a spec's fields with a schema."""
    for field in fields:
        transform = parse_transform(field["transform"])
        if transform.name == "void":
            continue
        for source_id in sources_of(field):
            type_ = schema.find_type(source_id)
            if type_ is None:
                raise errors.ValidationFailed(
                    f"Cannot find source column for partition field: {field.get('field-id')}: {field['name']}: "
                    f"{transform.text}({source_id})"
                )
            if not is_primitive(type_):
                raise errors.ValidationFailed(f"Cannot partition by non-primitive source field: {type_str(type_)}")
            if not can_transform(transform, type_):
                raise errors.ValidationFailed(f"Invalid source type {type_str(type_)} for transform: {transform.text}")


def spec_key(fields: list[dict]) -> tuple:
    """What Java's ``PartitionSpec.compatibleWith`` compares: sources, transform and name per field."""
    return tuple((sources_of(f), parse_transform(f["transform"]).text, f["name"]) for f in fields)


def spec_last_assigned(fields: list[dict]) -> int:
    return max((field["field-id"] for field in fields), default=PARTITION_DATA_ID_START - 1)


def has_sequential_ids(fields: list[dict]) -> bool:
    return all(field["field-id"] == PARTITION_DATA_ID_START + i for i, field in enumerate(fields))


# --- sort orders -----------------------------------------------------------------------------------

_DIRECTIONS = {"asc": "asc", "desc": "desc"}
_NULL_ORDERS = {"nulls-first": "nulls-first", "nulls-last": "nulls-last"}


class UnboundOrder(NamedTuple):
    order_id: int
    fields: tuple[SourceField, ...]


def parse_order(node: Any) -> UnboundOrder:
    """Java's ``SortOrderParser.fromJson``."""
    node = r.obj(node, "sort order")
    order_id = r.int_(node, "order-id")
    fields = []
    for item in r.array(node, "fields"):
        item = r.obj(item, "sort field")
        transform = parse_transform(r.str_(item, "transform"))
        source_id, source_ids = _sources(item)
        direction = r.str_(item, "direction")
        if direction.lower() not in _DIRECTIONS:
            raise errors.BadRequest(f"Invalid sort direction: {r.show(direction)}")
        null_order = r.str_(item, "null-order")
        if null_order.lower() not in _NULL_ORDERS:
            raise errors.BadRequest(f"Unexpected null order: {r.show(null_order)}")
        fields.append(
            SourceField(transform, source_id, source_ids, direction=direction.lower(), null_order=null_order.lower())
        )
    return UnboundOrder(order_id, tuple(fields))


def bind_order(order: UnboundOrder, schema: Schema, format_version: int) -> dict:
    """Java's ``UnboundSortOrder.bind``: the order's JSON (unsorted is order 0, sorted never is)."""
    out = []
    for field in order.fields:
        sources = resolve_sources(field, format_version)
        if len(sources) == 1:
            type_ = schema.find_type(sources[0])
            if type_ is not None and (message := _bind_error(field.transform, type_)):
                raise errors.ValidationFailed(message)
        bound = {"transform": field.transform.text}
        _write_sources(bound, sources)
        bound["direction"], bound["null-order"] = field.direction, field.null_order
        out.append(bound)
    if not out:
        if order.order_id != 0:
            raise errors.ValidationFailed("Unsorted order ID must be 0")
        return {"order-id": 0, "fields": []}
    if order.order_id == 0:
        raise errors.ValidationFailed("Sort order ID 0 is reserved for unsorted order")
    check_order(out, schema)
    return {"order-id": order.order_id, "fields": out}


def check_order(fields: list[dict], schema: Schema) -> None:
    """Java's ``SortOrder.checkCompatibility``."""
    for field in fields:
        transform = parse_transform(field["transform"])
        for source_id in sources_of(field):
            type_ = schema.find_type(source_id)
            if type_ is None:
                raise errors.ValidationFailed(
                    f"Cannot find source column for sort field: {transform.text}({source_id}) "
                    f"{field['direction'].upper()} {field['null-order'].upper().replace('-', '_')}"
                )
            if not is_primitive(type_):
                raise errors.ValidationFailed(f"Cannot sort by non-primitive source field: {type_str(type_)}")
            if not can_transform(transform, type_):
                raise errors.ValidationFailed(f"Invalid source type {type_str(type_)} for transform: {transform.text}")


def order_key(fields: list[dict]) -> tuple:
    """What Java's ``SortOrder.sameOrder`` compares."""
    return tuple(
        (parse_transform(f["transform"]).text, sources_of(f), f["direction"].lower(), f["null-order"].lower())
        for f in fields
    )
