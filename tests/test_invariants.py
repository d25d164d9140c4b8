"""Metadata invariants over HTTP, and the same cases asked of Iceberg's Java reference (1.9).

Each case is a base table (made through the server) and a commit's updates built from that base's
metadata. ``test_each_case_over_http`` checks the server's answer: a rejected commit is a 400 (409
when Java's check is a retryable one) with the Iceberg error body and leaves the table as it was.
``test_java_reference_agrees`` (marked ``spark``) gives the very same base JSON and updates to
Java's ``TableMetadata.Builder`` through a local Spark session's JVM and asserts both accept or both
reject. Where Java 1.9 accepts what one might expect to be refused (a snapshot whose parent is gone),
the server follows Java: those are "accept" cases here. One case differs on purpose and says why
(``java_accepts``): a table's uuid is immutable.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from tests.support import JSON_SCHEMA, assert_error, commit, create, load

LONG_MAX, INT_MAX = 2**63 - 1, 2**31 - 1
MINUTE = 60_000


@dataclass(frozen=True)
class Case:
    name: str
    updates: Callable[[dict], list[dict]]  # from the base metadata (as loadTable returns it)
    expect: tuple  # ("accept",) or (status, error type, message fragment)
    snapshots: int = 0  # snapshots committed to the base first
    props: dict = field(default_factory=dict)  # properties of the created base table
    java_accepts: str = ""  # why the server deliberately refuses what Java 1.9 accepts

    @property
    def accepted(self) -> bool:
        return self.expect == ("accept",)


def snap(m: dict, snapshot_id: int, parent="current", seq=None, ts=None, **extra) -> dict:
    """A snapshot to add on top of base ``m``: next sequence number, timestamp now, parent = current."""
    parent_id = m.get("current-snapshot-id") if parent == "current" else parent
    s = {
        "snapshot-id": snapshot_id,
        "sequence-number": m.get("last-sequence-number", 0) + 1 if seq is None else seq,
        "timestamp-ms": int(time.time() * 1000) if ts is None else ts,
        "manifest-list": f"{m['location']}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": m["current-schema-id"],
        **extra,
    }
    if parent_id is not None and parent_id != -1:
        s["parent-snapshot-id"] = parent_id
    return s


def add(s: dict, main: bool = True) -> list[dict]:
    updates = [{"action": "add-snapshot", "snapshot": s}]
    if main:
        updates.append(
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": s["snapshot-id"]}
        )
    return updates


def last_log_ts(m: dict) -> int:
    return m["snapshot-log"][-1]["timestamp-ms"]


def schema_with(m: dict, schema_id: int, *extra: dict, drop: int | None = None) -> dict:
    fields = [f for f in m["schemas"][0]["fields"] if f["id"] != drop]
    return {"type": "struct", "schema-id": schema_id, "fields": [*fields, *extra]}


COL3 = {"id": 3, "name": "n", "type": "int", "required": False}
STRUCT = {
    "id": 3,
    "name": "st",
    "type": {"type": "struct", "fields": [{"id": 4, "name": "a", "type": "int", "required": False}]},
    "required": False,
}


def spec(*fields: tuple[int, str]) -> dict:
    return {
        "spec-id": 1,
        "fields": [
            {"source-id": s, "field-id": 1000 + i, "name": f"p{i}", "transform": t} for i, (s, t) in enumerate(fields)
        ],
    }


def order(source_id: int) -> dict:
    return {
        "order-id": 1,
        "fields": [{"source-id": source_id, "transform": "identity", "direction": "asc", "null-order": "nulls-first"}],
    }


def bad(fragment: str, status: int = 400, type_: str = "ValidationException") -> tuple:
    return (status, type_, fragment)


CASES = [
    # ids and numbers beyond their Java type (long, or int for schema/field/spec/order ids)
    Case("snapshot-id 2^63", lambda m: add(snap(m, 2**63)), bad("Cannot parse to a long value: snapshot-id")),
    Case("snapshot-id 2^64", lambda m: add(snap(m, 2**64)), bad("Cannot parse to a long value: snapshot-id")),
    Case("snapshot-id -2^63-1", lambda m: add(snap(m, -(2**63) - 1)), bad("Cannot parse to a long value")),
    Case("parent-snapshot-id 2^63", lambda m: add(snap(m, 7, parent=2**63)), bad("parent-snapshot-id")),
    Case("sequence-number 2^63", lambda m: add(snap(m, 7, seq=2**63)), bad("sequence-number")),
    Case("timestamp-ms 2^63", lambda m: add(snap(m, 7, ts=2**63)), bad("timestamp-ms")),
    Case(
        "ref max-ref-age-ms 2^63",
        lambda m: [
            {"action": "set-snapshot-ref", "ref-name": "b", "type": "branch", "snapshot-id": 1, "max-ref-age-ms": 2**63}
        ],
        bad("max-ref-age-ms"),
        snapshots=1,
    ),
    Case(
        "ref min-snapshots-to-keep 2^31",
        lambda m: [
            {
                "action": "set-snapshot-ref",
                "ref-name": "b",
                "type": "branch",
                "snapshot-id": 1,
                "min-snapshots-to-keep": 2**31,
            }
        ],
        bad("Cannot parse to an integer value: min-snapshots-to-keep"),
        snapshots=1,
    ),
    Case(
        "remove-snapshots 2^63",
        lambda m: [{"action": "remove-snapshots", "snapshot-ids": [2**63]}],
        bad("snapshot-ids"),
        snapshots=1,
    ),
    Case(
        "schema-id 2^31",
        lambda m: [{"action": "add-schema", "schema": schema_with(m, 2**31, COL3)}],
        bad("Cannot parse to an integer value: schema-id"),
    ),
    Case(
        "field id 2^31",
        lambda m: [{"action": "add-schema", "schema": schema_with(m, 1, {**COL3, "id": 2**31})}],
        bad("Cannot parse to an integer value: id"),
    ),
    Case(
        "spec-id 2^31",
        lambda m: [{"action": "add-spec", "spec": {**spec((1, "identity")), "spec-id": 2**31}}],
        bad("spec-id"),
    ),
    Case(
        "bucket[2^31]", lambda m: [{"action": "add-spec", "spec": spec((1, f"bucket[{2**31}]"))}], bad("integer value")
    ),
    Case("snapshot schema-id 2^31", lambda m: add(snap(m, 7, **{"schema-id": 2**31})), bad("schema-id")),
    Case("set-current-schema 2^31", lambda m: [{"action": "set-current-schema", "schema-id": 2**31}], bad("schema-id")),
    Case("snapshot-id 2^63-1 (largest long)", lambda m: add(snap(m, LONG_MAX)), ("accept",)),
    Case("negative snapshot-id", lambda m: add(snap(m, -5)), ("accept",)),
    # specs and sort orders bind to the schema current when they are added
    Case(
        "add-spec on a missing column",
        lambda m: [{"action": "add-spec", "spec": spec((9, "identity"))}],
        bad("Cannot find source column for partition field"),
    ),
    Case(
        "add-sort-order on a missing column",
        lambda m: [{"action": "add-sort-order", "sort-order": order(9)}],
        bad("Cannot find source column for sort field"),
    ),
    Case(
        "add-spec before the schema with its column",
        lambda m: [
            {"action": "add-spec", "spec": spec((3, "identity"))},
            {"action": "add-schema", "schema": schema_with(m, 1, COL3)},
            {"action": "set-current-schema", "schema-id": -1},
        ],
        bad("Cannot find source column for partition field"),
    ),
    Case(
        "add-spec after the schema with its column",
        lambda m: [
            {"action": "add-schema", "schema": schema_with(m, 1, COL3)},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": spec((3, "identity"))},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-sort-order", "sort-order": order(3)},
            {"action": "set-default-sort-order", "sort-order-id": -1},
        ],
        ("accept",),
    ),
    Case(
        "add-spec with a transform the column cannot take",
        lambda m: [{"action": "add-spec", "spec": spec((2, "year"))}],
        bad("Unsupported type: string"),
    ),
    Case(
        "add-spec on a struct column",
        lambda m: [
            {"action": "add-schema", "schema": schema_with(m, 1, STRUCT)},
            {"action": "set-current-schema", "schema-id": -1},
            {"action": "add-spec", "spec": spec((3, "identity"))},
        ],
        bad("non-primitive"),
    ),
    Case(
        "void spec field on a missing column",
        lambda m: [{"action": "add-spec", "spec": spec((9, "void"))}],
        ("accept",),
    ),
    Case(
        "current schema dropping the default spec's column",
        lambda m: [
            {"action": "add-spec", "spec": spec((2, "identity"))},
            {"action": "set-default-spec", "spec-id": -1},
            {"action": "add-schema", "schema": schema_with(m, 1, drop=2)},
            {"action": "set-current-schema", "schema-id": -1},
        ],
        bad("Cannot find source column for partition field"),
    ),
    Case(
        "added spec (not default) then a schema dropping its column",
        lambda m: [
            {"action": "add-spec", "spec": spec((2, "identity"))},
            {"action": "add-schema", "schema": schema_with(m, 1, drop=2)},
            {"action": "set-current-schema", "schema-id": -1},
        ],
        ("accept",),
    ),
    # refs, parents, sequence numbers, row ids
    Case(
        "ref to a missing snapshot",
        lambda m: [{"action": "set-snapshot-ref", "ref-name": "b", "type": "branch", "snapshot-id": 55}],
        bad("unknown snapshot"),
        snapshots=1,
    ),
    Case(
        "parent that does not exist (expired history)", lambda m: add(snap(m, 7, parent=99)), ("accept",), snapshots=1
    ),
    Case(
        "main rolled back to an older snapshot",
        lambda m: [{"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1}],
        ("accept",),
        snapshots=2,
    ),
    Case(
        "stale sequence number",
        lambda m: add(snap(m, 7, seq=m["last-sequence-number"])),
        bad("older than last sequence number", 409, "CommitFailedException"),
        snapshots=2,
    ),
    Case(
        "stale sequence number on v3",
        lambda m: add(snap(m, 7, seq=m["last-sequence-number"], **{"first-row-id": m["next-row-id"], "added-rows": 1})),
        bad("older than last sequence number", 409, "CommitFailedException"),
        snapshots=2,
        props={"format-version": "3"},
    ),
    Case(
        "sequence number going back without a parent",
        lambda m: add(snap(m, 7, parent=None, seq=1), main=False),
        bad("greater than last sequence number"),
        snapshots=2,
    ),
    Case("negative added-rows", lambda m: add(snap(m, 7, **{"first-row-id": 0, "added-rows": -5})), bad("added-rows")),
    Case(
        "first-row-id without added-rows (v3)",
        lambda m: add(snap(m, 7, **{"first-row-id": m["next-row-id"]})),
        bad("required when first-row-id is set"),
        props={"format-version": "3"},
    ),
    Case(
        "assign-uuid changing the table uuid",
        lambda m: [{"action": "assign-uuid", "uuid": str(uuid.uuid4())}],
        bad("Cannot reassign uuid"),
        java_accepts="Java 1.9's table builder accepts it (its view builder refuses); a table's uuid is its identity",
    ),
    Case(
        "last-column-id lower than the table's",
        lambda m: [{"action": "add-schema", "schema": schema_with(m, 1, COL3), "last-column-id": 1}],
        ("accept",),  # both engines keep the maximum
    ),
    # time order, with Java's one-minute tolerance for clock skew
    Case(
        "snapshot two minutes before the last update",
        lambda m: add(snap(m, 7, ts=m["last-updated-ms"] - 2 * MINUTE), main=False),
        bad("Invalid update timestamp"),
    ),
    Case(
        "snapshot log going back two minutes",
        lambda m: add(snap(m, 7, ts=last_log_ts(m) - 2 * MINUTE)),
        bad("Expected sorted snapshot log entries"),
        snapshots=2,
    ),
    Case(
        "snapshot 30 s before the last update (clock skew)",
        lambda m: add(snap(m, 7, ts=m["last-updated-ms"] - 30_000)),
        ("accept",),
        snapshots=1,
    ),
    Case("snapshot at a negative time", lambda m: add(snap(m, 7, ts=-5)), bad("Invalid update timestamp")),
]
IDS = [c.name for c in CASES]


def build_base(http, ns: str, name: str, case: Case) -> dict:
    """Create the case's table and commit its seed snapshots; returns the loadTable result."""
    create(http, ns, name, properties=case.props)
    for i in range(1, case.snapshots + 1):
        m = load(http, ns, name)["metadata"]
        extra = {"first-row-id": m["next-row-id"], "added-rows": 1} if m["format-version"] >= 3 else {}
        resp = commit(http, ns, name, updates=add(snap(m, i, **extra)))
        assert resp.status_code == 200, resp.text
    return load(http, ns, name)


