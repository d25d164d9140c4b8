"""Server-side scan planning over HTTP (issue 47, docs/planning.md): pyiceberg 0.12 told by
``/v1/config`` to plan on the server reads exactly the rows it reads planning itself, and plans the
same files with the same position deletes (a differential over random filters); big plans come as
plan tasks that another server process redeems after the first is killed; hostile requests are 400s
in the Iceberg error shape, never 500s."""

from __future__ import annotations

import datetime
import os
import random
import signal
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
import requests
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNull,
    LessThan,
    Not,
    NotNull,
    Or,
    StartsWith,
)
from pyiceberg.manifest import (
    FileFormat,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform

from tests.planning_corpus import (
    EVOLVE_BY,
    SCHEMA,
    SPEC_CHOICES,
    add_position_deletes,
    client_planning,
    commit_v3_deletes,
    random_filter,
    some_rows,
    v3_position_deletes,
)
from tests.support import (
    assert_error,
    backends,
    new_pg_database,
    s3_client_props,
    s3_env,
    start_server,
)

SECRET = "planning-test-secret-" + "s" * 32
PER_TASK = 3  # manifests per plan task on the test servers: a table of 4+ appends is split


@pytest.fixture(scope="module", params=backends())
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The settings of the module's servers (two may share them: same database, storage, secret)."""
    base = {
        "CATALOG_SCAN_PLANNING_MODE": "server",
        "CATALOG_PLANNING_MANIFESTS_PER_TASK": str(PER_TASK),
        "CATALOG_TOKEN_SECRET": SECRET,
    }
    workdir = tmp_path_factory.mktemp(f"planning-{request.param}")
    if request.param == "postgres-s3":
        services = request.getfixturevalue("services")
        url = new_pg_database(services["pg"], "planning")
        yield {
            "workdir": workdir,
            "backend": "postgres-s3",
            "env": {**base, "CATALOG_DATABASE_URL": url, **s3_env(services["s3"], "planning")},
            "io": s3_client_props(services["s3"]),
        }
    else:
        yield {
            "workdir": workdir,
            "backend": "sqlite",
            "env": {
                **base,
                "CATALOG_DATABASE_URL": f"sqlite:///{workdir / 'catalog.db'}",
                "CATALOG_WAREHOUSE": str(workdir / "warehouse"),
            },
            "io": {},
        }


def _start(env: dict, name: str):
    srv = start_server(env["workdir"] / name, env["backend"], env["env"])
    srv.io_props = env["io"]
    return srv


@pytest.fixture(scope="module")
def srv(env: dict) -> Iterator:
    server = _start(env, "a")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tables(srv) -> dict[str, str]:
    """The module's tables, written once with pyiceberg (and position deletes written here)."""
    cat = client_planning(srv)
    ns = f"plan_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    rng = random.Random(47)
    out = {}

    ident = cat.create_table(
        f"{ns}.ident", SCHEMA, partition_spec=PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "c"))
    )
    for i in range(5):
        ident.append(some_rows(rng, i * 20, 20))
    ident = cat.load_table(f"{ns}.ident")
    files = [t.file for t in ident.scan().plan_files()]
    deleted = add_position_deletes(srv, ident, files[:3], file_scoped=False, rng=rng)  # partition-scoped
    ident = cat.load_table(f"{ns}.ident")
    deleted += add_position_deletes(srv, ident, files[3:6], file_scoped=True, rng=rng)  # file-scoped (path bounds)
    out["deleted"] = deleted
    ident = cat.load_table(f"{ns}.ident")
    ident.append(some_rows(rng, 500, 20))  # newer than the deletes: none applies to these files
    out["ident"] = f"{ns}.ident"

    bucketed = cat.create_table(
        f"{ns}.bucketed",
        SCHEMA,
        partition_spec=PartitionSpec(
            PartitionField(1, 1000, BucketTransform(4), "id_bucket"), PartitionField(5, 1001, DayTransform(), "ts_day")
        ),
    )
    for i in range(2):
        bucketed.append(some_rows(rng, i * 30, 30))
    out["bucketed"] = f"{ns}.bucketed"

    evolved = cat.create_table(f"{ns}.evolved", SCHEMA)
    evolved.append(some_rows(rng, 0, 25))
    with evolved.update_spec() as update:
        update.add_field("d", DayTransform(), "d_day")
    evolved = cat.load_table(f"{ns}.evolved")
    evolved.append(some_rows(rng, 100, 25))
    evolved.delete("id < 5")  # copy-on-write: an overwrite snapshot
    out["evolved"] = f"{ns}.evolved"

    big = cat.create_table(f"{ns}.big", SCHEMA)
    for i in range(8):
        big.append(some_rows(rng, i * 10, 10))
    out["big"] = f"{ns}.big"
    return out


