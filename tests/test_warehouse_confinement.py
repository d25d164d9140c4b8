"""Where a created warehouse may live, and whose credentials it runs on (a security audit; both need
the catalog's ``admin`` privilege).

- Confinement: a created warehouse lives under ``CATALOG_WAREHOUSE_ROOTS`` (without it: object
  storage only), never at, over or inside the server's database directory, working directory, the
  directory of a file it reads, or a system directory, not even through a symbolic link, nor through
  a link into another warehouse: on create, on change, and from the bootstrap file. The audit's
  probes (the database's directory, a directory holding another server file, ``/etc``) are refused
  and the filesystem there is as it was.
- Credentials: an S3 (or GCS) warehouse without keys does not run on the server process's own
  credentials (``AWS_*`` variables, ~/.aws, a role; Application Default Credentials) unless its
  profile says ``use-ambient-credentials: true``.

Real server processes over HTTP; the attacks are asserted on the filesystem and the bucket.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from catalog import errors
from catalog.settings import Settings
from catalog.warehouse_profiles import Warehouse, settings_for
from tests.support import PY_SCHEMA, assert_error, free_port, rows, s3_profile, start_server, warehouse_roots

MGMT = "/management/v1/warehouses"


def _post(server, doc: dict) -> requests.Response:  # noqa: ANN001
    return requests.post(server.url + MGMT, json=doc, timeout=60)


def _names(server) -> list[str]:  # noqa: ANN001
    return [w["name"] for w in requests.get(server.url + MGMT, timeout=10).json()["warehouses"]]


def _tree(directory: Path) -> dict[str, str]:
    """Every entry under ``directory`` (not following links) with a digest of each regular file."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(directory).as_posix()
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
    return out


def _client(server, warehouse: str) -> RestCatalog:  # noqa: ANN001
    return RestCatalog(f"c-{uuid.uuid4().hex[:6]}", uri=server.url, warehouse=warehouse)


# -- the audit's probes ------------------------------------------------------------------------------


def test_a_warehouse_at_or_around_the_database_directory_is_refused(tmp_path: Path) -> None:
    """The audit's first probe: a warehouse at the directory holding ``catalog.db`` (its WAL and every
    warehouse's database beside it) is refused, even with that directory under an allowed root, and
    so is one containing it or inside it; the files there are untouched (a table at such a
    warehouse's root, purged, deleted them all)."""
    srv_dir = tmp_path / "srv"
    env = {**warehouse_roots(tmp_path), "CATALOG_WAREHOUSE": str(tmp_path / "default-wh")}  # not beside the db
    server = start_server(srv_dir, extra_env=env)
    try:
        made = _post(server, {"name": "fine", "location": str(tmp_path / "lakes" / "fine")})
        assert made.status_code == 201, made.text  # a second database beside catalog.db
        assert (srv_dir / "catalog.db").is_file() and list(srv_dir.glob("catalog.warehouse-*.db"))
        db = (srv_dir / "catalog.db").read_bytes()
        before = {p.name for p in srv_dir.iterdir()}
        (tmp_path / "lakes" / "to-db").symlink_to(srv_dir)  # the database's directory under another name
        links = (str(tmp_path / "lakes" / "to-db"), str(tmp_path / "lakes" / "to-db" / "lake"))
        for location in (str(srv_dir), f"file://{srv_dir}", str(tmp_path), str(srv_dir / "lake"), *links):
            resp = _post(server, {"name": "db-dir", "location": location})
            assert_error(resp, 403, "ForbiddenException", "CATALOG_DATABASE_URL")
            assert "catalog.db" not in resp.json()["error"]["message"]  # the server's files are not named
        # the same as a change of the warehouse that exists
        moved = requests.put(server.url + MGMT + "/fine", json={"location": str(srv_dir)}, timeout=60)
        assert_error(moved, 403, "ForbiddenException", "CATALOG_DATABASE_URL")
        assert requests.get(server.url + MGMT + "/fine", timeout=10).json()["location"] == str(
            tmp_path / "lakes" / "fine"
        )
        assert _names(server) == ["default", "fine"]
        assert {p.name for p in srv_dir.iterdir()} == before  # nothing made there: no probe, no table
        assert not (srv_dir / "lake").exists()
        assert (srv_dir / "catalog.db").read_bytes()[:100] == db[:100]  # the header: still a database
        assert requests.get(server.url + "/v1/namespaces", timeout=10).status_code == 200  # and it serves
    finally:
        server.stop()


