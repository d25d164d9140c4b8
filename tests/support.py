"""What the tests share: plain helpers, no fixtures (those are in conftest.py) and no tests.

A test module imports from here (or from the other support modules: services.py, idp.py,
java_oracle.py, writers.py, corpus/), never from another test module or from conftest.py.

- environment: ``ROOT``, ``IN_CI``, ``skip_or_fail``, ``backends``, ``free_port``, ``ServiceUnavailable``
- the server as a process: ``Server``, ``start_server``, ``start_worker``, ``kill_group`` (kill -9 of a
  worker with its children), ``group_members``, ``s3_env``, ``s3_client_props``, ``warehouse_roots``
- raw HTTP: ``Http`` (the one helper), ``assert_error``, ``metric_total``
- change events pushed: ``Receiver`` (a real local webhook receiver, down, up or refusing every Nth
  POST), ``FAST`` (delivery settings for tests), ``wait_for`` (a condition, bounded); the feed read:
  ``feed`` (one request), ``read_all`` (every event, following the tokens); ``Start`` (the type of
  conftest's ``fresh``)
- storage as it is: ``stored_files`` (the files under a prefix, walked or listed in the bucket),
  ``local_warehouse`` (the warehouse directory, or None in S3)
- maintenance on the shared servers: ``CARE_ON_REQUEST``, ``wait_task``; dropped tables: ``purge_now``
- schemas, named by what they are: ``JSON_SCHEMA`` (REST JSON, id + data), ``JSON_ID_SCHEMA`` (REST
  JSON, one id column), ``PY_SCHEMA`` (pyiceberg, id + name + ts) and ``rows`` (pyarrow rows of it)
- REST helpers over an ``Http``: ``create``, ``load``, ``commit``, ``add_column``
- commit bodies for the in-process engine: ``append_updates``
- races: ``race(n, fn)``
- the catalog in process: ``local_catalog``
- tokens: ``TOKEN_SECRET``, ``CLIENTS``, ``auth_env`` (``ADMIN_ONLY``), ``token``, ``as_``, ``builtin_token``;
  three peers who may all write: ``PEERS``, ``PEERS_GRANTS`` (conftest's ``peers`` server), ``As`` (raw
  HTTP as one principal)
- PostgreSQL: ``new_pg_database``, ``check_migrations_round_trip``, ``commit_with_its_connection_killed``
- Spark (plain helpers; the session is conftest's ``spark`` fixture): ``spark_unavailable``,
  ``spark_conf``, ``register_catalog``, ``create_events``, ``insert_events``, ``sql_rows``, ``scalar``
- table maintenance: ``CARE_ENV``, ``care_server`` (a server of its own that runs maintenance), ``run_care``
  (run it now and wait), ``live_entries`` (a snapshot's live manifest entries), ``duckdb_attached``
  (also behind conftest's ``duck``); a partitioned (id, part) table fed by small appends:
  ``PART_SCHEMA``, ``PART_SPEC``, ``part_table``, ``part_batch`` (one append's rows), ``part_ids`` (the
  ids of some appends)
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestampType

T = TypeVar("T")

# --- environment -------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() == "true"


def skip_or_fail(reason: str) -> None:
    """Skip a test whose prerequisite is missing here; with ``CI=true`` that is a failure instead."""
    if IN_CI:
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def backends() -> list[str]:
    """The backends ``CATALOG_TEST_BACKENDS`` asks for (default: sqlite,postgres-s3)."""
    wanted = os.environ.get("CATALOG_TEST_BACKENDS", "sqlite,postgres-s3")
    return [b.strip() for b in wanted.split(",") if b.strip()]


class ServiceUnavailable(RuntimeError):
    """A service cannot be started here (binary missing, no free port, or it did not become ready)."""


def free_port(grpc_offset: int = 0, avoid: set[int] = frozenset()) -> int:
    """A free TCP port on 127.0.0.1 (and port + grpc_offset free too, when an offset is given)."""
    for _ in range(500):
        port = random.randrange(15000, 55000)
        wanted = {port, port + grpc_offset}
        if wanted & avoid:
            continue
        try:
            for p in wanted:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue
    raise ServiceUnavailable("no free TCP port found on 127.0.0.1")


# --- the server as a process -------------------------------------------------------------------------


@dataclass
class Server:
    """A running ``iceberg-catalog serve`` process."""

    url: str
    env: dict[str, str]
    proc: subprocess.Popen
    log: Path
    backend: str
    io_props: dict[str, str] = field(default_factory=dict)

    def catalog(self, **props: str) -> RestCatalog:
        return RestCatalog(f"test-{uuid.uuid4().hex[:6]}", uri=self.url, **{**self.io_props, **props})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# The shared test servers run one maintenance worker for what a test asks (the purge of a dropped
# table, a maintenance run), and schedule nothing (``CATALOG_MAINTENANCE_ENABLED=false``): tests
# write snapshots with old timestamps, which expiry would remove under them. A run a test asks for
# follows the table's policy alone (no writer grace). ``purge_now`` ends a drop's retention and waits.
CARE_ON_REQUEST = {
    "CATALOG_MAINTENANCE_WORKERS": "1",
    "CATALOG_MAINTENANCE_ENABLED": "false",
    "CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS": "0",
}


PORT_TRIES = 5  # a free port may be taken by another process between the check and the server's bind


def start_server(workdir: Path, backend: str = "sqlite", extra_env: dict[str, str] | None = None) -> Server:
    """Start the server as its own process on a free port and wait until it answers /health/live
    (on another port when the one picked was taken meanwhile, unless ``extra_env`` fixes the port)."""
    for _ in range(PORT_TRIES - 1):
        try:
            return _start_server(workdir, backend, extra_env)
        except PortTaken:
            continue
    return _start_server(workdir, backend, extra_env)


class PortTaken(RuntimeError):
    """The server could not listen: another process took the port after ``free_port`` saw it free."""


def _start_server(workdir: Path, backend: str, extra_env: dict[str, str] | None) -> Server:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{workdir / 'catalog.db'}",
        "CATALOG_WAREHOUSE": str(workdir / "warehouse"),
        "CATALOG_PORT": str(port),
        "CATALOG_HOST": "127.0.0.1",
        "CATALOG_LOG_LEVEL": "warning",
        "CATALOG_LOG_FORMAT": "json",
        # No maintenance worker unless asked (CARE_ON_REQUEST, tests/test_maintenance.py): a worker claims
        # any task of its database's queue, and test servers sharing a database do not share storage.
        "CATALOG_MAINTENANCE_WORKERS": "0",
        **(extra_env or {}),
    }
    log = workdir / f"server-{port}.log"
    with log.open("wb") as out:  # the child holds its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "catalog", "serve"], env=env, cwd=workdir, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            text = log.read_text()[-3000:]
            if "Address already in use" in text and "CATALOG_PORT" not in (extra_env or {}):
                raise PortTaken(text)
            raise RuntimeError(f"server exited with {proc.returncode}:\n{text}")
        try:
            if requests.get(f"{url}/health/live", timeout=1).status_code == 200:
                return Server(url, env, proc, log, backend)
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    proc.kill()
    proc.wait(5)
    raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")


def start_worker(server: Server, own_group: bool = False, **env: str) -> subprocess.Popen:
    """A dedicated ``iceberg-catalog maintenance worker`` process on the server's configuration
    (one thread, a 5 s lease, no scheduled work unless ``env`` says so), in the server's working
    directory. Stop it with ``kill()``; with ``own_group`` it leads a process group of its own (with
    its children: a Spark JVM), stopped whole with ``kill_group``."""
    env = {
        **server.env,
        "CATALOG_MAINTENANCE_WORKERS": "1",
        "CATALOG_MAINTENANCE_LEASE_SECONDS": "5",
        "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "catalog", "maintenance", "worker"],
        env=env,
        cwd=server.log.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=own_group,
    )


def kill_group(proc: subprocess.Popen, timeout: float = 30) -> None:
    """kill -9 of the process group ``proc`` leads (``start_worker(own_group=True)``), wait until no
    process of it is alive (its children orphaned, zombies at most), then reap ``proc``. Until then
    its pid, the group's id, cannot be reused: the group is only ever this one. A no-op once reaped."""
    if proc.returncode is not None:
        return
    os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while alive := group_members(proc.pid):
        assert time.monotonic() < deadline, f"still alive after kill -9 of group {proc.pid}: {alive}"
        time.sleep(0.1)
    proc.wait(timeout)


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``, from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command, which may hold spaces
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def warehouse_roots(*roots: Path | str) -> dict[str, str]:
    """The setting that lets created warehouses live in local directories under ``roots``
    (``CATALOG_WAREHOUSE_ROOTS``; without it only on object storage)."""
    return {"CATALOG_WAREHOUSE_ROOTS": ",".join(str(r) for r in roots)}