FILTERS: list[BooleanExpression] = [
    AlwaysTrue(),
    GreaterThan("id", 20),
    EqualTo("id", 31),
    EqualTo("c", "a"),
    And(EqualTo("c", "a"), LessThan("id", 15)),
    GreaterThanOrEqual("d", "2024-01-03"),
    LessThan("x", 2.5),
    In("c", {"a", "zz"}),
    Not(EqualTo("c", "b")),
    IsNull("x"),
    StartsWith("c", "a"),
    GreaterThan("id", 10_000),
    Or(EqualTo("id", 7), GreaterThanOrEqual("ts", "2024-03-05T00:00:00")),
]


def _files(table: Table, row_filter: BooleanExpression) -> set[tuple[str, tuple[str, ...]]]:
    return {
        (t.file.file_path, tuple(sorted(d.file_path for d in t.delete_files)))
        for t in table.scan(row_filter=row_filter).plan_files()
    }


def _ids(table: Table, row_filter: BooleanExpression) -> list:
    return sorted(table.scan(row_filter=row_filter).to_arrow()["id"].to_pylist(), key=lambda v: (v is None, v))


@pytest.mark.parametrize("name", ["ident", "bucketed", "evolved", "big"])
@pytest.mark.slow
def test_pyiceberg_reads_the_same_rows_planning_on_the_server(srv, tables: dict, name: str) -> None:
    server_side, client_side = srv.catalog(), client_planning(srv)
    assert server_side.supports_server_side_planning() and not client_side.supports_server_side_planning()
    ours, theirs = server_side.load_table(tables[name]), client_side.load_table(tables[name])
    for row_filter in FILTERS:
        assert _ids(ours, row_filter) == _ids(theirs, row_filter), row_filter
        assert _files(ours, row_filter) == _files(theirs, row_filter), row_filter


def test_position_deletes_are_planned_as_pyiceberg_plans_them(srv, tables: dict) -> None:
    """The table with partition- and file-scoped position deletes, and files newer than them."""
    table = srv.catalog().load_table(tables["ident"])
    planned = _files(table, AlwaysTrue())
    with_deletes = [f for f in planned if f[1]]
    assert with_deletes and len(with_deletes) < len(planned)
    assert len(_ids(table, AlwaysTrue())) == 120 - tables["deleted"]


def _tasks_fetched(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("catalog_planning_tasks_fetched_total ")
    )


def test_a_big_plan_comes_as_plan_tasks_that_pyiceberg_follows(srv, tables: dict) -> None:
    ns, name = tables["big"].split(".")
    resp = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/{name}/plan", json={}, timeout=30)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["status"] == "completed" and "file-scan-tasks" not in body
    assert len(body["plan-tasks"]) == 3  # 8 manifests, 3 per task
    before = _tasks_fetched(srv.url)
    table = srv.catalog().load_table(tables["big"])
    assert len(table.scan().to_arrow()) == 80
    assert _tasks_fetched(srv.url) - before == 3


