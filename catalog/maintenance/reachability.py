"""Which files an expiry left unreachable: Java's ``org.apache.iceberg.ReachableFileCleanup`` (with
``FileCleanupStrategy``), planned from the table metadata before and after the expiry commit.

As Java decides it:

* manifest lists: those of the snapshots ``before`` has and ``after`` has not;
* manifests: those the removed snapshots' manifest lists name, less any a remaining snapshot's
  manifest list names;
* data and delete files: those the manifests above name, less any file live (added or existing) in a
  manifest of a remaining snapshot. A file only ever named as deleted in the removed manifests is
  unreachable too (Java reads live entries there; the result differs only for a file an earlier
  clean-up missed, which nothing remaining can reach);
* statistics and partition-statistics files: those ``before`` lists and ``after`` does not.

Reachability from every remaining snapshot decides, never a guess: a manifest list or manifest that
cannot be read raises ``ReachabilityUnknown`` (the caller retries later); Java, failing to read a remaining
manifest, logs it and still deletes the manifests and manifest lists it had chosen (no data files).
Each manifest list and manifest is read once, ``READERS`` at a time; what is kept is sets of paths,
a few manifests' entries decoded at a time. Nothing is filtered by location here: the caller confines its deletes to the
table's own locations.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestContent, ManifestFile, read_manifest_list

# Manifest lists and manifests read at once (object stores answer one GET in tens of ms: read one at
# a time, a table of thousands of snapshots took minutes on S3); the storage's own bound holds too.
READERS = 8
READ_BATCH = 64  # remaining manifests read per round while some candidate file may still be live


class ReachabilityUnknown(Exception):
    """A manifest list or manifest could not be read: nothing may be deleted on this plan."""

    def __init__(self, path: str, cause: BaseException) -> None:
        super().__init__(f"Cannot read {path}: {type(cause).__name__}")
        self.path = path


@dataclass(frozen=True)
class Unreachable:
    """Files reachable before an expiry and from nothing after it, each tuple sorted."""

    manifest_lists: tuple[str, ...]
    manifests: tuple[str, ...]
    content_files: tuple[str, ...]  # data and delete files
    statistics: tuple[str, ...]  # statistics and partition-statistics files no longer listed

    def all(self) -> list[str]:
        """Every file, content files first and manifest lists last (Java's order of deletion: a crash
        part way leaves metadata that still names what is left, never a list naming a gone file)."""
        return [*self.content_files, *self.manifests, *self.manifest_lists, *self.statistics]

    def __len__(self) -> int:
        return len(self.content_files) + len(self.manifests) + len(self.manifest_lists) + len(self.statistics)


def after_expiry(before: dict, after: dict, io: FileIO) -> Unreachable:
    """Files reachable from ``before``'s snapshots and from none of ``after``'s: reachability from every
    remaining snapshot decides, never a guess. Raises ``ReachabilityUnknown``."""
    remaining_ids = {s["snapshot-id"] for s in after.get("snapshots") or []}
    remaining = [s for s in after.get("snapshots") or []]
    removed = [s for s in before.get("snapshots") or [] if s["snapshot-id"] not in remaining_ids]

    still_listed = {s["manifest-list"] for s in remaining if s.get("manifest-list")}
    manifest_lists = {s["manifest-list"] for s in removed if s.get("manifest-list")} - still_listed

    # Java reads the removed snapshots' manifests, then drops every one a remaining snapshot lists.
    with ThreadPoolExecutor(max_workers=READERS, thread_name_prefix="maintenance-read") as pool:
        candidates = _union(pool.map(lambda snapshot: _manifest_paths(snapshot, io), _by_list(removed)))
        current = (
            _union(pool.map(lambda snapshot: _manifest_paths(snapshot, io), _by_list(remaining)))
            if candidates
            else set()
        )
        gone = candidates - current

        content = _union(pool.map(lambda path: _file_paths(path, io, live_only=False), sorted(gone)))
        pending = sorted(current) if content else []
        for start in range(0, len(pending), READ_BATCH):  # a batch at a time: most often few are needed
            batch = pending[start : start + READ_BATCH]
            for paths in pool.map(lambda path: _file_paths(path, io, live_only=True), batch):
                content.difference_update(paths)
            if not content:
                break

    statistics = _statistics(before) - _statistics(after)
    return Unreachable(
        manifest_lists=tuple(sorted(manifest_lists)),
        manifests=tuple(sorted(gone)),
        content_files=tuple(sorted(content)),
        statistics=tuple(sorted(statistics)),
    )


def _by_list(snapshots: list[dict]) -> list[dict]:
    """The snapshots with one per manifest list (snapshots sharing a list are read once)."""
    seen: dict[object, dict] = {}
    for snapshot in snapshots:
        seen.setdefault(snapshot.get("manifest-list") or id(snapshot), snapshot)
    return list(seen.values())


def _union(parts: Iterable[list[str]]) -> set[str]:
    found: set[str] = set()
    for part in parts:
        found.update(part)
    return found


def _manifest_paths(snapshot: dict, io: FileIO) -> list[str]:
    """The manifests a snapshot lists (``FileCleanupStrategy.readManifests``): a v1 snapshot without a
    manifest list names its manifests in ``manifests``."""
    location = snapshot.get("manifest-list")
    if not location:
        return list(snapshot.get("manifests") or [])
    try:
        return [manifest.manifest_path for manifest in read_manifest_list(io.new_input(location))]
    except Exception as exc:  # any failure to read: nothing is known, so nothing may go
        raise ReachabilityUnknown(location, exc) from exc


def _file_paths(manifest_path: str, io: FileIO, live_only: bool) -> list[str]:
    """The data and delete files a manifest names; ``live_only``: added or existing, not deleted. Only
    the path is kept of the manifest list's record (the entries' inherited fields are not used)."""
    manifest = ManifestFile.from_args(
        manifest_path=manifest_path,
        manifest_length=0,
        partition_spec_id=0,
        content=ManifestContent.DATA,
        sequence_number=0,
        min_sequence_number=0,
        added_snapshot_id=None,
    )
    try:
        entries = manifest.fetch_manifest_entry(io, discard_deleted=live_only)
    except Exception as exc:
        raise ReachabilityUnknown(manifest_path, exc) from exc
    return [entry.data_file.file_path for entry in entries]


def _statistics(metadata: dict) -> set[str]:
    files = [*(metadata.get("statistics") or []), *(metadata.get("partition-statistics") or [])]
    return {f["statistics-path"] for f in files if f.get("statistics-path")}