def s3_env(s3, prefix: str) -> dict[str, str]:
    return {
        "CATALOG_WAREHOUSE": f"s3://{s3.bucket}/{prefix}",
        "CATALOG_S3_ENDPOINT": s3.endpoint,
        "CATALOG_S3_REGION": s3.region,
        "CATALOG_S3_ACCESS_KEY_ID": s3.access_key,
        "CATALOG_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
    }


def s3_profile(s3) -> dict[str, object]:
    """A warehouse's ``s3`` profile on the suite's S3 server (``s3_env``'s settings, as profile keys)."""
    return {
        "endpoint": s3.endpoint,
        "region": s3.region,
        "access-key-id": s3.access_key,
        "secret-access-key": s3.secret_key,
        "path-style-access": True,
    }


def s3_client_props(s3) -> dict[str, str]:
    """What a client supplies itself: credentials. Endpoint and path style come from /v1/config."""
    return {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}


def local_warehouse(server: Server) -> Path | None:
    """The server's warehouse directory, resolved; None when the warehouse is in S3."""
    warehouse = server.env.get("CATALOG_WAREHOUSE", "")
    return None if warehouse.startswith("s3://") else Path(warehouse).resolve()


def stored_files(server: Server, prefix: str) -> set[str]:
    """Every file under ``prefix`` as the storage holds it (not as the catalog says): walked on local
    disk, listed in the bucket on S3, named as the prefix spells them. What an attack test asserts on."""
    prefix = prefix.rstrip("/")
    if prefix.startswith("s3://"):
        import boto3

        bucket, _, key = prefix[len("s3://") :].partition("/")
        client = boto3.client(
            "s3",
            endpoint_url=server.env["CATALOG_S3_ENDPOINT"],
            region_name=server.env.get("CATALOG_S3_REGION") or "us-east-1",
            aws_access_key_id=server.env["CATALOG_S3_ACCESS_KEY_ID"],
            aws_secret_access_key=server.env["CATALOG_S3_SECRET_ACCESS_KEY"],
        )
        found = set()
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/"):
            found |= {f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", [])}
        return found
    path = prefix.removeprefix("file://")
    return {f"{prefix}/{os.path.relpath(os.path.join(d, f), path)}" for d, _, files in os.walk(path) for f in files}


# --- raw HTTP ----------------------------------------------------------------------------------------


class Http:
    """Raw HTTP against a server, for what no client would send: ``http.post("/v1/...", json=...)``.
    Without a session it opens its own (closed by ``close`` or a ``with`` block). With ``prefix``
    (a warehouse's name) the catalog routes ``/v1/...`` go to ``/v1/<prefix>/...``."""

    def __init__(
        self, base: str, session: requests.Session | None = None, timeout: float = 60, prefix: str | None = None
    ) -> None:
        self.base = base
        self.prefix = prefix
        self._owned = session is None
        self.session = requests.Session() if session is None else session
        self.timeout = timeout

    def url(self, path: str) -> str:
        if self.prefix and path.startswith("/v1/") and not path.startswith(("/v1/config", "/v1/oauth")):
            path = f"/v1/{self.prefix}/{path[len('/v1/') :]}"
        return self.base + path

    def __call__(self, method: str, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", self.timeout)
        return self.session.request(method, self.url(path), **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self("GET", path, **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self("POST", path, **kw)

    def delete(self, path: str, **kw) -> requests.Response:
        return self("DELETE", path, **kw)

    def close(self) -> None:
        if self._owned:
            self.session.close()

    def __enter__(self) -> Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def assert_error(resp: requests.Response, code: int, type_: str, contains: str = "") -> dict:
    """The Iceberg error body: {"error": {"message", "type", "code"}} with code == status."""
    assert resp.status_code == code, resp.text
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert err["code"] == code and err["type"] == type_, err
    assert isinstance(err["message"], str) and contains in err["message"], err
    return err


def purge_now(
    url: str, ident: str, headers: dict[str, str] | None = None, timeout: float = 90, warehouse: str | None = None
) -> dict:
    """End the retention of the dropped table ``ident`` (``a.b.t``) now and wait until its purge
    is done (the server needs a maintenance worker: ``CARE_ON_REQUEST``): the dropped entry as it was.
    ``warehouse``: a created warehouse's name (None: the default)."""
    ns, _, name = ident.rpartition(".")
    where = {"warehouse": warehouse} if warehouse else {}
    found = requests.get(
        f"{url}/management/v1/dropped", params={"namespace": ns, "name": name, **where}, headers=headers, timeout=30
    )
    found.raise_for_status()
    gone = found.json()["dropped"][0]
    ended = requests.delete(f"{url}/management/v1/dropped/{gone['id']}", params=where, headers=headers, timeout=30)
    assert ended.status_code == 202, ended.text
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = requests.get(
            f"{url}/management/v1/dropped", params={"namespace": ns, **where}, headers=headers, timeout=30
        )
        if all(d["id"] != gone["id"] for d in left.json()["dropped"]):
            return gone
        time.sleep(0.25)
    tasks = requests.get(f"{url}/management/v1/maintenance/tasks", params=where, headers=headers, timeout=30).json()
    raise AssertionError(f"the purge of {ident} did not finish in {timeout} s: {tasks}")


def wait_task(
    url: str, task_id: int, headers: dict[str, str] | None = None, timeout: float = 120, warehouse: str | None = None
) -> dict:
    """The maintenance task once it is neither queued nor running (done or failed); ``warehouse``:
    a task of that warehouse's queue."""
    deadline = time.monotonic() + timeout
    params = {"warehouse": warehouse} if warehouse else {}
    while True:
        task = requests.get(
            f"{url}/management/v1/maintenance/tasks/{task_id}", params=params, headers=headers, timeout=30
        ).json()
        if task["state"] not in ("queued", "running"):
            return task
        assert time.monotonic() < deadline, task
        time.sleep(0.2)


def metric_total(url: str, name: str) -> float:
    """The unlabelled series ``name`` on the server's /metrics."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " "))


# --- change events pushed: a webhook receiver ----------------------------------------------------------

# Delivery settings for tests: a sink loop polls every 0.2 s, a dead replica's lease expires in 2 s.
FAST = {"CATALOG_EVENTS_DELIVERY_INTERVAL_SECONDS": "0.2", "CATALOG_EVENTS_DELIVERY_LEASE_SECONDS": "2"}


class Receiver:
    """A webhook receiver on ``port``: records every delivery (headers, CloudEvent, body) and when it
    arrived (``arrivals``: (time.time(), id)); down until ``up()`` (nothing listens on the port), and
    down again after ``down()``. ``refuse_every=n``: every n-th POST is answered 503 (and not recorded),
    a flaky receiver, deterministically."""

    def __init__(self, port: int, refuse_every: int = 0) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/hook"
        self.refuse_every = refuse_every
        self.received: list[tuple[dict[str, str], dict[str, Any], bytes]] = []
        self.arrivals: list[tuple[float, str]] = []
        self.posts = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    def up(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with receiver._lock:
                    receiver.posts += 1
                    refuse = receiver.refuse_every > 0 and receiver.posts % receiver.refuse_every == 0
                    if refuse:
                        receiver.refused += 1
                    else:
                        event = json.loads(body)
                        receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, event, body))
                        receiver.arrivals.append((time.time(), event["id"]))
                self.send_response(503 if refuse else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def ids(self) -> list[str]:
        with self._lock:
            return [event["id"] for _, event, _ in self.received]


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


# A factory of fresh servers on one backend (conftest's ``fresh`` fixture).
Start = Callable[..., Server]


def feed(url: str, headers: dict[str, str] | None = None, **body: Any) -> requests.Response:
    """One POST to the server's change-event feed (``/v1/events``)."""
    return requests.post(f"{url}/v1/events", json=body, headers=headers or {}, timeout=30)


def read_all(url: str, headers: dict[str, str] | None = None, **filters: Any) -> list[dict[str, Any]]:
    """Every event the filter gives, following the continuation tokens to the end."""
    out: list[dict[str, Any]] = []
    token_: str | None = None
    while True:
        body = {**filters, "page-size": 1000, **({"continuation-token": token_} if token_ else {})}
        resp = feed(url, headers, **body)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        out += page["events"]
        if not page["events"] and token_ == page["next-page-token"]:
            return out
        if not page["events"]:
            return out
        token_ = page["next-page-token"]


# --- schemas and rows --------------------------------------------------------------------------------

# The REST JSON schema of a two-column table (what ``create`` sends).
JSON_SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "data", "type": "string", "required": False},
    ],
}

# The REST JSON schema of a one-column table, as the in-process engine tests create them.
JSON_ID_SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}

