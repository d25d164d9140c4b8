"""Nothing the catalog deletes by itself lies outside the table's own files: a corpus of attackers
around one victim table.

The rule: a table owns its ``location`` and its ``write.data.path``, ``write.metadata.path``,
``write.object-storage.path`` and ``write.folder-storage.path`` prefixes, live and dropped (until it
is purged; a drop whose retention ended without purge is released and still holds them). No prefix
of one table may equal, contain or lie inside a prefix of another: a create, a register or a commit
that would make one is refused with 409 (``AlreadyExistsException``) and writes nothing. A prefix
merely next to another (``victim-data2`` or ``victim-dat`` beside ``victim-data``, a sibling
directory) is allowed, and no care job of such a neighbour (snapshot expiry, orphan removal,
manifest rewrite, compaction, purge) deletes a file of the victim. A table at (or over) the
warehouse root is refused.

The victim V has real data (pyiceberg appends: data files, manifests, manifest lists, several
metadata files) and one ``write.*.path`` OUTSIDE its location, as is normal on object stores:
``<warehouse>/shared-<id>/victim-data`` (``data-outside``) or ``.../victim-meta``
(``metadata-outside``). It is live or dropped (without purge, still retained). One V per
(backend, variant, state) serves every attempt against it: its files are listed on disk (os.walk)
or in the bucket (list_objects_v2) when it is made, and every test asserts they are still exactly
those (an attacker that gets in against the rule is forgotten and its files removed by the test,
so that one failure does not spill into the next case).

- ``test_an_overlapping_attacker_*``: one field of an attacker (its location or one of its write
  paths) EQUAL TO, INSIDE, or CONTAINING V's location or V's outside path, by create, register and
  commit: 409 with the Iceberg error body, the name not taken (or the commit not landed), and the
  whole warehouse listing the same before and after the request (nothing written or deleted).
  V's location is the same kind of prefix in both variants: it is attacked on the data-outside
  victims, V's outside path on all four.
- ``test_an_attacker_at_the_warehouse_root_*``: the same with the warehouse root itself (400, 403 or
  409: it is no table's place and it contains V).
- ``test_neighbours_*``: four attackers whose every prefix lies NEXT TO one of V's (longer and
  shorter names, so one is a string prefix of the other; sibling directories; made by create,
  register and commit) are accepted, get real data and an orphan planted in each prefix, and every
  care job runs on them (manifest rewrite, compaction, expiry, orphan removal with an orphan age of
  0.36 s, then drop with purge and the retention ended): each job is asserted to have done work and
  the attackers' own files to be gone after the purge, while V's files are unchanged after every
  step and V reads all its rows.
- ``test_an_overlapping_attacker_never_gets_to_delete_*``: a fresh V per case and the overlaps whose
  listings would cover V's files: refused (409, V intact). A server that accepts one anyway gets the
  neighbours' treatment (data, every care job, purge) and the test fails on what that did to V.

A server of its own per backend (maintenance worker on, nothing scheduled, tiny orphan age), shared
by the whole module (``Corpora``); on ``postgres-s3`` the warehouse is ``s3://`` on SeaweedFS.
"""

from __future__ import annotations

import copy
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pytest
import requests
from pyiceberg.table import StaticTable

from tests.support import (
    JSON_SCHEMA,
    PY_SCHEMA,
    Http,
    Server,
    backends,
    care_server,
    purge_now,
    rows,
    wait_task,
)

# 636 cases, over a minute per backend: the full suite's; the fast tier has test_ownership.py.
pytestmark = pytest.mark.slow

FIELDS = (
    "location",
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
)
OUTSIDE = {"data-outside": "write.data.path", "metadata-outside": "write.metadata.path"}
VICTIMS = [(variant, state) for variant in OUTSIDE for state in ("live", "dropped")]
APPENDS = 3  # the victim's appends: 3 snapshots, 3 data files, 4+ metadata files
ATTACKER_APPENDS = 5  # compaction wants 5 small files
ORPHAN_AGE_S = 0.36  # CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS below (it must be > 0)


# --- files on disk or in the bucket ------------------------------------------------------------------


