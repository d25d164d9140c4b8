"""The metadata engine's rules, as plain unit tests (no server, no JVM): each one a rule of Iceberg Java's
``TableMetadata.Builder`` / ``ViewMetadata.Builder`` that the engine must keep, or one of its
deliberate differences. The same requests are compared with Java itself by the differential harness."""

from __future__ import annotations

import copy

import orjson
import pytest

from catalog import errors
from catalog.metadata import tables, views

NOW = 1_700_000_000_000
LOC = "s3://bucket/db/t"
EVENTS_JSON_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": True},
        {"id": 2, "name": "ts", "type": "timestamptz", "required": False},
        {"id": 3, "name": "s", "type": "string", "required": False},
    ],
}
SPEC = {"spec-id": 0, "fields": [{"name": "ts_day", "transform": "day", "source-id": 2, "field-id": 1000}]}


def table(version: int = 2, **kwargs) -> dict:
    return tables.new_table(
        location=LOC,
        schema=kwargs.pop("schema", EVENTS_JSON_SCHEMA),
        spec=kwargs.pop("spec", SPEC),
        order=kwargs.pop("order", None),
        properties={"format-version": str(version), **kwargs.pop("properties", {})},
        now_ms=NOW,
        table_uuid="9c12d441-03fe-4693-9a96-a0705ddf69c1",
    )


def commit(base: dict, updates: list[dict], requirements: list[dict] | None = None, now: int = NOW + 1000) -> dict:
    return tables.apply(base, requirements or [], updates, base_location=f"{LOC}/metadata/v.json", now_ms=now)


