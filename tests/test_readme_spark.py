"""The README's "Connect Spark" snippets, run as pasted against a real server with a real Spark session.

The offline route is the one this machine has (no Maven access): the README's ``bash`` line builds the
jars with ``tools/iceberg-spark-jars`` and, as the README says, ``spark.jars`` takes the place of
``spark.jars.packages`` in the builder block. Everything else is verbatim but for the server's URI:
the builder block, then a table for the rename to move, then the rename block. The rename written
with the catalog's name in the target (the README's former, wrong, example) is shown to fail as the
README says it does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, skip_or_fail, spark_unavailable, start_server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

URI = "http://127.0.0.1:8181"


def spark_section() -> str:
    return (ROOT / "README.md").read_text().split("<!-- spark-config -->", 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    """The section's fenced blocks of ``language``, indentation (of a block inside a list) removed."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", spark_section(), re.S | re.M)
    return ["\n".join(line[len(indent) :] for line in body.splitlines()) + "\n" for indent, body in found]


def readme_jars(tmp_path: Path) -> str:
    """Run the README's offline command as written (in the repository, ``python`` this Python) and
    return what it put in ``$JARS``."""
    (command,) = blocks("bash")[:1]
    assert "tools/iceberg-spark-jars" in command, command
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-euc", command + 'printf "%s" "$JARS"'],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    jars = done.stdout.strip()
    assert jars and all(Path(j).is_file() and j.endswith(".jar") for j in jars.split(",")), jars
    return jars


def test_the_readme_spark_snippets_run_as_pasted(tmp_path: Path):
    if missing := spark_unavailable():
        skip_or_fail(missing)
    jars = readme_jars(tmp_path)
    (builder,) = blocks("python")
    (rename,) = blocks("sql")
    assert URI in builder
    builder, n = re.subn(r'"spark\.jars\.packages",\s*"[^"]+"', f'"spark.jars", "{jars}"', builder)
    assert n == 1, "the README's builder block no longer sets spark.jars.packages"
    assert rename.startswith("ALTER TABLE lake.analytics.events RENAME TO "), rename

    srv = start_server(tmp_path / "srv")
    try:
        script = tmp_path / "readme_spark.py"
        script.write_text(
            builder.replace(URI, srv.url)
            + f"""
spark.sparkContext.setLogLevel("ERROR")
spark.sql("CREATE TABLE lake.analytics.events (id BIGINT, kind STRING) USING iceberg")
spark.sql("INSERT INTO lake.analytics.events VALUES (1, 'click'), (2, 'view')")
try:  # the catalog's name in the target: Spark looks for a namespace lake.analytics
    spark.sql("ALTER TABLE lake.analytics.events RENAME TO lake.analytics.clicks")
except Exception as e:
    print("PREFIXED", next((line for line in str(e).splitlines() if "Exception" in line), repr(e)[:300]))
spark.sql({rename.strip()!r})
print("ROWS", spark.sql("SELECT count(*) FROM lake.analytics.clicks").collect()[0][0])
spark.stop()
"""
        )
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "ROWS 2" in done.stdout, done.stdout
        (prefixed,) = [line for line in done.stdout.splitlines() if line.startswith("PREFIXED")]
        assert "NoSuchNamespaceException" in prefixed, prefixed
        catalog = srv.catalog()
        assert catalog.table_exists("analytics.clicks") and not catalog.table_exists("analytics.events")
        assert catalog.load_table("analytics.clicks").scan().to_arrow().num_rows == 2
    finally:
        srv.stop()
