"""Optional server profiling (``--profile``): py-spy samples the server process during a scenario.

Two sampling modes, chosen per scenario:
- ``cpu``: py-spy's default, threads that are running, minus stacks parked in a wait py-spy does not
  see as idle (``Condition.wait``, ``Queue.get``). Where the server's CPU, and so its throughput,
  goes (the loadTable-32 and multi-writer scenarios). C code below a Python frame (SQLite itself,
  a socket write) is charged to that frame.
- ``wall``: every thread, idle ones included (``--idle``), filtered to stacks inside a request
  (any ``catalog/`` frame other than the CLI): where one request's latency goes, waits included
  (fsync, database locks, S3 round trips, waiting for the GIL). Used for single-writer commits.

"innermost catalog function": the deepest frame of catalog code on the sampled stack; library time
below it is charged to it (``send_with_id``: writing the response; ``wire.blocking``: the hop to
the worker thread; ``BearerAuth.__call__``: the framework between middleware and handler).

Each recording is kept as py-spy's collapsed stacks (``.txt``: open it in speedscope, or render it
with flamegraph.pl / inferno) and summarised: innermost catalog function per sample ("which step of
ours"), and the hottest leaf functions ("what actually burns the time").
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path


class Recording:
    def __init__(self, pid: int, out: Path, mode: str) -> None:
        self.out, self.mode = out, mode
        cmd = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", str(out), "--function"]
        cmd += ["--subprocesses", "--rate", "100", "--nonblocking"]  # lighter: the server is not paused
        cmd += ["--idle"] if mode == "wall" else []
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> dict | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return None
        if not self.out.exists():
            return {"error": err.decode(errors="replace")[-500:]}
        return summarize(self.out, self.mode)


WAITS = ("Condition.wait ", "Queue.get ", "Event.wait ", "EpollSelector.select ", "BaseSelector.select ")


def available() -> bool:
    return shutil.which("py-spy") is not None


def _stacks(raw: Path, mode: str) -> list[tuple[list[str], int]]:
    out = []
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if mode == "wall" and not any(_is_ours(f) for f in frames):
            continue  # an idle thread or the idle event loop
        if mode == "cpu" and frames[-1].startswith(WAITS):
            continue  # a thread py-spy did not recognise as idle: parked worker threads, the pool queue
        out.append((frames, int(count)))
    return out


def _is_ours(frame: str) -> bool:
    return "(catalog/" in frame and "catalog/__main__.py" not in frame


def _name(frame: str) -> str:
    """'func (pkg/module.py:12)' -> 'pkg/module.py:func'."""
    func, _, where = frame.partition(" (")
    return f"{where.rsplit(':', 1)[0]}:{func}" if where else func


def summarize(raw: Path, mode: str, top: int = 15) -> dict:
    stacks = _stacks(raw, mode)
    total = sum(c for _, c in stacks) or 1
    ours: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for frames, count in stacks:
        inner = next((_name(f) for f in reversed(frames) if _is_ours(f)), "(outside catalog code)")
        ours[inner] += count
        leaves[_name(frames[-1])] += count
        for name in {_name(f) for f in frames}:
            inclusive[name] += count

    def pct(counter: Counter[str], keep=lambda _: True) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common() if keep(k)][:top]

    libs = ("catalog/", "pyiceberg/", "pydantic", "sqlalchemy/", "litestar/", "botocore/", "psycopg/", "uvicorn/")
    return {
        "mode": mode,
        "samples": total,
        "innermost_catalog_function": pct(ours),
        "leaf_functions": pct(leaves),
        "inclusive": pct(inclusive, lambda k: k.startswith(libs) and "__main__" not in k and "_run" not in k),
    }
