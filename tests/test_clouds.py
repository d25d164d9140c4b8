"""Azure (Azurite) and Google Cloud Storage (gcp-storage-emulator) warehouses, end to end: a real
server process, real emulators, pyiceberg as the client.

Azure: the client holds no account key, only what the catalog vends (a container SAS: Azurite has no
hierarchical namespace, so no directory SAS), read-only for a reader and read-write for a writer,
as their grants say; hostile locations are refused and nothing lands outside
the warehouse (asserted on Azurite's own listing); a purge deletes the table's files and nothing
else; orphan removal lists the table's directory and removes only what no metadata references.
GCS: the same table life through the emulator, with the vended endpoint and placeholder token.
S3 (SeaweedFS): the storage backend's batch delete (DeleteObjects), asserted on the bucket.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support import CARE_ON_REQUEST, PY_SCHEMA, Server, purge_now, rows, run_care, start_server

# Orphan removal takes files older than this (the table's own files are referenced, whatever their age).
ORPHAN_AGE = {"CATALOG_MAINTENANCE_ORPHAN_AGE_HOURS": str(2 / 3600)}


@pytest.fixture(scope="module")
def azure_server(azurite, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {
        "CATALOG_WAREHOUSE": azurite.location("wh"),
        "CATALOG_AZURE_ACCOUNT_KEY": azurite.key,
        "CATALOG_AZURE_BLOB_ENDPOINT": azurite.endpoint,
        "CATALOG_AZURE_VEND_CREDENTIALS": "true",
        "CATALOG_AZURE_SAS_SCOPE": "container",
        **CARE_ON_REQUEST,
        **ORPHAN_AGE,
    }
    srv = start_server(tmp_path_factory.mktemp("azure"), "azure", env)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def gcs_server(gcs_emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env = {
        "CATALOG_WAREHOUSE": f"gs://{gcs_emulator.bucket}/wh",
        "CATALOG_GCS_ENDPOINT": gcs_emulator.endpoint,
        "CATALOG_GCS_NO_AUTH": "true",
        "CATALOG_GCS_VEND_CREDENTIALS": "true",
        **CARE_ON_REQUEST,
    }
    srv = start_server(tmp_path_factory.mktemp("gcs"), "gcs", env)
    yield srv
    srv.stop()


def _client(server: Server) -> RestCatalog:
    """A client with no storage settings of its own: everything it knows comes from the catalog."""
    return RestCatalog(
        f"c-{uuid.uuid4().hex[:6]}", uri=server.url, **{"header.X-Iceberg-Access-Delegation": "vended-credentials"}
    )


# -- Azure ------------------------------------------------------------------------------------------


@pytest.mark.azure
def test_pyiceberg_writes_and_reads_through_a_vended_sas_only(azure_server: Server, azurite) -> None:
    catalog = _client(azure_server)
    ns = f"az_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 5))
    table.append(rows(5, 3))
    again = _client(azure_server).load_table(f"{ns}.t")
    assert sorted(again.scan().to_arrow().column("id").to_pylist()) == list(range(8))

    # What the client was given: a SAS for the account's hosts, never the account key.
    props = again.io.properties
    assert any(k.startswith(f"adls.sas-token.{azurite.host}") for k in props), sorted(props)
    assert "sp=racwdl" in props[f"adls.sas-token.{azurite.host}"]  # no auth: everyone may write
    everything = requests.get(f"{azure_server.url}/v1/config", timeout=10).text + str(props)
    assert azurite.key not in everything and "AccountKey" not in everything and "account-key" not in everything

    # The files are where the table says, in Azurite, under the warehouse.
    names = azurite.names()
    prefix = f"wh/{ns}/t/"
    assert any(n.startswith(prefix + "metadata/") and n.endswith(".metadata.json") for n in names)
    assert sum(n.startswith(prefix + "data/") for n in names) >= 2
    assert all(n.startswith("wh/") for n in names), [n for n in names if not n.startswith("wh/")]


@pytest.mark.azure
def test_a_read_only_sas_reads_the_table_and_cannot_write(azure_server: Server, azurite) -> None:
    """The SAS a reader gets, used against Azurite: reads work, a write is refused by the service."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    from catalog.settings import Settings
    from catalog.storage.cloud_vending import READ, WRITE, AzureVendor

    ns = f"ro_{uuid.uuid4().hex[:8]}"
    catalog = _client(azure_server)
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 2))
    settings = Settings(
        warehouse=azurite.location("wh"), azure_account_key=azurite.key, azure_blob_endpoint=azurite.endpoint,
        azure_sas_scope="container",
    )  # fmt: skip
    vendor = AzureVendor(settings.storage)
    read = vendor.credentials(table.location(), READ)[f"adls.sas-token.{azurite.host}"]
    assert "sp=rl&" in read and "sr=c" in read
    metadata_name = table.metadata_location.split(azurite.host + "/", 1)[1]
    reader = ContainerClient(azurite.endpoint, azurite.container, credential=read, retry_total=0)
    assert reader.download_blob(metadata_name).readall().startswith(b"{")
    with pytest.raises(HttpResponseError) as refused:
        reader.upload_blob(f"wh/{ns}/t/data/not-allowed", b"x")
    assert refused.value.status_code == 403
    assert f"wh/{ns}/t/data/not-allowed" not in azurite.names()
    write = vendor.credentials(table.location(), WRITE)[f"adls.sas-token.{azurite.host}"]
    writer = ContainerClient(azurite.endpoint, azurite.container, credential=write, retry_total=0)
    writer.upload_blob(f"wh/{ns}/t/data/allowed", b"x")
    assert f"wh/{ns}/t/data/allowed" in azurite.names()


