"""Views through pyiceberg and raw HTTP: one identifier space with tables, the same CAS."""

from __future__ import annotations

from collections import Counter

import pytest
import requests
from pyiceberg.exceptions import NoSuchViewError, ViewAlreadyExistsError
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from tests.support import JSON_SCHEMA, PY_SCHEMA, assert_error, purge_now, race


def version(ns: str, sql: str = "SELECT 1 AS id") -> ViewVersion:
    return ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=1_700_000_000_000,
        summary={"engine-name": "test"},
        representations=[ViewRepresentation(SQLViewRepresentation(type="sql", sql=sql, dialect="spark"))],
        default_namespace=[ns],
    )


def raw_version(ns: str, sql: str, schema_id: int = -1) -> dict:
    return {
        "version-id": 0,
        "schema-id": schema_id,
        "timestamp-ms": 1_700_000_000_001,
        "summary": {"engine-name": "test"},
        "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        "default-namespace": [ns],
    }


def test_create_load_list_drop(catalog, ns):
    created = catalog.create_view(f"{ns}.v", PY_SCHEMA, version(ns), properties={"comment": "hi"})
    assert created.metadata.current_version_id == 1
    loaded = catalog.load_view(f"{ns}.v")
    assert loaded.metadata == created.metadata  # what create answered is what load answers
    assert loaded.metadata.properties == {"comment": "hi"}
    assert catalog.view_exists(f"{ns}.v") and not catalog.view_exists(f"{ns}.nope")
    assert catalog.list_views(ns) == [(ns, "v")]
    assert catalog.list_tables(ns) == []
    with pytest.raises(ViewAlreadyExistsError):
        catalog.create_view(f"{ns}.v", PY_SCHEMA, version(ns))
    catalog.drop_view(f"{ns}.v")
    with pytest.raises(NoSuchViewError):
        catalog.load_view(f"{ns}.v")
    with pytest.raises(NoSuchViewError):
        catalog.drop_view(f"{ns}.v")


def test_tables_and_views_share_names(catalog, http, ns):
    catalog.create_table(f"{ns}.t", PY_SCHEMA)
    catalog.create_view(f"{ns}.v", PY_SCHEMA, version(ns))
    body = {"name": "t", "schema": JSON_SCHEMA, "view-version": raw_version(ns, "SELECT 1", 0)}
    assert_error(
        http.post(f"/v1/namespaces/{ns}/views", json=body),
        409,
        "AlreadyExistsException",
        f"Table with same name already exists: {ns}.t",
    )
    assert_error(
        http.post(f"/v1/namespaces/{ns}/tables", json={"name": "v", "schema": JSON_SCHEMA}),
        409,
        "AlreadyExistsException",
        f"View with same name already exists: {ns}.v",
    )
    assert_error(http.get(f"/v1/namespaces/{ns}/tables/v"), 404, "NoSuchTableException")
    assert_error(http.get(f"/v1/namespaces/{ns}/views/t"), 404, "NoSuchViewException", f"View does not exist: {ns}.t")
    rename = {"source": {"namespace": [ns], "name": "v"}, "destination": {"namespace": [ns], "name": "t"}}
    assert_error(http.post("/v1/views/rename", json=rename), 409, "AlreadyExistsException", "Table already exists")


