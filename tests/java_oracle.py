"""Iceberg Java 1.9 as an oracle process: ``tests/java/DiffOracle.java`` against the Iceberg runtime jar
(no Spark session). Compiled once by ``javac`` into a cache directory keyed by a hash of the source and
the class path (``~/.cache/iceberg-catalog-tests/diff-oracle-<hash>``, or under
``$ICEBERG_CATALOG_TESTS_CACHE``), so a run starts the class directly; without ``javac`` the JDK's
single-file source launcher compiles it in memory at every start.

One request per line on its stdin, one answer per line on its stdout, so a whole commit (base metadata,
requirements, updates, and our result to re-read) is one pipe round trip. The answer:
``{"status": 200|400|409, "error": "<Java exception>: <message>", "result": <metadata JSON>,
"changed": bool, "ours_reparsed": <our result re-serialised by Java>, "ours_error": "..."}``.
"""

from __future__ import annotations

import glob
import hashlib
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
CLASS_CACHE = Path(os.environ.get("ICEBERG_CATALOG_TESTS_CACHE", "~/.cache/iceberg-catalog-tests")).expanduser()
JVM_FLAGS = ["-Xss8m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


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


def compiled(cp: str) -> Path | None:
    """The directory holding the oracle compiled against ``cp`` (compiled now when not cached), or
    None when there is no ``javac`` here. The key covers the source, the class path and each jar's
    size and modification time, so a changed source or jar compiles afresh."""
    javac = shutil.which("javac")
    if javac is None:
        return None
    key = hashlib.sha256(SOURCE.read_bytes())
    for entry in cp.split(os.pathsep):
        st = os.stat(entry)
        key.update(f"\0{entry}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    target = CLASS_CACHE / f"diff-oracle-{key.hexdigest()[:20]}"
    if (target / "DiffOracle.class").is_file():
        return target
    CLASS_CACHE.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="diff-oracle-build-", dir=CLASS_CACHE))
    try:
        done = subprocess.run(
            [javac, "-nowarn", "-d", str(building), "-cp", cp, str(SOURCE)], capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac failed on {SOURCE}:\n{done.stderr[-3000:]}")
        try:
            building.rename(target)  # atomic: a concurrent run either sees the whole directory or none
        except OSError:  # another run cached it first
            if not (target / "DiffOracle.class").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return target


class JavaOracle:
    """The running oracle process; ``ask`` is thread-unsafe and synchronous."""

    def __init__(self, cp: str) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="diff-oracle-", suffix=".log", delete=False)  # noqa: SIM115
        classes = compiled(cp)
        if classes is not None:
            command = ["java", *JVM_FLAGS, "-cp", os.pathsep.join([str(classes), cp]), "DiffOracle"]
        else:  # the single-file source launcher: compiles in memory, at every start
            command = ["java", *JVM_FLAGS, "-cp", cp, str(SOURCE)]
        self.proc = subprocess.Popen(
            command,
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
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        self.log.close()
        os.unlink(self.log.name)