@pytest.mark.azure
@pytest.mark.parametrize(
    "where",
    [
        "abfss://other@devstoreaccount1.dfs.core.windows.net/wh/{ns}/t",  # another container
        "abfss://lake@otheraccount.dfs.core.windows.net/wh/{ns}/t",  # another account
        "abfss://lake@devstoreaccount1.dfs.core.windows.net/elsewhere/{ns}",  # outside the warehouse
        "abfss://lake@devstoreaccount1.dfs.core.windows.net/wh/{ns}/../../escape",  # traversal
        "abfss://lake@devstoreaccount1.dfs.core.windows.net/wh/{ns}/%2e%2e/%2e%2e/escape",  # encoded traversal
        "abfss://lake@devstoreaccount1.dfs.core.windows.net/wh/{ns}/t\\..\\..\\escape",  # backslashes
        "wasbs://other@devstoreaccount1.blob.core.windows.net/wh/{ns}/t",  # another container, other spelling
        "file:///tmp/{ns}",
    ],
)
def test_hostile_locations_are_refused_and_nothing_lands_outside(azure_server: Server, azurite, where: str) -> None:
    ns = f"h_{uuid.uuid4().hex[:8]}"
    requests.post(f"{azure_server.url}/v1/namespaces", json={"namespace": [ns]}, timeout=10).raise_for_status()
    body = {"name": "t", "schema": {"type": "struct", "schema-id": 0, "fields": []}, "location": where.format(ns=ns)}
    resp = requests.post(f"{azure_server.url}/v1/namespaces/{ns}/tables", json=body, timeout=30)
    assert resp.status_code in (400, 403), resp.text
    assert azurite.key not in resp.text
    assert azurite.names("other") == []
    assert not [n for n in azurite.names() if not n.startswith("wh/")]


@pytest.mark.azure
def test_a_purge_deletes_the_tables_files_and_nothing_else(azure_server: Server, azurite) -> None:
    catalog = _client(azure_server)
    ns = f"p_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    for name in ("gone", "gone2", "kept"):
        catalog.create_table(f"{ns}.{name}", PY_SCHEMA).append(rows(0, 3))
    before = azurite.names()
    assert any(n.startswith(f"wh/{ns}/gone/data/") for n in before)
    catalog.purge_table(f"{ns}.gone")
    purge_now(azure_server.url, f"{ns}.gone")
    after = azurite.names()
    assert not [n for n in after if n.startswith(f"wh/{ns}/gone/")], after
    # Everything else is still there: the neighbour whose name starts the same, and the other table.
    assert [n for n in before if not n.startswith(f"wh/{ns}/gone/")] == after
    assert sorted(_client(azure_server).load_table(f"{ns}.kept").scan().to_arrow().column("id").to_pylist()) == [
        0,
        1,
        2,
    ]


