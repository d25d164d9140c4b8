"""The commit engine in process, on a real SQLite file and a real local warehouse (no HTTP): the
outcomes it returns, what it records with an Idempotency-Key, that views go through the same loop
(lock, metrics, conflict causes), and that the cache never holds a document that differs from its
file. HTTP-level behaviour is in test_commits_http.py and test_views.py."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import orjson
import pytest

from catalog import errors, metrics
from catalog.database.pointers import KeyRecord
from catalog.usecases import TABLE, VIEW, Catalog, Change, Committed
from tests.support import JSON_ID_SCHEMA, append_updates, local_catalog, race

VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1_700_000_000_000,
    "summary": {"engine-name": "test"},
    "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
    "default-namespace": ["n"],
}


@pytest.fixture
def catalog(tmp_path):
    with local_catalog(tmp_path) as cat:
        yield cat


def sample(name: str, **labels: str) -> float:
    """A series of the catalog's metrics registry, as a scrape would read it (0 before its first use)."""
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def create(catalog: Catalog, name: str):
    outcome = catalog.create_table(("n",), name, None, {"schema": JSON_ID_SCHEMA})
    assert isinstance(outcome, Committed)
    return outcome.files[0]


def test_outcomes_and_the_recorded_key(catalog):
    created = create(catalog, "t")
    change = Change(TABLE, ("n",), "t", updates=append_updates(created.data, 1))
    key = KeyRecord("k", "f" * 64, 200)
    outcome = catalog.commit([change], key)
    assert isinstance(outcome, Committed) and outcome.recorded
    assert catalog.recorded("k") == KeyRecord("k", "f" * 64, 200, metadata_location=outcome.files[0].location)
    # a twin with the same key (its commit would apply on the new base): nothing changes, Replayed
    again = Change(TABLE, ("n",), "t", updates=append_updates(outcome.files[0].data, 2))
    assert not isinstance(catalog.commit([again], key), Committed)
    assert catalog.load(TABLE, ("n",), "t").location == outcome.files[0].location
    # an empty commit changes nothing and writes nothing
    unchanged = catalog.commit([Change(TABLE, ("n",), "t")])
    assert isinstance(unchanged, Committed) and unchanged.files[0].location == outcome.files[0].location
    assert not unchanged.recorded


def test_creates_record_their_key_with_the_row(catalog):
    """A create's Idempotency-Key lands in the inserting transaction: a retry of a create that
    landed (its answer lost) is a replay, not a 409; a staged create's commit likewise."""
    key = KeyRecord("c", "f" * 64, 200)
    # two twins built the same create (both found the name free); the first lands with the key
    twins = [Change(TABLE, ("n",), "t", created=catalog.stage_table(("n",), "t", None, {"schema": JSON_ID_SCHEMA}))] * 2
    first = catalog.commit(twins[:1], key)
    assert isinstance(first, Committed) and first.recorded
    assert catalog.recorded("c").metadata_location == first.files[0].location
    assert not isinstance(catalog.commit(twins[1:], key), Committed)  # the second is a replay
    with pytest.raises(errors.AlreadyExists):  # without the key, the name is simply taken
        catalog.commit(twins[1:])
    staged = catalog.stage_table(("n",), "s", None, {"schema": JSON_ID_SCHEMA})
    updates = [
        {"action": "assign-uuid", "uuid": staged["table-uuid"]},
        {"action": "upgrade-format-version", "format-version": 3},
        {"action": "add-schema", "schema": staged["schemas"][0]},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": staged["partition-specs"][0]},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": staged["sort-orders"][0]},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": staged["location"]},
    ]
    change = Change(TABLE, ("n",), "s", [{"type": "assert-create"}], updates)
    key = KeyRecord("s", "f" * 64, 200)
    outcome = catalog.commit([change], key)
    assert isinstance(outcome, Committed) and outcome.recorded and outcome.files[0].data["format-version"] == 3
    assert not isinstance(catalog.commit([change], key), Committed)


