"""Which failed commits an append rebase may take (``rebase.py``), judged on the commit's JSON and
the table's metadata only: ``candidate`` is pure (no I/O), so the engine tells a rebase-eligible
conflict from a 409 without reading files.

A table commit whose only failed requirement is ``assert-ref-snapshot-id`` on branch B (B moved from
the client's parent X to Y), and that is exactly ``add-snapshot`` (summary ``operation=append``,
parent X) + ``set-snapshot-ref`` B to that snapshot, qualifies when rebase is on (``append_rebase``
setting, overridden per table by ``catalog.append-rebase.enabled``; whatever it says when B moved only
by the catalog's own maintenance snapshots, ``rollback.py``). X must be an ancestor of Y (the branch
moved forward): a branch that was rolled back or replaced is left to the client, and so is a client
that asserted that B does not exist (``snapshot-id: null``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from catalog import errors
from catalog.commit.rollback import MAX_DISTANCE, catalog_made, is_int
from catalog.metadata import parsing, tables

PROPERTY = "catalog.append-rebase.enabled"


@dataclass(frozen=True, slots=True)
class Candidate:
    """A commit that would be a pure append on ``head`` if its files say so."""

    branch: str
    parent: dict  # the client's parent snapshot X (still in the table)
    head: dict  # the branch's current snapshot Y
    snapshot: dict  # the client's snapshot JSON
    ref_update: dict
    requirements: list[dict]  # the client's, with B's expected id moved to Y
    over_maintenance: bool = False  # B moved only by the catalog's own maintenance snapshots


def enabled(base: dict, default: bool) -> bool:
    value = (base.get("properties") or {}).get(PROPERTY)
    return default if value is None else str(value).strip().lower() == "true"


def append_shaped(updates: Sequence[Any]) -> bool:
    """``add-snapshot`` of an append + ``set-snapshot-ref`` of a branch to it: what group commit takes."""
    if len(updates) != 2 or not all(isinstance(u, dict) for u in updates):
        return False
    add, ref = updates
    snapshot = add.get("snapshot")
    return (
        add.get("action") == "add-snapshot"
        and ref.get("action") == "set-snapshot-ref"
        and isinstance(snapshot, dict)
        and isinstance(snapshot.get("summary"), dict)
        and snapshot["summary"].get("operation") == "append"
        and ref.get("snapshot-id") == snapshot.get("snapshot-id")
    )


def candidate(requirements: list[dict], updates: list[dict], base: dict, default: bool) -> Candidate | None:
    """The rebase this failed commit qualifies for, judged on its JSON and ``base`` only; None: a 409.
    With rebase off, an append is still rebased when its branch moved only by the catalog's own
    maintenance snapshots (compaction, manifest rewrite): a writer never pays for the catalog's maintenance."""
    if base.get("format-version") not in (1, 2, 3):
        return None
    on = enabled(base, default)
    if len(updates) != 2 or not all(isinstance(u, dict) for u in updates):
        return None
    add, ref = updates
    snapshot = add.get("snapshot")
    if add.get("action") != "add-snapshot" or ref.get("action") != "set-snapshot-ref" or not isinstance(snapshot, dict):
        return None
    snapshot_id, branch = snapshot.get("snapshot-id"), ref.get("ref-name")
    summary = snapshot.get("summary")
    if not isinstance(summary, dict) or summary.get("operation") != "append" or not is_int(snapshot_id):
        return None
    if ref.get("snapshot-id") != snapshot_id or str(ref.get("type")).lower() != "branch" or not isinstance(branch, str):
        return None
    asserted = [r for r in requirements if isinstance(r, dict) and r.get("type") == "assert-ref-snapshot-id"]
    if len(asserted) != 1 or asserted[0].get("ref") != branch:
        return None
    expected = asserted[0].get("snapshot-id")
    if not is_int(expected) or snapshot.get("parent-snapshot-id") != expected:
        return None  # null: the client asserted B does not exist; never rebased
    current = (base.get("refs") or {}).get(branch)
    if not isinstance(current, dict) or str(current.get("type")).lower() != "branch":
        return None
    head_id = current.get("snapshot-id")
    if head_id == expected:
        return None  # B did not move: the 409 is about something else
    found = _ancestry(base.get("snapshots") or [], head_id, expected, snapshot_id)
    if found is None:
        return None
    head, parent = found
    maintenance = not on and catalog_made(base.get("snapshots") or [], head_id, expected) is not None
    if not on and not maintenance:
        return None
    moved = [r if r is not asserted[0] else {**r, "snapshot-id": head_id} for r in requirements]
    try:
        tables.check_requirements(parsing.parse_requirements(moved), base)
    except errors.IcebergError:
        return None  # another requirement fails too
    return Candidate(branch, parent, head, snapshot, ref, moved, maintenance)


def _ancestry(snapshots: list, head_id: Any, parent_id: int, new_id: int) -> tuple[dict, dict] | None:
    """(head, parent) when ``parent_id`` is an ancestor of ``head_id`` and ``new_id`` is unused.
    Snapshots are listed in commit order, so one backward pass walks the chain."""
    want, head = head_id, None
    for i, snap in enumerate(reversed(snapshots)):
        if i > MAX_DISTANCE or not isinstance(snap, dict):
            return None
        if snap.get("snapshot-id") == new_id:
            return None
        if snap.get("snapshot-id") != want:
            continue
        if head is None:
            head = snap
        if want == parent_id:
            return head, snap
        want = snap.get("parent-snapshot-id")
        if want is None:
            return None
    return None
