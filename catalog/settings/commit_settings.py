"""The commit loop's settings: server-side rebase attempts, append rebase, group commit, commits on the
event loop, the metadata files a commit pushes out. Given to ``commit/``."""

from __future__ import annotations

from pydantic import Field

from catalog.settings.group import Group


class CommitSettings(Group):
    """``CATALOG_COMMIT_*``, ``CATALOG_APPEND_REBASE*``, ``CATALOG_GROUP_COMMIT_*``, ``CATALOG_INLINE_COMMITS``,
    ``CATALOG_METADATA_DELETE_AFTER_COMMIT``."""

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
    metadata_delete_after_commit: bool = Field(
        default=True,
        description="After a commit lands, delete the metadata files it pushed out of the table's metadata log "
        "(beyond write.metadata.previous-versions-max), in the background: the catalog's default for tables that do "
        "not set write.metadata.delete-after-commit.enabled (Iceberg's own default is false; a table's false wins). "
        "Without it a table committed to often holds many times its live metadata until snapshot expiry sweeps.",
    )
