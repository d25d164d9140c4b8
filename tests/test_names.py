"""Names of namespaces and tables as paths: ``/`` is allowed in a name (pyiceberg's integration suite
uses it, Java accepts it) and is one encoded path segment, never a directory; relative names and
encoded relative segments in a location stay refused. Real server processes, real pyiceberg.
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.support import Server, local_warehouse


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
    if (warehouse := local_warehouse(server)) is not None:
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
    if (warehouse := local_warehouse(server)) is not None:
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
