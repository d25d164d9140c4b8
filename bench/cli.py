"""How fast the command line answers: ``python -m bench.cli [--runs N] [--src DIR ...]``.

Starts a local SQLite server (``tests.support.start_server``) with one dropped table, then runs each
command N times (default 10), each in a new process as a user would (``python -m catalog ...``), and
prints the median and the fastest wall time of each beside its budget on an idle machine:

- ``--help``: 0.3 s (argparse only: no server stack, no database, no pyiceberg);
- ``tables dropped --uri <server>``: 0.6 s (``requests`` and ``rich``, one management call).

It prints; it never fails on timing (the machine may be shared and its speed varies). A command that
exits non-zero is an error (exit 1). ``--src DIR`` (repeatable) times other source trees (e.g.
``git archive <ref> | tar -x -C DIR``), alternately, against the same server; the default is this tree.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
BUDGETS = {"--help": 0.3, "tables dropped": 0.6}  # seconds, median, on an idle machine


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command per source (default 10)")
    parser.add_argument("--src", action="append", default=[], help="source tree to time (repeatable)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.support import start_server

    sources = [str(Path(s).resolve()) for s in args.src] or [str(ROOT)]
    with tempfile.TemporaryDirectory(prefix="catalog-bench-cli-") as tmp:
        server = start_server(Path(tmp) / "server")
        try:
            _seed(server.url)
            commands = {"--help": ["--help"], "tables dropped": ["tables", "dropped", "--uri", server.url]}
            times: dict[tuple[str, str], list[float]] = {(name, src): [] for name in commands for src in sources}
            for _ in range(args.runs):  # alternately, so that a busy moment hits every source alike
                for name, src in times:
                    times[name, src].append(_run(src, commands[name]))
        finally:
            server.stop()
    print(f"{'command':<16} {'median':>8} {'fastest':>8} {'budget (idle)':>14}  source")
    for (name, src), values in times.items():
        median = statistics.median(values)
        flag = "" if median <= BUDGETS[name] else "  (over budget)"
        print(f"{name:<16} {median:>7.3f}s {min(values):>7.3f}s {BUDGETS[name]:>13.1f}s  {src}{flag}")
    print(f"{args.runs} runs each; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return 0


def _seed(url: str) -> None:
    """A namespace and a dropped table, so that ``tables dropped`` has a row to print."""
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    for method, path, body in (
        ("POST", "/v1/namespaces", {"namespace": ["bench"]}),
        ("POST", "/v1/namespaces/bench/tables", {"name": "gone", "schema": schema}),
        ("DELETE", "/v1/namespaces/bench/tables/gone", None),
    ):
        response = requests.request(method, url + path, json=body, timeout=30)
        response.raise_for_status()


def _run(src: str, argv: list[str]) -> float:
    """One command in a new process from ``src``: its wall time, start to exit."""
    env = {**os.environ, "PYTHONPATH": src}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "catalog", *argv], cwd=src, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        command = " ".join(argv)
        raise SystemExit(f"python -m catalog {command} (in {src}) exited {done.returncode}:\n{done.stderr[-2000:]}")
    return elapsed


if __name__ == "__main__":
    sys.exit(main())
