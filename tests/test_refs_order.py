"""The order of a table's ``refs``, as Java writes it: the engine's answer compared with Iceberg Java's
own, commit after commit, key order included."""

from __future__ import annotations

import pytest

_SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "a", "type": "long", "required": False}]}
_AT = "s3://warehouse/db/t"


def _snapshot(i: int, fv: int, ts: int) -> dict:
    snap = {"snapshot-id": i, "timestamp-ms": ts, "manifest-list": f"{_AT}/metadata/snap-{i}.avro"}
    snap |= {"summary": {"operation": "append"}, "schema-id": 0}
    if fv >= 2:
        snap["sequence-number"] = i
    if fv >= 3:
        snap["first-row-id"], snap["added-rows"] = (i - 1) * 10, 10
    return snap


def _ref(name: str, snapshot_id: int, kind: str = "branch") -> dict:
    return {"action": "set-snapshot-ref", "ref-name": name, "type": kind, "snapshot-id": snapshot_id}


@pytest.mark.spark
@pytest.mark.parametrize("fv", [1, 2, 3])
def test_refs_are_written_in_javas_order(java, fv: int) -> None:
    """Many branches and tags, added, moved, removed and re-added over several commits (the map grows
    past its capacity): every commit's ``refs`` has Java's key order, not only its content."""
    import time

    from catalog.metadata import tables

    created = java.ask(
        {"op": "new_table", "location": _AT, "schema": _SCHEMA, "properties": {"format-version": str(fv)}}
    )
    base = created["result"]
    start = base["last-updated-ms"] - 1000
    names = ["main", "dev", "audit", "b", "a", "tag-2024", "release/1.0", "ü-branch", "x" * 40, "z"]
    commits = [
        [{"action": "add-snapshot", "snapshot": _snapshot(1, fv, start + 1)}, _ref("main", 1), _ref("dev", 1)],
        [_ref(n, 1, "tag" if n.startswith("tag") else "branch") for n in names[2:]],
        [{"action": "remove-snapshot-ref", "ref-name": "audit"}, {"action": "remove-snapshot-ref", "ref-name": "b"}],
        [
            {"action": "add-snapshot", "snapshot": {**_snapshot(2, fv, start + 2), "parent-snapshot-id": 1}},
            _ref("b", 2),
            _ref("dev", 2),
            *[_ref(f"br{i}", 2) for i in range(14)],
        ],
    ]
    for i, updates in enumerate(commits):
        theirs = java.ask(
            {"op": "table", "base": base, "base_location": f"{_AT}/metadata/{i:05d}.metadata.json",
             "requirements": [], "updates": updates}
        )  # fmt: skip
        assert theirs.get("status") == 200, theirs
        ours = tables.apply(base, [], updates, base_location=f"{_AT}/metadata/{i:05d}.metadata.json",
                            now_ms=int(time.time() * 1000))  # fmt: skip
        assert list(ours["refs"]) == list(theirs["result"]["refs"]), (
            i,
            list(ours["refs"]),
            list(theirs["result"]["refs"]),
        )
        assert ours["refs"] == theirs["result"]["refs"]
        base = theirs["result"]
