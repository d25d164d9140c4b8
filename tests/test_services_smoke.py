"""The throwaway services of tests/services.py start, answer for real, and stop."""

from __future__ import annotations

import psycopg
import pytest
from botocore.exceptions import ClientError

from tests import services


@pytest.mark.postgres
def test_postgres_round_trip_stop_and_restart(tmp_path):
    pg = services.start_postgres(tmp_path)
    try:
        with psycopg.connect(pg.dsn) as conn:  # as the catalog role, by password over TCP
            assert conn.execute("select 1").fetchone() == (1,)
        assert pg.url.startswith("postgresql+psycopg://catalog:catalog@127.0.0.1:")
        pg.stop()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg.dsn, connect_timeout=2)
        pg.start()
        with psycopg.connect(pg.superuser_dsn) as conn:
            assert conn.execute("select current_user").fetchone() == ("postgres",)
    finally:
        pg.close()


@pytest.mark.s3
def test_seaweedfs_put_get_and_create_only_write(tmp_path):
    s3 = services.start_seaweedfs(tmp_path)
    try:
        client = s3.client()
        client.put_object(Bucket=s3.bucket, Key="smoke/a.txt", Body=b"first")
        assert client.get_object(Bucket=s3.bucket, Key="smoke/a.txt")["Body"].read() == b"first"
        with pytest.raises(ClientError) as err:
            client.put_object(Bucket=s3.bucket, Key="smoke/a.txt", Body=b"second", IfNoneMatch="*")
        assert err.value.response["Error"]["Code"] == "PreconditionFailed"
        assert client.get_object(Bucket=s3.bucket, Key="smoke/a.txt")["Body"].read() == b"first"
    finally:
        s3.stop()
    assert s3.proc.poll() is not None
