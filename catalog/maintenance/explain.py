"""What a maintenance task did, and why it did not do more, in one line: the ``summary`` of every task's
result (the CLI's result column, the worker's log line, the ``maintenance-done`` event).

A result is the job's own JSON (``jobs.py``, ``compaction.py``, ``rewrite_manifests.py``); each job puts
into it the counts of what it left alone and the values that decided (``kept-snapshots`` and the
writer grace, compaction's ``left`` and quiet period, orphans younger than the orphan age). This
module only words them, so a result never reads "0" without its reason, and a dry run says what
the run would do in the job's own terms (manifests merged, files rewritten, snapshots expired).
Pure: no I/O, no imports beyond the standard library.
"""

from __future__ import annotations

from typing import Any

# The kinds' names, as the jobs define them (``maintenance.KINDS``); literal here so that the module stays
# importable without the jobs' dependencies.
EXPIRE, ORPHANS, MANIFESTS, COMPACT, PURGE = (
    "expire-snapshots",
    "remove-orphans",
    "rewrite-manifests",
    "rewrite-data-files",
    "purge",
)


def summary(kind: str, result: dict[str, Any]) -> str:
    """One line: what the task did (or, a dry run, would do), then why not more."""
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    words = _WORDING.get(kind)
    return words(result) if words is not None else "done"


# -- each kind ---------------------------------------------------------------------------------------


def _expire(r: dict[str, Any]) -> str:
    dry = bool(r.get("dry-run"))
    snapshots = _count(r, "expired-snapshots")
    refs = _count(r, "removed-refs")
    done = [f"{snapshots:,} snapshots {'would expire' if dry else 'expired'}"]
    if refs:
        done.append(f"{refs:,} refs {'would be removed' if dry else 'removed'}")
    files = _count(r, "files-to-delete") if dry else int(r.get("deleted-files", 0))
    metadata = _count(r, "metadata-files-to-delete") if dry else int(r.get("deleted-metadata-files", 0))
    if files:
        of_them = f" ({metadata:,} metadata files)" if metadata else ""
        done.append(f"{files:,} files {'would be deleted' if dry else 'deleted'}{of_them}")
    kept = r.get("kept-snapshots") or {}
    if not kept:
        return ", ".join(done)
    reasons = _reasons(kept, _KEPT, r)
    if snapshots:
        return f"{', '.join(done)}; {sum(kept.values()):,} kept: {', '.join(reasons)}"
    return f"{', '.join(done)}: {', '.join(reasons)}"


_KEPT = {
    "writer-grace": "held by the writer grace ({grace})",
    "younger-than-max-age": "younger than the maximum snapshot age ({max_age})",
    "ref-head": "the head of a branch or tag",
    "min-snapshots-to-keep": "kept by min-snapshots-to-keep ({min_keep}) or a branch's own retention",
}


def _compact(r: dict[str, Any]) -> str:
    if "deferred" in r:
        return f"0 data files rewritten: deferred, {r['deferred']}"
    if "yielded" in r:
        return f"0 data files rewritten: yielded, {r['yielded']}"
    on_spark = " with Spark" if r.get("engine") == "spark" else ""
    if r.get("dry-run"):
        files = r.get("data-files-to-rewrite")
        size = _size(int(r.get("bytes-to-rewrite", 0)))
        if files is None:  # Spark plans it itself
            head = f"would rewrite {size} of small data files{on_spark}"
        else:
            head = f"would rewrite {files:,} data files ({size}) into about {r.get('estimated-data-files-to-add', 1):,}"
    else:
        rewritten = int(r.get("rewritten-data-files", 0))
        if rewritten:
            head = f"{rewritten:,} data files compacted into {int(r.get('added-data-files', 0)):,}{on_spark}"
            if removed := int(r.get("removed-delete-files", 0)):
                head += f", {removed:,} delete files applied and removed"
        else:
            head = "0 data files rewritten"
    left = r.get("left") or {}
    reasons = _reasons(left, _LEFT, r)
    if not reasons:
        if head == "0 data files rewritten":
            return f"{head}: no small data files to merge ({int(r.get('data-files-before', 0)):,} data files)"
        return head
    if head == "0 data files rewritten":
        return f"{head}: {', '.join(reasons)}"
    return f"{head}; left alone: {', '.join(reasons)}"


