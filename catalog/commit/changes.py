"""The commit's value types: what a commit is asked to do (``Change``), what it answers
(``Committed`` | ``Replayed``), what it holds between its steps (``Staged``), the errors every
caller of the engine shares, and an entry's lock slot (``slot``). Types only: the engine
(``engine.py``), conflict resolution (``conflicts.py``), group commit (``grouping.py``) and the
inline committer (``inline.py``) import this module, and none imports another's internals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from catalog import errors
from catalog.database.pointers import Entry, KeyRecord
from catalog.events import records
from catalog.metadata import tables, views
from catalog.names import dotted
from catalog.storage.metadata_files import MetadataFile

Namespace = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Kind:
    """What differs between tables and views: the pure commit function and the names."""

    name: str  # "table" | "view", as stored in catalog_entries.kind
    apply: Callable[..., dict[str, Any]]  # (base, requirements, updates, *, base_location, now_ms) -> new
    missing: type[errors.IcebergError]

    @property
    def noun(self) -> str:
        return self.name.capitalize()

    @property
    def uuid_key(self) -> str:
        """The metadata's identity field: ``table-uuid`` or ``view-uuid``."""
        return f"{self.name}-uuid"


TABLE = Kind("table", tables.apply, errors.NoSuchTable)
VIEW = Kind("view", views.apply, errors.NoSuchView)
KINDS = {kind.name: kind for kind in (TABLE, VIEW)}
# The summary key of every snapshot the catalog's maintenance makes (its value: the job's kind).
MAINTENANCE_JOB = "catalog.maintenance-job"


def creates(requirements: Sequence[dict[str, Any]]) -> bool:
    """THE test of "is this a staged create": an ``assert-create`` requirement."""
    return any(r.get("type") == "assert-create" for r in requirements)


@dataclass(frozen=True, slots=True)
class Change:
    """One entry's part of a commit. ``created``: the metadata of a plain create, built by the
    service; a staged create is a change whose requirements are ``assert-create``."""

    kind: Kind
    namespace: Namespace
    name: str
    requirements: Sequence[dict[str, Any]] = ()
    updates: Sequence[dict[str, Any]] = ()
    created: dict[str, Any] | None = None
    # A check of the result against the base it was applied to, for the catalog's own commits
    # (maintenance): raises errors.CommitFailed (a 409, never retried) when the result must not land.
    guard: Callable[[dict[str, Any], dict[str, Any]], None] | None = None
    # The catalog's own maintenance commit: only such a change may add a snapshot whose summary
    # carries MAINTENANCE_JOB (the mark the engine rolls back for a writer, ``rebase.rollback``).
    maintenance: bool = False
    # A create's: the released dropped entries holding its location that it takes over (its caller
    # may drop their names; ``Catalog.create_table``).
    superseding: frozenset[int] = frozenset()

    @property
    def ident(self) -> str:
        return dotted(self.namespace, self.name)

    @property
    def creates(self) -> bool:
        return self.created is not None or creates(self.requirements)


@dataclass(frozen=True, slots=True)
class Committed:
    """The commit landed (or changed nothing). ``files``: each change's current metadata file.
    ``recorded``: the Idempotency-Key was recorded in the commit's own transaction."""

    files: tuple[MetadataFile, ...]
    recorded: bool


@dataclass(frozen=True, slots=True)
class Replayed:
    """Another request with the same Idempotency-Key committed first; this one changed nothing.
    Its recorded response is the answer."""


Outcome = Committed | Replayed


@dataclass(slots=True)
class Staged:
    """One change between its write and its swap: the new metadata file is written, nothing points
    at it yet."""

    change: Change
    entry: Entry | None  # None: a create
    base: MetadataFile | None
    new: MetadataFile
    location: str  # the entry's normalised location after the commit
    lists: tuple[str, ...] = ()  # manifest lists written by rebases of pure appends (commit/rebase.py)
    commits: int = 1  # the commits it carries: more than one for a group commit (commit/grouping.py)
    manifests: tuple[str, ...] = ()  # manifests written by rebases of merged appends (commit/rebase.py)
    unwritten: bytes | None = None  # an inline commit's file before it is written (inline.py, ``_write``)
    write_paths: dict[str, str] | None = None  # its write.*.path prefixes, when it changed them (ownership)

    def event(self) -> records.Event:
        """The change event of this pointer move (a group's carries every snapshot it added)."""
        change = self.change
        return records.committed(
            change.kind.name,
            change.namespace,
            change.name,
            self.entry.id if self.entry else None,
            self.base.data if self.base else None,
            self.new.data,
            self.new.location,
            change.requirements,
            change.updates,
            self.commits,
        )


class Grouping(Protocol):
    """Group commit as the engine sees it (``grouping.GroupCommitter``): the engine offers it each
    commit first; ``commit`` answers None when the commit should take the ordinary path."""

    def eligible(self, changes: Sequence[Change], key: KeyRecord | None) -> bool: ...

    def commit(self, change: Change) -> Committed | None: ...

    def note(self, change: Change, data: dict[str, Any]) -> None: ...

    def known_off(self, change: Change) -> bool: ...


class WouldWait(Exception):
    """An attempt given a bound on its waits (an inline commit, ``inline.py``) met something it would
    have to wait for: a lock or the database's writer held past the bound (the engine's
    ``serialised``, ``locate`` and ``swap`` given a ``wait``), or work it leaves to a thread. Nothing
    landed and no file is left. ``reason``: the label of ``catalog_commit_to_thread_total``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# Commits to different entries share a lock slot (the engine's lock, the inline committer's queue,
# the time a requirement last failed) only when their names hash to the same slot.
SLOTS = 1024


def slot(change: Change) -> int:
    return hash((change.namespace, change.name)) % SLOTS


def not_committed(e: errors.IcebergError) -> errors.IcebergError:
    """An error before the CAS: the commit certainly did not happen, so never a 500 (which clients
    read as "state unknown"): what the operator must fix is a 503 too, with its message."""
    if e.code >= 500 and not isinstance(e, errors.ServiceUnavailable):
        return errors.ServiceUnavailable(e.message, detail=e.detail)
    return e


def changed_concurrently(names: str, attempts: int) -> errors.CommitFailed:
    """The 409 of a commit that lost the CAS on every attempt it was allowed."""
    return errors.CommitFailed(
        f"Commit failed: {names} changed concurrently {attempts} times in a row; refresh and retry"
    )
