"""Table maintenance says what it did and why it did nothing, and an operator can try a policy now.

A real server at the default writer grace (1 h) and compaction quiet period (300 s), real
pyiceberg writers, the real CLI: a run that does nothing says which rule held it back, in the task's
JSON and in the CLI's table; a dry run says what it would do in the job's own terms; a run with
``--writer-grace 0`` (admin only) applies the table's policy at once, and the table shows it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from catalog.__main__ import main
from catalog.cli.maintenance import _what
from catalog.maintenance import explain
from tests.support import CARE_ENV, Server, as_, auth_env, run_care, start_server, token

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
AT_DEFAULTS = {k: v for k, v in CARE_ENV.items() if k != "CATALOG_MAINTENANCE_WRITER_GRACE_SECONDS"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Jobs at the server's default writer grace and quiet period, run only when asked."""
    srv = start_server(tmp_path_factory.mktemp("explained"), "sqlite", AT_DEFAULTS)
    yield srv
    srv.stop()


def _appended(server: Server, name: str, appends: int, **props: str):  # noqa: ANN202
    catalog = server.catalog()
    if ("care",) not in catalog.list_namespaces():
        catalog.create_namespace("care")
    table = catalog.create_table(f"care.{name}", SCHEMA, properties=props)
    for i in range(appends):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    return catalog.load_table(f"care.{name}")


