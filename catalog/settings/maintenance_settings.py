"""Table maintenance's settings (catalog/maintenance/): what the scheduler runs and how often, the
defaults of the tables' expiry policy, and how long a dropped entry is kept."""

from __future__ import annotations

from pydantic import Field, field_validator

from catalog.settings.group import Group, duration_seconds


class MaintenanceSettings(Group):
    """``CATALOG_MAINTENANCE_*``, ``CATALOG_DROP_RETENTION``."""

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

    @field_validator("drop_retention", mode="before")
    @classmethod
    def _drop_retention(cls, value: object) -> object:
        return duration_seconds(value)
