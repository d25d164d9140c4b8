"""How a client reaches a table's files: the storage properties every client is told
(``client_io_properties``: ``/v1/config`` and each load's ``config``), what a table load (or the
credentials route) adds to the table's ``config`` and which ``storage-credentials`` it carries. The
one place that decides it (remote signing's own properties are ``signing.properties_for``).

Vended credentials (``CATALOG_S3_VEND_CREDENTIALS``, a client asking with
``X-Iceberg-Access-Delegation: vended-credentials``) are STS ``AssumeRole`` credentials: the server
assumes ``CATALOG_S3_STS_ROLE_ARN`` with its own keys and an inline session policy that allows only
the table's location prefix, read-only for a caller holding only ``read`` on the table, read-write
for one that may write it (or create it). The session policy can only narrow the role, so the role
itself need allow no more than the warehouse. They expire after ``CATALOG_S3_STS_DURATION_SECONDS``;
the load result names the table's credentials route, where clients fetch fresh ones. The server's
own keys are never vended: when STS fails the request fails (503), nothing falls back.

STS answers are cached per (location, access) until half their lifetime has passed, so a storm of
loads of one table costs one STS call, and every credential a client gets is good for at least half
the configured duration.

Azure (SAS tokens) and Google Cloud Storage (downscoped tokens) warehouses vend through
``cloud_vending`` (``CATALOG_AZURE_VEND_CREDENTIALS``, ``CATALOG_GCS_VEND_CREDENTIALS``), handed out
by the same ``delegate``; ``create_vendor`` picks the one for the warehouse.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import quote, urlparse

from catalog import errors, metrics
from catalog.settings import ConfigurationError, StorageSettings
from catalog.storage.bounds import USER_AGENT
from catalog.storage.s3 import s3_keys

# Marker in the User-Agent of every S3/STS request the server itself makes (botocore user_agent_extra).
READ, WRITE = "read", "write"
REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"
REFRESH_ENABLED = "client.refresh-credentials-enabled"
EXPIRES_AT = "s3.session-token-expires-at-ms"
_READ_ACTIONS = ["s3:GetObject"]
_WRITE_ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]
# Characters IAM treats as wildcards or variables in a Resource or condition: a location holding one
# could not be confined by the policy (``ns/t*`` would also match ``ns/t2``).
_UNSCOPABLE = set("*?$")
MAX_CACHED = 10_000


def client_io_properties(settings: StorageSettings) -> dict[str, str]:
    """FileIO properties clients are told for reaching the warehouse storage (``/v1/config`` and
    every loadTable ``config``): the client-facing endpoint and path style, never a credential."""
    if settings.storage_kind == "azure":
        return azure_endpoint_properties(settings, settings.client_azure_blob_endpoint)
    if settings.storage_kind == "gcs":
        return {"gcs.service.host": settings.client_gcs_endpoint} if settings.client_gcs_endpoint else {}
    return io_properties(settings, settings.client_s3_endpoint, settings.client_path_style_access)


def azure_endpoint_properties(settings: StorageSettings, endpoint: str | None) -> dict[str, str]:
    """Where the warehouse's account is, for a blob endpoint that is not Azure's own: the key Java's
    ADLSFileIO reads as the endpoint (``adls.connection-string.<host>``), for both hosts."""
    from catalog.storage.azure import account_of
    from catalog.storage.cloud_vending import azure_hosts

    if not endpoint:
        return {}
    return {f"adls.connection-string.{host}": endpoint for host in azure_hosts(account_of(settings)[1])}


def io_properties(settings: StorageSettings, endpoint: str | None, path_style: bool) -> dict[str, str]:
    """The FileIO properties that reach the warehouse's storage at ``endpoint`` (no credential):
    shared by what clients are told and what the server's own FileIO uses (``purge.file_io``)."""
    props: dict[str, str] = {}
    if endpoint:
        props["s3.endpoint"] = endpoint
    if settings.warehouse.startswith(("s3://", "s3a://")):
        props["s3.region"] = settings.s3_region
        props["client.region"] = settings.s3_region
        props["s3.path-style-access"] = str(path_style).lower()
    return props