def test_cached_documents_equal_their_files(catalog):
    """Every commit shares the unchanged parts of its base: none of them may change under a file
    already written and cached."""
    current = create(catalog, "t")
    history = [current]
    for i in range(1, 8):
        updates = append_updates(current.data, i) + [{"action": "set-properties", "updates": {"round": str(i)}}]
        if i == 5:
            updates.append({"action": "remove-snapshots", "snapshot-ids": [1, 2]})
        outcome = catalog.commit([Change(TABLE, ("n",), "t", updates=updates)])
        current = outcome.files[0]
        history.append(current)
    for file in history:
        assert orjson.loads(file.raw) == file.data
        with open(file.location.removeprefix("file://"), "rb") as f:
            assert orjson.loads(f.read()) == file.data


def test_a_commit_drops_the_file_it_moved_past_from_the_cache(catalog):
    """The cache keeps each table's current file; the one a commit moved past leaves it (a reader
    that still wants it reads it again, the same document)."""
    first = create(catalog, "t")
    assert catalog.files.cached(first.location) is not None
    second = catalog.commit([set_property("t", "a", "1")]).files[0]
    assert catalog.files.cached(first.location) is None
    assert catalog.files.cached(second.location) is second
    assert catalog.load(TABLE, ("n",), "t").location == second.location
    assert catalog.read_file(first.location).data == first.data
    # a commit that changes nothing moves nothing: its file stays
    assert catalog.commit([Change(TABLE, ("n",), "t", [], [])]).files[0] is second
    assert catalog.files.cached(second.location) is second


def test_views_commit_through_the_same_engine(catalog):
    created = catalog.create_view(("n",), "v", None, {"schema": JSON_ID_SCHEMA, "view-version": VIEW_VERSION})
    before = sample("catalog_commits_total", kind="view")
    version = {
        **VIEW_VERSION,
        "version-id": 2,
        "representations": [{"type": "sql", "sql": "select 2", "dialect": "spark"}],
    }
    updates = [
        {"action": "add-view-version", "view-version": version},
        {"action": "set-current-view-version", "view-version-id": -1},
    ]
    uuid = created.data["view-uuid"]
    outcome = catalog.commit([Change(VIEW, ("n",), "v", [{"type": "assert-view-uuid", "uuid": uuid}], updates)])
    assert isinstance(outcome, Committed) and outcome.files[0].data["current-version-id"] == 2
    assert sample("catalog_commits_total", kind="view") == before + 1
    conflicts = sample("catalog_commit_conflict_total", cause="requirement")
    with pytest.raises(errors.RequirementFailed):
        catalog.commit([Change(VIEW, ("n",), "v", [{"type": "assert-view-uuid", "uuid": "0" * 32}], updates)])
    assert sample("catalog_commit_conflict_total", cause="requirement") == conflicts + 1
    with pytest.raises(errors.NoSuchView):
        catalog.commit([Change(VIEW, ("n",), "t-missing", updates=updates)])


def test_a_failed_transaction_names_the_table_that_failed(catalog, caplog):
    for name in ("a", "b"):
        create(catalog, name)
    stale = [{"type": "assert-current-schema-id", "current-schema-id": 7}]
    with pytest.raises(errors.RequirementFailed):
        catalog.commit([Change(TABLE, ("n",), "a"), Change(TABLE, ("n",), "b", stale)])
    conflict = [r.getMessage() for r in caplog.records if "commit conflict" in r.getMessage()]
    assert conflict and "n.b" in conflict[-1] and "n.a" not in conflict[-1]


def test_racing_commits_one_winner_per_base(catalog):
    """Eight writers with the same premise (main at the same snapshot): one wins, seven get 409,
    and exactly the winner's snapshot is on main."""
    base = create(catalog, "t").data

    def write(i: int) -> str:
        premise = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None}]
        try:
            catalog.commit([Change(TABLE, ("n",), "t", premise, append_updates(base, 100 + i))])
            return "won"
        except errors.CommitFailed:
            return "409"

    results = race(8, write)
    assert sorted(results) == ["409"] * 7 + ["won"]
    final = catalog.load(TABLE, ("n",), "t").data
    assert [s["snapshot-id"] for s in final["snapshots"]] == [100 + results.index("won")]