def snapshot(base: dict, snapshot_id: int, **extra) -> dict:
    s = {
        "snapshot-id": snapshot_id,
        "sequence-number": base.get("last-sequence-number", 0) + 1,
        "timestamp-ms": NOW + snapshot_id,
        "manifest-list": f"{LOC}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if base.get("current-snapshot-id") not in (None, -1):
        s["parent-snapshot-id"] = base["current-snapshot-id"]
    if base["format-version"] >= 3:
        s["first-row-id"], s["added-rows"] = base["next-row-id"], 10
    s.update(extra)
    return {k: v for k, v in s.items() if v is not None}


def append(base: dict, snapshot_id: int, **extra) -> dict:
    s = snapshot(base, snapshot_id, **extra)
    return commit(
        base,
        [
            {"action": "add-snapshot", "snapshot": s},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
        now=s["timestamp-ms"],
    )


def frozen(value: dict) -> bytes:
    return orjson.dumps(value)


# --- creating tables -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
def test_new_table_writes_what_java_writes_per_format_version(version):
    m = table(version, properties={"owner": "me", "uuid": "reserved"})
    assert m["format-version"] == version
    assert ("schema" in m, "partition-spec" in m) == (version == 1, version == 1)
    assert ("last-sequence-number" in m) == (version > 1)
    assert ("next-row-id" in m) == (version >= 3)
    assert m["current-snapshot-id"] == (None if version >= 3 else -1)
    assert m["properties"] == {"write.parquet.compression-codec": "zstd", "owner": "me"}
    assert m["last-partition-id"] == 1000 and m["partition-specs"][0]["fields"][0]["field-id"] == 1000
    assert m["location"] == LOC and m["metadata-log"] == [] and m["last-updated-ms"] == NOW


def test_new_table_assigns_fresh_ids_and_keeps_identifier_fields_by_name():
    schema = {
        "type": "struct",
        "identifier-field-ids": [7],
        "fields": [
            {"id": 7, "name": "k", "type": "int", "required": True},
            {
                "id": 9,
                "name": "m",
                "type": {
                    "type": "map",
                    "key-id": 10,
                    "key": "string",
                    "value-id": 11,
                    "value": "long",
                    "value-required": False,
                },
                "required": False,
            },
            {"id": 8, "name": "n", "type": "string", "required": False},
        ],
    }
    spec = {"spec-id": 3, "fields": [{"name": "n_b", "transform": "bucket[4]", "source-id": 8, "field-id": 1005}]}
    m = tables.new_table(location=LOC, schema=schema, spec=spec, order=None, properties={}, now_ms=NOW)
    fields = m["schemas"][0]["fields"]
    assert [f["id"] for f in fields] == [1, 2, 3]  # a struct's fields first, then their types' ids
    assert (fields[1]["type"]["key-id"], fields[1]["type"]["value-id"]) == (4, 5)
    assert m["schemas"][0]["identifier-field-ids"] == [1] and m["last-column-id"] == 5
    assert m["partition-specs"] == [
        {"spec-id": 0, "fields": [{"name": "n_b", "transform": "bucket[4]", "source-id": 3, "field-id": 1000}]}
    ]


def test_new_table_refuses_what_java_refuses():
    with pytest.raises(errors.ValidationFailed, match="not supported until v3"):
        table(
            2,
            schema={
                **EVENTS_JSON_SCHEMA,
                "fields": [*EVENTS_JSON_SCHEMA["fields"], {"id": 4, "name": "v", "type": "variant", "required": False}],
            },
        )
    with pytest.raises(errors.ValidationFailed, match="Unsupported format version: v4"):
        table(4)
    with pytest.raises(errors.ValidationFailed, match="Cannot find source column"):
        table(2, spec={"spec-id": 0, "fields": [{"name": "x", "transform": "identity", "source-id": 9}]})
    with pytest.raises(errors.ValidationFailed, match="could not find column"):
        table(2, properties={"write.metadata.metrics.column.nope": "full"})


# --- commits: sharing, identity, no mutation -------------------------------------------------------


def test_a_commit_never_mutates_its_base_and_shares_what_it_did_not_change():
    base = append(append(table(3), 1), 2)
    before = frozen(base)
    new = append(base, 3)
    assert frozen(base) == before
    assert new["schemas"] is base["schemas"] and new["partition-specs"] is base["partition-specs"]
    assert new["properties"] is base["properties"]
    assert all(a is b for a, b in zip(new["snapshots"], base["snapshots"], strict=False))
    assert new["metadata-log"][-1] == {
        "timestamp-ms": base["last-updated-ms"],
        "metadata-file": f"{LOC}/metadata/v.json",
    }


def test_nothing_changed_returns_the_base_itself():
    base = append(table(2), 1)
    assert commit(base, []) is base
    assert commit(base, [{"action": "set-properties", "updates": {}}]) is base
    assert commit(base, [{"action": "set-current-schema", "schema-id": 0}]) is base
    assert (
        commit(base, [{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}]) is base
    )
    # what Java records as a change is one, even when the result looks the same
    assert commit(base, [{"action": "remove-properties", "removals": ["absent"]}]) is not base


# --- row lineage and sequence numbers ---------------------------------------------------------------


def test_v3_next_row_id_advances_by_added_rows():
    m = append(append(table(3), 1), 2)
    assert m["next-row-id"] == 20
    assert [s["first-row-id"] for s in m["snapshots"]] == [0, 10]


def test_v3_stale_first_row_id_is_retryable_and_missing_one_is_invalid():
    m = append(table(3), 1)
    with pytest.raises(errors.RetryableValidation, match="first-row-id is behind table next-row-id: 5 < 10") as e:
        append(m, 2, **{"first-row-id": 5})
    assert e.value.code == 409 and e.value.type == "CommitFailedException"
    with pytest.raises(errors.ValidationFailed, match="first-row-id is null"):
        append(m, 2, **{"first-row-id": None, "added-rows": None})
    with pytest.raises(errors.ValidationFailed, match="required when first-row-id is set"):
        append(m, 2, **{"added-rows": None})


def test_stale_sequence_number_is_retryable():
    m = append(append(table(2), 1), 2)
    with pytest.raises(errors.RetryableValidation, match="older than last sequence number"):
        append(m, 3, **{"sequence-number": 2})


def test_upgrade_to_v3_and_no_downgrade():
    m = append(table(2), 1)
    v3 = commit(m, [{"action": "upgrade-format-version", "format-version": 3}])
    assert v3["format-version"] == 3 and v3["next-row-id"] == 0 and v3["snapshots"] is m["snapshots"]
    assert append(v3, 2)["next-row-id"] == 10
    with pytest.raises(errors.ValidationFailed, match="Cannot downgrade v3 table to v2"):
        commit(v3, [{"action": "upgrade-format-version", "format-version": 2}])
    with pytest.raises(errors.ValidationFailed, match="unsupported format version: v4"):
        commit(v3, [{"action": "upgrade-format-version", "format-version": 4}])


# --- staged creates --------------------------------------------------------------------------------


def staged_updates(version: int) -> list[dict]:
    return [
        {"action": "assign-uuid", "uuid": "2b3f58a9-2f3c-4f7a-9d1e-1c1d1e1f1a1b"},
        {"action": "upgrade-format-version", "format-version": version},
        {"action": "add-schema", "schema": EVENTS_JSON_SCHEMA, "last-column-id": 3},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": LOC},
    ]


def test_staged_v3_create_with_a_snapshot():
    empty = {"format-version": 3, "next-row-id": 0, "last-sequence-number": 0}
    s = snapshot(empty, 5)
    updates = [
        *staged_updates(3),
        {"action": "add-snapshot", "snapshot": s},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 5},
    ]
    m = tables.apply(None, [{"type": "assert-create"}], updates, base_location=None, now_ms=NOW)
    assert m["format-version"] == 3 and m["next-row-id"] == 10 and m["current-snapshot-id"] == 5
    assert m["table-uuid"] == "2b3f58a9-2f3c-4f7a-9d1e-1c1d1e1f1a1b" and m["last-partition-id"] == 999
    with pytest.raises(errors.BadRequest, match="assert-create"):
        tables.apply(None, [], updates, base_location=None, now_ms=NOW)
    with pytest.raises(errors.BadRequest, match="only requirement"):
        tables.apply(None, [{"type": "assert-create"}, {"type": "assert-table-uuid", "uuid": "x"}], updates,
                     base_location=None, now_ms=NOW)  # fmt: skip
    with pytest.raises(errors.RequirementFailed, match="table already exists"):
        commit(m, updates, [{"type": "assert-create"}])


# --- encryption keys -------------------------------------------------------------------------------


def test_encryption_keys_are_added_removed_and_kept_across_commits():
    key = {"key-id": "k1", "encrypted-key-metadata": "AAEC", "encrypted-by-id": "kek", "properties": {"a": "b"}}
    m = commit(table(3), [{"action": "add-encryption-key", "encryption-key": key}])
    assert m["encryption-keys"] == [key]
    assert commit(m, [{"action": "add-encryption-key", "encryption-key": key}]) is m  # already there
    m = append(m, 1, **{"key-id": "k1"})
    m = commit(m, [{"action": "set-properties", "updates": {"x": "y"}}])
    assert m["encryption-keys"] == [key] and m["snapshots"][0]["key-id"] == "k1"
    m = commit(m, [{"action": "remove-encryption-key", "key-id": "k1"}])
    assert "encryption-keys" not in m
    with pytest.raises(errors.BadRequest, match="base64"):
        commit(m, [{"action": "add-encryption-key", "encryption-key": {**key, "encrypted-key-metadata": "!!"}}])


# --- types, defaults, transforms -------------------------------------------------------------------


def add_column(base: dict, column: dict) -> dict:
    schema = {
        "type": "struct",
        "schema-id": 1,
        "fields": [*EVENTS_JSON_SCHEMA["fields"], {"id": 4, "required": False, **column}],
    }
    return commit(base, [{"action": "add-schema", "schema": schema}, {"action": "set-current-schema", "schema-id": -1}])


@pytest.mark.parametrize(
    "type_,written",
    [
        ("variant", "variant"),
        ("UNKNOWN", "unknown"),
        ("timestamp_ns", "timestamp_ns"),
        ("timestamptz_ns", "timestamptz_ns"),
        ("geometry(OGC:CRS84)", "geometry"),
        ("geometry(EPSG:4326)", "geometry(EPSG:4326)"),
        ("geography(EPSG:4326,Karney)", "geography(EPSG:4326, karney)"),
    ],
)
def test_v3_types_only_in_v3(type_, written):
    assert add_column(table(3), {"name": "c", "type": type_})["schemas"][1]["fields"][3]["type"] == written
    with pytest.raises(errors.ValidationFailed, match="is not supported until v3"):
        add_column(table(2), {"name": "c", "type": type_})


def test_default_values():
    m = add_column(table(3), {"name": "d", "type": "decimal(9,2)", "initial-default": "1.50", "write-default": "+2.00"})
    field = m["schemas"][1]["fields"][3]
    assert field["type"] == "decimal(9, 2)"
    assert (field["initial-default"], field["write-default"]) == ("1.50", "2.00")
    # a write default alone is fine in v2; an initial default needs v3
    assert (
        add_column(table(2), {"name": "d", "type": "int", "write-default": 5})["schemas"][1]["fields"][3][
            "write-default"
        ]
        == 5
    )
    with pytest.raises(errors.ValidationFailed, match="Invalid initial default"):
        add_column(table(2), {"name": "d", "type": "int", "initial-default": 5})
    with pytest.raises(errors.ValidationFailed, match="scale doesn't match"):
        add_column(table(3), {"name": "d", "type": "decimal(9,2)", "initial-default": "1.5"})
    with pytest.raises(errors.ValidationFailed, match="must be null"):
        add_column(
            table(3),
            {
                "name": "d",
                "type": {"type": "list", "element-id": 5, "element": "int", "element-required": False},
                "initial-default": [1],
            },
        )
    with pytest.raises(errors.ValidationFailed, match="offset must be"):
        add_column(table(3), {"name": "d", "type": "timestamptz", "initial-default": "2024-01-01T00:00:00+01:00"})
    t = add_column(table(3), {"name": "d", "type": "timestamptz", "initial-default": "2024-01-01T10:00Z"})
    assert t["schemas"][1]["fields"][3]["initial-default"] == "2024-01-01T10:00:00+00:00"


def test_identifier_fields_follow_java_rules():
    schema = {**EVENTS_JSON_SCHEMA, "schema-id": 1, "identifier-field-ids": [3]}
    with pytest.raises(errors.ValidationFailed, match="not a required field"):
        commit(table(2), [{"action": "add-schema", "schema": schema}])
    ok = commit(table(2), [{"action": "add-schema", "schema": {**schema, "identifier-field-ids": [1, 1]}}])
    assert ok["schemas"][1]["identifier-field-ids"] == [1]


def test_multi_argument_transforms_in_v3_only():
    field = {"name": "z", "transform": "zorder", "source-ids": [1, 3], "field-id": 1001}
    m = commit(table(3), [{"action": "add-spec", "spec": {"spec-id": 0, "fields": [field]}}])
    assert m["partition-specs"][1]["fields"] == [field] and m["last-partition-id"] == 1001
    single = commit(
        table(3),
        [
            {
                "action": "add-spec",
                "spec": {"spec-id": 0, "fields": [{**field, "transform": "bucket[2]", "source-ids": [1]}]},
            }
        ],
    )
    assert single["partition-specs"][1]["fields"][0]["source-id"] == 1  # one argument: written as source-id
    with pytest.raises(errors.ValidationFailed, match="takes one source column"):
        commit(
            table(3), [{"action": "add-spec", "spec": {"spec-id": 0, "fields": [{**field, "transform": "bucket[2]"}]}}]
        )
    with pytest.raises(errors.ValidationFailed, match="Cannot find source column"):
        commit(table(3), [{"action": "add-spec", "spec": {"spec-id": 0, "fields": [{**field, "source-ids": [1, 9]}]}}])
    with pytest.raises(errors.BadRequest, match="source-id"):
        commit(table(2), [{"action": "add-spec", "spec": {"spec-id": 0, "fields": [field]}}])


def test_specs_and_orders_bind_to_the_current_schema_and_are_reused():
    m = table(2)
    assert commit(m, [{"action": "add-spec", "spec": {**SPEC, "spec-id": 7}}]) is m  # same fields: reused
    with pytest.raises(errors.ValidationFailed, match="Invalid source type|Unsupported type"):
        commit(
            m,
            [
                {
                    "action": "add-spec",
                    "spec": {"spec-id": 0, "fields": [{"name": "x", "transform": "hour", "source-id": 3}]},
                }
            ],
        )
    with pytest.raises(errors.ValidationFailed, match="Cannot find source column for partition field"):
        narrower = {**EVENTS_JSON_SCHEMA, "fields": EVENTS_JSON_SCHEMA["fields"][::2]}
        commit(m, [{"action": "add-schema", "schema": narrower}, {"action": "set-current-schema", "schema-id": -1}])
    order = {
        "order-id": 5,
        "fields": [{"transform": "identity", "source-id": 3, "direction": "ASC", "null-order": "NULLS-FIRST"}],
    }
    o = commit(
        m,
        [{"action": "add-sort-order", "sort-order": order}, {"action": "set-default-sort-order", "sort-order-id": -1}],
    )
    assert o["default-sort-order-id"] == 1
    assert o["sort-orders"][1]["fields"][0] == {
        "transform": "identity",
        "source-id": 3,
        "direction": "asc",
        "null-order": "nulls-first",
    }


# --- removals --------------------------------------------------------------------------------------


def test_remove_snapshots_ignores_unknown_ids_and_drops_statistics_refs_and_history():
    m = append(append(append(table(2), 1), 2), 3)
    stats = {
        "snapshot-id": 2,
        "statistics-path": "p",
        "file-size-in-bytes": 1,
        "file-footer-size-in-bytes": 1,
        "blob-metadata": [],
    }
    m = commit(
        m,
        [
            {"action": "set-statistics", "statistics": stats},
            {
                "action": "set-partition-statistics",
                "partition-statistics": {"snapshot-id": 2, "statistics-path": "q", "file-size-in-bytes": 1},
            },
            {"action": "set-snapshot-ref", "ref-name": "tag", "type": "tag", "snapshot-id": 2},
        ],
    )
    assert commit(m, [{"action": "remove-snapshots", "snapshot-ids": [99]}]) is m
    out = commit(m, [{"action": "remove-snapshots", "snapshot-ids": [2, 99]}])
    assert [s["snapshot-id"] for s in out["snapshots"]] == [1, 3]
    assert out["statistics"] == [] and out["partition-statistics"] == [] and "tag" not in out["refs"]
    assert [e["snapshot-id"] for e in out["snapshot-log"]] == [3]  # history before a gap is dropped
    gone = commit(m, [{"action": "remove-snapshots", "snapshot-ids": [3]}])
    assert "main" not in gone["refs"] and gone["current-snapshot-id"] == -1


def test_removing_many_snapshots_at_once_keeps_the_rest_and_appends_go_on():
    """One remove-snapshots of 9,990 ids out of 10,000: the last 10 stay, with their log. How its cost
    grows is measured without wall-clock limits in tests/test_metadata_engine_scaling.py."""
    m = table(2)
    n = 10_000
    snaps = [
        {
            "sequence-number": i,
            "snapshot-id": i,
            "timestamp-ms": NOW + i,
            "manifest-list": "m",
            "summary": {"operation": "append"},
        }
        for i in range(1, n + 1)
    ]
    big = {**m, "snapshots": snaps, "last-sequence-number": n, "current-snapshot-id": n, "last-updated-ms": NOW + n,
           "refs": {"main": {"snapshot-id": n, "type": "branch"}},
           "snapshot-log": [{"timestamp-ms": NOW + i, "snapshot-id": i} for i in range(1, n + 1)]}  # fmt: skip
    out = commit(big, [{"action": "remove-snapshots", "snapshot-ids": list(range(1, n - 9))}], now=NOW + n + 1)
    assert [s["snapshot-id"] for s in out["snapshots"]] == list(range(n - 9, n + 1))
    assert [e["snapshot-id"] for e in out["snapshot-log"]] == list(range(n - 9, n + 1))
    for k in range(50):
        out = append(out, n + 1 + k)
    assert len(out["snapshots"]) == 60 and out["current-snapshot-id"] == n + 50


def test_remove_properties_of_a_missing_key_is_ignored():
    m = table(2, properties={"a": "1"})
    out = commit(m, [{"action": "remove-properties", "removals": ["a", "missing"]}])
    assert out["properties"] == {"write.parquet.compression-codec": "zstd"}


def test_metadata_log_is_trimmed_to_previous_versions_max():
    m = table(2, properties={"write.metadata.previous-versions-max": "2"})
    for i in range(4):
        m = commit(m, [{"action": "set-properties", "updates": {"i": str(i)}}], now=NOW + 1000 * (i + 1))
    assert len(m["metadata-log"]) == 2


# --- requirements and malformed requests ----------------------------------------------------------


@pytest.mark.parametrize(
    "requirement,message",
    [
        ({"type": "assert-table-uuid", "uuid": "other"}, "UUID does not match"),
        (
            {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None},
            "branch main was created concurrently",
        ),
        ({"type": "assert-ref-snapshot-id", "ref": "b", "snapshot-id": 1}, "branch or tag b is missing"),
        ({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 9}, "last assigned field id changed"),
        ({"type": "assert-current-schema-id", "current-schema-id": 9}, "current schema changed"),
        (
            {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 9},
            "last assigned partition id changed",
        ),
        ({"type": "assert-default-spec-id", "default-spec-id": 9}, "default partition spec changed"),
        ({"type": "assert-default-sort-order-id", "default-sort-order-id": 9}, "default sort order changed"),
    ],
)
def test_each_requirement_fails_as_a_409(requirement, message):
    with pytest.raises(errors.RequirementFailed, match=message) as e:
        commit(append(table(2), 1), [], [requirement])
    assert e.value.code == 409


@pytest.mark.parametrize(
    "update,error,message",
    [
        ({"action": "frobnicate"}, errors.BadRequest, "frobnicate"),
        ({"action": "set-properties"}, errors.BadRequest, "missing map: updates"),
        ({"action": "set-current-schema", "schema-id": 2**31}, errors.ValidationFailed, "integer value: schema-id"),
        ({"action": "remove-snapshots", "snapshot-ids": [2**63]}, errors.ValidationFailed, "long value: snapshot-ids"),
        ({"action": "remove-snapshots", "snapshot-ids": [float(2**64)]}, errors.ValidationFailed, "long value"),
        ({"action": "assign-uuid", "uuid": "other"}, errors.ValidationFailed, "Cannot reassign uuid"),
        (
            {"action": "set-snapshot-ref", "ref-name": "b", "type": "branch", "snapshot-id": 55},
            errors.ValidationFailed,
            "unknown snapshot",
        ),
        ({"action": "set-default-spec", "spec-id": -1}, errors.ValidationFailed, "no spec has been added"),
    ],
)
def test_malformed_or_invalid_updates(update, error, message):
    with pytest.raises(error, match=message):
        commit(table(2), [update])


def test_time_goes_forward_within_a_minute_of_skew():
    m = append(table(2), 1)
    early = snapshot(m, 2, **{"timestamp-ms": m["last-updated-ms"] - 120_000})
    with pytest.raises(errors.ValidationFailed, match="Invalid update timestamp"):
        commit(m, [{"action": "add-snapshot", "snapshot": early}])
    with pytest.raises(errors.ValidationFailed, match="Expected sorted snapshot log entries"):
        append(m, 2, **{"timestamp-ms": m["last-updated-ms"] - 120_000})
    assert append(m, 2, **{"timestamp-ms": m["last-updated-ms"] - 30_000})["current-snapshot-id"] == 2


def test_intermediate_snapshots_leave_the_snapshot_log():
    m = append(table(2), 1)
    s2, s3 = snapshot(m, 2), {**snapshot(m, 3), "sequence-number": 3, "parent-snapshot-id": 2}
    out = commit(
        m,
        [
            {"action": "add-snapshot", "snapshot": s2},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 2},
            {"action": "add-snapshot", "snapshot": s3},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 3},
        ],
        now=NOW + 10,
    )
    assert [e["snapshot-id"] for e in out["snapshot-log"]] == [1, 3]


