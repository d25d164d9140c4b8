"""Metadata files that fell out of a table's metadata log: found by listing its metadata directories.

Every commit writes a new ``NNNNN-<uuid>[.gz].metadata.json`` and the metadata log keeps the last
``write.metadata.previous-versions-max`` (100) of them. Only commits with
``write.metadata.delete-after-commit.enabled=true`` delete what falls out, and an expiry deletes
what its own commit took out; everything else stayed until orphan removal (72 h): a table committed
to once a second kept ~260,000 files. Snapshot expiry therefore ends with this step, on every run
(the scheduler runs expiry on a table whose pointer moved, at most hourly or every 1,000 commits:
exactly when such files pile up), with or without snapshots to expire. It costs one listing of the
metadata directories, small beside what an expiry already reads (every manifest list).

A file is stale, and deleted, only when all hold:

1. it lies directly in one of the table's metadata directories (``<location>/metadata`` and
   ``write.metadata.path``; ``directories``), and ``Ownership.owned`` accepts it;
2. it is not the current metadata file and not in the current metadata log;
3. its version (the ``NNNNN`` of its name) is at most the current file's, or it is older than
   ``CATALOG_MAINTENANCE_METADATA_FILE_AGE_SECONDS`` (600) measured from BEFORE the pointer was
   read. The version: a commit names its new file after the version of the pointer it expects plus
   one (``metadata_files.next_location``; the commit engine's CAS expects the very pointer the file
   was named after), so a file of version at most the current one's was written for a pointer that
   is no longer current, and its commit either landed (then it was current once, and is out of the
   log now) or lost its CAS: it can never become current. The age, for a file of a higher version
   or named otherwise: a commit writes its new file first and swaps the pointer after, so a file
   not yet in the log may be a commit in flight. A file older than the age that was not current
   or logged when the pointer was read could only become current through a commit that took
   longer than the age between its write and its swap (one request, bounded by seconds: storage
   calls time out after 10 s); every file a later commit puts into the log became current after
   the read, so it is younger than the age too. The margin also covers the storage's clock
   (``LastModified`` on S3) against the worker's;
4. its name is a metadata file's (``*.metadata.json``, ``*.gz.metadata.json`` too); nothing else in
   the directory (manifests, manifest lists, a ``version-hint.text``) is ever touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from catalog import errors
from catalog.locations import normalise
from catalog.storage.backends import StoredFile
from catalog.storage.metadata_files import version_of

SUFFIX = ".metadata.json"


def directories(metadata: dict[str, Any]) -> list[str]:
    """The table's metadata directories, normalised, each once: ``<location>/metadata`` and its
    ``write.metadata.path`` when set (where new metadata files go; older ones may still lie in the
    first)."""
    found = [normalise(metadata["location"].rstrip("/") + "/metadata")]
    custom = (metadata.get("properties") or {}).get("write.metadata.path")
    if custom:
        try:
            found.append(normalise(custom.rstrip("/")))
        except errors.IcebergError:
            pass
    return list(dict.fromkeys(found))


def is_metadata_name(name: str) -> bool:
    """``NNNNN-<uuid>.metadata.json``, ``<...>.gz.metadata.json``, ``v3.metadata.json``: a file name
    ending in ``.metadata.json`` with something before it."""
    return name.endswith(SUFFIX) and len(name) > len(SUFFIX) and not name.startswith(".")


def stale(
    listing: Iterable[StoredFile],
    directory: str,
    keep: set[str],
    older_than_ms: int,
    owned: Callable[[str], bool],
    current_version: int = -1,
) -> Iterator[StoredFile]:
    """The files of ``listing`` (of ``directory``, normalised) that are stale by rules 1-4 of the
    module docstring; ``keep``: the current file and the log's, normalised; ``current_version``: the
    current file's (``version_of``; -1: named otherwise, the age alone decides)."""
    for stored in listing:
        try:
            path = normalise(stored.location)
        except errors.IcebergError:
            continue
        parent, _, name = path.rpartition("/")
        if parent != directory or not is_metadata_name(name):
            continue
        if path in keep or not owned(path):
            continue
        superseded = current_version >= 0 and 0 <= version_of(name) <= current_version
        if superseded or stored.modified_ms < older_than_ms:
            yield stored


def kept(metadata: dict[str, Any], location: str) -> set[str]:
    """The current metadata file and every one in its log, normalised."""
    found = {normalise(location)}
    for entry in metadata.get("metadata-log") or []:
        try:
            found.add(normalise(entry["metadata-file"]))
        except (errors.IcebergError, KeyError, TypeError):
            continue
    return found