def test_a_warehouse_at_a_directory_holding_another_server_file_is_refused(tmp_path: Path) -> None:
    """The audit's second probe: a directory holding a file the server reads (its warehouses file)
    is refused under an allowed root, and so is the server's working directory (here apart from the
    database's)."""
    conf = tmp_path / "conf"
    conf.mkdir()
    declared = conf / "warehouses.yaml"
    declared.write_text(f"warehouses: [{{name: declared, location: {tmp_path / 'lakes' / 'declared'}}}]\n")
    (tmp_path / "db").mkdir()
    env = {
        **warehouse_roots(tmp_path),
        "CATALOG_WAREHOUSES_FILE": str(declared),
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'db' / 'catalog.db'}",
    }
    server = start_server(tmp_path / "srv", extra_env=env)  # its working directory
    try:
        assert _names(server) == ["default", "declared"]
        before, work = _tree(conf), {p.name for p in (tmp_path / "srv").iterdir()}
        for location, says in (
            (conf, "CATALOG_WAREHOUSES_FILE"),
            (tmp_path / "srv", "working directory"),
            (tmp_path / "srv" / "x", "working directory"),
        ):
            assert_error(_post(server, {"name": "x", "location": str(location)}), 403, "ForbiddenException", says)
        assert _tree(conf) == before  # the file is there, as it was
        assert {p.name for p in (tmp_path / "srv").iterdir()} == work
        assert _names(server) == ["default", "declared"]
    finally:
        server.stop()


@pytest.mark.parametrize("roots", ["", "/"])
@pytest.mark.slow
def test_system_directories_are_refused_even_under_an_allowed_root(tmp_path: Path, roots: str) -> None:
    """The audit's third probe: ``/etc``. Without ``CATALOG_WAREHOUSE_ROOTS`` no local directory is
    accepted (the refusal names the setting); with ``/`` as a root, system directories still are not."""
    server = start_server(tmp_path / "srv", extra_env={"CATALOG_WAREHOUSE_ROOTS": roots})
    try:
        etc = sorted(os.listdir("/etc"))
        for location in ("/etc", "/etc/iceberg", "/", "/usr", "/usr/lib/lake", "/proc/self", "/tmp", "/home", "/var"):
            resp = _post(server, {"name": "sys", "location": location})
            assert_error(resp, 403, "ForbiddenException", "CATALOG_WAREHOUSE_ROOTS")
        assert sorted(os.listdir("/etc")) == etc and not os.path.exists("/etc/iceberg")
        assert _names(server) == ["default"]
        if not roots:  # a local directory anywhere needs the setting, object storage does not
            resp = _post(server, {"name": "local", "location": str(tmp_path / "lake")})
            assert_error(resp, 403, "ForbiddenException", "CATALOG_WAREHOUSE_ROOTS")
            assert not (tmp_path / "lake").exists()
            resp = _post(server, {"name": "other", "location": "hdfs://namenode/lake"})
            assert_error(resp, 400, "BadRequestException", "s3://")
    finally:
        server.stop()


# -- symbolic links ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_symlink_into_another_warehouse_or_the_database_is_refused(tmp_path: Path) -> None:
    """A location that is, or passes through, a symbolic link into another warehouse, the default
    warehouse or the database's directory is that place, and is refused; the warehouse the link
    leads into is untouched. A plain location under the root works, and can be changed to another."""
    lakes = tmp_path / "lakes"
    default = lakes / "default"  # under the root, so that only the overlap refuses a link to it
    env = {**warehouse_roots(lakes), "CATALOG_WAREHOUSE": str(default)}
    server = start_server(tmp_path / "srv", extra_env=env)
    try:
        assert _post(server, {"name": "team-a", "location": str(lakes / "a")}).status_code == 201
        table = _client(server, "team-a")
        table.create_namespace("n")
        table.create_table("n.t", PY_SCHEMA).append(rows(0, 2))
        (lakes / "to-a").symlink_to(lakes / "a")
        (lakes / "to-default").symlink_to(default)
        (lakes / "to-db").symlink_to(tmp_path / "srv")
        (lakes / "to-etc").symlink_to("/etc")
        (lakes / "deep").mkdir()
        (lakes / "deep" / "up").symlink_to(lakes / "a" / "n")
        a_before, default_before = _tree(lakes / "a"), _tree(default)
        for location, status in (
            (lakes / "to-a", 409),
            (lakes / "to-a" / "b", 409),
            (lakes / "deep" / "up" / "b", 409),
            (lakes / "to-default", 409),
            (lakes / "to-default" / "b", 409),
            (lakes / "to-db", 403),  # outside the root where it really is
            (lakes / "to-db" / "b", 403),
            (lakes / "to-etc", 403),
            (lakes / "default" / "b", 409),
        ):
            resp = _post(server, {"name": "team-b", "location": str(location)})
            assert resp.status_code == status, (location, resp.text)
        assert _names(server) == ["default", "team-a"]
        assert _tree(lakes / "a") == a_before and _tree(default) == default_before

        # an allowed root works; a change follows the same rules
        assert _post(server, {"name": "team-b", "location": str(lakes / "b")}).status_code == 201
        moved = requests.put(server.url + MGMT + "/team-b", json={"location": str(lakes / "to-a" / "b")}, timeout=60)
        assert_error(moved, 409, "ConflictException")
        assert requests.get(server.url + MGMT + "/team-b", timeout=10).json()["location"] == str(lakes / "b")
        moved = requests.put(server.url + MGMT + "/team-b", json={"location": str(lakes / "b2")}, timeout=60)
        assert moved.status_code == 200, moved.text
        b = _client(server, "team-b")
        b.create_namespace("n")
        b.create_table("n.t", PY_SCHEMA).append(rows(10, 1))
        assert any(p.name.endswith(".metadata.json") for p in (lakes / "b2" / "n" / "t" / "metadata").iterdir())
        assert _tree(lakes / "a") == a_before
    finally:
        server.stop()


