"""``purgeRequested``: delete the files of a dropped table that are the table's own.

Like the reference implementation, this deletes what the metadata references (data and delete
files, manifests, manifest lists, statistics, previous and current metadata files), not the whole
directory. Unlike it, every path is checked first: the metadata is the client's word, and a
snapshot's manifest list or a statistics file may name any path, another table's files included.
Only paths the caller's ``owned`` predicate accepts (the table's own locations, see
``ownership.Ownership.owned``) are read or deleted; the rest are skipped and logged. Runs after the
catalog row is gone, so a failure here leaves orphan files, never a broken table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from pyiceberg.io import S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, FileIO, load_file_io
from pyiceberg.manifest import ManifestFile, read_manifest_list

from catalog.settings import Settings
from catalog.storage import vending
from catalog.storage.metadata_files import MetadataFile, MetadataFiles

log = logging.getLogger("catalog.purge")


def server_io_properties(settings: Settings) -> dict[str, str]:
    """The server's own FileIO properties (purges): its endpoint and its own storage credentials.
    Never sent to a client."""
    props = vending.io_properties(settings, settings.s3_endpoint, settings.s3_path_style_access)
    if settings.s3_access_key_id:
        props["s3.access-key-id"] = settings.s3_access_key_id
    if settings.s3_secret_access_key:
        props["s3.secret-access-key"] = settings.s3_secret_access_key
    return props


def file_io(settings: Settings, location: str) -> FileIO:
    props = {
        **server_io_properties(settings),
        S3_CONNECT_TIMEOUT: str(min(settings.storage_timeout_seconds, 5.0)),
        S3_REQUEST_TIMEOUT: str(settings.storage_timeout_seconds),
    }
    return load_file_io(props, location)


def delete_table_files(
    file: MetadataFile, owned: Callable[[str], bool], files: MetadataFiles, settings: Settings
) -> None:
    """Delete every file of ``file``'s table that ``owned`` accepts; skip and log the others.
    Deletes go through ``files``, so no deleted metadata file stays in its cache."""
    metadata = file.data
    io = file_io(settings, file.location)
    skipped: list[str] = []
    mine = _Filter(owned, skipped)
    manifests: dict[str, ManifestFile] = {}
    manifest_lists = mine({s["manifest-list"] for s in metadata.get("snapshots") or [] if "manifest-list" in s})
    for manifest_list in manifest_lists:
        try:
            for manifest in read_manifest_list(io.new_input(manifest_list)):
                manifests.setdefault(manifest.manifest_path, manifest)
        except Exception:  # noqa: BLE001 - a missing manifest list must not stop the rest
            log.warning("purge: cannot read manifest list %s", manifest_list)
    data: set[str] = set()
    for path in mine(manifests):
        try:
            data.update(e.data_file.file_path for e in manifests[path].fetch_manifest_entry(io, discard_deleted=False))
        except Exception:  # noqa: BLE001
            log.warning("purge: cannot read manifest %s", path)
    statistics = {s["statistics-path"] for s in metadata.get("statistics") or []} | {
        s["statistics-path"] for s in metadata.get("partition-statistics") or []
    }
    metadata_files = {entry["metadata-file"] for entry in metadata.get("metadata-log") or []} | {file.location}
    for kind, paths in (
        ("data file", mine(data)),
        ("manifest", mine(manifests)),
        ("manifest list", manifest_lists),
        ("statistics file", mine(statistics)),
        ("metadata file", mine(metadata_files)),
    ):
        _delete(files, kind, paths)
    if skipped:
        log.warning(
            "purge of %s skipped %d path(s) outside the table's own location, e.g. %s",
            metadata.get("location"),
            len(skipped),
            sorted(skipped)[:3],
        )


class _Filter:
    def __init__(self, owned: Callable[[str], bool], skipped: list[str]) -> None:
        self.owned, self.skipped = owned, skipped

    def __call__(self, paths: Iterable[str]) -> list[str]:
        kept = []
        for path in paths:
            (kept if self.owned(path) else self.skipped).append(path)
        return sorted(kept)


def _delete(files: MetadataFiles, kind: str, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            files.delete(path)
        except Exception as e:  # noqa: BLE001 - keep going: delete as much as possible
            log.warning("purge: cannot delete %s %s: %s", kind, path, getattr(e, "message", e))
