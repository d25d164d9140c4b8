"""Baselines measured in the same run, on the same kind of database and storage as the server.

(a) raw CAS: the catalog's commit is one conditional UPDATE; here that UPDATE runs directly (sqlite3
    or psycopg, no HTTP, no metadata file) on a table shaped like ``catalog_entries``: one writer in
    a loop, then 16 writer processes on ONE row (a loser re-reads the row and tries again).
(b) metadata write: writing one metadata file of the hot table's size, create-only, the way the
    server does it (O_EXCL + fsync locally; ``PutObject`` with ``If-None-Match: *`` on S3).
    (a) + (b) give the serial bound of a hot table: 1 / (write + CAS) commits/s.
(c) pyiceberg's embedded ``SqlCatalog`` committing the very same append (the same JSON body,
    parsed into pyiceberg's models) to its own tables in the same database and warehouse kind, in
    a separate spawned process: one writer over 10 tables, then 16 writers over 100 tables.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from . import clients, wire

CAS_TABLE = "bench_raw_cas"
UPDATE = (
    f"UPDATE {CAS_TABLE} SET metadata_location = {{p}}, previous_metadata_location = {{p}} "
    f"WHERE id = {{p}} AND metadata_location = {{p}}"
)


# -- (a) raw CAS ----------------------------------------------------------------------------------


def _connect(db: dict) -> Any:
    """A connection configured like the server's: SQLite in WAL with BEGIN IMMEDIATE writes."""
    if db["kind"] == "sqlite":
        conn = sqlite3.connect(db["path"], timeout=30, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn
    import psycopg

    return psycopg.connect(db["dsn"])


def _cas(db: dict, conn: Any, row: int, expected: str, new: str) -> bool:
    if db["kind"] == "sqlite":
        conn.execute("BEGIN IMMEDIATE")
        won = conn.execute(UPDATE.format(p="?"), (new, expected, row, expected)).rowcount == 1
        conn.execute("COMMIT")
        return won
    won = conn.execute(UPDATE.format(p="%s"), (new, expected, row, expected)).rowcount == 1
    conn.commit()
    return won


def _current(db: dict, conn: Any, row: int) -> str:
    p = "?" if db["kind"] == "sqlite" else "%s"
    value = conn.execute(f"SELECT metadata_location FROM {CAS_TABLE} WHERE id = {p}", (row,)).fetchone()[0]
    if db["kind"] != "sqlite":
        conn.commit()
    return value


def _prepare_cas_table(db: dict) -> None:
    conn = _connect(db)
    conn.execute(f"DROP TABLE IF EXISTS {CAS_TABLE}")
    conn.execute(
        f"CREATE TABLE {CAS_TABLE} (id INTEGER PRIMARY KEY, namespace VARCHAR(1024) NOT NULL, "
        "name VARCHAR(1024) NOT NULL, kind VARCHAR(8) NOT NULL, metadata_location TEXT NOT NULL, "
        "previous_metadata_location TEXT)"
    )
    conn.execute(
        f"INSERT INTO {CAS_TABLE} (id, namespace, name, kind, metadata_location) "
        f"VALUES (1, 'bench', 'hot', 'table', '{_location(0)}')"
    )
    if db["kind"] != "sqlite":
        conn.commit()
    conn.close()


def _location(n: int) -> str:
    return f"s3://warehouse/bench/bench/hot/metadata/{n:05d}-{uuid.uuid4()}.metadata.json"


def cas_worker(i: int, db: dict, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    conn = _connect(db)
    expected = _current(db, conn, 1)
    deadline = start()
    t0 = time.perf_counter()
    lat: list[float] = []
    wins = losses = 0
    while wins < max_ops and time.perf_counter() < deadline:
        new = _location(wins + 1)
        a = time.perf_counter()
        if _cas(db, conn, 1, expected, new):
            lat.append(time.perf_counter() - a)
            expected, wins = new, wins + 1
        else:
            losses += 1
            expected = _current(db, conn, 1)
    elapsed = time.perf_counter() - t0
    conn.close()
    return {"lat": lat, "wins": wins, "losses": losses, "elapsed": elapsed}


def raw_cas(db: dict, single_s: float, multi_s: float, writers: int = 16) -> dict:
    """Single-writer CAS latency and 16-writers-on-one-row CAS throughput."""
    _prepare_cas_table(db)
    single = clients.fan_out(cas_worker, [db], single_s, 100_000)
    multi = clients.fan_out(cas_worker, [db] * writers, multi_s, 100_000)
    _drop_cas_table(db)
    return {"single": single, "multi": multi}


def _drop_cas_table(db: dict) -> None:
    conn = _connect(db)
    conn.execute(f"DROP TABLE IF EXISTS {CAS_TABLE}")
    if db["kind"] != "sqlite":
        conn.commit()
    conn.close()


# -- (b) metadata write ---------------------------------------------------------------------------


def metadata_write(storage: dict, size: int, count: int, budget_s: float) -> list[float]:
    """Latencies of ``count`` create-only writes of ``size`` bytes, like the server's storage layer."""
    data = os.urandom(size // 2).hex().encode()[:size]
    lat: list[float] = []
    deadline = time.perf_counter() + budget_s
    if storage["kind"] == "local":
        folder = os.path.join(storage["path"], "bench-write-probe")
        os.makedirs(folder, exist_ok=True)
        for _ in range(count):
            path = os.path.join(folder, f"{uuid.uuid4()}.metadata.json")
            a = time.perf_counter()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            lat.append(time.perf_counter() - a)
            os.unlink(path)
            if time.perf_counter() > deadline:
                break
        return lat
    s3 = _s3_client(storage)
    for _ in range(count):
        key = f"bench-write-probe/{uuid.uuid4()}.metadata.json"
        a = time.perf_counter()
        s3.put_object(Bucket=storage["bucket"], Key=key, Body=data, IfNoneMatch="*")
        lat.append(time.perf_counter() - a)
        s3.delete_object(Bucket=storage["bucket"], Key=key)
        if time.perf_counter() > deadline:
            break
    return lat


def _s3_client(storage: dict) -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=storage["endpoint"],
        region_name=storage["region"],
        aws_access_key_id=storage["access_key"],
        aws_secret_access_key=storage["secret_key"],
        config=Config(s3={"addressing_style": "path"}),
    )


# -- (c) pyiceberg SqlCatalog ---------------------------------------------------------------------


def sqlcatalog(props: dict, tables: int, columns: int, single_s: float, multi_s: float, writers: int) -> dict:
    """Run the SqlCatalog baseline in a fresh spawned process (pyiceberg stays out of this one,
    which forks the HTTP clients)."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_sqlcatalog_main, args=(props, tables, columns, single_s, multi_s, writers, queue))
    proc.start()
    try:
        result = queue.get(timeout=120 + 3 * (single_s + multi_s) + tables)
    except Exception as e:  # noqa: BLE001
        result = {"error": f"SqlCatalog baseline did not finish: {e!r}"}
    proc.join(10)
    if proc.is_alive():
        proc.kill()
    return result


def _sqlcatalog_main(
    props: dict, tables: int, columns: int, single_s: float, multi_s: float, writers: int, queue: Any
) -> None:
    try:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.schema import Schema

        catalog = SqlCatalog("bench", **props)
        catalog.create_namespace("bench")
        schema = Schema.model_validate(wire.schema(columns))
        names = [f"sql_{i:03d}" for i in range(tables)]
        for name in names:
            catalog.create_table(f"bench.{name}", schema=schema)
        catalog.engine.dispose()  # the forked writers open their own connections
        single = clients.fan_out(_sqlcatalog_worker, [(props, names[:10])], single_s, 100_000)
        groups = [(props, names[w::writers]) for w in range(writers)]
        multi = clients.fan_out(_sqlcatalog_worker, groups, multi_s, 100_000)
        queue.put({"single": single, "multi": multi})
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        import traceback

        queue.put({"error": f"{e!r}\n{traceback.format_exc()[-1500:]}"})


def _sqlcatalog_worker(i: int, args: tuple, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    """Round-robin appends with ``SqlCatalog.commit_table`` (which loads the table, applies the
    updates, writes the metadata file and runs its own conditional UPDATE)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.table import CommitTableRequest

    props, names = args
    catalog = SqlCatalog("bench", **props)
    tables = [catalog.load_table(f"bench.{n}") for n in names]
    heads = [(t.metadata.current_snapshot_id, t.metadata.last_sequence_number) for t in tables]
    deadline = start()
    t0 = time.perf_counter()
    lat: list[float] = []
    failures, k = 0, 0
    while len(lat) < max_ops and time.perf_counter() < deadline:
        j = k % len(tables)
        k += 1
        table, (parent, seq) = tables[j], heads[j]
        sid = wire.new_snapshot_id()
        body = orjson.loads(wire.append_body(table.metadata.location, [sid], parent, seq + 1))
        body["identifier"] = {"namespace": ["bench"], "name": names[j]}
        req = CommitTableRequest.model_validate(body)
        a = time.perf_counter()
        try:
            catalog.commit_table(table, req.requirements, req.updates)
        except CommitFailedException:
            failures += 1
            fresh = catalog.load_table(f"bench.{names[j]}").metadata
            heads[j] = (fresh.current_snapshot_id, fresh.last_sequence_number)
            continue
        lat.append(time.perf_counter() - a)
        heads[j] = (sid, seq + 1)
    return {"lat": lat, "failures": failures, "elapsed": time.perf_counter() - t0}
