"""Server-side rebase of pure appends (catalog/rebase.py), with real pyiceberg clients over HTTP on both
backends, and in process for what needs hand-built files (v3 row ids, a lost CAS, hostile lists).

Clients here never retry a 409 themselves (``commit.retry.num-retries=0``): every conflict the server
does not absorb surfaces as ``CommitFailedException``."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from pyiceberg.exceptions import CommitFailedException

from tests.conftest import start_server
from tests.test_concurrency import _counter
from tests.test_tables import SCHEMA, rows

NO_CLIENT_RETRY = {"commit.retry.num-retries": "0"}
REBASE = {**NO_CLIENT_RETRY, "catalog.append-rebase.enabled": "true"}


def chain(table) -> list:
    """The main branch's snapshots, oldest first, following parent ids from the head."""
    by_id = {s.snapshot_id: s for s in table.snapshots()}
    out, head = [], table.current_snapshot()
    while head is not None:
        out.append(head)
        head = by_id.get(head.parent_snapshot_id) if head.parent_snapshot_id is not None else None
    return out[::-1]


def check_table(table, expected_ids: list[int]) -> None:
    """Every acknowledged row exactly once, a linear chain holding every snapshot, sequence numbers
    strictly increasing along it, and the head's summary totals equal to a full scan."""
    scanned = table.scan().to_arrow()
    assert sorted(scanned["id"].to_pylist()) == sorted(expected_ids)
    snaps = chain(table)
    assert len(snaps) == len(table.snapshots())
    seqs = [s.sequence_number for s in snaps]
    assert seqs == sorted(set(seqs)), seqs
    files = [task.file for task in table.scan().plan_files()]
    summary = table.current_snapshot().summary
    assert int(summary["total-records"]) == scanned.num_rows
    assert int(summary["total-data-files"]) == len(files)
    assert int(summary["total-files-size"]) == sum(f.file_size_in_bytes for f in files)
    assert int(summary["total-delete-files"]) == 0


def test_concurrent_appends_land_without_409(server, ns, tmp_path):
    """8 writers x 4 appends, through two server processes on one database (so both paths run: the
    in-process queue, where the requirement fails, and a lost CAS between processes): no client sees
    a 409, every append lands once, and the rebases are counted."""
    server.catalog().create_table(f"{ns}.hot", SCHEMA, properties=REBASE).append(rows(0, 1))
    shared = {k: v for k, v in server.env.items() if k.startswith(("CATALOG_", "AWS_")) and k != "CATALOG_PORT"}
    other = start_server(tmp_path / "second", server.backend, shared)
    other.io_props = server.io_props
    try:
        urls = [server.url, other.url]
        before = sum(_counter(url, "catalog_commit_append_rebase_total") for url in urls)
        writers, appends = 8, 4
        tables = [(server if w % 2 else other).catalog().load_table(f"{ns}.hot") for w in range(writers)]
        barrier = threading.Barrier(writers)

        def write(w: int) -> list[int]:
            barrier.wait()
            for i in range(appends):
                tables[w].append(rows(1000 * (w + 1) + i, 1))
            return [1000 * (w + 1) + i for i in range(appends)]

        with ThreadPoolExecutor(writers) as pool:
            acknowledged = [row for done in pool.map(write, range(writers)) for row in done]
        rebased = sum(_counter(url, "catalog_commit_append_rebase_total") for url in urls) - before
    finally:
        other.stop()
    table = server.catalog().load_table(f"{ns}.hot")
    check_table(table, [0, *acknowledged])
    assert len(table.snapshots()) == 1 + writers * appends
    assert rebased > 0  # the writers really raced, and the server absorbed it