# The pyiceberg schema of the tables pyiceberg clients write; ``rows`` are its rows.
PY_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "ts", TimestampType(), required=False),
)


def rows(start: int, n: int) -> pa.Table:
    """``n`` rows of ``PY_SCHEMA`` with ids from ``start``."""
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
            "ts": pa.array([1_700_000_000_000_000 + i * 86_400_000_000 for i in ids], pa.timestamp("us")),
        }
    )


# --- REST helpers (over an Http) ---------------------------------------------------------------------


def create(http, ns: str, name: str, **extra) -> dict:
    """Create table ``ns.name`` with ``JSON_SCHEMA``: its LoadTableResult."""
    resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": JSON_SCHEMA, **extra})
    assert resp.status_code == 200, resp.text
    return resp.json()


def load(http, ns: str, name: str) -> dict:
    resp = http.get(f"/v1/namespaces/{ns}/tables/{name}")
    assert resp.status_code == 200, resp.text
    return resp.json()


def commit(http, ns, name, requirements=(), updates=()) -> requests.Response:
    return http.post(
        f"/v1/namespaces/{ns}/tables/{name}", json={"requirements": list(requirements), "updates": list(updates)}
    )


def add_column(created: dict, name: str) -> dict:
    """A commit body adding column id 3 to a table made by ``create``: once applied, the same body
    fails its requirement (so two runs of it cannot both succeed)."""
    return {
        "requirements": [{"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}],
        "updates": [
            {
                "action": "add-schema",
                "schema": {
                    "type": "struct",
                    "schema-id": 1,
                    "fields": [
                        *created["metadata"]["schemas"][0]["fields"],
                        {"id": 3, "name": name, "type": "long", "required": False},
                    ],
                },
                "last-column-id": 3,
            },
            {"action": "set-current-schema", "schema-id": -1},
        ],
    }


def append_updates(metadata: dict, snapshot_id: int) -> list[dict]:
    """The updates of an append of snapshot ``snapshot_id`` on ``metadata``'s main (the manifest list
    is named, not written: for the engine, which never reads it)."""
    snapshot = {
        "snapshot-id": snapshot_id,
        "sequence-number": metadata["last-sequence-number"] + 1,
        "timestamp-ms": metadata["last-updated-ms"] + 1,
        "manifest-list": f"{metadata['location']}/metadata/snap-{snapshot_id}.avro",
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    if metadata.get("current-snapshot-id") not in (None, -1):
        snapshot["parent-snapshot-id"] = metadata["current-snapshot-id"]
    return [
        {"action": "add-snapshot", "snapshot": snapshot},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
    ]


# --- races -------------------------------------------------------------------------------------------


def race(n: int, fn: Callable[[int], T], timeout: float = 120) -> list[T]:
    """Call ``fn(0) .. fn(n - 1)`` in ``n`` threads released together (a barrier): their results in
    index order; an exception in one is raised here once all have finished."""
    barrier = threading.Barrier(n, timeout=timeout)

    def run(i: int) -> T:
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


# --- the catalog in process --------------------------------------------------------------------------


@contextmanager
def local_catalog(path: Path, **settings: Any) -> Iterator[Any]:
    """The catalog service in this process on a SQLite file and a local warehouse under ``path``,
    migrated, with namespace ``n``: the app's own ``build_catalog``. ``settings``: more ``Settings``
    fields (e.g. append_rebase=True)."""
    from catalog.server.app import build_catalog
    from catalog.settings import Settings

    config = Settings(database_url=f"sqlite:///{path / 'c.db'}", warehouse=str(path / "wh"), **settings)
    cat = build_catalog(config, migrated=True)
    try:
        cat.create_namespace(("n",), {})
        yield cat
    finally:
        cat.db.engine.dispose()


# --- tokens ------------------------------------------------------------------------------------------

# The built-in token issuer's signing key and OAuth clients of the secured servers (test_authz and
# the modules that reuse its principals).
TOKEN_SECRET = "test-signing-key-" + "k" * 32
CLIENTS = {"admin": "admin-secret", "ingest": "ingest-secret", "analyst": "analyst-secret", "nobody": "nobody-secret"}


ADMIN_ONLY = "grants:\n  - {principal: client:admin, privileges: [admin], on: catalog}\n"


def auth_env(tmp: Path, bootstrap: str = ADMIN_ONLY, cache_seconds: str = "1") -> dict[str, str]:
    """A server's settings with authentication required, the built-in ``CLIENTS`` and the grants of
    ``bootstrap`` (a bootstrap file written into ``tmp``)."""
    policy = tmp / "grants.yaml"
    policy.write_text(bootstrap)
    return {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": ",".join(f"{k}:{v}" for k, v in CLIENTS.items()),
        "CATALOG_TOKEN_SECRET": TOKEN_SECRET,
        "CATALOG_AUTHZ_BOOTSTRAP": str(policy),
        "CATALOG_AUTHZ_CACHE_SECONDS": cache_seconds,
    }


def answered_409s(url: str) -> float:
    """The 409s the server at ``url`` answered so far, on all routes (its /metrics): clients such as
    pyiceberg retry a 409 silently, so the server's count is what shows one."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("catalog_http_requests_total{") and 'status="409"' in line
    )


def warehouse_admin_grants(warehouse: str) -> str:
    """A grants file (for ``auth_env``): ``admin`` holds the catalog, ``ingest`` administers the
    warehouse ``warehouse`` and nothing else."""
    return f"""
grants:
  - {{principal: client:admin, privileges: [admin], on: catalog}}
  - {{principal: client:ingest, privileges: [admin], on: {{warehouse: {warehouse}}}}}
"""


def token(server: Server, client: str) -> str:
    """A bearer token for ``client`` (one of ``CLIENTS``) from the server's token endpoint."""
    resp = requests.post(
        f"{server.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": client, "client_secret": CLIENTS[client]},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    return resp.json()["access_token"]


def as_(server: Server, client: str) -> RestCatalog:
    """A pyiceberg catalog signed in as ``client`` (one of ``CLIENTS``)."""
    return server.catalog(
        credential=f"{client}:{CLIENTS[client]}", **{"oauth2-server-uri": server.url + "/v1/oauth/tokens"}
    )


def builtin_token(server, client_id: str, secret: str) -> str:
    """A built-in token with scope ``catalog`` for any client id and secret."""
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret, "scope": "catalog"}
    resp = requests.post(f"{server.url}/v1/oauth/tokens", data=form, timeout=10)
    assert resp.status_code == 200, resp.text
    return resp.json()["access_token"]


# Three peers who may all write (conftest's ``peers`` server): ``alice`` and ``bob`` everywhere, ``eve``
# only in the namespace ``eve``. For what one principal may learn of, or do to, another's.
PEERS = {"alice": "alice-secret", "bob": "bob-secret", "eve": "eve-secret"}
PEERS_GRANTS = """
grants:
  - {principal: client:alice, privileges: [admin], on: catalog}
  - {principal: client:bob, privileges: [admin], on: catalog}
  - {principal: client:eve, privileges: [admin], on: {namespace: eve}}
"""


class As:
    """Raw HTTP as one principal (by default one of ``PEERS``), signed in at the token endpoint."""

    def __init__(self, server: Server, client: str, secret: str | None = None) -> None:
        resp = requests.post(
            f"{server.url}/v1/oauth/tokens",
            data={"grant_type": "client_credentials", "client_id": client, "client_secret": secret or PEERS[client]},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        self.base, self.headers = server.url, {"Authorization": f"Bearer {resp.json()['access_token']}"}

    def __call__(self, method: str, path: str, headers: dict | None = None, **kw) -> requests.Response:
        return requests.request(method, self.base + path, headers={**self.headers, **(headers or {})}, timeout=30, **kw)

    def get(self, path: str, **kw) -> requests.Response:
        return self("GET", path, **kw)

    def post(self, path: str, **kw) -> requests.Response:
        return self("POST", path, **kw)


# --- PostgreSQL --------------------------------------------------------------------------------------


def new_pg_database(pg, name: str) -> str:
    """A new, empty database owned by the catalog role on the suite's PostgreSQL: its URL."""
    import psycopg

    with psycopg.connect(pg.superuser_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER catalog')
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


def check_migrations_round_trip(url: str) -> None:
    """Upgrade to head (the schema equals the models'), downgrade to base, upgrade again."""
    import sqlalchemy as sa
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from catalog.database import migrate
    from catalog.database.db import create_engine, metadata
    from catalog.settings import Settings

    engine = create_engine(Settings(database_url=url).database)
    try:
        migrate.upgrade(engine)
        assert migrate.is_at_head(engine)
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), metadata)
        assert diff == [], diff
        migrate.downgrade(engine, "base")
        assert set(sa.inspect(engine).get_table_names()) <= {"alembic_version"}
        assert not migrate.is_at_head(engine)
        migrate.upgrade(engine)
        assert migrate.is_at_head(engine)
    finally:
        engine.dispose()


def commit_with_its_connection_killed(su, base: str, at: str) -> requests.Response:
    """POST a set-properties commit to table n.t of the server at ``base`` and kill its database
    connection while the pointer UPDATE runs (``at="update"``: before COMMIT is sent) or while its
    COMMIT runs (``at="commit"``). ``su``: an autocommit superuser psycopg connection to the
    server's database. A trigger sleeping 3 s makes the moment last long enough to be caught."""
    su.execute(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NEW; END $$"
    )
    if at == "update":
        su.execute("CREATE TRIGGER slow BEFORE UPDATE ON catalog_entries FOR EACH ROW EXECUTE FUNCTION slow()")
        running = "query LIKE 'UPDATE catalog_entries%'"
    else:  # a deferred constraint trigger runs at COMMIT
        su.execute(
            "CREATE CONSTRAINT TRIGGER slow AFTER UPDATE ON catalog_entries DEFERRABLE INITIALLY DEFERRED "
            "FOR EACH ROW EXECUTE FUNCTION slow()"
        )
        running = "query = 'COMMIT'"
    result: dict = {}

    def commit() -> None:
        body = {"updates": [{"action": "set-properties", "updates": {"killed": "during " + at}}]}
        result["resp"] = requests.post(f"{base}/v1/namespaces/n/tables/t", json=body, timeout=60)

    worker = threading.Thread(target=commit)
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not su.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            f"WHERE datname = current_database() AND state = 'active' AND {running}"
        ).fetchone()[0]:
            assert time.monotonic() < deadline, f"the {at} never started"
            time.sleep(0.05)
    finally:
        worker.join(60)
        su.execute("DROP TRIGGER slow ON catalog_entries")
        su.execute("DROP FUNCTION slow()")
    return result["resp"]


# --- Spark (the session itself is conftest's ``spark`` fixture) ---------------------------------------

SPARK_EXAMPLE = ROOT / "examples" / "spark_pipeline"


def spark_unavailable() -> str | None:
    """Why a Spark session cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed"
    import shutil

    if not shutil.which("java"):
        return "no java on PATH"
    return None


def spark_conf(*args: Any, **kwargs: Any) -> dict[str, str]:
    """``examples/spark_pipeline/spark_conf.py``'s ``spark_conf``: the settings the README documents."""
    if str(SPARK_EXAMPLE) not in sys.path:
        sys.path.insert(0, str(SPARK_EXAMPLE))
    from spark_conf import spark_conf as conf

    return conf(*args, **kwargs)


def client_settings(server: Server) -> dict:
    """``spark_conf`` keyword arguments for a client of ``server``."""
    if server.backend == "postgres-s3":
        return {
            "warehouse": "s3",
            "access_key": server.io_props["s3.access-key-id"],
            "secret_key": server.io_props["s3.secret-access-key"],
        }
    return {"warehouse": "local"}


def register_catalog(session, server: Server) -> str:
    """Register ``server`` as a Spark catalog of ``session`` (run-time settings are per session)."""
    name = "lake_" + re.sub(r"\W", "_", server.backend)
    prefix = f"spark.sql.catalog.{name}"
    for key, value in spark_conf(server.url, catalog=name, **client_settings(server)).items():
        if key.startswith(prefix):
            session.conf.set(key, value)
    return name


def sql_rows(spark, query: str) -> list[tuple]:
    """A Spark SQL query's rows as tuples."""
    return [tuple(r) for r in spark.sql(query).collect()]


def scalar(spark, query: str):
    return spark.sql(query).collect()[0][0]


def create_events(spark, table: str, **props: str) -> None:
    tblprops = {"format-version": "2", **props}
    spark.sql(
        f"""CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, category STRING, amount DOUBLE)
        USING iceberg PARTITIONED BY (days(ts), bucket(8, id))
        TBLPROPERTIES ({", ".join(f"'{k}' = '{v}'" for k, v in tblprops.items())})"""
    )


def insert_events(spark, table: str, ids: range) -> None:
    values = ", ".join(f"({i}, timestamp'2026-01-0{1 + i % 3} 10:00:00', 'c{i % 4}', {i}.5)" for i in ids)
    spark.sql(f"INSERT INTO {table} VALUES {values}")


# --- table maintenance --------------------------------------------------------------------------------------

CARE_ENV = {
    "CATALOG_MAINTENANCE_WORKERS": "1",
    "CATALOG_MAINTENANCE_INTERVAL_SECONDS": "3600",  # no scheduled work unless a test asks for it
    "CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS": "0",  # the table's policy alone (a race test sets one)
    "CATALOG_LOG_LEVEL": "info",
}


def care_server(backend: str, workdir: Path, services: dict | None = None, **env: str) -> Server:
    """A server of its own that runs table maintenance (``CARE_ENV`` + ``env``). On PostgreSQL it gets its
    own database and bucket prefix: servers sharing a database share its task queue."""
    env = {**CARE_ENV, **env}
    if backend == "postgres-s3":
        assert services is not None
        unique = f"care_{uuid.uuid4().hex[:8]}"
        env.update({"CATALOG_DATABASE_URL": new_pg_database(services["pg"], unique), **s3_env(services["s3"], unique)})
    srv = start_server(workdir, backend, env)
    if backend == "postgres-s3":
        srv.io_props = s3_client_props(services["s3"])
        srv.s3 = services["s3"]  # type: ignore[attr-defined]
    return srv


def run_care(server: Server, ns: str, table: str, timeout: float = 180, **body: object) -> list[dict]:
    """Run table maintenance on ``ns.table`` now (the management API, as the CLI's ``run --wait``) and wait
    for its tasks to finish."""
    from urllib.parse import quote

    url = f"{server.url}/management/v1/maintenance/tables/{quote(ns)}/{quote(table)}"
    resp = requests.post(url, json=body, timeout=30)
    assert resp.status_code == 202, resp.text
    return [wait_task(server.url, t["id"], timeout=timeout) for t in resp.json()["tasks"]]


def live_entries(table: Any, snapshot_id: int | None = None) -> dict[str, tuple]:
    """A snapshot's live data and delete files, as pyiceberg reads them: path -> (snapshot id, data
    sequence number, file sequence number, content, record count)."""
    snapshot = table.current_snapshot() if snapshot_id is None else table.snapshot_by_id(snapshot_id)
    found = {}
    for manifest in snapshot.manifests(table.io):
        for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = e.data_file
            found[f.file_path] = (
                e.snapshot_id,
                e.sequence_number,
                e.file_sequence_number,
                int(f.content),
                f.record_count,
            )
    return found


PART_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False), NestedField(2, "part", StringType(), required=False)
)
PART_SPEC = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))


