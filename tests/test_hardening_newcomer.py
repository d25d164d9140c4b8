"""A newcomer's first hour (issue 28): what goes wrong in the first minutes with the catalog is said in
one line naming the setting to change, not a traceback; typos in settings are caught; the API is
browsable; the README's snippets run as pasted.

Each test runs the real CLI or a real server process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, free_port


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
    """Exit status 2 and exactly one line on stderr, no traceback, nothing said of listening: that line."""
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr and "listening" not in out.stderr, out.stderr[-2000:]
    assert len(lines) == 1, out.stderr[-2000:]
    return lines[0]


# -- 6. a warehouse the server cannot use ------------------------------------------------------------


def _blocked_warehouses(tmp_path: Path) -> dict[str, str]:
    regular = tmp_path / "a-file"
    regular.write_text("not a directory")
    return {"under a regular file": str(regular / "warehouse"), "a regular file": str(regular), "in /proc": "/proc/wh"}


@pytest.mark.parametrize("case", ["under a regular file", "a regular file", "in /proc"])
def test_an_unusable_warehouse_is_one_line_before_listening(case, tmp_path):
    warehouse = _blocked_warehouses(tmp_path)[case]
    db = tmp_path / "catalog.db"
    out = cli(
        "serve",
        "--port",
        str(free_port()),
        "--database-url",
        f"sqlite:///{db}",
        "--warehouse",
        warehouse,
        cwd=tmp_path,
        env={"CATALOG_LOG_FORMAT": "json"},
    )
    line = refused(out)
    assert "CATALOG_WAREHOUSE" in line and warehouse in line, line
    assert not db.exists(), "refused before the database was created"
    assert (tmp_path / "a-file").read_text() == "not a directory"


@pytest.mark.parametrize("case", ["under a regular file", "a regular file", "in /proc"])
def test_doctor_says_the_same_of_an_unusable_warehouse(case, tmp_path):
    warehouse = _blocked_warehouses(tmp_path)[case]
    db = tmp_path / "catalog.db"
    served = refused(
        cli(
            "serve",
            "--port",
            str(free_port()),
            "--database-url",
            f"sqlite:///{db}",
            "--warehouse",
            warehouse,
            cwd=tmp_path,
        )
    )
    out = cli("doctor", "--json", "--database-url", f"sqlite:///{db}", "--warehouse", warehouse, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    checks = {c["check"]: c for c in json.loads(out.stdout)}
    assert checks["warehouse"]["ok"] is False
    assert checks["warehouse"]["detail"] in served, (checks["warehouse"]["detail"], served)
    assert not Path(warehouse).is_dir()


def test_a_missing_warehouse_is_still_created(tmp_path):
    """The check creates a missing (usable) warehouse as before and leaves no probe behind."""
    from tests.support import start_server

    srv = start_server(tmp_path, extra_env={"CATALOG_WAREHOUSE": str(tmp_path / "deep" / "er" / "wh")})
    try:
        assert (tmp_path / "deep" / "er" / "wh").is_dir()
        assert not [p for p in (tmp_path / "deep" / "er" / "wh").iterdir() if p.name.startswith(".iceberg-catalog")]
    finally:
        srv.stop()


# -- 7. a CATALOG_* variable that is no setting ------------------------------------------------------


def test_serve_warns_of_a_misspelt_setting_naming_the_real_one(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(
        PYTHONPATH=str(ROOT),
        CATALOG_LOG_FORMAT="text",
        CATALOG_PORT=str(free_port()),
        CATALOG_DATABSE_URL="sqlite:////nowhere/meant.db",
        CATALOG_URI="http://127.0.0.1:1",  # read by the browse commands: no warning
        CATALOG_TEST_BACKENDS="sqlite",  # read by the tests: no warning
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "catalog", "serve"], env=env, cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        seen = []
        for line in proc.stderr:
            seen.append(line.rstrip())
            if "dropped tables:" in line:  # the summary's last line; the warnings follow it
                break
        for line in proc.stderr:
            seen.append(line.rstrip())
            if not line.startswith("warning:"):
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
    typo = [line for line in seen if "CATALOG_DATABSE_URL" in line]
    assert len(typo) == 1 and typo[0].startswith("warning:"), seen
    assert "did you mean CATALOG_DATABASE_URL?" in typo[0], typo
    assert not [line for line in seen if "CATALOG_URI" in line or "CATALOG_TEST_BACKENDS" in line], seen


def test_doctor_warns_of_a_misspelt_setting(tmp_path):
    env = {"CATALOG_WAREHOUSE": str(tmp_path), "CATALOG_AUTH_REQUIRD": "true", "CATALOG_TOKEN": "t"}
    out = cli("doctor", "--json", cwd=tmp_path, env=env)
    warnings = [c["detail"] for c in json.loads(out.stdout) if c["warning"]]
    typo = [w for w in warnings if "CATALOG_AUTH_REQUIRD" in w]
    assert len(typo) == 1 and "did you mean CATALOG_AUTH_REQUIRED?" in typo[0], warnings
    assert not [w for w in warnings if "CATALOG_TOKEN" in w], warnings


# -- 8. what a first request is told -----------------------------------------------------------------


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory):
    from tests.support import start_server

    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "etl:s3cret",
        "CATALOG_TOKEN_SECRET": "x" * 40,
        "CATALOG_AUTHORIZATION": "none",
    }
    srv = start_server(tmp_path_factory.mktemp("auth"), extra_env=env)
    yield srv
    srv.stop()


def test_no_token_is_called_a_missing_token(auth_server):
    import requests
    from pyiceberg.exceptions import UnauthorizedError

    for headers in ({}, {"Authorization": "Bearer None"}, {"Authorization": "Bearer "}):
        resp = requests.get(f"{auth_server.url}/v1/namespaces", headers=headers, timeout=10)
        assert resp.status_code == 401, resp.text
        message = resp.json()["error"]["message"]
        assert "missing bearer token" in message and "malformed" not in message, (headers, message)
    # pyiceberg, configured without a token or credential, is told the same
    with pytest.raises(UnauthorizedError, match="missing bearer token"):
        auth_server.catalog().list_namespaces()
    # a token that is there but broken is still called malformed
    resp = requests.get(f"{auth_server.url}/v1/namespaces", headers={"Authorization": "Bearer abc"}, timeout=10)
    assert resp.status_code == 401 and "malformed token" in resp.json()["error"]["message"]


def test_an_unreachable_s3_names_its_endpoint_and_setting(tmp_path):
    import requests

    from tests.support import start_server

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {
        "CATALOG_WAREHOUSE": "s3://lake/wh",
        "CATALOG_S3_ENDPOINT": endpoint,
        "CATALOG_S3_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "CATALOG_S3_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-very-secret",
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_STORAGE_TIMEOUT_SECONDS": "1",
    }
    srv = start_server(tmp_path, extra_env=env)
    try:
        import time

        deadline = time.monotonic() + 30
        while True:  # the first probes may still be trying when readiness answers ("no answer within")
            ready = requests.get(f"{srv.url}/health/ready", timeout=10)
            assert ready.status_code == 503
            storage = ready.json()["checks"]["storage"]
            if "no answer within" not in storage or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert endpoint in storage and "CATALOG_S3_ENDPOINT" in storage, storage
        requests.post(f"{srv.url}/v1/namespaces", json={"namespace": ["n"]}, timeout=10).raise_for_status()
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "a", "type": "long", "required": False}],
        }
        resp = requests.post(f"{srv.url}/v1/namespaces/n/tables", json={"name": "t", "schema": schema}, timeout=30)
        assert resp.status_code == 503, resp.text
        message = resp.json()["error"]["message"]
        # the body names the setting; where the server tried is in the log and readiness (issue 28:
        # a 503 body shows no server-side address), under the request id
        assert "CATALOG_S3_ENDPOINT" in message and endpoint not in message, message
        for secret in ("AKIDEXAMPLE", "wJalrXUtnFEMI"):
            assert secret not in resp.text and secret not in ready.text
        log = srv.log.read_text()
        assert "503" in log and "CATALOG_S3_ENDPOINT" in log and endpoint in log and "wJalrXUtnFEMI" not in log
    finally:
        srv.stop()


def _serve_until_listening(tmp_path: Path, env: dict[str, str], tty: bool) -> list[str]:
    """Start `serve` (its stderr a terminal or a pipe), collect stderr up to the summary's end, stop it."""
    import pty

    full = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    full.update(PYTHONPATH=str(ROOT), CATALOG_PORT=str(free_port()), **env)
    if tty:
        leader, follower = pty.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "catalog", "serve"], env=full, cwd=tmp_path, stderr=follower)
        os.close(follower)
        stream = os.fdopen(leader, "r", errors="replace")
    else:
        proc = subprocess.Popen(
            [sys.executable, "-m", "catalog", "serve"], env=full, cwd=tmp_path, stderr=subprocess.PIPE, text=True
        )
        stream = proc.stderr
    seen: list[str] = []
    try:
        for line in stream:
            seen.append(line.rstrip())
            if "workers" in line or "Application startup complete" in line:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        stream.close()
    return seen


