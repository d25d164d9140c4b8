"""Record real clients' commits for the differential harness: tests/corpus/<source>.jsonl.

Re-record (from the repository root; overwrites the .jsonl files of the sources it runs):

    ICEBERG_SPARK_JARS=$(python tools/iceberg-spark-jars) python tests/corpus/record.py

    --sources spark,pyiceberg,duckdb   which clients to run (default: all three)
    --url http://127.0.0.1:8181        record against a running server instead of starting one
    --out DIR                          where the .jsonl files go (default: this directory)

By default a fresh server (SQLite + local warehouse, like tests/support.py's ``start_server``) is
started from this checkout in a temporary directory. The DuckDB source needs ``duckdb`` and its
``duckdb-extension-{iceberg,httpfs,avro}`` wheels (1.5.5); without them it is skipped with a message.

How: the clients talk to a small recording HTTP proxy in front of the server. For every POST that
creates or commits a table or view (``/v1/[{prefix}/]namespaces/{ns}/tables[/{t}]``,
``/v1/[{prefix}/]transactions/commit``, ``.../views[/{v}]``), the proxy first loads the entry from the
server (loadTable / loadView: its metadata JUST BEFORE the request), then forwards the request and
writes one JSON line per table or view change:

    {"source": "spark" | "pyiceberg" | "duckdb", "kind": "table" | "view",
     "endpoint": "createTable" | "stageCreate" | "updateTable" | "commitTransaction" | "createView"
                 | "replaceView",
     "identifier": {"namespace": [...], "name": "..."},
     "base": <metadata JSON> | null, "base_location": "<metadata-location>" | null,
     "requirements": [...], "updates": [...],
     "create": <the create request body; only for createTable / stageCreate / createView>,
     "transaction": <n, only for commitTransaction: lines with the same n were one request>,
     "status": <what THIS server answered>, "error": "<its message, for status >= 400>"}

A base of null with requirements [assert-create] is a staged create's commit. ``status`` is the
recording server's answer, not a verdict: the harness asks Java. Commits are serialised by the
proxy (load + forward under one lock), so each base is exactly what the server saw.

Size: bases are kept whole except for what no update or requirement reads: ``metadata-log`` and
``snapshot-log`` are cut to their last entries and the summaries of the base's snapshots keep only
``operation`` (the requests' own ``add-snapshot`` updates are never trimmed).

Each statement's failure is printed and the run goes on: flows the recording server refuses (v3 on the
pre-engine server) leave what they managed to send.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import requests

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCES = ("spark", "pyiceberg", "duckdb")

ENTRY = re.compile(r"^/v1/(?:[^/]+/)?namespaces/(?P<ns>[^/]+)/(?P<kind>tables|views)(?:/(?P<name>[^/]+))?$")
TRANSACTION = re.compile(r"^/v1/(?:[^/]+/)?transactions/commit$")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
KEEP_LOG_ENTRIES = 1


# --- the recording proxy -----------------------------------------------------------------------------


class Recorder:
    """What the proxy writes: one list of lines per source; ``source`` names the client running now."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.source = "unknown"
        self.lines: dict[str, list[dict]] = {}
        self.lock = threading.Lock()  # one recorded commit at a time: load base, forward, record
        self.transactions = 0
        self._local = threading.local()

    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            self._local.session = requests.Session()
        return self._local.session

    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> requests.Response:
        return self.session().request(
            method, self.upstream + path, headers=headers, data=body or None, timeout=300, allow_redirects=False
        )

    def load(self, kind: str, ns_path: str, name: str) -> tuple[dict | None, str | None]:
        """The entry's metadata and metadata location as the server has it now (None, None if absent)."""
        resp = self.session().get(f"{self.upstream}/v1/namespaces/{ns_path}/{kind}/{quote(name, safe='')}", timeout=60)
        if resp.status_code == 404:
            return None, None
        resp.raise_for_status()
        body = resp.json()
        return body["metadata"], body.get("metadata-location")

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> requests.Response:
        path = urlsplit(target).path
        if method == "POST" and (ENTRY.match(path) or TRANSACTION.match(path)):
            with self.lock:
                return self._record(path, target, headers, body)
        return self.forward(method, target, headers, body)

    def _record(self, path: str, target: str, headers: dict[str, str], body: bytes) -> requests.Response:
        try:
            request = json.loads(body)
        except ValueError:
            return self.forward("POST", target, headers, body)
        changes: list[dict] = []  # {kind, endpoint, identifier, ns_path, name, request}
        if m := TRANSACTION.match(path):
            self.transactions += 1
            for change in request.get("table-changes", []):
                ident = change.get("identifier", {})
                ns_path = quote("\x1f".join(ident.get("namespace", [])), safe="")
                changes.append(
                    {"kind": "table", "endpoint": "commitTransaction", "identifier": ident, "ns_path": ns_path,
                     "name": ident.get("name", ""), "request": change, "transaction": self.transactions}
                )  # fmt: skip
        else:
            m = ENTRY.match(path)
            kind = m["kind"][:-1]  # table | view
            namespace = unquote(m["ns"]).split("\x1f")
            ns_path = quote("\x1f".join(namespace), safe="")
            if m["name"] is None:  # create
                name = request.get("name", "")
                endpoint = (
                    ("stageCreate" if request.get("stage-create") else "createTable")
                    if kind == "table"
                    else "createView"
                )
            else:
                name = unquote(m["name"])
                endpoint = "updateTable" if kind == "table" else "replaceView"
            changes.append(
                {"kind": kind, "endpoint": endpoint, "identifier": {"namespace": namespace, "name": name},
                 "ns_path": ns_path, "name": name, "request": request}
            )  # fmt: skip
        bases = []
        for change in changes:
            if change["endpoint"] in ("createTable", "stageCreate", "createView"):
                bases.append((None, None))
            else:
                bases.append(self.load(change["kind"] + "s", change["ns_path"], change["name"]))
        resp = self.forward("POST", target, headers, body)
        for change, (base, location) in zip(changes, bases, strict=True):
            line = {
                "source": self.source,
                "kind": change["kind"],
                "endpoint": change["endpoint"],
                "identifier": change["identifier"],
                "base": trim(base, change["kind"]),
                "base_location": location,
                "requirements": change["request"].get("requirements", []),
                "updates": change["request"].get("updates", []),
            }
            if change["endpoint"] in ("createTable", "stageCreate", "createView"):
                line["create"] = change["request"]
            if "transaction" in change:
                line["transaction"] = change["transaction"]
            line["status"] = resp.status_code
            if resp.status_code >= 400:
                try:
                    line["error"] = resp.json()["error"]["message"][:300]
                except (ValueError, KeyError, TypeError):
                    line["error"] = resp.text[:300]
            self.lines.setdefault(self.source, []).append(line)
        return resp


