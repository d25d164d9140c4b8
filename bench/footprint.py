"""A table's footprint on storage after many commits with table maintenance at its defaults (``--only footprint``).

Issue 43, item 3: "a table after 10,000 commits with care on at default settings holds at most 2x the
bytes and files its live metadata references". Per backend, on a server of its own
(``Backend.own_server``: the backend's services, its own catalog database and warehouse) at the
server's DEFAULT settings but one: ``CATALOG_MAINTENANCE_WORKERS=1``, the server's own default, which
the test helper that starts the bench's servers sets to 0 (``tests/support.py``). That is all table
care needs to run in the process (its workers and its scheduler start with it). The log level is
set back to the server's default (``info``; ``own_server`` would make it ``warning``). Nothing else:
a scheduler round every 60 s, snapshot expiry on a table whose pointer moved at most hourly or
every 1,000 commits, metadata files that fell out of the log deleted by the expiry at once when
their version is at most the current file's (else after 600 s), Iceberg's default policy (snapshots
younger than 5 days are kept, so none expires here), a writer grace of an hour.

One table (no properties of its own) takes ``commits`` appends (10,000; 2,000 with ``--quick``)
from one client, one commit each, each with a real manifest list naming a real manifest of its own
that names the table's one data file (``bench/jobs.py``'s ``Files``, ``Table``: the same appends as
the care group's ``care_on``). Every ``SAMPLE_EVERY`` commits (and after the last) the bench lists
everything under the table's location (and ``write.metadata.path`` if set) and compares it with what
the table's live metadata references, by the bench's own naming of manifests (a list
``snap-care-N.avro`` names ``care-N-m0.avro``). After the last commit it waits for care to settle:
one scheduler round (1.2x the interval: the round is jittered +-20%) and then until no task is queued
or running, at most ``SETTLE_INTERVALS`` intervals in all. Then the final measurement, this time
reading every manifest list and every manifest the metadata reaches (pyiceberg's Avro readers; a
manifest whose bytes were already decoded is not decoded again), and the maintenance tasks the table
got with what each deleted.

Referenced ("live"): the current metadata file, the files in its metadata log, each snapshot's manifest
list, the manifests those lists name, the data and delete files those manifests hold as live, and
statistics files. Under the table: every object under the table's location (recursively) and its
``write.metadata.path``. The row: files and bytes under / referenced (target <= 2x each), the
``*.metadata.json`` under the table against the 1 + log length the metadata names, and the peak of
each seen at the samples.
"""

from __future__ import annotations

import hashlib
import io
import os
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import orjson

from . import wire
from .care import MAINTENANCE, PREFETCH, UPLOAD_THREADS, Store, Table, _errors, settle

# What care needs to run in the server's process at all: the server's own default (tests/support.py
# starts servers with 0). The log level back to the server's default (own_server sets warning).
SERVER_ENV = {"CATALOG_MAINTENANCE_WORKERS": "1", "CATALOG_LOG_LEVEL": "info"}
INTERVAL_S = 60.0  # the server's default CATALOG_MAINTENANCE_INTERVAL_SECONDS (read from the env if set)
SETTLE_INTERVALS = 3  # the most the bench waits for care after the last commit, in scheduler intervals
SAMPLE_EVERY = 1_000
TARGET = 2.0
SUFFIX = ".metadata.json"


# -- storage walk and reads -----------------------------------------------------------------------


def tree(store: Store, prefix: str) -> dict[str, int]:
    """Every file under ``prefix`` (recursively) with its size; {} when there is no such directory."""
    out: dict[str, int] = {}
    if store.s3 is not None:
        bucket, key = Store._key(prefix)
        pages = store.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key.rstrip("/") + "/")
        for page in pages:
            for item in page.get("Contents") or ():
                out[f"s3://{bucket}/{item['Key']}"] = int(item["Size"])
        return out
    scheme = "file://" if prefix.startswith("file:") else ""
    base = Store.path(prefix).rstrip("/")
    for root, _, names in os.walk(base):
        for name in names:
            path = f"{root}/{name}"
            try:
                out[f"{scheme}{path}"] = os.path.getsize(path)
            except FileNotFoundError:  # deleted while we walked
                pass
    return out