def no_floats(text: str) -> dict:
    def refuse(value: str) -> float:
        raise AssertionError(f"a float in the metadata JSON: {value}")

    return json.loads(text, parse_float=refuse)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_each_case_over_http(http, ns, case):
    before = build_base(http, ns, "t", case)
    resp = commit(http, ns, "t", updates=case.updates(before["metadata"]))
    if case.accepted:
        assert resp.status_code == 200, resp.text
        assert load(http, ns, "t")["metadata-location"] != before["metadata-location"]
    else:
        status, type_, fragment = case.expect
        assert_error(resp, status, type_, fragment)
        assert "Traceback" not in resp.text
        after = load(http, ns, "t")
        assert after["metadata-location"] == before["metadata-location"]
        assert after["metadata"] == before["metadata"]
    for mode in ("refs", "all"):  # ids stay integers whatever was sent (orjson turns > 2^64 into floats)
        no_floats(http.get(f"/v1/namespaces/{ns}/tables/t", params={"snapshots": mode}).text)


def test_largest_long_snapshot_id_round_trips_exactly(http, ns):
    before = build_base(http, ns, "t", Case("", lambda m: [], ("accept",)))
    assert commit(http, ns, "t", updates=add(snap(before["metadata"], LONG_MAX))).status_code == 200
    resp = http.get(f"/v1/namespaces/{ns}/tables/t", params={"snapshots": "refs"})
    metadata = no_floats(resp.text)["metadata"]
    assert metadata["current-snapshot-id"] == LONG_MAX
    assert [s["snapshot-id"] for s in metadata["snapshots"]] == [LONG_MAX]
    assert metadata["refs"]["main"]["snapshot-id"] == LONG_MAX


