"""Metadata files: read (parsed once, cached by location) and written create-only.

A metadata file never changes after it is written, so a cache keyed by location is always right and
never needs invalidation; it only needs a size bound, in bytes (``metadata_cache_bytes``). A file
a commit of this server moves its table past leaves it at once (``superseded``).

What the bound counts: each cached file is charged ``COST_PER_JSON_BYTE`` times its JSON size. The
JSON is all that is known when a file is cached, but a file may later carry its parsed document
(commits parse it; loads serve the JSON as is), the element offsets of a file this server wrote, and
its refs-only JSON. Measured with tracemalloc on a 10,000-snapshot file (5.7 MB of JSON): the parsed
document (orjson's dicts and lists) costs 3.5x the JSON, the offsets 0.06x, the refs-only copy at
most 0.5x; with the JSON itself, about 5x. The charge of 6x bounds the worst case (every entry
parsed); a cache of unparsed files holds less memory than its gauge says, never more.
"""

from __future__ import annotations

import gzip
import re
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import orjson

from catalog import errors
from catalog.metadata import encoding
from catalog.metadata.encoding import Dumped
from catalog.storage.backends import Storage


@dataclass(slots=True)
class MetadataFile:
    """One metadata file (a table's or a view's): its JSON as stored (decompressed) and, on demand,
    the parsed document, which is never modified (commits build new documents)."""

    location: str
    raw: bytes
    _data: dict[str, Any] | None = field(default=None, repr=False)
    _refs: bytes | None = field(default=None, repr=False)
    # Set on files this server wrote: where each element's JSON is, for the next commit's dump to copy.
    dumped: Dumped | None = field(default=None, repr=False)

    @property
    def data(self) -> dict[str, Any]:
        if self._data is None:
            try:
                data = orjson.loads(self.raw)
            except orjson.JSONDecodeError as e:  # the position only: never the file's content
                raise errors.BadRequest(f"Invalid metadata file {self.location}: not JSON (at byte {e.pos})") from e
            if not isinstance(data, dict):
                raise errors.BadRequest(f"Invalid metadata file {self.location}: not a JSON object")
            self._data = data
        return self._data

    @property
    def refs_only(self) -> bytes:
        """The JSON with only the snapshots that refs point at (``snapshots=refs`` loads), made once."""
        if self._refs is None:
            data = self.data
            keep = {ref.get("snapshot-id") for ref in (data.get("refs") or {}).values() if isinstance(ref, dict)}
            snapshots = [s for s in data.get("snapshots") or [] if s.get("snapshot-id") in keep]
            self._refs = orjson.dumps({**data, "snapshots": snapshots})
        return self._refs


# Bytes of memory a cached file may hold per byte of its JSON (see the module docstring).
COST_PER_JSON_BYTE = 6


