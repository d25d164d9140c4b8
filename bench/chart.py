"""The chart of a run (matplotlib, Agg): throughput vs concurrency, commit throughput, latency
distributions, latency vs history size."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .report import _get


def chart(results: dict[str, dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = {n: r for n, r in results.items() if r.get("status") == "ok"}
    styles = {"sqlite": "-", "postgres-s3": "--"}
    if ok and all(set(r) & {"load", "commit_single", "growth"} == set() for r in ok.values()):
        fig, (bar, cdf) = plt.subplots(1, 2, figsize=(15, 5.5))  # --only hot: its two panels alone
        fig.suptitle(title, fontsize=10)
        _hot_panels(bar, cdf, ok, styles)
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        return
    fig, axes = plt.subplots(4, 2, figsize=(15, 19))
    fig.suptitle(title, fontsize=11)

    ax = axes[0][0]
    for n, r in ok.items():
        levels = sorted(int(c) for c in r.get("load", {}))
        ax.plot(levels, [r["load"][str(c)]["rps"] for c in levels], styles.get(n, "-"), marker="o", label=n)
    ax.axhline(3000, color="grey", lw=0.8, ls=":", label="target 3,000/s")
    ax.set(title="loadTable throughput vs concurrent clients", xlabel="clients", ylabel="requests/s", xscale="log")
    ax.set_xticks([1, 8, 32], ["1", "8", "32"])
    ax.legend()

    ax = axes[0][1]
    labels, values, colors = [], [], []
    for i, (n, r) in enumerate(ok.items()):
        b = r.get("baselines", {})
        for label, v in (
            ("1 writer", _get(r, "commit_single", "rate")),
            ("16 writers / 100 tables", _get(r, "commit_distinct", "rate")),
            ("16 writers / 1 table", _get(r, "commit_hot", "rate")),
            ("hot bound 1/(write+CAS)", b.get("hot_bound_per_s")),
            ("SqlCatalog 1 writer", _get(b, "sqlcatalog_1", "rate")),
            ("SqlCatalog 16 writers", _get(b, "sqlcatalog_16", "rate")),
        ):
            labels.append(f"{n}\n{label}")
            values.append(v or math.nan)
            colors.append(f"C{i}")
    ax.barh(range(len(values)), values, color=colors)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.axvline(400, color="grey", lw=0.8, ls=":")
    ax.set(title="commit throughput (dotted: 400/s target)", xlabel="commits/s (log)", xscale="log")
    ax.invert_yaxis()

    ax = axes[1][0]
    for n, r in ok.items():
        for c, samples in sorted(r.get("raw", {}).get("load", {}).items(), key=lambda kv: int(kv[0])):
            _cdf(ax, samples, f"{n} {c} clients", styles.get(n, "-"))
    ax.axvline(20, color="grey", lw=0.8, ls=":")
    ax.set(title="loadTable latency distribution", xlabel="ms (log)", ylabel="fraction <= x", xscale="log")
    ax.legend(fontsize=7)

    ax = axes[1][1]
    for n, r in ok.items():
        raw = r.get("raw", {})
        for key, label in (
            ("commit_single", "1 writer"),
            ("commit_distinct", "16 writers/100 tables"),
            ("commit_hot", "hot table (with retries)"),
            ("raw_cas_1", "raw CAS"),
            ("sqlcatalog_1", "SqlCatalog 1 writer"),
        ):
            if raw.get(key):
                _cdf(ax, raw[key], f"{n} {label}", styles.get(n, "-"))
    ax.set(title="commit latency distribution", xlabel="ms (log)", ylabel="fraction <= x", xscale="log")
    ax.legend(fontsize=7)

    ax = axes[2][0]
    for n, r in ok.items():
        g = r.get("growth", {})
        keys = [k for k in ("10", "1k", "10k", "50k") if k in g]
        xs = [g[k]["snapshots"] for k in keys]
        ax.plot(xs, [g[k]["commit"]["p50_ms"] for k in keys], styles.get(n, "-"), marker="o", label=f"{n} commit p50")
        ax.plot(xs, [g[k]["load"]["p50_ms"] for k in keys], styles.get(n, "-"), marker="s", label=f"{n} load p50")
    ax.set(title="growth: latency vs snapshots in history", xlabel="snapshots", ylabel="ms", xscale="log", yscale="log")
    ax.legend(fontsize=7)

    ax = axes[2][1]
    for n, r in ok.items():
        raw = r.get("raw", {})
        for key in ("10", "1k", "10k", "50k", "500c", "2000c"):
            samples = raw.get("growth", {}).get(key, {}).get("commit")
            if samples:
                _cdf(ax, samples, f"{n} commit, {key}", styles.get(n, "-"))
    ax.set(title="growth: commit latency distribution", xlabel="ms (log)", ylabel="fraction <= x", xscale="log")
    ax.legend(fontsize=7)

    _hot_panels(axes[3][0], axes[3][1], ok, styles)

    for ax in axes.flat:  # a scenario group left out (--only): an empty panel, not a failed chart
        lim = ax.dataLim
        if not (math.isfinite(lim.x1) and lim.x1 > 0):
            ax.set_xscale("linear")
        if not (math.isfinite(lim.y1) and lim.y1 > 0):
            ax.set_yscale("linear")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _hot_panels(bar: Any, cdf: Any, ok: dict[str, dict], styles: dict[str, str]) -> None:
    """Hot-table appends: successful appends/s per (backend, writers, rebase) and latency CDFs."""
    ax = bar
    labels, values, colors = [], [], []
    for i, (n, r) in enumerate(ok.items()):
        for key, h in (r.get("hot_appends") or {}).items():
            writers, mode = key.split("_")
            labels.append(f"{n}\n{writers} writers, rebase {mode}")
            values.append(h["rate"] or math.nan)
            colors.append(f"C{2 * i + (mode == 'on')}")
    bars = ax.barh(range(len(values)), values, color=colors)
    ax.bar_label(bars, fmt="%.1f/s", fontsize=7)
    ax.set_yticks(range(len(values)), labels, fontsize=7)
    ax.set(title="hot appends (real manifest lists) on ONE table", xlabel="successful appends/s")
    ax.invert_yaxis()

    ax = cdf
    for n, r in ok.items():
        for key, samples in (r.get("raw", {}).get("hot_appends") or {}).items():
            writers, mode = key.split("_")
            _cdf(ax, samples, f"{n} {writers} writers, rebase {mode}", styles.get(n, "-"))
    ax.axvline(250, color="grey", lw=0.8, ls=":")
    ax.set(
        title="hot appends: commit latency (first attempt to success; dotted: 250 ms)",
        xlabel="ms (log)",
        ylabel="fraction <= x",
        xscale="log",
    )
    ax.legend(fontsize=7)


def _cdf(ax: Any, samples_ms: list[float], label: str, style: str) -> None:
    xs = sorted(v for v in samples_ms if v > 0)
    if xs:
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], style, lw=1.2, label=label)
