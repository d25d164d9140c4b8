"""Where a commit or a namespace may point (issue 28, items b, c, h): a commit adds only files of the
table's own, a namespace location is not inside another namespace's directory, and a location
conflict names neither the other entry nor its path. Real server processes; attacks are checked on
the response body and on the files.
"""

from __future__ import annotations

import time
import uuid

from tests.support import As, assert_error

SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}


def create_table(http, ns: str, name: str, **extra) -> dict:
    resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": SCHEMA, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()["metadata"]


def commit(http, ns: str, name: str, updates: list[dict], requirements: list[dict] | None = None, **kw):
    body = {"requirements": requirements or [], "updates": updates}
    return http.post(f"/v1/namespaces/{ns}/tables/{name}", json=body, **kw)


def snapshot_update(snapshot_id: int, manifest_list: str, sequence_number: int = 1) -> dict:
    return {
        "action": "add-snapshot",
        "snapshot": {
            "snapshot-id": snapshot_id,
            "sequence-number": sequence_number,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": manifest_list,
            "summary": {"operation": "append"},
            "schema-id": 0,
        },
    }


# --- a commit may add only files of the table's own ----------------------------------------------


def test_a_commit_adding_a_manifest_list_outside_the_table_is_refused(http, ns):
    victim = create_table(http, ns, "victim")
    mine = create_table(http, ns, "mine")
    before = http.get(f"/v1/namespaces/{ns}/tables/mine").json()["metadata-location"]
    for foreign in (
        f"{victim['location']}/metadata/snap-1.avro",  # another table's files
        "s3://somebody-elses-bucket/x/snap-1.avro",  # outside the allowed locations
        "file:///etc/passwd",
    ):
        resp = commit(http, ns, "mine", [snapshot_update(1, foreign)])
        err = assert_error(resp, 403, "ForbiddenException", "manifest-list")
        assert "victim" not in err["message"]
    assert http.get(f"/v1/namespaces/{ns}/tables/mine").json()["metadata-location"] == before  # nothing committed
    resp = commit(http, ns, "mine", [snapshot_update(1, "relative/snap.avro")])
    assert_error(resp, 400, "BadRequestException")
    # the table's own metadata folder is where Spark and pyiceberg write them
    own = f"{mine['location']}/metadata/snap-1.avro"
    resp = commit(http, ns, "mine", [snapshot_update(1, own)])
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["snapshots"][0]["manifest-list"] == own


def test_write_metadata_path_inside_the_allowed_roots_is_the_tables_own(http, ns, server):
    warehouse = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    elsewhere = f"{warehouse}/custom-{uuid.uuid4().hex[:8]}/meta"
    if "://" not in elsewhere:
        elsewhere = "file://" + elsewhere
    create_table(http, ns, "t", properties={"write.metadata.path": elsewhere})
    resp = commit(http, ns, "t", [snapshot_update(1, f"{elsewhere}/snap-1.avro")])
    assert resp.status_code == 200, resp.text
    # the snapshots it has keep loading and committing: only added files are checked
    resp = commit(http, ns, "t", [{"action": "set-properties", "updates": {"k": "v"}}])
    assert resp.status_code == 200, resp.text


# --- a namespace location inside another namespace's directory is refused ------------------------


def test_a_namespace_location_in_another_namespaces_directory_is_refused(http, server):
    warehouse = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    a, b, c = (f"nsloc_{uuid.uuid4().hex[:8]}" for _ in range(3))
    assert http.post("/v1/namespaces", json={"namespace": [a]}).status_code == 200
    create_table(http, a, "t")
    a_dir = f"{warehouse}/{a}"
    for location in (a_dir, f"{a_dir}/x", f"{a_dir}/t/data"):
        resp = http.post("/v1/namespaces", json={"namespace": [b], "properties": {"location": location}})
        err = assert_error(resp, 400, "BadRequestException", "Invalid namespace location")
        assert a not in err["message"] and warehouse not in err["message"], err
    assert http.get(f"/v1/namespaces/{b}").status_code == 404  # nothing created
    # at update too
    assert http.post("/v1/namespaces", json={"namespace": [c]}).status_code == 200
    resp = http.post(f"/v1/namespaces/{c}/properties", json={"updates": {"location": f"{a_dir}/elsewhere"}})
    assert_error(resp, 400, "BadRequestException", "Invalid namespace location")
    assert "location" not in http.get(f"/v1/namespaces/{c}").json()["properties"]
    # a directory of its own is fine, and so is a child namespace inside its parent's
    own = f"{warehouse}/own-{uuid.uuid4().hex[:8]}"
    resp = http.post(f"/v1/namespaces/{c}/properties", json={"updates": {"location": own}})
    assert resp.status_code == 200, resp.text
    resp = http.post("/v1/namespaces", json={"namespace": [a, "child"], "properties": {"location": f"{a_dir}/kids"}})
    assert resp.status_code == 200, resp.text


# --- a 409 names no entry the caller may not see, and no server path -----------------------------


def test_a_location_conflict_names_neither_the_other_entry_nor_its_path(peers):
    alice, eve = As(peers, "alice"), As(peers, "eve")
    hidden = f"hidden_{uuid.uuid4().hex[:8]}"
    assert alice.post("/v1/namespaces", json={"namespace": [hidden]}).status_code == 200
    secret = create_table(alice, hidden, "payroll_2026")
    if eve.get("/v1/namespaces/eve").status_code == 404:
        assert alice.post("/v1/namespaces", json={"namespace": ["eve"]}).status_code == 200
    assert eve.get(f"/v1/namespaces/{hidden}/tables/payroll_2026").status_code == 403  # eve may not see it
    for location in (secret["location"], secret["location"] + "/sub", secret["location"].rsplit("/", 1)[0]):
        body = {"name": f"t_{uuid.uuid4().hex[:6]}", "schema": SCHEMA, "location": location}
        resp = eve.post("/v1/namespaces/eve/tables", json=body)
        err = assert_error(resp, 409, "AlreadyExistsException", "another table or view")
        for leak in (hidden, "payroll", peers.env["CATALOG_WAREHOUSE"]):
            assert leak not in err["message"], err
    logged = [line for line in peers.log.read_text().splitlines() if "overlaps table" in line]
    assert logged and f"{hidden}.payroll_2026" in logged[-1]  # the details are in the server log