def test_a_rejected_commit_changes_nothing(http, ns):
    """A commit whose last update is invalid applies none of the valid ones before it."""
    before = build_base(http, ns, "t", Case("", lambda m: [], ("accept",)))
    updates = [
        {"action": "set-properties", "updates": {"owner": "mallory"}},
        {"action": "add-spec", "spec": spec((9, "identity"))},
    ]
    assert_error(commit(http, ns, "t", updates=updates), 400, "ValidationException", "Cannot find source column")
    after = load(http, ns, "t")
    assert after["metadata-location"] == before["metadata-location"]
    assert "owner" not in after["metadata"].get("properties", {})


STAGED = [
    ("valid", [], ("accept",)),
    (
        "spec on a missing column",
        [{"action": "add-spec", "spec": spec((9, "identity"))}],
        bad("Cannot find source column"),
    ),
    (
        "order on a missing column",
        [{"action": "add-sort-order", "sort-order": order(9)}],
        bad("Cannot find source column"),
    ),
    ("field id 2^31", None, bad("Cannot parse to an integer value: id")),
]


def staged_updates(extra: list[dict] | None, location: str) -> list[dict]:
    schema = JSON_SCHEMA
    if extra is None:
        schema = {**JSON_SCHEMA, "fields": [*JSON_SCHEMA["fields"], {**COL3, "id": 2**31}]}
    return [
        {"action": "assign-uuid", "uuid": str(uuid.uuid4())},
        {"action": "upgrade-format-version", "format-version": 2},
        {"action": "add-schema", "schema": schema, "last-column-id": 2},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": {"spec-id": 0, "fields": []}},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": location},
        *(extra or []),
    ]