def check_settings(settings: StorageSettings) -> None:
    """Refuse to start with vending switched on but nothing to vend with, or with an S3 warehouse that
    would run on the process's own credentials without saying so (``ConfigurationError``)."""
    keys = settings.s3_access_key_id and settings.s3_secret_access_key
    if settings.storage_kind == "s3" and not keys and not settings.s3_use_ambient_credentials:
        raise ConfigurationError(
            "CATALOG_S3_ACCESS_KEY_ID and CATALOG_S3_SECRET_ACCESS_KEY (a profile's s3 access-key-id and "
            "secret-access-key) are not both set and CATALOG_S3_USE_AMBIENT_CREDENTIALS (use-ambient-credentials) "
            "is false: set the keys, or opt in to the process's own AWS credentials"
        )
    for flag, kind, scheme in (
        ("azure_vend_credentials", "azure", "an abfss:// (or wasbs://)"),
        ("gcs_vend_credentials", "gcs", "a gs://"),
    ):
        if getattr(settings, flag) and settings.storage_kind != kind:
            raise ConfigurationError(
                f"CATALOG_{flag.upper()} is true but CATALOG_WAREHOUSE is not {scheme} location "
                f"({settings.warehouse!r}): there is nothing to vend credentials for"
            )
    if not settings.s3_vend_credentials:
        return
    if not settings.warehouse.startswith(("s3://", "s3a://")):
        raise ConfigurationError(
            f"CATALOG_S3_VEND_CREDENTIALS is true but CATALOG_WAREHOUSE is not an s3:// location "
            f"({settings.warehouse!r}): there is nothing to vend credentials for"
        )
    if not settings.s3_sts_role_arn:
        raise ConfigurationError(
            "CATALOG_S3_VEND_CREDENTIALS is true but CATALOG_S3_STS_ROLE_ARN is not set: vended credentials are "
            "STS AssumeRole credentials scoped to one table (the server's own keys are never vended); set the role "
            "(and CATALOG_S3_STS_ENDPOINT unless STS is at CATALOG_S3_ENDPOINT or AWS), or switch vending off"
        )


