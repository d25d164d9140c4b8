"""The JSON of a metadata file, in time proportional to what a commit changed.

A commit's new metadata shares the elements of its long lists (snapshots, logs, schemas, view
versions...) with its base: the engine never copies or mutates an element it did not change. So
the bytes of each shared element can be copied from the base file's JSON instead of serialised
again. This is hand-written because no JSON library serialises incrementally, and it is a
measured hot path: at 10,000 snapshots a full ``orjson.dumps`` is most of a commit's CPU time,
the copy a small part (see the bench's commit breakdown). ``dump(doc)`` with no previous dump is
the plain full serialisation; ``tests/test_metadata_encoding.py`` checks both give the same JSON.
"""

from __future__ import annotations

import operator
from array import array
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

# The top-level lists whose elements commits carry over unchanged (tables and views).
SPLICED = frozenset(
    {
        "schemas",
        "partition-specs",
        "sort-orders",
        "snapshots",
        "snapshot-log",
        "metadata-log",
        "statistics",
        "partition-statistics",
        "encryption-keys",
        "versions",
        "version-log",
    }
)


class Elements(NamedTuple):
    """Where a list's elements are in a dump: element ``i`` is
    ``raw[start + spans[2 * i] : start + spans[2 * i + 1]]``.

    ``items`` is the very list of the dumped document. It keeps its elements alive, so the next
    dump matches elements by identity (``is``), never by a possibly reused ``id``.
    """

    items: list
    start: int
    spans: array


@dataclass(frozen=True, slots=True)
class Dumped:
    """A metadata file's JSON and, per spliced list, where its elements are."""

    raw: bytes
    lists: dict[str, Elements]


def dump(doc: dict[str, Any], previous: Dumped | None = None) -> Dumped:
    """``doc`` as compact JSON (keys in ``doc``'s order), reusing ``previous``'s bytes for every
    list element ``doc`` shares with the document ``previous`` was made from."""
    out = _Parts()
    lists: dict[str, Elements] = {}
    out.add(b"{")
    for i, (key, value) in enumerate(doc.items()):
        out.add((b'"' if i == 0 else b',"') + _key(key) + b'":')
        if key in SPLICED and isinstance(value, list):
            known = previous.lists.get(key) if previous is not None else None
            lists[key] = _splice(out, value, previous.raw if previous is not None else b"", known)
        else:
            out.add(orjson.dumps(value))
    out.add(b"}")
    return Dumped(b"".join(out.parts), lists)


def _key(key: str) -> bytes:
    encoded = _KEYS.get(key)
    if encoded is None:
        encoded = orjson.dumps(key)[1:-1]
        if len(_KEYS) < 256:  # the metadata's own field names; anything else is encoded each time
            _KEYS[key] = encoded
    return encoded


_KEYS: dict[str, bytes] = {}


class _Parts:
    """Pieces of the new file, joined once at the end (one allocation, one copy)."""

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def add(self, piece: bytes | memoryview) -> None:
        self.parts.append(piece)
        self.size += len(piece)


def _splice(out: _Parts, items: list, previous: bytes, known: Elements | None) -> Elements:
    """Append ``[...]`` of ``items`` to ``out``, copying the JSON of elements ``known`` dumped."""
    out.add(b"[")
    base = out.size  # element i is at base + spans[2 * i]
    spans = array("q")
    rest: list = items
    reused: dict[int, tuple[object, int]] = {}
    if known is not None and known.items:
        n = len(known.items)
        if len(items) >= n and all(map(operator.is_, items, known.items)):  # appended to: the usual commit
            kept: int | None = 0
        else:  # a log that keeps its last N drops some from the front
            kept = _dropped_from_front(items, known.items)
        if kept is not None:  # known's elements from ``kept`` on, in order: one contiguous copy
            low = known.spans[2 * kept]
            out.add(memoryview(previous)[known.start + low : known.start + known.spans[-1]])
            spans = known.spans[2 * kept :]  # their offsets carry over, counted from ``base``
            base -= low
            rest = items[n - kept :]
        else:  # trimmed or reordered: match elements one by one
            reused = {id(o): (o, i) for i, o in enumerate(known.items)}
    for item in rest:
        hit = reused.get(id(item))
        if hit is not None and hit[0] is item and known is not None:
            i = hit[1]
            piece: bytes | memoryview = memoryview(previous)[
                known.start + known.spans[2 * i] : known.start + known.spans[2 * i + 1]
            ]
        else:
            piece = orjson.dumps(item)
        if spans:
            out.add(b",")
        spans.append(out.size - base)
        out.add(piece)
        spans.append(out.size - base)
    out.add(b"]")
    return Elements(items, base, spans)


def _dropped_from_front(items: list, known: list) -> int | None:
    """``k`` when ``items`` starts with ``known[k:]`` (the same objects, in order) for some ``k`` >= 1:
    the first ``k`` were dropped and the rest kept, as a trimmed metadata log is. Their JSON is then
    one contiguous run of the previous dump. None otherwise."""
    if not items:
        return None
    first = items[0]
    for k in range(1, len(known)):
        if known[k] is first:
            kept = len(known) - k
            if len(items) >= kept and all(map(operator.is_, items[:kept], known[k:])):
                return k
            return None
    return None
