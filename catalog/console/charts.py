"""The table health chart: inline SVG drawn on the server from the snapshot summaries (no script).

One small panel per measure (data files, total size, delete files, snapshots), over the snapshot
timeline in commit order. At most ``MAX_POINTS`` snapshots are drawn, evenly sampled and always
with the newest, so a table of 10,000 snapshots draws as fast as one of a hundred. Each line carries
the numbers it was drawn from (``data-values``, ``data-snapshots``) for those who would rather read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from catalog.console.html import attr, esc

MAX_POINTS = 120
WIDTH, HEIGHT, PAD = 320, 110, 8

# (a summary key, or "avg-file-size" / "snapshots" derived from them; label; unit)
SERIES: tuple[tuple[str, str, str], ...] = (
    ("total-data-files", "Data files", "files"),
    ("total-files-size", "Total size", "bytes"),
    ("avg-file-size", "Average file size", "bytes"),
    ("total-delete-files", "Delete files", "files"),
    ("snapshots", "Snapshots", "snapshots"),
)


def sample(count: int, at_most: int = MAX_POINTS) -> list[int]:
    """Indexes of ``count`` items, at most ``at_most`` of them, evenly spread, first and last kept."""
    if count <= at_most:
        return list(range(count))
    step = (count - 1) / (at_most - 1)
    return sorted({round(i * step) for i in range(at_most)})


def _number(summary: dict[str, Any], key: str) -> int | None:
    raw = summary.get(key)
    try:
        return int(raw) if raw is not None else None
    except (TypeError, ValueError):
        return None


def _average(summary: dict[str, Any]) -> int | None:
    """Total size over data files (delete files' bytes included: the summary does not split them)."""
    size, files = _number(summary, "total-files-size"), _number(summary, "total-data-files")
    return size // files if size is not None and files else None


def points(snapshots: Sequence[dict[str, Any]]) -> dict[str, list[tuple[int, int]]]:
    """For each series, (snapshot id, value) over the sampled snapshots (in commit order), those
    whose summary lacks the value left out."""
    ordered = sorted(snapshots, key=lambda s: (s.get("timestamp-ms") or 0, s.get("sequence-number") or 0))
    picked = sample(len(ordered))
    out: dict[str, list[tuple[int, int]]] = {key: [] for key, _, _ in SERIES}
    for i in picked:
        snap = ordered[i]
        sid = snap.get("snapshot-id")
        summary = snap.get("summary") if isinstance(snap.get("summary"), dict) else {}
        for key, _, _ in SERIES:
            value = (
                i + 1 if key == "snapshots" else _average(summary) if key == "avg-file-size" else _number(summary, key)
            )
            if value is not None and isinstance(sid, int):
                out[key].append((sid, value))
    return out


def _panel(key: str, label: str, unit: str, series: list[tuple[int, int]]) -> str:
    title_id = f"chart-{key}"
    if not series:
        return f'<figure class="chart"><figcaption>{esc(label)}</figcaption><p class="empty">No data.</p></figure>'
    values = [v for _, v in series]
    top = max(values)
    scale = top or 1
    n = len(series)
    span_x, span_y = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    coords = []
    for i, v in enumerate(values):
        x = PAD + (span_x * i / (n - 1) if n > 1 else span_x / 2)
        y = HEIGHT - PAD - span_y * v / scale
        coords.append(f"{x:.1f},{y:.1f}")
    last = values[-1]
    return (
        f'<figure class="chart"><figcaption id="{title_id}">{esc(label)}: <strong>{esc(_shown(last, unit))}</strong>'
        f" (max {esc(_shown(top, unit))})</figcaption>"
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-labelledby="{title_id}" data-series="{attr(key)}">'
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="axis"/>'
        f'<polyline class="line" fill="none" points="{" ".join(coords)}" data-series="{attr(key)}" '
        f'data-max="{top}" data-values="{",".join(map(str, values))}" '
        f'data-snapshots="{",".join(str(s) for s, _ in series)}"/></svg></figure>'
    )


def _shown(value: int, unit: str) -> str:
    if unit == "bytes":
        size = float(value)
        for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if size < 1024 or suffix == "TiB":
                return f"{size:.0f} {suffix}" if suffix == "B" else f"{size:.1f} {suffix}"
            size /= 1024
    return f"{value:,} {unit}"


def health(snapshots: Sequence[dict[str, Any]]) -> str:
    """The health panels of a table's snapshots, as HTML with inline SVG."""
    if not snapshots:
        return '<p class="empty">No snapshots yet: nothing to chart.</p>'
    series = points(snapshots)
    shown = len(series["snapshots"])
    note = f"{shown} of {len(snapshots)} snapshots drawn" if shown < len(snapshots) else f"{shown} snapshots"
    panels = "".join(_panel(key, label, unit, series[key]) for key, label, unit in SERIES)
    return f'<div class="charts" id="health">{panels}</div><p class="note">{esc(note)}, oldest on the left.</p>'