def part_table(server: Server, ns_prefix: str = "t", **props: str) -> tuple[RestCatalog, str, Any]:
    """(catalog, namespace, table): ``<namespace>.t`` of ``PART_SCHEMA`` partitioned by ``part``, in a
    new namespace named ``<ns_prefix>_<random>``, with table properties ``props``."""
    catalog = server.catalog()
    ns = f"{ns_prefix}_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    return catalog, ns, catalog.create_table(f"{ns}.t", PART_SCHEMA, partition_spec=PART_SPEC, properties=props)


def part_batch(i: int, n: int = 3, parts: int = 2) -> pa.Table:
    """The rows of append number ``i``: ids ``i * 10`` to ``i * 10 + n - 1``, over ``parts`` partitions."""
    return pa.table(
        {
            "id": pa.array([i * 10 + k for k in range(n)], pa.int64()),
            "part": pa.array([f"p{(i + k) % parts}" for k in range(n)], pa.string()),
        }
    )


def part_ids(appends: Any, n: int = 3) -> list[int]:
    """The ids ``part_batch(i, n)`` wrote for every ``i`` of ``appends``, sorted."""
    return sorted(i * 10 + k for i in appends for k in range(n))


def duckdb_attached(server: Server) -> Any:
    """A DuckDB connection with ``server`` attached as ``lake`` (the iceberg extension, read/write)."""
    from tests.services import duckdb_connection

    con = duckdb_connection()
    options = ""
    if server.backend == "postgres-s3":  # no vended credentials: DuckDB uses the secret given here
        con.execute(
            "CREATE SECRET (TYPE s3, KEY_ID ?, SECRET ?, ENDPOINT ?, REGION ?, URL_STYLE 'path', USE_SSL false)",
            [
                server.io_props["s3.access-key-id"],
                server.io_props["s3.secret-access-key"],
                server.env["CATALOG_S3_ENDPOINT"].split("://", 1)[1],
                server.env.get("CATALOG_S3_REGION", "us-east-1"),
            ],
        )
        options = ", ACCESS_DELEGATION_MODE 'none'"
    con.execute(
        f"ATTACH 'warehouse' AS lake (TYPE iceberg, ENDPOINT '{server.url}', AUTHORIZATION_TYPE 'none'{options})"
    )
    return con


def run_job_racing(local: Any, ns: str, job: Any, before_commit: Any) -> dict:
    """Run a maintenance job (``job.run(entry, file, dry, reread)``, e.g. a manifest rewrite or a
    compaction) on ``ns.t`` in this process (``local``: ``build_catalog``'s); ``before_commit()``
    runs once, before the job's first commit: what a writer landing first looks like to it."""
    entry = local.pointers.get_entry((ns,), "t")
    commit, calls = local.engine.commit, []

    def racing(changes, key=None):  # noqa: ANN001, ANN202
        if not calls:
            calls.append(1)
            before_commit()
        return commit(changes, key)

    local.engine.commit = racing
    reread = lambda: (e := local.pointers.get_entry((ns,), "t"), local.files.read(e.metadata_location))  # noqa: E731
    result, _ = job.run(entry, local.files.read(entry.metadata_location), False, reread)
    return result