# -- inline commits (on the event loop, no worker thread) -------------------------------------------


def set_property(name: str, key: str, value: str, requirements=()) -> Change:
    return Change(TABLE, ("n",), name, list(requirements), [{"action": "set-properties", "updates": {key: value}}])


def files_of(catalog: Catalog, name: str) -> set[str]:
    """The metadata files in the table's directory."""
    root = catalog.load(TABLE, ("n",), name).location.removeprefix("file://").rsplit("/", 1)[0]
    return {p.name for p in Path(root).iterdir()}


def inline(catalog: Catalog, changes: list[Change], key: KeyRecord | None = None):
    """``Catalog.commit_inline`` on an event loop of its own, as the server's request runs it."""
    return asyncio.run(catalog.commit_inline(changes, key))


def to_thread() -> dict[str, float]:
    reasons = ("lock", "writer", "file", "rebase", "lost", "group")
    return {r: sample("catalog_commit_to_thread_total", reason=r) for r in reasons}


def test_an_inline_commit_lands_and_refuses_as_one_on_a_thread(catalog):
    created = create(catalog, "t")
    before = to_thread()
    outcome = inline(catalog, [set_property("t", "a", "1")])
    assert isinstance(outcome, Committed) and outcome.files[0].data["properties"]["a"] == "1"
    assert catalog.load(TABLE, ("n",), "t").location == outcome.files[0].location
    # a stale requirement: the same 409, at once, with no file left behind
    stale = [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}]
    files = files_of(catalog, "t")
    with pytest.raises(errors.CommitFailed):
        inline(catalog, [set_property("t", "b", "2", stale)])
    assert files_of(catalog, "t") == files
    # an Idempotency-Key lands with it, as on a thread
    key = KeyRecord("inline", "f" * 64, 200)
    keyed = inline(catalog, [set_property("t", "c", "3")], key)
    assert isinstance(keyed, Committed) and keyed.recorded
    assert catalog.recorded("inline").metadata_location == keyed.files[0].location
    assert to_thread() == before  # nothing went to a thread
    # a create or a transaction always runs on a thread (uncounted)
    assert inline(catalog, [Change(TABLE, ("n",), "u", created=created.data)]) is None
    assert inline(catalog, [set_property("t", "d", "4"), set_property("t", "e", "5")]) is None
    assert to_thread() == before


