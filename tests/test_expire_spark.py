"""The maintenance planners against Spark's own ``expire_snapshots`` (Iceberg 1.9's
``ExpireSnapshotsSparkAction`` over ``RemoveSnapshots``), on both backends.

A table gets a history with Spark: appends, a partition delete and a merge-on-read update (data and
delete files become unreachable), a branch with its own commit and a tag. Our plan is computed first,
from the table's metadata: ``expire.plan`` gives the updates, ``metadata.tables.apply`` the metadata
they produce, ``reachability.after_expiry`` the files that leaves unreachable. Then Spark expires the
same table itself, and what it kept (snapshots, refs) and what it deleted (the table's files listed
before and after, on disk or in the bucket) must be exactly our plan.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests

from catalog.maintenance import expire, reachability
from catalog.metadata import tables
from tests.support import Server, wait_task

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture(autouse=True)
def utc(spark) -> None:
    """TIMESTAMP literals (``ms``) are written in UTC."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def metadata(server: Server, ns: str, table: str) -> dict:
    resp = requests.get(f"{server.url}/v1/namespaces/{ns}/tables/{table}", timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json()["metadata"]


def normal(path: str) -> str:
    """One form for a path: ``file:/x`` and ``file:///x`` are ``/x``; ``s3://`` stays as it is."""
    if path.startswith("file:"):
        return "/" + path[len("file:") :].lstrip("/")
    return path


def files_under(location: str, request: pytest.FixtureRequest) -> set[str]:
    """Every file under the table's location, normalised."""
    if location.startswith("s3://"):
        s3 = request.getfixturevalue("services")["s3"]
        bucket, _, prefix = location[len("s3://") :].partition("/")
        pages = s3.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix.rstrip("/") + "/")
        return {f"s3://{bucket}/{o['Key']}" for page in pages for o in page.get("Contents", [])}
    root = Path(normal(location))  # Hadoop's local filesystem keeps a ".<name>.crc" beside each file
    return {str(p) for p in root.rglob("*") if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".crc"))}