@pytest.mark.azure
def test_orphan_removal_lists_the_table_and_removes_only_unreferenced_files(azure_server: Server, azurite) -> None:
    catalog = _client(azure_server)
    ns = f"o_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 4))
    container = azurite.service().get_container_client(azurite.container)
    container.upload_blob(f"wh/{ns}/t/data/orphan.parquet", b"not referenced")
    container.upload_blob(f"wh/{ns}/t2/data/neighbour.parquet", b"another directory")
    referenced = [n for n in azurite.names() if n.startswith(f"wh/{ns}/t/")]
    time.sleep(2.5)  # older than the orphan age (2 s here)
    task = run_care(azure_server, ns, "t", kinds=["remove-orphans"])[0]
    assert task["state"] == "done" and task["result"]["orphans"] == 1, task
    names = azurite.names()
    assert f"wh/{ns}/t/data/orphan.parquet" not in names
    assert f"wh/{ns}/t2/data/neighbour.parquet" in names
    assert all(n in names for n in referenced if not n.endswith("orphan.parquet"))
    assert sorted(_client(azure_server).load_table(f"{ns}.t").scan().to_arrow().column("id").to_pylist()) == [
        0,
        1,
        2,
        3,
    ]


@pytest.mark.azure
def test_the_storage_backend_against_azurite(azurite, tmp_path: Path) -> None:
    """The Storage contract on Azurite: create-only, bounded reads, idempotent deletes, listing,
    and an unreachable endpoint as a 503 that names the setting, not the key."""
    from catalog import errors
    from catalog.settings import Settings
    from catalog.storage.azure import AzureStorage

    base = dict(warehouse=azurite.location("wh"), azure_account_key=azurite.key, max_metadata_file_bytes=1024)
    storage = AzureStorage(Settings(**base, azure_blob_endpoint=azurite.endpoint).storage)
    storage.ping()
    where = f"{storage.root()}/unit-{uuid.uuid4().hex}"
    storage.write_new(f"{where}/a.json", b"{}")
    with pytest.raises(FileExistsError):
        storage.write_new(f"{where}/a.json", b"[]")
    assert storage.read(f"{where}/a.json") == b"{}"
    storage.write_new(f"{where}/big.json", b"x" * 2048)
    with pytest.raises(errors.BadRequest, match="over the limit"):
        storage.read(f"{where}/big.json")
    assert sorted(f.location.rsplit("/", 1)[1] for f in storage.listing(where)) == ["a.json", "big.json"]
    storage.delete(f"{where}/a.json")
    storage.delete(f"{where}/a.json")  # already gone: fine
    with pytest.raises(errors.NotFound):
        storage.read(f"{where}/a.json")
    with pytest.raises(errors.Forbidden):
        storage.write_new(azurite.location("x", container="other"), b"{}")
    assert azurite.names("other") == []
    down = AzureStorage(Settings(**base, azure_blob_endpoint="http://127.0.0.1:9/devstoreaccount1").storage)
    with pytest.raises(errors.ServiceUnavailable) as unreachable:
        down.read(f"{where}/big.json")
    assert "CATALOG_AZURE_BLOB_ENDPOINT" in unreachable.value.message and azurite.key not in str(unreachable.value)


@pytest.mark.azure
def test_doctor_probes_an_azure_warehouse(azurite, tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
        "CATALOG_WAREHOUSE": azurite.location("wh"),
        "CATALOG_AZURE_ACCOUNT_KEY": azurite.key,
        "CATALOG_AZURE_BLOB_ENDPOINT": azurite.endpoint,
    }
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "doctor"], env=env, capture_output=True, text=True, timeout=120
    )
    out = done.stdout + done.stderr
    assert "wrote, read and deleted a probe file" in out, out
    assert azurite.key not in out
    assert not [n for n in azurite.names() if "doctor" in n]


# -- Google Cloud Storage -----------------------------------------------------------------------


@pytest.mark.gcs
def test_pyiceberg_writes_and_reads_a_gcs_table(gcs_server: Server, gcs_emulator) -> None:
    catalog = _client(gcs_server)
    ns = f"g_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", PY_SCHEMA)
    table.append(rows(0, 5))
    again = _client(gcs_server).load_table(f"{ns}.t")
    assert sorted(again.scan().to_arrow().column("id").to_pylist()) == list(range(5))
    assert again.io.properties["gcs.service.host"] == gcs_emulator.endpoint
    expires = int(again.io.properties["gcs.oauth2.token-expires-at"]) / 1000
    assert datetime.now(UTC) < datetime.fromtimestamp(expires, UTC) <= datetime.now(UTC) + timedelta(hours=1)
    names = gcs_emulator.names()
    assert any(n.startswith(f"wh/{ns}/t/metadata/") for n in names)
    assert any(n.startswith(f"wh/{ns}/t/data/") for n in names)

    for where in (f"gs://other/wh/{ns}/x", f"gs://lake/wh/{ns}/../../x", f"gs://lake/elsewhere/{ns}"):
        body = {"name": "x", "schema": {"type": "struct", "schema-id": 0, "fields": []}, "location": where}
        resp = requests.post(f"{gcs_server.url}/v1/namespaces/{ns}/tables", json=body, timeout=30)
        assert resp.status_code in (400, 403), (where, resp.text)
    assert gcs_emulator.names("other") == []
    assert not [n for n in gcs_emulator.names() if not n.startswith("wh/")]

    catalog.purge_table(f"{ns}.t")
    purge_now(gcs_server.url, f"{ns}.t")
    assert not [n for n in gcs_emulator.names() if n.startswith(f"wh/{ns}/t/")]


