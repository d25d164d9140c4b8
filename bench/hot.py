"""Hot-table appends with real manifest lists, the way pyiceberg's fast append makes them.

Each appender is its own forked process with one keep-alive connection and a pyiceberg ``FileIO``
on the table's storage (the local warehouse, or the S3 bucket). One append:

1. writes a data file (a 1-row Parquet file, kept across retries, as pyiceberg keeps its data files);
2. per attempt: reads the head snapshot's manifest list (pyiceberg's Avro reader), writes a new
   manifest with one ADDED entry and a new manifest list = [the new manifest] + the head's manifests
   (pyiceberg's ``write_manifest`` / ``write_manifest_list``, exactly the files a fast append writes),
   and POSTs ``add-snapshot`` + ``set-snapshot-ref main`` guarded by ``assert-ref-snapshot-id``;
3. on ``409`` re-reads main (``?snapshots=refs``) and goes back to 2 with the same snapshot id, at
   once, until success or the end of the window (then the append is *abandoned*).

After a success the writer continues from the metadata in the commit's response (as pyiceberg's
table object does), so a writer that is not racing never re-reads. A ``5xx`` or a transport error
is an *unknown outcome*: never counted as acknowledged.

Work wasted = files the client wrote for attempts that did not land (a manifest and a manifest list
per ``409``), and the client CPU spent per successful append. With the server's rebase on, a pure
append whose ref moved is rebuilt by the server on the new head instead of a ``409``: the client's
manifest list is then read once by the server and replaced by the server's own.

``verify`` reads each hot table's final metadata and head manifest list: the chain of main is linear
(every snapshot is on it, parents chain, sequence numbers strictly increase), every acknowledged
snapshot id is on it, and the head's manifest list holds exactly one manifest per snapshot (each
added by its own snapshot), i.e. every acknowledged append is present exactly once.
"""

from __future__ import annotations

import io as _io
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import orjson

from catalog.commit.rebasable import PROPERTY as REBASE_PROPERTY

from . import wire

LEVELS = (16, 64)
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "data", "type": "string", "required": False},
    ],
}


def table_name(writers: int, rebase: bool) -> str:
    return f"hot_append_{writers}_{'on' if rebase else 'off'}"


def create_body(name: str, rebase: bool) -> bytes:
    props = {"bench": "true", REBASE_PROPERTY: "true" if rebase else "false"}
    return orjson.dumps({"name": name, "schema": SCHEMA, "properties": props})


def file_io_props(storage: dict) -> dict[str, str]:
    """pyiceberg FileIO properties to reach the backend's storage (what a client configures)."""
    if storage["kind"] != "s3":
        return {}
    return {
        "s3.endpoint": storage["endpoint"],
        "s3.access-key-id": storage["access_key"],
        "s3.secret-access-key": storage["secret_key"],
        "s3.region": storage["region"],
        "s3.force-virtual-addressing": "false",
    }


def parquet_row() -> bytes:
    """A valid 1-row Parquet file of SCHEMA (its bytes; each append writes it under a new name)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = _io.BytesIO()
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "data": pa.array(["x"])}), buf)
    return buf.getvalue()


class Head:
    """What a writer knows of main: its snapshot id, manifest list, sequence number, summary."""

    def __init__(self, metadata: dict) -> None:
        sid, self.seq = wire.head_of(metadata)
        self.sid = sid
        snap = next((s for s in metadata.get("snapshots") or () if s["snapshot-id"] == sid), None)
        self.manifest_list = snap["manifest-list"] if snap else None
        self.summary = (snap or {}).get("summary") or {}
        self.format_version = metadata.get("format-version", 2)
        self.next_row_id = metadata.get("next-row-id")


def one_file_manifest(
    output: Any, format_version: int, schema: Any, sid: int, data_path: str, size: int, codec: str = "deflate"
) -> Any:
    """Write a manifest (unpartitioned) adding one 1-row Parquet data file to ``output``: its
    ``ManifestFile``. What an append writes, for the hot-table and table-care rows alike."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestEntry,
        ManifestEntryStatus,
        write_manifest,
    )
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.typedef import Record

    with write_manifest(format_version, UNPARTITIONED_PARTITION_SPEC, schema, output, sid, codec) as writer:
        writer.add(
            ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED,
                snapshot_id=sid,
                sequence_number=None,
                file_sequence_number=None,
                data_file=DataFile.from_args(
                    content=DataFileContent.DATA,
                    file_path=data_path,
                    file_format=FileFormat.PARQUET,
                    partition=Record(),
                    record_count=1,
                    file_size_in_bytes=size,
                ),
            )
        )
    return writer.to_manifest_file()


