"""The Spark configuration for using this catalog from Spark 3.5 + Iceberg 1.9: ONE function, shared by
the example pipeline and by tests/test_spark.py, so the documented settings are the tested ones.

    from spark_conf import spark_conf
    builder = SparkSession.builder.master("local[2]")
    for key, value in spark_conf("http://127.0.0.1:8181").items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")

Jars: when the environment variable ``ICEBERG_SPARK_JARS`` holds a comma-separated list of local jar
files (the Iceberg Spark runtime and, for S3, the AWS bundle), those are used (``spark.jars``);
otherwise Spark downloads the published artifacts (``spark.jars.packages``, needs Maven Central).
"""

from __future__ import annotations

import os

ICEBERG_VERSION = "1.9.0"
PACKAGES = (
    f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{ICEBERG_VERSION},"
    f"org.apache.iceberg:iceberg-aws-bundle:{ICEBERG_VERSION}"
)


def spark_conf(
    uri: str,
    warehouse: str = "local",
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    s3_endpoint: str | None = None,
    region: str | None = None,
    catalog: str = "lake",
    jars: str | None = None,
) -> dict[str, str]:
    """SparkSession settings for an Iceberg REST catalog at ``uri`` named ``catalog``.

    ``warehouse`` is the kind of warehouse the catalog server was started with: ``"local"`` (a
    directory, ``file:`` locations: nothing more to configure) or ``"s3"`` (an ``s3://`` warehouse on
    S3/MinIO/SeaweedFS). For ``"s3"`` the client supplies its own credentials (``access_key``,
    ``secret_key``); the endpoint, region and path-style flag come from the catalog's ``/v1/config``
    defaults, so ``s3_endpoint`` / ``region`` are only needed to override what the server advertises
    (e.g. the server says ``http://minio:9000`` but this client reaches MinIO at ``localhost:9000``).
    ``jars``: comma-separated local jar paths; default ``$ICEBERG_SPARK_JARS``, else Maven packages.
    """
    if warehouse not in ("local", "s3"):
        raise ValueError(f"warehouse must be 'local' or 's3', not {warehouse!r}")
    jars = jars if jars is not None else os.environ.get("ICEBERG_SPARK_JARS", "")
    prefix = f"spark.sql.catalog.{catalog}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "rest",
        f"{prefix}.uri": uri.rstrip("/"),
        # Every statement loads the table from the catalog: concurrent writers (other sessions,
        # other processes) are seen at once instead of after the 30 s default cache expiry.
        f"{prefix}.cache-enabled": "false",
    }
    if jars.strip():
        conf["spark.jars"] = jars.strip()
    else:
        conf["spark.jars.packages"] = PACKAGES
    if warehouse == "s3":
        if not (access_key and secret_key):
            raise ValueError("an s3 warehouse needs access_key and secret_key")
        conf[f"{prefix}.io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        conf[f"{prefix}.s3.access-key-id"] = access_key
        conf[f"{prefix}.s3.secret-access-key"] = secret_key
        if s3_endpoint:
            conf[f"{prefix}.s3.endpoint"] = s3_endpoint
            conf[f"{prefix}.s3.path-style-access"] = "true"
        if region:
            conf[f"{prefix}.client.region"] = region
    return conf
