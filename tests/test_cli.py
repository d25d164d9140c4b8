"""The command line for people (catalog/cli/browse.py): namespaces/tables/views against a real running server,
``doctor`` against real local configurations, and ``migrate --downgrade``'s confirmation.

The REST commands run in-process (``catalog.__main__.main``) against a real server process, so each
call does not pay a Python start-up; ``migrate`` runs as a real subprocess, because what is tested is
its stdin not being a terminal.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, StructType, TimestampType
from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

from catalog.__main__ import main
from tests.support import ROOT, Server, free_port, start_server

NESTED_PY_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), doc="who"),
    NestedField(3, "at", TimestampType()),
    NestedField(4, "addr", StructType(NestedField(5, "city", StringType()))),
    identifier_field_ids=[1],
)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory):
    """A SQLite server with lake.events (two appends), a child namespace and a view."""
    workdir = tmp_path_factory.mktemp("cli")
    server = start_server(workdir)
    cat = server.catalog()
    cat.create_namespace("lake", {"owner": "data-team"})
    cat.create_namespace(("lake", "raw"))
    table = cat.create_table(
        "lake.events",
        NESTED_PY_SCHEMA,
        partition_spec=PartitionSpec(PartitionField(3, 1000, DayTransform(), "at_day")),
        sort_order=SortOrder(SortField(1, IdentityTransform(), SortDirection.DESC, NullOrder.NULLS_LAST)),
        properties={"comment": "clicks"},
    )
    rows = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ["a", "b"],
            "at": pa.array([1_700_000_000_000_000, 1_700_100_000_000_000], pa.timestamp("us")),
            "addr": pa.array([{"city": "x"}, {"city": "y"}], pa.struct([("city", pa.string())])),
        }
    ).cast(table.schema().as_arrow())
    table.append(rows)
    table.append(rows)
    table = cat.load_table("lake.events")
    cat.create_view(
        "lake.recent",
        Schema(NestedField(1, "id", LongType())),
        ViewVersion(
            version_id=1,
            schema_id=0,
            timestamp_ms=1_700_000_000_000,
            summary={"engine-name": "test"},
            representations=[
                ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT id FROM lake.events", dialect="spark"))
            ],
            default_namespace=["lake"],
        ),
    )
    yield server, workdir, [s.snapshot_id for s in table.metadata.snapshots]
    server.stop()


def cli(capsys: pytest.CaptureFixture[str], server: Server | None, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    uri = ["--uri", server.url] if server else []
    status = main([*argv, *uri])
    out, err = capsys.readouterr()
    return status, out, err


def test_namespaces_list_and_show(lake, capsys) -> None:
    server, _, _ = lake
    status, out, _ = cli(capsys, server, "namespaces", "list")
    assert status == 0 and "lake" in out
    status, out, _ = cli(capsys, server, "namespaces", "list", "--parent", "lake", "--json")
    assert status == 0 and json.loads(out) == {"namespaces": ["lake.raw"]}
    status, out, _ = cli(capsys, server, "namespaces", "show", "lake")
    assert status == 0 and "owner" in out and "data-team" in out and "events" in out
    status, out, _ = cli(capsys, server, "namespaces", "show", "lake", "--json")
    doc = json.loads(out)
    assert doc["properties"]["owner"] == "data-team" and doc["tables"] == ["events"]


def test_tables_list_and_show(lake, capsys) -> None:
    server, _, snapshots = lake
    status, out, _ = cli(capsys, server, "tables", "list", "lake", "--json")
    assert status == 0 and json.loads(out) == {"tables": ["lake.events"]}
    status, out, _ = cli(capsys, server, "tables", "show", "lake.events")
    assert status == 0
    for text in ("Schema", "long", "string", "timestamp", "addr.city", "at_day", "day", "desc", "nulls-last", "clicks"):
        assert text in out, (text, out)
    assert str(snapshots[-1]) in out and "main" in out and "append" in out and "4 records" in out
    status, out, _ = cli(capsys, server, "tables", "show", "lake.events", "--json")
    doc = json.loads(out)
    fields = {f["name"]: f for f in doc["schema"]["fields"]}
    assert fields["id"] == {"id": 1, "name": "id", "type": "long", "required": True}
    assert fields["name"]["doc"] == "who" and fields["addr.city"]["id"] == 5
    assert doc["partition-spec"]["fields"] == [{"source-id": 3, "source": "at", "transform": "day", "name": "at_day"}]
    assert [(f["source"], f["direction"], f["null-order"]) for f in doc["sort-order"]["fields"]] == [
        ("id", "desc", "nulls-last")
    ]
    assert doc["current-snapshot"]["snapshot-id"] == snapshots[-1]
    assert doc["current-snapshot"]["summary"]["total-records"] == "4"
    assert doc["refs"] == {"main": {"snapshot-id": snapshots[-1], "type": "branch"}}
    assert doc["properties"]["comment"] == "clicks" and doc["location"].endswith("/lake/events")


def test_tables_history(lake, capsys) -> None:
    server, _, snapshots = lake
    status, out, _ = cli(capsys, server, "tables", "history", "lake.events")
    assert status == 0 and len(snapshots) == 2
    for sid in snapshots:
        assert str(sid) in out
    assert f"* {snapshots[1]}" in out and out.count("append") == 2 and "total-records=4" in out
    status, out, _ = cli(capsys, server, "tables", "history", "lake.events", "--json")
    doc = json.loads(out)
    assert [s["snapshot-id"] for s in doc["snapshots"]] == snapshots
    assert [s["parent-snapshot-id"] for s in doc["snapshots"]] == [None, snapshots[0]]
    assert [s["operation"] for s in doc["snapshots"]] == ["append", "append"]
    assert [s["current"] for s in doc["snapshots"]] == [False, True]


def test_views_list_and_show(lake, capsys) -> None:
    server, _, _ = lake
    status, out, _ = cli(capsys, server, "views", "list", "lake", "--json")
    assert status == 0 and json.loads(out) == {"views": ["lake.recent"]}
    status, out, _ = cli(capsys, server, "views", "show", "lake.recent")
    assert status == 0 and "SELECT id FROM lake.events" in out and "spark" in out
    doc = json.loads(cli(capsys, server, "views", "show", "lake.recent", "--json")[1])
    assert doc["schema"]["fields"] == [{"id": 1, "name": "id", "type": "long", "required": False}]
    assert doc["current-version-id"] == 1


def test_errors_are_one_line(lake, capsys) -> None:
    server, _, _ = lake
    for argv, status, text in (
        (("tables", "show", "lake.nope"), 1, "lake.nope"),
        (("tables", "history", "nope.t"), 1, "nope"),
        (("namespaces", "show", "nope"), 1, "nope"),
        (("views", "show", "lake.nope"), 1, "lake.nope"),
        (("tables", "show", "events"), 2, "namespace.name"),
    ):
        got, out, err = cli(capsys, server, *argv)
        assert got == status and text in err and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    got, _, err = cli(capsys, None, "tables", "list", "lake", "--uri", f"http://127.0.0.1:{free_port()}")
    assert got == 1 and "cannot reach the catalog" in err and err.count("\n") == 1


@pytest.mark.slow
def test_authentication(tmp_path: Path, capsys) -> None:
    secret = "a-test-signing-key-of-at-least-32-bytes!"
    env = {"CATALOG_AUTH_REQUIRED": "true", "CATALOG_OAUTH_CLIENTS": "ops:ops-secret", "CATALOG_TOKEN_SECRET": secret}
    server = start_server(tmp_path, extra_env={**env, "CATALOG_AUTHORIZATION": "none"})
    try:
        got, _, err = cli(capsys, server, "namespaces", "list")
        assert got == 2 and "not authenticated" in err and err.count("\n") == 1
        got, _, err = cli(capsys, server, "namespaces", "list", "--credential", "ops:wrong")
        assert got == 2 and "not authenticated" in err
        got, out, _ = cli(capsys, server, "namespaces", "list", "--credential", "ops:ops-secret", "--json")
        assert got == 0 and json.loads(out) == {"namespaces": []}
    finally:
        server.stop()


# ---------------------------------------------------------------------------------------------
# doctor
# ---------------------------------------------------------------------------------------------


def doctor(capsys, monkeypatch, env: dict[str, str], *argv: str) -> tuple[int, str]:
    for key in [k for k in __import__("os").environ if k.startswith("CATALOG_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    capsys.readouterr()
    status = main(["doctor", *argv])
    return status, capsys.readouterr().out


def test_doctor_passes_on_a_healthy_configuration(lake, capsys, monkeypatch) -> None:
    server, workdir, _ = lake
    status, out = doctor(capsys, monkeypatch, {k: server.env[k] for k in ("CATALOG_DATABASE_URL", "CATALOG_WAREHOUSE")})
    assert status == 0, out
    for line in ("✓ database: reachable", "✓ migrations: at head", "✓ warehouse: writable"):
        assert line in out, out
    assert "all checks passed" in out
    assert not list((workdir / "warehouse").glob(".iceberg-catalog-doctor-*"))  # the probe is gone
    # Risky settings are named, and fail the run only with --strict.
    env = {k: server.env[k] for k in ("CATALOG_DATABASE_URL", "CATALOG_WAREHOUSE")}
    status, out = doctor(capsys, monkeypatch, {**env, "CATALOG_HOST": "0.0.0.0"}, "--strict")
    assert status == 1 and "! settings: CATALOG_AUTH_REQUIRED is false" in out


def test_doctor_fails_on_an_unwritable_warehouse(lake, tmp_path, capsys, monkeypatch) -> None:
    server, _, _ = lake
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the warehouse should be")
    env = {"CATALOG_DATABASE_URL": server.env["CATALOG_DATABASE_URL"], "CATALOG_WAREHOUSE": str(blocker)}
    status, out = doctor(capsys, monkeypatch, env, "--json")
    assert status == 1
    checks = {c["check"]: c for c in json.loads(out)}
    assert checks["warehouse"]["ok"] is False and "not a directory" in checks["warehouse"]["detail"]
    assert checks["database"]["ok"] is True
    assert blocker.read_text() == "a file where the warehouse should be"


def test_doctor_fails_on_an_unreachable_database(tmp_path, capsys, monkeypatch) -> None:
    env = {
        "CATALOG_DATABASE_URL": f"postgresql+psycopg://cat:hunter2@127.0.0.1:{free_port()}/cat",
        "CATALOG_WAREHOUSE": str(tmp_path),
    }
    status, out = doctor(capsys, monkeypatch, env)
    assert status == 1
    assert "✗ database: cannot connect to postgresql+psycopg://cat:***@127.0.0.1" in out and "hunter2" not in out
    assert "✓ warehouse: writable" in out and "1 check(s) failed" in out
    # A SQLite file that is not there is reported, not created empty.
    status, out = doctor(capsys, monkeypatch, {"CATALOG_DATABASE_URL": f"sqlite:///{tmp_path}/gone.db"})
    assert status == 1 and "gone.db does not exist" in out and not (tmp_path / "gone.db").exists()


@pytest.mark.postgres
@pytest.mark.s3
def test_doctor_on_postgres_and_s3(pg_s3_server, services, capsys, monkeypatch) -> None:
    """The S3 path: the bucket answers, the probe goes through S3, the clock is compared with S3's Date."""
    env = {k: v for k, v in pg_s3_server.env.items() if k.startswith("CATALOG_") and k not in ("CATALOG_PORT",)}
    status, out = doctor(capsys, monkeypatch, env)
    assert status == 0, out
    for line in ("✓ database: reachable: postgresql", "✓ migrations: at head", "✓ s3: bucket", "✓ clock:", "S3"):
        assert line in out, out
    assert "✓ warehouse: writable" in out and "s3://" in out
    s3 = services["s3"].client()
    probes = s3.list_objects_v2(Bucket=services["s3"].bucket, Prefix="suite/.iceberg-catalog-doctor")
    assert not probes.get("Contents"), "the probe object is deleted"
    # Wrong keys: S3 refuses, the run fails and names the check.
    status, out = doctor(capsys, monkeypatch, {**env, "CATALOG_S3_SECRET_ACCESS_KEY": "wrong"})
    assert status == 1 and "✗ s3:" in out and "✗ warehouse:" in out


