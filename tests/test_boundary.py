"""The warehouse boundary, tried as an attacker would, on both backends, in the default warehouse
and in a warehouse created beside it (whose boundary keeps the default's files out too).

Every test names storage paths the server must not touch (a directory outside the warehouse, a
foreign bucket, the same bucket outside the warehouse prefix, another table's location) and then
looks at the filesystem or the bucket itself, not only at the status code.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support import (
    JSON_SCHEMA,
    PY_SCHEMA,
    Http,
    assert_error,
    commit,
    create,
    load,
    new_pg_database,
    purge_now,
    race,
    rows,
    s3_env,
    s3_profile,
    start_server,
)

LEAKS = ("SECRET", "root:", "PATH=", "Traceback", "input_value", "[SQL")


class LocalPlace:
    """A directory the server must never touch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def put(self, name: str, data: bytes) -> str:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)
        return self.uri(name)

    def names(self) -> set[str]:
        return {str(p.relative_to(self.root)) for p in self.root.rglob("*")}


class S3Place:
    """A bucket prefix the server must never touch."""

    def __init__(self, client, bucket: str, prefix: str) -> None:
        self.client, self.bucket, self.prefix = client, bucket, prefix

    def uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self.client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data)
        return self.uri(name)

    def names(self) -> set[str]:
        listed = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.prefix + "/")
        return {o["Key"][len(self.prefix) + 1 :] for o in listed.get("Contents", [])}


@dataclass(frozen=True)
class Where:
    """The warehouse a test attacks: the default one (``name`` None) or one created for the module,
    beside the default, whose boundary must keep the default's files out too."""

    name: str | None
    location: str


@pytest.fixture(scope="module", params=["default", "created"])
def where(server, request, tmp_path_factory) -> Iterator[Where]:
    if request.param == "default":
        yield Where(None, server.env["CATALOG_WAREHOUSE"])
        return
    name = f"bnd-{uuid.uuid4().hex[:8]}"
    doc: dict = {"name": name, "location": str(tmp_path_factory.mktemp("boundary-warehouse"))}
    if server.backend == "postgres-s3":
        s3 = request.getfixturevalue("services")["s3"]
        doc = {"name": name, "location": f"s3://{s3.bucket}/{name}", "s3": s3_profile(s3)}
    made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, timeout=60)
    assert made.status_code == 201, made.text
    yield Where(name, doc["location"])


@pytest.fixture
def http(server, where) -> Iterator[Http]:
    with requests.Session() as session:
        yield Http(server.url, session, prefix=where.name)


@pytest.fixture
def catalog(server, where) -> RestCatalog:
    return server.catalog(**({"warehouse": where.name} if where.name else {}))


@pytest.fixture
def ns(catalog) -> str:
    name = f"ns_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(name)
    return name


def _place(server, request, location: str, name: str) -> LocalPlace | S3Place:
    if not location.startswith("s3://"):
        return LocalPlace(Path(location) / name)
    s3 = request.getfixturevalue("services")["s3"]
    bucket, _, prefix = location[len("s3://") :].partition("/")
    return S3Place(s3.client(), bucket, f"{prefix}/{name}")


@pytest.fixture
def outside(server, where, request, tmp_path) -> list:
    """Places outside the warehouse: a local directory; on S3 also a foreign bucket and the
    warehouse's own bucket outside the warehouse prefix; for a created warehouse, the default's."""
    places: list = [LocalPlace(tmp_path / "outside")]
    if server.backend == "postgres-s3":
        s3 = request.getfixturevalue("services")["s3"]
        client = s3.client()
        foreign = f"foreign-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=foreign)
        places = [S3Place(client, foreign, "lake"), S3Place(client, s3.bucket, f"outside-{uuid.uuid4().hex[:8]}")]
    if where.name is not None:
        places.append(_place(server, request, server.env["CATALOG_WAREHOUSE"], f"foreign-{uuid.uuid4().hex[:8]}"))
    return places


@pytest.fixture
def inside(server, where, request) -> LocalPlace | S3Place:
    """The warehouse attacked, where a client with storage access may plant files."""
    return _place(server, request, where.location, f"planted-{uuid.uuid4().hex[:8]}")


def snapshot(sid: int, manifest_list: str, parent: int | None = None, seq: int = 1) -> dict:
    return {
        "snapshot-id": sid,
        **({"parent-snapshot-id": parent} if parent else {}),
        "sequence-number": seq,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": manifest_list,
        "summary": {"operation": "append"},
        "schema-id": 0,
    }