def test_replace_adds_version_and_schema(http, ns):
    create = {"name": "v", "schema": JSON_SCHEMA, "view-version": raw_version(ns, "SELECT 1", 0), "properties": {}}
    created = http.post(f"/v1/namespaces/{ns}/views", json=create).json()
    uuid = created["metadata"]["view-uuid"]
    assert created["metadata-location"].split("/")[-1].startswith("00000-")
    new_schema = {
        **JSON_SCHEMA,
        "schema-id": 7,
        "fields": [*JSON_SCHEMA["fields"], {"id": 3, "name": "z", "type": "int", "required": False}],
    }
    commit = {
        "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
        "updates": [
            {"action": "add-schema", "schema": new_schema, "last-column-id": 3},
            {"action": "add-view-version", "view-version": raw_version(ns, "SELECT 1, 2")},
            {"action": "set-current-view-version", "view-version-id": -1},
            {"action": "set-properties", "updates": {"owner": "bi"}},
        ],
    }
    resp = http.post(f"/v1/namespaces/{ns}/views/v", json=commit)
    assert resp.status_code == 200, resp.text
    md = resp.json()["metadata"]
    assert md["current-version-id"] == 2 and [s["schema-id"] for s in md["schemas"]] == [0, 1]
    assert md["versions"][-1]["schema-id"] == 1 and md["properties"] == {"owner": "bi"}
    assert [e["version-id"] for e in md["version-log"]] == [1, 2]
    assert resp.json()["metadata-location"].split("/")[-1].startswith("00001-")
    # the same version again is reused, not duplicated
    same = {"action": "add-view-version", "view-version": raw_version(ns, "SELECT 1, 2", 1)}
    again = {**commit, "updates": [same, {"action": "set-current-view-version", "view-version-id": 2}]}
    reused = http.post(f"/v1/namespaces/{ns}/views/v", json=again).json()["metadata"]
    assert len(reused["versions"]) == 2 and reused["current-version-id"] == 2
    # as in Java, "-1" (the last added schema) means nothing when the schema was already there
    assert_error(http.post(f"/v1/namespaces/{ns}/views/v", json=commit), 400, "ValidationException", "no schema")
    stale = {**commit, "requirements": [{"type": "assert-view-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}]}
    assert_error(
        http.post(f"/v1/namespaces/{ns}/views/v", json=stale), 409, "CommitFailedException", "Requirement failed"
    )
    bad = {"updates": [{"action": "set-current-view-version", "view-version-id": 42}]}
    assert_error(http.post(f"/v1/namespaces/{ns}/views/v", json=bad), 400, "ValidationException")
    unknown = {"updates": [{"action": "drop-everything"}]}
    assert_error(http.post(f"/v1/namespaces/{ns}/views/v", json=unknown), 400, "BadRequestException")


def test_rename_across_namespaces_and_register(server, http, catalog, ns):
    catalog.create_namespace(f"{ns}_b")
    created = catalog.create_view(f"{ns}.v", PY_SCHEMA, version(ns))
    rename = {"source": {"namespace": [ns], "name": "v"}, "destination": {"namespace": [f"{ns}_b"], "name": "w"}}
    assert http.post("/v1/views/rename", json=rename).status_code == 204
    assert catalog.load_view(f"{ns}_b.w").metadata == created.metadata
    assert_error(http.post("/v1/views/rename", json=rename), 404, "NoSuchViewException")
    location = http.get(f"/v1/namespaces/{ns}_b/views/w").json()["metadata-location"]
    twice = http.post(f"/v1/namespaces/{ns}/register-view", json={"name": "again", "metadata-location": location})
    # a view owns its files
    assert_error(twice, 409, "AlreadyExistsException", "current metadata of another table or view")
    assert http("DELETE", f"/v1/namespaces/{ns}_b/views/w").status_code == 204
    # a dropped view is kept, its location owned, until its retention ends (now: released, files kept);
    # registering that same view supersedes it
    purge_now(server.url, f"{ns}_b.w")
    registered = http.post(f"/v1/namespaces/{ns}/register-view", json={"name": "again", "metadata-location": location})
    assert registered.status_code == 200 and registered.json()["metadata"]["view-uuid"] == created.metadata.view_uuid
    head = http("HEAD", f"/v1/namespaces/{ns}/views/again")
    assert head.status_code == 204 and head.content == b""


def test_concurrent_view_replaces_one_cas_winner_per_round(server, ns):
    create = {"name": "hot", "schema": JSON_SCHEMA, "view-version": raw_version(ns, "SELECT 0", 0)}
    uuid = requests.post(f"{server.url}/v1/namespaces/{ns}/views", json=create, timeout=30).json()["metadata"][
        "view-uuid"
    ]
    n = 8

    def replace(i):
        body = {
            "requirements": [{"type": "assert-view-uuid", "uuid": uuid}],
            "updates": [
                {"action": "add-view-version", "view-version": raw_version(ns, f"SELECT {i + 1}", 0)},
                {"action": "set-current-view-version", "view-version-id": -1},
            ],
        }
        return requests.post(f"{server.url}/v1/namespaces/{ns}/views/hot", json=body, timeout=60).status_code

    codes = Counter(race(n, replace))
    # the requirement holds on every rebased base, so the server rebases every loser: all succeed
    assert codes == Counter({200: n}), codes
    md = requests.get(f"{server.url}/v1/namespaces/{ns}/views/hot", timeout=30).json()["metadata"]
    assert len(md["versions"]) == n + 1 and sorted(v["version-id"] for v in md["versions"]) == list(range(1, n + 2))
