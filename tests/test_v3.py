"""Format v3 end to end with real engines, on both backends: Spark 3.5 + Iceberg 1.9 creates v3 tables
(plain CREATE TABLE, CTAS/RTAS — staged creates and replaces — and an upgrade of a v2 table that already
holds data), writes from several sessions at once and runs UPDATE / DELETE / MERGE in both row-level
modes; pyiceberg and DuckDB read the results.

What is checked is row lineage, which the catalog owns: each commit's ``first-row-id`` must be the
table's ``next-row-id`` at that moment and ``next-row-id`` must advance by the snapshot's
``added-rows``. When it does not, readers hand out the same ``_row_id`` twice. So every test reads
``_row_id`` and ``_last_updated_sequence_number`` back through Spark and checks them against a model,
checks the snapshot chain in the metadata that loadTable returns, and checks time travel and
``expire_snapshots``.

Spark 3.5's *vectorized* Parquet reader in Iceberg 1.9 gives every row of a data file the file's
``first_row_id`` (no position offset: apache/iceberg#12928 added lineage to vectorized reads later).
That is a reader bug, not a catalog one, so this module reads with vectorization off.

Spark 3.5 + Iceberg 1.9 does not carry lineage through row-level rewrites: an updated row, and in
copy-on-write every row of a rewritten file, is written as a new row (new ``_row_id``,
``_last_updated_sequence_number`` = the rewrite's sequence number). The spec allows that; the model
below accepts it and nothing stricter.
"""

from __future__ import annotations

import threading
from urllib.parse import quote

import pytest
import requests

from tests.services import duckdb_connection
from tests.support import Server, register_catalog, skip_or_fail, sql_rows


@pytest.fixture
def ns(spark_ns: str) -> str:
    """In this module a namespace is a Spark one: ``<catalog>.<namespace>`` (conftest's ``spark_ns``;
    conftest's ``spark`` is the module's session and ``lake`` the backend's Spark catalog)."""
    return spark_ns


pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(scope="module", autouse=True)
def _row_lineage_reads(spark):
    spark.conf.set("spark.sql.iceberg.vectorization.enabled", "false")  # see the module docstring
    yield
    spark.conf.unset("spark.sql.iceberg.vectorization.enabled")


# --- helpers ----------------------------------------------------------------------------------------