class Store:
    """The files under a location: a local directory (``file://``) or an S3 prefix, listed with
    os.walk / list_objects_v2; ``put`` and ``remove`` for what the test itself places."""

    def __init__(self, server: Server) -> None:
        self.s3 = getattr(server, "s3", None)
        self._client = None
        if self.s3 is not None:
            import boto3

            s3 = self.s3
            self._client = boto3.client(
                "s3",
                endpoint_url=s3.endpoint,
                region_name=s3.region,
                aws_access_key_id=s3.access_key,
                aws_secret_access_key=s3.secret_key,
            )

    def listing(self, *locations: str) -> dict[str, int]:
        """path -> size of every file under any of ``locations`` (a location is a directory: the
        listing of ``.../victim-dat`` never holds ``.../victim-data/x``)."""
        found: dict[str, int] = {}
        for location in locations:
            location = location.rstrip("/")
            if self._client is None:
                root = local_path(location)
                for d, _, files in os.walk(root):
                    for f in files:
                        p = os.path.join(d, f)
                        found["file://" + p] = os.path.getsize(p)
            else:
                bucket, _, prefix = location.removeprefix("s3://").partition("/")
                pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
                for page in pages:
                    for o in page.get("Contents") or []:
                        found[f"s3://{bucket}/{o['Key']}"] = o["Size"]
        return found

    def put(self, location: str, data: bytes) -> None:
        if self._client is None:
            path = Path(local_path(location))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        else:
            bucket, _, key = location.removeprefix("s3://").partition("/")
            self._client.put_object(Bucket=bucket, Key=key, Body=data)

    def remove(self, locations: list[str]) -> None:
        for location in locations:
            if self._client is None:
                Path(local_path(location)).unlink(missing_ok=True)
            else:
                bucket, _, key = location.removeprefix("s3://").partition("/")
                self._client.delete_object(Bucket=bucket, Key=key)


def local_path(location: str) -> str:
    return "/" + location.removeprefix("file:").lstrip("/")


def parent(location: str) -> str:
    return location.rstrip("/").rsplit("/", 1)[0]


# --- the server, the victims -------------------------------------------------------------------------


@dataclass
class Corpus:
    backend: str
    server: Server
    store: Store
    root: str  # the warehouse root, as a URI
    template: dict  # a table's first metadata, the base of the metadata files registers name
    io: dict[str, str] = field(default_factory=dict)  # pyiceberg FileIO properties (StaticTable)

    def http(self) -> Http:
        return Http(self.server.url)


def start_corpus(backend: str, workdir: Path, services: dict | None) -> Corpus:
    srv = care_server(
        backend,
        workdir,
        services,
        CATALOG_MAINTENANCE_ENABLED="false",  # nothing scheduled: only the runs the tests ask for
        CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS=str(ORPHAN_AGE_S / 3600),
        CATALOG_MAINTENANCE_COMPACTION_QUIET_SECONDS="0",
        CATALOG_LOG_LEVEL="warning",
    )
    try:
        warehouse = srv.env["CATALOG_WAREHOUSE"].rstrip("/")
        root = warehouse if "://" in warehouse else "file://" + warehouse
        io: dict[str, str] = {}
        if backend == "postgres-s3":
            s3 = srv.s3  # type: ignore[attr-defined]
            io = {
                **srv.io_props,
                "s3.endpoint": s3.endpoint,
                "s3.region": s3.region,
                "s3.force-virtual-addressing": "false",
            }
        with Http(srv.url) as http:
            scratch = f"scratch_{uuid.uuid4().hex[:8]}"
            assert http.post("/v1/namespaces", json={"namespace": [scratch]}).status_code == 200
            resp = http.post(f"/v1/namespaces/{scratch}/tables", json={"name": "template", "schema": JSON_SCHEMA})
            assert resp.status_code == 200, resp.text
            template = resp.json()["metadata"]
        return Corpus(backend, srv, Store(srv), root, template, io)
    except BaseException:
        srv.stop()
        raise