def statistics(sid: int, path: str) -> dict:
    file = {"snapshot-id": sid, "statistics-path": path, "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1}
    return {"action": "set-statistics", "snapshot-id": sid, "statistics": {**file, "blob-metadata": []}}


def no_leak(resp: requests.Response) -> None:
    assert not any(marker in resp.text for marker in LEAKS), resp.text


# -- purge -----------------------------------------------------------------------------------------


def test_purge_deletes_only_the_tables_own_files(server, where, http, ns, outside, inside):
    """A commit can no longer add another place's files (403, tests/test_locations.py), but a
    registered table may carry them: its purge must skip them."""
    victims = [place.put(f"victim-{i}.avro", b"precious") for i, place in enumerate(outside)]
    neighbour = create(http, ns, "neighbour")
    template = create(http, ns, "template")["metadata"]

    def stats(sid: int, path: str) -> dict:
        return statistics(sid, path)["statistics"]

    metadata = {
        **template,
        "table-uuid": str(uuid.uuid4()),
        "location": inside.uri("doomed"),
        "last-sequence-number": 2,
        "last-updated-ms": int(time.time() * 1000),
        "current-snapshot-id": 2,
        "snapshots": [snapshot(1, victims[0]), snapshot(2, neighbour["metadata-location"], 1, 2)],
        "refs": {"main": {"snapshot-id": 2, "type": "branch"}},
        "statistics": [stats(1, victims[-1]), stats(2, neighbour["metadata-location"])],
        "snapshot-log": [],
        "metadata-log": [],
    }
    own_file = inside.put("doomed/metadata/00000-doomed.metadata.json", json.dumps(metadata).encode())
    resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "doomed", "metadata-location": own_file})
    assert resp.status_code == 200, resp.text
    resp = http("DELETE", f"/v1/namespaces/{ns}/tables/doomed?purgeRequested=true")
    assert resp.status_code == 204, resp.text
    purge_now(server.url, f"{ns}.doomed", warehouse=where.name)
    for place, victim in zip(outside, victims, strict=True):
        assert victim.rsplit("/", 1)[1] in place.names()  # never deleted
    assert load(http, ns, "neighbour")["metadata-location"] == neighbour["metadata-location"]
    assert http.get(f"/v1/namespaces/{ns}/tables/doomed").status_code == 404
    assert_error(
        http.post(f"/v1/namespaces/{ns}/register", json={"name": "back", "metadata-location": own_file}),
        404,
        "NotFoundException",
    )  # the table's own files did go


def test_a_purge_missing_a_manifest_still_deletes_the_whole_table(server, where, catalog, ns):
    """A manifest gone missing hides its data files from the metadata; the drop answers 204 at once
    (no file I/O in it), and the purge, after the references, sweeps the table's own location."""
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 3))
    table = catalog.load_table(f"{ns}.t")
    data_files = [task.file.file_path for task in table.scan().plan_files()]
    for manifest in table.current_snapshot().manifests(table.io):
        table.io.delete(manifest.manifest_path)
    catalog.purge_table(f"{ns}.t")  # raises on any error status
    assert not catalog.table_exists(f"{ns}.t")
    purge_now(server.url, f"{ns}.t", warehouse=where.name)
    assert not any(table.io.new_input(p).exists() for p in [*data_files, table.metadata_location])


# -- register ----------------------------------------------------------------------------------------


