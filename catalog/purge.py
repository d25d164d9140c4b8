"""``purgeRequested``: delete every file reachable from a dropped table's metadata.

Like the reference implementation, this deletes what the metadata references (data and delete
files, manifests, manifest lists, statistics, previous and current metadata files), not the whole
directory: another table may have been registered or renamed onto files under the same prefix.
Runs after the catalog row is gone, so a failure here leaves orphan files, never a broken table.
"""

from __future__ import annotations

import logging

from pyiceberg.catalog import delete_data_files, delete_files
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.manifest import ManifestFile

from .files import MetadataFile
from .settings import Settings
from .storage import Storage

log = logging.getLogger("catalog.purge")


def client_io_properties(settings: Settings) -> dict[str, str]:
    """FileIO properties for reaching the warehouse storage (also advertised to clients)."""
    props: dict[str, str] = {}
    if settings.s3_endpoint:
        props["s3.endpoint"] = settings.s3_endpoint
    if settings.warehouse.startswith(("s3://", "s3a://")):
        props["s3.region"] = settings.s3_region
        props["client.region"] = settings.s3_region
        props["s3.path-style-access"] = str(settings.s3_path_style_access).lower()
    return props


def credential_properties(settings: Settings) -> dict[str, str]:
    """The server's own storage credentials, as FileIO properties (empty for a local warehouse)."""
    props = client_io_properties(settings)
    if settings.s3_access_key_id:
        props["s3.access-key-id"] = settings.s3_access_key_id
    if settings.s3_secret_access_key:
        props["s3.secret-access-key"] = settings.s3_secret_access_key
    return props


def file_io(settings: Settings, location: str) -> FileIO:
    return load_file_io(credential_properties(settings), location)


def delete_table_files(file: MetadataFile, storage: Storage, settings: Settings) -> None:
    metadata = file.metadata
    io = file_io(settings, file.location)
    manifests: list[ManifestFile] = []
    manifest_lists: set[str] = set()
    for snapshot in metadata.snapshots:
        manifest_lists.add(snapshot.manifest_list)
        try:
            manifests.extend(snapshot.manifests(io))
        except Exception:  # noqa: BLE001 - a missing manifest list must not stop the rest
            log.warning("purge: cannot read manifest list %s", snapshot.manifest_list)
    unique = {m.manifest_path: m for m in manifests}
    delete_data_files(io, list(unique.values()))
    delete_files(io, set(unique), "manifest")
    delete_files(io, manifest_lists, "manifest list")
    stats = {s.statistics_path for s in metadata.statistics} | {
        s.statistics_path for s in metadata.partition_statistics
    }
    delete_files(io, stats, "statistics")
    for location in {entry.metadata_file for entry in metadata.metadata_log} | {file.location}:
        try:
            storage.delete(location)
        except Exception:  # noqa: BLE001
            log.warning("purge: cannot delete metadata file %s", location)
