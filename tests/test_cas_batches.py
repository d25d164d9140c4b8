"""Commits to different tables that queue for the database land in ONE transaction (issue 27), each
answered on its own: a lost compare-and-swap, a taken Idempotency-Key, a failed COMMIT are each
member's own answer, exactly as if it had run alone (``store/pointers.py``, ``swap_pointers``).

A batch is formed for real: the test holds the database where the server's next CAS transaction
needs it (SQLite: the write lock; PostgreSQL: the row of table ``blocker``), commits to ``blocker``
(its transaction waits), then to the member tables (they queue behind it), and lets go. What it
does while it holds the database (move a pointer, record a key) is what another writer did first.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
import requests
import sqlalchemy as sa

from catalog.api.idempotency import scoped
from catalog.auth.principals import ANONYMOUS
from tests.support import Http, add_column, create, load

N = 6  # member tables per batch


def _steps(url: str, step: str) -> float:
    """``catalog_commit_step_seconds_count`` of ``step``, over every kind of commit."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    prefix = "catalog_commit_step_seconds_count{"
    lines = [line for line in text.splitlines() if line.startswith(prefix) and f'step="{step}"' in line]
    return sum(float(line.split()[-1]) for line in lines)


def _batches(url: str) -> tuple[float, float]:
    """(CAS transactions, pointer swaps they landed)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    lines = [line.split() for line in text.splitlines() if line.startswith("catalog_cas_batch_size_")]
    values = {words[0]: float(words[-1]) for words in lines}
    return values["catalog_cas_batch_size_count"], values["catalog_cas_batch_size_sum"]


def _wait_for(what: Callable[[], bool], message: str) -> None:
    deadline = time.monotonic() + 60
    while not what():
        assert time.monotonic() < deadline, message
        time.sleep(0.05)


def _settle(url: str, writes: float) -> None:
    """Wait until ``writes`` files are written, or the count stops moving for 3 s: a member whose
    name shares ``blocker``'s lock slot in the engine (a hash collision) waits for blocker's commit,
    so it cannot be in this batch; the others still are."""
    seen, still = _steps(url, "write"), time.monotonic()
    while seen < writes and time.monotonic() - still < 3:
        time.sleep(0.05)
        now = _steps(url, "write")
        if now != seen:
            seen, still = now, time.monotonic()


@contextmanager
def _engine(server) -> Iterator[sa.Engine]:
    from catalog.settings import Settings
    from catalog.store.db import create_engine

    engine = create_engine(Settings(database_url=server.env["CATALOG_DATABASE_URL"]))
    try:
        yield engine
    finally:
        engine.dispose()


class _Batch:
    """Commits sent while the test holds the database: ``blocker``'s first, then the members'."""

    def __init__(self, server, ns: str) -> None:
        self.server, self.ns = server, ns
        self.answers: dict[str, requests.Response] = {}
        self._threads: list[threading.Thread] = []

    def post(self, name: str, body: dict, headers: dict | None = None) -> None:
        def send() -> None:
            url = f"{self.server.url}/v1/namespaces/{self.ns}/tables/{name}"
            self.answers[name] = requests.post(url, json=body, headers=headers or {}, timeout=120)

        thread = threading.Thread(target=send)
        thread.start()
        self._threads.append(thread)

    def join(self) -> dict[str, requests.Response]:
        for thread in self._threads:
            thread.join(120)
        return self.answers


@contextmanager
def _held(server, ns: str, engine: sa.Engine) -> Iterator[tuple[_Batch, sa.Connection]]:
    """Hold the database, start ``blocker``'s commit (its CAS transaction waits for the test), yield
    the batch to post members to and the test's own transaction; on exit wait until every member has
    written its file (it is queued for the CAS then), commit the test's transaction and collect."""
    batch = _Batch(server, ns)
    with engine.connect() as conn:
        trans = conn.begin()  # on SQLite: BEGIN IMMEDIATE, the write lock
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SELECT id FROM catalog_entries WHERE name = 'blocker' FOR UPDATE"))
        writes = _steps(server.url, "write")
        batch.post("blocker", {"updates": [{"action": "set-properties", "updates": {"blocked": "yes"}}]})
        _wait_for(lambda: _steps(server.url, "write") > writes, "blocker's commit never reached its CAS")
        time.sleep(0.2)  # its file is written: now into the CAS transaction, which waits for the test
        writes = _steps(server.url, "write")
        try:
            yield batch, conn
            _settle(server.url, writes + len(batch._threads) - 1)
            time.sleep(0.3)  # from the written file into the queue
        except BaseException:
            trans.rollback()
            batch.join()
            raise
        trans.commit()
    batch.join()


def _tables(http, ns: str, names: list[str]) -> dict[str, dict]:
    http.post("/v1/namespaces", json={"namespace": [ns]})
    return {name: create(http, ns, name) for name in ["blocker", *names]}


def _set(i: int) -> dict:
    return {"updates": [{"action": "set-properties", "updates": {f"k{i}": "v"}}]}


def _pointer(conn: sa.Connection, name: str) -> str:
    return conn.execute(sa.text("SELECT metadata_location FROM catalog_entries WHERE name = :n"), {"n": name}).scalar()


def _log_length(http, ns: str, name: str) -> int:
    return len(load(http, ns, name)["metadata"]["metadata-log"])


def test_commits_to_different_tables_land_together_and_exactly(fresh):
    """N writers on N tables at once, several rounds, released together: every commit lands, each
    table's history holds exactly its own, and the swaps shared transactions."""
    server = fresh({"CATALOG_CAS_BATCH_MAX_COMMITS": "32"})
    ns = f"b{uuid.uuid4().hex[:6]}"
    names = [f"t{i}" for i in range(N)]
    rounds = 5
    with Http(server.url) as http, _engine(server) as engine:
        _tables(http, ns, names)
        with _held(server, ns, engine) as (batch, _):
            for i, name in enumerate(names):
                batch.post(name, _set(i))
        answers = batch.join()
        assert {n: r.status_code for n, r in answers.items()} == {n: 200 for n in ["blocker", *names]}
        transactions, swaps = _batches(server.url)
        assert transactions < swaps, (transactions, swaps)  # some transaction landed several commits

        def writer(i: int) -> list[int]:
            url = f"{server.url}/v1/namespaces/{ns}/tables/t{i}"
            return [requests.post(url, json=_set(100 + r), timeout=60).status_code for r in range(rounds)]

        threads_out: dict[int, list[int]] = {}
        threads = [threading.Thread(target=lambda i=i: threads_out.__setitem__(i, writer(i))) for i in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert threads_out == {i: [200] * rounds for i in range(N)}
        for i, name in enumerate(names):
            metadata = load(http, ns, name)["metadata"]
            assert len(metadata["metadata-log"]) == 1 + rounds, name  # exactly its own commits, no other's
            mine = {f"k{i}", *(f"k{100 + r}" for r in range(rounds))}
            assert {k for k in metadata["properties"] if k.startswith("k")} == mine, name


def test_a_member_that_lost_its_cas_is_answered_409_alone(fresh):
    """Another writer moved one member's pointer while the batch queued: that member's UPDATE finds
    nothing, its requirement no longer holds on the new pointer (409); the others land."""
    server = fresh({"CATALOG_CAS_BATCH_MAX_COMMITS": "32"})
    ns = f"b{uuid.uuid4().hex[:6]}"
    names = [f"t{i}" for i in range(N)]
    with Http(server.url) as http, _engine(server) as engine:
        created = _tables(http, ns, [*names, "donor"])
        assert http.post(f"/v1/namespaces/{ns}/tables/donor", json=add_column(created["donor"], "x")).status_code == 200
        moved_to = load(http, ns, "donor")["metadata-location"]  # a file with a third column
        with _held(server, ns, engine) as (batch, conn):
            for name in names:
                batch.post(name, add_column(created[name], "c"))  # requires last-assigned-field-id 2
            conn.execute(
                sa.text("UPDATE catalog_entries SET metadata_location = :m WHERE name = 't0'"), {"m": moved_to}
            )
        answers = batch.join()
        assert answers["t0"].status_code == 409, answers["t0"].text
        assert answers["t0"].json()["error"]["type"] == "CommitFailedException"
        assert {n: answers[n].status_code for n in names[1:]} == {n: 200 for n in names[1:]}
        assert load(http, ns, "t0")["metadata-location"] == moved_to
        for name in names[1:]:
            metadata = load(http, ns, name)["metadata"]
            assert metadata["last-column-id"] == 3 and len(metadata["metadata-log"]) == 1, name
        transactions, swaps = _batches(server.url)
        assert transactions < swaps, (transactions, swaps)


def test_a_member_whose_key_was_taken_gets_the_recorded_answer_alone(fresh):
    """A twin request recorded the member's Idempotency-Key while the batch queued: the member moves
    nothing and is answered with the twin's response; the others land."""
    server = fresh({"CATALOG_CAS_BATCH_MAX_COMMITS": "32"})
    ns = f"b{uuid.uuid4().hex[:6]}"
    names = [f"t{i}" for i in range(N)]
    key = uuid.uuid4().hex
    with Http(server.url) as http, _engine(server) as engine:
        created = _tables(http, ns, names)
        before = created["t0"]["metadata-location"]
        with _held(server, ns, engine) as (batch, conn):
            for i, name in enumerate(names):
                batch.post(name, _set(i), headers={"Idempotency-Key": key} if name == "t0" else None)
            conn.execute(
                sa.text(
                    "INSERT INTO idempotency_keys (key, fingerprint, status, body, metadata_location, created_ms) "
                    "VALUES (:k, 'twin', 200, NULL, :m, :t)"
                ),
                {"k": scoped(key, ANONYMOUS.name), "m": before, "t": int(time.time() * 1000)},
            )
        answers = batch.join()
        assert answers["t0"].status_code == 200, answers["t0"].text
        assert answers["t0"].json()["metadata-location"] == before  # the twin's answer, not a new commit
        assert load(http, ns, "t0")["metadata-location"] == before
        assert {n: answers[n].status_code for n in names[1:]} == {n: 200 for n in names[1:]}
        for i, name in enumerate(names[1:], start=1):
            assert load(http, ns, name)["metadata"]["properties"].get(f"k{i}") == "v", name
        transactions, swaps = _batches(server.url)
        assert transactions < swaps, (transactions, swaps)


def _trap_commit(conn: sa.Connection, postgres: bool) -> None:
    """Make the COMMIT of any transaction that moved a ``doomed*`` pointer fail (a deferred check)."""
    if postgres:
        conn.execute(
            sa.text(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$"
            )
        )
        conn.execute(
            sa.text(
                "CREATE CONSTRAINT TRIGGER trap AFTER UPDATE ON catalog_entries DEFERRABLE INITIALLY DEFERRED "
                "FOR EACH ROW WHEN (NEW.name LIKE 'doomed%') EXECUTE FUNCTION refuse()"
            )
        )
    else:  # a deferred foreign key is checked at COMMIT
        conn.execute(
            sa.text("CREATE TABLE trap (entry INTEGER REFERENCES catalog_entries (id) DEFERRABLE INITIALLY DEFERRED)")
        )
        conn.execute(
            sa.text(
                "CREATE TRIGGER trap AFTER UPDATE ON catalog_entries WHEN NEW.name LIKE 'doomed%' "
                "BEGIN INSERT INTO trap VALUES (-1); END"
            )
        )


def test_a_failed_commit_answers_every_member_exactly(fresh):
    """The batch's COMMIT fails: nothing landed, and each member settles its own outcome by a fresh
    read of its pointer: on SQLite (settled: a failed COMMIT landed nothing) each is a 503 that says
    nothing was committed and its file is gone; on PostgreSQL, where a failed COMMIT cannot be told
    from a lost connection, each is a 500 CommitStateUnknown and its file is kept."""
    server = fresh({"CATALOG_CAS_BATCH_MAX_COMMITS": "32"})
    ns = f"b{uuid.uuid4().hex[:6]}"
    names = [f"doomed{i}" for i in range(N)]
    with Http(server.url) as http, _engine(server) as engine:
        created = _tables(http, ns, names)
        postgres = engine.dialect.name == "postgresql"
        with engine.begin() as conn:
            _trap_commit(conn, postgres)
        with _held(server, ns, engine) as (batch, _):
            for i, name in enumerate(names):
                batch.post(name, _set(i))
        answers = batch.join()
        assert answers["blocker"].status_code == 200
        for name in names:
            if postgres:
                assert answers[name].status_code == 500, answers[name].text
                assert answers[name].json()["error"]["type"] == "CommitStateUnknownException"
            else:
                assert answers[name].status_code == 503, answers[name].text
                assert "nothing was committed" in answers[name].json()["error"]["message"]
            assert load(http, ns, name)["metadata-location"] == created[name]["metadata-location"], name
        transactions, swaps = _batches(server.url)
        assert transactions < swaps, (transactions, swaps)
        with engine.begin() as conn:
            conn.execute(sa.text("DROP TRIGGER trap ON catalog_entries" if postgres else "DROP TRIGGER trap"))
        for i, name in enumerate(names):  # and the tables keep working
            assert http.post(f"/v1/namespaces/{ns}/tables/{name}", json=_set(i)).status_code == 200
            assert _log_length(http, ns, name) == 1, name


@pytest.mark.parametrize("limit", ["1"])
def test_batching_off_is_one_transaction_per_commit(fresh, limit):
    """``CATALOG_CAS_BATCH_MAX_COMMITS=1``: the same queued commits land one transaction each."""
    server = fresh({"CATALOG_CAS_BATCH_MAX_COMMITS": limit})
    ns = f"b{uuid.uuid4().hex[:6]}"
    names = [f"t{i}" for i in range(N)]
    with Http(server.url) as http, _engine(server) as engine:
        _tables(http, ns, names)
        before = _batches(server.url)
        with _held(server, ns, engine) as (batch, _):
            for i, name in enumerate(names):
                batch.post(name, _set(i))
        assert {n: r.status_code for n, r in batch.join().items()} == {n: 200 for n in ["blocker", *names]}
        transactions, swaps = _batches(server.url)
        assert transactions - before[0] == swaps - before[1] == N + 1