def _summary(previous: dict, data_size: int) -> dict:
    """pyiceberg's summary of a 1-file, 1-row append on top of ``previous``'s totals."""

    def total(key: str, add: int) -> str:
        return str(int(previous.get(key, "0")) + add)

    return {
        "operation": "append",
        "added-data-files": "1",
        "added-records": "1",
        "added-files-size": str(data_size),
        "total-data-files": total("total-data-files", 1),
        "total-delete-files": total("total-delete-files", 0),
        "total-records": total("total-records", 1),
        "total-files-size": total("total-files-size", data_size),
        "total-position-deletes": total("total-position-deletes", 0),
        "total-equality-deletes": total("total-equality-deletes", 0),
    }


class Appender:
    """A pyiceberg-style fast appender on one table: its connection, its FileIO, its counters."""

    def __init__(self, args: dict) -> None:
        from pyiceberg.io import load_file_io
        from pyiceberg.schema import Schema

        self.http = wire.client(args["url"], args.get("client", "http"))
        self.path, self.location, self.data = args["path"], args["location"], args["parquet"]
        self.fio = load_file_io(args["io"], self.location)
        self.schema = Schema.model_validate(SCHEMA)
        self.counts: Counter[str] = Counter()

    def load(self) -> Head:
        status, body = self.http.request("GET", self.path + "?snapshots=refs")
        if status != 200:
            raise RuntimeError(f"load {self.path} -> {status}: {body[:300]!r}")
        return Head(orjson.loads(body)["metadata"])

    def write_data_file(self) -> str:
        """A new 1-row data file (what an append writes once, whatever its retries)."""
        data_path = f"{self.location}/data/{uuid.uuid4()}.parquet"
        with self.fio.new_output(data_path).create(overwrite=False) as f:
            f.write(self.data)
        self.counts["data_files_written"] += 1
        return data_path

    def attempt_body(self, head: Head, sid: int, data_path: str) -> bytes:
        """One attempt's files (a manifest and a manifest list on ``head``) and its commit body."""
        from pyiceberg.manifest import read_manifest_list, write_manifest_list

        existing = []
        if head.manifest_list:
            existing = list(read_manifest_list(self.fio.new_input(head.manifest_list)))
            self.counts["lists_read"] += 1
            self.counts["manifests_listed"] += len(existing)
        commit_uuid = uuid.uuid4()
        output = self.fio.new_output(f"{self.location}/metadata/{commit_uuid}-m0.avro")
        new_manifest = one_file_manifest(output, head.format_version, self.schema, sid, data_path, len(self.data))
        self.counts["manifests_written"] += 1
        seq = head.seq + 1
        list_path = f"{self.location}/metadata/snap-{sid}-{self.counts['lists_written']}-{commit_uuid}.avro"
        with write_manifest_list(
            head.format_version, self.fio.new_output(list_path), sid, head.sid, seq, "deflate"
        ) as list_writer:
            list_writer.add_manifests([new_manifest, *existing])
        self.counts["lists_written"] += 1
        snapshot = {
            "snapshot-id": sid,
            "parent-snapshot-id": head.sid,
            "sequence-number": seq,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": list_path,
            "summary": _summary(head.summary, len(self.data)),
            "schema-id": 0,
        }
        if head.format_version >= 3 and head.next_row_id is not None:
            snapshot["first-row-id"] = head.next_row_id
            snapshot["added-rows"] = 1
        return orjson.dumps(
            {
                "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": head.sid}],
                "updates": [
                    {"action": "add-snapshot", "snapshot": snapshot},
                    {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": sid},
                ],
            }
        )

    def append_once(self) -> int:
        """One uncontended append (setup): its snapshot id."""
        sid = wire.new_snapshot_id()
        status, answer = self.http.request(
            "POST", self.path, self.attempt_body(self.load(), sid, self.write_data_file())
        )
        if status != 200:
            raise RuntimeError(f"seed append to {self.path} -> {status}: {answer[:300]!r}")
        return sid