def test_register_reads_nothing_outside_and_echoes_nothing(server, http, ns, outside, inside):
    for place in outside:
        secret = place.put("secret.metadata.json", b'{"format-version": "SECRET-value"}')
        resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "x", "metadata-location": secret})
        assert_error(resp, 403, "ForbiddenException", "outside the warehouse")
        no_leak(resp)
    if server.backend == "sqlite":
        for path in ("/etc/passwd", "/proc/self/environ", "file:///etc/hostname", "/dev/zero"):
            resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "x", "metadata-location": path})
            assert_error(resp, 403, "ForbiddenException")
            no_leak(resp)
    planted = inside.put("bad.metadata.json", b'{"format-version": "SECRET-value", "table-uuid": "SECRET"}')
    resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "x", "metadata-location": planted})
    assert_error(resp, 400, "BadRequestException", "Invalid table metadata file")
    no_leak(resp)
    create(http, ns, "huge")  # a file whose ids do not fit Java's long: refused, not served as floats
    raw = load(http, ns, "huge")["metadata"]
    assert http("DELETE", f"/v1/namespaces/{ns}/tables/huge").status_code == 204
    raw["current-snapshot-id"], raw["last-sequence-number"] = 2**70, 2**64
    huge = inside.put(
        "huge/metadata/00009-x.metadata.json", json.dumps({**raw, "location": inside.uri("huge")}).encode()
    )
    resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "huge", "metadata-location": huge})
    assert_error(resp, 400, "ValidationException", "Cannot parse to a long value")
    for body in ({"name": "x", "metadata-location": "relative/m.json"}, {"name": "x", "metadata-location": ""}):
        assert_error(http.post(f"/v1/namespaces/{ns}/register", json=body), 400, "BadRequestException")
    assert http.get(f"/v1/namespaces/{ns}/tables/x").status_code == 404


def test_another_tables_metadata_cannot_be_registered(http, ns):
    """Registering a live table's file would give two entries one set of files: one purge would
    destroy the other table."""
    original = create(http, ns, "original")
    commit(http, ns, "original", [], [{"action": "set-properties", "updates": {"k": "v"}}])
    current = load(http, ns, "original")
    for location, reason in (
        (current["metadata-location"], "is the current metadata of another table or view"),
        (original["metadata-location"], "overlaps the location of another table or view"),  # an older file of it
    ):
        resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": "copy", "metadata-location": location})
        assert_error(resp, 409, "AlreadyExistsException", reason)
    view = http.post(
        f"/v1/namespaces/{ns}/register-view", json={"name": "v", "metadata-location": original["metadata-location"]}
    )
    assert view.status_code in (400, 409), view.text
    assert load(http, ns, "original")["metadata-location"] == current["metadata-location"]


# -- writes ------------------------------------------------------------------------------------------


def test_no_location_outside_the_warehouse_is_accepted(server, http, ns, outside):
    create(http, ns, "t")
    before = load(http, ns, "t")["metadata-location"]
    for place in outside:
        target = place.uri(f"t-{uuid.uuid4().hex[:6]}")
        attempts = [
            http.post(f"/v1/namespaces/{ns}/tables", json={"name": "a", "schema": JSON_SCHEMA, "location": target}),
            http.post(
                f"/v1/namespaces/{ns}/tables",
                json={"name": "b", "schema": JSON_SCHEMA, "properties": {"write.metadata.path": target}},
            ),
            commit(http, ns, "t", [], [{"action": "set-location", "location": target}]),
            commit(http, ns, "t", [], [{"action": "set-properties", "updates": {"write.metadata.path": target}}]),
            http.post("/v1/namespaces", json={"namespace": [f"{ns}_loc"], "properties": {"location": target}}),
            http.post(f"/v1/namespaces/{ns}/properties", json={"updates": {"location": target}}),
            http.post(
                f"/v1/namespaces/{ns}/views",
                json={"name": "v", "schema": JSON_SCHEMA, "location": target, "view-version": _version(ns)},
            ),
        ]
        for resp in attempts:
            assert_error(resp, 403, "ForbiddenException", "outside the warehouse")
        assert place.names() == set()  # nothing written there
    # "" is refused by the metadata rules as Java refuses it, the rest by the location policy
    resp = commit(http, ns, "t", [], [{"action": "set-location", "location": ""}])
    assert_error(resp, 400, "ValidationException", "path must not be null or empty")
    for bad in ("relative/dir", "file:relative", "/tmp/../etc", "/wh/x\u0000y"):
        resp = commit(http, ns, "t", [], [{"action": "set-location", "location": bad}])
        assert_error(resp, 400, "BadRequestException")
    assert load(http, ns, "t")["metadata-location"] == before
    assert http.get(f"/v1/namespaces/{ns}_loc").status_code == 404
    assert not Path("/metadata").exists()  # once, set-location "" wrote at the filesystem root