class Corpora:
    """The module's servers (one per backend) and victims (one per backend, variant and state),
    each made the first time a test asks for it and kept until the module ends: whatever order
    pytest runs the cases in, no server or victim is made twice."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.tmp_path_factory = tmp_path_factory
        self.started: dict[str, Corpus] = {}
        self.victims: dict[tuple[str, str, str], Victim] = {}

    def corpus(self, backend: str, services: dict | None) -> Corpus:
        if backend not in self.started:
            workdir = self.tmp_path_factory.mktemp(f"corpus-{backend}")
            self.started[backend] = start_corpus(backend, workdir, services)
        return self.started[backend]

    def victim(self, corpus: Corpus, variant: str, state: str) -> Victim:
        key = (corpus.backend, variant, state)
        if key not in self.victims:
            self.victims[key] = make_victim(corpus, variant, state)
        return self.victims[key]

    def stop(self) -> None:
        for corpus in self.started.values():
            corpus.server.stop()


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Corpora]:
    made = Corpora(tmp_path_factory)
    yield made
    made.stop()


@pytest.fixture(params=backends())
def corpus(request: pytest.FixtureRequest, corpora: Corpora) -> Corpus:
    services = request.getfixturevalue("services") if request.param == "postgres-s3" else None
    return corpora.corpus(request.param, services)


@dataclass
class Victim:
    variant: str
    state: str
    ns: str  # V's namespace; the attackers get their own
    attackers: str
    name: str
    location: str
    outside: str  # V's write.*.path that lies outside its location
    files: dict[str, int]  # the baseline: every file under V's prefixes, path -> size
    metadata_location: str
    rows: int

    @property
    def prefixes(self) -> tuple[str, str]:
        return (self.location, self.outside)

    def target(self, which: str) -> str:
        return self.location if which == "location" else self.outside


@pytest.fixture(params=VICTIMS, ids=[f"{v}-{s}" for v, s in VICTIMS])
def victim(request: pytest.FixtureRequest, corpora: Corpora, corpus: Corpus) -> Victim:
    return corpora.victim(corpus, *request.param)


def make_victim(corpus: Corpus, variant: str, state: str) -> Victim:
    """V: 3 pyiceberg appends, its ``OUTSIDE[variant]`` path in ``shared-<id>``, live or dropped."""
    tag = uuid.uuid4().hex[:8]
    ns, attackers = f"victim_{tag}", f"attackers_{tag}"
    catalog = corpus.server.catalog()
    catalog.create_namespace(ns)
    catalog.create_namespace(attackers)
    location = f"{corpus.root}/vl-{tag}/victim"
    outside = f"{corpus.root}/shared-{tag}/victim-{'data' if variant == 'data-outside' else 'meta'}"
    table = catalog.create_table(f"{ns}.victim", PY_SCHEMA, location=location, properties={OUTSIDE[variant]: outside})
    for i in range(APPENDS):
        table.append(rows(i * 10, 4))
    table = catalog.load_table(f"{ns}.victim")
    assert table.location().rstrip("/") == location
    assert len(table.metadata.snapshots) == APPENDS
    data = [t.file.file_path for t in table.scan().plan_files()]
    assert len(data) == APPENDS
    if variant == "data-outside":
        assert all(p.startswith(outside + "/") for p in data), data
    else:
        assert table.metadata_location.startswith(outside + "/"), table.metadata_location
    files = corpus.store.listing(location, outside)
    # V really has files in both its prefixes: the attackers have something to hit
    for prefix in (location, outside):
        assert any(p.startswith(prefix + "/") for p in files), (prefix, files)
    assert sum(p.endswith(".metadata.json") for p in files) >= APPENDS + 1
    assert sum(p.endswith(".avro") for p in files) >= 2 * APPENDS  # manifests and manifest lists
    if state == "dropped":
        catalog.drop_table(f"{ns}.victim")  # without purge: retained, its locations still its own
        assert corpus.store.listing(location, outside) == files
    return Victim(
        variant, state, ns, attackers, "victim", location, outside, files, table.metadata_location, APPENDS * 4
    )


def victim_unchanged(corpus: Corpus, victim: Victim, when: str, exact: bool = True) -> None:
    """V's prefixes hold exactly its files (``exact=False``: at least its files, unchanged; an
    attacker that writes into V's prefixes adds some)."""
    lost, added, changed = victim_diff(victim, corpus.store.listing(*victim.prefixes))
    added = added if exact else []
    assert not (lost or added or changed), (
        f"{when}: the victim's files changed: lost {len(lost)} {lost[:8]}, added {len(added)} {added[:8]}, "
        f"changed {changed[:8]}"
    )


