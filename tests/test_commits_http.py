"""updateTable and transactions/commit over raw HTTP: requirements, bad input, atomicity."""

from __future__ import annotations

import sqlite3
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.support import JSON_SCHEMA, Http, assert_error, commit, create, load, start_server

SET_PROP = {"action": "set-properties", "updates": {"k": "v"}}

WRONG = [
    ({"type": "assert-table-uuid", "uuid": str(uuid.UUID(int=1))}, "UUID does not match"),
    (
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 42},
        "branch or tag main is missing, expected 42",
    ),
    ({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 7}, "expected id 7 != 2"),
    ({"type": "assert-current-schema-id", "current-schema-id": 3}, "expected id 3 != 0"),
    ({"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 1005}, "expected id 1005 != 999"),
    ({"type": "assert-default-spec-id", "default-spec-id": 4}, "expected id 4 != 0"),
    ({"type": "assert-default-sort-order-id", "default-sort-order-id": 9}, "expected id 9 != 0"),
]


@pytest.mark.parametrize("requirement,detail", WRONG, ids=[r["type"] for r, _ in WRONG])
def test_each_failed_requirement_is_a_409_and_changes_nothing(http, ns, requirement, detail):
    before = create(http, ns, "t")
    err = assert_error(commit(http, ns, "t", [requirement], [SET_PROP]), 409, "CommitFailedException")
    assert err["message"].startswith("Requirement failed") and detail in err["message"], err
    assert requirement["type"] in err["message"]
    after = load(http, ns, "t")
    assert after["metadata-location"] == before["metadata-location"]
    assert "k" not in after["metadata"]["properties"]


def test_assert_create_on_existing_table_is_409(http, ns):
    create(http, ns, "exists")
    resp = commit(
        http, ns, "exists", [{"type": "assert-create"}], [{"action": "upgrade-format-version", "format-version": 2}]
    )
    assert resp.status_code == 409 and resp.json()["error"]["type"] in (
        "CommitFailedException",
        "AlreadyExistsException",
    )


def test_assert_ref_snapshot_id_null_means_ref_must_not_exist(http, ns):
    create(http, ns, "t")
    ok = commit(http, ns, "t", [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}], [SET_PROP])
    assert ok.status_code == 200, ok.text