def test_tables_own_their_locations(http, ns):
    a = create(http, ns, "a")
    home = a["metadata"]["location"]
    parent = home.rsplit("/", 1)[0]
    for location in (home, home + "/", home + "/inside", parent):
        resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": "b", "schema": JSON_SCHEMA, "location": location})
        assert_error(resp, 409, "AlreadyExistsException", "overlaps the location of another table or view")
    create(http, ns, "c")
    assert_error(
        commit(http, ns, "c", [], [{"action": "set-location", "location": home}]), 409, "AlreadyExistsException"
    )
    inside_a = {"write.metadata.path": home + "/metadata"}
    resp = commit(http, ns, "c", [], [{"action": "set-properties", "updates": inside_a}])
    assert_error(resp, 409, "AlreadyExistsException", "write.metadata.path overlaps the location of another table")
    # A renamed table keeps its directory; a new table of the old name gets a directory of its own.
    rename = {"source": {"namespace": [ns], "name": "a"}, "destination": {"namespace": [ns], "name": "a2"}}
    assert http.post("/v1/tables/rename", json=rename).status_code == 204
    again = create(http, ns, "a")["metadata"]["location"]
    assert again != home and again.startswith(home + "-")
    # The same with the longest name there is (255 bytes): the suffixed segment still fits a filesystem.
    longest = "l" * 255
    first = create(http, ns, longest)["metadata"]["location"]
    rename = {"source": {"namespace": [ns], "name": longest}, "destination": {"namespace": [ns], "name": "l2"}}
    assert http.post("/v1/tables/rename", json=rename).status_code == 204
    second = create(http, ns, longest)["metadata"]["location"]
    assert second != first and len(second.rsplit("/", 1)[1]) == 255
    assert commit(http, ns, longest, [], [{"action": "set-properties", "updates": {"k": "v"}}]).status_code == 200
    old_home = load(http, ns, "c")["metadata"]["location"]
    moved = commit(http, ns, "c", [], [{"action": "set-location", "location": parent + "/c-moved"}])
    assert moved.status_code == 200, moved.text  # a free location is fine, and is then owned
    # a commit that leaves the location as it is keeps it owned (the CAS does not rewrite it then)
    assert commit(http, ns, "c", [], [{"action": "set-properties", "updates": {"k": "v"}}]).status_code == 200
    assert create(http, ns, "e", location=old_home)["metadata"]["location"] == old_home  # freed by the move
    resp = http.post(
        f"/v1/namespaces/{ns}/tables", json={"name": "d", "schema": JSON_SCHEMA, "location": parent + "/c-moved"}
    )
    assert_error(resp, 409, "AlreadyExistsException", "overlaps the location of another table or view")


def test_racing_creates_of_overlapping_locations_exactly_one_wins(http, ns):
    """Creates that ask for the same or nested locations, released together: the check before the
    metadata file is written and the re-check in the inserting transaction leave exactly one."""
    home = create(http, ns, "anchor")["metadata"]["location"].rsplit("/", 1)[0] + "/contested"
    wanted = [home, home + "/inner", home + "/inner/deeper"]
    n = 12
    bodies = [{"name": f"r{i}", "schema": JSON_SCHEMA, "location": wanted[i % len(wanted)]} for i in range(n)]

    def create_at(i: int) -> int:
        return requests.post(http.url(f"/v1/namespaces/{ns}/tables"), json=bodies[i], timeout=60).status_code

    codes = race(n, create_at)
    assert sorted(codes) == [200] + [409] * (n - 1), codes
    names = {i["name"] for i in http.get(f"/v1/namespaces/{ns}/tables").json()["identifiers"]}
    assert names == {"anchor", f"r{codes.index(200)}"}


def _version(ns: str) -> dict:
    return {
        "version-id": 1,
        "schema-id": 0,
        "timestamp-ms": int(time.time() * 1000),
        "summary": {},
        "representations": [{"type": "sql", "sql": "SELECT 1", "dialect": "spark"}],
        "default-namespace": [ns],
    }


# -- bounded reads -----------------------------------------------------------------------------------


