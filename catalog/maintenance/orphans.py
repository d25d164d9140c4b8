"""Orphan files: files under a table's own locations that no metadata of the table references.

Referenced means: the current metadata file and every one in its metadata log, and, for every
snapshot the current metadata holds, its manifest list, its manifests, the data and delete files
they list (also those marked deleted: a snapshot still in the table may read them), and the
statistics and partition-statistics files. Each manifest is read once (snapshots share most of
them). Memory is the set of referenced paths; the listing is a stream, one directory or one S3 page
at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile, read_manifest_list

from catalog.locations import normalise
from catalog.storage.backends import Storage, StoredFile


class Referenced:
    """Every file a table's metadata references, normalised (``paths``), grown by ``add`` as the
    table moves on: manifest lists and manifests are immutable, so one read once is never read
    again, and a table under continuous commits costs each pass only what the commits added.
    Raises when a manifest list or manifest cannot be read: never a guess."""

    def __init__(self, io: FileIO) -> None:
        self.io = io
        self.paths: set[str] = set()
        self._lists: set[str] = set()
        self._manifests: set[str] = set()

    def add(self, metadata: dict[str, Any], metadata_location: str) -> set[str]:
        found = {metadata_location, *(e["metadata-file"] for e in metadata.get("metadata-log") or [])}
        manifests: dict[str, ManifestFile] = {}
        for snapshot in metadata.get("snapshots") or []:
            listing = snapshot.get("manifest-list")
            if listing and listing not in self._lists:
                found.add(listing)
                for manifest in read_manifest_list(self.io.new_input(listing)):
                    if manifest.manifest_path not in self._manifests:
                        manifests.setdefault(manifest.manifest_path, manifest)
                self._lists.add(listing)
            found.update(snapshot.get("manifests") or [])  # v1 snapshots may list manifests inline
        for path, manifest in manifests.items():
            found.add(path)
            for entry in manifest.fetch_manifest_entry(self.io, discard_deleted=False):
                found.add(entry.data_file.file_path)
            self._manifests.add(path)
        for key in ("statistics", "partition-statistics"):
            found.update(f["statistics-path"] for f in metadata.get(key) or [] if f.get("statistics-path"))
        self.paths.update(normalise(p) for p in found)
        return self.paths


@dataclass
class Orphans:
    files: list[StoredFile] = field(default_factory=list)
    kept_young: int = 0  # unreferenced but newer than the age limit (an in-flight writer's, perhaps)
    scanned: int = 0


def find(
    storage: Storage,
    prefixes: Iterable[str],
    known: set[str],
    owned: Any,
    older_than_ms: int,
    limit: int,
) -> Orphans:
    """Files under ``prefixes`` not in ``known``, older than ``older_than_ms`` and ``owned`` by the
    table (at most ``limit``; the next run takes the rest)."""
    found = Orphans()
    for stored in _unique(storage, prefixes):
        found.scanned += 1
        normal = normalise(stored.location)
        if normal in known or not owned(normal):
            continue
        if stored.modified_ms >= older_than_ms:
            found.kept_young += 1
            continue
        found.files.append(stored)
        if len(found.files) >= limit:
            break
    return found


def _unique(storage: Storage, prefixes: Iterable[str]) -> Iterator[StoredFile]:
    """The listing of each prefix, skipping prefixes inside one already listed."""
    chosen: list[str] = []
    for prefix in sorted({normalise(p).rstrip("/") for p in prefixes}, key=len):
        if any(prefix == c or prefix.startswith(c + "/") for c in chosen):
            continue
        chosen.append(prefix)
        yield from storage.listing(prefix)
