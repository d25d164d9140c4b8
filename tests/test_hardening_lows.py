"""Hardening over HTTP (issue 28, the "lows"): what a commit may point a table at, what error bodies may
reveal, how an I/O failure in a rebase is answered, and the names and tokens the server must refuse.

Each test drives a real server process; attacks are checked on the response body and on the files.
"""

from __future__ import annotations

import json
import time
import uuid

from tests.conftest import assert_error

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


def statistics_update(snapshot_id: int, path: str) -> dict:
    return {
        "action": "set-statistics",
        "statistics": {
            "snapshot-id": snapshot_id,
            "statistics-path": path,
            "file-size-in-bytes": 1,
            "file-footer-size-in-bytes": 1,
            "blob-metadata": [],
        },
    }


# --- c. a commit may add only files of the table's own --------------------------------------------


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


def test_a_commit_setting_statistics_outside_the_table_is_refused(http, ns):
    victim = create_table(http, ns, "victim")
    mine = create_table(http, ns, "mine")
    assert commit(http, ns, "mine", [snapshot_update(1, f"{mine['location']}/metadata/s.avro")]).status_code == 200
    for update in (
        statistics_update(1, f"{victim['location']}/metadata/stats.puffin"),
        {
            "action": "set-partition-statistics",
            "partition-statistics": {
                "snapshot-id": 1,
                "statistics-path": f"{victim['location']}/data/p.parquet",
                "file-size-in-bytes": 1,
            },
        },
    ):
        err = assert_error(commit(http, ns, "mine", [update]), 403, "ForbiddenException", "statistics-path")
        assert "victim" not in err["message"]
    resp = commit(http, ns, "mine", [statistics_update(1, f"{mine['location']}/metadata/stats.puffin")])
    assert resp.status_code == 200, resp.text


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


def dump(resp) -> str:
    return json.dumps(resp.json())