def trim(meta: dict | None, kind: str) -> dict | None:
    """Drop bookkeeping no update reads, to keep the corpus small (see the module docstring)."""
    if meta is None or kind != "table":
        return meta
    meta = dict(meta)
    for log in ("metadata-log", "snapshot-log"):
        if len(meta.get(log) or []) > KEEP_LOG_ENTRIES:
            meta[log] = meta[log][-KEEP_LOG_ENTRIES:]
    snapshots = []
    for snap in meta.get("snapshots") or []:
        if "summary" in snap:
            snap = {**snap, "summary": {k: v for k, v in snap["summary"].items() if k == "operation"}}
        snapshots.append(snap)
    if "snapshots" in meta:
        meta["snapshots"] = snapshots
    return meta


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def _relay(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = self._read_chunked()
        else:
            body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP | {"host", "content-length"}}
        headers["Accept-Encoding"] = "identity"
        try:
            resp = self.server.recorder.handle(self.command, self.path, headers, body)
        except Exception as e:  # the upstream is gone: answer 502 so the client fails visibly
            payload = json.dumps({"error": {"message": f"proxy: {e}", "type": "ProxyError", "code": 502}}).encode()
            self.send_response(502)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        content = resp.content
        self.send_response(resp.status_code)
        for k, v in resp.headers.items():
            if k.lower() not in HOP_BY_HOP | {"content-length", "content-encoding"}:
                self.send_header(k, v)
        no_body = self.command == "HEAD" or resp.status_code in (204, 304) or resp.status_code < 200
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.headers.get("Content-Length", "0"))
        elif not no_body:
            self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if not no_body:
            self.wfile.write(content)

    def _read_chunked(self) -> bytes:
        out = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += self.rfile.read(size)
            self.rfile.readline()

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _relay

    def log_message(self, *args) -> None:  # quiet
        pass


class _ProxyServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, recorder: Recorder) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.recorder = recorder


def start_proxy(recorder: Recorder) -> tuple[_ProxyServer, str]:
    proxy = _ProxyServer(recorder)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    return proxy, f"http://127.0.0.1:{proxy.server_address[1]}"


# --- running statements ------------------------------------------------------------------------------


class Steps:
    """Runs steps one by one; a failing step is printed and the run goes on."""

    def __init__(self, source: str) -> None:
        self.source, self.ok, self.failed = source, 0, []

    def __call__(self, label: str, fn: Callable[[], object]) -> object:
        try:
            result = fn()
            self.ok += 1
            return result
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            self.failed.append(label)
            print(f"  [{self.source}] FAILED {label}: {first[:300]}", flush=True)
            return None

    def summary(self) -> str:
        return f"{self.ok} steps ran, {len(self.failed)} failed"