def ms(ts_ms: int) -> str:
    """A Spark TIMESTAMP literal (the session is in UTC) for epoch milliseconds."""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def history(spark, server: Server, lake: str, ns: str) -> int:
    """Eight snapshots: returns the cut-off, between the sixth and the seventh."""
    t = f"{lake}.{ns}.t"
    spark.sql(
        f"""CREATE TABLE {t} (id BIGINT, cat STRING) USING iceberg PARTITIONED BY (cat)
        TBLPROPERTIES ('format-version' = '2', 'write.update.mode' = 'merge-on-read',
                       'write.delete.mode' = 'merge-on-read')"""
    )
    spark.sql(f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")  # s1
    spark.sql(f"INSERT INTO {t} VALUES (3, 'a')")  # s2
    spark.sql(f"ALTER TABLE {t} CREATE TAG keep")  # the tag holds s2: its files stay
    spark.sql(f"DELETE FROM {t} WHERE cat = 'b'")  # s3: a whole partition, b's file leaves the table
    spark.sql(f"INSERT INTO {t} VALUES (4, 'c')")  # s4
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH side")
    spark.sql(f"INSERT INTO {t}.branch_side VALUES (5, 'd')")  # s5 on the branch
    spark.sql(f"UPDATE {t} SET id = 10 WHERE id = 4")  # s6: a position delete file and a new data file
    stamps = {s["snapshot-id"]: s["timestamp-ms"] for s in metadata(server, ns, "t")["snapshots"]}
    time.sleep(0.05)
    cut_off = max(stamps.values()) + 20
    time.sleep(0.05)
    spark.sql(f"INSERT OVERWRITE {t} SELECT id, cat FROM {t} WHERE cat = 'a'")  # s7: dynamic, a's files
    spark.sql(f"INSERT INTO {t} VALUES (6, 'e')")  # s8
    return cut_off


def our_plan(server: Server, ns: str, before: dict, cut_off: int) -> tuple[dict, reachability.Unreachable]:
    now = int(time.time() * 1000)
    plan = expire.plan(
        before, now, expire.retention(before.get("properties", {})), older_than_ms=cut_off, retain_last=1
    )
    assert plan.snapshot_ids, "the history must give the expiry something to do"
    after = tables.apply(before, [], plan.updates(), base_location="unused.metadata.json", now_ms=now)
    io = server.catalog().load_table(f"{ns}.t").io
    return after, reachability.after_expiry(before, after, io)


def spark_agrees(
    spark, server: Server, lake: str, ns: str, request: pytest.FixtureRequest, before: dict, ours: tuple, cut_off=None
) -> dict:
    """Run Spark's ``expire_snapshots`` on the table (older than ``cut_off``, keeping 1, or by the
    table's own policy without one) and assert it kept the snapshots and refs our plan ``ours``
    (metadata after, unreachable files) keeps and deleted exactly the files our plan names. Spark's
    metadata after."""
    ours_after, unreachable = ours
    listed_before = files_under(before["location"], request)
    assert {normal(p) for p in unreachable.all()} <= listed_before  # we name real files
    when = f", older_than => TIMESTAMP '{ms(cut_off)}', retain_last => 1" if cut_off is not None else ""
    spark.sql(f"CALL {lake}.system.expire_snapshots(table => '{ns}.t'{when})")
    spark_after = metadata(server, ns, "t")
    assert {s["snapshot-id"] for s in spark_after["snapshots"]} == {s["snapshot-id"] for s in ours_after["snapshots"]}
    assert spark_after["refs"] == ours_after["refs"]
    assert listed_before - files_under(before["location"], request) == {normal(p) for p in unreachable.all()}
    return spark_after


def test_expire_snapshots_matches_spark(spark, server: Server, lake: str, request: pytest.FixtureRequest) -> None:
    ns = f"ex_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    cut_off = history(spark, server, lake, ns)
    before = metadata(server, ns, "t")
    assert len(before["snapshots"]) == 8
    ours_after, unreachable = our_plan(server, ns, before, cut_off)
    # the update's data file and its position delete file go; the tag and the branch hold the rest
    assert len(unreachable.content_files) == 2
    assert any(p.endswith("-deletes.parquet") for p in unreachable.content_files)
    assert unreachable.manifests and len(unreachable.manifest_lists) == 4

    spark_after = spark_agrees(spark, server, lake, ns, request, before, (ours_after, unreachable), cut_off)
    # planned again now, the removed snapshots' manifest lists are gone: it refuses, it never guesses
    with pytest.raises(reachability.ReachabilityUnknown):
        reachability.after_expiry(before, spark_after, server.catalog().load_table(f"{ns}.t").io)


def test_a_ref_past_its_max_ref_age_expires_like_spark(
    spark, server: Server, lake: str, request: pytest.FixtureRequest
) -> None:
    """A tag and a branch with ``max-ref-age-ms`` of 1 ms (set through the REST API, as Spark's DDL
    takes whole minutes at least): both go, and what only they held goes with them."""
    ns = f"ex_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    t = f"{lake}.{ns}.t"
    spark.sql(f"CREATE TABLE {t} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version' = '2')")
    spark.sql(f"INSERT INTO {t} VALUES (1)")
    spark.sql(f"INSERT OVERWRITE {t} VALUES (2)")
    first = metadata(server, ns, "t")
    old, head = sorted(first["snapshots"], key=lambda s: s["timestamp-ms"])
    table = server.catalog().load_table(f"{ns}.t")
    with table.manage_snapshots() as refs:
        refs.create_tag(old["snapshot-id"], "short", max_ref_age_ms=1)
        refs.create_tag(old["snapshot-id"], "long")
    spark.sql(f"INSERT INTO {t} VALUES (3)")
    spark.sql(f"ALTER TABLE {t} DROP TAG long")  # now only 'short' holds the first snapshot
    time.sleep(0.01)
    before = metadata(server, ns, "t")
    cut_off = max(s["timestamp-ms"] for s in before["snapshots"]) + 1
    ours_after, unreachable = our_plan(server, ns, before, cut_off)
    assert "short" not in ours_after["refs"] and old["snapshot-id"] not in {
        s["snapshot-id"] for s in ours_after["snapshots"]
    }

    spark_agrees(spark, server, lake, ns, request, before, (ours_after, unreachable), cut_off)


def test_table_retention_and_a_branch_s_own_retention_like_spark(
    spark, server: Server, lake: str, request: pytest.FixtureRequest
) -> None:
    """No arguments to the procedure: the table's ``history.expire.*`` properties decide, and a branch's
    own ``min-snapshots-to-keep`` (Spark's ``WITH SNAPSHOT RETENTION``) overrides them on that branch."""
    ns = f"ex_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    t = f"{lake}.{ns}.t"
    spark.sql(
        f"""CREATE TABLE {t} (id BIGINT) USING iceberg
        TBLPROPERTIES ('format-version' = '2', 'history.expire.max-snapshot-age-ms' = '1',
                       'history.expire.min-snapshots-to-keep' = '2')"""
    )
    for i in range(3):
        spark.sql(f"INSERT OVERWRITE {t} VALUES ({i})")
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH wide WITH SNAPSHOT RETENTION 4 SNAPSHOTS")
    for i in range(3):
        spark.sql(f"INSERT OVERWRITE {t}.branch_wide VALUES ({10 + i})")
        spark.sql(f"INSERT OVERWRITE {t} VALUES ({20 + i})")
    time.sleep(0.01)
    before = metadata(server, ns, "t")
    assert before["refs"]["wide"].get("min-snapshots-to-keep") == 4
    now = int(time.time() * 1000)
    plan = expire.plan(before, now, expire.retention(before["properties"]))
    ours_after = tables.apply(before, [], plan.updates(), base_location="unused.metadata.json", now_ms=now)
    unreachable = reachability.after_expiry(before, ours_after, server.catalog().load_table(f"{ns}.t").io)
    assert len(ours_after["snapshots"]) == 2 + 4  # main's last two, the branch's last four (none shared)
    assert unreachable.content_files

    spark_agrees(spark, server, lake, ns, request, before, (ours_after, unreachable))


def test_unreferenced_snapshots_after_a_rollback_and_a_dropped_branch_like_spark(
    spark, server: Server, lake: str, request: pytest.FixtureRequest
) -> None:
    """Snapshots off every ref (a dropped branch's, one rolled back past) go when older than the cut-off
    and stay when younger, and a young one keeps the files it still reaches through shared manifests."""
    ns = f"ex_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    t = f"{lake}.{ns}.t"
    spark.sql(f"CREATE TABLE {t} (id BIGINT) USING iceberg TBLPROPERTIES ('format-version' = '2')")
    spark.sql(f"INSERT INTO {t} VALUES (1)")  # s1
    spark.sql(f"INSERT INTO {t} VALUES (2)")  # s2
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH b")
    spark.sql(f"INSERT INTO {t}.branch_b VALUES (3)")  # s3, on b only
    spark.sql(f"ALTER TABLE {t} DROP BRANCH b")
    time.sleep(0.05)
    cut_off = max(s["timestamp-ms"] for s in metadata(server, ns, "t")["snapshots"]) + 20
    time.sleep(0.05)
    spark.sql(f"INSERT INTO {t} VALUES (4)")  # s4: young, about to be rolled back past
    first = min(metadata(server, ns, "t")["snapshots"], key=lambda s: s["sequence-number"])["snapshot-id"]
    spark.sql(f"CALL {lake}.system.rollback_to_snapshot('{ns}.t', {first})")
    spark.sql(f"INSERT INTO {t} VALUES (5)")  # s5 on s1
    before = metadata(server, ns, "t")
    assert len(before["snapshots"]) == 5 and set(before["refs"]) == {"main"}

    ours_after, unreachable = our_plan(server, ns, before, cut_off)
    by_seq = {s["sequence-number"]: s["snapshot-id"] for s in before["snapshots"]}
    assert {s["snapshot-id"] for s in ours_after["snapshots"]} == {by_seq[4], by_seq[5]}
    assert len(unreachable.content_files) == 1  # s3's file; s2's stays reachable from s4, s1's from s5

    spark_agrees(spark, server, lake, ns, request, before, (ours_after, unreachable), cut_off)


def test_the_catalogs_own_expiry_leaves_a_table_spark_pyiceberg_and_duckdb_read(
    spark, duck, server: Server, lake: str, request: pytest.FixtureRequest
) -> None:
    """The catalog's expiry task (queued over HTTP, run by the server's own worker) on a Spark-written
    table: Spark, pyiceberg and DuckDB read the current rows and the tag's by time travel afterwards,
    and every file a kept snapshot references is still there."""
    ns = f"ex_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{ns}")
    history(spark, server, lake, ns)
    t = f"{lake}.{ns}.t"
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('history.expire.max-snapshot-age-ms' = '1')")
    current = sorted(r[0] for r in spark.sql(f"SELECT id FROM {t}").collect())
    tagged = sorted(r[0] for r in spark.sql(f"SELECT id FROM {t} VERSION AS OF 'keep'").collect())
    before = metadata(server, ns, "t")
    queued = requests.post(f"{server.url}/management/v1/maintenance/tables/{ns}/t", json={}, timeout=30)
    assert queued.status_code == 202, queued.text
    for task in queued.json()["tasks"]:  # run by the server's own worker (CARE_ON_REQUEST)
        assert (done := wait_task(server.url, task["id"]))["state"] == "done", done
    after = metadata(server, ns, "t")
    assert len(after["snapshots"]) < len(before["snapshots"])
    assert set(after["refs"]) == set(before["refs"])  # the tag and the branch stay
    spark.sql(f"REFRESH TABLE {t}")
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {t}").collect()) == current
    assert sorted(r[0] for r in spark.sql(f"SELECT id FROM {t} VERSION AS OF 'keep'").collect()) == tagged
    table = server.catalog().load_table(f"{ns}.t")
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == current
    tag_id = after["refs"]["keep"]["snapshot-id"]
    assert sorted(table.scan(snapshot_id=tag_id).to_arrow().column("id").to_pylist()) == tagged
    assert [r[0] for r in duck.execute(f"SELECT id FROM lake.{ns}.t ORDER BY id").fetchall()] == current
    duck_tagged = duck.execute(f"SELECT id FROM lake.{ns}.t AT (VERSION => {tag_id}) ORDER BY id").fetchall()
    assert [r[0] for r in duck_tagged] == tagged
    listed = files_under(before["location"], request)
    for snapshot in table.metadata.snapshots:
        assert normal(snapshot.manifest_list) in listed
        for manifest in snapshot.manifests(table.io):
            assert normal(manifest.manifest_path) in listed
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                assert normal(entry.data_file.file_path) in listed