def test_logs_are_text_on_a_terminal_and_json_otherwise(tmp_path):
    env = {"CATALOG_DATABASE_URL": f"sqlite:///{tmp_path}/a.db", "CATALOG_WAREHOUSE": str(tmp_path / "wh")}
    on_terminal = _serve_until_listening(tmp_path, env, tty=True)
    migrated = [line for line in on_terminal if "database schema migrated" in line]
    assert migrated and not migrated[0].startswith("{"), on_terminal
    assert " INFO catalog: database schema migrated" in migrated[0]
    # piped (a log pipeline): JSON, the summary as one structured line
    env["CATALOG_DATABASE_URL"] = f"sqlite:///{tmp_path}/b.db"
    piped = _serve_until_listening(tmp_path, env, tty=False)
    assert piped and all(json.loads(line) for line in piped), piped
    # asked for explicitly, JSON on a terminal too
    env["CATALOG_DATABASE_URL"] = f"sqlite:///{tmp_path}/c.db"
    asked = _serve_until_listening(tmp_path, {**env, "CATALOG_LOG_FORMAT": "json"}, tty=True)
    assert asked and all(json.loads(line) for line in asked), asked


# -- 10. a browsable API -----------------------------------------------------------------------------


def test_docs_and_openapi_json_are_served_without_a_token(auth_server):
    import re

    import requests
    import yaml

    resp = requests.get(f"{auth_server.url}/openapi.json", timeout=10)  # no token, auth required
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/json")
    assert resp.json() == yaml.safe_load((ROOT / "spec" / "openapi.yaml").read_text())
    page = requests.get(f"{auth_server.url}/docs", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'href="/openapi.json"' in page.text and "/v1/{prefix}/namespaces" in page.text
    # the document's own title, once: not "REST API API"
    assert "<title>iceberg-catalog REST API</title>" in page.text and "API API" not in page.text
    # self-contained: nothing loaded from elsewhere (no network needed, any CSP)
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text), page.text[:500]
    assert "<script" not in page.text
    # not catalog operations: not advertised
    token = requests.post(
        f"{auth_server.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "etl", "client_secret": "s3cret"},
        timeout=10,
    ).json()["access_token"]
    config = requests.get(f"{auth_server.url}/v1/config", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    endpoints = " ".join(config.json()["endpoints"])
    assert "docs" not in endpoints and "openapi" not in endpoints


# -- 10. `helm install` with no values -----------------------------------------------------------------


def _helm_render(values: dict) -> dict[str, list[dict]]:
    """The chart rendered with helm-python-sdk: its manifests by kind."""
    import yaml

    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with helm.Chart.load(str(ROOT / "helm" / "iceberg-catalog")) as chart:
        files = chart.render(values, name="lake", namespace="data", is_install=True)
    kinds: dict[str, list[dict]] = {}
    for path, text in sorted(files.items()):
        if path.endswith(".txt") or not text.strip():
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                kinds.setdefault(doc["kind"], []).append(doc)
    return kinds


def test_helm_install_with_no_values_is_one_working_pod_on_the_embedded_default():
    """No values: one pod, SQLite and a local warehouse on a claim the chart makes, no migration Job (it
    would migrate a file the server never sees) and no database password to invent; the server's own
    start-up check (an unusable warehouse is refused) passes on that volume."""
    kinds = _helm_render({})
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == "catalog"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data")
    assert env["CATALOG_DATABASE_URL"] == f"sqlite:///{mount}/catalog.db"
    assert env["CATALOG_WAREHOUSE"] == f"{mount}/warehouse"
    assert "DATABASE_PASSWORD" not in env
    (claim,) = kinds["PersistentVolumeClaim"]
    volume = next(v for v in pod["volumes"] if v["name"] == "data")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert "Job" not in kinds
    kv = pytest.importorskip("kubernetes_validate.utils", reason="kubernetes-validate is not installed")
    version = sorted(set(kv.all_versions()), key=lambda v: tuple(int(p) for p in v.split(".")))[-1]
    for docs in kinds.values():
        for manifest in docs:
            kv.validate(manifest, version, strict=True)


@pytest.mark.parametrize(
    ("values", "reason"),
    [
        ({"replicaCount": 2}, "the embedded default"),
        ({"autoscaling": {"enabled": True}}, "the embedded default"),
        ({"database": {"host": "pg"}}, "database.password is empty"),  # PostgreSQL half set: refused, not embedded
    ],
)
def test_unworkable_values_are_still_refused(values, reason):
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    with pytest.raises(helm.HelmError) as failure:
        _helm_render(values)
    assert reason in str(failure.value)


def test_postgresql_values_are_unchanged_by_the_embedded_default():
    kinds = _helm_render({"database": {"password": "pw"}})
    (deployment,) = kinds["Deployment"]
    assert deployment["spec"]["replicas"] == 2 and "PersistentVolumeClaim" not in kinds and "Job" in kinds
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "catalog"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["CATALOG_DATABASE_URL"].startswith("postgresql+psycopg://catalog:$(DATABASE_PASSWORD)@postgresql:")
    assert env["CATALOG_WAREHOUSE"] == "s3://warehouse/"


# -- 9. the README's snippets ------------------------------------------------------------------------


def _readme_section(title: str) -> str:
    return (ROOT / "README.md").read_text().split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_readme_pyiceberg_snippet_runs_as_pasted(tmp_path):
    """The first block of "Connect pyiceberg", verbatim but for the URI, against a fresh server: it
    defines what it uses, creates, appends and reads back; run twice, it still works."""
    import re

    from tests.support import start_server

    (snippet, *_) = re.findall(r"```python\n(.*?)```", _readme_section("Connect pyiceberg"), re.S)
    assert "http://127.0.0.1:8181" in snippet
    srv = start_server(tmp_path / "srv")
    try:
        script = tmp_path / "readme_pyiceberg.py"
        script.write_text(snippet.replace("http://127.0.0.1:8181", srv.url))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CATALOG_", "PYICEBERG_"))}
        for run in (1, 2):
            done = subprocess.run(
                [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.count("'kind': 'click'") == 2 * run, done.stdout
        assert srv.catalog().load_table("analytics.events").scan().to_arrow().num_rows == 6
    finally:
        srv.stop()


def test_readme_spark_section_shows_rename_and_stays_parseable():
    """tests/test_spark.py reads this section: two properties blocks (local, S3) and one python block;
    the rename is a SQL block of its own, its target relative to the catalog (tests/test_readme_spark.py
    runs it, and shows the target with the catalog's name failing)."""
    import re

    section = (ROOT / "README.md").read_text().split("<!-- spark-config -->", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"```properties\n", section)) == 2 and len(re.findall(r"```python\n", section)) == 1
    (sql,) = re.findall(r"```sql\n(.*?)```", section, re.S)
    assert re.fullmatch(r"ALTER TABLE lake\.\w+\.\w+ RENAME TO \w+\.\w+\s*", sql), sql


@pytest.fixture(scope="module")
def vending_s3(tmp_path_factory):
    """SeaweedFS with STS, and a server vending credentials with authentication on (as in compose)."""
    from tests import services as svc
    from tests.support import IN_CI, start_server

    work = tmp_path_factory.mktemp("vending")
    try:
        s3 = svc.start_seaweedfs(work / "s3", sts=True)
    except svc.ServiceUnavailable as e:
        if IN_CI:
            pytest.fail(f"CI=true and SeaweedFS is unavailable: {e}")
        pytest.skip(f"SeaweedFS unavailable: {e}")
    env = {
        "CATALOG_WAREHOUSE": f"s3://{s3.bucket}/duck",
        "CATALOG_S3_ENDPOINT": s3.endpoint,
        "CATALOG_S3_REGION": s3.region,
        "CATALOG_S3_ACCESS_KEY_ID": s3.access_key,
        "CATALOG_S3_SECRET_ACCESS_KEY": s3.secret_key,
        "CATALOG_S3_PATH_STYLE_ACCESS": "true",
        "CATALOG_S3_VEND_CREDENTIALS": "true",
        "CATALOG_S3_STS_ROLE_ARN": s3.sts_role_arn,
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "admin:admin-local-secret",
        "CATALOG_TOKEN_SECRET": "y" * 40,
        "CATALOG_AUTHORIZATION": "none",
    }
    srv = start_server(work / "srv", extra_env=env)
    yield srv
    srv.stop()
    s3.stop()


@pytest.mark.s3
def test_readme_duckdb_with_vending_needs_no_s3_secret(vending_s3):
    """The README's DuckDB block for the compose stack (vending on), verbatim but for the URI: no S3
    secret, and DuckDB reads what pyiceberg wrote and writes what pyiceberg reads."""
    import re

    import pyarrow as pa

    from tests.services import duckdb_connection

    srv = vending_s3
    (block, *_) = re.findall(r"```sql\n(.*?)```", _readme_section("Connect DuckDB"), re.S)
    assert "TYPE s3" not in block and "ACCESS_DELEGATION_MODE" not in block, block
    writer = srv.catalog(credential="admin:admin-local-secret", **{"oauth2-server-uri": f"{srv.url}/v1/oauth/tokens"})
    writer.create_namespace("analytics")
    writer.create_table("analytics.events", schema=pa.schema([("id", pa.int64())])).append(
        pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    )
    try:
        con = duckdb_connection()
    except ImportError:
        pytest.skip("duckdb is not installed")
    for statement in filter(str.strip, block.split(";")):
        con.execute(statement.replace("http://localhost:8181", srv.url))
    assert con.sql("SELECT count(*) FROM lake.analytics.events").fetchall() == [(3,)]
    con.sql("CREATE TABLE lake.analytics.orders AS SELECT range AS id FROM range(5)")
    assert writer.load_table("analytics.orders").scan().to_arrow().num_rows == 5
    con.close()


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory on a read-only file system (a tmpfs mounted ro): unwritable even for root."""
    target = tmp_path / "ro"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    yield target
    subprocess.run(["umount", str(target)], check=False)


@pytest.mark.parametrize("inside", [False, True])
def test_an_unwritable_warehouse_is_one_line_and_doctor_agrees(read_only_dir, tmp_path, inside):
    """The warehouse itself on a read-only file system, or a directory to be made inside one."""
    warehouse = str(read_only_dir / "wh") if inside else str(read_only_dir)
    db = tmp_path / "catalog.db"
    args = ["--database-url", f"sqlite:///{db}", "--warehouse", warehouse]
    line = refused(cli("serve", "--port", str(free_port()), *args, cwd=tmp_path))
    assert "CATALOG_WAREHOUSE" in line and "read-only" in line, line
    out = cli("doctor", "--json", *args, cwd=tmp_path)
    checks = {c["check"]: c for c in json.loads(out.stdout)}
    assert checks["warehouse"]["ok"] is False and checks["warehouse"]["detail"] in line, (checks, line)
