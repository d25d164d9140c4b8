"""Table metadata: a commit's requirements checked and its updates applied to the metadata JSON the way
Iceberg Java's ``TableMetadata.Builder`` and ``build()`` do (1.9.0; plus 1.10's encryption keys and
snapshot ``key-id``, and the retryable sequence-number / first-row-id checks of later versions).

Pure: no I/O, the clock is the caller's ``now_ms``. Copy-on-write: ``base`` and everything reachable
from it is never mutated; a list the commit does not touch is the very same object in the result, so
are the untouched elements of a list it appends to or filters. Work follows the change: a snapshot
appended to a 10,000-snapshot table copies one list of pointers and checks only what was added.
"""

from __future__ import annotations

import re
import uuid as uuids

from catalog import errors
from catalog.metadata import parsing, partitioning, schemas, views
from catalog.metadata import reading as r
from catalog.metadata.builder import MAIN, Builder, current_snapshot_id, java_int, read_schemas, read_specs
from catalog.metadata.parsing import Update

DEFAULT_FORMAT_VERSION = 2
RESERVED_PROPERTIES = frozenset(
    {
        "format-version",
        "uuid",
        "snapshot-count",
        "current-snapshot-id",
        "current-snapshot-summary",
        "current-snapshot-timestamp-ms",
        "current-schema",
        "default-partition-spec",
        "default-sort-order",
    }
)
DEFAULT_PROPERTIES = {"write.parquet.compression-codec": "zstd"}
METRICS_COLUMN_PREFIX = "write.metadata.metrics.column."
COMMIT_PROPERTIES = (
    "commit.retry.num-retries",
    "commit.retry.min-wait-ms",
    "commit.retry.max-wait-ms",
    "commit.retry.total-timeout-ms",
)
_JAVA_INT = re.compile(r"[+-]?\d+", re.ASCII)

UPDATE_PARSERS = parsing.TABLE_UPDATE_PARSERS


# --- create ----------------------------------------------------------------------------------------


def new_table(
    *,
    location: str,
    schema: dict,
    spec: dict | None,
    order: dict | None,
    properties: dict[str, str],
    now_ms: int,
    table_uuid: str | None = None,
) -> dict:
    """createTable (not staged): Java's ``TableMetadata.newTableMetadata``. Fresh column ids (from 1),
    fresh partition field ids (from 1000), sort order 1 unless unsorted, reserved properties dropped,
    the format version from the ``format-version`` property (default 2), Java's new-table defaults."""
    r.str_map({"properties": properties}, "properties")
    version = properties.get("format-version")
    format_version = java_int(version, "format-version") if version is not None else DEFAULT_FORMAT_VERSION
    given = schemas.parse_schema(schema)
    bound_spec = partitioning.bind_spec(partitioning.parse_spec(spec), given, format_version) if spec else None
    bound_order = partitioning.bind_order(partitioning.parse_order(order), given, format_version) if order else None
    persisted = {**DEFAULT_PROPERTIES, **{k: v for k, v in properties.items() if k not in RESERVED_PROPERTIES}}
    _check_new_properties(persisted, given)
    fresh, last_column_id, ids = schemas.fresh_ids(given)
    spec_fields = []
    for field in bound_spec.json["fields"] if bound_spec else ():
        sources = tuple(ids.get(source, -1) for source in partitioning.sources_of(field))
        if -1 in sources:  # a void field on a missing column (Java fails with an NPE)
            raise errors.ValidationFailed(f"Cannot find source column for partition field: {field['name']}")
        transform = partitioning.parse_transform(field["transform"])
        spec_fields.append(partitioning.SourceField(transform, sources[0], sources, field["name"]))
    sort_fields = []
    for field in bound_order["fields"] if bound_order else ():
        sources = tuple(ids[source] for source in partitioning.sources_of(field))
        transform = partitioning.parse_transform(field["transform"])
        sort_fields.append(
            partitioning.SourceField(transform, sources[0], sources, direction=field["direction"],
                                     null_order=field["null-order"])
        )  # fmt: skip
    builder = Builder(None, format_version, now_ms)
    builder.uuid = table_uuid or str(uuids.uuid4())
    builder.last_column_id = last_column_id
    builder.apply(Update("add-schema", fresh))
    builder.set_current_schema(-1)
    builder.apply(Update("add-spec", partitioning.UnboundSpec(0, tuple(spec_fields))))
    builder.set_default_spec(-1)
    builder.apply(Update("add-sort-order", partitioning.UnboundOrder(1 if sort_fields else 0, tuple(sort_fields))))
    builder.set_default_sort_order(-1)
    builder.apply(Update("set-location", location))
    builder.apply(Update("set-properties", persisted))
    return builder.build(None)