def append_worker(i: int, args: dict, start: Callable[[], float], duration: float, max_ops: int) -> dict:
    """One pyiceberg-style appender (see the module docstring)."""
    a = Appender(args)
    http = a.http
    head = a.load()
    deadline = start()
    cpu0, t0 = time.process_time(), time.perf_counter()
    commit_lat: list[float] = []
    attempt_lat: list[float] = []
    statuses: Counter[int] = Counter()
    acked: list[int] = []
    unknown: list[int] = []
    errors: list[str] = []
    conflicts = abandoned = 0
    while len(acked) < max_ops and time.perf_counter() < deadline:
        began = time.perf_counter()
        data_path = a.write_data_file()
        sid = wire.new_snapshot_id()
        while True:
            body = a.attempt_body(head, sid, data_path)
            t = time.perf_counter()
            status, answer = http.request("POST", a.path, body)
            now = time.perf_counter()
            attempt_lat.append(now - t)
            statuses[status] += 1
            if status == 200:
                acked.append(sid)
                commit_lat.append(now - began)
                head = Head(orjson.loads(answer)["metadata"])
                break
            if status == 409:
                conflicts += 1
            elif status == 0 or status >= 500:
                unknown.append(sid)
                head = a.load()
                break
            else:
                errors.append(f"{status}: {answer[:300]!r}")
                break
            if now >= deadline:
                abandoned += 1
                break
            head = a.load()
            a.counts["reloads"] += 1
        if len(errors) > 20:
            break
    elapsed = time.perf_counter() - t0
    http.close()
    return {
        "lat": commit_lat,
        "attempt_lat": attempt_lat,
        "statuses": dict(statuses),
        "commits": len(acked),
        "conflicts": conflicts,
        "abandoned": abandoned,
        "unknown": unknown,
        "errors": errors[:5],
        "acked": acked,
        "counts": dict(a.counts),
        "elapsed": elapsed,
        "cpu": time.process_time() - cpu0,
    }


def verify(metadata: dict, acked: list[int], storage_props: dict[str, str]) -> dict[str, Any]:
    """Exactly-once and a linear chain, from the final metadata and the head's manifest list."""
    from pyiceberg.io import load_file_io
    from pyiceberg.manifest import read_manifest_list

    snaps = {s["snapshot-id"]: s for s in metadata.get("snapshots") or ()}
    head, _ = wire.head_of(metadata)
    chain: list[int] = []
    sid = head
    while sid is not None and sid in snaps and len(chain) <= len(snaps):
        chain.append(sid)
        sid = snaps[sid].get("parent-snapshot-id")
    chain.reverse()
    seqs = [snaps[s]["sequence-number"] for s in chain]
    out: dict[str, Any] = {
        "snapshots": len(snaps),
        "chain": len(chain),
        "linear": len(chain) == len(snaps) and all(a < b for a, b in zip(seqs, seqs[1:], strict=False)),
        "acknowledged": len(acked),
        "acked_missing": len(set(acked) - set(chain)),
        "acked_duplicate_ids": len(acked) - len(set(acked)),
    }
    manifests: list[int] = []
    if head is not None:
        fio = load_file_io(storage_props, metadata["location"])
        manifests = [m.added_snapshot_id for m in read_manifest_list(fio.new_input(snaps[head]["manifest-list"]))]
    out["manifests"] = len(manifests)
    per_snapshot = Counter(manifests)
    out["exactly_once"] = (
        out["acked_missing"] == 0
        and out["acked_duplicate_ids"] == 0
        and set(per_snapshot) == set(chain)
        and all(n == 1 for n in per_snapshot.values())
        and int((snaps[head]["summary"] if head else {}).get("total-data-files", "0")) == len(manifests)
    )
    return out


PROBE_MANIFESTS = (10, 100, 1000)
# Snapshots in the table when a real pyiceberg client's append is timed (``client_probe``).
CLIENT_SNAPSHOTS = (1, 200, 400, 800)
CLIENT_SNAPSHOTS_QUICK = (1, 100, 200)
SOAK_APPENDS = 800  # the soak test: 32 pyiceberg writers x 25 appends on one table