def test_rebase_off_answers_409_as_before(server, ns):
    """Without the property (and the catalog default off), a stale append is a 409 and nothing moves."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.plain", SCHEMA, properties=NO_CLIENT_RETRY).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.plain")
    catalog.load_table(f"{ns}.plain").append(rows(1, 1))
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        stale.append(rows(2, 1))
    table = catalog.load_table(f"{ns}.plain")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1]
    # switched off per table while the default is on is covered in process (test_property_overrides)


def test_overwrites_are_never_rebased_and_appends_rebase_on_them(server, ns):
    """An overwrite whose branch moved is a 409 as before; an append that was stale before an
    overwrite landed is rebased on top of it: the rows the overwrite removed stay removed."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.mixed", SCHEMA, properties=REBASE).append(rows(0, 3))
    overwriter = catalog.load_table(f"{ns}.mixed")
    appender = catalog.load_table(f"{ns}.mixed")
    catalog.load_table(f"{ns}.mixed").append(rows(10, 1))  # both are stale now
    with pytest.raises(CommitFailedException):
        overwriter.overwrite(rows(20, 1))
    with pytest.raises(CommitFailedException):
        overwriter.delete("id == 0")
    catalog.load_table(f"{ns}.mixed").overwrite(rows(30, 2))  # a fresh overwrite lands
    appender.append(rows(40, 1))  # stale across the overwrite: rebased on it
    table = catalog.load_table(f"{ns}.mixed")
    assert table.current_snapshot().snapshot_id == appender.current_snapshot().snapshot_id
    ops = [s.summary.operation.value for s in chain(table)]
    assert ops[-1] == "append" and ("overwrite" in ops or "delete" in ops), ops
    check_table(table, [30, 31, 40])


def test_merged_manifests_are_refused(server, ns):
    """pyiceberg's merge-append rewrites earlier manifests into one (EXISTING entries): not a pure
    append, so a stale one is a 409 even with rebase on."""
    catalog = server.catalog()
    props = {**REBASE, "commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}
    catalog.create_table(f"{ns}.merged", SCHEMA, properties=props).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.merged")
    catalog.load_table(f"{ns}.merged").append(rows(1, 1))
    with pytest.raises(CommitFailedException, match="branch main has changed"):
        stale.append(rows(2, 1))  # its list: one merged manifest (the old file EXISTING + the new one)
    table = catalog.load_table(f"{ns}.merged")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [0, 1]


def test_a_client_that_asserted_no_branch_is_not_rebased(server, ns):
    """The first append of an empty table asserts that main does not exist (snapshot-id null): if
    another append created main meanwhile, it is a 409 as before."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.empty", SCHEMA, properties=REBASE)
    stale = catalog.load_table(f"{ns}.empty")
    catalog.load_table(f"{ns}.empty").append(rows(0, 1))
    with pytest.raises(CommitFailedException, match="created concurrently"):
        stale.append(rows(1, 1))


def test_a_manifest_list_outside_the_table_is_refused(server, ns, http):
    """A hostile client names another table's manifest list: a 409 as before, nothing written."""
    catalog = server.catalog()
    catalog.create_table(f"{ns}.victim", SCHEMA, properties=REBASE).append(rows(0, 1))
    victim = catalog.load_table(f"{ns}.victim")
    catalog.create_table(f"{ns}.t", SCHEMA, properties=REBASE).append(rows(0, 1))
    stale = catalog.load_table(f"{ns}.t")
    catalog.load_table(f"{ns}.t").append(rows(1, 1))
    parent = stale.current_snapshot()
    snapshot_id = uuid.uuid4().int >> 66
    snapshot = {
        "snapshot-id": snapshot_id,
        "parent-snapshot-id": parent.snapshot_id,
        "sequence-number": parent.sequence_number + 1,
        "timestamp-ms": parent.timestamp_ms + 1,
        "manifest-list": victim.current_snapshot().manifest_list,
        "summary": {"operation": "append"},
        "schema-id": 0,
    }
    body = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent.snapshot_id}],
        "updates": [
            {"action": "add-snapshot", "snapshot": snapshot},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
    }
    resp = http.post(f"/v1/namespaces/{ns}/tables/t", json=body)
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["type"] == "CommitFailedException"
    listed = Counter(s.manifest_list.rsplit("/", 1)[0] for s in catalog.load_table(f"{ns}.victim").snapshots())
    assert len(listed) == 1  # and nothing was written next to the victim's list:
    if server.backend == "sqlite":
        directory = next(iter(listed)).removeprefix("file://")
        import os

        assert not [n for n in os.listdir(directory) if "rebased" in n]


_ = requests
