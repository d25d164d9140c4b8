"""Configuration, read from environment variables prefixed ``CATALOG_`` (and CLI flags).

There is no module-level instance: ``create_app(settings)`` receives one, so tests and the CLI build
their own.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# What CATALOG_DATABASE_URL accepts, said in every refusal of it.
DATABASE_URL_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, or postgresql://user:password@host:5432/dbname "
    "(postgres:// and postgresql+psycopg:// are the same)"
)
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


# CATALOG_* variables that something other than the server's settings reads, so that they are not
# taken for typos: the command line's browse commands (catalog/cli/browse.py) and the test suite.
OTHER_VARIABLES = frozenset({"CATALOG_URI", "CATALOG_TOKEN", "CATALOG_CREDENTIAL", "CATALOG_TEST_BACKENDS"})


class ConfigurationError(Exception):
    """A setting combination the server refuses to start with; the message names the variable."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CATALOG_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///catalog.db",
        description="SQLAlchemy URL: sqlite:///path.db (embedded) or postgresql+psycopg://user:pw@host/db.",
    )
    warehouse: str = Field(
        default="./warehouse",
        description="Where new tables live: a local directory, s3://bucket/prefix, "
        "abfss://container@account.dfs.core.windows.net/prefix (Azure) or gs://bucket/prefix (Google Cloud Storage).",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8181, ge=1, le=65535)
    workers: int = Field(default=1, ge=1, description="Server processes (uvicorn workers).")
    prefix: str = Field(
        default="",
        description="Advertised URL prefix (overrides.prefix) of the default warehouse, also its name among the "
        "warehouses (default when empty). Requests are accepted with or without it.",
    )
    warehouse_aliases: str = Field(
        default="warehouse",
        description="Comma-separated names that also select the default warehouse (in /v1/config?warehouse= and as "
        "a route prefix), for clients from before warehouses that send a fixed name (DuckDB's ATTACH 'warehouse').",
    )
    warehouse_roots: str = Field(
        default="",
        description="Comma-separated roots under which created warehouses (management API, CLI, "
        "CATALOG_WAREHOUSES_FILE) may live, e.g. /data/lakes,s3://lakes. A local directory is accepted only "
        "under a local root listed here; object-store locations (s3://, abfss://, gs://) anywhere, unless "
        "object-store roots are listed, then only under one of them. Never the database's directory, the "
        "working directory or a system directory (catalog/warehouse_profiles.py, confined).",
    )
    warehouses_file: str | None = Field(
        default=None,
        description="A YAML file of warehouses besides the default one ({warehouses: [{name, location, s3: {...}}]}), "
        "created or changed at start to match it (README, Warehouses).",
    )
    database_schema: str | None = Field(
        default=None,
        description="PostgreSQL schema (search_path) holding the catalog's tables; the server sets it per warehouse.",
        pattern=r"^[a-z_][a-z0-9_]{0,62}$",
    )
    log_level: str = Field(default="info", description="debug, info, warning, error or critical.")
    log_format: str = Field(
        default="auto",
        pattern="^(auto|json|text)$",
        description="json: one object per line; text: lines for people; auto: text when stderr is a terminal, "
        "json otherwise.",
    )

    # Limits: what one client can hold (README "Limits" says what happens when each is hit)
    max_request_bytes: int = Field(
        default=10_000_000,
        ge=1,
        description="Largest request body; a larger one (declared or received) is refused 413 before it is "
        "buffered, Idempotency-Key requests included.",
    )
    metadata_cache_bytes: int = Field(
        default=512 * 2**20,
        ge=0,
        description="Memory budget of the metadata file cache, counted as 6x each file's JSON size (the "
        "parsed document costs ~3.5x, see files.py); a file over the budget is not cached; 0 disables the cache.",
    )
    scan_planning_mode: Literal["client", "server"] = Field(
        default="client",
        description="server: tell clients to plan scans on the server (planTableScan): pyiceberg through "
        "/v1/config (see scan_planning_config), Java through each loadTable's config; client: say nothing (a "
        "table's catalog.scan-planning-mode property still does). The planning routes are served either way.",
    )
    scan_planning_config: Literal["defaults", "overrides"] = Field(
        default="defaults",
        description="Where /v1/config puts scan-planning-mode=server: defaults (a client may set its own mode) "
        "or overrides (every pyiceberg scan goes to the server, whatever the client or the table says).",
    )
    planning_manifests_per_task: int = Field(
        default=64,
        ge=1,
        description="Scan planning: a plan whose matching data manifests are more than this is answered with "
        "plan tasks (sealed tokens, each naming this many manifests) that the client redeems one by one.",
    )
    planning_cache_manifests: int = Field(
        default=4096,
        ge=0,
        description="Scan planning: decoded manifests and manifest lists kept across plans (least recently "
        "used out; they are immutable, so never stale); 0 disables the cache.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description="Open HTTP connections per server process; more are answered 503 and closed at once "
        "(lowered at start if the open-file limit cannot hold it).",
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Time a connection has to send a complete request head (from connecting, or from the "
        "first byte of a next request); the connection is closed after it.",
    )
    body_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        description="Time a request has to send its whole body once its head is complete; closed after it.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest request head (request line and headers); 431 beyond."
    )
    idle_timeout_seconds: int = Field(
        default=75,
        ge=1,
        description="Keep-alive: an idle connection between requests is closed after this. Longer than "
        "clients' pooled-connection idle time, so the server is not the side that closes a reused connection.",
    )

    # Authentication (built-in OAuth2 client credentials and/or an OIDC identity provider; off unless auth_required)
    auth_required: bool = Field(
        default=False,
        description="Require a valid bearer token on every /v1 and /management route (not /v1/oauth/tokens, "
        "/health/*, /metrics).",
    )
    oauth_clients: str | None = Field(
        default=None, description="Built-in clients of /v1/oauth/tokens (client credentials): id:secret,id2:secret2"
    )
    token_secret: str | None = Field(
        default=None,
        description="Key signing built-in tokens (JWT HS256), at least 32 bytes; the same value on every worker "
        "and replica. Required with oauth_clients unless one SQLite process (then random, lost at restart).",
    )
    token_ttl_seconds: int = Field(default=3600, ge=60, description="Lifetime of a built-in token.")
    secrets_key: str | None = Field(
        default=None,
        description="Key(s) encrypting the storage secrets of created warehouses in the database (Fernet keys, "
        "comma-separated: the first encrypts, each decrypts; every server re-encrypts what it finds with the first "
        "at start). Unset: those secrets are stored as given.",
    )
    oidc_issuer: str | None = Field(
        default=None,
        description="Issuer URL of an OIDC identity provider whose tokens are accepted (their iss must match); "
        "its keys are found by discovery at <issuer>/.well-known/openid-configuration.",
    )
    oidc_audience: str | None = Field(default=None, description="Required aud of OIDC tokens (not checked if unset).")
    oidc_jwks_url: str | None = Field(
        default=None,
        description="JWKS URL of the identity provider's signing keys (skips discovery; alone, without "
        "oidc_issuer, tokens of any issuer signed by these keys are accepted).",
    )
    oidc_principal_claim: str = Field(
        default="sub", description="OIDC claim naming the principal (e.g. sub, preferred_username, email, azp)."
    )
    oidc_groups_claim: str = Field(
        default="groups",
        description="OIDC claim carrying the caller's groups/roles, a string or a list of strings; a dotted path "
        "reaches into objects (Keycloak: realm_access.roles).",
    )
    oidc_leeway_seconds: int = Field(
        default=60, ge=0, description="Clock skew tolerated on OIDC tokens' exp, nbf and iat."
    )
    trusted_proxies: str = Field(
        default="",
        description="Comma-separated IP addresses or CIDR networks of reverse proxies whose X-Forwarded-For "
        "names the client's address (the token endpoint slows failing sources down by address); from any other "
        "peer the header is ignored. Empty: none trusted.",
    )
    metrics_token: str | None = Field(
        default=None, description="If set, /metrics needs Authorization: Bearer <metrics_token> (open otherwise)."
    )

    # Authorization (grants; see catalog/auth/policy.py). Only with auth_required: without it, anyone may do anything.
    authorization: Literal["grants", "none"] = Field(
        default="grants",
        description="grants: every request is checked against the grants (management API, CLI, bootstrap file); "
        "none: any valid token may do anything.",
    )
    authz_bootstrap: str | None = Field(
        default=None,
        description="YAML file of grants applied at start-up; grants that came from it and left it are removed, "
        "grants made through the API or CLI stay.",
    )
    authz_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        le=300,
        description="How long each process reuses its copy of the grants: a grant or revoke takes effect in every "
        "worker and replica within this time.",
    )

    # Database
    # Pool >= the 40 worker threads that run blocking calls: a smaller pool made overflow connections
    # open and close per request (measured: 1.14 -> 0.79 ms CPU per loadTable at 32 clients).
    db_pool_size: int = Field(default=40, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    db_pool_timeout: float = Field(default=10.0, gt=0)
    auto_migrate: bool = Field(
        default=True,
        description="Migrate the schema to head on start (always true for SQLite; set false for PostgreSQL "
        "deployments that run `iceberg-catalog migrate` as a separate step).",
    )

    # Commit loop
    commit_max_attempts: int = Field(default=10, ge=1, description="Server-side rebase attempts per commit.")
    commit_backoff_ms: float = Field(default=5.0, ge=0, description="Base of the jittered exponential backoff.")
    append_rebase: bool = Field(
        default=False,
        description="Rebase pure appends (add-snapshot operation=append + set-snapshot-ref) whose branch moved "
        "on the server instead of answering 409, as the client's own retry would; a table's "
        "catalog.append-rebase.enabled property (true|false) overrides this default.",
    )
    group_commit_max_commits: int = Field(
        default=32,
        ge=1,
        description="Group commit: appends to one table with append rebase on that queued while the previous "
        "commit landed go together in one metadata file and one compare-and-swap, at most this many; 1 turns "
        "grouping off. A lone commit never waits.",
    )
    append_rebase_max_attempts: int = Field(
        default=100,
        ge=1,
        description="Compare-and-swap attempts of a group of rebased appends before 409: each lost attempt means "
        "another writer's commit landed, and an append can always be rebased again, so the bound is higher than "
        "commit_max_attempts (replicas racing for one hot table otherwise starve the slower one).",
    )
    group_commit_max_bytes: int = Field(
        default=4 * 2**20, ge=1, description="Group commit: the most JSON (the members' updates) in one group."
    )
    inline_commits: bool = Field(
        default=True,
        description="On SQLite and a local warehouse, run a commit of one table or view that needs no wait on "
        "the event loop instead of a worker thread (about half the CPU per commit). false: every commit on a "
        "thread, which under heavy commit traffic leaves loads faster and commits slower.",
    )
    idempotency_key_lifetime_seconds: int = Field(
        default=1800,
        ge=0,
        description="How long the response to a request with an Idempotency-Key is kept for the client's "
        "retries (advertised in /v1/config); 0 switches Idempotency-Key support off.",
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

    @property
    def client_s3_endpoint(self) -> str | None:
        return self.s3_client_endpoint or self.s3_endpoint

    @property
    def client_path_style_access(self) -> bool:
        if self.s3_client_path_style_access is None:
            return self.s3_path_style_access
        return self.s3_client_path_style_access

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

    @property
    def client_azure_blob_endpoint(self) -> str | None:
        return self.azure_client_blob_endpoint or self.azure_blob_endpoint

    @property
    def client_gcs_endpoint(self) -> str | None:
        return self.gcs_client_endpoint or self.gcs_endpoint

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
    # -- table maintenance (catalog/maintenance/) ----------------------------------------------------------
    maintenance_enabled: bool = Field(
        default=True,
        description="The catalog expires snapshots and removes orphan files of its tables by itself. A table's or "
        "namespace's catalog.maintenance.enabled property overrides it.",
    )
    maintenance_workers: int = Field(
        default=1, ge=0, le=16, description="Maintenance threads in each server process (0: this process runs none)."
    )
    maintenance_interval_seconds: float = Field(
        default=60.0,
        gt=0,
        description="How often the scheduler (one per deployment) looks for tables due for maintenance.",
    )
    maintenance_expire_every_minutes: float = Field(
        default=60.0,
        ge=0,
        description="Snapshot expiry runs on a table whose pointer moved, at most this often.",
    )
    maintenance_expire_every_commits: int = Field(
        default=1000,
        ge=0,
        description="Snapshot expiry also runs on a table that took this many commits since its last run, "
        "however recent that was (0: only the time above counts).",
    )
    maintenance_manifests_every_minutes: float = Field(
        default=10.0,
        ge=0,
        description="Manifest rewrite is considered on a table whose pointer moved, at most this often; it runs "
        "when the main branch has more manifests than the table's commit.manifest.min-count-to-merge (100).",
    )
    maintenance_compaction_enabled: bool = Field(
        default=True,
        description="Whether the scheduler compacts tables' data files (a table's catalog.compaction.enabled "
        "property overrides it; an operator's maintenance run compacts either way).",
    )
    maintenance_compaction_every_minutes: float = Field(
        default=30.0,
        ge=0,
        description="Data compaction (rewrite-data-files) is considered on a table whose pointer moved, at most this "
        "often; it runs when the main branch has at least 5 data files averaging below 75% of the table's "
        "write.target-file-size-bytes.",
    )
    maintenance_compaction_quiet_seconds: float = Field(
        default=300.0,
        ge=0,
        description="Compaction leaves a table alone while a writer's row-level commit (overwrite, delete, or a "
        "replace it made) landed on main within this time, and rewrites only files added before it: a Spark "
        "MERGE/UPDATE/DELETE validates against the table as it is when it commits and fails if a file it changes "
        "was compacted while it ran. A table's catalog.compaction.quiet-seconds property overrides it.",
    )
    maintenance_compaction_spark: str = Field(
        default="",
        description="A Spark for compactions larger than maintenance_compaction_max_bytes: a master URL (local[2], "
        "spark://host:7077) or Spark Connect (sc://host:15002). Empty: larger work is done in process over several "
        "runs. Needs pyspark installed next to the server and Iceberg's Spark runtime on that Spark.",
    )
    maintenance_compaction_spark_catalog_uri: str = Field(
        default="",
        description="This catalog's REST URL as the compaction Spark reaches it (default http://127.0.0.1:<port>).",
    )
    maintenance_compaction_spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description='More Spark settings for the compaction session, as JSON ({"spark.jars": "...", ...}): jars, '
        "credentials (spark.sql.catalog.catalog_maintenance.credential when auth is on), memory.",
    )
    maintenance_compaction_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="Bytes of data and delete files one in-process compaction reads (into memory, one partition's "
        "group at a time); the next run takes the rest.",
    )
    maintenance_orphans_every_hours: float = Field(
        default=24.0, ge=0, description="Orphan removal runs on each table this often."
    )
    maintenance_orphan_age_hours: float = Field(
        default=72.0,
        gt=0,
        description="Files no metadata references are removed only once they are older than this (in-flight "
        "writers and staged creates write files before they commit).",
    )
    metadata_delete_after_commit: bool = Field(
        default=True,
        description="After a commit lands, delete the metadata files it pushed out of the table's metadata log "
        "(beyond write.metadata.previous-versions-max), in the background: the catalog's default for tables that do "
        "not set write.metadata.delete-after-commit.enabled (Iceberg's own default is false; a table's false wins). "
        "Without it a table committed to often holds many times its live metadata until snapshot expiry sweeps.",
    )
    maintenance_metadata_file_age_seconds: float = Field(
        default=600.0,
        gt=0,
        description="Snapshot expiry deletes the table's metadata files that are neither current nor in its metadata "
        "log once they are older than this: a commit writes its new metadata file before it swaps the pointer, so a "
        "younger file may be a commit in flight (one request: seconds). Also covers the storage's clock skew.",
    )
    maintenance_writer_grace_seconds: float = Field(
        default=3600.0,
        ge=0,
        description="Snapshot expiry never removes a snapshot that was the head of a branch within this time, "
        "whatever the table's policy: a writer that started from it may still be committing (its validation "
        "needs it).",
    )
    maintenance_max_snapshot_age_ms: int = Field(
        default=5 * 24 * 3600 * 1000,
        ge=0,
        description="history.expire.max-snapshot-age-ms for tables and namespaces that do not set it.",
    )
    maintenance_min_snapshots_to_keep: int = Field(
        default=1,
        ge=1,
        description="history.expire.min-snapshots-to-keep for tables and namespaces that do not set it.",
    )
    maintenance_lease_seconds: float = Field(
        default=60.0, ge=5, description="A running task's lease: a worker killed for longer is replaced."
    )
    maintenance_max_attempts: int = Field(
        default=5, ge=1, description="Attempts of a maintenance task before it is failed (backoff in between)."
    )
    maintenance_retry_seconds: float = Field(
        default=30.0,
        ge=0,
        description="The wait after a task's first failed attempt, doubled after each (at most 1 h).",
    )

    drop_retention: float = Field(
        default=7 * 24 * 3600.0,
        ge=0,
        description="Seconds a dropped table or view is kept, restorable with undrop, its location still "
        "owned (a number of seconds, or with a unit: 30m, 12h, 7d); then it is purged (if its drop asked "
        "for it) or released, its files kept and its location held. 0: at once (a requested purge is "
        "still queued, never done in the request).",
    )

    # -- the web console (catalog/console/) -----------------------------------------------------------
    console_enabled: bool = Field(
        default=True,
        description="Serve the web console at /ui: server-rendered pages over the same authorization as "
        "the REST API (docs/console.md); false: no /ui routes.",
    )
    console_oidc_client_id: str | None = Field(
        default=None,
        description="The OIDC client the console signs people in with (authorization code + PKCE at "
        "oidc_issuer, redirect URI <catalog URL>/ui/login/callback); unset: built-in clients only.",
    )
    console_oidc_client_secret: str | None = Field(
        default=None, description="That client's secret, for a provider that requires one (else a public client)."
    )
    console_oidc_scopes: str = Field(default="openid", description="The scopes the console asks the provider for.")

    # -- change events (catalog/events/, database/outbox.py, delivery/) --------------------------------
    events_enabled: bool = Field(
        default=True,
        description="Every change writes an event row in its own transaction (the outbox), served by "
        "POST /v1/events and pushed to the configured sinks (docs/events.md).",
    )
    events_retention: float = Field(
        default=7 * 24 * 3600.0,
        gt=0,
        description="Events older than this are pruned (seconds, or with a unit: 30m, 12h, 7d).",
    )
    events_max_rows: int = Field(
        default=1_000_000, ge=1000, description="At most this many events are kept: the oldest go first."
    )
    events_webhooks: str | None = Field(
        default=None,
        description="Webhook sinks: comma-separated name=url pairs (name: letters, digits, - and _).",
    )
    events_webhook_secret: str | None = Field(
        default=None, description="HMAC-SHA256 key of the webhooks' X-Catalog-Signature header."
    )
    events_nats_url: str | None = Field(default=None, description="A NATS server the events are published to.")
    events_nats_subject: str = Field(
        default="iceberg.catalog.events", description="Subject prefix: <prefix>.<operation-type>."
    )
    events_delivery_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often an idle sink looks for new events."
    )
    events_delivery_lease_seconds: float = Field(
        default=30.0, ge=2, description="A sink's delivery lease: one replica delivers to a sink at a time."
    )

    @field_validator("events_retention", mode="before")
    @classmethod
    def _events_retention(cls, value: object) -> object:
        return duration_seconds(value)

    @field_validator("drop_retention", mode="before")
    @classmethod
    def _drop_retention(cls, value: object) -> object:
        return duration_seconds(value)

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, value: str | None) -> str | None:
        if value:
            from catalog.sealing import keys

            keys(value)  # raises what is wrong with it
        return value

    @field_validator("warehouse_roots")
    @classmethod
    def _warehouse_roots(cls, value: str) -> str:
        from catalog.errors import IcebergError
        from catalog.locations import normalise

        for root in filter(None, (p.strip() for p in value.split(","))):
            try:
                normalise(root, "root")
            except IcebergError as e:
                raise ValueError(f"each root is an absolute directory or an object-store prefix: {e.message}") from None
        return value

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        return normalise_database_url(url)

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, level: str) -> str:
        if level.lower() not in LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(LOG_LEVELS)}")
        return level.lower()

    @property
    def default_warehouse_names(self) -> frozenset[str]:
        """The names of the default warehouse: its own (``prefix``, else ``default``) and the aliases."""
        aliases = {a.strip() for a in self.warehouse_aliases.split(",") if a.strip()}
        return frozenset({self.prefix or "default", *aliases})

    @property
    def allowed_location_list(self) -> list[str]:
        return [p.strip() for p in self.allowed_locations.split(",") if p.strip()]

    @property
    def warehouse_root_list(self) -> list[str]:
        return [p.strip() for p in self.warehouse_roots.split(",") if p.strip()]

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def normalise_database_url(url: str) -> str:
    """The SQLAlchemy URL of a database this server runs on: SQLite, or PostgreSQL through psycopg 3
    (``postgres://`` and ``postgresql://``, as other tools write them, are rewritten to it)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgres", "postgresql", "postgresql+psycopg") and rest:
        return f"postgresql+psycopg://{rest}"
    if sep and scheme == "sqlite":
        return url
    # The value may hold a password: it is not repeated (a "url" that is not one is shown, cut short).
    shown = f"{scheme}://..." if sep else repr(url[:40])
    raise ValueError(f"unsupported database URL {shown}; accepted: {DATABASE_URL_FORMS}")


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``CATALOG_*`` variable that nothing reads (a typo is otherwise silently ignored, and
    the setting it meant keeps its default), naming the closest real setting."""
    known = {f"CATALOG_{name.upper()}" for name in Settings.model_fields}
    warnings = []
    for variable in sorted(environ):
        name = variable.upper()  # pydantic-settings reads the environment case-insensitively
        if not name.startswith("CATALOG_") or name in known or name in OTHER_VARIABLES:
            continue
        close = difflib.get_close_matches(name, sorted(known | OTHER_VARIABLES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "docs/configuration.md lists the settings"
        warnings.append(f"{variable} is not a setting and is ignored ({hint})")
    return warnings


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: object) -> object:
    """``7d``, ``12h``, ``30m``, ``45s`` or a number of seconds: seconds (others left to the field)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text[-1:] in _UNITS and text[:-1].replace(".", "", 1).isdigit():
            return float(text[:-1]) * _UNITS[text[-1]]
    return value
