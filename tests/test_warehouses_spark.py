"""Spark selects a warehouse by ``spark.sql.catalog.<name>.warehouse`` (sent to ``/v1/config``, the
prefix it answers used for every call): two Spark catalogs on one server, one per warehouse."""

from __future__ import annotations

import uuid
from pathlib import Path

import requests
from pyiceberg.catalog.rest import RestCatalog

from tests.support import spark_conf, sql_rows, start_server, warehouse_roots


def test_spark_selects_a_warehouse_by_its_name(spark, tmp_path: Path) -> None:
    server = start_server(tmp_path / "srv", extra_env=warehouse_roots(tmp_path))
    try:
        made = requests.post(
            server.url + "/management/v1/warehouses",
            json={"name": "team-a", "location": str(tmp_path / "a")},
            timeout=30,
        )
        assert made.status_code == 201, made.text
        names = {}
        for warehouse in ("team-a", None):
            name = f"wh_{uuid.uuid4().hex[:6]}"
            prefix = f"spark.sql.catalog.{name}"
            for key, value in spark_conf(server.url, catalog=name).items():
                if key.startswith(prefix):
                    spark.conf.set(key, value)
            if warehouse:
                spark.conf.set(f"{prefix}.warehouse", warehouse)
            names[warehouse] = name
        a, default = names["team-a"], names[None]
        for catalog, ids in ((a, "1, 2"), (default, "7")):
            spark.sql(f"CREATE NAMESPACE {catalog}.sales")
            spark.sql(f"CREATE TABLE {catalog}.sales.orders (id BIGINT) USING iceberg")
            spark.sql(
                f"INSERT INTO {catalog}.sales.orders VALUES {', '.join(f'({i.strip()})' for i in ids.split(','))}"
            )
        assert sql_rows(spark, f"SELECT id FROM {a}.sales.orders ORDER BY id") == [(1,), (2,)]
        assert sql_rows(spark, f"SELECT id FROM {default}.sales.orders") == [(7,)]
        in_a = RestCatalog("check", uri=server.url, warehouse="team-a").load_table("sales.orders")
        assert sorted(in_a.scan().to_arrow().column("id").to_pylist()) == [1, 2]
        assert in_a.location().startswith(f"file://{tmp_path / 'a'}")
        assert any((tmp_path / "a" / "sales" / "orders" / "data").rglob("*.parquet"))
    finally:
        server.stop()