# -- the bootstrap file, and rows stored before the setting ------------------------------------------------


def test_the_bootstrap_file_is_confined_too(tmp_path: Path) -> None:
    """``CATALOG_WAREHOUSES_FILE`` declaring a warehouse at the database's directory: serve refuses to
    start, in one line naming the setting, and makes nothing there."""
    declared = tmp_path / "conf" / "warehouses.yaml"
    declared.parent.mkdir()
    declared.write_text(f"warehouses: [{{name: sneaky, location: {tmp_path / 'srv'}}}]\n")
    (tmp_path / "srv").mkdir()
    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'srv' / 'catalog.db'}",
        "CATALOG_WAREHOUSE": str(tmp_path / "default-wh"),
        "CATALOG_WAREHOUSES_FILE": str(declared),
        "CATALOG_WAREHOUSE_ROOTS": str(tmp_path),
        "CATALOG_PORT": str(free_port()),
    }
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path / "srv",
    )
    assert served.returncode == 2, served.stderr
    assert "CATALOG_WAREHOUSES_FILE" in served.stderr and "CATALOG_DATABASE_URL" in served.stderr, served.stderr
    assert "Traceback" not in served.stderr
    assert not list((tmp_path / "srv").glob("catalog.warehouse-*"))


def test_serve_refuses_a_relative_root(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'catalog.db'}",
        "CATALOG_WAREHOUSE": str(tmp_path / "wh"),
        "CATALOG_WAREHOUSE_ROOTS": "/data/lakes,lakes",
        "CATALOG_PORT": str(free_port()),
    }
    served = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert served.returncode == 2 and "CATALOG_WAREHOUSE_ROOTS" in served.stderr, served.stderr
    assert "Traceback" not in served.stderr


@pytest.mark.slow
def test_a_stored_warehouse_outside_the_roots_does_not_open(tmp_path: Path) -> None:
    """A warehouse stored while its location was allowed does not open once it is not (a server from
    before the setting, or the setting narrowed): 404, and the log says which setting allows it."""
    srv = tmp_path / "srv"
    server = start_server(srv, extra_env=warehouse_roots(tmp_path / "lakes"))
    try:
        assert _post(server, {"name": "team-a", "location": str(tmp_path / "lakes" / "a")}).status_code == 201
    finally:
        server.stop()
    server = start_server(srv)
    try:
        config = requests.get(server.url + "/v1/config", params={"warehouse": "team-a"}, timeout=10)
        assert_error(config, 404, "NoSuchWarehouseException")
        assert "CATALOG_WAREHOUSE_ROOTS" in server.log.read_text()
    finally:
        server.stop()


# -- object storage: no setting needed, and no borrowed credentials ------------------------------------


def _empty(s3, root: str) -> None:  # noqa: ANN001 - the services' S3
    client = s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=f"{root}/"):
        for o in page.get("Contents", []):
            client.delete_object(Bucket=s3.bucket, Key=o["Key"])


def _keys(s3) -> dict[str, str]:  # noqa: ANN001
    return {"s3.access-key-id": s3.access_key, "s3.secret-access-key": s3.secret_key}


@pytest.mark.s3
def test_an_object_store_warehouse_needs_no_setting(services, tmp_path: Path) -> None:
    """Without ``CATALOG_WAREHOUSE_ROOTS``, an S3 warehouse with its own keys is created and serves."""
    s3 = services["s3"]
    root = f"wc-{uuid.uuid4().hex[:8]}"
    server = start_server(tmp_path / "srv")
    try:
        doc = {"name": "on-s3", "location": f"s3://{s3.bucket}/{root}", "s3": s3_profile(s3)}
        made = _post(server, doc)
        assert made.status_code == 201, made.text
        catalog = RestCatalog(f"c-{uuid.uuid4().hex[:6]}", uri=server.url, warehouse="on-s3", **_keys(s3))
        catalog.create_namespace("n")
        catalog.create_table("n.t", PY_SCHEMA).append(rows(0, 2))
        names = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket, Prefix=f"{root}/").get("Contents", [])]
        assert any(n.startswith(f"{root}/n/t/metadata/") for n in names), names
    finally:
        server.stop()
        _empty(s3, root)


