"""Metadata files in Azure Blob Storage / ADLS Gen2 (``azure-storage-blob``), confined and bounded.

The same contract as ``s3.S3Storage``: every location is checked against the location policy
first (``abfss://container@account.dfs.<suffix>/path``; ``wasbs://`` and the ``blob`` host are the
same place), reads are bounded (the size is read first, a larger file is refused before its body),
calls are bounded in time (connect and read timeouts, two retries) and in number (the storage
slots). Writes are create-only: ``If-None-Match: *`` (``overwrite=False``); a blob already there is
``FileExistsError``. A delete of a blob already gone succeeds. Listing streams one page (1,000
names) at a time.

The server reaches one storage account, with its shared key (``CATALOG_AZURE_ACCOUNT_KEY``) at
``CATALOG_AZURE_BLOB_ENDPOINT`` (or ``https://<account>.blob.<suffix>``). Errors name the account,
container and setting, never the key, a SAS or the service's raw message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from catalog import errors
from catalog.locations import azure_parts
from catalog.settings import ConfigurationError, StorageSettings
from catalog.storage.bounds import USER_AGENT, Bounds, StoredFile, not_found

# Error codes (x-ms-error-code) by who must act.
_CLIENT = {"InvalidResourceName", "InvalidUri", "OutOfRangeInput", "InvalidQueryParameterValue"}
_OPERATOR = {
    "ContainerNotFound",
    "AuthenticationFailed",
    "AuthorizationFailure",
    "AuthorizationPermissionMismatch",
    "InsufficientAccountPermissions",
    "AccountIsDisabled",
}


def account_of(settings: StorageSettings) -> tuple[str, str, str]:
    """(account name, account host, container) of an Azure warehouse; ``ConfigurationError`` if malformed."""
    from catalog.locations import normalise

    try:
        normal = normalise(settings.warehouse, "CATALOG_WAREHOUSE")
    except errors.IcebergError as e:
        raise ConfigurationError(e.message) from None
    container, account, host, _ = azure_parts(normal)
    return account, host, container


def blob_endpoint(settings: StorageSettings) -> str:
    """The blob endpoint the server uses: the setting, or the public one of the warehouse's account."""
    if settings.azure_blob_endpoint:
        return settings.azure_blob_endpoint.rstrip("/")
    account, host, _ = account_of(settings)
    return f"https://{account}.blob.{host.split('.', 2)[2]}"


def check_settings(settings: StorageSettings) -> None:
    """Refuse an Azure warehouse the server cannot reach (``ConfigurationError``, naming the setting)."""
    if settings.storage_kind != "azure":
        return
    account_of(settings)
    if not settings.azure_account_key:
        raise ConfigurationError(
            "CATALOG_WAREHOUSE is an Azure location but CATALOG_AZURE_ACCOUNT_KEY is not set: the server reaches "
            "the storage account with its shared key (Microsoft Entra ID is not supported yet)"
        )
    for name in ("azure_blob_endpoint", "azure_client_blob_endpoint"):
        value = getattr(settings, name)
        if value and not value.startswith(("https://", "http://")):
            raise ConfigurationError(f"CATALOG_{name.upper()} must be an http:// or https:// URL, got {value!r}")