_LEFT = {
    "near-target-size": "near the target file size ({target})",
    "older-partition-spec": "of an older partition spec",
    "added-within-quiet-period": "younger than the quiet period ({quiet})",
    "outside-table-location": "outside the table's location",
    "equality-deletes": "under equality deletes",
    "too-few-in-partition": "in partitions with too few small files to merge",
    "next-run": "beyond this run's byte budget (the next run takes them)",
}


def _manifests(r: dict[str, Any]) -> str:
    if "yielded" in r:
        return f"0 manifests merged: yielded, {r['yielded']}"
    too_large = r.get("left-too-large") or []
    tail = ""
    if too_large:
        count = sum(int(g.get("manifests", 0)) for g in too_large)
        tail = f"; {count:,} manifests left: too large for one run"
    if r.get("dry-run"):
        return (
            f"would merge {int(r.get('manifests-to-replace', 0)):,} manifests into "
            f"{int(r.get('manifests-to-create', 0)):,}{tail}"
        )
    replaced = int(r.get("manifests-replaced", 0))
    if replaced:
        kept = int(r.get("manifests-kept", 0))
        kept_words = f" ({kept:,} kept as they were)" if kept else ""
        return f"{replaced:,} manifests merged into {int(r.get('manifests-created', 0)):,}{kept_words}{tail}"
    before = int(r.get("manifests-before", 0))
    if too_large:
        return f"0 manifests merged{tail}"
    if before == 1:
        return "0 manifests merged: the table has one manifest"
    return f"0 manifests merged: the {before:,} manifests are already one per partition spec and content"


def _orphans(r: dict[str, Any]) -> str:
    found, scanned = int(r.get("orphans", 0)), int(r.get("scanned", 0))
    young = int(r.get("kept-younger-than-age", 0))
    kept = f"{young:,} unreferenced kept, younger than the orphan age ({_duration(_hours(r) * 3600)})"
    if r.get("dry-run"):
        head = f"{found:,} orphan files ({_size(int(r.get('bytes', 0)))}) would be deleted"
    elif found:
        head = f"{int(r.get('deleted-files', 0)):,} orphan files deleted ({_size(int(r.get('bytes', 0)))})"
    elif young:
        return f"0 orphan files deleted: {kept}, of {scanned:,} files scanned"
    else:
        return f"0 orphan files deleted: the {scanned:,} files scanned are all referenced"
    return f"{head}, of {scanned:,} scanned" + (f"; {kept}" if young else "")


def _purge(r: dict[str, Any]) -> str:
    return f"{int(r.get('deleted-files', 0)):,} files deleted"


_WORDING = {EXPIRE: _expire, ORPHANS: _orphans, MANIFESTS: _manifests, COMPACT: _compact, PURGE: _purge}


# -- words for numbers -------------------------------------------------------------------------------


def _reasons(counts: dict[str, int], words: dict[str, str], r: dict[str, Any]) -> list[str]:
    """``12 younger than the quiet period (300 s)``, ...: each reason's count and words, most first."""
    values = _values(r)
    return [f"{n:,} {words.get(key, key).format(**values)}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1])]


def _values(r: dict[str, Any]) -> dict[str, str]:
    return {
        "grace": _duration(float(r.get("writer-grace-seconds", 0))),
        "max_age": _duration(int(r.get("max-snapshot-age-ms", 0)) / 1000),
        "min_keep": str(r.get("min-snapshots-to-keep", 1)),
        "quiet": _duration(float(r.get("quiet-seconds", 0))),
        "target": _size(int(r.get("target-file-size-bytes", 0))),
    }


def _count(r: dict[str, Any], key: str) -> int:
    """A capped list's full count (``key-count``), else the list's length."""
    return int(r.get(f"{key}-count", len(r.get(key) or [])))


def _hours(r: dict[str, Any]) -> float:
    return float(r.get("orphan-age-hours", 0))


def _duration(seconds: float) -> str:
    """``300 s``, ``15 min``, ``1 h``, ``5 d``: the largest unit that divides it, seconds below 10 minutes."""
    whole = int(seconds)
    if whole != seconds or whole < 600:
        return f"{seconds:g} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if whole % size == 0:
            return f"{whole // size} {unit}"
    return f"{whole} s"


def _size(n: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} bytes"
