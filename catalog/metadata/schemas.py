"""Schemas and types as JSON: validated, indexed and written the way Iceberg's Java reference does it
(``SchemaParser``, ``Types.fromTypeName``, ``Schema``'s identifier-field rules and ``checkCompatibility``).

Hand-written rather than pyiceberg's models: pyiceberg 0.12 has no ``variant`` type and no geometry /
geography parameters, and the engine works on plain JSON anyway (the metadata file's own dicts).

A type is kept as its canonical JSON: a string for a primitive (``"decimal(10, 2)"``, ``"variant"``),
a dict for struct/list/map. ``parse_schema`` returns a ``Schema`` whose ``json`` is what Java would write.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from catalog import errors
from catalog.metadata import reading as r

_SIMPLE = frozenset(
    [
        "boolean",
        "int",
        "long",
        "float",
        "double",
        "date",
        "time",
        "timestamp",
        "timestamptz",
        "timestamp_ns",
        "timestamptz_ns",
        "string",
        "uuid",
        "binary",
        "unknown",
        "variant",
        "geometry",
        "geography",
    ]
)
_GEOMETRY = re.compile(r"geometry\s*(?:\(\s*([^)]*?)\s*\))?", re.IGNORECASE | re.ASCII)
_GEOGRAPHY = re.compile(r"geography\s*(?:\(\s*([^,]*?)\s*(?:,\s*(\w*)\s*)?\))?", re.IGNORECASE | re.ASCII)
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]", re.ASCII)
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", re.ASCII)
_EDGE_ALGORITHMS = frozenset({"spherical", "vincenty", "thomas", "andoyer", "karney"})
_DEFAULT_CRS = "ogc:crs84"
# Types the spec adds in v3 (Java's Schema.MIN_FORMAT_VERSIONS), by type family.
V3_TYPES = frozenset({"timestamp_ns", "variant", "unknown", "geometry", "geography"})
DEFAULT_VALUES_MIN_FORMAT_VERSION = 3


def _java_int(digits: str) -> int:
    value = int(digits)
    if value > r.INT_MAX:
        raise errors.ValidationFailed(f"Cannot parse to an integer value: {digits}")
    return value


def parse_type_name(text: str) -> str:
    """Java's ``Types.fromTypeName``: the canonical string of a primitive (or variant) type."""
    lower = text.lower()
    if lower in _SIMPLE:
        return lower
    if match := _GEOMETRY.fullmatch(text):
        crs = match.group(1)
        if crs is not None and "," in crs:
            raise errors.ValidationFailed(f"Invalid CRS: {crs}")
        return _geo("geometry", crs, None)
    if match := _GEOGRAPHY.fullmatch(text):
        algorithm = match.group(2)
        if algorithm is not None and algorithm.lower() not in _EDGE_ALGORITHMS:
            raise errors.ValidationFailed(f"Invalid edge interpolation algorithm: {algorithm}")
        return _geo("geography", match.group(1), algorithm and algorithm.lower())
    if match := _FIXED.fullmatch(lower):
        return f"fixed[{_java_int(match.group(1))}]"
    if match := _DECIMAL.fullmatch(lower):
        precision, scale = _java_int(match.group(1)), _java_int(match.group(2))
        if precision > 38:
            raise errors.ValidationFailed(f"Decimals with precision larger than 38 are not supported: {precision}")
        return f"decimal({precision}, {scale})"
    raise errors.ValidationFailed(f"Cannot parse type string to primitive: {r.show(text)}")


def _geo(kind: str, crs: str | None, algorithm: str | None) -> str:
    if crs == "":
        raise errors.ValidationFailed("Invalid CRS: (empty string)")
    if crs is not None and crs.lower() == _DEFAULT_CRS:
        crs = None
    if algorithm is not None:
        return f"{kind}({crs or 'OGC:CRS84'}, {algorithm})"
    return f"{kind}({crs})" if crs is not None else kind