@pytest.mark.s3
def test_a_keyless_s3_warehouse_does_not_borrow_the_servers_credentials(services, tmp_path: Path) -> None:
    """The server process holds working AWS credentials in its environment (as an instance role or
    ~/.aws would give it). An S3 warehouse created without keys is refused, nothing stored and
    nothing written in the bucket, unless its profile opts in to the process's own credentials;
    with ``use-ambient-credentials: true`` it works on them."""
    s3 = services["s3"]
    root = f"wk-{uuid.uuid4().hex[:8]}"
    ambient = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}
    server = start_server(tmp_path / "srv", extra_env=ambient)
    keyless = {k: v for k, v in s3_profile(s3).items() if k not in ("access-key-id", "secret-access-key")}
    listed = s3.client().list_objects_v2
    try:
        doc = {"name": "keyless", "location": f"s3://{s3.bucket}/{root}", "s3": keyless}
        resp = _post(server, doc)
        assert_error(resp, 400, "BadRequestException", "use-ambient-credentials")
        assert _names(server) == ["default"]
        assert listed(Bucket=s3.bucket, Prefix=f"{root}/").get("KeyCount", 0) == 0
        # only the access key: not a way around it either
        half = {**keyless, "access-key-id": s3.access_key}
        assert_error(_post(server, {**doc, "s3": half}), 400, "BadRequestException", "use-ambient-credentials")
        assert _names(server) == ["default"]

        opted = {**doc, "s3": {**keyless, "use-ambient-credentials": True}}
        made = _post(server, opted)
        assert made.status_code == 201, made.text
        assert made.json()["s3"]["use-ambient-credentials"] is True
        catalog = RestCatalog(f"c-{uuid.uuid4().hex[:6]}", uri=server.url, warehouse="keyless", **_keys(s3))
        catalog.create_namespace("n")
        catalog.create_table("n.t", PY_SCHEMA).append(rows(0, 2))
        names = [o["Key"] for o in listed(Bucket=s3.bucket, Prefix=f"{root}/").get("Contents", [])]
        assert any(n.startswith(f"{root}/n/t/metadata/") for n in names), names
        # and switching it off again is a change the probe refuses: the row keeps its opt-in
        off = {**opted, "s3": {**keyless, "use-ambient-credentials": False}}
        changed = requests.put(server.url + MGMT + "/keyless", json=off, timeout=60)
        assert_error(changed, 400, "BadRequestException", "use-ambient-credentials")
    finally:
        server.stop()
        _empty(s3, root)


# -- pure logic: what a created warehouse's settings allow ------------------------------------------------


def test_a_created_warehouses_settings_do_not_use_the_process_credentials(tmp_path: Path) -> None:
    from catalog.settings import ConfigurationError
    from catalog.storage import gcs, purge, vending

    base = Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", warehouse="s3://bucket/default")
    assert (
        base.storage.s3_use_ambient_credentials and base.storage.gcs_use_ambient_credentials
    )  # the default keeps today's
    s3 = settings_for(base, Warehouse("w", "s3://bucket/w", {"s3": {"endpoint": "http://x:1"}}), 1)
    assert not s3.storage.s3_use_ambient_credentials
    with pytest.raises(ConfigurationError, match="use-ambient-credentials"):
        vending.check_settings(s3.storage)
    with pytest.raises(errors.ServiceUnavailable):  # purge and care read through this FileIO
        purge.server_io_properties(s3.storage)
    gs = settings_for(base, Warehouse("g", "gs://bucket/g", {}), 2)
    assert not gs.storage.gcs_use_ambient_credentials
    with pytest.raises(ConfigurationError, match="use-ambient-credentials"):
        gcs.check_settings(gs.storage)
    with pytest.raises(ConfigurationError):
        gcs.shared_token(gs.storage)  # never the token source made for the default's credentials
    local = settings_for(base, Warehouse("l", str(tmp_path / "l"), {}), 4)
    assert "s3.access-key-id" not in purge.server_io_properties(local.storage)  # on local disk: no keys, care runs
    opted = settings_for(base, Warehouse("o", "s3://bucket/o", {"s3": {"use-ambient-credentials": True}}), 3)
    vending.check_settings(opted.storage)
    assert "s3.access-key-id" not in purge.server_io_properties(opted.storage)
