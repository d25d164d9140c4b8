"""Spark end to end: PySpark 3.5 + the Iceberg runtime against the real server, on both backends.

One Spark session for the module. Each backend's server is registered as its own Spark catalog with
the settings the README documents (``examples/spark_pipeline/spark_conf.py`` produces them and a test
below checks it against the README's blocks). Jars come from ``ICEBERG_SPARK_JARS`` (set by .ci/run),
else Spark downloads them (``spark.jars.packages``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.support import (
    ROOT,
    SPARK_EXAMPLE,
    Server,
    client_settings,
    create_events,
    insert_events,
    purge_now,
    register_catalog,
    scalar,
    skip_or_fail,
    spark_conf,
    spark_unavailable,
    sql_rows,
)

EXAMPLE = SPARK_EXAMPLE
pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


@pytest.fixture
def ns(spark_ns: str) -> str:
    """In this module a namespace is a Spark one: ``<catalog>.<namespace>`` (conftest's ``spark_ns``)."""
    return spark_ns


# --- the README's settings are the tested ones ------------------------------------------------------


def readme_properties_blocks() -> list[dict[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("<!-- spark-config -->", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```properties\n(.*?)```", section, re.S)
    parsed = []
    for block in blocks:
        pairs = [line.split(None, 1) for line in block.splitlines() if line.strip() and not line.startswith("#")]
        parsed.append({k: v.strip() for k, v in pairs})
    return parsed


def test_readme_spark_defaults_are_what_spark_conf_produces():
    local, s3 = readme_properties_blocks()
    uri = local["spark.sql.catalog.lake.uri"]
    want_local = spark_conf(uri, jars="")
    packages = want_local.pop("spark.jars.packages")  # the README passes them as --packages
    assert local == want_local
    assert f"--packages {packages}" in (ROOT / "README.md").read_text()
    want_s3 = spark_conf(uri, "s3", access_key="<key>", secret_key="<secret>", jars="")
    assert s3 == {k: v for k, v in want_s3.items() if k not in want_local and k != "spark.jars.packages"}


def readme_builder_snippet() -> str:
    section = (ROOT / "README.md").read_text().split("<!-- spark-config -->", 1)[1].split("\n## ", 1)[0]
    (snippet,) = re.findall(r"```python\n(.*?)```", section, re.S)
    return snippet


def test_readme_builder_snippet_runs_against_the_server(server: Server, tmp_path: Path):
    """The README's ``SparkSession.builder`` block, verbatim but for the URI (and, offline, the jars)."""
    if missing := spark_unavailable():
        skip_or_fail(missing)
    snippet = readme_builder_snippet()
    assert "http://127.0.0.1:8181" in snippet
    snippet = snippet.replace("http://127.0.0.1:8181", server.url)
    jars = os.environ.get("ICEBERG_SPARK_JARS")
    if jars:  # offline: the same runtime from local files instead of Maven Central
        snippet, n = re.subn(r'"spark\.jars\.packages",\s*"[^"]+"', f'"spark.jars", "{jars}"', snippet)
        assert n == 1
    if server.backend == "postgres-s3":
        creds = client_settings(server)
        snippet = snippet.replace(
            ".getOrCreate()",
            "".join(
                f'.config("spark.sql.catalog.lake.{k}", "{v}")'
                for k, v in {
                    "io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
                    "s3.access-key-id": creds["access_key"],
                    "s3.secret-access-key": creds["secret_key"],
                }.items()
            )
            + ".getOrCreate()",
        )
    ns = f"readme_{uuid.uuid4().hex[:8]}"
    script = tmp_path / "readme_spark.py"
    script.write_text(
        snippet
        + f"""
spark.sparkContext.setLogLevel("ERROR")
spark.sql("CREATE NAMESPACE lake.{ns}")
spark.sql("CREATE TABLE lake.{ns}.t (id BIGINT, ts TIMESTAMP) USING iceberg PARTITIONED BY (days(ts))")
spark.sql("INSERT INTO lake.{ns}.t VALUES (1, current_timestamp()), (2, current_timestamp())")
print("ROWS", spark.sql("SELECT count(*) FROM lake.{ns}.t").collect()[0][0])
spark.stop()
"""
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ROWS 2" in done.stdout
    assert server.catalog().load_table(f"{ns}.t").scan().to_arrow().num_rows == 2


# --- SQL through the catalog ------------------------------------------------------------------------


def test_nested_namespaces_and_show(spark, lake: str, server: Server):
    top = f"sp_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE NAMESPACE {lake}.{top}")
    spark.sql(f"CREATE NAMESPACE {lake}.{top}.child")
    spark.sql(f"CREATE NAMESPACE {lake}.{top}.child.grandchild")
    assert sql_rows(spark, f"SHOW NAMESPACES IN {lake}.{top}") == [(f"{top}.child",)]
    assert sql_rows(spark, f"SHOW NAMESPACES IN {lake}.{top}.child") == [(f"{top}.child.grandchild",)]
    spark.sql(f"CREATE TABLE {lake}.{top}.child.t (id BIGINT) USING iceberg")
    assert [r[1] for r in sql_rows(spark, f"SHOW TABLES IN {lake}.{top}.child")] == ["t"]
    assert server.catalog().table_exists((top, "child", "t"))
    spark.sql(f"ALTER NAMESPACE {lake}.{top} SET PROPERTIES ('team' = 'data-eng')")
    assert server.catalog().load_namespace_properties(top)["team"] == "data-eng"


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_insert_update_delete_merge(spark, ns: str, server: Server, mode: str):
    t = f"{ns}.events"
    modes = {f"write.{op}.mode": mode for op in ("delete", "update", "merge")}
    create_events(spark, t, **modes)
    insert_events(spark, t, range(1, 21))
    assert scalar(spark, f"SELECT count(*) FROM {t}") == 20

    spark.sql(f"UPDATE {t} SET category = 'updated' WHERE id <= 5")
    spark.sql(f"DELETE FROM {t} WHERE id % 2 = 0")
    spark.createDataFrame(
        [(i, f"merged{i}") for i in range(15, 26)], "id BIGINT, category STRING"
    ).createOrReplaceTempView("changes")
    spark.sql(
        f"""MERGE INTO {t} t USING changes c ON t.id = c.id
        WHEN MATCHED THEN UPDATE SET t.category = c.category
        WHEN NOT MATCHED THEN INSERT (id, ts, category, amount)
            VALUES (c.id, timestamp'2026-01-05 00:00:00', c.category, 0.0)"""
    )
    spark.catalog.dropTempView("changes")
    # Model: odd ids 1..19 survive the delete; 15..25 are merged (updated or inserted).
    expected = {i: ("updated" if i <= 5 else f"c{i % 4}") for i in range(1, 21) if i % 2}
    expected.update({i: f"merged{i}" for i in range(15, 26)})
    assert dict(sql_rows(spark, f"SELECT id, category FROM {t}")) == expected

    delete_files = scalar(spark, f"SELECT count(*) FROM {t}.delete_files")
    assert (delete_files > 0) == (mode == "merge-on-read")
    table = server.catalog().load_table(t.split(".", 1)[1])
    assert [str(f.transform) for f in table.spec().fields] == ["day", "bucket[8]"]
    assert table.scan().to_arrow().num_rows == len(expected)  # pyiceberg reads what Spark wrote


def test_schema_partition_and_sort_evolution(spark, ns: str, server: Server):
    t = f"{ns}.events"
    create_events(spark, t)
    insert_events(spark, t, range(10))
    spark.sql(f"ALTER TABLE {t} ADD COLUMN note STRING")
    spark.sql(f"ALTER TABLE {t} RENAME COLUMN category TO kind")
    spark.sql(f"ALTER TABLE {t} DROP COLUMN amount")
    spark.sql(f"ALTER TABLE {t} ADD PARTITION FIELD truncate(2, kind)")
    spark.sql(f"ALTER TABLE {t} DROP PARTITION FIELD days(ts)")
    spark.sql(f"ALTER TABLE {t} WRITE ORDERED BY id DESC")
    spark.sql(f"INSERT INTO {t} VALUES (100, timestamp'2026-02-01 00:00:00', 'late', 'n')")

    table = server.catalog().load_table(t.split(".", 1)[1])
    assert [f.name for f in table.schema().fields] == ["id", "ts", "kind", "note"]
    assert [str(f.transform) for f in table.spec().fields] == ["bucket[8]", "truncate[2]"]
    assert len(table.specs()) == 3
    (order,) = table.sort_order().fields
    assert table.schema().find_column_name(order.source_id) == "id" and str(order.direction).lower() == "desc"
    assert sql_rows(spark, f"SELECT kind, note FROM {t} WHERE id = 100") == [("late", "n")]
    assert scalar(spark, f"SELECT count(*) FROM {t} WHERE note IS NULL") == 10


def test_branches_tags_time_travel_and_metadata_tables(spark, ns: str):
    t = f"{ns}.events"
    create_events(spark, t)
    insert_events(spark, t, range(10))
    first = scalar(spark, f"SELECT snapshot_id FROM {t}.snapshots")
    first_at = scalar(spark, f"SELECT committed_at FROM {t}.snapshots")
    spark.sql(f"ALTER TABLE {t} CREATE TAG v1")
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH dev")
    insert_events(spark, t, range(100, 105))  # main only
    spark.sql(f"INSERT INTO {t}.branch_dev VALUES (999, timestamp'2026-01-01 00:00:00', 'dev', 0.0)")

    assert scalar(spark, f"SELECT count(*) FROM {t}") == 15
    assert scalar(spark, f"SELECT count(*) FROM {t} VERSION AS OF 'dev'") == 11
    assert scalar(spark, f"SELECT count(*) FROM {t} VERSION AS OF 'v1'") == 10
    assert scalar(spark, f"SELECT count(*) FROM {t} VERSION AS OF {first}") == 10
    assert scalar(spark, f"SELECT count(*) FROM {t} TIMESTAMP AS OF '{first_at}'") == 10

    refs = dict(sql_rows(spark, f"SELECT name, type FROM {t}.refs"))
    assert refs == {"main": "BRANCH", "dev": "BRANCH", "v1": "TAG"}
    assert scalar(spark, f"SELECT count(*) FROM {t}.snapshots") == 3
    assert scalar(spark, f"SELECT count(*) FROM {t}.history") == 2  # main's lineage
    assert scalar(spark, f"SELECT count(*) FROM {t}.files") > 0
    assert scalar(spark, f"SELECT count(*) FROM {t}.manifests") == 2


def test_procedures(spark, ns: str, lake: str):
    t = f"{ns}.events"
    short = t.split(".", 1)[1]
    create_events(spark, t)
    for start in range(0, 50, 10):  # five appends, many small files
        insert_events(spark, t, range(start, start + 10))
    first = scalar(spark, f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at LIMIT 1")
    files_before = scalar(spark, f"SELECT count(*) FROM {t}.files")

    rewritten = spark.sql(
        f"CALL {lake}.system.rewrite_data_files(table => '{short}', options => map('min-input-files', '2'))"
    ).collect()[0]
    assert rewritten["rewritten_data_files_count"] > 0
    assert scalar(spark, f"SELECT count(*) FROM {t}.files") < files_before
    assert scalar(spark, f"SELECT count(*) FROM {t}") == 50

    manifests = spark.sql(f"CALL {lake}.system.rewrite_manifests('{short}')").collect()[0]
    assert manifests["rewritten_manifests_count"] >= 1
    assert scalar(spark, f"SELECT count(*) FROM {t}.manifests") == 1

    spark.sql(f"CALL {lake}.system.rollback_to_snapshot('{short}', {first})")
    assert scalar(spark, f"SELECT count(*) FROM {t}") == 10

    snapshots = scalar(spark, f"SELECT count(*) FROM {t}.snapshots")
    expired = spark.sql(
        f"CALL {lake}.system.expire_snapshots(table => '{short}', "
        "older_than => TIMESTAMP '2999-01-01 00:00:00', retain_last => 1)"
    ).collect()[0]
    assert expired["deleted_manifest_lists_count"] == snapshots - 1
    assert scalar(spark, f"SELECT count(*) FROM {t}.snapshots") == 1
    assert scalar(spark, f"SELECT count(*) FROM {t}") == 10


def test_rename_and_drop(spark, ns: str, lake: str, server: Server):
    other_short = f"sp_{uuid.uuid4().hex[:8]}"
    other = f"{lake}.{other_short}"
    spark.sql(f"CREATE NAMESPACE {other}")
    create_events(spark, f"{ns}.a")
    insert_events(spark, f"{ns}.a", range(5))
    spark.sql(f"ALTER TABLE {ns}.a RENAME TO {other_short}.moved")  # across namespaces, same catalog
    assert scalar(spark, f"SELECT count(*) FROM {other}.moved") == 5
    assert not sql_rows(spark, f"SHOW TABLES IN {ns}")

    pyi = server.catalog()
    kept = pyi.load_table(f"{other_short}.moved")
    kept_files = [task.file.file_path for task in kept.scan().plan_files()]
    spark.sql(f"DROP TABLE {other}.moved")
    assert not sql_rows(spark, f"SHOW TABLES IN {other}")
    assert all(kept.io.new_input(path).exists() for path in kept_files)  # no purge: files stay

    create_events(spark, f"{ns}.b")
    insert_events(spark, f"{ns}.b", range(5))
    purged = pyi.load_table(f"{ns.split('.', 1)[1]}.b")
    purged_files = [task.file.file_path for task in purged.scan().plan_files()]
    spark.sql(f"DROP TABLE {ns}.b PURGE")  # kept for the retention, then purged by the server
    purge_now(server.url, f"{ns.split('.', 1)[1]}.b")
    assert purged_files and not any(purged.io.new_input(path).exists() for path in purged_files)
    assert not purged.io.new_input(purged.metadata_location).exists()


def test_names_with_spaces_and_percent_signs(spark, lake: str, server: Server):
    """Spark's data files, the server's metadata files and pyiceberg's reads agree on one location."""
    short = f"sp ns {uuid.uuid4().hex[:6]}"
    spark.sql(f"CREATE NAMESPACE {lake}.`{short}`")
    table = f"{lake}.`{short}`.`t%41 x`"
    create_events(spark, table)
    insert_events(spark, table, range(6))
    assert scalar(spark, f"SELECT count(*) FROM {table}") == 6

    pyi = server.catalog().load_table((short, "t%41 x"))
    assert pyi.location().endswith(f"/{short}/t%41 x")
    data = [task.file.file_path for task in pyi.scan().plan_files()]
    assert data and all(pyi.io.new_input(path).exists() for path in [*data, pyi.metadata_location])
    assert pyi.scan().to_arrow().num_rows == 6
    spark.sql(f"DROP TABLE {table} PURGE")
    purge_now(server.url, f"{short}.t%41 x")
    assert not any(pyi.io.new_input(path).exists() for path in [*data, pyi.metadata_location])


def test_views(spark, ns: str, server: Server):
    from pyspark.errors import AnalysisException

    t, v = f"{ns}.events", f"{ns}.big_events"
    create_events(spark, t)
    insert_events(spark, t, range(10))
    spark.sql(f"CREATE VIEW {v} AS SELECT id, category FROM {t} WHERE amount > 5")
    assert scalar(spark, f"SELECT count(*) FROM {v}") == 5
    assert [r[1] for r in sql_rows(spark, f"SHOW VIEWS IN {ns}") if not r[2]] == ["big_events"]

    # Iceberg's Spark extension refuses ALTER VIEW ... AS on the client and names the replacement;
    # CREATE OR REPLACE is the way to change a view's query (a new view version through the catalog).
    with pytest.raises(AnalysisException, match="CREATE OR REPLACE VIEW"):
        spark.sql(f"ALTER VIEW {v} AS SELECT id FROM {t}")
    spark.sql(f"CREATE OR REPLACE VIEW {v} AS SELECT id FROM {t} WHERE amount > 8")
    spark.sql(f"ALTER VIEW {v} SET TBLPROPERTIES ('team' = 'data-eng')")
    assert sql_rows(spark, f"SELECT id FROM {v} ORDER BY id") == [(8,), (9,)]

    view = server.catalog().load_view(v.split(".", 1)[1])
    assert len(view.metadata.versions) == 2 and view.properties["team"] == "data-eng"
    with pytest.raises(AnalysisException):  # tables and views share one name space
        spark.sql(f"CREATE VIEW {t} AS SELECT 1 AS one")

    spark.sql(f"DROP VIEW {v}")
    assert not [r for r in sql_rows(spark, f"SHOW VIEWS IN {ns}") if not r[2]]
    assert scalar(spark, f"SELECT count(*) FROM {t}") == 10


# --- concurrency ------------------------------------------------------------------------------------


def test_concurrent_spark_writers_lose_no_row(spark, ns: str, server: Server):
    """Four sessions (own catalog clients each) append to one table at once: every row lands."""
    t = f"{ns}.events"
    create_events(spark, t, **{"commit.retry.num-retries": "30", "commit.retry.min-wait-ms": "20"})
    writers, batches, errors = 4, 5, []

    def write(w: int) -> None:
        session = spark.newSession()  # its own catalog client, like another job
        register_catalog(session, server)
        try:
            for b in range(batches):
                start = (w * batches + b) * 10
                insert_events(session, t, range(start, start + 10))
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    total = writers * batches * 10
    assert scalar(spark, f"SELECT count(*) FROM {t}") == total
    assert scalar(spark, f"SELECT count(DISTINCT id) FROM {t}") == total
    assert scalar(spark, f"SELECT count(*) FROM {t}.snapshots WHERE operation = 'append'") == writers * batches


@pytest.mark.parametrize("delete_mode", ["copy-on-write", "merge-on-read"])
def test_compaction_planned_before_a_delete_is_refused(spark, ns: str, delete_mode: str):
    """A compaction that read the table before a DELETE committed must abort, not undo the delete.

    The compaction runs on a table handle loaded before the DELETE; when it commits, the catalog
    answers 409 (the branch moved), Iceberg refreshes, finds that files it rewrote were changed by
    the delete, and refuses with a ValidationException. The delete stays; no row comes back.
    """
    from py4j.protocol import Py4JJavaError

    t = f"{ns}.events"
    create_events(spark, t, **{"write.delete.mode": delete_mode})
    for start in range(0, 40, 10):
        insert_events(spark, t, range(start, start + 10))
    jvm = spark._jvm
    stale = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, t)

    spark.sql(f"DELETE FROM {t} WHERE id % 3 = 0")  # commits: the stale handle does not know
    after_delete = sql_rows(spark, f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at")

    action = jvm.org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession).rewriteDataFiles(stale)
    with pytest.raises(Py4JJavaError) as refused:
        action.option("rewrite-all", "true").execute()
    refusal = str(refused.value)
    assert "org.apache.iceberg.exceptions.ValidationException" in refusal, refusal[:2000]

    assert sql_rows(spark, f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at") == after_delete
    assert sorted(r[0] for r in sql_rows(spark, f"SELECT id FROM {t}")) == [i for i in range(40) if i % 3]


# --- the pipeline example ---------------------------------------------------------------------------


def test_pipeline_example(server: Server, tmp_path: Path):
    """The documented pipeline: 4 writers, a compaction and a GDPR delete at once, then verification."""
    if missing := spark_unavailable():
        skip_or_fail(missing)
    args = [
        sys.executable, str(EXAMPLE / "pipeline.py"),
        "--uri", server.url,
        "--namespace", f"pipeline_{uuid.uuid4().hex[:8]}",
        "--writers", "4", "--batches", "4", "--rows", "300",
    ]  # fmt: skip
    settings = client_settings(server)
    if settings["warehouse"] == "s3":
        args += ["--warehouse", "s3", "--s3-access-key", settings["access_key"]]
        args += ["--s3-secret-key", settings["secret_key"]]
    done = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(done.stdout[: done.stdout.rindex("}") + 1])
    assert summary["verified"] and summary["appends"] == 16, summary
    assert summary.get("deletes", 0) >= 1 and not summary.get("jobs failed"), summary
    assert "verification passed" in done.stdout


def test_spark_caused_no_server_error(server: Server):
    """Runs last in this module: nothing Spark sent made the shared server answer 500/502/503/504."""
    import requests

    metrics = requests.get(f"{server.url}/metrics", timeout=10).text
    errors = [
        line
        for line in metrics.splitlines()
        if line.startswith("catalog_http_requests_total{") and re.search(r'status="50[0234]"', line)
    ]
    assert not errors, errors


def test_spark_as_restricted_principals_of_an_oidc_provider(spark, tmp_path_factory):
    """A platform's set-up, tried from Spark: jobs get their tokens from an OIDC provider
    (``credential`` + ``oauth2-server-uri`` + ``scope``); grants go to the provider's groups. The
    ingestion job appends to its one table and is refused (403, nothing changed) everywhere else; the
    analysts' job reads only its namespace; a wrong secret is not authorized."""
    import requests

    from tests.idp import LocalIdP
    from tests.support import start_server

    idp = LocalIdP(
        audience="iceberg-catalog",
        clients={"ingest-job": ("ingest-secret", ["ingestion"]), "bi-job": ("bi-secret", ["analysts"])},
    )
    workdir = tmp_path_factory.mktemp("spark-auth")
    (workdir / "grants.yaml").write_text(
        "grants:\n"
        "  - {principal: 'user:platform', privileges: [admin], 'on': catalog}\n"
        "  - {principal: 'role:ingestion', privileges: [write], 'on': {table: raw.events}}\n"
        "  - {principal: 'role:analysts', privileges: [read], 'on': {namespace: analytics}}\n"
    )
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "platform:platform-secret",
        "CATALOG_TOKEN_SECRET": "k" * 32,
        "CATALOG_OIDC_ISSUER": idp.issuer,
        "CATALOG_OIDC_AUDIENCE": "iceberg-catalog",
        "CATALOG_AUTHZ_BOOTSTRAP": str(workdir / "grants.yaml"),
    }
    secured = start_server(workdir, "sqlite", env)
    try:
        catalogs = {
            "lake_platform": ("platform:platform-secret", None),
            "lake_ingest": ("ingest-job:ingest-secret", idp.token_url),
            "lake_bi": ("bi-job:bi-secret", idp.token_url),
            "lake_bad_secret": ("ingest-job:wrong", idp.token_url),
        }
        for name, (credential, token_url) in catalogs.items():
            for key, value in spark_conf(secured.url, catalog=name).items():
                if key.startswith(f"spark.sql.catalog.{name}"):
                    spark.conf.set(key, value)
            spark.conf.set(f"spark.sql.catalog.{name}.credential", credential)
            spark.conf.set(f"spark.sql.catalog.{name}.oauth2-server-uri", token_url or f"{secured.url}/v1/oauth/tokens")
            spark.conf.set(f"spark.sql.catalog.{name}.scope", "catalog")
        for ns in ("raw", "analytics"):
            spark.sql(f"CREATE NAMESPACE lake_platform.{ns}")
        for table in ("raw.events", "raw.other", "analytics.daily"):
            spark.sql(f"CREATE TABLE lake_platform.{table} (id BIGINT) USING iceberg")
        spark.sql("INSERT INTO lake_platform.analytics.daily VALUES (1), (2)")

        spark.sql("INSERT INTO lake_ingest.raw.events VALUES (1), (2), (3)")
        assert scalar(spark, "SELECT count(*) FROM lake_ingest.raw.events") == 3
        assert "/token" in idp.requests

        token = requests.post(
            f"{secured.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": "platform", "client_secret": "platform-secret"},
            timeout=10,
        ).json()["access_token"]

        def pointers() -> list[str]:
            return [
                requests.get(
                    f"{secured.url}/v1/namespaces/{ns}/tables/{t}",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=10,
                ).json()["metadata-location"]
                for ns, t in (("raw", "events"), ("raw", "other"), ("analytics", "daily"))
            ]

        before = pointers()
        forbidden = "(?i)forbidden|not have privilege|no privilege"
        for statement in (
            "INSERT INTO lake_ingest.raw.other VALUES (9)",
            "CREATE TABLE lake_ingest.raw.sneaky (id BIGINT) USING iceberg",
            "DROP TABLE lake_ingest.raw.events",
            "ALTER TABLE lake_ingest.raw.events SET TBLPROPERTIES ('team'='ingest')",
            "ALTER TABLE lake_ingest.raw.events ADD COLUMN extra STRING",
            "SELECT * FROM lake_ingest.analytics.daily",
            "INSERT INTO lake_bi.analytics.daily VALUES (9)",
            "SELECT * FROM lake_bi.raw.events",
        ):
            with pytest.raises(Exception, match=forbidden):
                spark.sql(statement).collect()
        assert pointers() == before
        assert scalar(spark, "SELECT count(*) FROM lake_bi.analytics.daily") == 2
        assert [r[0] for r in spark.sql("SHOW NAMESPACES IN lake_bi").collect()] == ["analytics"]
        assert [r[1] for r in spark.sql("SHOW TABLES IN lake_ingest.raw").collect()] == ["events"]
        with pytest.raises(Exception, match="(?i)not authorized|unauthorized|invalid_client"):
            spark.sql("SHOW NAMESPACES IN lake_bad_secret").collect()
    finally:
        secured.stop()
        idp.stop()