@pytest.mark.gcs
def test_a_created_gcs_warehouse_beside_a_local_default(gcs_emulator, tmp_path: Path) -> None:
    """A GCS warehouse created through the management API on a server whose default is local disk:
    its storage comes from its profile alone, a client selecting it by name gets its endpoint and a
    token vended, and its tables land under its prefix in the bucket, nothing on the default's disk."""
    server = start_server(tmp_path / "srv")
    root = f"wg-{uuid.uuid4().hex[:8]}"
    try:
        doc = {
            "name": "team-g",
            "location": f"gs://{gcs_emulator.bucket}/{root}",
            "gcs": {"endpoint": gcs_emulator.endpoint, "no-auth": True, "vend-credentials": True},
        }
        made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, timeout=60)
        assert made.status_code == 201, made.text
        assert "warnings" not in made.json()  # vending: clients get a token
        catalog = RestCatalog(
            f"c-{uuid.uuid4().hex[:6]}",
            uri=server.url,
            warehouse="team-g",
            **{"header.X-Iceberg-Access-Delegation": "vended-credentials"},
        )
        catalog.create_namespace("g")
        catalog.create_table("g.t", PY_SCHEMA).append(rows(0, 4))
        again = catalog.load_table("g.t")
        assert sorted(again.scan().to_arrow().column("id").to_pylist()) == [0, 1, 2, 3]
        assert again.io.properties["gcs.service.host"] == gcs_emulator.endpoint
        assert "gcs.oauth2.token" in again.io.properties
        names = gcs_emulator.names()
        assert any(n.startswith(f"{root}/g/t/metadata/") for n in names)
        assert any(n.startswith(f"{root}/g/t/data/") for n in names)
        assert not (tmp_path / "srv" / "warehouse" / "g").exists()
        assert RestCatalog("d", uri=server.url).list_namespaces() == []  # the default has none of it
        elsewhere = {"name": "x", "schema": {"type": "struct", "schema-id": 0, "fields": []}}
        for where in (f"gs://{gcs_emulator.bucket}/wh/x", f"gs://{gcs_emulator.bucket}/{root}/../x", str(tmp_path)):
            resp = requests.post(
                f"{server.url}/v1/team-g/namespaces/g/tables", json={**elsewhere, "location": where}, timeout=30
            )
            assert resp.status_code in (400, 403), (where, resp.text)
        assert [n for n in gcs_emulator.names() if n.startswith(root)] == [n for n in names if n.startswith(root)]
    finally:
        server.stop()


# docs/storage.md's pyiceberg settings for a no-auth GCS warehouse without vending: any token (the
# emulator ignores it), with an expiry (pyarrow's GcsFileSystem refuses a token without one).
NO_AUTH_CLIENT = {"gcs.oauth2.token": "emulator", "gcs.oauth2.token-expires-at": "4102444800000"}