# --- views -----------------------------------------------------------------------------------------

VSCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}
VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": NOW,
    "summary": {"engine-name": "spark"},
    "default-namespace": ["db"],
    "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
}


def view() -> dict:
    return views.new_view(location="s3://b/v", schema=VSCHEMA, version=VERSION, properties={}, now_ms=NOW)


def replace(base: dict, sql: str, dialect: str = "spark", now: int = NOW + 1) -> dict:
    version = {**VERSION, "representations": [{"type": "sql", "sql": sql, "dialect": dialect}]}
    return views.apply(
        base,
        [{"type": "assert-view-uuid", "uuid": base["view-uuid"]}],
        [
            {"action": "add-view-version", "view-version": version},
            {"action": "set-current-view-version", "view-version-id": -1},
        ],
        base_location=None,
        now_ms=now,
    )


def test_view_versions_log_reuse_and_expiry():
    v = view()
    assert v["current-version-id"] == 1 and v["version-log"] == [{"timestamp-ms": NOW, "version-id": 1}]
    v2 = replace(v, "select 2")
    assert v2["current-version-id"] == 2 and v2["schemas"] is v["schemas"]
    back = views.apply(
        v2, [], [{"action": "set-current-view-version", "view-version-id": 1}], base_location=None, now_ms=NOW + 5
    )
    assert back["version-log"][-1] == {"timestamp-ms": NOW + 5, "version-id": 1}
    for i in range(3, 15):
        v2 = replace(v2, f"select {i}")
    assert len(v2["versions"]) == 10 and v2["versions"][0]["version-id"] == v2["current-version-id"]