def test_all_requirements_holding_commits(http, ns):
    created = create(http, ns, "t")
    meta = created["metadata"]
    requirements = [
        {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None},
        {"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2},
        {"type": "assert-current-schema-id", "current-schema-id": 0},
        {"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 999},
        {"type": "assert-default-spec-id", "default-spec-id": 0},
        {"type": "assert-default-sort-order-id", "default-sort-order-id": 0},
    ]
    resp = commit(http, ns, "t", requirements, [SET_PROP])
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["metadata"]["properties"]["k"] == "v"
    assert body["metadata-location"].split("/")[-1].startswith("00001-")
    assert body["metadata"]["metadata-log"][-1]["metadata-file"] == created["metadata-location"]
    assert resp.headers["ETag"]


def test_noop_commit_writes_nothing(http, ns):
    created = create(http, ns, "t")
    resp = commit(http, ns, "t", [{"type": "assert-current-schema-id", "current-schema-id": 0}], [])
    assert resp.status_code == 200 and resp.json()["metadata-location"] == created["metadata-location"]


BAD_BODIES = [
    (b"{not json", "malformed JSON"),
    (b"[]", "not an object"),
    (b'{"updates": [{"action": "explode"}]}', "unknown action"),
    (b'{"requirements": [{"type": "assert-nothing"}]}', "unknown requirement"),
    (b'{"updates": "set-properties"}', "wrong type"),
    (b'{"updates": [{"action": "set-properties", "updates": ["k"]}]}', "properties not an object"),
    (b'{"updates": [{"action": "add-snapshot"}]}', "missing field"),
    (b'{"requirements": [{"type": "assert-current-schema-id", "current-schema-id": "zero"}]}', "wrong type"),
]


@pytest.mark.parametrize("body,why", BAD_BODIES, ids=[w for _, w in BAD_BODIES])
def test_malformed_commit_is_400_and_changes_nothing(http, ns, body, why):
    before = create(http, ns, "t")
    resp = http.post(f"/v1/namespaces/{ns}/tables/t", data=body, headers={"Content-Type": "application/json"})
    assert_error(resp, 400, "BadRequestException")
    assert load(http, ns, "t")["metadata-location"] == before["metadata-location"]


INVALID_UPDATES = [
    {"action": "set-current-schema", "schema-id": 99},
    {"action": "set-default-spec", "spec-id": 5},
    {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 123},
    {"action": "set-location", "location": "file:///tmp/../etc"},
]


@pytest.mark.parametrize("update", INVALID_UPDATES, ids=[u["action"] for u in INVALID_UPDATES])
def test_invalid_update_is_400_and_changes_nothing(http, ns, update):
    before = create(http, ns, "t")
    resp = commit(http, ns, "t", [], [update])
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["type"] in ("ValidationException", "BadRequestException")
    assert load(http, ns, "t")["metadata-location"] == before["metadata-location"]


def test_removals_of_what_is_not_there_change_nothing(http, ns):
    """As in Java: removing an unknown snapshot id or a missing property is ignored, not an error."""
    before = create(http, ns, "t")
    resp = commit(http, ns, "t", [], [{"action": "remove-snapshots", "snapshot-ids": [1]}])
    assert resp.status_code == 200 and resp.json()["metadata-location"] == before["metadata-location"], resp.text
    resp = commit(http, ns, "t", [], [{"action": "remove-properties", "removals": ["never-set"]}])
    assert resp.status_code == 200 and resp.json()["metadata"]["properties"] == before["metadata"]["properties"]


def test_commit_to_missing_table_or_namespace_is_404(http, ns):
    assert_error(
        commit(http, ns, "missing", [], [SET_PROP]), 404, "NoSuchTableException", f"Table does not exist: {ns}.missing"
    )
    assert_error(commit(http, f"{ns}_gone", "missing", [], [SET_PROP]), 404, "NoSuchTableException")


def test_identifier_must_match_path(http, ns):
    create(http, ns, "t")
    resp = http.post(
        f"/v1/namespaces/{ns}/tables/t",
        json={"identifier": {"namespace": [ns], "name": "other"}, "requirements": [], "updates": [SET_PROP]},
    )
    assert_error(resp, 400, "BadRequestException")


@pytest.mark.parametrize(
    "body",
    [
        {"name": "a/../b", "schema": JSON_SCHEMA},  # '/' alone is allowed (tests/test_names.py)
        {"name": "..", "schema": JSON_SCHEMA},
        {"name": "", "schema": JSON_SCHEMA},
        {"name": "ok", "schema": JSON_SCHEMA, "location": "file:///tmp/wh/../../etc"},
        {"name": "ok", "schema": {"type": "struct", "fields": [{"id": 1, "name": "x", "type": "nope"}]}},
        {"name": "ok"},
        {
            "name": "ok",
            "schema": JSON_SCHEMA,
            "partition-spec": {
                "spec-id": 0,
                "fields": [{"source-id": 9, "field-id": 1000, "name": "p", "transform": "identity"}],
            },
        },
        {"name": 5, "schema": JSON_SCHEMA},
    ],
    ids=[
        "relative-segment",
        "dotdot",
        "empty",
        "escaping-location",
        "bad-schema",
        "no-schema",
        "spec-on-missing-column",
        "int-name",
    ],
)
def test_bad_create_is_400(http, ns, body):
    resp = http.post(f"/v1/namespaces/{ns}/tables", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["code"] == 400
    assert http.get(f"/v1/namespaces/{ns}/tables").json()["identifiers"] == []


def test_transaction_all_or_nothing(http, ns):
    a, b = create(http, ns, "a"), create(http, ns, "b")
    good = {"identifier": {"namespace": [ns], "name": "a"}, "requirements": [], "updates": [SET_PROP]}
    bad = {
        "identifier": {"namespace": [ns], "name": "b"},
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": 5}],
        "updates": [SET_PROP],
    }
    resp = http.post("/v1/transactions/commit", json={"table-changes": [good, bad]})
    assert_error(resp, 409, "CommitFailedException", "Requirement failed")
    assert load(http, ns, "a")["metadata-location"] == a["metadata-location"]
    assert load(http, ns, "b")["metadata-location"] == b["metadata-location"]
    # only the files of the committed versions exist: the failed attempt cleaned up what it wrote
    bad["requirements"] = [{"type": "assert-current-schema-id", "current-schema-id": 0}]
    resp = http.post("/v1/transactions/commit", json={"table-changes": [good, bad]})
    assert resp.status_code == 204, resp.text
    assert load(http, ns, "a")["metadata"]["properties"]["k"] == "v"
    assert load(http, ns, "b")["metadata"]["properties"]["k"] == "v"


def test_transaction_bad_input(http, ns):
    create(http, ns, "a")
    assert_error(http.post("/v1/transactions/commit", json={"table-changes": []}), 400, "BadRequestException")
    no_ident = {"requirements": [], "updates": [SET_PROP]}
    assert_error(http.post("/v1/transactions/commit", json={"table-changes": [no_ident]}), 400, "BadRequestException")
    missing = {"identifier": {"namespace": [ns], "name": "zzz"}, "requirements": [], "updates": [SET_PROP]}
    assert_error(http.post("/v1/transactions/commit", json={"table-changes": [missing]}), 404, "NoSuchTableException")
    twice = {"identifier": {"namespace": [ns], "name": "a"}, "requirements": [], "updates": [SET_PROP]}
    resp = http.post("/v1/transactions/commit", json={"table-changes": [twice, twice]})
    assert resp.status_code == 400


def test_register_errors(http, ns):
    created = create(http, ns, "t")
    resp = http.post(
        f"/v1/namespaces/{ns}/register", json={"name": "t", "metadata-location": created["metadata-location"]}
    )
    assert_error(resp, 409, "AlreadyExistsException", f"Table already exists: {ns}.t")
    missing = created["metadata-location"].replace("00000-", "00009-")
    assert_error(
        http.post(f"/v1/namespaces/{ns}/register", json={"name": "r", "metadata-location": missing}),
        404,
        "NotFoundException",
    )
    resp = http.post(  # overwrite replaces an entry of that name, never takes another's files
        f"/v1/namespaces/{ns}/register",
        json={"name": "r2", "metadata-location": created["metadata-location"], "overwrite": True},
    )
    assert_error(resp, 409, "AlreadyExistsException", "is the current metadata of another table or view")
    resp = http.post(  # the table itself may be pointed back at one of its own files
        f"/v1/namespaces/{ns}/register",
        json={"name": "t", "metadata-location": created["metadata-location"], "overwrite": True},
    )
    assert resp.status_code == 200, resp.text


def test_a_commit_waiting_for_another_process_does_not_hold_up_the_server(tmp_path):
    """On SQLite and local disk a commit runs on the event loop only when nothing can make it wait.
    While another process holds the database's write lock, a commit waits for it on a worker thread
    and the server goes on answering, loads of the same table included; once the lock is released
    the commit lands."""
    server = start_server(tmp_path / "server")
    try:
        with Http(server.url) as http:
            assert http.post("/v1/namespaces", json={"namespace": ["n"]}).status_code == 200
            create(http, "n", "t")
            other = sqlite3.connect(tmp_path / "server" / "catalog.db", isolation_level=None)
            other.execute("BEGIN IMMEDIATE")
            try:
                with ThreadPoolExecutor(1) as pool:
                    body = {"updates": [{"action": "set-properties", "updates": {"a": "1"}}]}
                    url = f"{server.url}/v1/namespaces/n/tables/t"
                    pending = pool.submit(requests.post, url, json=body, timeout=120)
                    deadline = time.monotonic() + 60
                    while _to_thread(server.url, "writer") < 1:  # the commit met the lock, went to a thread
                        assert time.monotonic() < deadline and not pending.done(), "the commit never met the lock"
                        time.sleep(0.05)
                    for _ in range(20):
                        assert "a" not in load(http, "n", "t")["metadata"]["properties"]
                    assert not pending.done()  # still waiting for the other process
                    other.execute("ROLLBACK")
                    landed = pending.result()
            finally:
                other.close()
            assert landed.status_code == 200, landed.text
            assert load(http, "n", "t")["metadata"]["properties"]["a"] == "1"
    finally:
        server.stop()


def _to_thread(url: str, reason: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    series = f'catalog_commit_to_thread_total{{reason="{reason}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(series))
