"""Vended credentials for Azure and Google Cloud Storage tables: what they allow, how they are made,
and the FileIO properties that carry them (``vending.delegate`` hands them out, as for S3).

**Azure**: a SAS signed with the account key (``CATALOG_AZURE_ACCOUNT_KEY``; never vended itself),
read-only (``rl``) for a caller holding only ``read``, read-write (``racwdl``) for one that may write,
valid for ``CATALOG_AZURE_SAS_DURATION_SECONDS``. Its scope (``CATALOG_AZURE_SAS_SCOPE``):

- ``directory``: a directory SAS (``sr=d``) on the table's location, the narrowest Azure has. It
  needs a storage account with a hierarchical namespace (ADLS Gen2): on a flat account Azure refuses
  it. Built here and unit-tested; not verified against Azure (Azurite does not emulate it).
- ``container``: a container SAS (``sr=c``), for flat accounts and Azurite. There is nothing
  narrower that lets a client create new blobs (a blob SAS names one existing blob), so such a token
  reaches every blob of the container: one container per warehouse keeps it to the warehouse.

Clients find it the way Iceberg's ADLSFileIO and pyiceberg read it: ``adls.sas-token.<account host>``
(both the ``dfs`` and ``blob`` host), its expiry ``adls.sas-token-expires-at-ms.<host>``, and, when
clients are told a blob endpoint (Azurite, a private endpoint), ``adls.connection-string.<host>``
(Java reads it as the endpoint) and ``adls.connection-string`` (pyiceberg/adlfs: ``BlobEndpoint=...;
SharedAccessSignature=...``, no key).

**Google Cloud Storage**: a downscoped token from Google's STS token exchange
(``CATALOG_GCS_STS_ENDPOINT``): the server's own access token, narrowed by a credential access
boundary to objects under the table's prefix (``roles/storage.objectViewer`` for readers,
``roles/storage.objectAdmin`` for writers) and to listings of that prefix. It lives as long as the
source token (at most an hour). In ``gcs.oauth2.token`` and ``gcs.oauth2.token-expires-at``. The
request is built by pure functions here (unit-tested); the exchange is **not verified against
Google's service**, which cannot be reached from the test machines. With ``CATALOG_GCS_NO_AUTH`` (an
emulator) the token is a placeholder the emulator ignores, and only the endpoint matters.

Both are cached per (location, access) until half their lifetime has passed, like STS answers.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from catalog import errors
from catalog.locations import azure_parts, gcs_parts, normalise
from catalog.settings import StorageSettings
from catalog.storage.gcs import EMULATOR_TOKEN

READ, WRITE = "read", "write"
AZURE_PERMISSIONS = {READ: "rl", WRITE: "racwdl"}
GCS_ROLES = {READ: "inRole:roles/storage.objectViewer", WRITE: "inRole:roles/storage.objectAdmin"}
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
MAX_CACHED = 10_000


def _forbidden(location: str, why: str) -> errors.Forbidden:
    return errors.Forbidden(f"Forbidden: cannot vend storage credentials for location {location!r}: {why}")


# -- Azure ----------------------------------------------------------------------------------------


def azure_hosts(host: str) -> list[str]:
    """The account's ``dfs`` and ``blob`` hosts (clients key the token by the host of the location)."""
    account, _, suffix = host.partition(".")
    rest = suffix.partition(".")[2]
    return [f"{account}.dfs.{rest}", f"{account}.blob.{rest}"]


def azure_scope(location: str, account: str) -> tuple[str, str]:
    """(container, directory) a SAS for ``location`` is scoped to; ``Forbidden`` for a location of
    another account, the container root, or one a SAS cannot name."""
    normal = normalise(location)
    if not normal.startswith("abfss://"):
        raise _forbidden(location, "not an Azure location")
    container, owner, _, path = azure_parts(normal)
    if owner != account:
        raise _forbidden(location, "another storage account than the warehouse's")
    if not path:
        raise _forbidden(location, "the container itself")
    return container, path