# ---------------------------------------------------------------------------------------------
# Start-up: what each command imports (bench/cli.py times it; no timing is asserted here)
# ---------------------------------------------------------------------------------------------

# The server's libraries: --help and the commands that talk to a running server over HTTP need none.
SERVER_LIBRARIES = {
    "sqlalchemy", "alembic", "psycopg", "litestar", "uvicorn", "jwt", "prometheus_client", "pydantic_settings",
    "boto3", "botocore", "pyarrow",
}  # fmt: skip
# pyiceberg's REST client (the browse commands: namespaces, tables list|show|history, views) and what it brings.
REST_CLIENT = {"pyiceberg", "pydantic"}
# What the management commands use to call the server and print (tables dropped, maintenance, events, warehouses).
HTTP_CLIENT = {"requests", "rich", "yaml"}

_PROBE = """import json, sys
from catalog.__main__ import main
try:
    status = main(sys.argv[2:])
except SystemExit as e:
    status = e.code
with open(sys.argv[1], "w") as f:
    json.dump({"status": status, "modules": sorted({m.partition(".")[0] for m in sys.modules})}, f)
"""


def imported_by(tmp_path: Path, *argv: str) -> tuple[int, set[str]]:
    """Run one command in a new process: its exit status and the top-level modules it imported."""
    found = tmp_path / "modules.json"
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(found), *argv], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0 and found.exists(), run.stderr
    doc = json.loads(found.read_text())
    return doc["status"], set(doc["modules"])


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["serve", "--help"],
        ["migrate", "--help"],
        ["doctor", "--help"],
        ["namespaces", "list", "--help"],
        ["tables", "dropped", "--help"],
        ["maintenance", "history", "--help"],
        ["events", "tail", "--help"],
        ["warehouses", "list", "--help"],
    ],
    ids=" ".join,
)
def test_help_imports_neither_the_server_nor_a_client(argv: list[str], tmp_path: Path) -> None:
    status, modules = imported_by(tmp_path, *argv)
    assert status == 0 and "argparse" in modules
    assert modules & (SERVER_LIBRARIES | REST_CLIENT | HTTP_CLIENT) == set()


