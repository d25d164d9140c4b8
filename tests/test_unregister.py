"""``unregisterTable``: the entry goes, every file stays, and what it answers registers the table back.
Real server processes, real pyiceberg."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from tests.support import Server, local_warehouse


def _files(server: Server, ns: str) -> list[str]:
    warehouse = local_warehouse(server)
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
