"""``purgeRequested``: which files of a dropped table a purge deletes, and in what order.

Like the reference implementation, a purge deletes what the metadata references (data and delete
files, manifests, manifest lists, statistics, previous and current metadata files), not the whole
directory. Unlike it, every path is checked first: the metadata is the client's word, and a
snapshot's manifest list or a statistics file may name any path, another table's files included.
Only paths the caller's ``owned`` predicate accepts (the table's own locations, see
``ownership.Ownership.owned``) are read or deleted; the rest are skipped and logged.

The order makes a purge safe to repeat after a crash at any point (the maintenance queue runs it
again): the data and delete files of each manifest, then the manifests, then the manifest lists,
then statistics and old metadata files; the caller then sweeps what is left under the table's
location and deletes the current metadata file last. A file already gone is one an earlier attempt
deleted after everything it leads to; any other read error stops the purge before it deletes what
it could not read through. Memory holds the manifest paths, and one manifest's data files at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyiceberg.io import S3_CONNECT_TIMEOUT, S3_REQUEST_TIMEOUT, FileIO, load_file_io
from pyiceberg.manifest import ManifestFile, read_manifest_list

from catalog.settings import StorageSettings
from catalog.storage import vending
from catalog.storage.s3 import s3_keys

log = logging.getLogger("catalog.purge")


def server_io_properties(settings: StorageSettings) -> dict[str, str]:
    """The server's own FileIO properties (purges): its endpoint and its own storage credentials.
    Never sent to a client."""
    if settings.storage_kind == "azure":
        return _azure_server_properties(settings)
    if settings.storage_kind == "gcs":
        from catalog.storage.gcs import shared_token

        token, expires = shared_token(settings)
        props = {"gcs.oauth2.token": token, "gcs.oauth2.token-expires-at": str(int(expires * 1000))}
        if settings.gcs_endpoint:
            props["gcs.service.host"] = settings.gcs_endpoint
        return props
    props = vending.io_properties(settings, settings.s3_endpoint, settings.s3_path_style_access)
    # On S3 without keys the FileIO takes its default chain: only where the warehouse allows it.
    keys = (
        s3_keys(settings)
        if settings.storage_kind == "s3"
        else {"aws_access_key_id": settings.s3_access_key_id, "aws_secret_access_key": settings.s3_secret_access_key}
    )
    if keys["aws_access_key_id"]:
        props["s3.access-key-id"] = keys["aws_access_key_id"]
    if keys["aws_secret_access_key"]:
        props["s3.secret-access-key"] = keys["aws_secret_access_key"]
    return props


def _azure_server_properties(settings: StorageSettings) -> dict[str, str]:
    """pyiceberg's fsspec FileIO (adlfs) on the account with the server's key, at its endpoint."""
    from catalog.storage.azure import account_of, blob_endpoint

    account = account_of(settings)[0]
    key = settings.azure_account_key or ""
    endpoint = blob_endpoint(settings)
    scheme = endpoint.partition("://")[0]
    return {
        "adls.account-name": account,
        "adls.account-key": key,
        "adls.connection-string": (
            f"DefaultEndpointsProtocol={scheme};AccountName={account};AccountKey={key};BlobEndpoint={endpoint}"
        ),
    }


def file_io(settings: StorageSettings, location: str) -> FileIO:
    props = {
        **server_io_properties(settings),
        S3_CONNECT_TIMEOUT: str(min(settings.storage_timeout_seconds, 5.0)),
        S3_REQUEST_TIMEOUT: str(settings.storage_timeout_seconds),
    }
    return load_file_io(props, location)


def table_files(
    metadata: dict[str, Any], location: str, owned: Callable[[str], bool], io: FileIO, data_files: bool = True
) -> Iterator[tuple[str, list[str]]]:
    """(kind, paths) batches in the order a purge deletes them (see above), all but the current
    metadata file; only owned paths. Paths skipped for lying outside the table are logged once.
    Without ``data_files`` (the table's ``gc.enabled`` is false: its data files may be another
    table's too, as Java's purge assumes), only the metadata: manifests, lists, statistics."""
    skipped: list[str] = []
    mine = _Filter(owned, skipped)
    manifests: dict[str, ManifestFile] = {}
    manifest_lists = mine({s["manifest-list"] for s in metadata.get("snapshots") or [] if "manifest-list" in s})
    for manifest_list in manifest_lists:
        try:
            for manifest in read_manifest_list(io.new_input(manifest_list)):
                manifests.setdefault(manifest.manifest_path, manifest)
        except FileNotFoundError:  # an earlier attempt deleted it, after its manifests
            continue
    own_manifests = mine(manifests)
    for path in own_manifests if data_files else ():
        try:
            data = {e.data_file.file_path for e in manifests[path].fetch_manifest_entry(io, discard_deleted=False)}
        except FileNotFoundError:  # an earlier attempt deleted it, after its data files
            continue
        yield "data file", mine(data)
    yield "manifest", own_manifests
    yield "manifest list", manifest_lists
    statistics = {s["statistics-path"] for s in metadata.get("statistics") or []} | {
        s["statistics-path"] for s in metadata.get("partition-statistics") or []
    }
    yield "statistics file", mine(statistics)
    yield "metadata file", mine({e["metadata-file"] for e in metadata.get("metadata-log") or []} - {location})
    if skipped:
        log.warning(
            "purge of %s skipped %d path(s) outside the table's own location, e.g. %s",
            metadata.get("location"),
            len(skipped),
            sorted(set(skipped))[:3],
        )


class _Filter:
    def __init__(self, owned: Callable[[str], bool], skipped: list[str]) -> None:
        self.owned, self.skipped = owned, skipped

    def __call__(self, paths: Iterable[str]) -> list[str]:
        kept = []
        for path in paths:
            (kept if self.owned(path) else self.skipped).append(path)
        return sorted(kept)
