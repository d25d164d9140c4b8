"""The payload of a table commit's event (``catalog/events/records.py``), pure: the snapshots a move
added and removed, found by the prefix check when the parent's snapshots are kept and by the id sets
otherwise, agree with a plain reading of the two documents."""

from __future__ import annotations

import copy
import random

import pytest

from catalog.events import records


def _snapshot(sid: int, operation: str = "append") -> dict:
    return {"snapshot-id": sid, "sequence-number": sid, "summary": {"operation": operation}}


def _doc(snapshots: list[dict], current: int | None = None) -> dict:
    return {"table-uuid": "u", "snapshots": snapshots, "current-snapshot-id": current if current is not None else -1}


def _expected(base: dict | None, new: dict) -> tuple[list[int], list[int]]:
    before = {s["snapshot-id"] for s in (base or {}).get("snapshots", [])}
    after = [s["snapshot-id"] for s in new["snapshots"]]
    return [sid for sid in after if sid not in before], sorted(before - set(after))


def _payload(base: dict | None, new: dict) -> dict:
    return records.committed("table", ("ns",), "t", 1, base, new, "file:///m.json").payload


@pytest.mark.parametrize("shared", [True, False], ids=["shared-objects", "reparsed"])
def test_an_append_lists_the_added_snapshots_and_removes_none(shared: bool) -> None:
    parents = [_snapshot(i) for i in range(1, 2001)]
    base = _doc(parents, 2000)
    kept = parents if shared else copy.deepcopy(parents)  # a document parsed again shares nothing
    new = _doc([*kept, _snapshot(2001, "overwrite"), _snapshot(2002)], 2002)
    payload = _payload(base, new)
    assert payload["added-snapshot-ids"] == [2001, 2002]
    assert payload["removed-snapshot-ids"] == []
    assert payload["snapshot-operation"] == "append"
    assert payload["current-snapshot-id"] == 2002


def test_removals_and_reorders_fall_back_to_the_id_sets() -> None:
    rng = random.Random(7)
    for _ in range(200):
        parents = [_snapshot(i) for i in rng.sample(range(1, 400), rng.randint(0, 30))]
        kept = [s for s in parents if rng.random() > 0.2]
        if rng.random() < 0.3:
            rng.shuffle(kept)
        added = [_snapshot(i) for i in rng.sample(range(400, 500), rng.randint(0, 3))]
        base, new = _doc(parents), _doc(kept + added)
        payload = _payload(base, new)
        want_added, want_removed = _expected(base, new)
        assert payload["added-snapshot-ids"] == want_added
        assert payload["removed-snapshot-ids"] == want_removed


def test_a_create_adds_every_snapshot_and_junk_entries_are_ignored() -> None:
    new = _doc([_snapshot(1), "junk", {"no-id": True}, _snapshot(2)], 2)  # type: ignore[list-item]
    payload = _payload(None, new)
    assert payload["added-snapshot-ids"] == [1, 2]
    assert payload["removed-snapshot-ids"] == []
    prefix_kept = _payload(_doc([_snapshot(1), "junk"]), _doc([_snapshot(1), "junk", _snapshot(3)]))  # type: ignore[list-item]
    assert prefix_kept["added-snapshot-ids"] == [3]
