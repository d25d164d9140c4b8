"""Which snapshots and refs an expiry removes: Java's ``org.apache.iceberg.RemoveSnapshots`` (Iceberg
1.9), planned on table metadata JSON (format v1 to v3) without I/O.

The rules, as Java applies them in ``internalApply``:

* refs: ``main`` is always kept. Any other ref is removed when its snapshot is missing, or when the
  snapshot is older than the ref's ``max-ref-age-ms`` (else the table's
  ``history.expire.max-ref-age-ms``; by default forever).
* every remaining ref's own snapshot is kept.
* each remaining branch keeps its ancestors, newest first, while fewer than its
  ``min-snapshots-to-keep`` are kept or the ancestor is not older than the branch's cut-off
  (``now - max-snapshot-age-ms`` from the ref, else the table's cut-off); the walk stops at the first
  ancestor that fails both.
* a snapshot on no remaining branch's history and no remaining tag is kept while it is not older than
  the table's cut-off.
* everything else is removed.

``older_than_ms`` and ``retain_last`` replace the table's cut-off and minimum exactly as
``expireOlderThan`` and ``retainLast`` do (a ref's own settings still win). The walk down a branch's
history stops at a snapshot already walked, so planning is linear in the number of snapshots.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from catalog import errors

MAX_SNAPSHOT_AGE_MS = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP = "history.expire.min-snapshots-to-keep"
MAX_REF_AGE_MS = "history.expire.max-ref-age-ms"
GC_ENABLED = "gc.enabled"

DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 60 * 60 * 1000  # Java's MAX_SNAPSHOT_AGE_MS_DEFAULT: 5 days
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
MAIN = "main"

_LONG = (-(2**63), 2**63 - 1)
_INT = (-(2**31), 2**31 - 1)
_INTEGER = re.compile(r"[+-]?[0-9]+")


@dataclass(frozen=True)
class Retention:
    """The table's expiry defaults (``TableProperties``' ``history.expire.*``)."""

    max_snapshot_age_ms: int = DEFAULT_MAX_SNAPSHOT_AGE_MS  # history.expire.max-snapshot-age-ms
    min_snapshots_to_keep: int = DEFAULT_MIN_SNAPSHOTS_TO_KEEP  # history.expire.min-snapshots-to-keep
    max_ref_age_ms: int | None = None  # history.expire.max-ref-age-ms; None: forever (Long.MAX_VALUE)
    gc_enabled: bool = True  # gc.enabled: Java refuses to expire at all when false


def _integer(name: str, raw: str, bounds: tuple[int, int], least: int) -> int:
    """Java's ``Long.parseLong``/``Integer.parseInt`` (no spaces, no underscores), at least ``least``."""
    if not isinstance(raw, str) or not _INTEGER.fullmatch(raw) or not bounds[0] <= int(raw) <= bounds[1]:
        raise errors.BadRequest(f"Invalid value for property {name}: {str(raw)[:40]!r} is not an integer")
    value = int(raw)
    if value < least:
        raise errors.BadRequest(f"Invalid value for property {name}: {value} (must be at least {least})")
    return value


