"""What every store shares: the location policy, the read cap, the storage slots, the not-found
error, the listing's entries and the User-Agent marker (``backends``, ``azure``, ``gcs``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from catalog import errors, tracing
from catalog.locations import Locations
from catalog.settings import StorageSettings

# Marks the server's own S3 and STS requests (the User-Agent's extra part) in the store's logs.
USER_AGENT = "iceberg-catalog"


@dataclass(frozen=True, slots=True)
class StoredFile:
    location: str  # in the form the table's metadata uses (file:///..., s3://bucket/key, abfss://..., gs://...)
    modified_ms: int
    size: int


class Bounds:
    """What every store shares: the policy, the read cap and the slots."""

    def __init__(self, settings: StorageSettings, root: str) -> None:
        self.locations = Locations(root, settings.allowed_location_list)
        self.max_bytes = settings.max_metadata_file_bytes
        self._slots = threading.BoundedSemaphore(settings.storage_concurrency)
        self._wait = settings.storage_timeout_seconds

    @contextmanager
    def _slot(self) -> Iterator[None]:
        """One storage call: a slot of the concurrency bound (and a ``storage`` span when traced)."""
        with tracing.span("storage"):
            if not self._slots.acquire(timeout=self._wait):
                raise errors.ServiceUnavailable("Storage is busy: too many storage calls in flight, retry later")
            try:
                yield
            finally:
                self._slots.release()

    def delete(self, location: str) -> None:
        raise NotImplementedError

    def delete_many(self, locations: Iterable[str]) -> None:
        """Delete each of ``locations`` (a missing one is no error); raise on the first failure. A
        store with a batch call (S3's DeleteObjects) overrides this."""
        for location in locations:
            self.delete(location)

    def _cap(self, limit: int | None) -> int:
        """The most bytes a read returns: ``limit`` (a data file compaction reads) or the metadata cap."""
        return self.max_bytes if limit is None else limit

    def _too_large(self, location: str, size: int, limit: int | None = None) -> errors.IcebergError:
        if limit is not None:  # a data file read by compaction, under its own bound
            return errors.BadRequest(f"File {location} is {size} bytes, over the limit of {limit}")
        return errors.BadRequest(
            f"Metadata file {location} is {size} bytes, over the limit of {self.max_bytes} "
            "(CATALOG_MAX_METADATA_FILE_BYTES)"
        )


def not_found(location: str) -> errors.NotFound:
    return errors.NotFound(f"Metadata file does not exist or cannot be read: {location}")