def load_metadata(server: Server, table: str) -> dict:
    """The table's metadata as loadTable returns it over HTTP. ``table``: ``namespace.name``."""
    namespace, name = table.split(".")
    resp = requests.get(f"{server.url}/v1/namespaces/{quote(namespace)}/tables/{quote(name)}", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["metadata"]


def current_seq(meta: dict) -> int:
    (snap,) = [s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"]]
    return snap["sequence-number"]


def check_row_id_chain(meta: dict) -> None:
    """Snapshots in commit order: each v3 snapshot's first-row-id is the next-row-id left by the one
    before (0 for the first: a new v3 table or the upgrade starts at 0), and the table's next-row-id
    is the sum of every snapshot's added-rows. Snapshots without first-row-id (written while the table
    was v2) come only before all others."""
    assert meta["format-version"] == 3
    ordered = sorted(meta["snapshots"], key=lambda s: s["sequence-number"])
    lineage = [s for s in ordered if "first-row-id" in s]
    assert ordered[len(ordered) - len(lineage) :] == lineage, "a v3 snapshot without first-row-id"
    next_row_id = 0
    for snap in lineage:
        assert snap["first-row-id"] == next_row_id, (
            f"snapshot {snap['snapshot-id']} (sequence number {snap['sequence-number']}) has first-row-id "
            f"{snap['first-row-id']}, but the rows added before it end at {next_row_id}"
        )
        assert snap.get("added-rows", -1) >= 0, snap
        next_row_id += snap["added-rows"]
    assert meta["next-row-id"] == next_row_id, (meta["next-row-id"], next_row_id)


def lineage(spark, table: str, version: int | None = None) -> dict[int, tuple]:
    """id -> (v, _row_id, _last_updated_sequence_number), asserting ids and _row_ids are unique."""
    at = f" VERSION AS OF {version}" if version is not None else ""
    found = sql_rows(spark, f"SELECT id, v, _row_id, _last_updated_sequence_number FROM {table}{at}")
    by_id = {r[0]: r[1:] for r in found}
    assert len(by_id) == len(found), "duplicate ids"
    row_ids = sorted(r[2] for r in found)
    assert None not in row_ids, f"rows without a _row_id in {table}{at}"
    duplicates = sorted({i for i in row_ids if row_ids.count(i) > 1})
    assert not duplicates, f"{table}{at}: _row_id used more than once: {duplicates[:20]} ({len(found)} rows)"
    return by_id


def pyiceberg_rows(server: Server, table: str) -> dict[int, str]:
    arrow = server.catalog().load_table(table).scan().to_arrow()
    return dict(zip(arrow.column("id").to_pylist(), arrow.column("v").to_pylist(), strict=True))


def duckdb_rows(server: Server, table: str) -> dict[int, str]:
    """DuckDB's iceberg extension reading ``table`` through the REST catalog. Skips (fails in CI) when
    DuckDB is not installed: call it last in a test."""
    try:
        con = duckdb_connection()
    except ImportError:
        skip_or_fail("duckdb is not installed (everything before this step passed)")
    if server.backend == "postgres-s3":
        endpoint = server.env["CATALOG_S3_ENDPOINT"].split("://", 1)[1]
        con.execute(
            "CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, URL_STYLE 'path', USE_SSL false)",
            [
                server.io_props["s3.access-key-id"],
                server.io_props["s3.secret-access-key"],
                endpoint,
                server.env.get("CATALOG_S3_REGION", "us-east-1"),
            ],
        )
    # No vended credentials here: DuckDB is told to use its own S3 secret, not to expect them.
    con.execute(
        f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none', "
        "ACCESS_DELEGATION_MODE 'none')"
    )
    namespace, name = table.split(".")
    found = con.execute(f'SELECT id, v FROM lake."{namespace}"."{name}"').fetchall()
    con.close()
    return dict(found)


def v3_table(spark, table: str, **props: str) -> None:
    tblprops = {"format-version": "3", "commit.retry.num-retries": "30", "commit.retry.min-wait-ms": "20", **props}
    spark.sql(
        f"""CREATE TABLE {table} (id BIGINT, v STRING) USING iceberg PARTITIONED BY (bucket(2, id))
        TBLPROPERTIES ({", ".join(f"'{k}' = '{v}'" for k, v in tblprops.items())})"""
    )


# --- plain v3 tables: several writers, then DML ------------------------------------------------------


@pytest.mark.parametrize("mode", ["merge-on-read", "copy-on-write"])
def test_row_lineage_through_concurrent_writers_and_dml(spark, ns: str, lake: str, server: Server, mode: str):
    t, short = f"{ns}.events", f"{ns.split('.', 1)[1]}.events"
    v3_table(spark, t, **{f"write.{op}.mode": mode for op in ("delete", "update", "merge")})
    meta = load_metadata(server, short)
    assert meta["format-version"] == 3 and meta["next-row-id"] == 0 and not meta["snapshots"]

    # Three sessions (each its own catalog client, like three jobs) append two batches each, at once.
    # Batch i holds ids 10*i .. 10*i+4 and names itself in its snapshot's summary.
    errors: list[Exception] = []

    def write(w: int) -> None:
        session = spark.newSession()
        register_catalog(session, server)
        try:
            for b in range(2):
                i = 2 * w + b
                df = session.createDataFrame([(10 * i + k, f"b{i}") for k in range(5)], "id BIGINT, v STRING")
                df.writeTo(t).option("snapshot-property.batch", str(i)).append()
        except Exception as e:  # reported below
            errors.append(e)

    writers = [threading.Thread(target=write, args=(w,)) for w in range(3)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    assert not errors, errors

    meta = load_metadata(server, short)
    check_row_id_chain(meta)
    inserted_at = {int(s["summary"]["batch"]): s["sequence-number"] for s in meta["snapshots"]}
    assert sorted(inserted_at) == list(range(6))
    assert meta["next-row-id"] == 30  # six appends of five new rows, nothing else yet
    after_inserts = meta["current-snapshot-id"]
    before = lineage(spark, t)
    assert {i: r[0] for i, r in before.items()} == {10 * i + k: f"b{i}" for i in range(6) for k in range(5)}
    assert sorted(r[1] for r in before.values()) == list(range(30))
    assert all(lusn == inserted_at[i // 10] for i, (_, _, lusn) in before.items())

    # Model: id -> (v, sequence number of the commit that last wrote the row).
    model = {i: (v, inserted_at[i // 10]) for i, (v, _, _) in before.items()}
    rewrites: dict[int, int] = {}  # batch -> sequence number of the DML that touched its files

    spark.sql(f"UPDATE {t} SET v = 'upd' WHERE id IN (0, 1)")  # batch 0
    rewrites[0] = seq = current_seq(load_metadata(server, short))
    model.update({0: ("upd", seq), 1: ("upd", seq)})

    spark.sql(f"DELETE FROM {t} WHERE id IN (10, 11)")  # batch 1
    rewrites[1] = current_seq(load_metadata(server, short))
    del model[10], model[11]

    spark.createDataFrame(
        [(20, "mrg"), (21, "mrg"), (100, "new"), (101, "new")], "id BIGINT, v STRING"
    ).createOrReplaceTempView("v3_changes")
    spark.sql(
        f"""MERGE INTO {t} t USING v3_changes c ON t.id = c.id
        WHEN MATCHED THEN UPDATE SET t.v = c.v WHEN NOT MATCHED THEN INSERT *"""
    )  # batch 2, and two new rows
    spark.catalog.dropTempView("v3_changes")
    meta = load_metadata(server, short)
    rewrites[2] = seq = current_seq(meta)
    model.update({20: ("mrg", seq), 21: ("mrg", seq), 100: ("new", seq), 101: ("new", seq)})

    check_row_id_chain(meta)
    now = lineage(spark, t)
    assert {i: r[0] for i, r in now.items()} == {i: v for i, (v, _) in model.items()}
    assert max(r[1] for r in now.values()) < meta["next-row-id"]
    for i, (_, row_id, lusn) in now.items():
        written_at = model[i][1]
        batch = i // 10
        if written_at in rewrites.values() or batch not in rewrites or mode == "merge-on-read":
            # written by a DML, in a batch no DML touched, or untouched in merge-on-read: exact.
            assert lusn == written_at, (i, lusn, written_at)
        else:  # copy-on-write may have rewritten the row's file, making it a new row
            assert lusn in (written_at, rewrites[batch]), (i, lusn, written_at, rewrites[batch])
        if lusn == inserted_at.get(batch):  # a row never rewritten keeps its _row_id
            assert row_id == before[i][1], (i, row_id, before[i][1])

    # Time travel: the table as the writers left it, with the same row ids.
    assert lineage(spark, t, after_inserts) == before

    # expire_snapshots leaves one snapshot; row ids are never handed out again after it.
    next_row_id = meta["next-row-id"]
    expired = spark.sql(
        f"CALL {lake}.system.expire_snapshots(table => '{short}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ).collect()[0]
    assert expired["deleted_manifest_lists_count"] == len(meta["snapshots"]) - 1
    meta = load_metadata(server, short)
    assert len(meta["snapshots"]) == 1 and meta["next-row-id"] == next_row_id
    spark.sql(f"INSERT INTO {t} VALUES (200, 'late'), (201, 'late')")
    meta = load_metadata(server, short)
    (last,) = [s for s in meta["snapshots"] if s["snapshot-id"] == meta["current-snapshot-id"]]
    assert last["first-row-id"] == next_row_id and meta["next-row-id"] == next_row_id + last["added-rows"]
    final = lineage(spark, t)
    assert final[200][1] >= next_row_id and final[201][1] >= next_row_id
    assert {i: r[:2] for i, r in final.items() if i < 200} == {i: r[:2] for i, r in now.items()}

    expected = {**{i: v for i, (v, _) in model.items()}, 200: "late", 201: "late"}
    assert pyiceberg_rows(server, short) == expected
    assert duckdb_rows(server, short) == expected


# --- staged creates and replaces: CTAS / RTAS --------------------------------------------------------


def test_ctas_and_rtas_create_v3_tables_with_row_lineage(spark, ns: str, server: Server):
    t, short = f"{ns}.ctas", f"{ns.split('.', 1)[1]}.ctas"
    spark.sql(
        f"""CREATE TABLE {t} USING iceberg TBLPROPERTIES ('format-version' = '3')
        AS SELECT id, CAST(id AS STRING) AS v FROM range(0, 8)"""
    )
    meta = load_metadata(server, short)
    check_row_id_chain(meta)
    assert meta["next-row-id"] == 8 and len(meta["snapshots"]) == 1
    first = meta["current-snapshot-id"]
    created = lineage(spark, t)
    assert sorted(r[1] for r in created.values()) == list(range(8))
    assert {r[2] for r in created.values()} == {1}

    # RTAS: a staged replace of the v3 table. History and row ids go on from where they were.
    spark.sql(
        f"""CREATE OR REPLACE TABLE {t} USING iceberg TBLPROPERTIES ('format-version' = '3')
        AS SELECT id, 'r' AS v FROM range(100, 105)"""
    )
    meta = load_metadata(server, short)
    check_row_id_chain(meta)
    assert meta["format-version"] == 3 and meta["next-row-id"] == 13 and len(meta["snapshots"]) == 2
    replaced = lineage(spark, t)
    assert sorted(replaced) == list(range(100, 105))
    assert sorted(r[1] for r in replaced.values()) == list(range(8, 13))
    assert {r[2] for r in replaced.values()} == {2}
    assert lineage(spark, t, first) == created  # time travel to before the replace

    assert pyiceberg_rows(server, short) == {i: "r" for i in range(100, 105)}
    assert duckdb_rows(server, short) == {i: "r" for i in range(100, 105)}


# --- upgrade of a v2 table that holds data -----------------------------------------------------------


def test_upgrade_of_a_v2_table_with_data(spark, ns: str, server: Server):
    t, short = f"{ns}.up", f"{ns.split('.', 1)[1]}.up"
    modes = {f"write.{op}.mode": "merge-on-read" for op in ("delete", "update", "merge")}
    spark.sql(
        f"""CREATE TABLE {t} (id BIGINT, v STRING) USING iceberg
        TBLPROPERTIES ('format-version' = '2', {", ".join(f"'{k}' = '{v}'" for k, v in modes.items())})"""
    )
    spark.sql(f"INSERT INTO {t} VALUES (0, 'a'), (1, 'a'), (2, 'a'), (3, 'a'), (4, 'a')")  # seq 1
    spark.sql(f"INSERT INTO {t} VALUES (5, 'b'), (6, 'b'), (7, 'b'), (8, 'b'), (9, 'b')")  # seq 2
    spark.sql(f"DELETE FROM {t} WHERE id = 9")  # a v2 position delete file, seq 3
    v2_snapshot = load_metadata(server, short)["current-snapshot-id"]

    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('format-version' = '3')")
    meta = load_metadata(server, short)
    assert meta["format-version"] == 3 and meta["next-row-id"] == 0
    assert meta["current-snapshot-id"] == v2_snapshot and len(meta["snapshots"]) == 3
    assert not any("first-row-id" in s for s in meta["snapshots"])

    spark.sql(f"INSERT INTO {t} VALUES (10, 'c'), (11, 'c')")  # the first v3 commit: ids for every row
    meta = load_metadata(server, short)
    check_row_id_chain(meta)
    (first_v3,) = [s for s in meta["snapshots"] if "first-row-id" in s]
    # The new rows and the rows already in the table (its data files' record counts) get ids.
    assert first_v3["first-row-id"] == 0 and first_v3["added-rows"] == 12
    inserted_v3 = first_v3["sequence-number"]
    before = lineage(spark, t)
    assert sorted(before) == [*range(9), 10, 11]
    assert max(r[1] for r in before.values()) < meta["next-row-id"]
    assert all(lusn == {"a": 1, "b": 2, "c": inserted_v3}[v] for v, _, lusn in before.values())

    spark.sql(f"UPDATE {t} SET v = 'u' WHERE id IN (0, 5)")  # deletion vectors over v2 deletes
    meta = load_metadata(server, short)
    check_row_id_chain(meta)
    updated_at = current_seq(meta)
    now = lineage(spark, t)
    assert {i: r[0] for i, r in now.items()} == {**{i: r[0] for i, r in before.items()}, 0: "u", 5: "u"}
    for i, (v, row_id, lusn) in now.items():
        if v == "u":
            assert lusn == updated_at
        else:  # untouched (merge-on-read): same row, same id
            assert (row_id, lusn) == before[i][1:]

    # Time travel to before the upgrade reads the v2 table (no lineage there).
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t} VERSION AS OF {v2_snapshot}")) == list(range(9))

    expected = {i: r[0] for i, r in now.items()}
    assert pyiceberg_rows(server, short) == expected
    assert duckdb_rows(server, short) == expected
