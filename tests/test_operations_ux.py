"""What an operator meets: refusals at start-up (the real CLI, one line naming the setting, exit 2),
the port bound before the database is touched, the start-up summary, ``--version``, ``GET /``, and
a server of four worker processes: JSON logs from every process (access and commit lines) and
``/metrics`` added up across the workers."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
import requests

from catalog import __version__
from catalog.server import startup
from catalog.settings import Settings
from tests.support import JSON_SCHEMA, ROOT, append_updates, builtin_token, free_port, start_server

# -- refusals ------------------------------------------------------------------------------------


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI as a subprocess, without the caller's CATALOG_* settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    clean["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args],
        env={**clean, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refused(out: subprocess.CompletedProcess) -> str:
    """Exit status 2 and exactly one line on stderr, no traceback: that line."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert lines[0].startswith("iceberg-catalog: "), lines
    return lines[0]


REFUSALS = {
    "port": (["--port", "abc"], {}, ["CATALOG_PORT", "--port", "valid integer", "'abc'"]),
    "workers": ([], {"CATALOG_WORKERS": "0"}, ["CATALOG_WORKERS", "--workers", "greater than or equal to 1"]),
    "log level": (["--log-level", "verbose"], {}, ["CATALOG_LOG_LEVEL", "--log-level", "debug, info", "'verbose'"]),
    "not a url": (["--database-url", "not a url"], {}, ["CATALOG_DATABASE_URL", "sqlite:///", "postgresql://"]),
    "mysql": ([], {"CATALOG_DATABASE_URL": "mysql://u:hunter2@db/c"}, ["CATALOG_DATABASE_URL", "postgresql://"]),
    "auth without clients": ([], {"CATALOG_AUTH_REQUIRED": "true"}, ["CATALOG_AUTH_REQUIRED", "CATALOG_OAUTH_CLIENTS"]),
}


@pytest.mark.parametrize("case", list(REFUSALS))
@pytest.mark.slow
def test_a_misconfiguration_is_one_line_naming_the_setting(case, tmp_path):
    args, env, wanted = REFUSALS[case]
    line = refused(cli("serve", "--port", str(free_port()), *args, cwd=tmp_path, env=env))
    for word in wanted:
        assert word in line, line
    assert "hunter2" not in line  # a database URL's password is never repeated
    assert not list(tmp_path.iterdir()), "a refused start wrote nothing"


