"""A PySpark pipeline on one Iceberg table, through the REST catalog, with everything racing at once.

    python examples/spark_pipeline/pipeline.py --uri http://127.0.0.1:8181 --writers 4 --batches 5

What runs, concurrently, in one Spark application (each job has its own ``SparkSession``, so its
own catalog client, exactly as separate ``spark-submit`` jobs would):

* K **ingestion** jobs, each appending micro-batches of events to ``lake.<namespace>.events``.
  Every append carries the snapshot property ``pipeline.batch``; a job that sees its append fail
  looks for that property in the table's snapshots before retrying, so a batch whose commit
  actually landed is never appended twice (exactly once, even across an unknown commit state).
* a **compaction** job calling ``system.rewrite_data_files`` in a loop;
* a **GDPR delete** job deleting every row of a set of "forgotten" users in a loop, and once more
  after ingestion has finished.

Iceberg retries commits that lose the catalog's compare-and-swap (HTTP 409) itself, and refuses
(``ValidationException``) a commit whose work conflicts with what won in between, e.g. a
compaction whose input files a delete has just rewritten. A refused compaction or delete is
counted and tried again on the next round; a refused append is retried by its job.

At the end the pipeline **verifies** the table: every ingested event of a user who was not
forgotten is present exactly once, no forgotten user's event is left, and every batch was
committed exactly once. It prints a JSON summary and exits 1 if the verification fails.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_conf import spark_conf  # noqa: E402


@dataclass
class Tally:
    """What the jobs did; shared by the threads, so every update takes the lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    counts: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, key: str, error: BaseException | None = None) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if error is not None and len(self.errors) < 20:
                self.errors.append(f"{key}: {reason(error)}")


