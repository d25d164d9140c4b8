"""Objects in S3 or an S3-compatible store (MinIO, SeaweedFS) through boto3: the contract of
``backends.Storage`` (checked, bounded, create-only writes with ``If-None-Match: *``), the S3 keys
the server's own clients are built with, and the error codes sorted by who must act.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import urlparse

from catalog import errors
from catalog.settings import StorageSettings
from catalog.storage.bounds import USER_AGENT, StoredFile
from catalog.storage.bounds import Bounds as _Bounds
from catalog.storage.bounds import not_found as _not_found

# S3 error codes by who must act: the client's request, the operator, or nobody (retry).
_S3_MISSING = {"NoSuchKey", "404", "NotFound"}
S3_DELETE_BATCH = 1000  # the most keys one DeleteObjects request takes
_S3_CLIENT = {"KeyTooLongError", "InvalidArgument", "InvalidBucketName", "InvalidURI", "400"}
_S3_OPERATOR = {"NoSuchBucket", "AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"}


def s3_keys(settings: StorageSettings) -> dict[str, str | None]:
    """The keys the server's own S3 clients (storage, STS, the signer) are built with: the warehouse's.
    None lets boto3 fall back to its default chain, the process's own credentials (AWS_* variables,
    ~/.aws, an instance or pod role): only where ``s3_use_ambient_credentials`` allows it (the default
    warehouse; a created one whose profile opts in). ``vending.check_settings`` refuses the rest first."""
    key, secret = settings.s3_access_key_id, settings.s3_secret_access_key
    if not (key and secret) and not settings.s3_use_ambient_credentials:
        raise errors.ServiceUnavailable(
            "This warehouse has no S3 keys and may not use the process's own credentials (use-ambient-credentials)"
        )
    return {"aws_access_key_id": key, "aws_secret_access_key": secret}


class S3Storage(_Bounds):
    """Objects in an S3-compatible store through boto3."""

    def __init__(self, settings: StorageSettings) -> None:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import ClientError

        self.warehouse = settings.warehouse.rstrip("/")
        self.bucket = urlparse(self.warehouse).netloc
        super().__init__(settings, self.warehouse)
        self._client_error = ClientError
        self.endpoint = settings.s3_endpoint or f"of AWS in {settings.s3_region} (unset)"
        timeout = settings.storage_timeout_seconds
        self.client = boto3.client(
            "s3",
            endpoint_url=settings.s3_endpoint,
            region_name=settings.s3_region,
            **s3_keys(settings),
            config=Config(
                user_agent_extra=USER_AGENT,  # tells the server's own requests apart in the store's logs
                s3={"addressing_style": "path" if settings.s3_path_style_access else "auto"},
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=min(timeout, 5.0),
                read_timeout=timeout,
                max_pool_connections=64,
            ),
        )

    def root(self) -> str:
        return self.warehouse

    def _split(self, location: str) -> tuple[str, str]:
        if not self.locations.check(location).startswith("s3:"):
            raise errors.BadRequest(f"Unsupported location for an S3 warehouse: {location}")
        parsed = urlparse(location)
        return parsed.netloc, parsed.path.lstrip("/")

    def _error(self, e: Exception, doing: str, location: str) -> errors.IcebergError:
        if isinstance(e, self._client_error):
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in _S3_MISSING:
                return _not_found(location)
            if code in _S3_CLIENT:
                return errors.BadRequest(f"Storage refused {doing} {location}: {code}")
            if code in _S3_OPERATOR:
                return errors.IcebergError(f"Storage refused {doing} {location}: {code} (check the server's S3 setup)")
            return errors.ServiceUnavailable(
                f"Storage error {doing} a file: {code or type(e).__name__}", detail=f"{location}: {e}"
            )
        return errors.ServiceUnavailable(
            f"Storage unavailable {doing} a file: the S3 endpoint cannot be reached (CATALOG_S3_ENDPOINT)",
            detail=f"{location}: {self._unreachable(e)}",
        )

    def _unreachable(self, e: Exception) -> str:
        """Where the server tried and which setting says so (never the keys): the operator's next step."""
        return f"cannot reach the S3 endpoint {self.endpoint} (CATALOG_S3_ENDPOINT): {type(e).__name__}"

    def read(self, location: str, limit: int | None = None) -> bytes:
        cap = self._cap(limit)
        bucket, key = self._split(location)
        with self._slot():
            try:
                response = self.client.get_object(Bucket=bucket, Key=key)
                body = response["Body"]
                try:
                    size = int(response.get("ContentLength") or 0)
                    if size > cap:
                        raise self._too_large(location, size, limit)
                    data = body.read(cap + 1)
                finally:
                    body.close()
            except errors.IcebergError:
                raise
            except Exception as e:  # noqa: BLE001 - botocore's errors: classified, never echoed whole
                raise self._error(e, "reading", location) from e
        if len(data) > cap:
            raise self._too_large(location, len(data), limit)
        return data

    def write_new(self, location: str, data: bytes) -> None:
        bucket, key = self._split(location)
        with self._slot():
            try:
                self.client.put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
            except self._client_error as e:
                if e.response.get("Error", {}).get("Code") in ("PreconditionFailed", "412"):
                    raise FileExistsError(location) from e
                raise self._error(e, "writing", location) from e
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "writing", location) from e

    def delete(self, location: str) -> None:
        bucket, key = self._split(location)
        with self._slot():
            try:
                self.client.delete_object(Bucket=bucket, Key=key)
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "deleting", location) from e

    def delete_many(self, locations: Iterable[str]) -> None:
        """One DeleteObjects request per bucket and 1,000 keys instead of a DeleteObject each: boto3
        costs ~1-2 ms of CPU per call, and a hot table's delete-after-commit deletes a file per commit
        (measured: docs/performance.md). A store without DeleteObjects gets one call per file."""
        by_bucket: dict[str, list[tuple[str, str]]] = {}
        for location in locations:
            bucket, key = self._split(location)
            by_bucket.setdefault(bucket, []).append((key, location))
        for bucket, keys in by_bucket.items():
            for start in range(0, len(keys), S3_DELETE_BATCH):
                self._delete_batch(bucket, keys[start : start + S3_DELETE_BATCH])

    def _delete_batch(self, bucket: str, keys: list[tuple[str, str]]) -> None:
        if len(keys) == 1:
            return self.delete(keys[0][1])
        with self._slot():
            try:
                response = self.client.delete_objects(
                    Bucket=bucket, Delete={"Objects": [{"Key": key} for key, _ in keys], "Quiet": True}
                )
            except self._client_error as e:
                if e.response.get("Error", {}).get("Code") not in ("NotImplemented", "501", "MethodNotAllowed"):
                    raise self._error(e, "deleting", keys[0][1]) from e
                response = None
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "deleting", keys[0][1]) from e
        if response is None:  # no DeleteObjects here: one call each
            for _, location in keys:
                self.delete(location)
            return None
        failed = [f for f in response.get("Errors") or [] if str(f.get("Code")) not in _S3_MISSING]
        if failed:
            location = dict(keys).get(failed[0].get("Key", ""), keys[0][1])
            error = self._client_error({"Error": {"Code": failed[0].get("Code", "")}}, "DeleteObjects")
            raise self._error(error, "deleting", location)
        return None

    def prepare_table_location(self, location: str) -> None:
        """Nothing to create: S3 has no directories (the location is still checked)."""
        self._split(location)

    def remove_empty_directories(self, location: str) -> None:
        """Nothing to remove: S3 has no directories."""

    def listing(self, prefix: str) -> Iterator[StoredFile]:
        """Every object under ``prefix`` + "/", one page (1,000 keys) at a time."""
        bucket, key = self._split(prefix)
        start = key.rstrip("/") + "/"
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": bucket, "Prefix": start, "MaxKeys": 1000}
            if token:
                args["ContinuationToken"] = token
            with self._slot():
                try:
                    page = self.client.list_objects_v2(**args)
                except Exception as e:  # noqa: BLE001
                    raise self._error(e, "listing", prefix) from e
            for item in page.get("Contents") or ():
                modified = int(item["LastModified"].timestamp() * 1000)
                yield StoredFile(f"s3://{bucket}/{item['Key']}", modified, int(item.get("Size") or 0))
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def ping(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as e:  # noqa: BLE001
            if isinstance(e, self._client_error):  # it answered: what it said of the bucket
                code = e.response.get("Error", {}).get("Code", "")
                raise errors.ServiceUnavailable(f"Storage unavailable: bucket {self.bucket}: {code}") from e
            raise errors.ServiceUnavailable(f"Storage unavailable: {self._unreachable(e)}") from e