def test_an_inline_commit_that_would_wait_goes_to_a_thread_having_done_nothing(catalog, tmp_path, monkeypatch):
    """Each reason to leave the event loop: the attempt stops before the pointer moves, deletes
    the file it wrote, and the thread's commit then lands as usual."""
    from catalog.commit import inline as inline_module

    create(catalog, "t")

    def attempt(reason: str, key: str, uncached: bool = False) -> None:
        before, files, pointer = to_thread(), files_of(catalog, "t"), catalog.load(TABLE, ("n",), "t").location
        if uncached:
            catalog.files._cache.clear()
        assert inline(catalog, [set_property("t", key, "v")]) is None
        after = to_thread()
        assert {r: after[r] - before[r] for r in after if after[r] != before[r]} == {reason: 1}
        assert files_of(catalog, "t") == files and catalog.load(TABLE, ("n",), "t").location == pointer
        landed = catalog.commit([set_property("t", key, "v")])  # what the server then does on a thread
        assert isinstance(landed, Committed) and landed.files[0].data["properties"][key] == "v"

    # the table's lock, held by a commit on another thread
    slot = catalog.engine._locks[hash((("n",), "t")) % len(catalog.engine._locks)]
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with slot:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(30)
    try:
        before, files = to_thread(), files_of(catalog, "t")
        assert inline(catalog, [set_property("t", "k1", "v")]) is None
        assert to_thread()["lock"] == before["lock"] + 1 and files_of(catalog, "t") == files
    finally:
        release.set()
        holder.join()
    assert isinstance(catalog.commit([set_property("t", "k1", "v")]), Committed)
    # SQLite's write lock, held by another process's transaction
    other = sqlite3.connect(tmp_path / "c.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        before, files = to_thread(), files_of(catalog, "t")
        assert inline(catalog, [set_property("t", "k2", "v")]) is None
        assert to_thread()["writer"] == before["writer"] + 1 and files_of(catalog, "t") == files
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert isinstance(catalog.commit([set_property("t", "k2", "v")]), Committed)
    # the loop's swap connection came out of that with no transaction left open: the next one lands
    assert isinstance(inline(catalog, [set_property("t", "k2", "w")]), Committed)
    # a metadata file that is not in the cache, or over the bound
    attempt("file", "k3", uncached=True)
    monkeypatch.setattr(inline_module, "INLINE_MAX_BYTES", 100)
    attempt("file", "k4")


def test_an_append_to_rebase_goes_to_a_thread(tmp_path):
    """An append whose branch moved is rebased on a thread (manifest lists are read and written);
    with group commit on, appends go there from the start."""
    with local_catalog(tmp_path, append_rebase=True, group_commit_max_commits=1) as catalog:
        created = create(catalog, "t")
        first = inline(catalog, [Change(TABLE, ("n",), "t", updates=append_updates(created.data, 1))])
        assert isinstance(first, Committed)
        stale = first.files[0].data  # main at 1; another append moves it to 2
        assert isinstance(inline(catalog, [Change(TABLE, ("n",), "t", updates=append_updates(stale, 2))]), Committed)
        before = to_thread()
        moved = Change(
            TABLE,
            ("n",),
            "t",
            [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 1}],
            append_updates(stale, 3),
        )
        assert inline(catalog, [moved]) is None
        assert to_thread()["rebase"] == before["rebase"] + 1
    (tmp_path / "grouped").mkdir()
    with local_catalog(tmp_path / "grouped", append_rebase=True) as catalog:
        created = create(catalog, "t")
        before = to_thread()
        assert inline(catalog, [Change(TABLE, ("n",), "t", updates=append_updates(created.data, 1))]) is None
        assert to_thread()["group"] == before["group"] + 1


def test_inline_commits_off_sends_every_commit_to_a_thread(tmp_path):
    with local_catalog(tmp_path, inline_commits=False) as catalog:
        create(catalog, "t")
        before = to_thread()
        assert inline(catalog, [set_property("t", "a", "1")]) is None
        assert to_thread() == before  # a setting, not a fallback
        assert isinstance(catalog.commit([set_property("t", "a", "1")]), Committed)


class HeldSync:
    """The storage's ``fdatasync`` held until released, recording the threads it ran on: a commit
    stopped at the moment its file is being made durable."""

    def __init__(self, monkeypatch) -> None:
        from catalog.storage import backends

        self.threads: list[int] = []
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        real = backends._sync

        def held(fd: int) -> None:
            self.threads.append(threading.get_ident())
            self.entered.release()
            assert self.release.wait(30)
            real(fd)

        monkeypatch.setattr(backends, "_sync", held)

    async def reached(self, n: int = 1) -> None:
        for _ in range(n):
            assert await asyncio.to_thread(self.entered.acquire, True, 30)


def test_an_inline_commit_syncs_its_file_off_the_loop(catalog, monkeypatch):
    """While one commit's file is made durable on a worker thread the loop serves others: a commit
    to another table reaches its own sync meanwhile, and those to the same table queue behind it.
    No pointer moves before its file is durable. A commit with another queued behind it syncs on
    the loop (the queue waits for it either way)."""
    for name in ("t", "u"):
        create(catalog, name)
    sync = HeldSync(monkeypatch)

    async def run() -> list:
        loop_thread = threading.get_ident()
        before = {n: catalog.load(TABLE, ("n",), n).location for n in ("t", "u")}
        first = asyncio.create_task(catalog.commit_inline([set_property("t", "a", "1")]))
        await sync.reached()
        other = asyncio.create_task(catalog.commit_inline([set_property("u", "a", "1")]))
        await sync.reached()  # the loop was free: the other table's commit is syncing too
        same = asyncio.create_task(catalog.commit_inline([set_property("t", "b", "2")]))
        last = asyncio.create_task(catalog.commit_inline([set_property("t", "c", "3")]))
        await asyncio.sleep(0.05)
        assert not same.done() and not last.done() and len(sync.threads) == 2  # queued on the loop
        assert {n: catalog.load(TABLE, ("n",), n).location for n in ("t", "u")} == before
        assert loop_thread not in sync.threads
        sync.release.set()
        landed = await asyncio.gather(first, other, same, last)
        assert sync.threads[2] == loop_thread and loop_thread not in (sync.threads[:2] + sync.threads[3:])
        return landed

    first, other, same, last = asyncio.run(run())
    assert all(isinstance(o, Committed) for o in (first, other, same, last))
    assert last.files[0].data["properties"] == {**first.files[0].data["properties"], "b": "2", "c": "3"}
    assert catalog.load(TABLE, ("n",), "t").location == last.files[0].location
    assert catalog.load(TABLE, ("n",), "u").location == other.files[0].location