def retention(properties: Mapping[str, str], defaults: Mapping[str, str] = {}) -> Retention:  # noqa: B006 (read only)
    """The table's properties, else ``defaults`` (namespace properties / server settings, same keys), else
    Iceberg's defaults. Malformed values -> ``errors.BadRequest`` naming the property.

    Stricter than Java where Java would silently misbehave: a negative age and a minimum below 1 are
    refused (Java's ``retainLast`` refuses below 1; ``SnapshotRef`` refuses them on a ref)."""

    def raw(name: str) -> str | None:
        return properties.get(name, defaults.get(name))

    age = raw(MAX_SNAPSHOT_AGE_MS)
    keep = raw(MIN_SNAPSHOTS_TO_KEEP)
    ref_age = raw(MAX_REF_AGE_MS)
    gc = raw(GC_ENABLED)
    if gc is not None and (not isinstance(gc, str) or gc.lower() not in ("true", "false")):
        raise errors.BadRequest(f"Invalid value for property {GC_ENABLED}: {str(gc)[:40]!r} is not a boolean")
    max_ref_age = None if ref_age is None else _integer(MAX_REF_AGE_MS, ref_age, _LONG, 0)
    return Retention(
        max_snapshot_age_ms=(
            DEFAULT_MAX_SNAPSHOT_AGE_MS if age is None else _integer(MAX_SNAPSHOT_AGE_MS, age, _LONG, 0)
        ),
        min_snapshots_to_keep=(
            DEFAULT_MIN_SNAPSHOTS_TO_KEEP if keep is None else _integer(MIN_SNAPSHOTS_TO_KEEP, keep, _INT, 1)
        ),
        max_ref_age_ms=None if max_ref_age == _LONG[1] else max_ref_age,
        gc_enabled=gc is None or gc.lower() == "true",
    )


@dataclass(frozen=True)
class Expiry:
    """What an expiry removes."""

    snapshot_ids: tuple[int, ...]  # snapshots to remove, sorted
    refs: tuple[str, ...]  # refs to remove (expired by max-ref-age or pointing nowhere; never "main"), sorted

    def updates(self) -> list[dict]:
        """The REST updates, in the order Java's ``RemoveSnapshots`` builds them: ``remove-snapshot-ref``
        for each ref, then one ``remove-snapshots`` (none when no snapshot goes)."""
        out: list[dict] = [{"action": "remove-snapshot-ref", "ref-name": name} for name in self.refs]
        if self.snapshot_ids:
            out.append({"action": "remove-snapshots", "snapshot-ids": list(self.snapshot_ids)})
        return out

    def __bool__(self) -> bool:
        return bool(self.snapshot_ids or self.refs)


def refs_of(metadata: dict) -> dict[str, dict]:
    """The table's refs; metadata without ``refs`` (v1) has ``main`` at ``current-snapshot-id`` as Java's
    ``TableMetadataParser`` gives it. Safer than Java: ``refs`` without ``main`` beside a current snapshot
    (metadata no writer of ours produces) also gets that ``main``, so the current snapshot never goes."""
    refs = dict(metadata.get("refs") or {})
    current = metadata.get("current-snapshot-id")
    if MAIN not in refs and current is not None and current != -1:
        refs[MAIN] = {"snapshot-id": current, "type": "branch"}
    return refs


