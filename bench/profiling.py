"""Optional server profiling (``--profile``): py-spy samples the server process during a scenario.

Two sampling modes, chosen per scenario:
- ``cpu``: py-spy's default, threads that are running, minus stacks parked in a wait py-spy does not
  see as idle (``Condition.wait``, ``Queue.get``). Where the server's CPU, and so its throughput,
  goes (the loadTable-32 and multi-writer scenarios). C code below a Python frame (SQLite itself,
  a socket write) is charged to that frame.
- ``gil``: only the thread holding the GIL (py-spy ``--gil``): where the Python CPU of the one
  process goes, which is what bounds a single server process's throughput. C code that releases
  the GIL (SQLite's statements, fsync, socket writes) is not in it. Used for loadTable-32 and the
  multi-writer commit scenarios; ``layers`` in the summary charges each sample to a request layer.
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

import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path


class Recording:
    def __init__(self, pid: int, out: Path, mode: str) -> None:
        self.out, self.mode = out, mode
        cmd = ["py-spy", "record", "--pid", str(pid), "--format", "raw", "--output", str(out), "--function"]
        rate = os.environ.get("BENCH_PROFILE_RATE", "100")  # samples/s; more for a finer layer breakdown
        cmd += ["--subprocesses", "--rate", rate, "--nonblocking"]  # lighter: the server is not paused
        cmd += ["--idle"] if mode == "wall" else ["--gil"] if mode == "gil" else []
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
        if mode in ("cpu", "gil") and frames[-1].startswith(WAITS):
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
    layers: Counter[str] = Counter()
    for frames, count in stacks:
        layers[layer(frames)] += count
        inner = next((_name(f) for f in reversed(frames) if _is_ours(f)), "(outside catalog code)")
        ours[inner] += count
        leaves[_name(frames[-1])] += count
        for name in {_name(f) for f in frames}:
            inclusive[name] += count

    def pct(counter: Counter[str], keep=lambda _: True, top: int = top) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in counter.most_common() if keep(k)][:top]

    libs = ("catalog/", "pyiceberg/", "pydantic", "sqlalchemy/", "litestar/", "botocore/", "psycopg/", "uvicorn/")
    return {
        "mode": mode,
        "samples": total,
        "layers": pct(layers, top=len(LAYERS) + 1),
        "innermost_catalog_function": pct(ours),
        "leaf_functions": pct(leaves),
        "inclusive": pct(inclusive, lambda k: k.startswith(libs) and "__main__" not in k and "_run" not in k),
    }


# The layers of a request, each named by the frames that mark it: a sample is charged to the
# innermost marked frame on its stack (walking from the leaf), so a library call is charged to the
# layer that made it (logging under the access line is the access line; SQLite under the pointer
# read is the pointer read). Order matters only within one frame (first match).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("access line (format + write)", ("_access (catalog/api/observation.py",)),
    ("audit line (format + write)", ("_audit (catalog/api/observation.py",)),
    ("commit line (format + write)", ("log_landed (catalog/commit/engine.py",)),
    ("metrics (prometheus)", ("(prometheus_client/", "_step (catalog/commit/engine.py")),
    ("auth guard (require, audit record)", ("(catalog/api/guard.py",)),
    ("auth middleware (BearerAuth)", ("BearerAuth.__call__",)),
    ("idempotency middleware", ("Idempotency.__call__",)),
    ("commit: locks (serialised)", ("CommitEngine.serialised",)),
    ("commit: ownership checks", ("(catalog/database/ownership.py",)),
    ("commit: pointer CAS (SQL + COMMIT/fsync)", ("Pointers.swap_pointers", "Pointers._swap_pointers")),
    ("pointer read (SQL)", ("Pointers.get_entry",)),
    ("metadata file read/cache", ("MetadataFiles.read", "MetadataFiles.cached")),
    ("commit: write file (encode)", ("(catalog/metadata/encoding.py",)),
    ("commit: write file (create + fsync)", ("LocalStorage.write_new", "S3Storage.write_new")),
    ("commit: write (name, cache)", ("MetadataFiles.write", "next_location")),
    ("commit: apply updates + requirements", ("CommitEngine.apply",)),
    ("commit: engine loop (rest)", ("(catalog/commit/",)),
    ("body parse (pydantic)", ("wire.parse", "parse (catalog/api/wire.py")),
    ("thread hop (anyio to_thread)", ("blocking (catalog/api/wire.py", "(anyio/")),
    ("handler (rest: names, etag, result)", ("(catalog/api/entries.py",)),
    ("request id + response headers (observation)", ("RequestObservation.__call__",)),
    ("raw-path routing", ("RawPathRouting.__call__",)),
    ("framework (litestar: router, DI, response)", ("(litestar/",)),
    ("HTTP server (uvicorn, httptools, socket)", ("(uvicorn/", "(httptools", "(catalog/server/connections.py")),
)


_LINES = ("access line (format + write)", "audit line (format + write)", "commit line (format + write)")


def layer(frames: list[str]) -> str:
    """The layer ``frames`` (root first) is charged to. Time in ``logging`` goes to the line that
    called it (access, audit, commit), else to "other log lines"."""
    in_logging = False
    for frame in reversed(frames):
        if "(logging/" in frame:
            in_logging = True
            continue
        for name, marks in LAYERS:
            if any(m in frame for m in marks):
                return name if not in_logging or name in _LINES else "other log lines"
    return "other log lines" if in_logging else "other (event loop, threads, GC)"