class MetadataFiles:
    """Reads and writes metadata files; keeps the most recently used ones in memory, LRU within
    ``cache_bytes`` (counted as ``COST_PER_JSON_BYTE`` x JSON size). ``cache_bytes=0``: no cache."""

    def __init__(self, storage: Storage, cache_bytes: int) -> None:
        self.storage = storage
        self._cache: OrderedDict[str, MetadataFile] = OrderedDict()
        self._budget = cache_bytes
        self.cached_bytes = 0  # what the entries in ``_cache`` are charged, always <= the budget
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def cached(self, location: str) -> MetadataFile | None:
        """The file if it is in memory (no I/O), else None."""
        with self._lock:
            cached = self._cache.get(location)
            if cached is not None:
                self._cache.move_to_end(location)
                self.hits += 1
            return cached

    def read(self, location: str) -> MetadataFile:
        cached = self.cached(location)
        if cached is not None:
            return cached
        with self._lock:
            self.misses += 1
        raw = self.storage.read(location)
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return self._remember(MetadataFile(location, raw))

    def write(self, location: str, doc: dict[str, Any], base: MetadataFile | None = None) -> MetadataFile:
        """Write a new metadata file; never overwrites (``FileExistsError``). Gzipped when its name
        says so (``next_location``).

        ``base``: the file ``doc`` was derived from; the JSON of the elements they share (snapshots,
        log entries, schemas...) is copied from its dump instead of serialised again.
        """
        written, stored = self.prepare(location, doc, base)
        self.storage.write_new(location, stored)
        return written

    def prepare(
        self, location: str, doc: dict[str, Any], base: MetadataFile | None = None
    ) -> tuple[MetadataFile, bytes]:
        """``write`` without the write: the file, and the bytes to store at its location (gzipped
        when its name says so); the caller writes them with ``storage.write_new``."""
        dumped = encoding.dump(doc, base.dumped if base is not None else None)
        raw = dumped.raw
        stored = gzip.compress(raw) if location.endswith(".gz.metadata.json") else raw
        return MetadataFile(location, raw, doc, dumped=dumped), stored

    def remember(self, written: MetadataFile) -> None:
        """Cache a file once it is known to be committed (an uncommitted file is usually deleted)."""
        self._remember(written)

    def superseded(self, file: MetadataFile) -> None:
        """A file a commit has just moved past: out of the cache. Loads and commits want a table's
        current file; the superseded one, parsed document and all, would stay until evicted, and
        on a server with hot writers the cache filled with them, pushing other tables' current
        files out (measured: 16 writers over 16 tables filled the 512 MiB budget within 20 s; with
        this, the cache held 2.9 MB, the 16 current files). A reader that still asks for it reads
        the file again."""
        self._forget(file.location)

    def delete(self, location: str) -> None:
        self._forget(location)
        self.storage.delete(location)

    def delete_many(self, locations: list[str]) -> None:
        for location in locations:
            self._forget(location)
        self.storage.delete_many(locations)

    def _forget(self, location: str) -> None:
        with self._lock:
            dropped = self._cache.pop(location, None)
            if dropped is not None:
                self.cached_bytes -= _cost(dropped)

    def _remember(self, file: MetadataFile) -> MetadataFile:
        cost = _cost(file)
        if cost > self._budget:  # larger than the whole budget (or caching is off): not cached
            return file
        with self._lock:
            previous = self._cache.pop(file.location, None)
            if previous is not None:
                self.cached_bytes -= _cost(previous)
            while self._cache and self.cached_bytes + cost > self._budget:
                _, evicted = self._cache.popitem(last=False)
                self.cached_bytes -= _cost(evicted)
            self._cache[file.location] = file
            self.cached_bytes += cost
        return file


def _cost(file: MetadataFile) -> int:
    return len(file.raw) * COST_PER_JSON_BYTE


_VERSION = re.compile(r"^(\d+)-[0-9a-fA-F-]{36}(?:\.gz)?\.metadata\.json$")


def version_of(metadata_location: str) -> int:
    """The NNNNN of ``NNNNN-<uuid>.metadata.json``; -1 for a file named otherwise (registered files)."""
    match = _VERSION.match(metadata_location.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else -1


def next_location(doc: dict[str, Any], current_location: str | None) -> str:
    """``<metadata dir>/<version+1>-<uuid>[.gz].metadata.json`` for a table or a view: the directory
    is ``write.metadata.path`` or ``<location>/metadata``; ``.gz`` when the table's
    ``write.metadata.compression-codec`` is gzip (views are never compressed)."""
    version = version_of(current_location) + 1 if current_location else 0
    properties = doc.get("properties") or {}
    directory = properties.get("write.metadata.path") or f"{doc['location'].rstrip('/')}/metadata"
    codec = ".gz" if "table-uuid" in doc and is_gzip(properties) else ""
    return f"{directory.rstrip('/')}/{version:05d}-{uuid.uuid4()}{codec}.metadata.json"


def is_gzip(properties: dict[str, str]) -> bool:
    return str(properties.get("write.metadata.compression-codec", "none")).lower() == "gzip"
