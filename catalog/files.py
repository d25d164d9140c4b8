"""Metadata files: read (parsed once, cached by location) and written create-only.

A metadata file never changes after it is written, so a cache keyed by location is always right and
never needs invalidation; it only needs a size bound, in bytes (``metadata_cache_bytes``).

What the bound counts: each cached file is charged ``COST_PER_JSON_BYTE`` times its JSON size. The
JSON is all that is known when a file is cached, but a file may later carry its parsed pydantic model
(commits parse it; loads serve the JSON as is), the element offsets of a file this server wrote, and
its refs-only JSON. Measured with tracemalloc on a 10,000-snapshot file (4.5 MB of JSON): the parsed
model costs 7.8x the JSON, the offsets 0.1x, the refs-only copy at most 0.5x; with the JSON itself,
10x. So the budget bounds the worst case (every entry parsed); a cache of unparsed files holds less
memory than its gauge says, never more.
"""

from __future__ import annotations

import gzip
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import orjson
from pydantic import ValidationError
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.view.metadata import ViewMetadata

from . import commit, errors
from .storage import Storage


@dataclass(slots=True)
class MetadataFile:
    """One metadata file: its JSON as stored (decompressed) and, on demand, the parsed model."""

    location: str
    raw: bytes
    _parsed: TableMetadata | None = field(default=None, repr=False)
    _view: ViewMetadata | None = field(default=None, repr=False)
    _refs: bytes | None = field(default=None, repr=False)
    # Set on files this server wrote: where each element's JSON is, for the next commit's dump to copy.
    dumped: commit.Dumped | None = field(default=None, repr=False)

    @property
    def metadata(self) -> TableMetadata:
        if self._parsed is None:
            try:
                self._parsed = TableMetadataUtil.parse_raw(self.raw)
            except Exception as e:  # noqa: BLE001 - a file that is not table metadata
                raise errors.BadRequest(f"Invalid table metadata file {self.location}: {_why(e)}") from e
        return self._parsed

    @property
    def refs_only(self) -> bytes:
        """The JSON with only the snapshots that refs point at (``snapshots=refs`` loads), made once."""
        if self._refs is None:
            data = orjson.loads(self.raw)
            keep = {ref["snapshot-id"] for ref in (data.get("refs") or {}).values()}
            data["snapshots"] = [s for s in data.get("snapshots", []) if s["snapshot-id"] in keep]
            self._refs = orjson.dumps(data)
        return self._refs

    @property
    def view(self) -> ViewMetadata:
        if self._view is None:
            try:
                self._view = ViewMetadata.model_validate_json(self.raw)
            except Exception as e:  # noqa: BLE001 - a file that is not view metadata
                raise errors.BadRequest(f"Invalid view metadata file {self.location}: {_why(e)}") from e
        return self._view


def _why(e: Exception) -> str:
    """Where and why a file failed to parse, never what it contains: pydantic's own message quotes
    the offending input, which would echo a file the client may not read (register names any path)."""
    if isinstance(e, ValidationError):
        first = e.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "document"
        return f"{where}: {first.get('type', 'invalid')}"
    return f"not valid metadata ({type(e).__name__})"


# Bytes of memory a cached file may hold per byte of its JSON (see the module docstring).
COST_PER_JSON_BYTE = 10


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

    def write(self, location: str, metadata: TableMetadata, base: MetadataFile | None = None) -> MetadataFile:
        """Write a new metadata file; never overwrites (``FileExistsError``).

        ``base``: the file ``metadata`` was derived from; the JSON of the elements they share
        (snapshots, log entries, schemas...) is reused from its dump instead of serialised again.
        """
        dumped = commit.dump_spliced(metadata, base.dumped if base is not None else None)
        raw = dumped.raw
        data = gzip.compress(raw) if commit.is_gzip(metadata.properties) else raw
        self.storage.write_new(location, data)
        return MetadataFile(location, raw, metadata, dumped=dumped)

    def write_view(self, location: str, metadata: ViewMetadata) -> MetadataFile:
        raw = metadata.model_dump_json().encode()
        self.storage.write_new(location, raw)
        return MetadataFile(location, raw, _view=metadata)

    def remember(self, written: MetadataFile) -> None:
        """Cache a file once it is known to be committed (an uncommitted file is usually deleted)."""
        self._remember(written)

    def delete(self, location: str) -> None:
        with self._lock:
            dropped = self._cache.pop(location, None)
            if dropped is not None:
                self.cached_bytes -= _cost(dropped)
        self.storage.delete(location)

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