def azure_sas(
    scope: str, account: str, key: str, container: str, directory: str, access: str, start: datetime, expiry: datetime
) -> str:
    """A SAS token (query string, no ``?``) signed with the account key: ``sr=d`` on ``directory``
    for ``scope == "directory"``, ``sr=c`` on the container otherwise."""
    permission = AZURE_PERMISSIONS[access]
    if scope == "directory":
        from azure.storage.filedatalake import generate_directory_sas

        return generate_directory_sas(
            account, container, directory, key, permission=permission, expiry=expiry, start=start
        )
    from azure.storage.blob import generate_container_sas

    return generate_container_sas(
        account, container, account_key=key, permission=permission, expiry=expiry, start=start
    )


def adls_properties(host: str, sas: str, expires_ms: int, endpoint: str | None) -> dict[str, str]:
    """The FileIO properties carrying a SAS for the account at ``host`` (see the module's docstring)."""
    props: dict[str, str] = {}
    for name in azure_hosts(host):
        props[f"adls.sas-token.{name}"] = sas
        props[f"adls.sas-token-expires-at-ms.{name}"] = str(expires_ms)
        if endpoint:
            props[f"adls.connection-string.{name}"] = endpoint
    if endpoint:
        props["adls.connection-string"] = f"BlobEndpoint={endpoint};SharedAccessSignature={sas}"
    return props


# -- Google Cloud Storage -------------------------------------------------------------------------

# Characters that would end or escape the CEL string literal the boundary's condition is written in.
_UNQUOTABLE = set("'\"\\")


def gcs_scope(location: str) -> tuple[str, str]:
    """(bucket, object prefix) of a table location; ``Forbidden`` for the bucket root or a prefix a
    condition cannot quote."""
    normal = normalise(location)
    if not normal.startswith("gs://"):
        raise _forbidden(location, "not a Cloud Storage location")
    bucket, prefix = gcs_parts(normal)
    if not prefix:
        raise _forbidden(location, "the bucket itself")
    if _UNQUOTABLE & set(prefix):
        raise _forbidden(location, "it contains a quote or a backslash, which a boundary condition cannot hold")
    return bucket, prefix


def access_boundary(bucket: str, prefix: str, access: str) -> dict[str, Any]:
    """The credential access boundary: the role's permissions on the bucket, only for objects under
    ``prefix/`` and for listings of prefixes under it (Google's documented condition attributes)."""
    objects = f"projects/_/buckets/{bucket}/objects/{prefix}/"
    expression = (
        f"resource.name.startsWith('{objects}') || "
        f"api.getAttribute('storage.googleapis.com/objectListPrefix', '').startsWith('{prefix}/')"
    )
    return {
        "accessBoundary": {
            "accessBoundaryRules": [
                {
                    "availableResource": f"//storage.googleapis.com/projects/_/buckets/{bucket}",
                    "availablePermissions": [GCS_ROLES[access]],
                    "availabilityCondition": {
                        "title": f"iceberg-catalog {access} {prefix}"[:100],
                        "expression": expression,
                    },
                }
            ]
        }
    }


def token_exchange_form(source_token: str, boundary: dict[str, Any]) -> dict[str, str]:
    """The form body of the STS token exchange that downscopes ``source_token`` (POST, form-encoded)."""
    return {
        "grant_type": TOKEN_EXCHANGE,
        "subject_token_type": ACCESS_TOKEN_TYPE,
        "requested_token_type": ACCESS_TOKEN_TYPE,
        "subject_token": source_token,
        "options": json.dumps(boundary, separators=(",", ":")),
    }


def gcs_properties(token: str, expires_ms: int, endpoint: str | None, project: str | None) -> dict[str, str]:
    props = {"gcs.oauth2.token": token, "gcs.oauth2.token-expires-at": str(expires_ms)}
    if endpoint:
        props["gcs.service.host"] = endpoint
    if project:
        props["gcs.project-id"] = project
    return props


# -- the vendors -----------------------------------------------------------------------------------