def family(type_: Any) -> str:
    """Java's TypeID, lower case: ``timestamptz`` is a ``timestamp``, ``decimal(9, 2)`` a ``decimal``."""
    if isinstance(type_, dict):
        return type_["type"]
    head = type_.split("(", 1)[0].split("[", 1)[0]
    if head in ("timestamp", "timestamptz"):
        return "timestamp"
    if head in ("timestamp_ns", "timestamptz_ns"):
        return "timestamp_ns"
    return head


def is_primitive(type_: Any) -> bool:
    return isinstance(type_, str) and type_ != "variant"


def type_str(type_: Any) -> str:
    return type_ if isinstance(type_, str) else f"{type_['type']}<...>"


# --- parsing ---------------------------------------------------------------------------------------


def _type(node: Any) -> Any:
    if isinstance(node, str):
        return parse_type_name(node)
    if isinstance(node, dict):
        kind = node.get("type")
        if kind == "struct":
            return {"type": "struct", "fields": _fields(node)}
        if kind == "list":
            element_id = r.int_(node, "element-id")
            element = _type(_get(node, "element"))
            required = r.bool_(node, "element-required")
            if required and element == "unknown":
                raise errors.ValidationFailed("Cannot create required field with unknown type: element")
            return {
                "type": "list",
                "element-id": element_id,
                "element": element,
                "element-required": required,
            }
        if kind == "map":
            key_id = r.int_(node, "key-id")
            key = _type(_get(node, "key"))
            value_id = r.int_(node, "value-id")
            value = _type(_get(node, "value"))
            required = r.bool_(node, "value-required")
            if key == "unknown" or (required and value == "unknown"):
                name = "key" if key == "unknown" else "value"
                raise errors.ValidationFailed(f"Cannot create required field with unknown type: {name}")
            return {
                "type": "map",
                "key-id": key_id,
                "key": key,
                "value-id": value_id,
                "value": value,
                "value-required": required,
            }
    raise errors.BadRequest(f"Cannot parse type from json: {r.show(node)}")


def _get(node: dict, key: str) -> Any:
    if node.get(key) is None:
        raise errors.BadRequest(f"Cannot parse missing field: {key}")
    return node[key]


def _fields(node: dict) -> list[dict]:
    out = []
    for item in r.array(node, "fields"):
        field = r.obj(item, "struct field")
        field_id = r.int_(field, "id")
        name = r.str_(field, "name")
        type_ = _type(_get(field, "type"))
        initial = _default(type_, field.get("initial-default"))
        write = _default(type_, field.get("write-default"))
        doc = r.str_or_none(field, "doc")
        required = r.bool_(field, "required")
        if required and type_ == "unknown":
            raise errors.ValidationFailed(f"Cannot create required field with unknown type: {name}")
        parsed = {"id": field_id, "name": name, "required": required, "type": type_}
        if doc is not None:
            parsed["doc"] = doc
        if initial is not None:
            parsed["initial-default"] = initial
        if write is not None:
            parsed["write-default"] = write
        out.append(parsed)
    return out


# --- default values (Java's SingleValueParser, for the primitive types it supports) ----------------

_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?", re.ASCII)
_UTC = re.compile(r"(.*?)(Z|[+-]00:00(?::00)?)", re.ASCII)


def _default(type_: Any, value: Any) -> Any:
    """The canonical JSON of a field's default (None for none), or a 400 when Java refuses it."""
    if value is None:
        return None
    if isinstance(type_, dict):
        raise errors.ValidationFailed(f"Invalid default value for {type_str(type_)}: {r.show(value)} (must be null)")
    canonical = _default_value(type_, family(type_), value)
    if canonical is None:
        raise errors.ValidationFailed(f"Cannot parse default as a {type_} value: {r.show(value)}")
    return canonical