@pytest.mark.parametrize(
    "argv",
    [["tables", "dropped"], ["maintenance", "history"], ["events", "tail"], ["warehouses", "list"]],
    ids=" ".join,
)
def test_management_commands_import_only_an_http_client(lake, argv: list[str], tmp_path: Path) -> None:
    server, _, _ = lake
    status, modules = imported_by(tmp_path, *argv, "--uri", server.url)
    assert status == 0 and "requests" in modules  # the probe sees what a command does import
    assert modules & (SERVER_LIBRARIES | REST_CLIENT) == set()


def test_browse_commands_import_pyiceberg_but_not_the_server(lake, tmp_path: Path) -> None:
    server, _, _ = lake
    status, modules = imported_by(tmp_path, "namespaces", "list", "--uri", server.url)
    assert status == 0 and "pyiceberg" in modules
    assert modules & SERVER_LIBRARIES == set()


# ---------------------------------------------------------------------------------------------
# migrate --downgrade
# ---------------------------------------------------------------------------------------------


def test_downgrade_needs_confirmation(lake) -> None:
    server, workdir, _ = lake
    db = workdir / "catalog.db"

    def tables() -> set[str]:
        with sqlite3.connect(db) as conn:
            return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}

    before = tables()
    assert "alembic_version" in before
    env = {**server.env, "CATALOG_LOG_LEVEL": "warning"}
    run = subprocess.run(
        [sys.executable, "-m", "catalog", "migrate", "--downgrade", "--revision", "base"],
        env=env,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "refusing to downgrade" in run.stderr and "--yes" in run.stderr and "Traceback" not in run.stderr
    assert tables() == before
    status, out, _ = namespaces_in_a_subprocess(server)
    assert status == 0 and "lake" in out


def namespaces_in_a_subprocess(server: Server) -> tuple[int, str, str]:
    run = subprocess.run(
        [sys.executable, "-m", "catalog", "namespaces", "list", "--uri", server.url, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return run.returncode, run.stdout, run.stderr


@pytest.mark.slow
def test_downgrade_asks_at_a_terminal(tmp_path: Path) -> None:
    """At a terminal: a wrong answer changes nothing; typing the revision goes ahead."""
    import os
    import pty

    env = {**os.environ, "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path}/c.db", "CATALOG_LOG_LEVEL": "warning"}

    def migrate(*argv: str, answer: bytes | None = None) -> subprocess.CompletedProcess:
        if answer is None:
            return subprocess.run([sys.executable, "-m", "catalog", "migrate", *argv], env=env, capture_output=True)
        master, slave = pty.openpty()
        try:
            os.write(master, answer)
            return subprocess.run(
                [sys.executable, "-m", "catalog", "migrate", *argv], env=env, stdin=slave, capture_output=True
            )
        finally:
            os.close(master)
            os.close(slave)

    def tables() -> set[str]:
        with sqlite3.connect(tmp_path / "c.db") as conn:
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return names - {"sqlite_sequence"}

    assert migrate().returncode == 0 and "namespaces" in tables()
    refused = migrate("--downgrade", "--revision", "base", answer=b"yes\n")
    assert refused.returncode == 2 and b"not confirmed" in refused.stderr and b"drops EVERY" in refused.stderr
    assert "namespaces" in tables()
    done = migrate("--downgrade", "--revision", "base", answer=b"base\n")
    assert done.returncode == 0, done.stderr
    assert tables() <= {"alembic_version"}