def test_view_rules():
    v = view()
    two = {
        **VERSION,
        "representations": [
            {"type": "sql", "sql": "a", "dialect": "spark"},
            {"type": "sql", "sql": "b", "dialect": "Spark"},
        ],
    }
    with pytest.raises(errors.ValidationFailed, match="multiple queries for dialect spark"):
        views.apply(v, [], [{"action": "add-view-version", "view-version": two}], base_location=None, now_ms=NOW)
    with pytest.raises(errors.ValidationFailed, match="loss of view dialects"):
        replace(v, "select 1", dialect="trino")
    with pytest.raises(errors.RequirementFailed, match="view UUID does not match"):
        views.apply(v, [{"type": "assert-view-uuid", "uuid": "x"}], [], base_location=None, now_ms=NOW)
    with pytest.raises(errors.BadRequest):
        views.apply(v, [{"type": "assert-table-uuid", "uuid": "x"}], [], base_location=None, now_ms=NOW)
    with pytest.raises(errors.BadRequest):
        views.apply(v, [], [{"action": "add-snapshot", "snapshot": {}}], base_location=None, now_ms=NOW)
    assert views.apply(v, [], [], base_location=None, now_ms=NOW) is v
    before = copy.deepcopy(v)
    replace(v, "select 3")
    assert v == before


def test_a_snapshot_added_and_removed_in_one_commit_is_not_checked_against_the_last_sequence_number():
    """Found by the Java differential: add a snapshot (sequence 1), remove it, add a parentless one
    with sequence 0. Java keeps only the second and accepts (its last sequence number follows the
    parentless add); the removed one must not be checked."""
    base = table(3)
    first = snapshot(base, 2, **{"sequence-number": 1, "added-rows": 0})
    second = snapshot(base, 1, **{"sequence-number": 0, "added-rows": 0})
    new = commit(
        base,
        [
            {"action": "add-snapshot", "snapshot": first},
            {"action": "remove-snapshots", "snapshot-ids": [2]},
            {"action": "add-snapshot", "snapshot": second},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1},
        ],
    )
    assert [s["snapshot-id"] for s in new["snapshots"]] == [1] and new["last-sequence-number"] == 0
