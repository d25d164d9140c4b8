"""Storage's settings: the warehouse's location, the store it is on (S3, Azure, GCS or a local
directory) with the server's own access and what clients are given (vended credentials, remote
signing), the storage boundary, and storage calls' limits. Given to ``storage/``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from catalog.settings.group import Group


class StorageSettings(Group):
    """``CATALOG_WAREHOUSE``, ``CATALOG_S3_*``, ``CATALOG_AZURE_*``, ``CATALOG_GCS_*``, ``CATALOG_ALLOWED_LOCATIONS``,
    ``CATALOG_STORAGE_*``, ``CATALOG_MAX_METADATA_FILE_BYTES``, ``CATALOG_METADATA_CACHE_BYTES``."""

    warehouse: str = Field(
        default="./warehouse",
        description="Where new tables live: a local directory, s3://bucket/prefix, "
        "abfss://container@account.dfs.core.windows.net/prefix (Azure) or gs://bucket/prefix (Google Cloud Storage).",
    )
    metadata_cache_bytes: int = Field(
        default=512 * 2**20,
        ge=0,
        description="Memory budget of the metadata file cache, counted as 6x each file's JSON size (the "
        "parsed document costs ~3.5x, see files.py); a file over the budget is not cached; 0 disables the cache.",
    )
    # S3 / MinIO (used when the warehouse is s3://...)
    s3_endpoint: str | None = Field(default=None, description="S3 endpoint the server itself uses (AWS if unset).")
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    s3_path_style_access: bool = False
    s3_use_ambient_credentials: bool = Field(
        default=True,
        description="Without s3_access_key_id and s3_secret_access_key, run on the process's own AWS credentials "
        "(boto3's default chain: AWS_* variables, ~/.aws, the instance or pod role). On for the default warehouse; "
        "a created warehouse uses them only when its profile says s3: {use-ambient-credentials: true}.",
    )
    s3_client_endpoint: str | None = Field(
        default=None,
        description="S3 endpoint clients are told (/v1/config, loadTable config, vended credentials); defaults to "
        "s3_endpoint. Set it when clients reach the store under another name than the server (compose: the "
        "server uses http://minio:9000, a client on the host http://localhost:9000).",
    )
    s3_client_path_style_access: bool | None = Field(
        default=None, description="Path-style access clients are told; defaults to s3_path_style_access."
    )
    s3_vend_credentials: bool = Field(
        default=False,
        description="Vend short-lived credentials scoped to the table's location (STS AssumeRole with an inline "
        "session policy; read-only for readers) in loadTable when the client asks with "
        "X-Iceberg-Access-Delegation: vended-credentials, and at the credentials endpoint. Needs s3_sts_role_arn. "
        "The server's own keys are never vended.",
    )
    s3_sts_endpoint: str | None = Field(
        default=None,
        description="STS endpoint for AssumeRole; defaults to s3_endpoint (MinIO, SeaweedFS), AWS if both unset.",
    )
    s3_sts_role_arn: str | None = Field(
        default=None, description="Role the server assumes (with its own keys) to vend table-scoped credentials."
    )
    s3_sts_duration_seconds: int = Field(
        default=3600, ge=900, le=43200, description="Lifetime of vended credentials (STS DurationSeconds)."
    )
    s3_remote_signing: bool = Field(
        default=False,
        description="Offer S3 remote signing (an s3:// warehouse): loadTable tells clients that ask for it "
        "(X-Iceberg-Access-Delegation: remote-signing, or vended-credentials while s3_vend_credentials is off) to "
        "have each S3 request signed by the catalog, which signs only requests inside the table's location that "
        "the caller may make (catalog/storage/signing.py).",
    )
    s3_remote_signing_bulk_delete: bool = Field(
        default=False,
        description="Also sign DeleteObjects (bulk deletes: Java's S3FileIO deleteFiles, used by snapshot expiry "
        "and orphan removal). Only for stores that check the signed payload hash against the body (AWS S3, MinIO); "
        "SeaweedFS does not, and a signed bulk delete there could be sent with any keys.",
    )
    # Azure Blob Storage / ADLS Gen2 (used when the warehouse is abfss:// or wasbs://; catalog/storage/azure.py).
    # Named like the S3 settings, so that a per-warehouse storage profile can take the same keys.
    azure_account_key: str | None = Field(
        default=None,
        description="The storage account's shared key: the server's own access, and what signs vended SAS tokens. "
        "Required for an Azure warehouse (Microsoft Entra ID and user-delegation SAS are not supported yet).",
    )
    azure_blob_endpoint: str | None = Field(
        default=None,
        description="Blob endpoint the server itself uses, with the account for path-style endpoints (Azurite: "
        "http://127.0.0.1:10000/devstoreaccount1); defaults to https://<account>.blob.core.windows.net.",
    )
    azure_client_blob_endpoint: str | None = Field(
        default=None,
        description="Blob endpoint clients are told (with vended credentials); defaults to azure_blob_endpoint.",
    )
    azure_vend_credentials: bool = Field(
        default=False,
        description="Vend SAS tokens for the table's location (read-only rl for readers, racwdl for writers) in "
        "loadTable when the client asks with X-Iceberg-Access-Delegation: vended-credentials, and at the credentials "
        "endpoint. The account key is never vended.",
    )
    azure_sas_scope: Literal["directory", "container"] = Field(
        default="directory",
        description="directory: a directory SAS (sr=d) on the table's location, which needs an account with a "
        "hierarchical namespace (ADLS Gen2); container: a container SAS (sr=c), for accounts without one (and "
        "Azurite): each token then reaches the whole container, so give each warehouse its own container.",
    )
    azure_sas_duration_seconds: int = Field(
        default=3600, ge=300, le=86400, description="Lifetime of vended SAS tokens."
    )
    # Google Cloud Storage (used when the warehouse is gs://; catalog/storage/gcs.py)
    gcs_project: str | None = Field(default=None, description="Project of the server's client (billing, quotas).")
    gcs_credentials_file: str | None = Field(
        default=None,
        description="Service account key file of the server; unset: Application Default Credentials.",
    )
    gcs_use_ambient_credentials: bool = Field(
        default=True,
        description="Without gcs_credentials_file (and gcs_no_auth), run on the process's Application Default "
        "Credentials. On for the default warehouse; a created warehouse uses them only when its profile says "
        "gcs: {use-ambient-credentials: true}.",
    )
    gcs_endpoint: str | None = Field(
        default=None,
        description="JSON API endpoint the server itself uses (an emulator: http://127.0.0.1:9023); Google if unset.",
    )
    gcs_client_endpoint: str | None = Field(
        default=None, description="Endpoint clients are told (gcs.service.host); defaults to gcs_endpoint."
    )
    gcs_no_auth: bool = Field(
        default=False,
        description="No credentials at all (an emulator): the server's requests are anonymous and vended tokens are "
        "placeholders the emulator ignores. Never for Google Cloud Storage itself.",
    )
    gcs_vend_credentials: bool = Field(
        default=False,
        description="Vend downscoped OAuth2 tokens (Google STS token exchange with a credential access boundary on "
        "the table's prefix; objectViewer for readers, objectAdmin for writers) when the client asks with "
        "X-Iceberg-Access-Delegation: vended-credentials. The server's own credentials are never vended.",
    )
    gcs_sts_endpoint: str = Field(
        default="https://sts.googleapis.com/v1/token", description="Google STS token exchange endpoint."
    )
    # The storage boundary (see catalog/locations.py)
    allowed_locations: str = Field(
        default="",
        description="Comma-separated locations outside the warehouse where tables and views may also live "
        "(e.g. s3://other-bucket/lake,/mnt/lake). The server reads, writes and deletes nothing elsewhere.",
    )
    max_metadata_file_bytes: int = Field(
        default=64 * 1024 * 1024,
        ge=1024,
        description="Largest metadata file the server reads (a 10,000-snapshot table's is about 5 MB).",
    )
    storage_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Timeout of one storage call (S3, Azure or GCS connect/read); a stalled store is a 503.",
    )
    storage_concurrency: int = Field(
        default=16,
        ge=1,
        description="Storage calls in flight at once, fewer than the request threads (40), so that a stalled "
        "store cannot take every thread: loads of cached tables, namespace routes and health stay served.",
    )

    @property
    def storage_kind(self) -> str:
        """Which store the warehouse is on: local, s3, azure or gcs."""
        scheme = self.warehouse.partition("://")[0].lower() if "://" in self.warehouse else "file"
        if scheme in ("s3", "s3a", "s3n"):
            return "s3"
        if scheme in ("abfs", "abfss", "wasb", "wasbs"):
            return "azure"
        if scheme == "gs":
            return "gcs"
        return "local"

    @property
    def client_s3_endpoint(self) -> str | None:
        return self.s3_client_endpoint or self.s3_endpoint

    @property
    def client_path_style_access(self) -> bool:
        if self.s3_client_path_style_access is None:
            return self.s3_path_style_access
        return self.s3_client_path_style_access

    @property
    def client_azure_blob_endpoint(self) -> str | None:
        return self.azure_client_blob_endpoint or self.azure_blob_endpoint

    @property
    def client_gcs_endpoint(self) -> str | None:
        return self.gcs_client_endpoint or self.gcs_endpoint

    @property
    def allowed_location_list(self) -> list[str]:
        return [p.strip() for p in self.allowed_locations.split(",") if p.strip()]
