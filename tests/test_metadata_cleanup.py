"""Delete-after-commit in the background (catalog/commit/cleanup.py), as pure logic over stand-ins for
the ownership check and the file deletes: the commits of a busy table share one ownership check
and one batch delete,
every file they pushed out of the log that the table owns is deleted, and nothing else is."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from catalog.commit.cleanup import GATHER_SECONDS, MetadataCleanup


class Owning:
    """What the table owns: paths under ``root``; counts the checks."""

    def __init__(self, root: str) -> None:
        self.root, self.checks = root, 0

    def owned(self, doc: dict, entry_id: int):
        self.checks += 1
        return lambda path: path.startswith(self.root)


class Deleting:
    """Counts the batch calls: on S3 each is one DeleteObjects request."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.calls = 0
        self.lock = threading.Lock()

    def delete_many(self, locations: list[str]) -> None:
        with self.lock:
            self.calls += 1
            self.deleted.extend(locations)


def commit(entry_id: int, n: int, keep: int = 2, root: str = "s3://b/t/metadata") -> SimpleNamespace:
    """The n-th commit of a table whose log keeps ``keep`` files: its base and new metadata."""
    files = [f"{root}/{i:05d}.metadata.json" for i in range(n + 1)]
    base_log = [{"metadata-file": f} for f in files[max(0, n - 1 - keep) : n - 1]]
    new_log = [{"metadata-file": f} for f in files[max(0, n - keep) : n]]
    base = SimpleNamespace(data={"metadata-log": base_log}, location=files[n - 1])
    return SimpleNamespace(
        base=base, entry=SimpleNamespace(id=entry_id), new=SimpleNamespace(data={"metadata-log": new_log})
    )


def cleanup(owning: Owning, deleting: Deleting) -> MetadataCleanup:
    return MetadataCleanup(SimpleNamespace(metadata_delete_after_commit=True), deleting, owning)  # type: ignore[arg-type]


def wait_until(check, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_the_commits_of_a_busy_table_share_one_ownership_check() -> None:
    owning, deleting = Owning("s3://b/t/"), Deleting()
    c = cleanup(owning, deleting)
    for n in range(3, 43):  # 40 commits, each pushing one file out of a log of 2
        c.committed(commit(7, n))
    expected = [f"s3://b/t/metadata/{i:05d}.metadata.json" for i in range(0, 40)]
    wait_until(lambda: len(deleting.deleted) >= len(expected), 5 + GATHER_SECONDS)
    assert sorted(deleting.deleted) == expected
    assert owning.checks == 1
    assert deleting.calls == 1
    c.close()


def test_only_what_the_table_owns_is_deleted_and_a_closed_cleanup_deletes_nothing() -> None:
    owning, deleting = Owning("s3://b/other/"), Deleting()  # the table owns none of its old files
    c = cleanup(owning, deleting)
    for n in range(3, 6):
        c.committed(commit(1, n))
    wait_until(lambda: owning.checks == 1)
    assert deleting.deleted == []
    owning, deleting = Owning("s3://b/t/"), Deleting()
    c = cleanup(owning, deleting)
    c.committed(commit(1, 3))
    c.close()  # before the gathering wait ends
    time.sleep(GATHER_SECONDS + 0.2)
    assert deleting.deleted == [] and owning.checks == 0