def session_policy(location: str, access: str) -> dict[str, Any]:
    """The inline session policy confining credentials to ``location`` (``s3://bucket/key``):
    objects under ``key/`` (read, or read-write) and listing only below it."""
    parsed = urlparse(location)
    bucket, key = parsed.netloc, parsed.path.strip("/")
    if parsed.scheme not in ("s3", "s3a") or not bucket or not key:
        raise errors.Forbidden(f"Forbidden: cannot vend storage credentials for location {location!r}")
    if _UNSCOPABLE & set(location):
        raise errors.Forbidden(
            f"Forbidden: cannot vend storage credentials scoped to {location!r}: it contains *, ? or $, which a "
            "storage policy would read as a wildcard"
        )
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": _WRITE_ACTIONS if access == WRITE else _READ_ACTIONS,
                "Resource": [f"arn:aws:s3:::{bucket}/{key}/*"],
            },
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{key}/", f"{key}/*"]}},
            },
        ],
    }


def create_vendor(settings: StorageSettings) -> Vends | None:
    """The vendor of the warehouse's kind when its vending is switched on, else None."""
    from catalog.storage import cloud_vending

    kind = settings.storage_kind
    if kind == "s3" and settings.s3_vend_credentials:
        return Vendor(settings)
    if kind == "azure" and settings.azure_vend_credentials:
        return cloud_vending.AzureVendor(settings)
    if kind == "gcs" and settings.gcs_vend_credentials:
        return cloud_vending.GcsVendor(settings)
    return None


def wants_vended(header: str | None) -> bool:
    """Whether ``X-Iceberg-Access-Delegation`` (a comma-separated list) asks for vended credentials."""
    return "vended-credentials" in {part.strip().lower() for part in (header or "").split(",")}


def credentials_path(prefix: str, namespace: tuple[str, ...], name: str) -> str:
    """The table's credentials route, relative to the catalog URI (Iceberg's clients resolve a
    relative ``client.refresh-credentials-endpoint`` against their ``uri``)."""
    ns = "%1F".join(quote(level, safe="") for level in namespace)
    root = f"/v1/{quote(prefix, safe='')}/" if prefix else "/v1/"
    return f"{root}namespaces/{ns}/tables/{quote(name, safe='')}/credentials"


class Vends(Protocol):
    """What hands out credentials for a location: ``Vendor`` (S3), ``cloud_vending``'s Azure and GCS ones."""

    def credentials(self, location: str, access: str) -> dict[str, str]: ...


@dataclass
class Delegation:
    """What a load result adds: ``config`` entries and the ``storage-credentials`` list."""

    config: dict[str, str] = field(default_factory=dict)
    credentials: list[dict[str, Any]] = field(default_factory=list)


class Vendor:
    """Table-scoped STS credentials, cached per (location, access) until half their lifetime."""

    def __init__(self, settings: StorageSettings) -> None:
        import boto3
        from botocore.config import Config

        timeout = settings.storage_timeout_seconds
        self.sts = boto3.client(
            "sts",
            endpoint_url=settings.s3_sts_endpoint or settings.s3_endpoint,
            region_name=settings.s3_region,
            **s3_keys(settings),
            config=Config(
                user_agent_extra=USER_AGENT,
                retries={"max_attempts": 2, "mode": "standard"},
                connect_timeout=min(timeout, 5.0),
                read_timeout=timeout,
            ),
        )
        self.role_arn = settings.s3_sts_role_arn
        self.duration = settings.s3_sts_duration_seconds
        self.client_props: dict[str, str] = {"client.region": settings.s3_region}
        if settings.client_s3_endpoint:
            self.client_props["s3.endpoint"] = settings.client_s3_endpoint
        self.client_props["s3.path-style-access"] = str(settings.client_path_style_access).lower()
        self._cache: OrderedDict[tuple[str, str], tuple[float, dict[str, str]]] = OrderedDict()
        self._lock = threading.Lock()
        self.sts_calls = 0

    def credentials(self, location: str, access: str) -> dict[str, str]:
        """FileIO properties with credentials for ``location``: from the cache while at least half
        their lifetime is left, else from a new AssumeRole call (``ServiceUnavailable`` if it fails)."""
        key, now = (location, access), time.time()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                self._cache.move_to_end(key)
                return hit[1]
        policy = json.dumps(session_policy(location, access), separators=(",", ":"))
        session = f"iceberg-catalog-{access}-{hashlib.blake2b(location.encode(), digest_size=6).hexdigest()}"
        try:
            answer = self.sts.assume_role(
                RoleArn=self.role_arn, RoleSessionName=session, Policy=policy, DurationSeconds=self.duration
            )
        except Exception as e:  # noqa: BLE001 - botocore's errors: named by code, never echoed whole
            code = (getattr(e, "response", None) or {}).get("Error", {}).get("Code") or type(e).__name__
            raise errors.ServiceUnavailable(
                f"Cannot vend storage credentials: STS AssumeRole failed ({code}); check CATALOG_S3_STS_ENDPOINT, "
                "CATALOG_S3_STS_ROLE_ARN and the role's policies"
            ) from e
        self.sts_calls += 1
        issued = answer["Credentials"]
        expires = issued["Expiration"].timestamp()
        config = {
            **self.client_props,
            "s3.access-key-id": issued["AccessKeyId"],
            "s3.secret-access-key": issued["SecretAccessKey"],
            "s3.session-token": issued["SessionToken"],
            EXPIRES_AT: str(int(expires * 1000)),
        }
        with self._lock:
            self._cache[key] = (now + (expires - now) / 2, config)
            self._cache.move_to_end(key)
            while len(self._cache) > MAX_CACHED:
                self._cache.popitem(last=False)
        return config


def delegate(
    vendor: Vends | None, header: str | None, access: str, location: str, refresh_path: str | None
) -> Delegation | None:
    """What a load result for ``location`` carries beyond the static storage config: nothing unless
    vending is on and the client asked for vended credentials; then credentials with ``access``
    (read | write), in ``storage-credentials`` and in ``config`` (clients that resolve credentials
    by the metadata location, like pyiceberg for a staged create, find none in the list), and the
    refresh route. Blocking (STS): call it off the event loop."""
    if vendor is None or not wants_vended(header):
        return None
    config = vendor.credentials(location, access)
    metrics.VENDED_CREDENTIALS.labels(access).inc()
    extra = dict(config)
    if refresh_path:
        extra[REFRESH_ENDPOINT] = refresh_path
        extra[REFRESH_ENABLED] = "true"
    return Delegation(extra, [{"prefix": location, "config": config}])
