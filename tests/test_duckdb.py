"""DuckDB 1.5 as a client of the catalog, on both backends: its iceberg extension ATTACHes the catalog
over REST, reads what pyiceberg wrote, writes with CTAS (a staged create), INSERT, UPDATE, DELETE and
MERGE (every one a ``POST /v1/transactions/commit``), creates namespaces and tables, adds a column and
drops a table, and a stale DuckDB transaction gets the server's 409.
pyiceberg reads every result back. (DuckDB reading Spark's tables is in tests/test_v3.py, with the
Spark session that module starts anyway.)

The extensions come from the ``duckdb-extension-*`` wheels of the test extra, so nothing is
downloaded. On S3, DuckDB takes its own S3 secret: it does not use the endpoint in /v1/config.
"""

from __future__ import annotations

import os
import uuid

import boto3
import pyarrow as pa
import pytest
import requests

from tests.support import Server

ARROW_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.string())])


def pyiceberg_rows(catalog, table: str) -> list[tuple]:
    arrow = catalog.load_table(table).scan().to_arrow()
    return sorted(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist(), strict=True))


def conflicts(server: Server) -> float:
    """The server's count of commits refused because a requirement failed (a stale client)."""
    for line in requests.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith('catalog_commit_conflict_total{cause="requirement"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_duckdb_reads_and_changes_a_pyiceberg_table(server: Server, catalog, ns: str, duck):
    table = catalog.create_table(f"{ns}.events", ARROW_SCHEMA)
    table.append(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}, schema=ARROW_SCHEMA))
    t = f'lake."{ns}".events'

    assert (ns, "events") in {(r[1], r[2]) for r in duck.execute("SHOW ALL TABLES").fetchall()}
    assert duck.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == [(1, "a"), (2, "b"), (3, "c")]

    duck.execute(f"INSERT INTO {t} VALUES (4, 'd'), (5, 'e')")
    assert duck.execute(f"UPDATE {t} SET v = 'B' WHERE id = 2").fetchall() == [(1,)]
    assert duck.execute(f"DELETE FROM {t} WHERE id IN (3, 5)").fetchall() == [(2,)]
    expected = [(1, "a"), (2, "B"), (4, "d")]
    assert duck.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == expected
    assert pyiceberg_rows(catalog, f"{ns}.events") == expected

    # What pyiceberg commits next, DuckDB's next statement sees.
    catalog.load_table(f"{ns}.events").append(pa.table({"id": [6], "v": ["f"]}, schema=ARROW_SCHEMA))
    assert duck.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == [*expected, (6, "f")]


def test_duckdb_create_table_as_select_then_dml_and_ddl(server: Server, catalog, ns: str, duck):
    t = f'lake."{ns}".squares'
    # DuckDB's default CTAS: a staged create, then one transactions/commit with the data. Its
    # manifests go into <location>/metadata before the create commits, so the directory must exist.
    duck.execute(f"CREATE TABLE {t} AS SELECT range AS id, 'sq' || (range * range) AS v FROM range(5)")
    duck.execute(f"INSERT INTO {t} SELECT range AS id, 'big' AS v FROM range(10, 12)")
    duck.execute(f"UPDATE {t} SET v = 'zero' WHERE id = 0")
    duck.execute(f"DELETE FROM {t} WHERE id >= 3 AND id < 11")
    duck.execute(
        f"""MERGE INTO {t} AS t USING (SELECT 2 AS id, 'merged' AS v UNION ALL SELECT 20, 'new') AS s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.id, s.v)"""
    )
    expected = [(0, "zero"), (1, "sq1"), (2, "merged"), (11, "big"), (20, "new")]
    assert duck.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == expected
    assert pyiceberg_rows(catalog, f"{ns}.squares") == expected

    loaded = catalog.load_table(f"{ns}.squares")
    assert len(loaded.history()) == 5  # one snapshot per statement: CTAS, INSERT, UPDATE, DELETE, MERGE

    # A namespace, a plain CREATE TABLE (also staged, committed without data), an INSERT into it and a
    # new column, which pyiceberg sees; then DROP TABLE.
    duck.execute(f'CREATE SCHEMA lake."{ns}_duck"')
    plain = f'lake."{ns}_duck".plain'
    duck.execute(f"CREATE TABLE {plain} (id BIGINT, v VARCHAR)")
    duck.execute(f"INSERT INTO {plain} SELECT id, v FROM {t} WHERE id < 2")
    duck.execute(f"ALTER TABLE {plain} ADD COLUMN note VARCHAR")
    assert pyiceberg_rows(catalog, f"{ns}_duck.plain") == expected[:2]
    assert catalog.load_table(f"{ns}_duck.plain").schema().column_names == ["id", "v", "note"]
    duck.execute(f"DROP TABLE {plain}")
    assert not catalog.table_exists(f"{ns}_duck.plain")
    if server.backend == "sqlite":  # the table's files are under its own location on local disk
        assert loaded.location().startswith(f"file://{server.env['CATALOG_WAREHOUSE']}/{ns}/squares")