# --- Spark --------------------------------------------------------------------------------------------


def run_spark(url: str) -> Steps:
    sys.path.insert(0, str(ROOT / "examples" / "spark_pipeline"))
    from pyspark.sql import SparkSession
    from spark_conf import spark_conf

    builder = SparkSession.builder.master("local[2]").appName("corpus-record")
    for key, value in {
        **spark_conf(url),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    step = Steps("spark")

    def sql(statement: str) -> list:
        return step(statement.split("\n")[0][:120], lambda: spark.sql(statement).collect())

    def snapshot_ids(table: str) -> list[int]:
        found = step(
            f"snapshots of {table}",
            lambda: spark.sql(f"SELECT snapshot_id FROM {table}.snapshots ORDER BY committed_at").collect(),
        )
        return [r[0] for r in found or []]

    def values(n0: int, n: int) -> str:
        return ", ".join(
            f"({i}, 'd{i}', 'c{i % 3}', {i}.5, timestamp'2026-01-0{1 + i % 3} 1{i % 10}:00:00')"
            for i in range(n0, n0 + n)
        )

    ns = "lake.sp"
    sql(f"CREATE NAMESPACE IF NOT EXISTS {ns}")
    cols = "(id BIGINT NOT NULL, data STRING, category STRING, amount DOUBLE, ts TIMESTAMP)"

    # v1: copy-on-write only, void transforms on partition evolution, upgrade to v2.
    t = f"{ns}.v1_events"
    sql(f"CREATE TABLE {t} {cols} USING iceberg PARTITIONED BY (days(ts)) TBLPROPERTIES ('format-version' = '1')")
    sql(f"INSERT INTO {t} VALUES {values(0, 6)}")
    sql(f"INSERT INTO {t} VALUES {values(6, 4)}")
    sql(f"DELETE FROM {t} WHERE id = 1")
    sql(f"UPDATE {t} SET data = 'u' WHERE id = 2")
    sql(f"ALTER TABLE {t} ADD COLUMN extra INT")
    sql(f"ALTER TABLE {t} DROP PARTITION FIELD days(ts)")
    sql(f"ALTER TABLE {t} ADD PARTITION FIELD bucket(4, id)")
    sql(f"INSERT INTO {t} SELECT id + 100, data, category, amount, ts, 1 FROM {t}")
    sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('format-version' = '2')")
    sql(f"DELETE FROM {t} WHERE id = 3")

    # v2 merge-on-read: DML, then the maintenance procedures. Each concern gets its own table so that
    # the history, and with it the recorded bases, stays short.
    t, short = f"{ns}.v2_events", "sp.v2_events"
    mor = ", ".join(f"'write.{op}.mode' = 'merge-on-read'" for op in ("delete", "update", "merge"))
    sql(
        f"CREATE TABLE {t} {cols} USING iceberg PARTITIONED BY (category) TBLPROPERTIES ('format-version' = '2', {mor})"
    )
    for start in (0, 10):
        sql(f"INSERT INTO {t} VALUES {values(start, 10)}")
    sql(f"UPDATE {t} SET data = 'updated' WHERE id < 5")
    sql(f"DELETE FROM {t} WHERE id % 7 = 0")
    spark.createDataFrame(
        [(i, f"m{i}", "c9", 1.0) for i in range(25, 35)], "id BIGINT, data STRING, category STRING, amount DOUBLE"
    ).createOrReplaceTempView("changes")
    sql(
        f"""MERGE INTO {t} t USING changes c ON t.id = c.id
        WHEN MATCHED AND c.id = 25 THEN DELETE
        WHEN MATCHED THEN UPDATE SET t.data = c.data
        WHEN NOT MATCHED THEN INSERT (id, data, category, amount, ts)
            VALUES (c.id, c.data, c.category, c.amount, null)"""
    )
    sql(f"INSERT OVERWRITE {t} SELECT * FROM {t} WHERE category = 'c1'")  # dynamic: replaces partition c1
    sql(f"CALL lake.system.rewrite_data_files(table => '{short}', options => map('min-input-files', '2'))")
    sql(f"CALL lake.system.rewrite_position_delete_files(table => '{short}', options => map('rewrite-all', 'true'))")
    sql(f"CALL lake.system.rewrite_manifests('{short}')")
    sql(f"CALL lake.system.compute_table_stats(table => '{short}')")  # set-statistics (a Puffin file)
    sql(
        f"CALL lake.system.expire_snapshots(table => '{short}', older_than => TIMESTAMP '2999-01-01 00:00:00', "
        "retain_last => 2)"
    )
    sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('team' = 'spark', 'commit.retry.num-retries' = '5')")
    sql(f"ALTER TABLE {t} UNSET TBLPROPERTIES ('team')")
    described = step("location", lambda: spark.sql(f"DESCRIBE TABLE EXTENDED {t}").collect())
    location = next((r[1] for r in described or [] if r[0] == "Location"), None)
    if location:
        sql(f"ALTER TABLE {t} SET LOCATION '{location}_moved'")

    # v2 branches and tags, write-audit-publish, rollback.
    t, short = f"{ns}.v2_refs", "sp.v2_refs"
    sql(f"CREATE TABLE {t} {cols} USING iceberg TBLPROPERTIES ('format-version' = '2', {mor})")
    for start in (0, 10):
        sql(f"INSERT INTO {t} VALUES {values(start, 3)}")
    ids = snapshot_ids(t)
    if ids:
        sql(f"ALTER TABLE {t} CREATE TAG first_load AS OF VERSION {ids[0]} RETAIN 30 DAYS")
    sql(f"ALTER TABLE {t} CREATE TAG latest")
    sql(f"ALTER TABLE {t} CREATE BRANCH dev RETAIN 7 DAYS WITH SNAPSHOT RETENTION 2 SNAPSHOTS 3 DAYS")
    sql(f"INSERT INTO {t}.branch_dev VALUES {values(900, 2)}")
    sql(f"DELETE FROM {t}.branch_dev WHERE id = 2")
    if ids:
        sql(f"ALTER TABLE {t} REPLACE TAG latest AS OF VERSION {ids[-2]}")
    sql(f"CALL lake.system.fast_forward('{short}', 'main', 'dev')")
    sql(f"ALTER TABLE {t} DROP TAG latest")
    sql(f"ALTER TABLE {t} CREATE OR REPLACE BRANCH audit")
    sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('write.wap.enabled' = 'true')")
    for wap in ("wap-1", "wap-2"):  # staged snapshots: written, not made current
        spark.conf.set("spark.wap.id", wap)
        sql(f"INSERT INTO {t} VALUES {values(700 + len(wap), 1)}")
    spark.conf.unset("spark.wap.id")
    sql(f"CALL lake.system.publish_changes('{short}', 'wap-1')")
    staged = sql(f"SELECT snapshot_id FROM {t}.snapshots WHERE summary['wap.id'] = 'wap-2'")
    if staged:
        sql(f"CALL lake.system.cherrypick_snapshot('{short}', {staged[0][0]})")
    sql(f"ALTER TABLE {t} DROP BRANCH audit")
    history = sql(f"SELECT snapshot_id FROM {t}.history ORDER BY made_current_at")
    if history and len(history) > 2:
        sql(f"CALL lake.system.rollback_to_snapshot('{short}', {history[-3][0]})")
        sql(f"CALL lake.system.set_current_snapshot('{short}', {history[-1][0]})")

    # v2 schema evolution, then partition and sort order evolution, each on a narrow table of its own.
    t = f"{ns}.v2_schema"
    sql(f"CREATE TABLE {t} (id BIGINT NOT NULL, data STRING, n INT) TBLPROPERTIES ('format-version' = '2')")
    sql(f"INSERT INTO {t} VALUES (1, 'a', 1)")
    sql(f"ALTER TABLE {t} SET IDENTIFIER FIELDS id")
    sql(f"ALTER TABLE {t} ADD COLUMN note STRING COMMENT 'a note' AFTER id")
    sql(f"ALTER TABLE {t} ALTER COLUMN n TYPE BIGINT")
    sql(f"ALTER TABLE {t} RENAME COLUMN data TO payload")
    sql(f"ALTER TABLE {t} ALTER COLUMN n COMMENT 'a count'")
    sql(f"ALTER TABLE {t} ALTER COLUMN n FIRST")
    sql(f"ALTER TABLE {t} DROP IDENTIFIER FIELDS id")
    sql(f"ALTER TABLE {t} ALTER COLUMN id DROP NOT NULL")
    sql(f"ALTER TABLE {t} DROP COLUMN note")
    sql(f"ALTER TABLE {t} ADD COLUMN point STRUCT<x: DOUBLE, y: DOUBLE>")  # nested ids last: smaller bases
    sql(f"ALTER TABLE {t} ADD COLUMN point.z DOUBLE")
    sql(f"ALTER TABLE {t} ADD COLUMN tags MAP<STRING, STRING>")
    sql(f"INSERT INTO {t} VALUES (2, 3, 'b', null, null)")

    t = f"{ns}.v2_layout"
    sql(
        f"CREATE TABLE {t} (id BIGINT, category STRING, ts TIMESTAMP) USING iceberg PARTITIONED BY (category) "
        "TBLPROPERTIES ('format-version' = '2')"
    )
    sql(f"INSERT INTO {t} VALUES (1, 'c', timestamp'2026-01-01 10:00:00')")
    sql(f"ALTER TABLE {t} ADD PARTITION FIELD bucket(8, id)")
    sql(f"ALTER TABLE {t} ADD PARTITION FIELD hours(ts) AS hr")
    sql(f"ALTER TABLE {t} REPLACE PARTITION FIELD category WITH truncate(2, category)")
    sql(f"ALTER TABLE {t} DROP PARTITION FIELD hr")
    sql(f"ALTER TABLE {t} WRITE ORDERED BY id DESC NULLS LAST, category")
    sql(f"ALTER TABLE {t} WRITE LOCALLY ORDERED BY category")
    sql(f"ALTER TABLE {t} WRITE DISTRIBUTED BY PARTITION")
    sql(f"ALTER TABLE {t} WRITE UNORDERED")
    sql(f"INSERT INTO {t} VALUES (2, 'cc', timestamp'2026-01-02 10:00:00')")

    def expire_cleaning_metadata() -> None:
        """Expiry that also drops the specs and schemas no snapshot uses any more (remove-partition-specs,
        remove-schemas). Iceberg 1.9's procedure has no argument for it; its Java API has."""
        table = spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(spark._jsparkSession, t)
        expire = table.expireSnapshots().cleanExpiredMetadata(True)
        expire.expireOlderThan(int(time.time() * 1000) + 60_000).retainLast(1).commit()

    step("expire snapshots, cleaning expired metadata", expire_cleaning_metadata)

    # v2 copy-on-write DML, then an upgrade of the table (with data) to v3.
    t, short = f"{ns}.v2_cow", "sp.v2_cow"
    cow = ", ".join(f"'write.{op}.mode' = 'copy-on-write'" for op in ("delete", "update", "merge"))
    sql(f"CREATE TABLE {t} {cols} USING iceberg TBLPROPERTIES ('format-version' = '2', {cow})")
    sql(f"INSERT INTO {t} VALUES {values(0, 10)}")
    sql(f"UPDATE {t} SET data = 'u' WHERE id < 3")
    sql(f"DELETE FROM {t} WHERE id = 9")
    sql(
        f"""MERGE INTO {t} t USING changes c ON t.id = c.id
        WHEN MATCHED THEN UPDATE SET t.data = c.data
        WHEN NOT MATCHED THEN INSERT (id, data, category, amount, ts)
            VALUES (c.id, c.data, c.category, c.amount, null)"""
    )
    sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('format-version' = '3')")
    sql(f"INSERT INTO {t} VALUES {values(100, 3)}")
    sql(f"UPDATE {t} SET data = 'v3' WHERE id = 100")

    # Staged creates and replaces: CTAS, RTAS, REPLACE TABLE.
    sql(f"CREATE TABLE {ns}.ctas USING iceberg PARTITIONED BY (category) AS SELECT * FROM {ns}.v2_cow")
    sql(
        f"CREATE OR REPLACE TABLE {ns}.ctas USING iceberg PARTITIONED BY (bucket(2, id)) "
        f"AS SELECT * FROM {ns}.v2_cow WHERE id < 5"
    )
    sql(f"REPLACE TABLE {ns}.ctas (id BIGINT, other STRING) USING iceberg")
    sql(f"CREATE TABLE {ns}.ctas_v3 USING iceberg TBLPROPERTIES ('format-version' = '3') AS SELECT * FROM {ns}.v2_cow")

    # v3 from the start: row lineage through appends, deletion vectors, MERGE, expiry.
    t, short = f"{ns}.v3_events", "sp.v3_events"
    sql(
        f"CREATE TABLE {t} {cols} USING iceberg PARTITIONED BY (bucket(4, id)) "
        f"TBLPROPERTIES ('format-version' = '3', {mor})"
    )
    for start in (0, 10):
        sql(f"INSERT INTO {t} VALUES {values(start, 10)}")
    sql(f"UPDATE {t} SET data = 'u' WHERE id < 4")
    sql(f"DELETE FROM {t} WHERE id % 5 = 0")
    sql(
        f"""MERGE INTO {t} t USING changes c ON t.id = c.id
        WHEN MATCHED THEN UPDATE SET t.data = c.data
        WHEN NOT MATCHED THEN INSERT (id, data, category, amount, ts)
            VALUES (c.id, c.data, c.category, c.amount, null)"""
    )
    sql(f"ALTER TABLE {t} CREATE BRANCH b3")
    sql(f"INSERT INTO {t}.branch_b3 VALUES {values(300, 2)}")
    sql(f"ALTER TABLE {t} ADD COLUMN extra STRING")
    sql(f"CALL lake.system.rewrite_data_files(table => '{short}', options => map('rewrite-all', 'true'))")
    sql(
        f"CALL lake.system.expire_snapshots(table => '{short}', older_than => TIMESTAMP '2999-01-01 00:00:00', "
        "retain_last => 1)"
    )
    spark.catalog.dropTempView("changes")

    # Views: create, replace (a new version), properties.
    sql(f"CREATE VIEW {ns}.big AS SELECT id, data FROM {ns}.v2_events WHERE amount > 5")
    sql(
        f"CREATE VIEW {ns}.named (id COMMENT 'the id', label) COMMENT 'renamed columns' "
        f"AS SELECT id, data FROM {ns}.v2_cow"
    )
    sql(f"CREATE OR REPLACE VIEW {ns}.big AS SELECT id FROM {ns}.v2_events WHERE amount > 8")
    sql(f"ALTER VIEW {ns}.big SET TBLPROPERTIES ('team' = 'data-eng', 'comment' = 'big ones')")
    sql(f"ALTER VIEW {ns}.big UNSET TBLPROPERTIES ('team')")
    sql(f"CREATE OR REPLACE VIEW {ns}.big AS SELECT id, category FROM {ns}.v1_events")
    spark.stop()
    return step


# --- pyiceberg ---------------------------------------------------------------------------------------


def run_pyiceberg(url: str) -> Steps:
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.sorting import SortDirection, SortField, SortOrder
    from pyiceberg.table.statistics import BlobMetadata, StatisticsFile
    from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestampType
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewVersion

    step = Steps("pyiceberg")
    cat = RestCatalog("corpus", uri=url)
    step("create namespace", lambda: cat.create_namespace("py"))
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "category", StringType(), required=False),
        NestedField(3, "amount", DoubleType(), required=False),
        NestedField(4, "ts", TimestampType(), required=False),
        NestedField(5, "qty", IntegerType(), required=False),
        identifier_field_ids=[1],
    )
    arrow_schema = schema.as_arrow()

    def batch(start: int, n: int) -> pa.Table:
        import datetime

        return pa.table(
            {
                "id": list(range(start, start + n)),
                "category": [f"c{i % 3}" for i in range(start, start + n)],
                "amount": [i * 1.5 for i in range(start, start + n)],
                "ts": [datetime.datetime(2026, 1, 1 + i % 5) for i in range(start, start + n)],
                "qty": [i % 4 for i in range(start, start + n)],
            },
            schema=arrow_schema,
        )

    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "category"))
    order = SortOrder(SortField(source_id=1, transform=IdentityTransform(), direction=SortDirection.DESC))

    for version in ("1", "2", "3"):
        name = f"py.v{version}"
        table = step(
            f"create {name}",
            lambda name=name, version=version: cat.create_table(
                name,
                schema,
                partition_spec=spec,
                sort_order=order,
                properties={"format-version": version, "owner": "py"},
            ),
        )
        if table is None or version == "3":  # pyiceberg 0.12 writes no v3 manifest lists
            continue
        step(f"{name}: append", lambda t=table: t.append(batch(0, 10)))
        step(f"{name}: append again", lambda t=table: t.append(batch(10, 10)))
        step(f"{name}: delete by filter", lambda t=table: t.delete(EqualTo("category", "c1")))
        step(
            f"{name}: overwrite with filter",
            lambda t=table: t.overwrite(batch(100, 5), overwrite_filter=GreaterThanOrEqual("id", 15)),
        )
        step(f"{name}: dynamic partition overwrite", lambda t=table: t.dynamic_partition_overwrite(batch(200, 3)))
        step(f"{name}: upsert", lambda t=table: t.upsert(batch(5, 10)))

    # Schema, spec, sort order and property changes on a table of their own (small bases).
    table = step("create py.evolve", lambda: cat.create_table("py.evolve", schema, partition_spec=spec))
    if table is not None:
        step("py.evolve: append", lambda: table.append(batch(0, 5)))

        def evolve_schema() -> None:
            with table.update_schema() as update:
                update.add_column("note", StringType(), doc="a note")
                update.update_column("qty", field_type=LongType())
                update.rename_column("amount", "price")
                update.move_first("category")

        step("schema: add, widen, rename, move", evolve_schema)
        step("schema: delete column", lambda: table.update_schema().delete_column("note").commit())
        wider = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("extra", pa.string())])
        step("schema: union by name", lambda: table.update_schema().union_by_name(wider).commit())

        def evolve_spec() -> None:
            with table.update_spec() as update:
                update.add_field("id", BucketTransform(4), "id_bucket")
                update.add_field("ts", DayTransform(), "ts_day")

        step("spec: add bucket and day", evolve_spec)
        step("spec: remove identity", lambda: table.update_spec().remove_field("category").commit())
        step("spec: rename", lambda: table.update_spec().rename_field("ts_day", "day").commit())
        step(
            "sort: new order",
            lambda: (
                table.update_sort_order().asc("category", IdentityTransform()).desc("id", IdentityTransform()).commit()
            ),
        )
        step(
            "properties: set",
            lambda: table.transaction().set_properties(team="lake", owner="other").commit_transaction(),
        )
        step("properties: remove", lambda: table.transaction().remove_properties("team").commit_transaction())
        step(
            "properties: remove a missing key",
            lambda: table.transaction().remove_properties("never-set").commit_transaction(),
        )
        step("append after evolution", lambda: table.append(table.scan().to_arrow().slice(0, 3)))

    # Refs, expiry, statistics and a conflict, on a table with a short history.
    table = step("create py.refs", lambda: cat.create_table("py.refs", schema))
    if table is not None:
        for start in (0, 10, 20):
            step("py.refs: append", lambda start=start: table.append(batch(start, 3)))
        snaps = [s.snapshot_id for s in table.snapshots()]
        if len(snaps) >= 3:
            step(
                "tag",
                lambda: table.manage_snapshots().create_tag(snaps[0], "first", max_ref_age_ms=86_400_000).commit(),
            )
            step(
                "branch",
                lambda: (
                    table.manage_snapshots()
                    .create_branch(snaps[1], "dev", max_snapshot_age_ms=3_600_000, min_snapshots_to_keep=2)
                    .commit()
                ),
            )
            step("append to branch", lambda: table.append(table.scan().to_arrow().slice(0, 2), branch="dev"))
            step("rollback", lambda: table.manage_snapshots().rollback_to_snapshot(snaps[-2]).commit())
            step("set current snapshot", lambda: table.manage_snapshots().set_current_snapshot(snaps[-1]).commit())
            step(
                "remove tag and branch",
                lambda: table.manage_snapshots().remove_tag("first").remove_branch("dev").commit(),
            )
            step("expire snapshots", lambda: table.maintenance.expire_snapshots().by_ids(snaps[:2]).commit())

        def statistics() -> None:
            snap = table.current_snapshot()
            stats = StatisticsFile(
                snapshot_id=snap.snapshot_id,
                statistics_path=f"{table.location()}/metadata/stats-{snap.snapshot_id}.puffin",
                file_size_in_bytes=100,
                file_footer_size_in_bytes=20,
                blob_metadata=[
                    BlobMetadata(type="apache-datasketches-theta-v1", snapshot_id=snap.snapshot_id,
                                 sequence_number=snap.sequence_number, fields=[1], properties={"ndv": "10"})
                ],
            )  # fmt: skip
            with table.update_statistics() as update:
                update.set_statistics(stats)
            with table.update_statistics() as update:
                update.remove_statistics(snap.snapshot_id)

        step("statistics: set and remove", statistics)

        # A stale writer: its commit asserts a snapshot that is no longer main's head (409).
        stale = cat.load_table("py.refs")
        step("fresh append", lambda: table.append(batch(300, 2)))
        step("stale append (conflict)", lambda: stale.append(batch(400, 2)))

    old = step("load py.v1", lambda: cat.load_table("py.v1"))
    if old is not None:
        step("upgrade v1 -> v2", lambda: old.transaction().upgrade_table_version(2).commit_transaction())
        step(
            "upgrade v2 -> v3",
            lambda: cat.load_table("py.v1").transaction().upgrade_table_version(3).commit_transaction(),
        )

    def staged(name: str, version: str) -> None:
        with cat.create_table_transaction(name, schema, properties={"format-version": version}) as txn:
            txn.append(batch(0, 4))

    step("staged create v2 with data", lambda: staged("py.staged_v2", "2"))
    step("staged create v3 with data", lambda: staged("py.staged_v3", "3"))
    v3 = {"format-version": "3"}
    step(
        "staged create v3, empty",
        lambda: cat.create_table_transaction("py.staged_v3_empty", schema, properties=v3).commit_transaction(),
    )

    def view() -> None:
        version = ViewVersion(
            version_id=1,
            schema_id=0,
            timestamp_ms=int(time.time() * 1000),
            summary={"engine-name": "pyiceberg"},
            representations=[SQLViewRepresentation(type="sql", sql="SELECT id FROM py.v2", dialect="spark")],
            default_namespace=["py"],
        )
        cat.create_view(
            "py.ids", Schema(NestedField(1, "id", LongType(), required=False)), version, properties={"a": "b"}
        )

    step("create view", view)
    return step


