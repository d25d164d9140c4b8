"""The benchmark: ``python -m bench [--quick] [--backends sqlite,postgres-s3] [--profile]``.

Per backend it starts the server (``python -m catalog serve``, its own process), creates the tables
over HTTP, drives the scenarios from forked client processes, verifies that no acknowledged commit
was lost, measures the baselines, and stops everything. Then it writes
``bench/results/<scenario>.md`` (the one table; the date, machine and commit in its title), ``.png``
(the chart) and ``bench/results/raw/<scenario>-<date>-<time>.json`` (every number, latency samples
included; git ignores ``raw/``), and prints the table. A run replaces the previous result of its
scenario: older runs are in git history (``git log -p -- bench/results/<scenario>.md``). See
``bench/README.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python bench/run.py` as well as `python -m bench`
    sys.path.insert(0, str(ROOT))


from bench import backends, chart, clients, profiling, report  # noqa: E402
from bench.scenarios import DEFAULT, FULL, PARTS, QUICK, SHORT, Plan, Run, log  # noqa: E402


def run_backend(name: str, plan: Plan, args: argparse.Namespace, workdir: Path, prof_dir: Path) -> dict:
    started = time.perf_counter()
    try:
        backend = backends.start(name, workdir / name, args.workers, dict(args.server_env))
    except backends.ServiceUnavailable as e:
        log(f"[{name}] unavailable: {e}")
        return {"status": f"unavailable: {str(e).splitlines()[0]}"}
    log(f"[{name}] server {backend.server.url} pid {backend.pid} up in {time.perf_counter() - started:.1f}s")
    run = Run(backend, plan, args, prof_dir)
    try:
        run.setup()
        for part in PARTS:
            if part in args.only:
                getattr(run, part)()
                run.r.setdefault("server_rss_mb", {})[part] = clients.rss_mb(backend.pid)
        run.verify()
    except Exception:  # noqa: BLE001 - report what we have; the log says why the rest is missing
        run.r["status"] = "error"
        run.r["error"] = traceback.format_exc()[-3000:]
        log(f"[{name}] FAILED:\n{run.r['error']}\nserver log tail:\n{_tail(backend.server.log)}")
    finally:
        run.http.close()
        backend.stop()
    run.r["server_log_errors"] = _count_errors(backend.server.log)
    run.r["wall_s"] = time.perf_counter() - started
    log(f"[{name}] done in {run.r['wall_s']:.0f}s")
    return run.r


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def _count_errors(path: Path) -> int:
    if not path.exists():
        return 0
    # the server's JSON log writes "level":"error" (lower case, no space)
    return sum(
        1
        for line in path.read_text(errors="replace").splitlines()
        if '"level":"error"' in line.replace(" ", "").lower()
    )


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    import pyiceberg

    return {
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "pyiceberg": pyiceberg.__version__,
        "platform": platform.platform(),
    }


def scenario_name(only: set[str]) -> str:
    """What a run measured, which names its result file: ``all`` for the default groups, else the groups'
    short names joined by ``-`` (``hot``, ``care-events``, ...)."""
    if only == {SHORT[p] for p in DEFAULT}:
        return "all"
    return "-".join(sorted(short for short, part in SHORT.items() if part in only))


def output_stem(out: Path, scenario: str) -> Path:
    """``<out>/<scenario>``: the run replaces the previous result of its scenario (git history keeps it)."""
    return out / scenario


def raw_path(stem: Path, started: dt.datetime) -> Path:
    """The run's raw JSON: ``<out>/raw/<scenario>-<date>-<time>.json``, a folder git ignores (only .md and
    .png are kept)."""
    return stem.parent / "raw" / f"{stem.name}-{started:%Y-%m-%d-%H%M}.json"


def commit_label() -> str:
    """The commit the run measured: its short hash, and whether the working tree had changes."""
    import subprocess

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=9", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"], capture_output=True, text=True)
    return (head.stdout.strip() or "unknown") + (", uncommitted changes" if dirty.stdout.strip() else "")


def _parts(text: str) -> set[str]:
    wanted = {p.strip() for p in text.split(",") if p.strip()}
    if not wanted or wanted - set(SHORT):
        raise argparse.ArgumentTypeError(f"choose from {', '.join(SHORT)}")
    return {SHORT[p] for p in wanted}


def _setting(text: str) -> tuple[str, str]:
    name, eq, value = text.partition("=")
    if not eq or not name.startswith("CATALOG_"):
        raise argparse.ArgumentTypeError(f"expected CATALOG_NAME=VALUE, got {text!r}")
    return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (~2 minutes in all)")
    parser.add_argument(
        "--backends",
        default=None,
        help="comma-separated: sqlite, postgres-s3 (default: both, sqlite with --compare; one that cannot "
        "start is skipped)",
    )
    parser.add_argument("--workers", type=int, default=1, help="server processes (CATALOG_WORKERS, default 1)")
    parser.add_argument(
        "--client",
        choices=("http", "requests"),
        default="http",
        help="client library: http.client (default, cheapest) or requests.Session",
    )
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="extra server setting, repeatable (e.g. CATALOG_DB_POOL_SIZE=40)",
    )
    parser.add_argument(
        "--only",
        default=",".join(DEFAULT),
        type=_parts,
        help="scenario groups to run, comma-separated: load, commits, hot, growth, baselines, maintenance, "
        "compaction, events, warehouses, maintenance-scale, footprint, weed "
        "(default: all but maintenance-scale, footprint and weed)",
    )
    parser.add_argument(
        "--care-appends",
        type=int,
        default=None,
        metavar="N",
        help="appends of the care group's tables (default 10,000; 2,000 with --quick)",
    )
    parser.add_argument(
        "--footprint-commits",
        type=int,
        default=None,
        metavar="N",
        help="commits of the footprint group's table (default 10,000; 2,000 with --quick)",
    )
    parser.add_argument(
        "--footprint-property",
        action="append",
        default=[],
        type=lambda t: tuple(t.split("=", 1)) if "=" in t else parser.error(f"expected KEY=VALUE, got {t!r}"),
        metavar="KEY=VALUE",
        help="a table property of the footprint group's table, repeatable (none by default)",
    )
    parser.add_argument("--profile", action="store_true", help="record py-spy profiles of the server per scenario")
    parser.add_argument(
        "--compare",
        metavar="GIT_REF",
        help="measure the headline scenarios on GIT_REF's build and on the working tree, alternately, and "
        "print the ratios (bench/compare.py; default backend sqlite)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="--compare, --only weed and --only warehouses: rounds of alternation (default 3)",
    )
    parser.add_argument(
        "--ref-server-env",
        action="append",
        default=[],
        type=_setting,
        metavar="NAME=VALUE",
        help="--compare: a server setting for the reference side only (e.g. the same ref at another log level)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="results directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (server logs, databases)")
    args = parser.parse_args(argv)
    if args.backends is None:
        args.backends = "sqlite" if args.compare else "sqlite,postgres-s3"
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    for n in names:
        if n not in backends.NAMES:
            parser.error(f"unknown backend {n!r}; choose from {', '.join(backends.NAMES)}")
    if args.profile and not profiling.available():
        parser.error("--profile needs py-spy on PATH: pip install py-spy")

    plan = QUICK if args.quick else FULL
    if args.compare:
        from bench import compare

        return compare.compare(args, plan)
    started = time.perf_counter()
    info = machine()
    args.out.mkdir(parents=True, exist_ok=True)
    started_at = dt.datetime.now()
    stem = output_stem(args.out, scenario_name(args.only))
    raw = raw_path(stem, started_at)
    prof_dir = stem.parent / f"{stem.name}-profiles"
    if args.profile:
        prof_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    log(
        f"mode {'quick' if args.quick else 'full'}, backends {names}, work dir {workdir}, "
        f"load avg {info['load_average_at_start']}"
    )
    results: dict[str, dict] = {}
    try:
        for n in names:
            results[n] = run_backend(n, plan, args, workdir, prof_dir)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    wall = time.perf_counter() - started
    info["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]

    title = (
        f"iceberg-catalog benchmark, {'quick' if args.quick else 'full'} mode, {started_at:%Y-%m-%d %H:%M}, "
        f"commit {commit_label()}, "
        f"{info['host']} ({info['cpus']} CPU, {info['cpu_model']}), server workers={args.workers}, "
        f"client={args.client}{', PROFILED (py-spy attached)' if args.profile else ''}"
        + "".join(f", {k}={v}" for k, v in args.server_env)
    )
    tbl = report.table(results)
    md = [
        f"# {title}",
        "",
        tbl,
        "",
        f"Wall time {wall:.0f} s. Load average {info['load_average_at_start']} at start, "
        f"{info['load_average_at_end']} at end. Command: `{' '.join(['python -m bench', *(argv or sys.argv[1:])])}`.",
        f"Raw numbers: `raw/{raw.name}` (not committed); chart: `{stem.name}.png`. "
        "What each row means: `bench/README.md`.",
    ]
    for n, r in results.items():
        if r.get("status") == "error":
            md += ["", f"**{n} failed**:", "```", r.get("error", "")[-1500:], "```"]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n")
    args.only = sorted(args.only)
    payload = {
        "title": title,
        "machine": info,
        "plan": asdict(plan),
        "wall_s": wall,
        "args": vars(args) | {"out": str(args.out)},
        "results": results,
    }
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(json.dumps(payload, indent=1, default=str, allow_nan=True))
    written = f".md, {raw}"
    stem.with_suffix(".png").unlink(missing_ok=True)  # the previous run's chart is not this run's
    try:
        chart.chart(results, stem.with_suffix(".png"), title)
        written += ", .png"
    except Exception:  # noqa: BLE001 - the numbers matter more than the picture
        log(f"chart failed (install the bench extra for matplotlib):\n{traceback.format_exc()}")
    if args.profile:
        write_profiles(results, prof_dir)
    print(f"\n{title}\n\n{tbl}\n\nwall time {wall:.0f} s; written {stem}{written}")
    fine = all(r.get("status") == "ok" or r.get("status", "").startswith("unavailable") for r in results.values())
    return 0 if fine else 1


def write_profiles(results: dict[str, dict], prof_dir: Path) -> None:
    """A readable summary of every recording (``summary.md`` next to the .txt files)."""
    lines = [
        "# Server profiles",
        "",
        profiling.__doc__.split("\n\n", 1)[1].strip(),
        "",
        "Percentages are of the recording's (filtered) samples.",
        "",
    ]
    for n, r in results.items():
        for scenario, s in (r.get("profiles") or {}).items():
            if not s or "error" in s:
                lines += [f"## {n} / {scenario}: no profile ({(s or {}).get('error', 'py-spy failed')})", ""]
                continue
            lines += [f"## {n} / {scenario} ({s['mode']}, {s['samples']} samples)", ""]
            per_op = _per_op_ms(r, scenario, s["mode"])
            if s.get("layers"):
                unit = "latency" if s["mode"] == "wall" else "server CPU"
                lines += [
                    f"| layer | % | us per request ({unit} {per_op:.3f} ms/op) |" if per_op else "| layer | % | |",
                    "|---|---|---|",
                ]
                lines += [
                    f"| {k} | {v} | {v * per_op * 10:.0f} |" if per_op else f"| {k} | {v} | |" for k, v in s["layers"]
                ]
                lines += [""]
            for key, head in (
                ("innermost_catalog_function", "innermost catalog function"),
                ("leaf_functions", "leaf function (self time)"),
                ("inclusive", "inclusive (catalog and libraries)"),
            ):
                lines += [f"| {head} | % |", "|---|---|"] + [f"| `{k}` | {v} |" for k, v in s[key]] + [""]
    (prof_dir / "summary.md").write_text("\n".join(lines) + "\n")


def _per_op_ms(r: dict, scenario: str, mode: str) -> float | None:
    """What one operation of ``scenario`` cost: server CPU per op (cpu mode) or mean latency (wall)."""
    if scenario.startswith("load-"):
        s = (r.get("load") or {}).get(scenario.split("-", 1)[1]) or {}
    else:
        s = r.get(scenario) or {}
    value = s.get("mean_ms") if mode == "wall" else s.get("server_cpu_ms")
    return value if isinstance(value, (int, float)) and value == value else None


if __name__ == "__main__":
    sys.exit(main())