def read(store: Store, location: str) -> bytes:
    if store.s3 is not None:
        bucket, key = Store._key(location)
        return store.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    with open(Store.path(location), "rb") as f:
        return f.read()


class _Bytes:
    """A pyiceberg ``InputFile`` over bytes already read (and a ``FileIO`` that serves them)."""

    def __init__(self, location: str, data: bytes) -> None:
        self.location, self.data = location, data

    def __len__(self) -> int:
        return len(self.data)

    def exists(self) -> bool:
        return True

    def open(self, seekable: bool = True) -> io.BytesIO:
        return io.BytesIO(self.data)

    def new_input(self, location: str) -> _Bytes:
        return self


def _listed_manifests(store: Store, listing: str) -> list[str]:
    from pyiceberg.manifest import read_manifest_list

    return [m.manifest_path for m in read_manifest_list(_Bytes(listing, read(store, listing)))]


def _live_files(store: Store, manifest: str, decoded: dict[str, list[str]]) -> list[str]:
    """The live (not deleted) data and delete files ``manifest`` holds; identical bytes decoded once."""
    from pyiceberg.manifest import ManifestContent, ManifestFile

    data = read(store, manifest)
    digest = hashlib.sha256(data).hexdigest()
    if digest not in decoded:
        m = ManifestFile.from_args(manifest_path=manifest, content=ManifestContent.DATA)
        decoded[digest] = [e.data_file.file_path for e in m.fetch_manifest_entry(_Bytes(manifest, data))]
    return decoded[digest]


# -- the measurement ------------------------------------------------------------------------------


def table_dirs(metadata: dict) -> list[str]:
    """The table's location and its write.metadata.path when set (and not inside it)."""
    location = metadata["location"].rstrip("/")
    dirs = [location]
    custom = (metadata.get("properties") or {}).get("write.metadata.path")
    if custom and not custom.rstrip("/").startswith(location + "/"):
        dirs.append(custom.rstrip("/"))
    return dirs


def referenced(
    store: Store, loaded: dict, full: bool, pool: ThreadPoolExecutor | None = None
) -> tuple[dict[str, str], dict[str, int]]:
    """What the live metadata references: {location: kind}, and how many of each kind. ``full``
    reads every manifest list and manifest; otherwise manifests follow the bench's naming and the
    data file is the bench's one."""
    meta = loaded["metadata"]
    refs: dict[str, str] = {loaded["metadata-location"]: "metadata.json (current)"}
    for entry in meta.get("metadata-log") or ():
        refs.setdefault(entry["metadata-file"], "metadata.json (log)")
    for stats in (meta.get("statistics") or ()) + (meta.get("partition-statistics") or ()):
        refs.setdefault(stats["statistics-path"], "statistics")
    lists = [s["manifest-list"] for s in meta.get("snapshots") or ()]
    for listing in lists:
        refs.setdefault(listing, "manifest list")
    if full:
        assert pool is not None
        manifests = {m for ms in pool.map(lambda x: _listed_manifests(store, x), lists) for m in ms}
        for m in manifests:
            refs.setdefault(m, "manifest")
        decoded: dict[str, list[str]] = {}
        for files in pool.map(lambda m: _live_files(store, m, decoded), sorted(manifests)):
            for f in files:
                refs.setdefault(f, "data file")
    else:
        for listing in lists:
            head, _, tail = listing.rpartition("/snap-care-")
            if tail:
                refs.setdefault(f"{head}/care-{tail[: -len('.avro')]}-m0.avro", "manifest")
        refs.setdefault(meta["location"].rstrip("/") + "/data/care-shared.parquet", "data file")
    kinds: dict[str, int] = {}
    for kind in refs.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    return refs, kinds


