"""The grants in force in this process and the decisions made with them.

Each process keeps a snapshot of the grants table (``authz.Policy``) and reloads it when it is older
than ``authz_cache_seconds``: a grant or revoke made anywhere takes effect in every worker and
replica within that time (at once in the process that made it). A reload is one ``SELECT`` of the
whole table, done by the first request that finds the snapshot stale while the others wait for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

import yaml

from catalog import errors
from catalog.auth.policy import CATALOG, Grant, Policy, as_client, parse_grants, refuse_ambiguous
from catalog.auth.tokens import parse_clients
from catalog.settings import AuthSettings

log = logging.getLogger("catalog.access")


class GrantStore(Protocol):
    """What ``Access`` needs of the stored grants (the store's ``GrantRows`` is one)."""

    def list_grants(self) -> list[Grant]: ...

    def add_grants(self, grants: Sequence[Grant]) -> list[Grant]: ...

    def delete_grant(self, grant_id: int) -> Grant | None: ...

    def sync_bootstrap(self, grants: Sequence[Grant]) -> tuple[int, int]: ...

    def settle_legacy(self, client_ids: Collection[str]) -> list[Grant]: ...


class Access:
    def __init__(
        self,
        settings: AuthSettings,
        grants: GrantStore,
        default_names: frozenset[str],
        warehouse: str | None = None,
    ) -> None:
        """``warehouse``: the name of a warehouse besides the default one, whose decisions these are
        (the grants are all in the server's database, ``grants``; see ``in_warehouse``);
        ``default_names``: the default warehouse's names (``WarehouseSettings.default_warehouse_names``)."""
        self.grants = grants
        self.warehouse = warehouse
        # the names this warehouse's grants may give it: a created one's own, or the default's (its
        # name and aliases; a created warehouse's settings carry its name as their prefix instead)
        self.names = frozenset({warehouse}) if warehouse else default_names
        # Without authentication every request is anonymous and unrestricted; with it, grants decide
        # unless the operator chose authorization "none" (any valid token may do anything).
        self.enforced = settings.auth_required and settings.authorization == "grants"
        self.ttl = settings.authz_cache_seconds
        self.clients = frozenset(parse_clients(settings.oauth_clients))  # the built-in clients' ids
        self._policy = Policy(())
        self._expires = 0.0  # monotonic time after which the snapshot is reloaded
        self._lock = threading.Lock()

    def cached(self) -> Policy | None:
        """The snapshot if it is fresh (no I/O: callable on the event loop)."""
        return self._policy if time.monotonic() < self._expires else None

    def policy(self) -> Policy:
        """A fresh snapshot, reloaded if stale (blocking)."""
        with self._lock:
            if time.monotonic() >= self._expires:
                self._policy = Policy(in_warehouse(self.grants.list_grants(), self.warehouse, self.names))
                self._expires = time.monotonic() + self.ttl
            return self._policy

    def changed(self) -> None:
        """Grants were changed by this process: the next decision reloads them."""
        self._expires = 0.0

    def grant(self, grants: list[Grant]) -> list[Grant]:
        refuse_ambiguous(grants, self.clients)
        stored = self.grants.add_grants(grants)
        self.changed()
        return stored

    def revoke(self, grant_id: int) -> Grant | None:
        removed = self.grants.delete_grant(grant_id)
        self.changed()
        return removed

    def bootstrap(self, path: str) -> None:
        """Keep the bootstrap grants in step with the file (see ``GrantRows.sync_bootstrap``)."""
        grants = []
        for g in read_bootstrap(path):
            grants.append(as_client(g, self.clients))
            if grants[-1] is not g:
                log.warning(
                    "authorization bootstrap %s: %s is the built-in client %s (write that instead: %s now names "
                    "an identity provider's user)",
                    path,
                    g.principal,
                    grants[-1].principal,
                    g.principal,
                )
        added, removed = self.grants.sync_bootstrap(grants)
        self.changed()
        log.info("authorization bootstrap %s: %d grants (%d added, %d removed)", path, len(grants), added, removed)

    def settle_legacy(self) -> None:
        """Grants from before principal kinds (migration 0005) that name a configured built-in client
        become ``client:<id>``; the others stay ``user:<name>`` (see ``GrantRows.settle_legacy``)."""
        for g in self.grants.settle_legacy(self.clients):
            log.warning(
                "grant %s of %s on %s (made before principal kinds) now names the built-in client: client:%s",
                g.privilege,
                g.principal,
                g.target,
                g.principal.partition(":")[2],
            )
        self.changed()


def in_warehouse(grants: list[Grant], warehouse: str | None, names: Collection[str]) -> list[Grant]:
    """The grants that decide inside one warehouse (``None``: the default one), named ``names``
    (the default's: its name and aliases), each as seen from inside it. Catalog-level grants span
    every warehouse; ``{warehouse: w}`` is w's catalog level; a namespace, table or view grant
    naming a warehouse names that warehouse's object, and one naming none the default's."""
    kept = []
    for g in grants:
        if g.target.kind == CATALOG:
            kept.append(g)
            continue
        where, target = g.target.where()
        if (where in names) if where is not None else warehouse is None:
            kept.append(replace(g, target=target))
    return kept


def read_bootstrap(path: str) -> list[Grant]:
    """The grants of a bootstrap file; a ``ValueError`` naming the file and the problem otherwise."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"CATALOG_AUTHZ_BOOTSTRAP: cannot read {path}: {e}") from None
    try:
        return parse_grants(doc or {})
    except errors.BadRequest as e:
        raise ValueError(f"CATALOG_AUTHZ_BOOTSTRAP: {path}: {e.message}") from None
