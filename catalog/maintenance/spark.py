"""Compaction on Spark: work beyond the in-process bound handed to Iceberg's own
``rewrite_data_files`` procedure on a configured Spark (``CATALOG_MAINTENANCE_COMPACTION_SPARK``: a
master URL such as ``local[2]`` or ``spark://host:7077``, or a Spark Connect URL ``sc://host:15002``).

The worker opens one Spark session per process, lazily, with this catalog registered in it as
``catalog_maintenance`` (``CATALOG_MAINTENANCE_COMPACTION_SPARK_CATALOG_URI``, by default the server's
own address; on an S3 warehouse the server's own S3 settings; ``CATALOG_MAINTENANCE_COMPACTION_SPARK_CONF``
adds or overrides any Spark setting: jars, credentials). Spark then plans, rewrites and commits as a
client of the catalog: its commit is validated by Spark (``RewriteFiles``) and goes through the same
compare-and-swap as every writer's, so a writer that lands first makes Spark's compaction fail, never
the other way round; the task is retried later. pyspark is imported only when a Spark is configured
(it is not a dependency of the server).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from catalog import errors
from catalog.settings import MaintenanceSettings, StorageSettings

CATALOG = "catalog_maintenance"


def identifier(parts: Sequence[str]) -> str:
    """``parts`` as a Spark SQL string literal holding a quoted multi-part identifier: every part in
    backticks (a backtick doubled), then the literal's quote and backslash escaped. Names are the
    client's: nothing in them may end the literal or the identifier."""
    quoted = ".".join("`" + p.replace("`", "``") + "`" for p in parts)
    return "'" + quoted.replace("\\", "\\\\").replace("'", "\\'") + "'"


def catalog_conf(settings: MaintenanceSettings, storage: StorageSettings, port: int) -> dict[str, str]:
    """The Spark settings that register this catalog as ``catalog_maintenance``: at its own address
    (``port``: the server's), on the warehouse's storage with the server's S3 settings."""
    prefix = f"spark.sql.catalog.{CATALOG}"
    uri = settings.maintenance_compaction_spark_catalog_uri or f"http://127.0.0.1:{port}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri.rstrip("/"),
        f"{prefix}.cache-enabled": "false",
    }
    if storage.warehouse.startswith(("s3://", "s3a://")):
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        if storage.s3_access_key_id and storage.s3_secret_access_key:
            conf[f"{prefix}.s3.access-key-id"] = storage.s3_access_key_id
            conf[f"{prefix}.s3.secret-access-key"] = storage.s3_secret_access_key
        if storage.s3_endpoint:
            conf[f"{prefix}.s3.endpoint"] = storage.s3_endpoint
            conf[f"{prefix}.s3.path-style-access"] = str(storage.s3_path_style_access).lower()
        if storage.s3_region:
            conf[f"{prefix}.client.region"] = storage.s3_region
    conf.update(settings.maintenance_compaction_spark_conf)
    return conf


class SparkEngine:
    """One Spark session per process, opened on first use and shared by the worker's threads (one
    ``rewrite_data_files`` at a time: a local Spark on a small machine has no room for two)."""

    def __init__(self, settings: MaintenanceSettings, storage: StorageSettings, port: int) -> None:
        self.settings = settings
        self.storage, self.port = storage, port
        self._session: Any = None
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self.settings.maintenance_compaction_spark)

    def _spark(self) -> Any:
        if self._session is None:
            try:
                from pyspark.sql import SparkSession
            except ImportError as e:
                raise errors.ServiceUnavailable(
                    "CATALOG_MAINTENANCE_COMPACTION_SPARK is set but pyspark is not installed (pip install pyspark)"
                ) from e
            url = self.settings.maintenance_compaction_spark
            builder = SparkSession.builder.appName("iceberg-catalog-compaction")
            builder = builder.remote(url) if url.startswith("sc://") else builder.master(url)
            for key, value in catalog_conf(self.settings, self.storage, self.port).items():
                builder = builder.config(key, value)
            self._session = builder.getOrCreate()
        return self._session

    def rewrite(self, namespace: Sequence[str], name: str, options: dict[str, str]) -> dict[str, Any]:
        """``CALL catalog_maintenance.system.rewrite_data_files`` on the table: Spark's result row."""
        pairs = ", ".join(f"'{k}', '{v}'" for k, v in sorted(options.items()) if _plain(k) and _plain(v))
        sql = (
            f"CALL {CATALOG}.system.rewrite_data_files(table => {identifier([*namespace, name])}"
            + (f", options => map({pairs})" if pairs else "")
            + ")"
        )
        with self._lock:
            spark = self._spark()
            rows = spark.sql(sql).collect()
        return {k.replace("_", "-"): v for k, v in (rows[0].asDict() if rows else {}).items()}


def _plain(value: str) -> bool:
    """Option keys and values are the catalog's own (numbers, dashes): anything else is refused."""
    return all(c.isalnum() or c in "-._" for c in value)