@pytest.mark.parametrize("name,extra,expect", STAGED, ids=[s[0] for s in STAGED])
def test_staged_create_is_checked_whole(http, ns, name, extra, expect):
    location = create(http, ns, "probe")["metadata"]["location"].rsplit("/", 1)[0] + "/t"  # where "t" would go
    resp = commit(http, ns, "t", [{"type": "assert-create"}], staged_updates(extra, location))
    if expect == ("accept",):
        assert resp.status_code == 200, resp.text
    else:
        assert_error(resp, *expect)
        assert http.get(f"/v1/namespaces/{ns}/tables/t").status_code == 404


def test_direct_create_with_a_spec_on_a_missing_column_is_400(http, ns):
    resp = http.post(
        f"/v1/namespaces/{ns}/tables",
        json={
            "name": "t",
            "schema": JSON_SCHEMA,
            "partition-spec": {"spec-id": 0, "fields": spec((9, "identity"))["fields"]},
        },
    )
    assert resp.status_code == 400, resp.text
    assert http.get(f"/v1/namespaces/{ns}/tables/t").status_code == 404


# --- the Java reference ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def iceberg_java(spark):
    """``org.apache.iceberg`` of Iceberg 1.9's jars, through the module's Spark session's JVM
    (conftest's ``spark``)."""
    return spark._jvm.org.apache.iceberg


