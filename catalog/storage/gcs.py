"""Metadata files in Google Cloud Storage (``google-cloud-storage``), confined and bounded.

The same contract as ``s3.S3Storage``: every location is checked against the location policy
first (``gs://bucket/path``), reads are bounded (the object's size is read first, a larger object is
refused before its body, and the body is fetched only for that generation), calls are bounded in
time (connect and read timeouts, retries within twice the timeout) and in number (the storage
slots). Writes are create-only: ``ifGenerationMatch=0``; an object already there is
``FileExistsError``. A delete of an object already gone succeeds. Listing streams one page (1,000
names) at a time.

The server's credentials: a service account key file (``CATALOG_GCS_CREDENTIALS_FILE``), else
Application Default Credentials; with ``CATALOG_GCS_NO_AUTH`` none (an emulator). Errors name the
bucket and setting, never a token or the service's raw message.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from catalog import errors
from catalog.locations import gcs_parts, normalise
from catalog.settings import ConfigurationError, StorageSettings
from catalog.storage.bounds import USER_AGENT, Bounds, StoredFile, not_found

SCOPE = "https://www.googleapis.com/auth/devstorage.full_control"
EMULATOR_TOKEN = "emulator-ignores-this-token"  # pyarrow's GCS client needs a token and its expiry


def bucket_of(settings: StorageSettings) -> str:
    try:
        return gcs_parts(normalise(settings.warehouse, "CATALOG_WAREHOUSE"))[0]
    except errors.IcebergError as e:
        raise ConfigurationError(e.message) from None


def check_settings(settings: StorageSettings) -> None:
    if settings.storage_kind != "gcs":
        return
    bucket_of(settings)
    for name in ("gcs_endpoint", "gcs_client_endpoint"):
        value = getattr(settings, name)
        if value and not value.startswith(("https://", "http://")):
            raise ConfigurationError(f"CATALOG_{name.upper()} must be an http:// or https:// URL, got {value!r}")
    if settings.gcs_no_auth and settings.gcs_credentials_file:
        raise ConfigurationError("CATALOG_GCS_NO_AUTH and CATALOG_GCS_CREDENTIALS_FILE exclude each other")
    if not (settings.gcs_no_auth or settings.gcs_credentials_file or settings.gcs_use_ambient_credentials):
        raise ConfigurationError(
            "CATALOG_GCS_CREDENTIALS_FILE (a profile's gcs credentials-file) is not set and "
            "CATALOG_GCS_USE_AMBIENT_CREDENTIALS (use-ambient-credentials) is false: set a service account key "
            "file, or opt in to the process's own Application Default Credentials"
        )
    if settings.gcs_no_auth and not settings.gcs_endpoint:
        raise ConfigurationError(
            "CATALOG_GCS_NO_AUTH is for an emulator: set CATALOG_GCS_ENDPOINT to it (Google itself needs credentials)"
        )


def client_access_warnings(settings: StorageSettings) -> list[str]:
    """What leaves a client of this warehouse with no way to authenticate to its storage: with
    ``gcs_no_auth`` the server has no credentials to vend from, and without ``gcs_vend_credentials``
    it tells clients no token at all. A client that brings no credentials of its own then looks for
    Application Default Credentials (pyiceberg's append was seen to hang doing so). The warehouse
    still works for clients configured as docs/storage.md says, so this is a warning, not a refusal."""
    if settings.storage_kind != "gcs" or not settings.gcs_no_auth or settings.gcs_vend_credentials:
        return []
    return [
        "CATALOG_GCS_NO_AUTH (gcs no-auth) is on and CATALOG_GCS_VEND_CREDENTIALS (vend-credentials) is off: "
        "the catalog gives clients no token, so a client without storage settings of its own has no way to "
        "authenticate to the emulator (pyiceberg can hang looking for Google credentials). Turn vend-credentials "
        "on (the vended token is a placeholder the emulator ignores), or configure every client: pyiceberg "
        "gcs.oauth2.token=<anything> with gcs.oauth2.token-expires-at=<a future epoch ms>, Spark "
        "gcs.no-auth=true (docs/storage.md, 'What a GCS client needs')"
    ]


def server_credentials(settings: StorageSettings) -> Any:
    """The server's own Google credentials (anonymous with ``gcs_no_auth``)."""
    if settings.gcs_no_auth:
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials()
    import google.auth

    try:
        if settings.gcs_credentials_file:
            credentials, _ = google.auth.load_credentials_from_file(settings.gcs_credentials_file, scopes=[SCOPE])
        elif not settings.gcs_use_ambient_credentials:  # refused by check_settings first
            raise ConfigurationError("no Google credentials for this warehouse (use-ambient-credentials is false)")
        else:
            credentials, _ = google.auth.default(scopes=[SCOPE])
    except Exception as e:  # noqa: BLE001 - google-auth's errors may quote the file: named by type only
        raise ConfigurationError(
            f"Cannot load the server's Google credentials ({type(e).__name__}): set CATALOG_GCS_CREDENTIALS_FILE to a "
            "service account key file, or run with Application Default Credentials"
        ) from None
    return credentials


class TokenSource:
    """A current access token of the server's credentials (refreshed when under 5 minutes are left)."""

    def __init__(self, credentials: Any, timeout: float) -> None:
        self.credentials, self._timeout = credentials, timeout
        self._lock = threading.Lock()

    def token(self) -> tuple[str, float]:
        """(access token, expiry as epoch seconds)."""
        import google.auth.transport.requests

        with self._lock:
            expiry = getattr(self.credentials, "expiry", None)
            left = (expiry.timestamp() - time.time()) if expiry is not None else 0
            if not self.credentials.token or left < 300:
                try:
                    self.credentials.refresh(google.auth.transport.requests.Request())
                except Exception as e:  # noqa: BLE001
                    raise errors.ServiceUnavailable(
                        f"Cannot get an access token for the server's Google credentials ({type(e).__name__})"
                    ) from e
            expiry = getattr(self.credentials, "expiry", None)
            return self.credentials.token, expiry.timestamp() if expiry else time.time() + 3600


_shared: dict[tuple[str | None, bool], TokenSource] = {}
_shared_lock = threading.Lock()


def shared_token(settings: StorageSettings) -> tuple[str, float]:
    """(token, expiry) of the server's credentials for its own FileIO (purges, maintenance), one
    token source per process; a placeholder the emulator ignores with ``gcs_no_auth``."""
    if settings.gcs_no_auth:
        return EMULATOR_TOKEN, time.time() + 3600
    # Keyed by where the credentials come from: a warehouse that may not use the process's own (its
    # Application Default Credentials, the default warehouse's) never gets the source made for them.
    key = (settings.gcs_credentials_file, settings.gcs_use_ambient_credentials and not settings.gcs_credentials_file)
    if key == (None, False):
        raise ConfigurationError("no Google credentials for this warehouse (use-ambient-credentials is false)")
    with _shared_lock:
        source = _shared.get(key)
        if source is None:
            source = _shared[key] = TokenSource(server_credentials(settings), settings.storage_timeout_seconds)
    return source.token()


class GcsStorage(Bounds):
    """Objects in one bucket (and allowed others) through ``google-cloud-storage``."""

    def __init__(self, settings: StorageSettings) -> None:
        from google.api_core import exceptions
        from google.api_core.client_info import ClientInfo
        from google.api_core.client_options import ClientOptions
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY

        check_settings(settings)
        self.warehouse = settings.warehouse.rstrip("/")
        super().__init__(settings, self.warehouse)
        self.bucket = bucket_of(settings)
        self.endpoint = settings.gcs_endpoint or "https://storage.googleapis.com"
        self._exc = exceptions
        timeout = settings.storage_timeout_seconds
        self._timeout = (min(timeout, 5.0), timeout)
        self._retry = DEFAULT_RETRY.with_timeout(timeout * 2)
        self.credentials = server_credentials(settings)
        options = ClientOptions(api_endpoint=settings.gcs_endpoint) if settings.gcs_endpoint else None
        self.client = storage.Client(
            project=settings.gcs_project or ("emulator" if settings.gcs_no_auth else None),
            credentials=self.credentials,
            client_options=options,
            client_info=ClientInfo(user_agent=USER_AGENT),
        )

    def root(self) -> str:
        return self.warehouse

    def _split(self, location: str) -> tuple[str, str]:
        normal = self.locations.check(location)
        if not normal.startswith("gs://"):
            raise errors.BadRequest(f"Unsupported location for a Cloud Storage warehouse: {location}")
        return gcs_parts(normal)

    def _error(self, e: Exception, doing: str, location: str) -> errors.IcebergError:
        exc = self._exc
        if isinstance(e, exc.NotFound):
            return not_found(location)
        if isinstance(e, exc.GoogleAPICallError) and e.code is not None:
            code = int(e.code)
            if code in (401, 403):
                return errors.IcebergError(
                    f"Storage refused {doing} {location}: {code} (check the server's Google credentials and the bucket)"
                )
            if code == 400:
                return errors.BadRequest(f"Storage refused {doing} {location}: {code}")
            return errors.ServiceUnavailable(f"Storage error {doing} a file: {code}", detail=location)
        return errors.ServiceUnavailable(f"Storage unavailable {doing} a file: {self._unreachable(e)}", detail=location)

    def _unreachable(self, e: Exception) -> str:
        return f"cannot reach Cloud Storage at {self.endpoint} (CATALOG_GCS_ENDPOINT): {type(e).__name__}"

    def read(self, location: str, limit: int | None = None) -> bytes:
        cap = self._cap(limit)
        bucket, name = self._split(location)
        with self._slot():
            try:
                blob = self.client.bucket(bucket).get_blob(name, timeout=self._timeout, retry=self._retry)
                if blob is None:
                    raise not_found(location)
                size = int(blob.size or 0)
                if size > cap:
                    raise self._too_large(location, size, limit)
                # The generation whose size was read: a replaced object is not read (412, then 503).
                data = blob.download_as_bytes(
                    if_generation_match=blob.generation, timeout=self._timeout, retry=self._retry
                )
            except errors.IcebergError:
                raise
            except Exception as e:  # noqa: BLE001 - google-api-core's errors: classified, never echoed whole
                raise self._error(e, "reading", location) from e
        if len(data) > cap:
            raise self._too_large(location, len(data), limit)
        return data

    def write_new(self, location: str, data: bytes) -> None:
        bucket, name = self._split(location)
        with self._slot():
            try:
                self.client.bucket(bucket).blob(name).upload_from_string(
                    data, if_generation_match=0, timeout=self._timeout, retry=self._retry
                )
            except self._exc.PreconditionFailed as e:
                raise FileExistsError(location) from e
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "writing", location) from e

    def delete(self, location: str) -> None:
        bucket, name = self._split(location)
        with self._slot():
            try:
                self.client.bucket(bucket).blob(name).delete(timeout=self._timeout, retry=self._retry)
            except self._exc.NotFound:
                pass
            except Exception as e:  # noqa: BLE001
                raise self._error(e, "deleting", location) from e

    def prepare_table_location(self, location: str) -> None:
        """Nothing to create: object names hold their directories (the location is still checked)."""
        self._split(location)

    def remove_empty_directories(self, location: str) -> None:
        """Nothing to remove: object names hold their directories."""

    def listing(self, prefix: str) -> Iterator[StoredFile]:
        """Every object under ``prefix`` + "/", one page (1,000 names) at a time."""
        bucket, name = self._split(prefix)
        start = name.rstrip("/") + "/" if name else ""
        pages = self.client.list_blobs(
            bucket, prefix=start, page_size=1000, timeout=self._timeout, retry=self._retry
        ).pages
        while True:
            with self._slot():
                try:
                    page = list(next(pages))
                except StopIteration:
                    return
                except Exception as e:  # noqa: BLE001
                    raise self._error(e, "listing", prefix) from e
            for item in page:
                modified = item.updated or item.time_created
                stamp = int(modified.timestamp() * 1000) if modified else 0
                yield StoredFile(f"gs://{bucket}/{item.name}", stamp, int(item.size or 0))

    def ping(self) -> None:
        try:
            self.client.bucket(self.bucket).reload(timeout=self._timeout, retry=self._retry)
        except self._exc.GoogleAPICallError as e:
            raise errors.ServiceUnavailable(f"Storage unavailable: bucket {self.bucket}: {e.code}") from e
        except Exception as e:  # noqa: BLE001
            raise errors.ServiceUnavailable(f"Storage unavailable: {self._unreachable(e)}") from e