def _plan_all(url: str, ns: str, name: str, body: dict, headers: dict | None = None) -> tuple[list, list[str]]:
    resp = requests.post(f"{url}/v1/namespaces/{ns}/tables/{name}/plan", json=body, headers=headers, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp.json().get("file-scan-tasks", []), resp.json().get("plan-tasks", [])


def _redeem(url: str, ns: str, name: str, token: str, headers: dict | None = None) -> requests.Response:
    return requests.post(
        f"{url}/v1/namespaces/{ns}/tables/{name}/tasks", json={"plan-task": token}, headers=headers, timeout=30
    )


def test_plan_tasks_are_redeemed_by_another_server_after_the_first_is_killed(env: dict, srv, tables: dict) -> None:
    first = _start(env, "killed")
    ns, name = tables["ident"].split(".")
    try:
        _, tokens = _plan_all(first.url, ns, name, {"filter": {"type": "not-null", "term": "id"}})
    finally:
        os.kill(first.proc.pid, signal.SIGKILL)
        first.proc.wait(10)
    assert len(tokens) == 2  # 6 data manifests, 3 per task
    found = set()
    for token in tokens:
        resp = _redeem(srv.url, ns, name, token)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        deletes = body.get("delete-files", [])
        assert body["file-scan-tasks"] or not deletes  # never delete files without tasks
        for task in body["file-scan-tasks"]:
            refs = task.get("delete-file-references", [])
            found.add((task["data-file"]["file-path"], tuple(sorted(deletes[i]["file-path"] for i in refs))))
    expected = _files(client_planning(srv).load_table(tables["ident"]), NotNull("id"))
    assert found == expected


def test_the_answer_is_the_specs_json(srv, tables: dict) -> None:
    """Partition values as single values of the partition type (a day as a date string), stats only
    for stats-fields, as hex bounds; residuals as expression JSON."""
    ns, name = tables["bucketed"].split(".")
    tasks, tokens = _plan_all(
        srv.url, ns, name, {"filter": {"type": "gt", "term": {"type": "reference", "term": "id"}, "value": 40},
                            "stats-fields": ["id"]},
    )  # fmt: skip
    assert tasks and not tokens
    for task in tasks:
        data = task["data-file"]
        bucket, day = data["partition"]
        assert isinstance(bucket, int) and datetime.date.fromisoformat(day)
        assert data["content"] == "data" and data["file-format"] == "parquet"
        assert data["lower-bounds"]["keys"] == [1] and bytes.fromhex(data["upper-bounds"]["values"][0])
        assert data["value-counts"]["keys"] == [1]
        assert task["residual-filter"] in (True, {"type": "gt", "term": "id", "value": 40})
    tasks, _ = _plan_all(srv.url, ns, name, {})
    assert all("lower-bounds" not in t["data-file"] for t in tasks)


def test_an_idempotency_key_on_a_plan_is_checked_and_records_nothing(srv, tables: dict) -> None:
    """A plan is a read: the same key with another body runs again (a recorded key would be a 400, and
    a plan's answer, however large, would sit in the database under it); a malformed key is a 400."""
    ns, name = tables["bucketed"].split(".")
    url = f"{srv.url}/v1/namespaces/{ns}/tables/{name}/plan"
    key = {"Idempotency-Key": f"plan-{uuid.uuid4()}"}
    for body in ({}, {"filter": {"type": "gt", "term": "id", "value": 40}}, {}):
        resp = requests.post(url, json=body, headers=key, timeout=30)
        assert resp.status_code == 200 and resp.json()["status"] == "completed", resp.text
    malformed = requests.post(url, json={}, headers={"Idempotency-Key": "k" * 129}, timeout=10)
    assert_error(malformed, 400, "BadRequestException")


def test_the_config_advertises_the_endpoints_and_the_mode(srv) -> None:
    config = requests.get(f"{srv.url}/v1/config", timeout=10).json()
    table = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    for endpoint in (f"POST {table}/plan", f"POST {table}/tasks", f"GET {table}/plan/{{plan-id}}",
                     f"DELETE {table}/plan/{{plan-id}}"):  # fmt: skip
        assert endpoint in config["endpoints"]
    assert config["defaults"]["scan-planning-mode"] == "server"
    assert "scan-planning-mode" not in config["overrides"]


def test_load_table_says_the_mode_a_table_property_sets(srv, tables: dict) -> None:
    ns, name = tables["big"].split(".")
    url = f"{srv.url}/v1/namespaces/{ns}/tables/{name}"
    first = requests.get(url, timeout=10)
    assert first.json()["config"]["scan-planning-mode"] == "server"
    table = srv.catalog().load_table(tables["big"])
    with table.transaction() as tx:
        tx.set_properties({"catalog.scan-planning-mode": "client"})
    again = requests.get(url, headers={"If-None-Match": first.headers["ETag"]}, timeout=10)
    assert again.status_code == 200 and again.json()["config"]["scan-planning-mode"] == "client"
    with table.transaction() as tx:
        tx.remove_properties("catalog.scan-planning-mode")


def test_a_plan_has_an_id_its_caller_may_cancel_and_use_for_credentials_on_its_table(srv, tables: dict) -> None:
    """The spec's completed plan carries a plan-id: sealed to the caller and the table, nothing stored.
    Nothing is kept to fetch (404); cancelling it is a 204; anything else is NoSuchPlanIdException."""
    ns, name = tables["big"].split(".")
    _, other = tables["bucketed"].split(".")
    url = f"{srv.url}/v1/namespaces/{ns}/tables"
    first = requests.post(f"{url}/{name}/plan", json={}, timeout=30).json()
    second = requests.post(f"{url}/{name}/plan", json={"filter": {"type": "gt", "term": "id", "value": 40}}, timeout=30)
    plan_id = first["plan-id"]
    assert first["status"] == "completed" and second.json()["plan-id"] != plan_id
    assert len(plan_id) < 200 and ns not in plan_id and name not in plan_id
    assert_error(requests.get(f"{url}/{name}/plan/{plan_id}", timeout=10), 404, "NoSuchPlanIdException")
    assert requests.delete(f"{url}/{name}/plan/{plan_id}", timeout=10).status_code == 204
    flipped = plan_id[:-2] + ("A" if plan_id[-2] != "A" else "B") + plan_id[-1]
    for bad in (flipped, "p-1", "x" * 5000):
        assert_error(requests.delete(f"{url}/{name}/plan/{bad}", timeout=10), 404, "NoSuchPlanIdException")
    assert_error(requests.delete(f"{url}/{other}/plan/{plan_id}", timeout=10), 404, "NoSuchPlanIdException")
    # loadCredentials with the plan: vending is off here, so nothing to give, but only for this table
    creds = requests.get(f"{url}/{name}/credentials", params={"planId": plan_id}, timeout=10)
    assert creds.status_code == 200 and creds.json() == {"storage-credentials": []}
    for table, bad in ((other, plan_id), (name, flipped), (name, "")):
        resp = requests.get(f"{url}/{table}/credentials", params={"planId": bad}, timeout=10)
        assert_error(resp, 404, "NoSuchPlanIdException")
    assert_error(requests.get(f"{url}/none/plan/p-1", timeout=10), 404, "NoSuchTableException")
    assert_error(requests.delete(f"{url}/none/plan/{plan_id}", timeout=10), 404, "NoSuchTableException")


def test_incremental_append_scans_plan_the_files_appends_added(srv, tables: dict) -> None:
    table = client_planning(srv).load_table(tables["big"])
    snapshots = [s.snapshot_id for s in table.snapshots()]
    ns, name = tables["big"].split(".")
    body = {"start-snapshot-id": snapshots[2], "end-snapshot-id": snapshots[5]}
    tasks, tokens = _plan_all(srv.url, ns, name, body)
    assert not tokens and len(tasks) == 3  # the files of appends 4, 5 and 6
    added = {
        e.data_file.file_path
        for s in table.snapshots()[3:6]
        for m in s.manifests(table.io)
        if m.added_snapshot_id == s.snapshot_id
        for e in m.fetch_manifest_entry(table.io)
    }
    assert {t["data-file"]["file-path"] for t in tasks} == added
    tasks, _ = _plan_all(srv.url, ns, name, {"end-snapshot-id": snapshots[1]})
    assert len(tasks) == 2


HOSTILE = [
    ("not json", 400),
    ("[]", 400),
    ('{"filter": {"type": "nope", "term": "id"}}', 400),
    ('{"filter": {"type": "eq", "term": "no_such_column", "value": 1}}', 400),
    ('{"filter": {"type": "eq", "term": "id", "value": "not a number"}}', 400),
    ('{"filter": {"type": "eq", "term": "id"}}', 400),
    (
        '{"filter": {"type": "eq", "term": {"type": "transform", "transform": "bucket[4]", "term": "id"}, "value": 1}}',
        400,
    ),
    ('{"filter": {"type": "in", "term": "id", "values": 5}}', 400),
    ('{"filter": {"type": "and", "left": true}}', 400),
    ('{"filter": 7}', 400),
    ('{"filter": ' + '{"type": "not", "child": ' * 100 + "true" + "}" * 100 + "}", 400),
    ('{"select": ["id", "nope"]}', 400),
    ('{"select": "id"}', 400),
    ('{"stats-fields": ["nope"]}', 400),
    ('{"snapshot-id": 12345}', 400),
    ('{"snapshot-id": "12345"}', 400),
    ('{"snapshot-id": 1.5}', 400),
    ('{"snapshot-id": 99999999999999999999999}', 400),
    ('{"start-snapshot-id": 1}', 400),
    ('{"end-snapshot-id": 1}', 400),
    ('{"case-sensitive": "yes"}', 400),
    ('{"min-rows-requested": -1}', 400),
]


@pytest.mark.parametrize("body,status", HOSTILE)
def test_hostile_plan_requests_are_400s(srv, tables: dict, body: str, status: int) -> None:
    ns, name = tables["ident"].split(".")
    resp = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/{name}/plan", data=body, timeout=30)
    err = assert_error(resp, status, resp.json()["error"]["type"])
    assert err["type"] in ("BadRequestException", "ValidationException"), err


def test_a_huge_select_list_is_refused(srv, tables: dict) -> None:
    ns, name = tables["ident"].split(".")
    resp = requests.post(
        f"{srv.url}/v1/namespaces/{ns}/tables/{name}/plan", json={"select": ["id"] * 50_000}, timeout=30
    )
    assert_error(resp, 400, "BadRequestException", "select")


def test_case_insensitive_filters_and_selects(srv, tables: dict) -> None:
    ns, name = tables["ident"].split(".")
    body = {"filter": {"type": "eq", "term": "C", "value": "a"}, "select": ["ID"], "case-sensitive": False}
    tasks, tokens = _plan_all(srv.url, ns, name, body)
    assert tasks or tokens
    resp = requests.post(
        f"{srv.url}/v1/namespaces/{ns}/tables/{name}/plan", json={**body, "case-sensitive": True}, timeout=30
    )
    assert_error(resp, 400, "BadRequestException")


@pytest.mark.parametrize(
    "body",
    [b"not json", b"{}", b'{"plan-task": 5}', b'{"plan-task": "1AAAA"}', b'{"plan-task": "' + b"x" * 70000 + b'"}'],
)
def test_malformed_and_tampered_plan_tasks_are_400s(srv, tables: dict, body: bytes) -> None:
    ns, name = tables["ident"].split(".")
    resp = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/{name}/tasks", data=body, timeout=30)
    assert_error(resp, 400, "BadRequestException")


def test_a_flipped_bit_and_another_table_are_refused(srv, tables: dict) -> None:
    ns, name = tables["ident"].split(".")
    _, tokens = _plan_all(srv.url, ns, name, {})
    token = tokens[0]
    flipped = token[:20] + ("A" if token[20] != "A" else "B") + token[21:]
    assert_error(_redeem(srv.url, ns, name, flipped), 400, "BadRequestException")
    other_ns, other = tables["big"].split(".")
    assert_error(_redeem(srv.url, other_ns, other, token), 404, "NoSuchPlanTaskException")


# -- the differential: random filters over the module's tables -----------------------------------------


def test_random_filters_plan_the_same_files_and_deletes_as_pyiceberg(srv, tables: dict) -> None:
    rng = random.Random(4747)
    server_side, client_side = srv.catalog(), client_planning(srv)
    pairs = [
        (server_side.load_table(tables[n]), client_side.load_table(tables[n])) for n in ("ident", "bucketed", "evolved")
    ]
    for _ in range(60):
        row_filter = random_filter(rng)
        for ours, theirs in pairs:
            assert _files(ours, row_filter) == _files(theirs, row_filter), row_filter


@pytest.fixture(scope="module")
def generated(srv) -> list[str]:
    """Tables of random specs (some evolved midway), appends, overwrites and position deletes."""
    cat = client_planning(srv)  # the files' partitions as pyiceberg reads them from manifests (typed)
    ns = f"gen_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    names = []
    for seed in range(4):
        rng = random.Random(seed)
        fields = rng.choice(SPEC_CHOICES)
        spec = PartitionSpec(*(PartitionField(src, 1000 + i, t, n) for i, (src, t, n) in enumerate(fields)))
        table = cat.create_table(f"{ns}.g{seed}", SCHEMA, partition_spec=spec)
        for i in range(rng.randrange(2, 5)):
            table.append(some_rows(rng, i * 15, 15))
        if rng.random() < 0.5:
            used = {src for src, _, _ in fields}
            name, transform = next((n, t) for src, n, t in EVOLVE_BY if src not in used)
            with table.update_spec() as update:
                update.add_field(name, transform, f"{name}_evolved")
            table = cat.load_table(f"{ns}.g{seed}")
            table.append(some_rows(rng, 300, 15))
        table = cat.load_table(f"{ns}.g{seed}")
        files = [t.file for t in table.scan().plan_files()]
        add_position_deletes(srv, table, rng.sample(files, min(3, len(files))), rng.random() < 0.5, rng)
        table = cat.load_table(f"{ns}.g{seed}")
        table.append(some_rows(rng, 600, 10))
        if rng.random() < 0.5:
            cat.load_table(f"{ns}.g{seed}").delete(GreaterThan("id", 605))  # copy-on-write
        names.append(f"{ns}.g{seed}")
    return names


def test_random_filters_over_generated_tables_and_their_snapshots(srv, generated: list[str]) -> None:
    """Every snapshot of every generated table (time travel sends ``snapshot-id``), random filters."""
    rng = random.Random(99)
    server_side, client_side = srv.catalog(), client_planning(srv)
    checked = 0
    for name in generated:
        ours, theirs = server_side.load_table(name), client_side.load_table(name)
        for snapshot in theirs.snapshots():
            for _ in range(6):
                row_filter = random_filter(rng)
                planned = {
                    (t.file.file_path, tuple(sorted(d.file_path for d in t.delete_files)))
                    for t in ours.scan(row_filter=row_filter, snapshot_id=snapshot.snapshot_id).plan_files()
                }
                expected = {
                    (t.file.file_path, tuple(sorted(d.file_path for d in t.delete_files)))
                    for t in theirs.scan(row_filter=row_filter, snapshot_id=snapshot.snapshot_id).plan_files()
                }
                assert planned == expected, (name, snapshot.snapshot_id, row_filter)
                checked += 1
    assert checked >= 100


def test_equality_deletes_are_planned_by_javas_rules(srv) -> None:
    """Strictly older data files of the same partition get them; newer files and other partitions do
    not (pyiceberg cannot plan these itself, so the expectation is Java's rule, worked out here)."""
    cat, rng = client_planning(srv), random.Random(5)
    ns = f"eq_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "c"))
    table = cat.create_table(f"{ns}.t", SCHEMA, partition_spec=spec)
    table.append(some_rows(rng, 0, 40))
    table = cat.load_table(f"{ns}.t")
    before = [t.file for t in table.scan().plan_files()]
    target = before[0]
    add_position_deletes(srv, table, [target], file_scoped=False, rng=rng, equality=True)
    cat.load_table(f"{ns}.t").append(some_rows(rng, 100, 40))
    tasks, tokens = _plan_all(srv.url, ns, "t", {})
    assert not tokens and len(tasks) == 2 * len(before)
    expected = {f.file_path for f in before if f.partition == target.partition}
    with_eq = set()
    for task in tasks:
        if task.get("delete-file-references"):
            with_eq.add(task["data-file"]["file-path"])
    assert with_eq == expected
    resp = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/t/plan", json={}, timeout=30).json()
    assert [d["content"] for d in resp["delete-files"]] == ["equality-deletes"]
    assert resp["delete-files"][0]["equality-ids"] == [1]


def test_use_snapshot_schema_binds_to_the_schema_of_the_snapshot(srv) -> None:
    cat = client_planning(srv)
    ns = f"sch_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    table = cat.create_table(f"{ns}.t", SCHEMA)
    table.append(some_rows(random.Random(1), 0, 10))
    old = cat.load_table(f"{ns}.t").current_snapshot().snapshot_id
    with cat.load_table(f"{ns}.t").update_schema() as update:
        update.rename_column("c", "letter")
    body = {"snapshot-id": old, "filter": {"type": "eq", "term": "c", "value": "a"}}
    assert_error(
        requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/t/plan", json=body, timeout=30), 400, "BadRequestException"
    )
    tasks, _ = _plan_all(srv.url, ns, "t", {**body, "use-snapshot-schema": True})
    assert len(tasks) == 1


def _cache_lookups(url: str, result: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=10).text
    prefix = f'catalog_planning_manifest_cache_total{{result="{result}"}} '
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def test_manifests_are_read_once_and_then_served_from_the_cache(srv, tables: dict) -> None:
    ns, name = tables["bucketed"].split(".")
    _plan_all(srv.url, ns, name, {"filter": {"type": "gt", "term": "id", "value": 1}})
    hits, misses = _cache_lookups(srv.url, "hit"), _cache_lookups(srv.url, "miss")
    _plan_all(srv.url, ns, name, {"filter": {"type": "lt", "term": "id", "value": 7}})
    assert _cache_lookups(srv.url, "miss") == misses  # the list and its manifests: all cached
    assert _cache_lookups(srv.url, "hit") >= hits + 3  # a list and two manifests at least


def test_a_deletion_vector_goes_to_its_data_file_only_and_masks_position_deletes(srv) -> None:
    """v3: a DV (Puffin, referenced-data-file) applies to its one file, where it replaces the
    partition's position deletes; the other file of the partition keeps those (Java's rules). The
    delete files are named, not written: the plan does not read them."""
    cat, rng = client_planning(srv), random.Random(11)
    ns = f"dv_{uuid.uuid4().hex[:6]}"
    cat.create_namespace(ns)
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "c"))
    table = cat.create_table(f"{ns}.t", SCHEMA, partition_spec=spec)  # pyiceberg 0.12 writes no v3 manifests
    for i in range(2):
        rows = some_rows(rng, i * 10, 10)
        table.append(rows.set_column(1, "c", pa.array(["a"] * 10)))
    upgrade = {"updates": [{"action": "upgrade-format-version", "format-version": 3}]}  # pyiceberg refuses 3
    assert requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/t", json=upgrade, timeout=30).status_code == 200
    table = cat.load_table(f"{ns}.t")
    first, second = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.file_path)
    dv = v3_position_deletes(table, first, FileFormat.PUFFIN)
    partition_wide = v3_position_deletes(table, first, FileFormat.PARQUET)
    commit_v3_deletes(srv, table, [dv, partition_wide], rng)
    body = requests.post(f"{srv.url}/v1/namespaces/{ns}/tables/t/plan", json={}, timeout=30).json()
    deletes = body["delete-files"]
    applied = {
        t["data-file"]["file-path"]: sorted(deletes[i]["file-format"] for i in t.get("delete-file-references", []))
        for t in body["file-scan-tasks"]
    }
    assert applied == {first.file_path: ["puffin"], second.file_path: ["parquet"]}
    (dv_json,) = [d for d in deletes if d["file-format"] == "puffin"]
    assert dv_json["referenced-data-file"] == first.file_path and dv_json["content-offset"] == 4
