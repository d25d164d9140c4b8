"""``python -m bench --compare <git-ref>``: the working tree against a reference build, alternately,
in one run: the guard that keeps a change from slowing the headline numbers unnoticed.

The reference is the tree of ``<git-ref>`` extracted with ``git archive`` into a temporary
directory (nothing in the repository changes: no worktree, no checkout). Both servers run at the
same time, each from its own source (``PYTHONPATH``), each on its own database and warehouse, at
the default settings (plus ``--server-env``). Every headline scenario is then measured on one and
on the other in turn, ``--rounds`` times, the order flipped each round (ref, work / work, ref / ...),
so that both see the same machine: on a shared machine the absolute numbers drift, the ratios of
neighbouring windows much less. The summary gives each side's median, the ratio (work / ref; above 1
is faster) and the rounds' own ratios, and calls out a drop of more than ``DROP`` on a headline
number; the exit status is then 3.

Headline numbers: loadTable with 8 clients; commits of one writer round-robin over 100 tables;
16 writers over 100 tables; 16 appenders on one table (409 and retry); 16 writers of
``set-properties`` on one table (no requirement: the table's serial commit rate). Each window also
records the server's CPU per operation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import backends, clients, wire
from .scenarios import TABLES, WRITERS, Run, log

ROOT = Path(__file__).resolve().parent.parent
DROP = 0.10  # a headline ratio below 1 - DROP is called out
HEADLINES = ("load_8", "commit_1", "commit_16x100", "commit_hot_append", "commit_hot_props")
LABELS = {
    "load_8": "loadTable, 8 clients (/s)",
    "commit_1": "commit, 1 writer over 100 tables (/s)",
    "commit_16x100": "commit, 16 writers over 100 tables (/s)",
    "commit_hot_append": "commit, 16 appenders on ONE table, successful (/s)",
    "commit_hot_props": "set-properties, 16 writers on ONE table (/s)",
}


def extract(ref: str, into: Path) -> str:
    """The tree of ``ref`` under ``into`` (``git archive``); returns the commit id."""
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", "--format=tar", sha], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {sha} failed")
    return sha


def _dirty() -> bool:
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    return bool(out.stdout.strip())


class Side:
    """One server (reference or working tree) and its Run (setup, scenarios, lost-commit check)."""

    def __init__(self, label: str, src: Path, name: str, workdir: Path, args: argparse.Namespace) -> None:
        env = {**dict(args.server_env), **(dict(args.ref_server_env) if label == "ref" else {}), "PYTHONPATH": str(src)}
        self.label = label
        self.backend = backends.start(name, workdir, args.workers, env)
        args.only = {"load", "commit_scenarios"}
        self.run = Run(self.backend, args.plan, args, workdir / "profiles")
        self.run.setup()
        self.run.create("props", 10, 1)
        self.values: dict[str, list[float]] = {k: [] for k in HEADLINES}
        self.cpu_ms: dict[str, list[float]] = {k: [] for k in HEADLINES}
        self.statuses: dict[int, int] = {}

    def measure(self, key: str) -> float:
        run, p = self.run, self.run.plan
        names = [f"w{i:03d}" for i in range(TABLES)]
        if key == "load_8":
            args = {"url": run.url, "path": wire.table_path("load"), "client": run.args.client}
            results, cpu = run.scenario("load-8", clients.load_worker, [args] * 8, p.load_s, 10**7)
            ops = sum(len(r["lat"]) for r in results)
            rate = ops / max(r["elapsed"] for r in results)
        elif key in ("commit_1", "commit_16x100", "commit_hot_append"):
            groups = {
                "commit_1": [names],
                "commit_16x100": [names[w::WRITERS] for w in range(WRITERS)],
                "commit_hot_append": [["hot"]] * WRITERS,
            }[key]
            window = {"commit_1": p.single_s, "commit_16x100": p.distinct_s, "commit_hot_append": p.hot_s}[key]
            s = run.commits(key, groups, window, 10**6, None)
            rate, ops, cpu = s["rate"], s["attempts"], s["server_cpu_ms"] * s["attempts"] / 1000
        else:
            args = {"url": run.url, "path": wire.table_path("props"), "client": run.args.client}
            results, cpu = run.scenario(key, clients.properties_worker, [args] * WRITERS, p.distinct_s, 10**6)
            for r in results:
                if r["errors"]:
                    raise RuntimeError(f"{self.label} {key}: unexpected answers: {r['errors']}")
            ops = sum(len(r["lat"]) for r in results)
            rate = ops / max(r["elapsed"] for r in results)
        self.values[key].append(rate)
        self.cpu_ms[key].append(1000 * cpu / max(1, ops))
        return rate

    def stop(self) -> dict:
        try:
            self.run.verify()
        finally:
            self.run.http.close()
            self.backend.stop()
        return self.run.r["integrity"]


def compare(args: argparse.Namespace, plan) -> int:
    args.plan = plan
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    work = Path(tempfile.mkdtemp(prefix="catalog-compare-"))
    started = time.perf_counter()
    lines: list[str] = []
    dropped: list[str] = []
    try:
        sha = extract(args.compare, work / "ref-src")
        ref_label = f"{args.compare} ({sha[:9]})"
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True
        )
        work_label = f"working tree ({head.stdout.strip()}{', uncommitted changes' if _dirty() else ''})"
        log(f"compare: {ref_label} vs {work_label}, backends {names}, {args.rounds} rounds, work dir {work}")
        for name in names:
            sides: list[Side] = []
            try:
                sides.append(Side("ref", work / "ref-src", name, work / name / "ref", args))
                sides.append(Side("work", ROOT, name, work / name / "work", args))
            except backends.ServiceUnavailable as e:
                log(f"[{name}] unavailable: {e}")
                for s in sides:
                    s.backend.stop()
                continue
            ref, cur = sides
            integrity: dict[str, dict] = {}
            try:
                for rnd in range(args.rounds):
                    order = (ref, cur) if rnd % 2 == 0 else (cur, ref)
                    for key in HEADLINES:
                        got = {s.label: s.measure(key) for s in order}
                        log(
                            f"[{name}] round {rnd + 1} {key}: ref {got['ref']:,.1f}/s, work {got['work']:,.1f}/s, "
                            f"ratio {got['work'] / got['ref']:.2f}"
                        )
            finally:
                for s in sides:
                    try:
                        integrity[s.label] = s.stop()
                    except Exception as e:  # noqa: BLE001 - report what we have
                        integrity[s.label] = {"error": repr(e)}
            table, drops = summary(name, ref, cur)
            dropped += drops
            lines += [f"## {name}", "", *table, ""]
            for label, i in integrity.items():
                lines.append(f"- {label}: integrity {i}")
            lines.append("")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    title = (
        f"# bench --compare {ref_label} vs {work_label}, {dt.datetime.now():%Y-%m-%d %H:%M}, "
        f"{os.uname().nodename} ({os.cpu_count()} CPU), {'quick' if args.quick else 'full'} windows, "
        f"{args.rounds} rounds alternating"
        + "".join(f", {k}={v}" for k, v in args.server_env)
        + "".join(f", ref only: {k}={v}" for k, v in args.ref_server_env)
    )
    verdict = (
        f"**DROP of more than {DROP:.0%} on: {', '.join(dropped)}**"
        if dropped
        else f"No headline number dropped by more than {DROP:.0%}."
    )
    text = "\n".join([title, "", *lines, verdict, "", f"Wall time {time.perf_counter() - started:.0f} s."]) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    # The latest guard run replaces the previous one (its title names both commits and the date); older
    # runs are in git history: git log -p -- bench/results/compare.md
    out = args.out / "compare.md"
    out.write_text(text)
    print("\n" + text + f"\nwritten {out}")
    return 3 if dropped else 0


def summary(name: str, ref: Side, cur: Side) -> tuple[list[str], list[str]]:
    rows = [
        "| Headline | ref (median /s) | work (median /s) | work / ref | per round | server CPU ms/op ref -> work |",
        "|---|---|---|---|---|---|",
    ]
    drops = []
    for key in HEADLINES:
        a, b = ref.values[key], cur.values[key]
        if not a or not b:
            continue
        ratio = statistics.median(b) / statistics.median(a) if statistics.median(a) else math.nan
        rounds = ", ".join(f"{y / x:.2f}" if x else "n/a" for x, y in zip(a, b, strict=False))
        flag = ""
        if ratio < 1 - DROP:
            flag = " **DROP**"
            drops.append(f"{name} {LABELS[key]} ({ratio:.2f}x)")
        cpu = f"{statistics.median(ref.cpu_ms[key]):.3f} -> {statistics.median(cur.cpu_ms[key]):.3f}"
        rows.append(
            f"| {LABELS[key]} | {statistics.median(a):,.1f} | {statistics.median(b):,.1f} | "
            f"{ratio:.2f}{flag} | {rounds} | {cpu} |"
        )
    return rows, drops


if __name__ == "__main__":  # pragma: no cover - use python -m bench --compare
    sys.exit("use: python -m bench --compare <git-ref>")