def test_a_stale_duckdb_transaction_gets_409_and_changes_nothing(server: Server, catalog, ns: str, duck):
    """DuckDB reads the table in a transaction, pyiceberg commits, DuckDB's COMMIT is refused. The
    transaction rewrites rows (not a pure append, which a server might rebase), so it must fail."""
    catalog.create_table(f"{ns}.hot", ARROW_SCHEMA).append(pa.table({"id": [1], "v": ["first"]}, schema=ARROW_SCHEMA))
    t = f'lake."{ns}".hot'
    before = conflicts(server)
    duck.execute("BEGIN")
    duck.execute(f"UPDATE {t} SET v = 'from duckdb' WHERE id = 1")  # DuckDB has read the table's snapshot
    duck.execute(f"INSERT INTO {t} VALUES (2, 'from duckdb')")
    catalog.load_table(f"{ns}.hot").append(pa.table({"id": [3], "v": ["from pyiceberg"]}, schema=ARROW_SCHEMA))
    with pytest.raises(Exception, match="Conflict_409"):
        duck.execute("COMMIT")
    assert conflicts(server) == before + 1  # the server refused it (a failed requirement), not DuckDB
    assert pyiceberg_rows(catalog, f"{ns}.hot") == [(1, "first"), (3, "from pyiceberg")]
    # Run again, the transaction sees pyiceberg's row and commits.
    duck.execute(f"UPDATE {t} SET v = 'from duckdb' WHERE id = 1")
    assert duck.execute(f"SELECT id, v FROM {t} ORDER BY id").fetchall() == [(1, "from duckdb"), (3, "from pyiceberg")]


def test_staged_create_prepares_only_its_own_location(server: Server, catalog, ns: str, http, tmp_path):
    """A staged create makes the table's directories (local disk) only where a create may put the
    table: a hostile location is refused before anything is created, and nothing is persisted."""
    url = f"/v1/namespaces/{ns}/tables"
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}
    body = {"name": "staged", "schema": schema, "stage-create": True}
    resp = http.post(url, json=body)
    assert resp.status_code == 200, resp.text
    location = resp.json()["metadata"]["location"]
    assert http.get(f"{url}/staged").status_code == 404  # nothing persisted

    catalog.create_table(f"{ns}.taken", ARROW_SCHEMA)
    warehouse = server.env["CATALOG_WAREHOUSE"].rstrip("/")
    outside = tmp_path / f"outside-{uuid.uuid4().hex[:6]}"
    hostile = {
        str(outside): 403,  # outside the warehouse
        f"{warehouse}/{ns}/../../{outside.name}": 400,  # climbs out
        f"{location.rsplit('/', 1)[0]}/taken/inner": 409,  # inside another table
    }
    for bad, status in hostile.items():
        resp = http.post(url, json={**body, "name": f"h{status}", "location": bad})
        assert resp.status_code == status, (bad, resp.text)
        assert set(resp.json()) == {"error"}
    assert not outside.exists() and not (tmp_path / outside.name).exists()
    if server.backend == "sqlite":
        path = location.removeprefix("file://")
        assert sorted(os.listdir(path)) == ["data", "metadata"] and not os.listdir(f"{path}/metadata")
        assert not os.path.exists(f"{warehouse}/{ns}/taken/inner")
    else:  # S3 has no directories: the staged create wrote nothing to the bucket
        s3 = boto3.client(
            "s3",
            endpoint_url=server.env["CATALOG_S3_ENDPOINT"],
            region_name=server.env["CATALOG_S3_REGION"],
            aws_access_key_id=server.env["CATALOG_S3_ACCESS_KEY_ID"],
            aws_secret_access_key=server.env["CATALOG_S3_SECRET_ACCESS_KEY"],
        )
        bucket, _, key = location.removeprefix("s3://").partition("/")
        assert s3.list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount") == 0