@pytest.mark.gcs
def test_a_gcs_warehouse_that_gives_clients_no_token_is_warned_about(gcs_emulator, tmp_path: Path) -> None:
    """``no-auth`` without vending: the server reaches the emulator, but the catalog tells clients no
    token, and a client with none of its own was seen to hang in ``append``. Creating it is answered
    201 with a warning (and a log line); changing it to vend clears the warning; a client following
    docs/storage.md (a placeholder ``gcs.oauth2.token`` of its own) writes and reads. The default
    warehouse configured the same way is warned about at start."""
    server = start_server(tmp_path / "srv")
    root = f"wn-{uuid.uuid4().hex[:8]}"
    try:
        doc = {
            "name": "team-n",
            "location": f"gs://{gcs_emulator.bucket}/{root}",
            "gcs": {"endpoint": gcs_emulator.endpoint, "no-auth": True},
        }
        made = requests.post(f"{server.url}/management/v1/warehouses", json=doc, timeout=60)
        assert made.status_code == 201, made.text
        (warning,) = made.json()["warnings"]
        assert "vend-credentials" in warning and "gcs.oauth2.token" in warning, warning
        assert f"warehouse team-n: {warning}" in server.log.read_text()
        assert "warnings" not in requests.get(f"{server.url}/management/v1/warehouses/team-n", timeout=30).json()

        catalog = RestCatalog(  # the client recipe of docs/storage.md for this configuration
            f"c-{uuid.uuid4().hex[:6]}", uri=server.url, warehouse="team-n", **NO_AUTH_CLIENT
        )
        assert catalog.properties.get("gcs.service.host") == gcs_emulator.endpoint  # told by /v1/config
        catalog.create_namespace("n")
        catalog.create_table("n.t", PY_SCHEMA).append(rows(0, 3))
        assert sorted(catalog.load_table("n.t").scan().to_arrow().column("id").to_pylist()) == [0, 1, 2]
        assert any(n.startswith(f"{root}/n/t/data/") for n in gcs_emulator.names())

        vending = {**doc, "gcs": {**doc["gcs"], "vend-credentials": True}}
        changed = requests.put(f"{server.url}/management/v1/warehouses/team-n", json=vending, timeout=60)
        assert changed.status_code == 200, changed.text
        assert "warnings" not in changed.json()
    finally:
        server.stop()

    env = {
        "CATALOG_WAREHOUSE": f"gs://{gcs_emulator.bucket}/{root}-default",
        "CATALOG_GCS_ENDPOINT": gcs_emulator.endpoint,
        "CATALOG_GCS_NO_AUTH": "true",
    }
    default = start_server(tmp_path / "default", extra_env=env)
    try:
        assert "CATALOG_GCS_VEND_CREDENTIALS (vend-credentials) is off" in default.log.read_text()
    finally:
        default.stop()


@pytest.mark.gcs
def test_the_storage_backend_against_the_gcs_emulator(gcs_emulator) -> None:
    """What the emulator can show of the contract (it does not enforce ifGenerationMatch, so
    create-only is not verified here): bounded reads, idempotent deletes, listing, 503 unreachable."""
    from catalog import errors
    from catalog.settings import Settings
    from catalog.storage.gcs import GcsStorage

    base = dict(warehouse="gs://lake/wh", gcs_no_auth=True, max_metadata_file_bytes=1024)
    storage = GcsStorage(Settings(**base, gcs_endpoint=gcs_emulator.endpoint).storage)
    storage.ping()
    where = f"gs://lake/wh/unit-{uuid.uuid4().hex}"
    storage.write_new(f"{where}/a.json", b"{}")
    assert storage.read(f"{where}/a.json") == b"{}"
    storage.write_new(f"{where}/big.json", b"x" * 2048)
    with pytest.raises(errors.BadRequest, match="over the limit"):
        storage.read(f"{where}/big.json")
    assert sorted(f.location for f in storage.listing(where)) == [f"{where}/a.json", f"{where}/big.json"]
    storage.delete(f"{where}/a.json")
    storage.delete(f"{where}/a.json")
    with pytest.raises(errors.NotFound):
        storage.read(f"{where}/a.json")
    with pytest.raises(errors.Forbidden):
        storage.write_new("gs://other/wh/x", b"{}")
    down = GcsStorage(Settings(**base, gcs_endpoint="http://127.0.0.1:9", storage_timeout_seconds=1).storage)
    with pytest.raises(errors.ServiceUnavailable, match="CATALOG_GCS_ENDPOINT"):
        down.read(f"{where}/big.json")