class _Cached:
    """Credentials per (location, access), kept until half their lifetime has passed."""

    def __init__(self) -> None:
        self._cache: OrderedDict[tuple[str, str], tuple[float, dict[str, str]]] = OrderedDict()
        self._lock = threading.Lock()
        self.issued = 0

    def get(self, location: str, access: str, make: Callable[[], tuple[float, dict[str, str]]]) -> dict[str, str]:
        key, now = (location, access), time.time()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                self._cache.move_to_end(key)
                return hit[1]
        expires, config = make()
        self.issued += 1
        with self._lock:
            self._cache[key] = (now + (expires - now) / 2, config)
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return config


class AzureVendor:
    """Table-scoped SAS tokens (``credentials(location, access)``, as ``vending.Vendor``)."""

    def __init__(self, settings: StorageSettings) -> None:
        from catalog.storage.azure import account_of

        self.account, self.host, _ = account_of(settings)
        self.key = settings.azure_account_key or ""
        self.scope = settings.azure_sas_scope
        self.duration = settings.azure_sas_duration_seconds
        self.endpoint = settings.client_azure_blob_endpoint
        self._cached = _Cached()

    def credentials(self, location: str, access: str) -> dict[str, str]:
        container, directory = azure_scope(location, self.account)

        def make() -> tuple[float, dict[str, str]]:
            now = datetime.now(UTC).replace(microsecond=0)
            expiry = now + timedelta(seconds=self.duration)
            # Started a few minutes back: a client whose clock is behind the service's can use it at once.
            sas = azure_sas(
                self.scope, self.account, self.key, container, directory, access, now - timedelta(minutes=5), expiry
            )
            expires_ms = int(expiry.timestamp() * 1000)
            return expiry.timestamp(), adls_properties(self.host, sas, expires_ms, self.endpoint)

        return self._cached.get(location, access, make)


class GcsVendor:
    """Downscoped tokens (``credentials(location, access)``, as ``vending.Vendor``)."""

    def __init__(self, settings: StorageSettings) -> None:
        self.no_auth = settings.gcs_no_auth
        self.endpoint = settings.client_gcs_endpoint
        self.project = settings.gcs_project
        self.sts_endpoint = settings.gcs_sts_endpoint
        self.timeout = settings.storage_timeout_seconds
        self.duration = 3600
        self._source: Any = None
        if not self.no_auth:
            from catalog.storage.gcs import TokenSource, server_credentials

            self._source = TokenSource(server_credentials(settings), self.timeout)
        self._cached = _Cached()

    def credentials(self, location: str, access: str) -> dict[str, str]:
        bucket, prefix = gcs_scope(location)

        def make() -> tuple[float, dict[str, str]]:
            if self.no_auth:
                expires = time.time() + self.duration
                return expires, gcs_properties(EMULATOR_TOKEN, int(expires * 1000), self.endpoint, self.project)
            token, expires = self._exchange(access_boundary(bucket, prefix, access))
            return expires, gcs_properties(token, int(expires * 1000), self.endpoint, self.project)

        return self._cached.get(location, access, make)

    def _exchange(self, boundary: dict[str, Any]) -> tuple[str, float]:
        """POST the token exchange; (downscoped token, expiry). Not verified against Google (see above)."""
        import requests

        source, source_expiry = self._source.token()
        try:
            response = requests.post(
                self.sts_endpoint,
                data=token_exchange_form(source, boundary),
                timeout=(min(self.timeout, 5.0), self.timeout),
            )
        except requests.RequestException as e:
            raise errors.ServiceUnavailable(
                f"Cannot vend storage credentials: Google STS cannot be reached ({type(e).__name__}; "
                "CATALOG_GCS_STS_ENDPOINT)"
            ) from e
        if response.status_code != 200:
            raise errors.ServiceUnavailable(
                f"Cannot vend storage credentials: Google STS answered {response.status_code}; check the server's "
                "service account and CATALOG_GCS_STS_ENDPOINT"
            )
        answer = response.json()
        expires_in = answer.get("expires_in")
        expires = time.time() + float(expires_in) if expires_in else source_expiry
        return str(answer["access_token"]), expires