def _check_new_properties(properties: dict[str, str], schema: schemas.Schema) -> None:
    """Java checks these of a new table only: metrics columns that exist, commit retry numbers."""
    for key in properties:
        column = key[len(METRICS_COLUMN_PREFIX) :]
        if key.startswith(METRICS_COLUMN_PREFIX) and schema.find_id(column) is None:
            raise errors.ValidationFailed(
                f"Invalid metrics config, could not find column {column} from table prop {key} in schema"
            )
    for key in COMMIT_PROPERTIES:
        value = properties.get(key)
        if value is None:
            continue
        if not _JAVA_INT.fullmatch(value) or not r.INT_MIN <= int(value) <= r.INT_MAX:
            raise errors.ValidationFailed(f"Table property {key} must have integer value")
        if int(value) < 0:
            raise errors.ValidationFailed(f"Table property {key} must have non negative integer value")


# --- commit ----------------------------------------------------------------------------------------


def apply(
    base: dict | None, requirements: list[dict], updates: list[dict], *, base_location: str | None, now_ms: int
) -> dict:
    """Check ``requirements`` on ``base``, then apply ``updates`` like Java's ``TableMetadata.Builder``
    and ``build()``; returns ``base`` itself when nothing changed (Java records no change).

    ``base`` None is a staged create's commit: the requirements must be exactly ``assert-create``, the
    metadata starts empty at the format version of the first ``upgrade-format-version`` (default 2).
    ``base_location`` (the current metadata file) goes to the metadata-log, trimmed to
    ``write.metadata.previous-versions-max``. Raises ``RequirementFailed`` (409), ``RetryableValidation``
    (409), ``ValidationFailed`` (400) or ``BadRequest`` (400)."""
    checks = parsing.parse_requirements(requirements)
    changes = parsing.parse_updates(updates, UPDATE_PARSERS, views.UPDATE_PARSERS)
    creates = [check for check in checks if check.type == "assert-create"]
    if creates and len(creates) != len(checks):
        raise errors.BadRequest("Invalid create requirements: assert-create must be the only requirement")
    if base is None:
        if not creates:
            raise errors.BadRequest("A commit to a table that does not exist must assert-create")
        version = next((u.value for u in changes if u.action == "upgrade-format-version"), DEFAULT_FORMAT_VERSION)
        builder = Builder(None, version, now_ms)
    else:
        check_requirements(checks, base)
        builder = Builder(base, base["format-version"], now_ms)
    for update in changes:
        if update.action not in UPDATE_PARSERS:
            raise parsing.not_applicable(update, "a table")
        builder.apply(update)
    return builder.build(base_location)


def check_requirements(checks: list[parsing.Requirement], base: dict) -> None:
    """Raise ``RequirementFailed`` naming the first requirement that does not hold on ``base``, its
    message ending with the requirement's type."""
    for check in checks:
        if check.type not in parsing.TABLE_REQUIREMENTS:
            raise parsing.wrong_kind(check, "a table")
        try:
            _check(check, base)
        except errors.RequirementFailed as e:
            raise errors.RequirementFailed(f"{e.message} ({check.type})") from None


def _check(check: parsing.Requirement, base: dict) -> None:
    kind, expected = check.type, check.value
    if kind == "assert-create":
        raise errors.RequirementFailed("Requirement failed: table already exists")
    if kind == "assert-table-uuid":
        actual = base.get("table-uuid")
        if actual is None or expected.lower() != actual.lower():
            raise errors.RequirementFailed(f"Requirement failed: UUID does not match: expected {actual} != {expected}")
    elif kind == "assert-ref-snapshot-id":
        ref = (base.get("refs") or {}).get(check.ref)
        if ref is None and "refs" not in base and check.ref == MAIN and current_snapshot_id(base) != -1:
            ref = {"snapshot-id": current_snapshot_id(base), "type": "branch"}
        if ref is not None:
            what = "tag" if str(ref.get("type")).lower() == "tag" else "branch"
            if expected is None:
                raise errors.RequirementFailed(f"Requirement failed: {what} {check.ref} was created concurrently")
            if expected != ref["snapshot-id"]:
                raise errors.RequirementFailed(
                    f"Requirement failed: {what} {check.ref} has changed: "
                    f"expected id {expected} != {ref['snapshot-id']}"
                )
        elif expected is not None:
            raise errors.RequirementFailed(
                f"Requirement failed: branch or tag {check.ref} is missing, expected {expected}"
            )
    else:
        actual, what = _asserted(kind, base)
        if expected != actual:
            raise errors.RequirementFailed(f"Requirement failed: {what} changed: expected id {expected} != {actual}")


def _asserted(kind: str, base: dict) -> tuple[int, str]:
    if kind == "assert-last-assigned-field-id":
        return base.get("last-column-id"), "last assigned field id"
    if kind == "assert-current-schema-id":
        return read_schemas(base)[1], "current schema"
    if kind == "assert-last-assigned-partition-id":
        return read_specs(base)[2], "last assigned partition id"
    if kind == "assert-default-spec-id":
        return base.get("default-spec-id", 0), "default partition spec"
    return base.get("default-sort-order-id", 0), "default sort order"
