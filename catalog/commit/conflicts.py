"""What a commit whose requirement failed becomes: rebuilt on its branch's new head (a pure append,
``rebase.py``), landed on its base with the catalog's maintenance snapshots removed (``rollback.py``),
or the 409. The engine's ``apply`` (step 2) hands every failed requirement to one of ``Conflicts``'
resolutions: ``resolve`` (the commit's own attempt), ``check`` (after a lost CAS: is it refused now?
Nothing is written); the inline committer composes ``plan`` and ``land`` to leave a rebase to a
thread. Every refusal goes through ``refused``, which counts it, logs it and remembers when.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from catalog import errors, metrics
from catalog.commit import rebasable, rebase, rollback
from catalog.commit.changes import SLOTS, TABLE, Change, slot
from catalog.settings import CommitSettings
from catalog.storage.metadata_files import MetadataFile

log = logging.getLogger("catalog.commit")

Plan = rebasable.Candidate | rollback.Rollback
Resolved = tuple[dict[str, Any], rebase.Rebased | None]


class Conflicts:
    """``rebaser``: rebuilds appends (the engine's); ``delete``: deletes an uncommitted file quietly;
    ``step``: measures one step of a commit (the engine's, for the rebase's)."""

    def __init__(
        self,
        settings: CommitSettings,
        rebaser: rebase.Rebaser,
        delete: Callable[[str], None],
        step: Callable[[str, str], AbstractContextManager[None]],
    ) -> None:
        self.settings = settings
        self.rebaser = rebaser
        self._delete = delete
        self._step = step
        self._refused = [0.0] * SLOTS  # lock slot -> when a commit's requirement last failed (monotonic)

    def resolve(
        self, change: Change, base: MetadataFile | None, failed: errors.CommitFailed, now_ms: int, rebasable: bool
    ) -> Resolved:
        """The new metadata after all (and the rebase, whose manifest list is written), or the 409.
        Only a commit of one table is ``rebasable`` (a multi-table transaction may rely on what it
        read)."""
        return self.land(change, base, failed, self.plan(change, base, failed, rebasable), now_ms)

    def check(
        self, change: Change, base: MetadataFile | None, failed: errors.CommitFailed, now_ms: int, rebasable: bool
    ) -> Resolved:
        """``resolve``'s 409 or not, writing nothing: ``base.data`` when the commit may still land."""
        plan = self.plan(change, base, failed, rebasable)
        if isinstance(plan, rebasable.Candidate) and plan.over_maintenance:
            metrics.WRITERS_MET_MAINTENANCE.labels("rebased").inc()
        return base.data, None  # type: ignore[union-attr]  # a plan has a base

    def plan(self, change: Change, base: MetadataFile | None, failed: errors.CommitFailed, rebasable: bool) -> Plan:
        """How the commit may land all the same (a rebase first, else a rollback); else the 409."""
        candidate = self._rebase_candidate(change, base) if rebasable else None
        if candidate is not None:
            return candidate
        rolled = self._rollback(change, base) if rebasable else None
        if rolled is None:
            raise self.refused(change, failed) from None
        return rolled

    def land(
        self, change: Change, base: MetadataFile | None, failed: errors.CommitFailed, plan: Plan, now_ms: int
    ) -> Resolved:
        """The commit applied as ``plan`` says; the 409 when that fails too."""
        assert base is not None  # a plan has a base
        if isinstance(plan, rollback.Rollback):
            try:
                new = change.kind.apply(
                    plan.base, plan.requirements, plan.updates, base_location=base.location, now_ms=now_ms
                )
            except errors.IcebergError:
                raise self.refused(change, failed) from None
            metrics.WRITERS_MET_MAINTENANCE.labels("rolled-back").inc()
            metrics.MAINTENANCE_COMPACTIONS.labels("rolled-back").inc(len(plan.removed))
            log.info(
                "commit to %s landed on its base %s; the catalog's maintenance snapshots %s were rolled back",
                change.ident, plan.requirements, plan.removed,
            )  # fmt: skip
            return new, None
        if plan.over_maintenance:
            metrics.WRITERS_MET_MAINTENANCE.labels("rebased").inc()
        try:
            with self._step(change.kind.name, "rebase"):
                rebased = self.rebaser.rebuild(plan, base.data, now_ms)
        except Exception as e:  # noqa: BLE001 - a refusal (the original 409) or a storage failure (503)
            if rebase.storage_failed(e):
                log.warning("append to %s not rebased, the storage failed: %s", change.ident, e)
                raise errors.ServiceUnavailable(rebase.REBASE_STORAGE_FAILED) from e
            log.debug("append to %s not rebased: %s", change.ident, e)
            raise self.refused(change, failed) from None
        try:
            new = change.kind.apply(
                base.data, list(rebased.requirements), list(rebased.updates), base_location=base.location, now_ms=now_ms
            )
        except errors.IcebergError:
            for location in rebased.files:
                self.rebaser.forget(location)  # in a group: not written yet
                self._delete(location)
            raise self.refused(change, failed) from None
        log.debug(
            "rebased append %s to %s onto snapshot %s",
            plan.snapshot["snapshot-id"], change.ident, plan.head["snapshot-id"],
        )  # fmt: skip
        return new, rebased

    def refused(self, change: Change, e: errors.CommitFailed) -> errors.CommitFailed:
        """The 409, counted and logged: the client's premise no longer holds."""
        self._refused[slot(change)] = time.monotonic()  # writers are racing on it (``refused_at``)
        metrics.CONFLICTS.labels("requirement").inc()
        log.warning("commit conflict: %s=%s cause=requirement %s", change.kind.name, change.ident, e.message)
        return e

    def refused_at(self, change: Change) -> float:
        """When a requirement of a commit to this entry (or one sharing its slot) last failed
        (``time.monotonic``; 0: not since the start)."""
        return self._refused[slot(change)]

    def _rebase_candidate(self, change: Change, base: MetadataFile | None) -> rebasable.Candidate | None:
        if change.kind is not TABLE or base is None:
            return None
        try:
            default = self.settings.append_rebase
            return rebasable.candidate(list(change.requirements), list(change.updates), base.data, default)
        except Exception:  # noqa: BLE001 - malformed input the apply refused already: no rebase
            return None

    def _rollback(self, change: Change, base: MetadataFile | None) -> rollback.Rollback | None:
        if change.kind is not TABLE or base is None or change.maintenance:
            return None
        try:
            return rollback.rollback(list(change.requirements), list(change.updates), base.data)
        except Exception:  # noqa: BLE001 - malformed input the apply refused already: a 409
            return None