def victim_diff(victim: Victim, listing: dict[str, int]) -> tuple[list[str], list[str], list[str]]:
    """(lost, added, changed) files of V's prefixes in ``listing`` against V's baseline."""
    now = {p: size for p, size in listing.items() if not not_in(p, victim.prefixes)}
    lost = sorted(set(victim.files) - set(now))
    added = sorted(set(now) - set(victim.files))
    changed = sorted(p for p in set(now) & set(victim.files) if now[p] != victim.files[p])
    return lost, added, changed


def victim_reads(corpus: Corpus, victim: Victim) -> None:
    """V reads all its rows with pyiceberg: through the catalog when live, from its metadata file
    (the catalog keeps it, retained) when dropped."""
    if victim.state == "live":
        table = corpus.server.catalog().load_table(f"{victim.ns}.{victim.name}")
        assert table.metadata_location == victim.metadata_location
    else:
        table = StaticTable.from_metadata(victim.metadata_location, properties=corpus.io)
    got = table.scan().to_arrow()
    assert got.num_rows == victim.rows
    assert sorted(got["id"].to_pylist()) == sorted(i * 10 + k for i in range(APPENDS) for k in range(4))


# --- one attempt ---------------------------------------------------------------------------------------


def metadata_doc(corpus: Corpus, location: str, properties: dict[str, str]) -> dict:
    doc = copy.deepcopy(corpus.template)
    doc.update(
        {
            "table-uuid": str(uuid.uuid4()),
            "location": location,
            "properties": {**(doc.get("properties") or {}), **properties},
            "last-updated-ms": int(time.time() * 1000),
            "metadata-log": [],
        }
    )
    return doc


@dataclass
class Attempt:
    name: str
    prefixes: list[str]  # every location the attacker names
    send: Callable[[], requests.Response]  # the request under test
    placed: list[str] = field(default_factory=list)  # files the test itself put (a register's metadata file)
    before: str | None = None  # commit: the attacker's metadata location before its commit


def prepare(corpus: Corpus, http: Http, victim: Victim, op: str, fld: str, path: str) -> Attempt:
    """The attacker sets ``fld`` to ``path`` by ``op``; everything else of it is its own (a fresh
    location under ``att-<id>``). A commit's table is made here, at its own location; a register's
    metadata file is placed here (at the location it describes): both before the listing."""
    tag = uuid.uuid4().hex[:8]
    name = f"a_{op}_{tag}"
    own = f"{corpus.root}/att-{tag}/a"
    ns = victim.attackers
    if op == "commit":
        resp = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": JSON_SCHEMA, "location": own})
        assert resp.status_code == 200, resp.text
        made = resp.json()
        update = (
            {"action": "set-location", "location": path}
            if fld == "location"
            else {"action": "set-properties", "updates": {fld: path}}
        )
        body = {
            "requirements": [{"type": "assert-table-uuid", "uuid": made["metadata"]["table-uuid"]}],
            "updates": [update],
        }
        return Attempt(
            name, [own, path], lambda: http.post(f"/v1/namespaces/{ns}/tables/{name}", json=body),
            before=made["metadata-location"],
        )  # fmt: skip
    location = path if fld == "location" else own
    properties = {} if fld == "location" else {fld: path}
    if op == "create":
        body = {"name": name, "schema": JSON_SCHEMA, "location": location, "properties": properties}
        return Attempt(name, [location, path], lambda: http.post(f"/v1/namespaces/{ns}/tables", json=body))
    assert op == "register"
    file = f"{location}/metadata/00000-{uuid.uuid4()}.metadata.json"
    corpus.store.put(file, json.dumps(metadata_doc(corpus, location, properties)).encode())
    body = {"name": name, "metadata-location": file}
    return Attempt(name, [location, path], lambda: http.post(f"/v1/namespaces/{ns}/register", json=body), [file])


def forget(corpus: Corpus, http: Http, ns: str, name: str) -> None:
    """Drop an attacker that got in (without purge) and end its retention: forgotten, no file deleted."""
    resp = http.delete(f"/v1/namespaces/{ns}/tables/{name}")
    assert resp.status_code == 204, resp.text
    purge_now(corpus.server.url, f"{ns}.{name}")