def measure(
    store: Store, loaded: dict, commits: int, full: bool = False, pool: ThreadPoolExecutor | None = None
) -> dict:
    meta = loaded["metadata"]
    under: dict[str, int] = {}
    for d in table_dirs(meta):
        under.update(tree(store, d))
    refs, kinds = referenced(store, loaded, full, pool)
    sizes = {}
    missing = 0
    for location in refs:
        if location in under:
            sizes[location] = under[location]
        else:
            try:
                sizes[location] = store.size(location)  # referenced from outside the table's locations
            except Exception:  # noqa: BLE001 - a referenced file that is gone
                missing += 1
    extra = {loc: size for loc, size in under.items() if loc not in refs}
    extra_md = {loc: size for loc, size in extra.items() if loc.endswith(SUFFIX)}
    ref_bytes = sum(sizes.values())
    under_bytes = sum(under.values())
    md_under = sum(1 for loc in under if loc.endswith(SUFFIX))
    md_bytes_ref = sum(size for loc, size in sizes.items() if loc.endswith(SUFFIX))
    out = {
        "commits": commits,
        "snapshots": len(meta.get("snapshots") or ()),
        "files_under": len(under),
        "bytes_under": under_bytes,
        "files_referenced": len(refs),
        "bytes_referenced": ref_bytes,
        "files_ratio": len(under) / len(refs),
        "bytes_ratio": under_bytes / ref_bytes if ref_bytes else float("nan"),
        "referenced_missing": missing,
        "referenced_kinds": kinds,
        "metadata_json_under": md_under,
        "metadata_json_in_log": 1 + len(meta.get("metadata-log") or ()),
        "metadata_json_bytes_referenced": md_bytes_ref,
        "current_metadata_bytes": sizes.get(loaded["metadata-location"], 0),
        "unreferenced_files": len(extra),
        "unreferenced_bytes": sum(extra.values()),
        "unreferenced_metadata_json": len(extra_md),
        "unreferenced_metadata_json_bytes": sum(extra_md.values()),
        "unreferenced_other_examples": sorted(loc for loc in extra if not loc.endswith(SUFFIX))[:5],
        "full": full,
        "at_s": time.time(),
    }
    if extra_md:
        from catalog.storage.metadata_files import version_of

        versions = sorted(version_of(loc.rsplit("/", 1)[1]) for loc in extra_md)
        out["unreferenced_metadata_versions"] = [versions[0], versions[-1]]
        out["current_version"] = version_of(loaded["metadata-location"].rsplit("/", 1)[1])
    return out


def line(m: dict) -> str:
    return (
        f"{m['commits']:,} commits: files {m['files_under']:,} under / {m['files_referenced']:,} referenced = "
        f"{m['files_ratio']:.2f}x, bytes {m['bytes_under'] / 2**20:,.1f} / {m['bytes_referenced'] / 2**20:,.1f} MiB = "
        f"{m['bytes_ratio']:.2f}x; metadata.json {m['metadata_json_under']:,} under vs {m['metadata_json_in_log']} "
        f"current + log ({m['unreferenced_metadata_json']:,} unreferenced, "
        f"{m['unreferenced_metadata_json_bytes'] / 2**20:,.1f} MiB); current file "
        f"{m['current_metadata_bytes'] / 2**20:.2f} MiB"
    )


# -- the group ------------------------------------------------------------------------------------