def test_an_unreachable_postgresql_is_one_line_with_where_and_what(tmp_path):
    """postgres:// is taken as PostgreSQL (SQLAlchemy alone knows no such dialect); nothing listens."""
    port = free_port()
    url = f"postgres://catalog:hunter2@127.0.0.1:{port}/cat"
    line = refused(cli("serve", "--port", str(free_port()), "--database-url", url, cwd=tmp_path))
    assert f"127.0.0.1:{port}" in line and "CATALOG_DATABASE_URL" in line, line
    assert "refused" in line.lower() and "hunter2" not in line, line
    # with --log-level debug the traceback comes too
    out = cli("serve", "--port", str(free_port()), "--database-url", url, "--log-level", "debug", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" in out.stderr


def test_a_busy_port_fails_before_the_database_is_touched(tmp_path):
    db, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        args = ["--port", str(port), "--database-url", f"sqlite:///{db}", "--warehouse", str(warehouse)]
        out = cli("serve", *args, cwd=tmp_path)
    line = refused(out)
    assert f"127.0.0.1:{port}" in line and "CATALOG_PORT" in line and "in use" in line, line
    assert not db.exists() and not warehouse.exists()


def test_version(tmp_path):
    out = cli("--version", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.strip() == f"iceberg-catalog {__version__}"


# -- the start-up summary -----------------------------------------------------------------------


def test_summary_says_where_the_data_is(tmp_path):
    """Started with the defaults inside a directory, in the text format: the summary names the
    absolute database file and warehouse, and warns that both depend on the working directory."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(PYTHONPATH=str(ROOT), CATALOG_LOG_FORMAT="text", CATALOG_PORT=str(free_port()))
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog", "serve"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line.rstrip())
            if line.startswith("warning: CATALOG_WAREHOUSE"):
                break
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()
    text = "\n".join(seen)
    assert f"iceberg-catalog {__version__} listening on http://127.0.0.1:{env['CATALOG_PORT']}" in text, text
    assert f"database:  sqlite:///{tmp_path / 'catalog.db'}" in text and (tmp_path / "catalog.db").exists(), text
    assert f"warehouse: {tmp_path / 'warehouse'}" in text and "workers:   1" in text, text
    assert "auth:      off" in text
    assert "warning: CATALOG_DATABASE_URL is a relative path" in text, text


def test_risky_settings_warn_and_passwords_are_masked():
    quiet = Settings(database_url="sqlite:////abs/c.db", warehouse="/abs/wh")
    assert startup.risky(quiet) == []
    loud = Settings(
        database_url="sqlite:///c.db",
        warehouse="wh",
        host="0.0.0.0",
    )
    warnings = startup.risky(loud)
    named = [w.split(" ", 1)[0] for w in warnings]
    assert named == ["CATALOG_DATABASE_URL", "CATALOG_WAREHOUSE", "CATALOG_AUTH_REQUIRED"]
    s3 = Settings(database_url="postgres://u:hunter2@db:5433/c", warehouse="s3://b/p", s3_endpoint="http://minio:9000")
    assert s3.database.database_url == "postgresql+psycopg://u:hunter2@db:5433/c"
    assert [w.split(" ", 1)[0] for w in startup.risky(s3)] == ["CATALOG_S3_ENDPOINT"]
    lines, fields = startup.summary(s3)
    assert "hunter2" not in "\n".join(lines) and fields["database"] == "postgresql+psycopg://u:***@db:5433/c"


# -- four workers ------------------------------------------------------------------------------


AUTH = {
    "CATALOG_AUTH_REQUIRED": "true",
    "CATALOG_OAUTH_CLIENTS": "ingest:ingest-secret",
    "CATALOG_TOKEN_SECRET": "a-test-token-signing-key-of-at-least-32-bytes",
    "CATALOG_AUTHORIZATION": "none",
}


@pytest.fixture(scope="module")
def workers4(tmp_path_factory):
    """Four workers, authentication on (so access lines name the principal)."""
    env = {"CATALOG_WORKERS": "4", "CATALOG_LOG_LEVEL": "info", **AUTH}
    srv = start_server(tmp_path_factory.mktemp("workers4"), extra_env=env)
    deadline = time.monotonic() + 90
    while srv.log.read_bytes().count(b"Application startup complete") < 4:  # all four serve
        assert time.monotonic() < deadline, srv.log.read_text()[-3000:]
        time.sleep(0.2)
    yield srv
    srv.stop()


def bearer(server) -> dict[str, str]:
    return {"Authorization": f"Bearer {builtin_token(server, 'ingest', 'ingest-secret')}", "Connection": "close"}


def totals(url: str) -> dict[str, float]:
    """One scrape, on a fresh connection: commits, and HTTP requests summed over every label set."""
    text = requests.get(f"{url}/metrics", timeout=10, headers={"Connection": "close"}).text
    commits = re.search(r'^catalog_commits_total\{kind="table"\} ([0-9.e+]+)$', text, re.M)
    posts = re.findall(
        r'^catalog_http_requests_total\{method="POST",route="/v1/namespaces/\{namespace:str\}/tables/\{table:str\}",'
        r'status="200"\} ([0-9.e+]+)$',
        text,
        re.M,
    )
    every = re.findall(r"^catalog_http_requests_total\{[^}]*\} ([0-9.e+]+)$", text, re.M)
    return {
        "commits": float(commits.group(1)) if commits else 0.0,
        "posts": sum(float(v) for v in posts),
        "requests": sum(float(v) for v in every),
    }


COMMITS = 12


@pytest.fixture(scope="module")
def committed(workers4):
    """A table created and COMMITS appends, each request on a fresh connection (so spread over the workers)."""
    url, ns, headers = workers4.url, f"ux_{uuid.uuid4().hex[:8]}", bearer(workers4)

    def call(method: str, path: str, **kw) -> requests.Response:
        resp = requests.request(method, url + path, timeout=30, headers=headers, **kw)
        assert resp.status_code == 200, resp.text
        return resp

    call("POST", "/v1/namespaces", json={"namespace": [ns]})
    metadata = call("POST", f"/v1/namespaces/{ns}/tables", json={"name": "t", "schema": JSON_SCHEMA}).json()["metadata"]
    for i in range(1, COMMITS + 1):
        body = {"requirements": [], "updates": append_updates(metadata, i)}
        metadata = call("POST", f"/v1/namespaces/{ns}/tables/t", json=body).json()["metadata"]
    return ns


def test_metrics_are_added_up_across_workers(workers4, committed):
    seen = [totals(workers4.url) for _ in range(12)]
    for before, after in zip(seen, seen[1:], strict=False):
        assert after["commits"] >= before["commits"] and after["requests"] >= before["requests"], seen
    # every scrape, whichever worker served it, counts every commit (the create is a commit too)
    assert {s["commits"] for s in seen} == {COMMITS + 1}, seen
    assert {s["posts"] for s in seen} == {COMMITS}, seen


def test_every_worker_logs_json_with_access_and_commit_lines(workers4, committed):
    headers = bearer(workers4)
    assert requests.get(f"{workers4.url}/", headers=headers, timeout=10).json()["version"] == __version__
    assert requests.get(f"{workers4.url}/no/such/route", headers=headers, timeout=10).status_code == 404
    for _ in range(3):
        assert requests.get(f"{workers4.url}/health/ready", timeout=10).status_code == 200
    time.sleep(0.5)  # the access line is written after the response
    raw = [line for line in workers4.log.read_bytes().splitlines() if line.strip()]
    entries = [orjson.loads(line) for line in raw]  # every line of every process is JSON
    started = [e for e in entries if e["message"].startswith("Started server process")]
    assert len(started) == 4, [e["message"] for e in entries][:20]
    [summary] = [e for e in entries if e.get("url") == workers4.url]
    assert summary["workers"] == 4 and summary["database"] == workers4.env["CATALOG_DATABASE_URL"]
    assert summary["auth"] == "on (1 built-in client; authorization: none)"
    access = [e for e in entries if e["logger"] == "catalog.access"]
    commit_route = "/v1/namespaces/{namespace:str}/tables/{table:str}"
    posts = [e for e in access if e["route"] == commit_route and e["method"] == "POST"]
    assert len(posts) == COMMITS and all(e["status"] == 200 and e["request_id"] for e in posts), posts[:2]
    assert all(isinstance(e["duration_ms"], float) and e["principal"] == "ingest" for e in posts)
    assert any(e["route"] == "unmatched" and e["status"] == 404 for e in access)
    assert any(e["route"] == "/" and e["status"] == 200 for e in access)
    assert not [e for e in access if e["route"].startswith(("/health", "/metrics"))], "probes are at debug"
    assert not [e for e in entries if e["logger"].startswith("alembic")], "no library noise"
    commits = [e for e in entries if e["logger"] == "catalog.commit" and e.get("name") == f"{committed}.t"]
    assert [e["snapshot_id"] for e in commits if e["message"].startswith("committed")] == list(range(1, COMMITS + 1))
    assert all(e["attempts"] == 1 and e["kind"] == "table" for e in commits) and len(commits) == COMMITS + 1
