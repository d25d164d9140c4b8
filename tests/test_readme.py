"""The README's snippets run as pasted: each test takes a block from README.md verbatim (but for the
URI) and runs it against a real server process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import ROOT


def _readme_section(title: str) -> str:
    return (ROOT / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_pyiceberg_snippet_runs_as_pasted(tmp_path):
    """The first block of "Connect pyiceberg", verbatim but for the URI, against a fresh server: it
    defines what it uses, creates, appends and reads back; run twice, it still works."""
    import re

    from tests.support import start_server

    (snippet, *_) = re.findall(r"```python\n(.*?)```", _readme_section("Connect pyiceberg"), re.S)
    assert "http://127.0.0.1:8181" in snippet
    srv = start_server(tmp_path / "srv")
    try:
        script = tmp_path / "readme_pyiceberg.py"
        script.write_text(snippet.replace("http://127.0.0.1:8181", srv.url))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "PYICEBERG_"))}
        for run in (1, 2):
            done = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.count("'kind': 'click'") == 2 * run, done.stdout
        assert srv.catalog().load_table("analytics.events").scan().to_arrow().num_rows == 6
    finally:
        srv.stop()


def test_readme_spark_section_shows_rename_and_stays_parseable():
    """tests/test_spark.py reads this section: two properties blocks (local, S3) and one python block;
    the rename is a SQL block of its own, its target relative to the catalog (tests/test_readme_spark.py
    runs it, and shows the target with the catalog's name failing)."""
    import re

    section = (ROOT / "README.md").read_text().split("<!-- spark-config -->", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"```properties\n", section)) == 2 and len(re.findall(r"```python\n", section)) == 1
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    assert re.fullmatch(r"ALTER TABLE lake\.\w+\.\w+ RENAME TO \w+\.\w+\s*", sql), sql


@pytest.fixture(scope="module")
def vending_s3(tmp_path_factory):
    """SeaweedFS with STS, and a server vending credentials with authentication on (as in compose)."""
    from tests import services as svc
    from tests.support import IN_CI, start_server

    work = tmp_path_factory.mktemp("vending")
    try:
        s3 = svc.start_seaweedfs(work / "s3", sts=True)
    except svc.ServiceUnavailable as e:
        if IN_CI:
            pytest.fail(f"CI=true and SeaweedFS is unavailable: {e}")
        pytest.skip(f"SeaweedFS unavailable: {e}")
    env = {
        "CATALOG_WAREHOUSE": f"s3://{s3.bucket}/duck",
        "CATALOG_S3_ENDPOINT": s3.endpoint,
        "CATALOG_S3_REGION": s3.region,
        "CATALOG_S3_ACCESS_KEY_ID": s3.access_key,
        "CATALOG_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_S3_VEND_CREDENTIALS": "true",
        "CATALOG_S3_STS_ROLE_ARN": s3.sts_role_arn,
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "admin:admin-local-secret",
        "CATALOG_TOKEN_SECRET": "y" * 40,
        "CATALOG_AUTHORIZATION": "none",
    }
    srv = start_server(work / "srv", extra_env=env)
    yield srv
    srv.stop()
    s3.stop()


@pytest.mark.s3
def test_readme_duckdb_with_vending_needs_no_s3_secret(vending_s3):
    """The README's DuckDB block for the compose stack (vending on), verbatim but for the URI: no S3
    secret, and DuckDB reads what pyiceberg wrote and writes what pyiceberg reads."""
    import re

    import pyarrow as pa

    from tests.services import duckdb_connection

    srv = vending_s3
    (block, *_) = re.findall(r"```sql\n(.*?)```", _readme_section("Connect DuckDB"), re.S)
    assert "TYPE s3" not in block and "ACCESS_DELEGATION_MODE" not in block, block
    writer = srv.catalog(credential="admin:admin-local-secret", **{"oauth2-server-uri": f"{srv.url}/v1/oauth/tokens"})
    writer.create_namespace("analytics")
    writer.create_table("analytics.events", schema=pa.schema([("id", pa.int64())])).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    )
    try:
        con = duckdb_connection()
    except ImportError:
        pytest.skip("duckdb is not installed")
    for statement in filter(str.strip, block.split(";")):
        con.execute(statement.replace("http://localhost:8181", srv.url))
    assert con.sql("SELECT count(*) FROM lake.analytics.events").fetchall() == [(3,)]
    con.sql("CREATE TABLE lake.analytics.orders AS SELECT range AS id FROM range(5)")
    assert writer.load_table("analytics.orders").scan().to_arrow().num_rows == 5
    con.close()