def _default_value(type_: str, kind: str, value: Any) -> Any:  # noqa: C901 - one branch per type
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("int", "long"):
        low, high = (r.INT_MIN, r.INT_MAX) if kind == "int" else (r.LONG_MIN, r.LONG_MAX)
        return value if number and isinstance(value, int) and low <= value <= high else None
    if kind in ("float", "double"):
        return value if isinstance(value, float) else None
    if not isinstance(value, str):
        if kind in ("timestamp_ns", "variant", "unknown", "geometry", "geography"):
            raise errors.ValidationFailed(f"Type: {type_} is not supported")
        return None
    if kind == "string":
        return value
    if kind == "decimal":
        if not _NUMBER.fullmatch(value):
            return None
        parsed = Decimal(value)
        scale = int(type_[type_.index(",") + 1 : -1])
        if -parsed.as_tuple().exponent != scale:
            raise errors.ValidationFailed(f"Cannot parse default as a {type_} value: {value}, the scale doesn't match")
        return format(parsed, "f")
    if kind == "uuid":
        return value.lower() if _UUID.fullmatch(value) else None
    if kind == "fixed":
        length = int(type_[6:-1])
        return value.upper() if len(value) == 2 * length and _HEX.fullmatch(value) else None
    if kind == "binary":
        return value.upper() if _HEX.fullmatch(value) else None
    if kind == "date":
        return _iso_date(value)
    if kind == "time":
        return _iso_time(value)
    if kind == "timestamp":
        if type_ == "timestamptz":
            match = _UTC.fullmatch(value)
            if match is None:
                raise errors.ValidationFailed(
                    f"Cannot parse default as a {type_} value: {value}, offset must be +00:00"
                )
            local = _iso_timestamp(match.group(1))
            return None if local is None else local + "+00:00"
        return _iso_timestamp(value)
    raise errors.ValidationFailed(f"Type: {type_} is not supported")


def _iso_date(text: str) -> str | None:
    match = _DATE.fullmatch(text)
    if match is None:
        return None
    try:
        return dt.date(*map(int, match.groups())).isoformat()
    except ValueError:
        return None


def _iso_time(text: str) -> str | None:
    match = _TIME.fullmatch(text)
    if match is None:
        return None
    hour, minute, second = int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)
    if hour > 23 or minute > 59 or second > 59:
        return None
    micros = int((match.group(4) or "").ljust(9, "0")[:6])
    fraction = f".{micros:06d}".rstrip("0") if micros else ""
    return f"{hour:02d}:{minute:02d}:{second:02d}{fraction}"


def _iso_timestamp(text: str) -> str | None:
    date, sep, time = text.partition("T")
    if not sep:
        return None
    date, time = _iso_date(date), _iso_time(time)
    return None if date is None or time is None else f"{date}T{time}"


# --- schemas ---------------------------------------------------------------------------------------


class Field:
    """One field of a schema's index: a struct field, a list element or a map key/value."""

    __slots__ = ("id", "name", "type", "required", "parent", "initial_default")

    def __init__(self, id_: int, name: str, type_: Any, required: bool, parent: int | None, initial: Any) -> None:
        self.id, self.name, self.type, self.required = id_, name, type_, required
        self.parent, self.initial_default = parent, initial


class Schema:
    """A validated schema: its canonical JSON and the indexes Java derives from it."""

    __slots__ = ("json", "schema_id", "identifier_ids", "by_id", "by_name", "highest_field_id")

    def __init__(self, json: dict, by_id: dict[int, Field], by_name: dict[str, int]) -> None:
        self.json = json
        self.schema_id: int = json["schema-id"]
        self.identifier_ids: list[int] = json.get("identifier-field-ids", [])
        self.by_id = by_id
        self.by_name = by_name  # full names, then the short names that do not clash with one
        self.highest_field_id = max(by_id, default=0)

    def find_type(self, field_id: int) -> Any:
        field = self.by_id.get(field_id)
        return field.type if field is not None else None

    def find_id(self, name: str) -> int | None:
        return self.by_name.get(name)

    def column_name(self, field_id: int) -> str | None:
        field = self.by_id.get(field_id)
        return field.name if field is not None else None

    def with_id(self, schema_id: int) -> Schema:
        if schema_id == self.schema_id:
            return self
        return Schema(_schema_json(schema_id, self.identifier_ids, self.json["fields"]), self.by_id, self.by_name)

    def same(self, other_json: dict) -> bool:
        """Java's ``sameSchema``: the same fields and identifier fields, whatever the schema ids."""
        if other_json.get("fields") != self.json["fields"]:
            return False
        return set(other_json.get("identifier-field-ids") or ()) == set(self.identifier_ids)


