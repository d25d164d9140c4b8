"""What the benchmark clients send: a cheap keep-alive HTTP client and raw Iceberg REST bodies.

The clients must cost as little CPU as possible: on a 2-core machine every microsecond a client
spends is a microsecond the server does not get. Measured here against this server (loadTable of a
small table, one client): ``requests.Session`` costs ~600 us of client CPU per call, a bare
``http.client.HTTPConnection`` ~130 us. So the default client is ``http.client`` with one persistent
connection per client process; ``--client requests`` switches to ``requests.Session`` to check
that claim. Bodies are built as dicts and serialised with orjson, never through pyiceberg models.
"""

from __future__ import annotations

import http.client
import os
import time
from urllib.parse import urlsplit

import orjson

NS = "bench"
TYPES = ["long", "string", "double", "timestamp", "boolean", "int", "date", "decimal(10, 2)"]
JSON_HEADERS = {"Content-Type": "application/json", "Connection": "keep-alive"}


class Http:
    """One persistent HTTP/1.1 connection. ``request`` returns ``(status, body)``; status 0 means a
    transport error (connection reset, timeout): the connection is reopened for the next call, and
    the call itself is NOT retried (a commit's outcome would then be unknown)."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port, self.timeout = parts.hostname, parts.port, timeout
        self.conn: http.client.HTTPConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            self.conn.request(method, path, body=body, headers=JSON_HEADERS)
            resp = self.conn.getresponse()
            data = resp.read()
            if resp.will_close:
                self.close()
            return resp.status, data
        except (http.client.HTTPException, OSError):
            self.close()
            return 0, b""

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


class RequestsHttp:
    """The same interface over ``requests.Session`` (for comparing client costs)."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        import requests

        self.base, self.timeout = base_url, timeout
        self.session = requests.Session()
        self._errors = (requests.RequestException, OSError)

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        try:
            resp = self.session.request(method, self.base + path, data=body, headers=JSON_HEADERS, timeout=self.timeout)
            return resp.status_code, resp.content
        except self._errors:
            return 0, b""

    def close(self) -> None:
        self.session.close()


def client(base_url: str, kind: str = "http") -> Http | RequestsHttp:
    return RequestsHttp(base_url) if kind == "requests" else Http(base_url)


# -- paths and bodies -----------------------------------------------------------------------------


def table_path(name: str, prefix: str = "") -> str:
    """A table of namespace ``bench``; ``prefix``: the warehouse's (``/v1/<prefix>/...``), else none."""
    return f"/v1/{prefix + '/' if prefix else ''}namespaces/{NS}/tables/{name}"


def create_tables(http: Http | RequestsHttp, names: list[str], columns: int, prefix: str = "") -> list[tuple]:
    """Namespace ``bench`` and a table per name in it (in warehouse ``prefix``): the writers' table
    tuples ``(path, location, parent None, sequence 0)``."""
    base = f"/v1/{prefix + '/' if prefix else ''}namespaces"
    status, data = http.request("POST", base, orjson.dumps({"namespace": [NS]}))
    assert status == 200, data[:300]
    tables = []
    for name in names:
        status, data = http.request("POST", f"{base}/{NS}/tables", create_table_body(name, columns))
        assert status == 200, data[:300]
        tables.append((table_path(name, prefix), orjson.loads(data)["metadata"]["location"], None, 0))
    return tables


def schema(columns: int) -> dict:
    """A flat schema of ``columns`` optional columns of mixed primitive types (ids 1..columns)."""
    fields = [
        {"id": i + 1, "name": f"c{i:04d}", "type": TYPES[i % len(TYPES)], "required": False} for i in range(columns)
    ]
    return {"type": "struct", "schema-id": 0, "fields": fields}


def create_table_body(name: str, columns: int) -> bytes:
    return orjson.dumps({"name": name, "schema": schema(columns), "properties": {"bench": "true"}})


def new_snapshot_id() -> int:
    """A random positive 62-bit id from os.urandom (forked clients share the `random` module's state)."""
    return (int.from_bytes(os.urandom(8), "big") >> 2) or 1


def snapshot(location: str, sid: int, parent: int | None, seq: int) -> dict:
    """One append snapshot, shaped like pyiceberg's (summary keys and sizes of a 1-file append). The
    manifest list is a dummy path: the catalog never reads it."""
    return {
        "snapshot-id": sid,
        "parent-snapshot-id": parent,
        "sequence-number": seq,
        "timestamp-ms": int(time.time() * 1000),
        "manifest-list": f"{location}/metadata/snap-{sid}-0-bench.avro",
        "summary": {
            "operation": "append",
            "added-files-size": "4096",
            "added-data-files": "1",
            "added-records": "100",
            "total-data-files": str(seq),
            "total-delete-files": "0",
            "total-records": str(100 * seq),
            "total-files-size": str(4096 * seq),
            "total-position-deletes": "0",
            "total-equality-deletes": "0",
        },
        "schema-id": 0,
    }


def append_body(location: str, sids: list[int], parent: int | None, seq: int) -> bytes:
    """The commit of an append: ``add-snapshot`` for each id in ``sids`` (chained, sequence numbers
    from ``seq``), then ``set-snapshot-ref main`` to the last, guarded by ``assert-ref-snapshot-id``
    (main must still be ``parent``). One id is the ordinary append; many build history fast."""
    updates, prev = [], parent
    for i, sid in enumerate(sids):
        updates.append({"action": "add-snapshot", "snapshot": snapshot(location, sid, prev, seq + i)})
        prev = sid
    updates.append({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": prev})
    requirements = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}]
    return orjson.dumps({"requirements": requirements, "updates": updates})


def head_of(metadata: dict) -> tuple[int | None, int]:
    """(snapshot id of main, last sequence number) of a table's metadata."""
    main = (metadata.get("refs") or {}).get("main")
    return (main["snapshot-id"] if main else None), metadata.get("last-sequence-number", 0)


def main_ancestry(metadata: dict) -> set[int]:
    """Every snapshot id reachable from main through parent links."""
    parents = {s["snapshot-id"]: s.get("parent-snapshot-id") for s in metadata.get("snapshots", [])}
    seen: set[int] = set()
    sid, _ = head_of(metadata)
    while sid is not None and sid not in seen:
        seen.add(sid)
        sid = parents.get(sid)
    return seen