def java_verdict(J, base: dict | None, location: str | None, updates: list[dict]) -> str:
    """What Java's REST catalog does with these updates on this base: "accept" or "reject: <why>"."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors.exceptions.captured import CapturedException  # what PySpark turns some of them into

    try:
        request = J.rest.requests.UpdateTableRequestParser.fromJson(json.dumps({"updates": updates}))
        if base is None:
            builder = J.TableMetadata.buildFromEmpty()
        else:
            builder = J.TableMetadata.buildFrom(J.TableMetadataParser.fromJson(location, json.dumps(base)))
        for update in request.updates():
            update.applyTo(builder)
        builder.build()
        return "accept"
    except Py4JJavaError as e:
        return f"reject: {e.java_exception.getClass().getSimpleName()}: {e.java_exception.getMessage()}"
    except CapturedException as e:
        return f"reject: {type(e).__name__}: {e}"


@pytest.mark.spark
def test_java_reference_agrees(http, ns, iceberg_java):
    disagreements = []
    for i, case in enumerate(CASES):
        base = build_base(http, ns, f"t{i}", case)
        updates = case.updates(base["metadata"])
        java = java_verdict(iceberg_java, base["metadata"], base["metadata-location"], updates)
        resp = commit(http, ns, f"t{i}", updates=updates)
        ours = "accept" if resp.status_code == 200 else f"reject: {resp.text}"
        if case.java_accepts:  # a deliberate difference: Java accepts, the server refuses
            if not java.startswith("accept") or ours.startswith("accept"):
                disagreements.append(f"{case.name}: expected java to accept and the server to refuse: {java} / {ours}")
            continue
        if java.startswith("accept") != ours.startswith("accept"):
            disagreements.append(f"{case.name}: java {java} / server {ours}")
        if java.startswith("accept") != case.accepted:
            disagreements.append(f"{case.name}: the case expects {case.expect}, java says {java}")
    assert not disagreements, "\n".join(disagreements)


@pytest.mark.spark
def test_java_reference_agrees_on_staged_creates(http, ns, iceberg_java):
    location = "file:///tmp/unused/t"
    for name, extra, expect in STAGED:
        java = java_verdict(iceberg_java, None, None, staged_updates(extra, location))
        assert java.startswith("accept") == (expect == ("accept",)), f"{name}: {java}"


def test_history_written_before_the_rules_does_not_block_commits():
    """Pure logic: only entries a commit adds are checked, so a table whose older log entries are out
    of order (written before these checks) still commits, while a new out-of-order entry is refused."""
    from catalog import errors
    from catalog.metadata import tables

    now = int(time.time() * 1000)
    schema = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}
    md = tables.new_table(location="file:///wh/t", schema=schema, spec=None, order=None, properties={}, now_ms=now)
    md = {
        **md,
        "metadata-log": [
            {"metadata-file": "file:///wh/t/metadata/a.json", "timestamp-ms": now},
            {"metadata-file": "file:///wh/t/metadata/b.json", "timestamp-ms": now - 10 * MINUTE},
        ],
    }
    update = [{"action": "set-properties", "updates": {"k": "v"}}]
    new = tables.apply(md, [], update, base_location="file:///wh/t/metadata/c.json", now_ms=now)
    assert new["properties"]["k"] == "v"
    # the entry this commit adds (the base's last-updated-ms) would go back 10 minutes from the one before
    behind = {**md, "metadata-log": md["metadata-log"][:1], "last-updated-ms": now - 10 * MINUTE}
    with pytest.raises(errors.ValidationFailed, match="Expected sorted previous metadata log entries"):
        tables.apply(behind, [], update, base_location="file:///wh/t/metadata/c.json", now_ms=now)