def _schema_json(schema_id: int, identifier_ids: list[int], fields: list) -> dict:
    out: dict[str, Any] = {"type": "struct", "schema-id": schema_id}
    if identifier_ids:
        out["identifier-field-ids"] = identifier_ids
    out["fields"] = fields
    return out


def parse_schema(node: Any) -> Schema:
    """Java's ``SchemaParser.fromJson`` + the ``Schema`` constructor's checks; 400 when either refuses."""
    node = r.obj(node, "schema")
    if node.get("type") != "struct":
        kind = node.get("type")
        if kind in ("list", "map"):
            raise errors.ValidationFailed(f"Cannot create schema, not a struct type: {kind}")
        raise errors.BadRequest(f"Cannot parse type from json: {r.show(node)}")
    fields = _fields(node)
    schema_id = r.int_(node, "schema-id", 0)
    identifier_ids = list(dict.fromkeys(r.int_list(node, "identifier-field-ids", None) or ()))
    return _indexed(_schema_json(schema_id, identifier_ids, fields))


def _indexed(json: dict) -> Schema:
    by_id: dict[int, Field] = {}
    full: dict[str, int] = {}
    short: dict[str, int] = {}
    for field, full_name, short_name in _walk(json["fields"], (), (), None, by_id):
        if full_name in full:
            raise errors.ValidationFailed(
                f"Invalid schema: multiple fields for name {full_name}: {full[full_name]} and {field.id}"
            )
        full[full_name] = field.id
        short.setdefault(short_name, field.id)
    for field_id in json.get("identifier-field-ids", ()):
        _check_identifier(field_id, by_id)
    names = dict(full)
    for name, field_id in short.items():
        names.setdefault(name, field_id)
    return Schema(json, by_id, names)


def _walk(
    fields: list[dict], path: tuple, short_path: tuple, parent: int | None, by_id: dict[int, Field]
) -> Iterator[tuple[Field, str, str]]:
    for item in fields:
        full, short = (*path, item["name"]), (*short_path, item["name"])
        yield from _add(item["id"], full, short, item["type"], item["required"], parent, by_id, item)
        yield from _nested(item["type"], full, short, item["id"], by_id)


def _add(field_id, full, short, type_, required, parent, by_id, item=None) -> Iterator[tuple[Field, str, str]]:
    name = ".".join(full)
    if field_id in by_id:
        raise errors.ValidationFailed(f"Invalid schema: multiple fields with id {field_id}")
    field = Field(field_id, name, type_, required, parent, item.get("initial-default") if item else None)
    by_id[field_id] = field
    yield field, name, ".".join(short)


def _nested(type_: Any, full: tuple, short: tuple, parent: int, by_id: dict) -> Iterator[tuple[Field, str, str]]:
    if not isinstance(type_, dict):
        return
    kind = type_["type"]
    if kind == "struct":
        yield from _walk(type_["fields"], full, short, parent, by_id)
    elif kind == "list":
        element = type_["element"]
        path = (*full, "element")
        short_path = short if family(element) == "struct" else (*short, "element")
        yield from _add(type_["element-id"], path, path, element, type_["element-required"], parent, by_id)
        yield from _nested(element, path, short_path, type_["element-id"], by_id)
    elif kind == "map":
        key_path = (*full, "key")
        yield from _add(type_["key-id"], key_path, (*short, "key"), type_["key"], True, parent, by_id)
        yield from _nested(type_["key"], key_path, (*short, "key"), type_["key-id"], by_id)
        value = type_["value"]
        path = (*full, "value")
        short_path = short if family(value) == "struct" else (*short, "value")
        yield from _add(type_["value-id"], path, path, value, type_["value-required"], parent, by_id)
        yield from _nested(value, path, short_path, type_["value-id"], by_id)