def check_refused(
    corpus: Corpus, victim: Victim, op: str, fld: str, path: str, codes: tuple[int, ...] = (409,)
) -> None:
    """The attempt is refused with ``codes`` and the Iceberg error body, the attacker did not get
    in, and the request wrote and deleted nothing anywhere in the warehouse (listed whole before and
    after it: V's prefixes, every location the attacker named and all the rest)."""
    store = corpus.store
    problems = []
    with corpus.http() as http:
        att = prepare(corpus, http, victim, op, fld, path)
        before = store.listing(corpus.root)
        resp = att.send()
        after = store.listing(corpus.root)
        written = sorted(p for p in after if before.get(p) != after[p])
        deleted = sorted(p for p in before if p not in after)
        if resp.status_code not in codes:
            problems.append(f"{op} of {fld}={path} answered {resp.status_code}, not {codes}: {resp.text[:300]}")
        else:
            body = resp.json()
            err = body.get("error") or {}
            if set(body) != {"error"} or err.get("code") != resp.status_code or not isinstance(err.get("message"), str):
                problems.append(f"not the Iceberg error body: {body}")
            elif resp.status_code == 409 and err.get("type") != "AlreadyExistsException":
                problems.append(f"409 of type {err.get('type')}, not AlreadyExistsException")
        got_in = False
        loaded = http.get(f"/v1/namespaces/{victim.attackers}/tables/{att.name}")
        if op == "commit":
            if loaded.json()["metadata-location"] != att.before:
                problems.append(f"the commit landed: {loaded.json()['metadata-location']}")
                got_in = True
        elif loaded.status_code != 404:
            problems.append(f"the attacker's table exists ({loaded.status_code})")
            got_in = loaded.status_code == 200
        if written or deleted:
            problems.append(f"files written: {written[:8]}; deleted: {deleted[:8]}")
        if got_in:  # no trace for the next case: forgotten, what it wrote removed
            forget(corpus, http, victim.attackers, att.name)
            written = sorted(p for p in store.listing(corpus.root) if p not in before)
        store.remove(sorted({*written, *att.placed} - set(victim.files)))
    lost, added, changed = victim_diff(victim, {p: size for p, size in after.items() if p not in att.placed})
    if lost or added or changed:
        problems.append(f"the victim's files changed: lost {lost[:8]}, added {added[:8]}, changed {changed[:8]}")
    assert not problems, "\n".join(problems)


def not_in(path: str, prefixes: list[str] | tuple[str, ...]) -> bool:
    return not any(path.startswith(p.rstrip("/") + "/") for p in prefixes)


RELATIONS = ("equal", "inside", "containing")


def related(victim: Victim, relation: str, target: str) -> str:
    prefix = victim.target(target)
    if relation == "equal":
        return prefix
    if relation == "inside":
        return f"{prefix}/in-{uuid.uuid4().hex[:6]}"
    assert relation == "containing"
    return parent(prefix)


# (V's variant, V's state, relation, which of V's prefixes). V's location is the same kind of
# prefix in both variants: it is attacked on the data-outside victims only.
OVERLAPS = [
    (variant, state, relation, target)
    for variant, state in VICTIMS
    for relation in RELATIONS
    for target in ("location", "outside-path")
    if variant == "data-outside" or target == "outside-path"
]


@pytest.mark.parametrize("op", ["create", "register", "commit"])
@pytest.mark.parametrize("fld", FIELDS)
@pytest.mark.parametrize(("variant", "state", "relation", "target"), OVERLAPS, ids=["-".join(c) for c in OVERLAPS])
def test_an_overlapping_attacker_is_refused_and_writes_nothing(
    corpora: Corpora, corpus: Corpus, variant: str, state: str, relation: str, target: str, fld: str, op: str
):
    victim = corpora.victim(corpus, variant, state)
    check_refused(corpus, victim, op, fld, related(victim, relation, target))