def run(
    backend: Any, quick: bool, commits: int, server_env: dict[str, str], log: Any, props: dict[str, str] | None = None
) -> dict:
    """``props``: table properties (none by default: the row is of a table at the defaults; e.g.
    ``write.metadata.delete-after-commit.enabled=true`` to measure that remedy)."""
    env = {**SERVER_ENV, **server_env}
    interval = float(env.get("CATALOG_MAINTENANCE_INTERVAL_SECONDS", INTERVAL_S))
    out: dict[str, Any] = {"commits": commits, "server_env": env, "table_properties": props or {}, "samples": []}
    t_group = time.perf_counter()
    server = backend.own_server("footprint", env)
    http = wire.Http(server.url)
    store = Store(backend.storage)
    pool = ThreadPoolExecutor(UPLOAD_THREADS if store.s3 is not None else 1, thread_name_prefix="footprint-files")
    readers = ThreadPoolExecutor(8, thread_name_prefix="footprint-read")
    name = backend.name
    try:
        http.request("POST", "/v1/namespaces", orjson.dumps({"namespace": [wire.NS]}))
        table = Table(http, store, backend.storage, "footprint", dict(props or {}))
        ahead: deque[Future] = deque()
        conflicts = 0
        t0, started = time.perf_counter(), time.time()
        for i in range(commits):
            # files written ahead stop at the next sample, so that a sample sees no file of a later commit
            boundary = min(commits, (i // SAMPLE_EVERY + 1) * SAMPLE_EVERY)
            while len(ahead) < PREFETCH and i + len(ahead) < boundary:
                ahead.append(pool.submit(table.files.write, table.next_number()))
            listing = ahead.popleft().result()
            while True:
                status, _ = table.commit([listing])
                if status == 200:
                    break
                conflicts += 1
            if (i + 1) % SAMPLE_EVERY == 0 or i + 1 == commits:
                m = measure(store, table.reload(), i + 1)
                out["samples"].append(m)
                log(f"[{name}] footprint: {line(m)} ({time.perf_counter() - t0:,.0f} s)")
        out["commit_s"] = time.perf_counter() - t0
        out["conflicts"] = conflicts
        last = time.perf_counter()

        # care settles: one scheduler round after the last commit, then no task queued or running
        time.sleep(1.2 * interval)
        left = max(1.0, SETTLE_INTERVALS * interval - (time.perf_counter() - last))
        waited = settle(http, timeout=left)
        out["settle_s"] = time.perf_counter() - last
        out["settled"] = waited == waited  # NaN: a task still queued or running at the bound
        final = measure(store, table.reload(), commits, full=True, pool=readers)
        out["final"] = final
        out["peak"] = {
            k: max(s[k] for s in out["samples"] + [final])
            for k in ("files_under", "bytes_under", "metadata_json_under", "files_ratio", "bytes_ratio")
        }
        http.close()  # a fresh connection: the server drops keep-alive connections left idle (the final read)
        status, data = http.request("GET", f"{MAINTENANCE}/tasks?namespace={wire.NS}&table=footprint&limit=100")
        out["tasks_status"] = status
        tasks = orjson.loads(data)["tasks"] if status == 200 else []
        out["tasks"] = [
            {
                "kind": x.get("kind"),
                "state": x.get("state"),
                "finished_after_s": ((x.get("finished-ms") or 0) / 1000 - started) if x.get("finished-ms") else None,
                "deleted_files": (x.get("result") or {}).get("deleted-files"),
                "deleted_metadata_files": (x.get("result") or {}).get("deleted-metadata-files"),
                "summary": (x.get("result") or {}).get("summary"),
            }
            for x in tasks
        ]
        log(
            f"[{name}] footprint: after {commits:,} commits in {out['commit_s']:,.0f} s and {out['settle_s']:.0f} s "
            f"of settling: {line(final)}; peak at the samples: {out['peak']}; tasks: "
            + "; ".join(f"{t['kind']} {t['state']}: {t['summary']}" for t in out["tasks"])
        )
    finally:
        pool.shutdown(wait=True)
        readers.shutdown(wait=True)
        http.close()
        server.stop()
        out["server_log_errors"] = _errors(server.log)
    out["group_s"] = time.perf_counter() - t_group
    return out