def _check_identifier(field_id: int, by_id: dict[int, Field]) -> None:
    field = by_id.get(field_id)
    if field is None:
        raise errors.ValidationFailed(f"Cannot add fieldId {field_id} as an identifier field: field does not exist")
    if not is_primitive(field.type):
        raise errors.ValidationFailed(
            f"Cannot add field {field.name} as an identifier field: not a primitive type field"
        )
    if not field.required:
        raise errors.ValidationFailed(f"Cannot add field {field.name} as an identifier field: not a required field")
    if field.type in ("float", "double"):
        raise errors.ValidationFailed(
            f"Cannot add field {field.name} as an identifier field: must not be float or double field"
        )
    parents = []
    parent = field.parent
    while parent is not None:
        parents.append(by_id[parent])
        parent = by_id[parent].parent
    for ancestor in reversed(parents):
        if family(ancestor.type) != "struct":
            raise errors.ValidationFailed(
                f"Cannot add field {field.name} as an identifier field: must not be nested in {ancestor.name}"
            )
        if not ancestor.required:
            raise errors.ValidationFailed(
                f"Cannot add field {field.name} as an identifier field: "
                f"must not be nested in an optional field {ancestor.name}"
            )


def check_compatibility(schema: Schema, format_version: int) -> None:
    """Java's ``Schema.checkCompatibility``: v3 types and non-null initial defaults need format v3."""
    problems: dict[int, str] = {}
    for field_id, field in schema.by_id.items():
        if format_version < 3 and family(field.type) in V3_TYPES:
            problems[field_id] = f"Invalid type for {field.name}: {type_str(field.type)} is not supported until v3"
        if field.initial_default is not None and format_version < DEFAULT_VALUES_MIN_FORMAT_VERSION:
            problems[field_id] = (
                f"Invalid initial default for {field.name}: non-null default ({r.show(field.initial_default)}) "
                f"is not supported until v{DEFAULT_VALUES_MIN_FORMAT_VERSION}"
            )
    if problems:
        listed = "\n- ".join(problems[key] for key in sorted(problems))
        raise errors.ValidationFailed(f"Invalid schema for v{format_version}:\n- {listed}")


_CACHE: dict[int, tuple[dict, Schema]] = {}
_CACHE_SIZE = 16


def schema_of(json: dict) -> Schema:
    """The ``Schema`` of a schema already in some metadata. Memoised by the dict's identity (the
    engine shares unchanged schema dicts between a table's versions, so a wide schema is indexed
    once, not on every commit); the entry holds the dict, so its id cannot be reused meanwhile."""
    hit = _CACHE.get(id(json))
    if hit is not None and hit[0] is json:
        return hit[1]
    schema = parse_schema(json)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.pop(next(iter(_CACHE)))
    _CACHE[id(json)] = (json, schema)
    return schema


def fresh_ids(schema: Schema) -> tuple[Schema, int, dict[int, int]]:
    """Java's ``TypeUtil.assignFreshIds`` from 1 (a struct's fields first, then their types): the new
    schema (id 0), its last column id and the old-to-new id map."""
    mapping: dict[int, int] = {}

    def next_id(old: int) -> int:
        mapping[old] = len(mapping) + 1
        return mapping[old]

    def visit(type_: Any) -> Any:
        if not isinstance(type_, dict):
            return type_
        kind = type_["type"]
        if kind == "struct":
            return {"type": "struct", "fields": struct(type_["fields"])}
        if kind == "list":
            element_id = next_id(type_["element-id"])
            return {**type_, "element-id": element_id, "element": visit(type_["element"])}
        key_id, value_id = next_id(type_["key-id"]), next_id(type_["value-id"])
        return {
            **type_,
            "key-id": key_id,
            "key": visit(type_["key"]),
            "value-id": value_id,
            "value": visit(type_["value"]),
        }

    def struct(fields: list[dict]) -> list[dict]:
        ids = [next_id(field["id"]) for field in fields]
        return [{**field, "id": new, "type": visit(field["type"])} for field, new in zip(fields, ids, strict=True)]

    fields = struct(schema.json["fields"])
    identifier_ids = sorted(mapping[old] for old in schema.identifier_ids)
    fresh = _indexed(_schema_json(0, identifier_ids, fields))
    return fresh, len(mapping), mapping