def reason(error: BaseException) -> str:
    """The Java exception line of a Spark error (Py4J's first line only names the call)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    java = [line for line in lines if "Exception:" in line and not line.startswith("at ")]
    return (java or lines or [type(error).__name__])[0][:300]


def batch_rows(writer: int, batch: int, rows: int, users: int) -> list[tuple]:
    """Deterministic events of one micro-batch: ``(event_id, user_id, writer, batch, ts, payload)``."""
    rnd = random.Random(writer * 1_000_003 + batch)
    start = datetime(2026, 1, 1)
    return [
        (
            f"w{writer}-b{batch}-{i}",
            rnd.randint(1, users),
            writer,
            batch,
            start + timedelta(seconds=rnd.randint(0, 3 * 86_400 - 1)),
            f"payload {rnd.random():.6f}",
        )
        for i in range(rows)
    ]


SCHEMA = "event_id STRING, user_id INT, writer INT, batch INT, ts TIMESTAMP, payload STRING"


def create_table(spark, table: str) -> None:
    namespace = table.rsplit(".", 1)[0]
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {namespace}")
    spark.sql(f"DROP TABLE IF EXISTS {table} PURGE")
    spark.sql(
        f"""CREATE TABLE {table} ({SCHEMA}) USING iceberg PARTITIONED BY (days(ts))
        TBLPROPERTIES (
            'format-version' = '2',
            'write.delete.mode' = 'copy-on-write',
            'write.delete.isolation-level' = 'snapshot',
            'commit.retry.num-retries' = '30',
            'commit.retry.min-wait-ms' = '20',
            'commit.retry.max-wait-ms' = '1000'
        )"""
    )


def batch_committed(spark, table: str, batch_id: str) -> bool:
    found = spark.sql(f"SELECT count(*) FROM {table}.snapshots WHERE summary['pipeline.batch'] = '{batch_id}'")
    return found.collect()[0][0] > 0


def ingest(spark, table: str, writer: int, args: argparse.Namespace, tally: Tally) -> None:
    for batch in range(args.batches):
        batch_id = f"w{writer}-b{batch}"
        df = spark.createDataFrame(batch_rows(writer, batch, args.rows, args.users), SCHEMA)
        for attempt in range(1, 11):
            try:
                df.writeTo(table).option("snapshot-property.pipeline.batch", batch_id).append()
                tally.add("appends")
                break
            except Exception as e:  # the commit may have landed even though the call failed
                tally.add("append failures", e)
                if batch_committed(spark, table, batch_id):
                    tally.add("appends")
                    break
                time.sleep(0.2 * attempt)
        else:
            raise RuntimeError(f"batch {batch_id} could not be committed")


def compact(spark, table: str, done: threading.Event, tally: Tally) -> None:
    short = table.split(".", 1)[1]
    while not done.is_set():
        try:
            result = spark.sql(
                f"CALL {table.split('.')[0]}.system.rewrite_data_files("
                f"table => '{short}', options => map('min-input-files', '2'))"
            ).collect()
            tally.add("compactions" if result and result[0][0] > 0 else "compactions with nothing to do")
        except Exception as e:  # refused by Iceberg's validation: the files changed underneath
            tally.add("compactions refused", e)
        done.wait(0.5)


def forget(spark, table: str, forgotten: list[int], done: threading.Event, tally: Tally) -> None:
    users = ", ".join(map(str, forgotten))
    final_attempts = 0
    while final_attempts < 20:
        finished = done.is_set()  # read before deleting: the last round runs after ingestion ended
        final_attempts += finished
        try:
            spark.sql(f"DELETE FROM {table} WHERE user_id IN ({users})")
            tally.add("deletes")
            if finished:
                return
        except Exception as e:  # refused: a compaction or an append conflicted; try again
            tally.add("deletes refused", e)
        done.wait(1.0 if not finished else 0.2 * final_attempts)
    raise RuntimeError("the final delete could not be committed")


def verify(spark, table: str, args: argparse.Namespace, forgotten: set[int]) -> list[str]:
    expected = {
        row[0]
        for writer in range(args.writers)
        for batch in range(args.batches)
        for row in batch_rows(writer, batch, args.rows, args.users)
        if row[1] not in forgotten
    }
    counts = dict(spark.sql(f"SELECT event_id, count(*) FROM {table} GROUP BY event_id").collect())
    problems = []
    duplicated = sorted(k for k, n in counts.items() if n != 1)
    missing = expected - counts.keys()
    unexpected = counts.keys() - expected  # includes every surviving event of a forgotten user
    if duplicated:
        problems.append(f"{len(duplicated)} events present more than once, e.g. {duplicated[:5]}")
    if missing:
        problems.append(f"{len(missing)} ingested events missing, e.g. {sorted(missing)[:5]}")
    if unexpected:
        problems.append(f"{len(unexpected)} events that must not be there, e.g. {sorted(unexpected)[:5]}")
    batches = spark.sql(
        f"SELECT summary['pipeline.batch'], count(*) FROM {table}.snapshots "
        "WHERE summary['pipeline.batch'] IS NOT NULL GROUP BY 1"
    ).collect()
    if len(batches) != args.writers * args.batches or any(n != 1 for _, n in batches):
        problems.append(f"expected each of {args.writers * args.batches} batches committed once, got {batches}")
    return problems


def run(spark, args: argparse.Namespace) -> dict:
    table = f"{args.catalog}.{args.namespace}.{args.table}"
    create_table(spark, table)
    forgotten = list(range(1, args.forget + 1))
    tally, done = Tally(), threading.Event()

    def job(target, *job_args):
        def body():
            try:
                target(spark.newSession(), table, *job_args)
            except BaseException as e:
                tally.add("jobs failed", e)

        return threading.Thread(target=body, name=target.__name__)

    ingesters = [job(ingest, w, args, tally) for w in range(args.writers)]
    others = [job(compact, done, tally), job(forget, forgotten, done, tally)]
    started = time.monotonic()
    for thread in ingesters + others:
        thread.start()
    for thread in ingesters:
        thread.join()
    done.set()
    for thread in others:
        thread.join()
    problems = verify(spark, table, args, set(forgotten))
    if tally.counts.get("jobs failed"):
        problems.append("a job failed")
    rows = spark.sql(f"SELECT count(*) FROM {table}").collect()[0][0]
    return {
        "table": table,
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows,
        **dict(sorted(tally.counts.items())),
        "errors": tally.errors,
        "problems": problems,
        "verified": not problems,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--uri", default="http://127.0.0.1:8181", help="the catalog's base URL")
    p.add_argument("--catalog", default="lake", help="Spark catalog name")
    p.add_argument("--namespace", default="pipeline")
    p.add_argument("--table", default="events")
    p.add_argument("--writers", type=int, default=4, help="concurrent ingestion jobs")
    p.add_argument("--batches", type=int, default=5, help="micro-batches per ingestion job")
    p.add_argument("--rows", type=int, default=1000, help="rows per micro-batch")
    p.add_argument("--users", type=int, default=200, help="distinct user ids in the events")
    p.add_argument("--forget", type=int, default=10, help="users 1..N are deleted (GDPR)")
    p.add_argument("--warehouse", choices=["local", "s3"], default="local", help="the server's warehouse kind")
    p.add_argument("--s3-access-key", help="for an s3 warehouse")
    p.add_argument("--s3-secret-key", help="for an s3 warehouse")
    p.add_argument("--s3-endpoint", help="override the endpoint the catalog advertises")
    p.add_argument("--master", default="local[2]")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from pyspark.sql import SparkSession

    args = parse_args(argv)
    conf = spark_conf(
        args.uri,
        args.warehouse,
        access_key=args.s3_access_key,
        secret_key=args.s3_secret_key,
        s3_endpoint=args.s3_endpoint,
        catalog=args.catalog,
    )
    builder = SparkSession.builder.master(args.master).appName("iceberg-pipeline")
    for key, value in {**conf, "spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "4"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        summary = run(spark, args)
    finally:
        spark.stop()
    print(json.dumps(summary, indent=2, default=str))
    print("verification passed" if summary["verified"] else "VERIFICATION FAILED")
    return 0 if summary["verified"] else 1


if __name__ == "__main__":
    sys.exit(main())
