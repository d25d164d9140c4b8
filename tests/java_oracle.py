"""Iceberg Java 1.9 as an oracle process: ``tests/java/DiffOracle.java`` run by the JDK's single-file
source launcher (no javac, no Spark session) against the Iceberg runtime jar.

One request per line on its stdin, one answer per line on its stdout, so a whole commit (base metadata,
requirements, updates, and our result to re-read) is one pipe round trip. The answer:
``{"status": 200|400|409, "error": "<Java exception>: <message>", "result": <metadata JSON>,
"changed": bool, "ours_reparsed": <our result re-serialised by Java>, "ours_error": "..."}``.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import orjson

SOURCE = Path(__file__).resolve().parent / "java" / "DiffOracle.java"
JAR_CACHE = Path(os.environ.get("ICEBERG_SPARK_JARS_CACHE", "~/.cache/iceberg-spark-jars")).expanduser()


def classpath() -> tuple[str | None, str]:
    """The oracle's class path, or None and why it cannot be built here."""
    if not shutil.which("java"):
        return None, "no java on PATH"
    jars = [j for j in os.environ.get("ICEBERG_SPARK_JARS", "").split(",") if j]
    if not jars:  # the cache iceberg-spark-jars fills (.ci/run sets ICEBERG_SPARK_JARS from it)
        jars = sorted(glob.glob(str(JAR_CACHE / "iceberg-spark-runtime-*.jar")))
    jars = [j for j in jars if Path(j).is_file()]
    if not any("iceberg-spark-runtime" in Path(j).name for j in jars):
        return None, "no Iceberg runtime jar (ICEBERG_SPARK_JARS unset and none in the jar cache)"
    spec = importlib.util.find_spec("pyspark")  # the runtime logs through slf4j, which pyspark ships
    if spec is None or not spec.submodule_search_locations:
        return None, "pyspark is not installed (its slf4j-api jar is needed)"
    slf4j = sorted(glob.glob(os.path.join(spec.submodule_search_locations[0], "jars", "slf4j-api-*.jar")))
    if not slf4j:
        return None, "no slf4j-api jar in pyspark/jars"
    return os.pathsep.join([*jars, slf4j[-1]]), ""


class JavaOracle:
    """The running oracle process; ``ask`` is thread-unsafe and synchronous."""

    def __init__(self, cp: str) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="diff-oracle-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            ["java", "-Xss8m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, str(SOURCE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
        )
        self.calls = 0
        self.seconds = 0.0

    def ask(self, request: dict) -> dict:
        start = time.perf_counter()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(orjson.dumps(request) + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Java oracle exited ({self.proc.poll()}); its log: {self.log.name}")
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return orjson.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()
        os.unlink(self.log.name)