def test_fifos_devices_and_links_out_are_refused_at_once(tmp_path):
    server = start_server(tmp_path)  # a local warehouse to plant files in
    http, ns = Http(server.url), "n"
    assert http.post("/v1/namespaces", json={"namespace": [ns]}).status_code == 200
    planted = Path(server.env["CATALOG_WAREHOUSE"]) / "planted"
    planted.mkdir()
    os.mkfifo(planted / "pipe.metadata.json")
    (planted / "zero.metadata.json").symlink_to("/dev/zero")
    (planted / "dir.metadata.json").mkdir()
    cases = {"pipe": 404, "zero": 403, "dir": 404, "missing": 404}

    def register(case: str) -> int:
        body = {"name": f"x_{case}", "metadata-location": (planted / f"{case}.metadata.json").as_uri()}
        return http.post(f"/v1/namespaces/{ns}/register", json=body).status_code

    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:  # 45 FIFO registers once hung every request thread
        codes = list(pool.map(register, ["pipe"] * 45 + list(cases)))
    try:
        assert codes == [404] * 45 + list(cases.values())
        assert time.monotonic() - start < 20
        assert http.get("/v1/config").status_code == 200
    finally:
        http.close()
        server.stop()


def test_an_oversized_metadata_file_is_refused_before_it_is_read(tmp_path):
    server = start_server(tmp_path, extra_env={"CATALOG_MAX_METADATA_FILE_BYTES": str(1 << 20)})
    try:
        http = requests.Session()
        assert http.post(f"{server.url}/v1/namespaces", json={"namespace": ["n"]}).status_code == 200
        big = tmp_path / "warehouse" / "n" / "big" / "metadata" / "00000-x.metadata.json"
        big.parent.mkdir(parents=True)
        with big.open("wb") as f:
            f.truncate(2 << 30)  # 2 GiB, sparse: reading it whole would exhaust the server
        rss_before = _rss_kb(server.proc.pid)
        start = time.monotonic()
        resp = http.post(
            f"{server.url}/v1/namespaces/n/register", json={"name": "big", "metadata-location": big.as_uri()}
        )
        assert_error(resp, 400, "BadRequestException", "over the limit")
        assert time.monotonic() - start < 5
        assert _rss_kb(server.proc.pid) - rss_before < 50_000
    finally:
        server.stop()


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# -- a stalled store -----------------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.s3
def test_a_stalled_store_does_not_stall_cached_loads_or_readiness(services, tmp_path):
    """SIGSTOP the S3 server: storage-bound requests fail after a bound (503), and meanwhile a
    cached loadTable and readiness answer within seconds, because storage calls hold a bounded
    number of threads for a bounded time."""
    from tests import services as svc

    s3 = svc.start_seaweedfs(tmp_path / "s3")
    env = {
        "CATALOG_DATABASE_URL": new_pg_database(services["pg"], f"stall_{uuid.uuid4().hex[:8]}"),
        **s3_env(s3, "stall"),
        "CATALOG_STORAGE_TIMEOUT_SECONDS": "2",
        "CATALOG_STORAGE_CONCURRENCY": "4",
    }
    server = start_server(tmp_path / "server", "postgres-s3", env)
    http = requests.Session()
    try:
        assert http.post(f"{server.url}/v1/namespaces", json={"namespace": ["n"]}).status_code == 200
        body = {"name": "hot", "schema": JSON_SCHEMA}
        assert http.post(f"{server.url}/v1/namespaces/n/tables", json=body).status_code == 200
        assert http.get(f"{server.url}/v1/namespaces/n/tables/hot").status_code == 200  # now cached
        os.killpg(s3.proc.pid, signal.SIGSTOP)
        codes: list[int] = []

        def storage_bound(i: int) -> None:
            body = {"name": f"t{i}", "schema": JSON_SCHEMA}
            codes.append(requests.post(f"{server.url}/v1/namespaces/n/tables", json=body, timeout=120).status_code)

        writers = [threading.Thread(target=storage_bound, args=(i,)) for i in range(48)]
        for w in writers:
            w.start()
        time.sleep(1.0)  # every request thread that will wait on storage is waiting now
        start = time.monotonic()
        assert http.get(f"{server.url}/v1/namespaces/n/tables/hot", timeout=30).status_code == 200
        cached_load = time.monotonic() - start
        start = time.monotonic()
        ready = http.get(f"{server.url}/health/ready", timeout=30)
        readiness = time.monotonic() - start
        assert ready.status_code == 503 and "storage" in ready.json()["checks"]
        assert http.get(f"{server.url}/v1/namespaces/n", timeout=30).status_code == 200
        for w in writers:
            w.join(120)
        assert cached_load < 5 and readiness < 4, (cached_load, readiness)
        assert len(codes) == 48 and set(codes) <= {503}, codes
    finally:
        os.killpg(s3.proc.pid, signal.SIGCONT)
        server.stop()
        s3.stop()