# --- DuckDB ------------------------------------------------------------------------------------------


def duckdb_connection():
    sys.path.insert(0, str(ROOT))
    from tests.services import duckdb_connection as connect

    return connect()


def run_duckdb(url: str) -> Steps:
    step = Steps("duckdb")
    con = duckdb_connection()

    def sql(statement: str) -> object:
        return step(statement.split("\n")[0][:120], lambda: con.execute(statement).fetchall())

    sql(
        f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{url}', AUTHORIZATION_TYPE 'none', "
        "ACCESS_DELEGATION_MODE 'none')"
    )
    sql("CREATE SCHEMA lake.dk")
    sql("CREATE TABLE lake.dk.t (id BIGINT, v VARCHAR, amount DOUBLE)")
    sql("INSERT INTO lake.dk.t VALUES (1, 'a', 1.0), (2, 'b', 2.0), (3, 'c', 3.0)")
    sql("INSERT INTO lake.dk.t SELECT range + 10, 'r', range FROM range(20)")
    sql("UPDATE lake.dk.t SET v = 'u' WHERE id = 1")
    sql("DELETE FROM lake.dk.t WHERE id = 2")
    sql("ALTER TABLE lake.dk.t ADD COLUMN note VARCHAR")
    sql("ALTER TABLE lake.dk.t RENAME COLUMN note TO remark")
    sql("ALTER TABLE lake.dk.t DROP COLUMN remark")
    sql("ALTER TABLE lake.dk.t SET PARTITIONED BY (bucket(4, id))")
    sql("ALTER TABLE lake.dk.t SET SORTED BY (id DESC)")
    sql("INSERT INTO lake.dk.t VALUES (100, 'after', 0.5)")
    sql("CREATE TABLE lake.dk.ctas AS SELECT * FROM lake.dk.t WHERE id < 12")
    sql("CREATE TABLE lake.dk.other (k INTEGER)")
    sql("BEGIN TRANSACTION")
    sql("INSERT INTO lake.dk.t VALUES (200, 'multi', 1.0)")
    sql("INSERT INTO lake.dk.other VALUES (1), (2)")
    sql("COMMIT")
    sql("CREATE TABLE lake.dk.t_v3 (id BIGINT, v VARCHAR) WITH ('format-version' = '3')")
    sql("INSERT INTO lake.dk.t_v3 VALUES (1, 'a'), (2, 'b')")
    sql("UPDATE lake.dk.t_v3 SET v = 'u' WHERE id = 1")
    sql("DELETE FROM lake.dk.t_v3 WHERE id = 2")
    con.close()
    return step