def _cli(capsys: pytest.CaptureFixture[str], server: Server, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main([*argv, "--uri", server.url])
    return status, capsys.readouterr().out


def test_expiry_says_the_writer_grace_held_its_snapshots_and_a_run_without_grace_expires_them(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _appended(server, "expiring", 4, **{"history.expire.max-snapshot-age-ms": "1"})
    assert len(table.metadata.snapshots) == 4

    (task,) = run_care(server, "care", "expiring", kinds=["expire-snapshots"])
    result = task["result"]
    assert task["state"] == "done" and result["expired-snapshots-count"] == 0, task
    assert result["kept-snapshots"] == {"writer-grace": 3, "ref-head": 1}, result
    assert result["summary"] == "0 snapshots expired: 3 held by the writer grace (1 h), 1 the head of a branch or tag"
    assert len(server.catalog().load_table("care.expiring").metadata.snapshots) == 4

    # The CLI's table says it too: the same summary in the result column, and in --json.
    status, out = _cli(capsys, server, "maintenance", "history", "care.expiring")
    assert status == 0 and "3 held by the writer grace (1 h)" in out, out
    status, out = _cli(capsys, server, "maintenance", "history", "care.expiring", "--json")
    assert json.loads(out)["tasks"][0]["result"]["summary"] == result["summary"]

    # A dry run without grace says what would go, and removes nothing.
    status, out = _cli(
        capsys, server, "maintenance", "run", "care.expiring", "--kind", "expire-snapshots",
        "--dry-run", "--writer-grace", "0", "--wait", "--json",
    )  # fmt: skip
    (dry,) = json.loads(out)["tasks"]
    assert status == 0 and dry["result"]["summary"].startswith("3 snapshots would expire, "), dry
    assert len(server.catalog().load_table("care.expiring").metadata.snapshots) == 4

    # The run without grace applies the table's policy now, without a restart.
    status, out = _cli(
        capsys,
        server,
        "maintenance",
        "run",
        "care.expiring",
        "--kind",
        "expire-snapshots",
        "--writer-grace",
        "0",
        "--wait",
    )
    assert status == 0 and "3 snapshots expired" in out, out
    after = server.catalog().load_table("care.expiring")
    assert len(after.metadata.snapshots) == 1
    assert after.scan().to_arrow().num_rows == 4


def test_compaction_says_the_quiet_period_held_its_files_and_a_dry_run_says_what_it_would_merge(
    server: Server,
) -> None:
    _appended(server, "compacting", 6)

    (task,) = run_care(server, "care", "compacting", kinds=["rewrite-data-files"])
    assert task["result"]["left"] == {"added-within-quiet-period": 6}, task
    assert task["result"]["summary"] == "0 data files rewritten: 6 younger than the quiet period (300 s)"

    (dry,) = run_care(
        server, "care", "compacting", kinds=["rewrite-data-files"], **{"dry-run": True, "writer-grace-seconds": 0}
    )
    assert dry["result"]["summary"].startswith("would rewrite 6 data files ("), dry
    assert dry["result"]["summary"].endswith(") into about 1"), dry

    (done,) = run_care(server, "care", "compacting", kinds=["rewrite-data-files"], **{"writer-grace-seconds": 0})
    assert done["result"]["summary"] == "6 data files compacted into 1", done
    table = server.catalog().load_table("care.compacting")
    assert table.current_snapshot().summary.operation.value == "replace"
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(6))

    (again,) = run_care(server, "care", "compacting", kinds=["rewrite-data-files"], **{"writer-grace-seconds": 0})
    assert again["result"]["summary"] == (
        "0 data files rewritten: 1 in partitions with too few small files to merge"
    ), again


def test_manifest_rewrite_says_what_it_would_merge_and_why_a_second_run_merges_nothing(server: Server) -> None:
    _appended(server, "manifests", 5)

    (dry,) = run_care(server, "care", "manifests", kinds=["rewrite-manifests"], **{"dry-run": True})
    assert dry["result"]["summary"] == "would merge 5 manifests into 1", dry
    (done,) = run_care(server, "care", "manifests", kinds=["rewrite-manifests"])
    assert done["result"]["summary"] == "5 manifests merged into 1", done
    (again,) = run_care(server, "care", "manifests", kinds=["rewrite-manifests"])
    assert again["result"]["summary"] == "0 manifests merged: the table has one manifest", again


def test_orphan_removal_says_what_it_scanned_and_kept(server: Server) -> None:
    table = _appended(server, "orphans", 1)
    stray = Path(table.location().removeprefix("file://")) / "data" / "stray.parquet"
    stray.write_bytes(b"not referenced by anything")

    (task,) = run_care(server, "care", "orphans", kinds=["remove-orphans"])
    result = task["result"]
    assert result["kept-younger-than-age"] == 1 and result["orphans"] == 0, result
    assert result["summary"] == (
        f"0 orphan files deleted: 1 unreferenced kept, younger than the orphan age (3 d), "
        f"of {result['scanned']} files scanned"
    )
    assert stray.exists()


@pytest.mark.parametrize("grace", [-1, "0", True, 31 * 86400, [0]])
def test_a_malformed_writer_grace_is_refused_before_anything_is_queued(server: Server, grace: object) -> None:
    _appended(server, f"malformed_{abs(hash(repr(grace)))}", 0)
    url = f"{server.url}/management/v1/maintenance/tables/care/malformed_{abs(hash(repr(grace)))}"
    resp = requests.post(url, json={"kinds": ["expire-snapshots"], "writer-grace-seconds": grace}, timeout=10)
    assert resp.status_code == 400 and "writer-grace-seconds" in resp.json()["error"]["message"], resp.text
    listed = requests.get(f"{server.url}/management/v1/maintenance/tasks", params={"state": "queued"}, timeout=10)
    assert all(not t["table"].startswith("malformed_") for t in listed.json()["tasks"])


@pytest.mark.slow
def test_only_an_admin_of_the_table_sets_the_writer_grace(tmp_path: Path) -> None:
    srv = start_server(tmp_path, "sqlite", {**AT_DEFAULTS, **auth_env(tmp_path)})
    try:
        admin = as_(srv, "admin")
        admin.create_namespace("g")
        admin.create_table("g.t", SCHEMA)
        admin_h = {"Authorization": f"Bearer {token(srv, 'admin')}"}
        grant = {"principal": "client:analyst", "privileges": ["alter"], "on": {"table": ["g", "t"]}}
        assert (
            requests.post(f"{srv.url}/management/v1/grants", json=grant, headers=admin_h, timeout=10).status_code == 201
        )
        alter_h = {"Authorization": f"Bearer {token(srv, 'analyst')}"}
        url = f"{srv.url}/management/v1/maintenance/tables/g/t"
        graced = {"kinds": ["expire-snapshots"], "writer-grace-seconds": 0}
        refused = requests.post(url, json=graced, headers=alter_h, timeout=10)
        assert refused.status_code == 403, refused.text
        listed = requests.get(f"{srv.url}/management/v1/maintenance/tasks", headers=admin_h, timeout=10).json()
        assert listed["tasks"] == []  # nothing was queued by the refused run
        assert requests.post(url, json={"kinds": ["expire-snapshots"]}, headers=alter_h, timeout=10).status_code == 202
        assert requests.post(url, json=graced, headers=admin_h, timeout=10).status_code == 202
    finally:
        srv.stop()


# -- the wording itself (pure) ---------------------------------------------------------------------


def test_no_result_cell_is_blank_whatever_the_tasks_state() -> None:
    base = {"last-error": None, "result": None}
    assert _what({**base, "state": "queued"}) == "waiting for a worker"
    assert _what({**base, "state": "queued", "created": False}) == "already queued (with its own options)"
    assert _what({**base, "state": "queued", "last-error": "S3 is down"}).endswith("last attempt failed: S3 is down")
    assert _what({**base, "state": "running"}) == "running"
    assert _what({**base, "state": "failed", "last-error": "boom"}) == "error: boom"
    assert _what({**base, "state": "done", "result": {}}) == "done"
    assert _what({**base, "state": "done", "result": {"summary": "5 manifests merged into 1"}}) == (
        "5 manifests merged into 1"
    )


def test_every_kind_words_its_zero_with_a_reason() -> None:
    cases = {
        "expire-snapshots": {
            "expired-snapshots": [],
            "removed-refs": [],
            "deleted-files": 0,
            "kept-snapshots": {"younger-than-max-age": 12, "ref-head": 1},
            "max-snapshot-age-ms": 5 * 86400 * 1000,
            "writer-grace-seconds": 3600.0,
        },
        "rewrite-data-files": {"engine": "in-process", "data-files-before": 3, "left": {"next-run": 3}},
        "rewrite-manifests": {"manifests-before": 4, "manifests-replaced": 0, "manifests-created": 0},
        "remove-orphans": {"scanned": 10, "orphans": 0, "bytes": 0, "kept-younger-than-age": 0, "deleted-files": 0},
    }
    words = {kind: explain.summary(kind, result) for kind, result in cases.items()}
    assert words == {
        "expire-snapshots": "0 snapshots expired: 12 younger than the maximum snapshot age (5 d), "
        "1 the head of a branch or tag",
        "rewrite-data-files": "0 data files rewritten: 3 beyond this run's byte budget (the next run takes them)",
        "rewrite-manifests": "0 manifests merged: the 4 manifests are already one per partition spec and content",
        "remove-orphans": "0 orphan files deleted: the 10 files scanned are all referenced",
    }
    assert explain.summary("purge", {"skipped": "the table was undropped"}) == "skipped: the table was undropped"