@pytest.mark.parametrize("op", ["create", "register", "commit"])
@pytest.mark.parametrize("fld", FIELDS)
@pytest.mark.parametrize("state", ["live", "dropped"])
def test_an_attacker_at_the_warehouse_root_is_refused_and_writes_nothing(
    corpora: Corpora, corpus: Corpus, state: str, fld: str, op: str
):
    """The root contains every table: no location or write path may be it (a table's location lies
    strictly below the root)."""
    victim = corpora.victim(corpus, "data-outside", state)
    check_refused(corpus, victim, op, fld, corpus.root, codes=(400, 403, 409))


# --- the neighbours: accepted, and their care never touches V --------------------------------------


def neighbours(victim: Victim) -> list[tuple[str, dict[str, str]]]:
    """(how it is made, {field: path}) of four attackers, every prefix next to one of V's: a longer
    name (``victim2``: V's is a string prefix of it), a shorter one (``victi``: it is a string
    prefix of V's), sibling directories. No two prefixes of different attackers overlap."""
    loc, out = victim.location, victim.outside
    return [
        (
            "create",
            {
                "location": loc + "2",
                "write.data.path": out + "2",
                "write.metadata.path": out + "3",
                "write.object-storage.path": loc + "3",
                "write.folder-storage.path": out + "4",
            },
        ),
        (
            "register",
            {
                "location": loc[:-1],
                "write.data.path": out[:-1],
                "write.metadata.path": out[:-2],
                "write.object-storage.path": loc[:-2],
                "write.folder-storage.path": out[:-3],
            },
        ),
        (
            "commit",  # made elsewhere, then moved next to V and its paths set next to V's
            {
                "location": out + "-moved",
                "write.data.path": loc + "-d",
                "write.metadata.path": loc + "-m",
                "write.object-storage.path": out + "-o",
                "write.folder-storage.path": loc + "-f",
            },
        ),
        (
            "create",
            {
                "location": parent(loc) + "/neighbour",
                "write.data.path": parent(out) + "/neighbour-data",
                "write.metadata.path": parent(out) + "/neighbour-meta",
                "write.object-storage.path": parent(out) + "/neighbour-objects",
                "write.folder-storage.path": parent(loc) + "/neighbour-folders",
            },
        ),
    ]


def json_rows(start: int, n: int) -> pa.Table:
    """``n`` rows of ``JSON_SCHEMA`` (the attackers' schema) with ids from ``start``."""
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "data": [f"d{i}" for i in range(n)]})


EXPIRE_NOW = {"history.expire.max-snapshot-age-ms": "1", "history.expire.min-snapshots-to-keep": "1"}


def make_neighbour(corpus: Corpus, http: Http, victim: Victim, i: int, op: str, paths: dict[str, str]) -> str:
    ns, name = victim.attackers, f"n{i}_{uuid.uuid4().hex[:6]}"
    props = {k: v for k, v in paths.items() if k != "location"}
    if op == "create":
        body = {
            "name": name,
            "schema": JSON_SCHEMA,
            "location": paths["location"],
            "properties": {**props, **EXPIRE_NOW},
        }
        resp = http.post(f"/v1/namespaces/{ns}/tables", json=body)
    elif op == "register":
        file = f"{paths['location']}/metadata/00000-{uuid.uuid4()}.metadata.json"
        doc = metadata_doc(corpus, paths["location"], {**props, **EXPIRE_NOW})
        corpus.store.put(file, json.dumps(doc).encode())
        resp = http.post(f"/v1/namespaces/{ns}/register", json={"name": name, "metadata-location": file})
    else:
        own = f"{corpus.root}/att-{uuid.uuid4().hex[:8]}/a"
        made = http.post(f"/v1/namespaces/{ns}/tables", json={"name": name, "schema": JSON_SCHEMA, "location": own})
        assert made.status_code == 200, made.text
        updates = [
            {"action": "set-location", "location": paths["location"]},
            {"action": "set-properties", "updates": {**props, **EXPIRE_NOW}},
        ]
        resp = http.post(f"/v1/namespaces/{ns}/tables/{name}", json={"requirements": [], "updates": updates})
    assert resp.status_code == 200, f"{op} of a neighbour {paths} refused: {resp.status_code} {resp.text[:300]}"
    return name