@pytest.mark.s3
def test_the_s3_backend_deletes_in_batches_and_only_what_it_is_given(services) -> None:
    """``delete_many``: 1,003 keys in two DeleteObjects requests (the limit is 1,000 keys), a key
    that is already gone is no error, a key beside them stays, and a location outside the
    warehouse is refused before any request."""
    from catalog import errors
    from catalog.settings import Settings
    from catalog.storage.s3 import S3Storage
    from tests.support import s3_env

    env = s3_env(services["s3"], f"batch-{uuid.uuid4().hex}")
    storage = S3Storage(
        Settings(
            warehouse=env["CATALOG_WAREHOUSE"],
            s3_endpoint=env["CATALOG_S3_ENDPOINT"],
            s3_region=env["CATALOG_S3_REGION"],
            s3_access_key_id=env["CATALOG_S3_ACCESS_KEY_ID"],
            s3_secret_access_key=env["CATALOG_S3_SECRET_ACCESS_KEY"],
            s3_path_style_access=True,
        ).storage
    )
    root = storage.root()
    doomed = [f"{root}/t/metadata/{i:05d}.metadata.json" for i in range(1003)]
    for location in doomed:
        storage.write_new(location, b"{}")
    storage.write_new(f"{root}/t/metadata/keep.metadata.json", b"{}")
    calls: list[int] = []
    batch = storage.client.delete_objects
    storage.client.delete_objects = lambda **kw: calls.append(len(kw["Delete"]["Objects"])) or batch(**kw)
    storage.delete_many([*doomed, f"{root}/t/metadata/never-written.metadata.json"])
    assert sorted(calls) == [4, 1000]
    assert [f.location for f in storage.listing(f"{root}/t")] == [f"{root}/t/metadata/keep.metadata.json"]
    with pytest.raises(errors.Forbidden):
        storage.delete_many([f"{root}/t/metadata/keep.metadata.json", "s3://elsewhere/x.metadata.json"])
    assert [f.location for f in storage.listing(f"{root}/t")] == [f"{root}/t/metadata/keep.metadata.json"]


@pytest.mark.azure
def test_the_sas_follows_the_callers_grant(azurite, tmp_path: Path) -> None:
    """With authentication: a reader of the table gets a read-only SAS (Azurite refuses its writes),
    its refresh route too; a writer a read-write one; a caller without a grant gets nothing."""
    from azure.core.exceptions import HttpResponseError
    from azure.storage.blob import ContainerClient

    from tests.support import as_, auth_env, token

    grants = (
        "grants:\n"
        "  - {principal: client:admin, privileges: [admin], on: catalog}\n"
        "  - {principal: client:analyst, privileges: [read], on: {namespace: granted}}\n"
    )
    env = {
        "CATALOG_WAREHOUSE": azurite.location(f"auth-{uuid.uuid4().hex[:8]}"),
        "CATALOG_AZURE_ACCOUNT_KEY": azurite.key,
        "CATALOG_AZURE_BLOB_ENDPOINT": azurite.endpoint,
        "CATALOG_AZURE_VEND_CREDENTIALS": "true",
        "CATALOG_AZURE_SAS_SCOPE": "container",
        **auth_env(tmp_path, grants),
    }
    server = start_server(tmp_path / "server", "azure", env)
    try:
        admin = as_(server, "admin")
        admin.create_namespace("granted")
        table = admin.create_table("granted.t", PY_SCHEMA)
        table.append(rows(0, 2))
        sas_key = f"adls.sas-token.{azurite.host}"

        def load(client: str) -> requests.Response:
            return requests.get(
                f"{server.url}/v1/namespaces/granted/tables/t",
                headers={
                    "Authorization": f"Bearer {token(server, client)}",
                    "X-Iceberg-Access-Delegation": "vended-credentials",
                },
                timeout=30,
            )

        reader = load("analyst").json()
        read_sas = reader["storage-credentials"][0]["config"][sas_key]
        assert "sp=rl&" in read_sas and reader["config"][sas_key] == read_sas
        blob = reader["metadata-location"].split(azurite.host + "/", 1)[1]
        client = ContainerClient(azurite.endpoint, azurite.container, credential=read_sas, retry_total=0)
        assert client.download_blob(blob).readall().startswith(b"{")
        with pytest.raises(HttpResponseError) as refused:
            client.upload_blob(blob.rsplit("/", 2)[0] + "/data/by-a-reader", b"x")
        assert refused.value.status_code == 403

        refresh = server.url + reader["config"]["client.refresh-credentials-endpoint"]
        fresh = requests.get(refresh, headers={"Authorization": f"Bearer {token(server, 'analyst')}"}, timeout=30)
        assert "sp=rl&" in fresh.json()["storage-credentials"][0]["config"][sas_key]

        writer = load("admin").json()["storage-credentials"][0]["config"][sas_key]
        assert "sp=racwdl&" in writer
        assert load("nobody").status_code in (403, 404)
        assert azurite.key not in str(reader) + writer
    finally:
        server.stop()