RUNNERS = {"spark": run_spark, "pyiceberg": run_pyiceberg, "duckdb": run_duckdb}


def available(source: str) -> str | None:
    """Why ``source`` cannot run here, or None."""
    modules = {"spark": "pyspark", "pyiceberg": "pyiceberg", "duckdb": "duckdb"}
    if importlib.util.find_spec(modules[source]) is None:
        return f"{modules[source]} is not installed"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--url", help="a running catalog server (default: start one)")
    parser.add_argument("--out", type=Path, default=HERE)
    args = parser.parse_args()
    sources = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = set(sources) - set(SOURCES)
    if unknown:
        parser.error(f"unknown sources: {sorted(unknown)}")

    server = None
    if args.url:
        upstream = args.url
    else:
        sys.path.insert(0, str(ROOT))
        from tests.support import start_server

        workdir = Path(tempfile.mkdtemp(prefix="corpus-"))
        server = start_server(workdir, extra_env={"CATALOG_WAREHOUSE": str(workdir / "w")})  # short paths
        upstream = server.url
        print(f"server {upstream} in {workdir}", flush=True)
    recorder = Recorder(upstream)
    proxy, url = start_proxy(recorder)
    try:
        for source in sources:
            if why := available(source):
                print(f"{source}: skipped ({why})", flush=True)
                continue
            print(f"{source}: recording through {url}", flush=True)
            recorder.source = source
            started = time.monotonic()
            try:
                steps = RUNNERS[source](url)
                outcome = steps.summary()
            except Exception:
                traceback.print_exc()
                outcome = "stopped by an error"
            lines = recorder.lines.get(source, [])
            path = args.out / f"{source}.jsonl"
            with path.open("w") as f:
                for line in lines:
                    f.write(json.dumps(line, separators=(",", ":"), sort_keys=False) + "\n")
            counts = Counter(f"{line['endpoint']} {line['status']}" for line in lines)
            print(
                f"{source}: {outcome}; {len(lines)} lines, {path.stat().st_size // 1024} KiB -> {path} "
                f"({time.monotonic() - started:.0f} s)\n    "
                + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())),
                flush=True,
            )
    finally:
        proxy.shutdown()
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
