"""Server-side scan planning against Iceberg Java (issue 47, docs/planning.md): over a generated corpus
of tables, every plan the catalog serves names the same data files, each with the same delete files,
as Java 1.9's own planner (``TableScan.planFiles`` / ``IncrementalAppendScan.planFiles``, run by
``tests/java/DiffOracle.java`` over the same metadata and manifest files on disk), and, where pyiceberg
0.12 plans the table as Java does (no equality deletes, no deletion vectors), as pyiceberg's own plan.

The corpus: format v1, v2 and v3 tables; identity, bucket, truncate, year, month, day and hour
partitions; specs and schemas evolved midway; position deletes scoped to a partition or to one file;
equality deletes; deletion vectors; copy-on-write overwrites; manifests rewritten by the catalog's
table care. Planned: every snapshot of each table (time travel) and incremental append ranges between
snapshots, each with random filters (sent as pyiceberg sends them: the REST spec's expression JSON).

The server runs on SQLite with a local warehouse, so that Java reads the very files the server read.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest.scan_planning import PlanTableScanRequest
from pyiceberg.expressions import AlwaysTrue, GreaterThan
from pyiceberg.manifest import FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import LongType

from catalog.maintenance.rewrite_manifests import KIND as REWRITE_MANIFESTS
from catalog.maintenance.rewrite_manifests import MIN_COUNT
from tests.java_oracle import JavaOracle
from tests.planning_corpus import (
    EVOLVE_BY,
    SCHEMA,
    add_position_deletes,
    client_planning,
    commit_v3_deletes,
    random_filter,
    some_rows,
    v3_position_deletes,
)
from tests.support import CARE_ON_REQUEST, run_care, start_server

PER_TASK = 2  # manifests per plan task: most plans here come as plan tasks the test follows
PLANS = 2000  # at least this many plans are compared with Java's (issue 47's bar)

SPECS = [
    [],
    [(2, IdentityTransform(), "c")],
    [(1, BucketTransform(3), "id_bucket")],
    [(1, TruncateTransform(10), "id_trunc")],
    [(3, DayTransform(), "d_day")],
    [(3, MonthTransform(), "d_month")],
    [(5, HourTransform(), "ts_hour")],
    [(5, YearTransform(), "ts_year"), (2, TruncateTransform(1), "c_trunc")],
    [(2, IdentityTransform(), "c"), (3, DayTransform(), "d_day")],
    [(5, DayTransform(), "ts_day"), (1, BucketTransform(2), "id_bucket")],
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    workdir = tmp_path_factory.mktemp("planning-java")
    server = start_server(
        workdir,
        "sqlite",
        {
            **CARE_ON_REQUEST,
            "CATALOG_SCAN_PLANNING_MODE": "server",
            "CATALOG_PLANNING_MANIFESTS_PER_TASK": str(PER_TASK),
            "CATALOG_DATABASE_URL": f"sqlite:///{workdir / 'catalog.db'}",
            "CATALOG_WAREHOUSE": str(workdir / "warehouse"),
        },
    )
    yield server
    server.stop()


def _append(table: Table, rng: random.Random, start: int, n: int) -> None:
    data = some_rows(rng, start, n)
    if any(f.name == "y" for f in table.schema().fields):  # the column a schema change added
        data = data.append_column("y", pa.array([rng.randrange(0, 50) for _ in range(n)], pa.int64()))
    table.append(data)


@pytest.fixture(scope="module")
def corpus(srv) -> list[dict]:
    """Fourteen generated tables, four with manifests the catalog's table care rewrote, two of format v3
    with deletion vectors; each: its name and whether pyiceberg 0.12 plans it as Java does (not with
    equality deletes, which it cannot plan, nor with deletion vectors, which it files by partition)."""
    cat = client_planning(srv)
    ns = f"java_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    out = []
    for seed in range(12):
        rng = random.Random(1000 + seed)
        version = 1 if seed % 4 == 0 else 2
        fields = SPECS[seed % len(SPECS)] if seed < len(SPECS) else rng.choice(SPECS)
        spec = PartitionSpec(*(PartitionField(src, 1000 + i, t, n) for i, (src, t, n) in enumerate(fields)))
        name = f"{ns}.t{seed}"
        rewritten = seed % 3 == 2  # care rewrites its manifests at the end: Java reads what the catalog wrote
        properties = {"format-version": str(version), **({MIN_COUNT: "2"} if rewritten else {})}
        table = cat.create_table(name, SCHEMA, partition_spec=spec, properties=properties)
        for i in range(rng.randrange(2, 4)):
            _append(table, rng, i * 15, 15)
            table = cat.load_table(name)
        if rng.random() < 0.5:  # the spec evolves: a field on a column it does not partition by yet
            used = {src for src, _, _ in fields}
            column, transform = next((c, t) for src, c, t in EVOLVE_BY if src not in used)
            with table.update_spec() as update:
                update.add_field(column, transform, f"{column}_evolved")
            table = cat.load_table(name)
            _append(table, rng, 300, 15)
            table = cat.load_table(name)
        if rng.random() < 0.4:  # the schema evolves: a column added midway (not filtered on)
            with table.update_schema() as update:
                update.add_column("y", LongType())
            table = cat.load_table(name)
            _append(table, rng, 400, 12)
            table = cat.load_table(name)
        equality = False  # whether it has equality deletes
        if version == 2:
            files = [t.file for t in table.scan().plan_files()]
            add_position_deletes(srv, table, rng.sample(files, min(3, len(files))), rng.random() < 0.5, rng)
            table = cat.load_table(name)
            if rng.random() < 0.5:
                files = [t.file for t in table.scan().plan_files()]
                add_position_deletes(srv, table, rng.sample(files, 1), False, rng, equality=True)
                equality = True
                table = cat.load_table(name)
        _append(table, rng, 600, 10)
        table = cat.load_table(name)
        if rng.random() < 0.4 and not equality:  # copy-on-write: an overwrite snapshot
            table.delete(GreaterThan("id", 605))
        if rewritten:
            (task,) = run_care(srv, ns, f"t{seed}", kinds=[REWRITE_MANIFESTS])
            assert task["state"] == "done", task
            assert cat.load_table(name).current_snapshot().summary.operation.value == "replace", task
        out.append({"name": name, "pyiceberg": not equality})
    for seed in (12, 13):  # v3: deletion vectors over files that v2 position deletes already reach
        rng = random.Random(1000 + seed)
        spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "c"))
        name = f"{ns}.t{seed}"
        table = cat.create_table(name, SCHEMA, partition_spec=spec)  # pyiceberg 0.12 writes no v3 manifests
        for i in range(3):
            _append(table, rng, i * 15, 15)
            table = cat.load_table(name)
        files = [t.file for t in table.scan().plan_files()]
        add_position_deletes(srv, table, rng.sample(files, 3), False, rng)
        upgrade = {"updates": [{"action": "upgrade-format-version", "format-version": 3}]}  # pyiceberg refuses 3
        resp = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/t{seed}", json=upgrade, timeout=30)
        assert resp.status_code == 200, resp.text
        table = cat.load_table(name)
        files = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.file_path)
        targets = rng.sample(files, 3)
        deletes = [v3_position_deletes(table, f, FileFormat.PUFFIN) for f in targets[:2]]
        commit_v3_deletes(srv, table, [*deletes, v3_position_deletes(table, targets[2], FileFormat.PARQUET)], rng)
        out.append({"name": name, "pyiceberg": False})  # pyiceberg 0.12 files DVs by partition (not Java's rule)
    return out


def _server_plan(url: str, name: str, body: dict) -> list:
    """The server's plan, its plan tasks followed: sorted [data file, [delete files]] pairs."""
    ns, table = name.split(".")
    base = f"{url}/v1/namespaces/{ns}/tables/{table}"
    resp = requests.post(f"{base}/plan", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    answers, pairs = [resp.json()], []
    assert answers[0]["status"] == "completed", answers[0]
    while answers:
        answer = answers.pop()
        deletes = [d["file-path"] for d in answer.get("delete-files", [])]
        for task in answer.get("file-scan-tasks", []):
            refs = sorted(deletes[i] for i in task.get("delete-file-references", []))
            pairs.append([task["data-file"]["file-path"], refs])
        for token in answer.get("plan-tasks", []):
            fetched = requests.post(f"{base}/tasks", json={"plan-task": token}, timeout=60)
            assert fetched.status_code == 200, fetched.text
            answers.append(fetched.json())
    return sorted(pairs)


def _java_plan(oracle: JavaOracle, location: str, body: dict) -> list:
    answer = oracle.ask({"op": "plan", "metadata-location": location, **body})
    assert answer["status"] == 200, answer
    return answer["tasks"]


def _pyiceberg_plan(table: Table, body: dict, row_filter) -> list:
    scan = table.scan(row_filter=row_filter, snapshot_id=body.get("snapshot-id"))
    return sorted([t.file.file_path, sorted(d.file_path for d in t.delete_files)] for t in scan.plan_files())


def test_plans_name_the_same_files_and_deletes_as_javas_planner(srv, java: JavaOracle, corpus: list[dict]) -> None:
    rng = random.Random(4711)
    client = client_planning(srv)
    compared = with_pyiceberg = incremental = 0
    for entry in corpus:
        name = entry["name"]
        table = client.load_table(name)
        location = table.metadata_location
        snapshots = [s.snapshot_id for s in table.snapshots()]
        scans: list[dict] = [{}] + [{"snapshot-id": s} for s in snapshots]
        for _ in range(4):  # incremental append ranges: (start exclusive, end], start None = from the first
            end = rng.randrange(len(snapshots))
            start = rng.randrange(-1, end) if end else -1
            start_id = {"start-snapshot-id": snapshots[start]} if start >= 0 else {}
            scans.append({"end-snapshot-id": snapshots[end], **start_id})
        per_scan = max(1, -(-PLANS // (len(corpus) * len(scans))))  # enough filters to reach PLANS in all
        for scan in scans:
            for k in range(per_scan):
                row_filter = AlwaysTrue() if k == 0 else random_filter(rng)
                # the filter as pyiceberg sends it to the server: the REST spec's expression JSON
                sent = PlanTableScanRequest(filter=row_filter).model_dump(by_alias=True, exclude_none=True, mode="json")
                body = {**scan, "filter": sent["filter"]} if "filter" in sent else dict(scan)
                ours = _server_plan(srv.url, name, body)
                javas = _java_plan(java, location, body)
                assert ours == javas, (name, body)
                compared += 1
                incremental += "end-snapshot-id" in scan
                if entry["pyiceberg"] and "end-snapshot-id" not in scan and k % 3 == 0:
                    assert ours == _pyiceberg_plan(table, scan, row_filter), (name, body)
                    with_pyiceberg += 1
    assert compared >= PLANS and incremental >= 100 and with_pyiceberg >= 200, (compared, incremental, with_pyiceberg)