def test_a_commit_cancelled_while_its_file_syncs_lands_nothing_and_leaves_no_file(catalog, monkeypatch):
    create(catalog, "t")
    pointer, files = catalog.load(TABLE, ("n",), "t").location, files_of(catalog, "t")
    sync = HeldSync(monkeypatch)

    async def run() -> None:
        task = asyncio.create_task(catalog.commit_inline([set_property("t", "a", "1")]))
        await sync.reached()
        assert len(files_of(catalog, "t")) == len(files) + 1  # written, not yet durable
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        sync.release.set()
        for _ in range(500):  # the file is deleted once its sync returns
            if files_of(catalog, "t") == files:
                break
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert files_of(catalog, "t") == files and catalog.load(TABLE, ("n",), "t").location == pointer
    landed = inline(catalog, [set_property("t", "a", "1")])  # the table's locks were released
    assert isinstance(landed, Committed) and catalog.load(TABLE, ("n",), "t").location == landed.files[0].location


def test_an_inline_commit_whose_sync_fails_lands_nothing_and_leaves_no_file(catalog, monkeypatch):
    from catalog.storage import backends

    create(catalog, "t")
    pointer, files = catalog.load(TABLE, ("n",), "t").location, files_of(catalog, "t")

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(backends, "_sync", failing)
    with pytest.raises(errors.IcebergError) as failed:
        inline(catalog, [set_property("t", "a", "1")])
    assert failed.value.code >= 500
    assert files_of(catalog, "t") == files and catalog.load(TABLE, ("n",), "t").location == pointer
    monkeypatch.undo()
    assert isinstance(inline(catalog, [set_property("t", "a", "1")]), Committed)


def test_the_sync_stays_on_the_loop_when_nothing_waits_or_the_tables_writers_race(catalog, monkeypatch):
    """A lone request's commit (no other request pending) and a commit to a table whose writers'
    requirements failed within ``RACING_S`` sync on the loop; another table's commit still leaves."""
    from catalog.commit import inline as inline_module

    for name in ("t", "u"):
        create(catalog, name)
    sync = HeldSync(monkeypatch)
    sync.release.set()

    async def run() -> None:
        loop_thread = threading.get_ident()
        assert isinstance(await catalog.commit_inline([set_property("t", "a", "1")], others_waiting=False), Committed)
        assert sync.threads[-1] == loop_thread
        stale = [{"type": "assert-table-uuid", "uuid": "00000000-0000-0000-0000-000000000000"}]
        with pytest.raises(errors.CommitFailed):
            await catalog.commit_inline([set_property("t", "b", "2", stale)])
        assert isinstance(await catalog.commit_inline([set_property("t", "b", "2")]), Committed)
        assert sync.threads[-1] == loop_thread
        assert isinstance(await catalog.commit_inline([set_property("u", "b", "2")]), Committed)
        assert sync.threads[-1] != loop_thread

    asyncio.run(run())
    monkeypatch.setattr(inline_module, "RACING_S", 0.0)  # the race is over: the sync leaves again
    assert isinstance(inline(catalog, [set_property("t", "c", "3")]), Committed)
    assert sync.threads[-1] != threading.get_ident()
