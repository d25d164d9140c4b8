"""Spec and client gaps (issue 28): names with ``/`` (pyiceberg's integration suite, Java accepts
them), the order of ``refs``, the load result's ``remote-signing-config``, ``referenced-by``, and
``unregisterTable``. Real server processes, real pyiceberg."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support import Server


def _local_warehouse(server: Server) -> Path | None:
    warehouse = server.env.get("CATALOG_WAREHOUSE", "")
    return None if warehouse.startswith("s3://") else Path(warehouse).resolve()


# -- 11. '/' in names --------------------------------------------------------------------------------


def test_a_slash_in_namespace_and_table_names(server: Server, catalog: RestCatalog) -> None:
    parent = f"p_{uuid.uuid4().hex[:8]}"
    namespace = (parent, "new/db")
    catalog.create_namespace(parent)
    catalog.create_namespace(namespace)
    assert namespace in catalog.list_namespaces(parent)
    data = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "v": pa.array(["a", "b", "c"])})
    table = catalog.create_table((*namespace, "tab/le"), schema=data.schema)
    table.append(data)
    assert sorted(catalog.load_table((*namespace, "tab/le")).scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
    assert (*namespace, "tab/le") in catalog.list_tables(namespace)
    # one segment per name, '/' encoded: not a directory "tab" holding "le"
    assert table.location().endswith(f"/{parent}/new%2Fdb/tab%2Fle"), table.location()
    if (warehouse := _local_warehouse(server)) is not None:
        home = warehouse / parent / "new%2Fdb" / "tab%2Fle"
        assert home.is_dir() and list((home / "metadata").glob("*.metadata.json")), list(warehouse.rglob("*"))
        assert list((home / "data").rglob("*.parquet"))
        assert not (warehouse / parent / "new").exists() and not (warehouse / parent / "new%2Fdb" / "tab").exists()
    catalog.drop_table((*namespace, "tab/le"))
    assert catalog.list_tables(namespace) == []
    catalog.drop_namespace(namespace)
    assert namespace not in catalog.list_namespaces(parent)


@pytest.mark.parametrize("name", ["..", ".", "../x", "a/../b", "x/..", "a/./b", "a\\b"])
def test_relative_names_stay_refused(server: Server, http, ns: str, name: str) -> None:
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
    resp = http("POST", f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": schema})
    assert resp.status_code == 400, resp.text
    resp = http("POST", "/v1/namespaces", json={"namespace": [ns, name]})
    assert resp.status_code == 400, resp.text
    if (warehouse := _local_warehouse(server)) is not None:
        assert not (warehouse / ns).exists() or not any((warehouse / ns).iterdir())
        assert not (warehouse / "x").exists() and not (warehouse / "b").exists()


def test_an_encoded_relative_segment_in_a_location_is_refused(server: Server, http, ns: str) -> None:
    """``..%2Fx`` is not a separator, but a FileIO that decodes it would climb: refused like ``..``."""
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
    root = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    for bad in ("..%2F..%2Fescape", "x%2F..%2F..%2F..", "%2e%2e%2F%2e%2e%2Fescape"):
        body = {"name": f"t_{uuid.uuid4().hex[:6]}", "schema": schema, "location": f"{root}/{quote(ns)}/{bad}"}
        resp = http("POST", f"/v1/namespaces/{ns}/tables", json=body)
        assert resp.status_code == 400, (bad, resp.text)
        assert "'.' and '..'" in resp.json()["error"]["message"]
    # '%2F' in a segment is otherwise fine: one directory, inside the warehouse
    body = {"name": "fine", "schema": schema, "location": f"{root}/{quote(ns)}/a%2Fb"}
    resp = http("POST", f"/v1/namespaces/{ns}/tables", json=body)
    assert resp.status_code == 200, resp.text


# -- 11. the order of refs, as Java writes it --------------------------------------------------------


_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
_AT = "s3://warehouse/db/t"


def _snapshot(i: int, fv: int, ts: int) -> dict:
    snap = {"snapshot-id": i, "timestamp-ms": ts, "manifest-list": f"{_AT}/metadata/snap-{i}.avro"}
    snap |= {"summary": {"operation": "append"}, "schema-id": 0}
    if fv >= 2:
        snap["sequence-number"] = i
    if fv >= 3:
        snap["first-row-id"], snap["added-rows"] = (i - 1) * 10, 10
    return snap


def _ref(name: str, snapshot_id: int, kind: str = "branch") -> dict:
    return {"action": "set-snapshot-ref", "ref-name": name, "type": kind, "snapshot-id": snapshot_id}


@pytest.mark.spark
@pytest.mark.parametrize("fv", [1, 2, 3])
def test_refs_are_written_in_javas_order(java, fv: int) -> None:
    """Many branches and tags, added, moved, removed and re-added over several commits (the map grows
    past its capacity): every commit's ``refs`` has Java's key order, not only its content."""
    import time

    from catalog.metadata import tables

    created = java.ask(
        {"op": "new_table", "location": _AT, "schema": _SCHEMA, "properties": {"format-version": str(fv)}}
    )
    base = created["result"]
    start = base["last-updated-ms"] - 1000
    names = ["main", "dev", "audit", "b", "a", "tag-2024", "release/1.0", "ü-branch", "x" * 40, "z"]
    commits = [
        [{"action": "add-snapshot", "snapshot": _snapshot(1, fv, start + 1)}, _ref("main", 1), _ref("dev", 1)],
        [_ref(n, 1, "tag" if n.startswith("tag") else "branch") for n in names[2:]],
        [{"action": "remove-snapshot-ref", "ref-name": "audit"}, {"action": "remove-snapshot-ref", "ref-name": "b"}],
        [
            {"action": "add-snapshot", "snapshot": {**_snapshot(2, fv, start + 2), "parent-snapshot-id": 1}},
            _ref("b", 2),
            _ref("dev", 2),
            *[_ref(f"br{i}", 2) for i in range(14)],
        ],
    ]
    for i, updates in enumerate(commits):
        theirs = java.ask(
            {"op": "table", "base": base, "base_location": f"{_AT}/metadata/{i:05d}.metadata.json",
             "requirements": [], "updates": updates}
        )  # fmt: skip
        assert theirs.get("status") == 200, theirs
        ours = tables.apply(base, [], updates, base_location=f"{_AT}/metadata/{i:05d}.metadata.json",
                            now_ms=int(time.time() * 1000))  # fmt: skip
        assert list(ours["refs"]) == list(theirs["result"]["refs"]), (
            i,
            list(ours["refs"]),
            list(theirs["result"]["refs"]),
        )
        assert ours["refs"] == theirs["result"]["refs"]
        base = theirs["result"]


# -- 12. unregisterTable, referenced-by, remote-signing-config ---------------------------------------


def _files(server: Server, ns: str) -> list[str]:
    warehouse = _local_warehouse(server)
    if warehouse is not None:
        return sorted(str(p) for p in (warehouse / ns).rglob("*") if p.is_file())
    import boto3
    from botocore.config import Config

    env = server.env
    s3 = boto3.client(
        "s3",
        endpoint_url=env["CATALOG_S3_ENDPOINT"],
        aws_access_key_id=env["CATALOG_S3_ACCESS_KEY_ID"],
        aws_secret_access_key=env["CATALOG_S3_SECRET_ACCESS_KEY"],
        region_name=env.get("CATALOG_S3_REGION", "us-east-1"),
        config=Config(s3={"addressing_style": "path"}),
    )
    bucket, _, prefix = env["CATALOG_WAREHOUSE"].removeprefix("s3://").partition("/")
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"{prefix.strip('/')}/{ns}/".lstrip("/"))
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_unregister_removes_the_entry_and_keeps_every_file(server: Server, catalog: RestCatalog, http, ns) -> None:
    data = pa.table({"id": pa.array([1, 2], pa.int64())})
    table = catalog.create_table((ns, "t"), schema=data.schema)
    table.append(data)
    table.append(data)
    loaded = http("GET", f"/v1/namespaces/{ns}/tables/t").json()
    before = _files(server, ns)
    assert len(before) >= 5, before

    resp = http("POST", f"/v1/namespaces/{ns}/tables/t/unregister", headers={"Idempotency-Key": f"k-{ns}"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["metadata-location"] == loaded["metadata-location"]
    assert body["metadata"] == loaded["metadata"] and len(body["metadata"]["snapshots"]) == 2
    assert _files(server, ns) == before, "every file is kept"
    assert http("GET", f"/v1/namespaces/{ns}/tables/t").status_code == 404
    assert catalog.list_tables(ns) == []
    # a retry with the same key gets the same answer, and a commit after it fails
    again = http("POST", f"/v1/namespaces/{ns}/tables/t/unregister", headers={"Idempotency-Key": f"k-{ns}"})
    assert again.status_code == 200 and again.json() == body
    assert http("POST", f"/v1/namespaces/{ns}/tables/t/unregister").status_code == 404
    commit = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"a": "b"}}]}
    assert http("POST", f"/v1/namespaces/{ns}/tables/t", json=commit).status_code == 404
    # what it answered registers the same table back, data and all
    registered = catalog.register_table((ns, "back"), body["metadata-location"])
    assert registered.scan().to_arrow().num_rows == 4
    # the audit trail has it
    if server.log.exists():
        lines = [line for line in server.log.read_text().splitlines() if "unregister_table" in line]
        assert any('"logger":"catalog.audit"' in line and '"status":200' in line for line in lines), lines[-5:]
    assert "unregister" in " ".join(http("GET", "/v1/config").json()["endpoints"])


def test_referenced_by_is_validated(http, ns) -> None:
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
    assert http("POST", f"/v1/namespaces/{ns}/tables", json={"name": "t", "schema": schema}).status_code == 200
    view = {
        "name": "v",
        "schema": schema,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": 1,
            "schema-id": 0,
            "summary": {},
            "default-namespace": [ns],
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
        },
        "properties": {},
    }
    assert http("POST", f"/v1/namespaces/{ns}/views", json=view).status_code == 200
    good = [f"{ns}%1Fv", f"prod%1Fanalytics%1Fquarterly%2Cv,{ns}%1Fv", "a%1Fb%1Fc"]
    bad = ["justaview", f"{ns}%1F", "%1Fv", f"{ns}%1Fv,", ",".join([f"{ns}%1Fv"] * 33)]
    for path in (
        f"/v1/namespaces/{ns}/tables/t",
        f"/v1/namespaces/{ns}/views/v",
        f"/v1/namespaces/{ns}/tables/t/credentials",
    ):
        for value in good:
            resp = http("GET", f"{path}?referenced-by={value}")
            assert resp.status_code == 200, (path, value, resp.text)
        for value in bad:
            resp = http("GET", f"{path}?referenced-by={value}")
            assert resp.status_code == 400, (path, value, resp.text)
            assert resp.json()["error"]["type"] == "BadRequestException"


def test_a_remote_signing_offer_carries_remote_signing_config(tmp_path) -> None:
    """The load result's ``remote-signing-config`` (the contract's RemoteSigningConfig) next to the
    ``config`` properties older clients read. A staged create answers a load result without touching S3."""
    import requests

    from tests.support import free_port, start_server

    env = {
        "CATALOG_WAREHOUSE": "s3://lake/wh",
        "CATALOG_S3_ENDPOINT": f"http://127.0.0.1:{free_port()}",
        "CATALOG_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "CATALOG_S3_SECRET_ACCESS_KEY": "secret-example",
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_S3_REMOTE_SIGNING": "true",
    }
    srv = start_server(tmp_path, extra_env=env)
    try:
        requests.post(f"{srv.url}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).raise_for_status()
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "a", "type": "long", "required": False}],
        }
        create = {"name": "t", "schema": schema, "stage-create": True}
        for header, offered in (("remote-signing", True), ("vended-credentials", True), (None, False)):
            headers = {"X-Iceberg-Access-Delegation": header} if header else {}
            resp = requests.post(f"{srv.url}/v1/namespaces/n/tables", json=create, headers=headers, timeout=10)
            assert resp.status_code == 200, resp.text
            body = resp.json()
            if offered:
                assert body["config"]["s3.remote-signing-enabled"] == "true"
                assert body["remote-signing-config"] == {"properties": {}, "headers": {}}
            else:
                assert "remote-signing-config" not in body and "s3.remote-signing-enabled" not in body["config"]
            assert "secret-example" not in resp.text
    finally:
        srv.stop()