def plan(
    metadata: dict,
    now_ms: int,
    policy: Retention,
    older_than_ms: int | None = None,
    retain_last: int | None = None,
) -> Expiry:
    """Java ``RemoveSnapshots`` semantics on table metadata JSON (v1-v3); see the module docstring.

    ``older_than_ms``/``retain_last``: Spark's ``expire_snapshots`` arguments, overriding the table's
    defaults exactly as the Java API's ``expireOlderThan``/``retainLast`` do. Raises
    ``errors.ValidationFailed`` when the table has ``gc.enabled=false`` (Java's refusal) and
    ``errors.IllegalArgument`` for ``retain_last`` below 1."""
    if not policy.gc_enabled:
        raise errors.ValidationFailed(
            "Cannot expire snapshots: GC is disabled (deleting files may corrupt other tables)"
        )
    if retain_last is not None and retain_last < 1:
        raise errors.IllegalArgument(f"Number of snapshots to retain must be at least 1, cannot be: {retain_last}")
    snapshots = metadata.get("snapshots") or []
    if not snapshots:
        return Expiry((), ())
    # indexed by id once: every later step is a lookup, never a scan (linear in the snapshots)
    parent: dict[int, int | None] = {}
    timestamp: dict[int, int] = {}
    for s in snapshots:
        parent[s["snapshot-id"]] = s.get("parent-snapshot-id")
        timestamp[s["snapshot-id"]] = s["timestamp-ms"]

    expire_older_than = now_ms - policy.max_snapshot_age_ms if older_than_ms is None else older_than_ms
    min_to_keep = policy.min_snapshots_to_keep if retain_last is None else retain_last

    # computeRetainedRefs
    refs = refs_of(metadata)
    retained: dict[str, dict] = {}
    for name, ref in refs.items():
        if name == MAIN:
            retained[name] = ref
            continue
        snapshot_id = ref["snapshot-id"]
        if snapshot_id not in timestamp:
            continue  # Java: "Removing invalid ref"
        max_ref_age = ref.get("max-ref-age-ms")
        if max_ref_age is None:
            max_ref_age = policy.max_ref_age_ms
        if max_ref_age is None or now_ms - timestamp[snapshot_id] <= max_ref_age:
            retained[name] = ref

    keep: set[int] = {ref["snapshot-id"] for ref in retained.values()}

    # computeAllBranchSnapshotsToRetain: each branch's recent history
    for ref in retained.values():
        if ref.get("type", "branch") != "branch":
            continue
        age = ref.get("max-snapshot-age-ms")
        cut_off = now_ms - age if age is not None else expire_older_than
        least = ref.get("min-snapshots-to-keep")
        least = min_to_keep if least is None else least
        kept = 0
        for sid in _ancestors(ref["snapshot-id"], parent, set()):
            if kept < least or timestamp[sid] >= cut_off:
                keep.add(sid)
                kept += 1
            else:
                break

    # unreferencedSnapshotsToRetain: off every remaining branch and tag, kept while young enough
    referenced: set[int] = set()
    for ref in retained.values():
        if ref.get("type", "branch") == "branch":
            referenced.update(list(_ancestors(ref["snapshot-id"], parent, referenced)))
        else:
            referenced.add(ref["snapshot-id"])
    for sid in timestamp:
        if sid not in referenced and timestamp[sid] >= expire_older_than:
            keep.add(sid)

    return Expiry(
        snapshot_ids=tuple(sorted(sid for sid in timestamp if sid not in keep)),
        refs=tuple(sorted(name for name in refs if name not in retained)),
    )


def why_kept(metadata: dict, now_ms: int, policy: Retention, expiry: Expiry) -> dict[str, int]:
    """Why each snapshot ``expiry`` leaves was kept, counted by reason (for a task's result; pure):
    ``ref-head`` (a branch's or tag's own snapshot), ``younger-than-max-age`` (not older than the
    table's ``history.expire.max-snapshot-age-ms``), ``min-snapshots-to-keep`` (kept by a branch's
    minimum or its own age). The first reason that holds is the one counted."""
    gone = set(expiry.snapshot_ids)
    heads = {ref["snapshot-id"] for name, ref in refs_of(metadata).items() if name not in expiry.refs}
    cut_off = now_ms - policy.max_snapshot_age_ms
    reasons: dict[str, int] = {}
    for s in metadata.get("snapshots") or []:
        sid = s["snapshot-id"]
        if sid in gone:
            continue
        if sid in heads:
            reason = "ref-head"
        elif s["timestamp-ms"] >= cut_off:
            reason = "younger-than-max-age"
        else:
            reason = "min-snapshots-to-keep"
        reasons[reason] = reasons.get(reason, 0) + 1
    return reasons


def _ancestors(snapshot_id: int, parent: Mapping[int, int | None], stop: set[int]) -> Iterator[int]:
    """``SnapshotUtil.ancestorsOf``: the snapshot and its parents, newest first, while they exist, lazily
    (a walk that stops early reads no further); it also stops at a snapshot in ``stop`` (already walked)
    and on a cycle in broken metadata."""
    seen: set[int] = set()
    current: int | None = snapshot_id
    while current is not None and current in parent and current not in stop and current not in seen:
        yield current
        seen.add(current)
        current = parent[current]