def client_probe(a: Appender, url: str, table: str, io: dict, sizes: tuple[int, ...], rounds: int) -> list[dict]:
    """What one real pyiceberg ``Table.append`` (a 1-row Arrow table, the soak test's writers) costs
    its client as the table's history grows: the table is grown to each size with this module's
    cheap appends, then ``rounds`` pyiceberg appends are timed (CPU of this process, wall). The
    server is another process, so the CPU is the client's own."""
    import pyarrow as pa
    from pyiceberg.catalog.rest import RestCatalog

    catalog = RestCatalog("probe", uri=url, **io)
    batch = pa.table({"id": pa.array([1], pa.int64()), "data": pa.array(["x"], pa.string())})
    out, snapshots = [], len(orjson.loads(a.http.request("GET", a.path)[1])["metadata"].get("snapshots") or ())
    for size in sizes:
        while snapshots < size:
            a.append_once()
            snapshots += 1
        tbl = catalog.load_table(table)
        cpu, wall = [], []
        for _ in range(rounds):
            c, t = time.process_time(), time.perf_counter()
            tbl.append(batch)
            cpu.append(time.process_time() - c)
            wall.append(time.perf_counter() - t)
        snapshots += rounds
        cpu_ms, wall_ms = 1000 * sorted(cpu)[len(cpu) // 2], 1000 * sorted(wall)[len(wall) // 2]
        out.append({"snapshots": size, "cpu_ms": cpu_ms, "wall_ms": wall_ms})
    return out


def soak_client_cpu_s(points: list[dict], appends: int = SOAK_APPENDS) -> float | None:
    """The pyiceberg clients' CPU for ``appends`` appends to one table, from a least-squares line
    through ``points`` (CPU per append vs snapshots): the k-th append sees about k snapshots."""
    if len(points) < 2:
        return None
    xs, ys = [p["snapshots"] for p in points], [p["cpu_ms"] / 1000 for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return sum(my + slope * (k - mx) for k in range(1, appends + 1))


MANIFEST_FIELDS = (  # a v2 manifest list entry
    "manifest_path",
    "manifest_length",
    "partition_spec_id",
    "content",
    "sequence_number",
    "min_sequence_number",
    "added_snapshot_id",
    "added_files_count",
    "existing_files_count",
    "deleted_files_count",
    "added_rows_count",
    "existing_rows_count",
    "deleted_rows_count",
    "partitions",
    "key_metadata",
)


def build_head(a: Appender, manifests: int) -> None:
    """Make the table's head a snapshot whose list holds ``manifests`` manifests: one real manifest
    (of one data file) and byte copies of it under other names, committed as one append. Synthetic
    (never scanned): the rebase reads manifest lists, never the head's manifests."""
    from pyiceberg.manifest import ManifestFile, read_manifest_list, write_manifest_list

    head = a.load()
    sid = wire.new_snapshot_id()
    body = orjson.loads(a.attempt_body(head, sid, a.write_data_file()))
    snapshot = body["updates"][0]["snapshot"]
    (one,) = list(read_manifest_list(a.fio.new_input(snapshot["manifest-list"])))
    with a.fio.new_input(one.manifest_path).open() as f:
        raw = f.read()
    copies = [one]
    for n in range(1, manifests):
        path = one.manifest_path.replace("-m0.avro", f"-m{n}.avro")
        with a.fio.new_output(path).create(overwrite=False) as f:
            f.write(raw)
        copies.append(ManifestFile.from_args(**{f: getattr(one, f) for f in MANIFEST_FIELDS} | {"manifest_path": path}))
    list_path = snapshot["manifest-list"].replace(".avro", "-probe.avro")
    with write_manifest_list(
        head.format_version, a.fio.new_output(list_path), sid, head.sid, head.seq + 1, "deflate"
    ) as w:
        w.add_manifests(copies)
    snapshot["manifest-list"] = list_path
    snapshot["summary"] |= {"added-data-files": str(manifests), "total-data-files": str(manifests)}
    status, answer = a.http.request("POST", a.path, orjson.dumps(body))
    if status != 200:
        raise RuntimeError(f"probe head of {manifests} manifests -> {status}: {answer[:300]!r}")


def probe(a: Appender, rounds: int) -> dict[str, list[float]]:
    """Per round: a commit on the current head (lands as sent: ``direct``), then a commit built on
    the head before it (stale by one snapshot: the server rebases it: ``rebased``). Latencies in s of
    the POST alone."""
    out: dict[str, list[float]] = {"direct": [], "rebased": []}
    for _ in range(rounds):
        head = a.load()
        bodies = [a.attempt_body(head, wire.new_snapshot_id(), a.write_data_file()) for _ in range(2)]
        for kind, body in zip(("direct", "rebased"), bodies, strict=True):
            t = time.perf_counter()
            status, answer = a.http.request("POST", a.path, body)
            out[kind].append(time.perf_counter() - t)
            if status != 200:
                raise RuntimeError(f"probe {kind} commit -> {status}: {answer[:300]!r}")
    return out