def run_kind(corpus: Corpus, ns: str, names: list[str], kind: str) -> dict[str, dict]:
    """Queue ``kind`` on every table of ``names`` at once, then wait for all: each one's result."""
    queued = {}
    for name in names:
        url = f"{corpus.server.url}/management/v1/maintenance/tables/{quote(ns)}/{quote(name)}"
        resp = requests.post(url, json={"kinds": [kind]}, timeout=30)
        assert resp.status_code == 202, resp.text
        (task,) = resp.json()["tasks"]
        queued[name] = task["id"]
    results = {}
    for name, task_id in queued.items():
        task = wait_task(corpus.server.url, task_id, timeout=180)
        assert task["state"] == "done", task
        results[name] = task.get("result") or {}
    return results


def purge_all(corpus: Corpus, ns: str, names: list[str], timeout: float = 120) -> None:
    """End the retention of the dropped tables ``names`` at once and wait until every purge is done
    (``support.purge_now`` for many: the worker takes them one after another)."""
    url = corpus.server.url
    dropped = requests.get(f"{url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()["dropped"]
    ids = {d["id"] for d in dropped if d["name"] in names}
    assert len(ids) == len(names), dropped
    for i in ids:
        resp = requests.delete(f"{url}/management/v1/dropped/{i}", timeout=30)
        assert resp.status_code == 202, resp.text
    deadline = time.monotonic() + timeout
    while True:
        left = requests.get(f"{url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()["dropped"]
        if not ids & {d["id"] for d in left}:
            return
        assert time.monotonic() < deadline, f"the purges did not finish: {left}"
        time.sleep(0.2)


def care_then_purge(corpus: Corpus, victim: Victim, names: list[str], prefixes: dict[str, list[str]]) -> None:
    """Real data for each attacker, an orphan planted in each of its prefixes, then every care job
    on all of them (each asserted to have done its work) and a purge; V is checked after each step
    (exactly, unless an attacker writes into V's prefixes: then V's own files must all stay and the
    exact check is at the end) and must read all its rows."""
    store, catalog = corpus.store, corpus.server.catalog()
    inside_v = any(not not_in(p, victim.prefixes) or p in victim.prefixes for ps in prefixes.values() for p in ps)

    def check(when: str) -> None:
        victim_unchanged(corpus, victim, f"after the attackers' {when}", exact=not inside_v)

    # real data: pyiceberg writes data files into write.data.path, manifests and lists into
    # write.metadata.path, the server its metadata files there too
    for name in names:
        table = catalog.load_table(f"{victim.attackers}.{name}")
        for i in range(ATTACKER_APPENDS):
            table.append(json_rows(1000 + i * 10, 2))
        table = catalog.load_table(f"{victim.attackers}.{name}")
        data = [t.file.file_path for t in table.scan().plan_files()]
        props = table.properties
        data_path = props.get("write.data.path", table.location().rstrip("/") + "/data")
        assert len(data) == ATTACKER_APPENDS and all(p.startswith(data_path + "/") for p in data), data
        if "write.metadata.path" in props:
            assert table.metadata_location.startswith(props["write.metadata.path"] + "/")
    # an orphan in each of the attackers' prefixes: orphan removal must list and delete there
    planted = {name: [f"{p}/orphan-{uuid.uuid4().hex[:6]}.parquet" for p in prefixes[name]] for name in names}
    for files in planted.values():
        for f in files:
            store.put(f, b"not referenced by anything")
    for name in names:
        assert set(planted[name]) <= set(store.listing(*prefixes[name])), planted[name]
    check("appends")
    time.sleep(ORPHAN_AGE_S + 0.2)

    manifests = run_kind(corpus, victim.attackers, names, "rewrite-manifests")
    for name, result in manifests.items():
        assert result.get("manifests-replaced", 0) >= ATTACKER_APPENDS, (name, result)
    check("manifest rewrite")

    compacted = run_kind(corpus, victim.attackers, names, "rewrite-data-files")
    for name, result in compacted.items():
        assert result.get("rewritten-data-files", 0) == ATTACKER_APPENDS, (name, result)
    check("compaction")

    expired = run_kind(corpus, victim.attackers, names, "expire-snapshots")
    for name, result in expired.items():
        # every snapshot but the compaction's: its data files, the replaced manifests, the lists go
        assert result.get("expired-snapshots-count", 0) >= ATTACKER_APPENDS, (name, result)
        assert result.get("deleted-files", 0) >= 2 * ATTACKER_APPENDS, (name, result)
    check("snapshot expiry")

    time.sleep(ORPHAN_AGE_S + 0.2)
    orphaned = run_kind(corpus, victim.attackers, names, "remove-orphans")
    for name, result in orphaned.items():
        assert result.get("deleted-files", 0) >= len(planted[name]), (name, result)
        assert not set(planted[name]) & set(store.listing(*prefixes[name])), (name, result)
    check("orphan removal")

    for name in names:
        table = catalog.load_table(f"{victim.attackers}.{name}")
        assert table.scan().to_arrow().num_rows == ATTACKER_APPENDS * 2  # care kept every row
        assert set(store.listing(*prefixes[name])) - set(victim.files), name
        catalog.purge_table(f"{victim.attackers}.{name}")
    purge_all(corpus, victim.attackers, names)
    check("purge")
    for name in names:  # the purge did delete: every file of the attacker is gone
        left = set(store.listing(*prefixes[name])) - set(victim.files)
        assert not left, f"the purge of {name} left its own files: {sorted(left)[:8]}"
    victim_unchanged(corpus, victim, "after the attackers' purge")
    victim_reads(corpus, victim)


def test_neighbours_are_accepted_and_no_care_job_of_theirs_touches_the_victim(corpus: Corpus, victim: Victim):
    made = neighbours(victim)
    with corpus.http() as http:
        names = [make_neighbour(corpus, http, victim, i, op, paths) for i, (op, paths) in enumerate(made)]
    victim_unchanged(corpus, victim, "after the neighbours were made")
    prefixes = {name: list(paths.values()) for name, (_, paths) in zip(names, made, strict=True)}
    care_then_purge(corpus, victim, names, prefixes)


# --- what an overlap would cost: an attacker the rule refuses, had it been accepted ----------------

# (V's variant, the attacker's field, which of V's prefixes, relation): the overlaps whose care
# would reach V's files if the catalog let them in (their listings cover V's outside path).
HARM = [
    ("data-outside", "location", "outside-path", "containing"),
    ("data-outside", "write.data.path", "outside-path", "equal"),
    ("data-outside", "write.object-storage.path", "outside-path", "containing"),
    ("data-outside", "write.folder-storage.path", "outside-path", "equal"),
    ("metadata-outside", "location", "outside-path", "equal"),
    ("metadata-outside", "write.data.path", "outside-path", "containing"),
    ("metadata-outside", "write.metadata.path", "outside-path", "equal"),
]


@pytest.mark.parametrize("state", ["live", "dropped"])
@pytest.mark.parametrize(("variant", "fld", "target", "relation"), HARM, ids=["-".join(h) for h in HARM])
def test_an_overlapping_attacker_never_gets_to_delete_the_victims_files(
    corpus: Corpus, variant: str, fld: str, target: str, relation: str, state: str
):
    """A fresh V per case. The create is refused (409, the rule); if a server accepts it anyway,
    the attacker gets data, every care job and a purge, as the neighbours do, and V must still
    have every file and row: what the refusal protects, shown by what happens without it."""
    victim = make_victim(corpus, variant, state)
    path = related(victim, relation, target)
    tag = uuid.uuid4().hex[:8]
    name = f"over_{tag}"
    location = path if fld == "location" else f"{corpus.root}/att-{tag}/a"
    props = {} if fld == "location" else {fld: path}
    body = {"name": name, "schema": JSON_SCHEMA, "location": location, "properties": {**props, **EXPIRE_NOW}}
    with corpus.http() as http:
        resp = http.post(f"/v1/namespaces/{victim.attackers}/tables", json=body)
    if resp.status_code == 409:
        victim_unchanged(corpus, victim, "after the refused create")
        victim_reads(corpus, victim)
        return
    assert resp.status_code == 200, resp.text
    try:
        care_then_purge(corpus, victim, [name], {name: [location, *props.values()]})
    except AssertionError as e:
        raise AssertionError(f"{fld}={path} was accepted (not 409) and then: {e}") from None
    pytest.fail(f"{fld}={path} overlaps V's {target} and was accepted (200), not refused with 409")
