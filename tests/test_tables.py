"""Tables end to end through pyiceberg's RestCatalog against the real server."""

from __future__ import annotations

import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import requests
from pyiceberg.exceptions import (
    CommitFailedException,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.expressions import EqualTo, GreaterThanOrEqual
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import DoubleType

from catalog.commit.cleanup import GATHER_SECONDS
from tests.support import CARE_ON_REQUEST, PY_SCHEMA, purge_now, rows, start_server, wait_for  # noqa: E402


def test_create_append_read_back(catalog, ns):
    spec = PartitionSpec(
        PartitionField(3, 1000, DayTransform(), "ts_day"), PartitionField(1, 1001, BucketTransform(8), "id_bucket")
    )
    table = catalog.create_table(f"{ns}.events", PY_SCHEMA, partition_spec=spec)
    assert table.metadata.properties == {"write.parquet.compression-codec": "zstd"}
    assert table.metadata_location.split("/")[-1].startswith("00000-")
    table.append(rows(0, 10))
    table.append(rows(10, 5))
    loaded = catalog.load_table(f"{ns}.events")
    assert len(loaded.metadata.snapshots) == 2
    assert loaded.metadata_location.split("/")[-1].startswith("00002-")
    assert [e.metadata_file for e in loaded.metadata.metadata_log][-1].split("/")[-1].startswith("00001-")
    assert sorted(loaded.scan().to_arrow()["id"].to_pylist()) == list(range(15))
    assert loaded.scan(row_filter=EqualTo("id", 3)).to_arrow().num_rows == 1


def test_schema_evolution(catalog, ns):
    table = catalog.create_table(f"{ns}.evolve", PY_SCHEMA)
    table.append(rows(0, 3))
    with table.update_schema() as update:
        update.add_column("score", DoubleType())
        update.rename_column("name", "label")
    table = catalog.load_table(f"{ns}.evolve")
    assert [f.name for f in table.schema().fields] == ["id", "label", "ts", "score"]
    assert table.metadata.last_column_id == 4
    table.append(
        pa.table(
            {
                "id": pa.array([100], pa.int64()),
                "label": pa.array(["x"]),
                "ts": pa.array([0], pa.timestamp("us")),
                "score": pa.array([1.5]),
            }
        )
    )
    result = catalog.load_table(f"{ns}.evolve").scan().to_arrow()
    assert result.num_rows == 4
    assert result.filter(pc.equal(result["id"], 100))["score"].to_pylist() == [1.5]
    with table.update_schema() as update:
        update.delete_column("score")
    assert "score" not in [f.name for f in catalog.load_table(f"{ns}.evolve").schema().fields]


def test_partition_evolution_and_sort_order(catalog, ns):
    table = catalog.create_table(f"{ns}.parts", PY_SCHEMA)
    table.append(rows(0, 4))
    with table.update_spec() as spec:
        spec.add_field("id", BucketTransform(4), "id_b4")
    table = catalog.load_table(f"{ns}.parts")
    assert table.spec().spec_id == 1 and [f.name for f in table.spec().fields] == ["id_b4"]
    assert table.metadata.last_partition_id == 1000
    table.append(rows(4, 4))
    with table.update_spec() as spec:
        spec.remove_field("id_b4")
    assert catalog.load_table(f"{ns}.parts").spec().is_unpartitioned()
    with table.transaction() as tx:
        tx.update_sort_order().asc("id", IdentityTransform()).commit()
    table = catalog.load_table(f"{ns}.parts")
    assert table.sort_order().order_id == 1 and table.sort_order().fields[0].source_id == 1
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == list(range(8))


def test_create_with_sort_order_and_properties(catalog, ns):
    order = SortOrder(SortField(source_id=1, transform=IdentityTransform()))
    table = catalog.create_table(
        f"{ns}.sorted", PY_SCHEMA, sort_order=order, properties={"owner": "etl", "format-version": "2"}
    )
    assert table.sort_order().order_id == 1
    assert table.metadata.properties == {"owner": "etl", "write.parquet.compression-codec": "zstd"}
    assert table.metadata.format_version == 2


def test_format_version_3(catalog, ns, http):
    # pyiceberg cannot write V3 data files yet; the catalog must still create and commit V3 tables.
    table = catalog.create_table(f"{ns}.v3", PY_SCHEMA, properties={"format-version": "3"})
    assert table.metadata.format_version == 3
    with table.transaction() as tx:
        tx.set_properties(owner="etl")
    raw = http.get(f"/v1/namespaces/{ns}/tables/v3").json()["metadata"]
    assert raw["format-version"] == 3 and raw["next-row-id"] == 0 and raw["properties"]["owner"] == "etl"


def test_tags_and_branches(catalog, ns):
    table = catalog.create_table(f"{ns}.refs", PY_SCHEMA)
    table.append(rows(0, 2))
    first = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(first, "v1").create_branch(first, "dev").commit()
    table.append(rows(2, 2))
    table = catalog.load_table(f"{ns}.refs")
    assert table.metadata.refs["v1"].snapshot_id == first
    assert table.metadata.refs["dev"].snapshot_ref_type == "branch"
    assert table.scan(snapshot_id=table.metadata.refs["v1"].snapshot_id).to_arrow().num_rows == 2
    assert table.scan().to_arrow().num_rows == 4
    table.manage_snapshots().remove_tag("v1").commit()
    assert "v1" not in catalog.load_table(f"{ns}.refs").metadata.refs


def test_overwrite_and_delete(catalog, ns):
    table = catalog.create_table(f"{ns}.ow", PY_SCHEMA)
    table.append(rows(0, 10))
    table.delete(GreaterThanOrEqual("id", 5))
    assert sorted(catalog.load_table(f"{ns}.ow").scan().to_arrow()["id"].to_pylist()) == list(range(5))
    table.overwrite(rows(100, 3))
    table = catalog.load_table(f"{ns}.ow")
    assert sorted(table.scan().to_arrow()["id"].to_pylist()) == [100, 101, 102]
    assert len(table.snapshots()) >= 3


def test_rename_within_and_across_namespaces(catalog, ns):
    catalog.create_namespace(f"{ns}_other")
    table = catalog.create_table(f"{ns}.before", PY_SCHEMA)
    table.append(rows(0, 2))
    location = catalog.load_table(f"{ns}.before").metadata_location
    catalog.rename_table(f"{ns}.before", f"{ns}.after")
    assert catalog.load_table(f"{ns}.after").metadata_location == location
    catalog.rename_table(f"{ns}.after", f"{ns}_other.moved")
    moved = catalog.load_table(f"{ns}_other.moved")
    assert moved.metadata_location == location and moved.scan().to_arrow().num_rows == 2
    assert not catalog.table_exists(f"{ns}.before") and not catalog.table_exists(f"{ns}.after")
    catalog.create_table(f"{ns}.taken", PY_SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.rename_table(f"{ns}_other.moved", f"{ns}.taken")
    with pytest.raises(NoSuchTableError):
        catalog.rename_table(f"{ns}.missing", f"{ns}.whatever")
    with pytest.raises(NoSuchNamespaceError):
        catalog.rename_table(f"{ns}_other.moved", f"{ns}_nowhere.x")


def test_register_table(server, catalog, ns):
    """Register moves a table's files into the catalog under a name; a table owns its files, so a
    live table's metadata cannot be registered a second time (one purge would destroy both). Drop
    then register, the standard way to move a table, works: the register supersedes the dropped
    entry of that same table (it is forgotten, its files are the new entry's)."""
    table = catalog.create_table(f"{ns}.orig", PY_SCHEMA)
    table.append(rows(0, 3))
    location = catalog.load_table(f"{ns}.orig").metadata_location
    with pytest.raises(TableAlreadyExistsError, match="current metadata of another table or view"):
        catalog.register_table(f"{ns}.copy", location)
    catalog.drop_table(f"{ns}.orig")  # without purge: the files stay, owned while the drop is kept
    registered = catalog.register_table(f"{ns}.copy", location)
    listed = requests.get(f"{server.url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()
    assert [d for d in listed["dropped"] if d["name"] == "orig"] == []  # superseded: no undrop over it
    assert registered.metadata_location == location
    assert registered.scan().to_arrow().num_rows == 3
    registered.append(rows(3, 1))
    after = catalog.load_table(f"{ns}.copy")
    assert after.metadata_location.split("/")[-1].startswith("00002-")
    assert after.scan().to_arrow().num_rows == 4
    with pytest.raises(TableAlreadyExistsError):
        catalog.register_table(f"{ns}.copy", location)
    with pytest.raises(TableAlreadyExistsError, match="overlaps the location of another table or view"):
        catalog.register_table(f"{ns}.again", location)  # an older file of the same table


def test_drop_without_and_with_purge(server, catalog, ns):
    """A drop frees the name at once and keeps the table, restorable, for the retention (7 days by
    default); a purge deletes the files only when the retention ends, in a maintenance task."""
    table = catalog.create_table(f"{ns}.keep_files", PY_SCHEMA)
    table.append(rows(0, 2))
    kept = catalog.load_table(f"{ns}.keep_files")
    catalog.drop_table(f"{ns}.keep_files")
    assert not catalog.table_exists(f"{ns}.keep_files")
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{ns}.keep_files")
    # Without purge the files stay, and the dropped table is kept: it can be restored.
    listed = requests.get(f"{server.url}/management/v1/dropped", params={"namespace": ns}, timeout=30).json()
    (gone,) = [d for d in listed["dropped"] if d["name"] == "keep_files"]
    assert gone["purge"] is False and gone["state"] == "retained" and gone["expires-ms"] > gone["dropped-ms"]
    resp = requests.post(f"{server.url}/management/v1/dropped/{gone['id']}/undrop", timeout=30)
    assert resp.status_code == 200, resp.text
    again = catalog.load_table(f"{ns}.keep_files")
    assert again.metadata_location == kept.metadata_location and again.scan().to_arrow().num_rows == 2

    doomed = catalog.create_table(f"{ns}.purged", PY_SCHEMA)
    doomed.append(rows(0, 2))
    doomed = catalog.load_table(f"{ns}.purged")
    data_files = [task.file.file_path for task in doomed.scan().plan_files()]
    io = doomed.io
    everything = [*data_files, doomed.metadata_location]
    assert all(io.new_input(p).exists() for p in everything)
    catalog.purge_table(f"{ns}.purged")
    assert not catalog.table_exists(f"{ns}.purged")
    with pytest.raises(NoSuchTableError):
        catalog.drop_table(f"{ns}.purged")
    assert all(io.new_input(p).exists() for p in everything)  # kept until the retention ends
    purge_now(server.url, f"{ns}.purged")
    assert not any(io.new_input(p).exists() for p in everything)


def test_local_locations_are_literal_paths_like_the_clients_read_them(tmp_path):
    """A warehouse path with a space, a name with ``%41``: metadata and data in one directory."""
    workdir = tmp_path / "my lake"
    srv = start_server(workdir, extra_env=CARE_ON_REQUEST)
    try:
        catalog = srv.catalog()
        catalog.create_namespace("n s")
        table = catalog.create_table(("n s", "t%41"), PY_SCHEMA)
        table.append(rows(0, 3))
        table = catalog.load_table(("n s", "t%41"))
        table_dir = workdir / "warehouse" / "n s" / "t%41"
        assert table.location() == f"file://{table_dir}"
        files = {p.relative_to(table_dir).parts[0] for p in table_dir.rglob("*") if p.is_file()}
        assert files == {"data", "metadata"}
        assert table.io.new_input(table.metadata_location).exists()  # where a client reads it
        assert table.scan().to_arrow().num_rows == 3
        catalog.purge_table(("n s", "t%41"))
        purge_now(srv.url, "n s.t%41")
        assert not [p for p in workdir.joinpath("warehouse").rglob("*") if p.is_file()]
    finally:
        srv.stop()


def test_staged_create(catalog, ns):
    tx = catalog.create_table_transaction(f"{ns}.staged", PY_SCHEMA)
    assert not catalog.table_exists(f"{ns}.staged")  # nothing persisted until the commit
    tx.append(rows(0, 4))
    tx.commit_transaction()
    table = catalog.load_table(f"{ns}.staged")
    assert table.metadata_location.split("/")[-1].startswith("00000-")
    assert table.metadata.metadata_log == []
    assert table.scan().to_arrow().num_rows == 4
    # a second staged create of the same name loses at commit time
    tx2 = catalog.create_table_transaction(f"{ns}.staged2", PY_SCHEMA)
    catalog.create_table(f"{ns}.staged2", PY_SCHEMA)
    with pytest.raises((CommitFailedException, TableAlreadyExistsError)):
        tx2.commit_transaction()


def test_create_errors(catalog, ns):
    catalog.create_table(f"{ns}.dup", PY_SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        catalog.create_table(f"{ns}.dup", PY_SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        catalog.create_table(f"{ns}_missing.t", PY_SCHEMA)
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{ns}.nope")
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{ns}_missing.nope")


def test_list_tables(catalog, ns):
    for name in ("c", "a", "b"):
        catalog.create_table(f"{ns}.{name}", PY_SCHEMA)
    assert catalog.list_tables(ns) == [(ns, "a"), (ns, "b"), (ns, "c")]
    paged = catalog.__class__("paged", uri=catalog.uri, **{"rest-page-size": "2"})
    assert paged.list_tables(ns) == [(ns, "a"), (ns, "b"), (ns, "c")]


@pytest.mark.parametrize("delete_after_commit", [None, "true", "false"])
def test_metadata_log_bounded_and_old_files_deleted_unless_the_table_says_not(catalog, ns, delete_after_commit):
    """What falls out of the log is deleted after the commit, in the background: by the catalog's
    default (``CATALOG_METADATA_DELETE_AFTER_COMMIT``, on) or the table's ``true``; a table's
    ``false`` keeps it (for snapshot expiry's sweep, as Iceberg's own default does)."""
    props = {"write.metadata.previous-versions-max": "2"}
    if delete_after_commit is not None:
        props["write.metadata.delete-after-commit.enabled"] = delete_after_commit
    table = catalog.create_table(f"{ns}.bounded_{delete_after_commit}".lower(), PY_SCHEMA, properties=props)
    first = table.metadata_location
    for i in range(4):
        table.append(rows(i, 1))
    table = catalog.load_table(f"{ns}.bounded_{delete_after_commit}".lower())
    assert len(table.metadata.metadata_log) == 2
    for entry in table.metadata.metadata_log:
        assert table.io.new_input(entry.metadata_file).exists()
    if delete_after_commit == "false":
        time.sleep(GATHER_SECONDS + 1)  # what a background delete would have needed; none may come
        assert table.io.new_input(first).exists()
    else:
        wait_for(lambda: not table.io.new_input(first).exists(), "the dropped metadata file's delete", 30)


def test_gzip_metadata(catalog, ns):
    table = catalog.create_table(f"{ns}.gz", PY_SCHEMA, properties={"write.metadata.compression-codec": "gzip"})
    assert table.metadata_location.endswith(".gz.metadata.json")
    table.append(rows(0, 2))
    table = catalog.load_table(f"{ns}.gz")
    assert table.metadata_location.split("/")[-1].startswith("00001-")
    assert table.scan().to_arrow().num_rows == 2