class AzureStorage(Bounds):
    """Blobs in one storage account through ``azure-storage-blob``, with the account's shared key."""

    def __init__(self, settings: StorageSettings) -> None:
        from azure.core import exceptions
        from azure.storage.blob import BlobServiceClient, LinearRetry

        check_settings(settings)
        self.warehouse = settings.warehouse.rstrip("/")
        super().__init__(settings, self.warehouse)
        self.account, self.host, self.container = account_of(settings)
        self.endpoint = blob_endpoint(settings)
        self._exc = exceptions
        timeout = settings.storage_timeout_seconds
        self.client = BlobServiceClient(
            self.endpoint,
            credential={"account_name": self.account, "account_key": settings.azure_account_key},
            connection_timeout=min(timeout, 5.0),
            read_timeout=timeout,
            # Two retries half a second apart: the SDK's default backoff (15 s, then more) would hold
            # a request far longer than the storage timeout when the store is down.
            retry_policy=LinearRetry(backoff=0.5, retry_total=2, random_jitter_range=0.25),
            user_agent=USER_AGENT,
        )
        self._timeout = timeout

    def root(self) -> str:
        return self.warehouse

    def _split(self, location: str) -> tuple[str, str]:
        """(container, blob name) of an allowed location in this account."""
        normal = self.locations.check(location)
        if not normal.startswith("abfss://"):
            raise errors.BadRequest(f"Unsupported location for an Azure warehouse: {location}")
        container, account, _, path = azure_parts(normal)
        if account != self.account:
            raise errors.BadRequest(f"Unsupported location {location}: another storage account than the warehouse's")
        return container, path

    def _error(self, e: Exception, doing: str, location: str) -> errors.IcebergError:
        exc = self._exc
        if isinstance(e, exc.ResourceNotFoundError) and getattr(e, "error_code", None) != "ContainerNotFound":
            return not_found(location)
        if isinstance(e, exc.HttpResponseError) and e.status_code is not None:
            code = str(getattr(e, "error_code", None) or e.status_code)
            if code in _OPERATOR or e.status_code in (401, 403) or code == "ContainerNotFound":
                return errors.IcebergError(
                    f"Storage refused {doing} {location}: {code} (check CATALOG_AZURE_ACCOUNT_KEY and the container)"
                )
            if code in _CLIENT or e.status_code == 400:
                return errors.BadRequest(f"Storage refused {doing} {location}: {code}")
            return errors.ServiceUnavailable(f"Storage error {doing} a file: {code}", detail=location)
        return errors.ServiceUnavailable(f"Storage unavailable {doing} a file: {self._unreachable(e)}", detail=location)

    def _unreachable(self, e: Exception) -> str:
        return f"cannot reach the Azure blob endpoint {self.endpoint} (CATALOG_AZURE_BLOB_ENDPOINT): {type(e).__name__}"

    def read(self, location: str, limit: int | None = None) -> bytes:
        cap = self._cap(limit)
        container, name = self._split(location)
        blob = self.client.get_blob_client(container, name)
        with self._slot():
            try:
                properties = blob.get_blob_properties(timeout=self._timeout)
                size = int(properties.size or 0)
                if size > cap:
                    raise self._too_large(location, size, limit)
                if size == 0:
                    return b""
                # Only the bytes the size promised, and only of the version whose size was read.
                from azure.core import MatchConditions

                stream = blob.download_blob(
                    offset=0,
                    length=size,
                    etag=properties.etag,
                    match_condition=MatchConditions.IfNotModified,
                    max_concurrency=1,
                    timeout=self._timeout,
                )
                data = stream.readall()
            except errors.IcebergError:
                raise
            except Exception as e:  # noqa: BLE001 - azure-core's errors: classified, never echoed whole
                raise self._error(e, "reading", location) from e
        if len(data) > cap:
            raise self._too_large(location, len(data), limit)
        return data

    def write_new(self, location: str, data: bytes) -> None:
        container, name = self._split(location)
        blob = self.client.get_blob_client(container, name)
        with self._slot():
            try:
                blob.upload_blob(data, overwrite=False, max_concurrency=1, timeout=self._timeout)
            except self._exc.ResourceExistsError as e:
                if getattr(e, "error_code", None) in ("BlobAlreadyExists", None):
                    raise FileExistsError(location) from e
                raise self._error(e, "writing", location) from e
            except self._exc.ResourceModifiedError as e:  # 412 on the If-None-Match precondition
                raise FileExistsError(location) from e
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "writing", location) from e

    def delete(self, location: str) -> None:
        container, name = self._split(location)
        with self._slot():
            try:
                self.client.get_blob_client(container, name).delete_blob(timeout=self._timeout)
            except self._exc.ResourceNotFoundError as e:
                if getattr(e, "error_code", None) == "ContainerNotFound":
                    raise self._error(e, "deleting", location) from e
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "deleting", location) from e

    def prepare_table_location(self, location: str) -> None:
        """Nothing to create: blob names hold their directories (the location is still checked)."""
        self._split(location)

    def remove_empty_directories(self, location: str) -> None:
        """Nothing to remove: blob names hold their directories."""

    def listing(self, prefix: str) -> Iterator[StoredFile]:
        """Every blob under ``prefix`` + "/", one page (1,000 names) at a time, named with the
        prefix's own scheme and host (the spelling the table's metadata uses)."""
        container, name = self._split(prefix)
        start = name.rstrip("/") + "/" if name else ""
        scheme, _, rest = prefix.partition("://")
        base = f"{scheme}://{rest.partition('/')[0]}/"
        pages: Any = (
            self.client.get_container_client(container)
            .list_blobs(name_starts_with=start, results_per_page=1000, timeout=self._timeout)
            .by_page()
        )
        while True:
            with self._slot():
                try:
                    page = list(next(pages))
                except StopIteration:
                    return
                except Exception as e:  # noqa: BLE001
                    raise self._error(e, "listing", prefix) from e
            for item in page:
                modified = item.last_modified or item.creation_time
                yield StoredFile(f"{base}{item.name}", int(modified.timestamp() * 1000), int(item.size or 0))

    def ping(self) -> None:
        try:
            self.client.get_container_client(self.container).get_container_properties(timeout=self._timeout)
        except self._exc.HttpResponseError as e:
            if e.status_code is not None:  # it answered: what it said of the container
                code = getattr(e, "error_code", None) or e.status_code
                raise errors.ServiceUnavailable(
                    f"Storage unavailable: container {self.container} of account {self.account}: {code}"
                ) from e
            raise errors.ServiceUnavailable(f"Storage unavailable: {self._unreachable(e)}") from e
        except Exception as e:  # noqa: BLE001
            raise errors.ServiceUnavailable(f"Storage unavailable: {self._unreachable(e)}") from e
