"""The grants table: the rows behind the grants in force (``auth/grants.py``) and the
``grants`` CLI. Decisions are made elsewhere (``auth/policy.py``, pure); this module only stores.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection

from catalog import errors
from catalog.auth.policy import Grant, Target, parse_privilege
from catalog.database.db import grants as grant_rows
from catalog.database.db import join_namespace, split_namespace
from catalog.database.sql import Database


class GrantRows:
    def __init__(self, db: Database) -> None:
        self.db = db

    def list_grants(self) -> list[Grant]:
        with self.db.read() as conn:
            rows = conn.execute(sa.select(*_COLUMNS)).all()
        return [_grant(row) for row in rows]

    def add_grants(self, grants: Sequence[Grant]) -> list[Grant]:
        """Insert the grants not held yet (an existing one keeps its id and source); returns all of
        them as stored, with their ids."""
        for attempt in range(3):  # a concurrent insert of the same grant: read it back, once it exists
            try:
                with self.db.write() as conn:
                    self._insert_missing(conn, grants)
                    return [_grant(row) for row in conn.execute(_select_grants(grants))]
            except exc.IntegrityError:
                if attempt == 2:
                    raise errors.CommitFailed("Grants changed concurrently; try again") from None
        raise AssertionError("unreachable")

    def delete_grant(self, grant_id: int) -> Grant | None:
        with self.db.write() as conn:
            row = conn.execute(sa.select(*_COLUMNS).where(grant_rows.c.id == grant_id)).first()
            if row is not None:
                conn.execute(grant_rows.delete().where(grant_rows.c.id == grant_id))
        return None if row is None else _grant(row)

    def sync_bootstrap(self, grants: Sequence[Grant]) -> tuple[int, int]:
        """Make the ``bootstrap`` grants exactly ``grants`` (those from the API stay); returns
        (added, removed). Replicas starting together each run this: it converges."""
        wanted = {_grant_key(g) for g in grants}
        for attempt in range(3):
            try:
                return self._sync_bootstrap(grants, wanted)
            except exc.IntegrityError:
                if attempt == 2:
                    raise errors.CommitFailed("Grants changed concurrently; try again") from None
        raise AssertionError("unreachable")

    def settle_legacy(self, client_ids: Collection[str]) -> list[Grant]:
        """The ``user:`` grants from before principal kinds (migration 0005): those naming one of
        ``client_ids`` (the configured built-in clients) become ``client:<id>`` (merged into one
        already held), the others stay; none is legacy afterwards. Returns the rewritten grants as
        they were. Replicas starting together each run this: it converges."""
        for attempt in range(3):
            try:
                return self._settle_legacy(frozenset(client_ids))
            except exc.IntegrityError:
                if attempt == 2:
                    raise errors.CommitFailed("Grants changed concurrently; try again") from None
        raise AssertionError("unreachable")

    def _settle_legacy(self, client_ids: frozenset[str]) -> list[Grant]:
        with self.db.write() as conn:
            rows = conn.execute(sa.select(*_COLUMNS).where(grant_rows.c.legacy == sa.true())).all()
            moved = []
            for row in rows:
                principal, name = row.principal, row.principal.removeprefix("user:")
                if not principal.startswith("user:") or name not in client_ids:
                    continue
                key = ("client:" + name, *tuple(row)[2:6])
                same = [column == value for column, value in zip(_GRANT_KEY, key, strict=True)]
                held = conn.execute(sa.select(grant_rows.c.id).where(*same)).first()
                if held is None:
                    conn.execute(grant_rows.update().where(grant_rows.c.id == row.id).values(principal=key[0]))
                else:
                    conn.execute(grant_rows.delete().where(grant_rows.c.id == row.id))
                moved.append(_grant(row))
            if rows:
                conn.execute(grant_rows.update().where(grant_rows.c.legacy == sa.true()).values(legacy=False))
        return moved

    def _sync_bootstrap(self, grants: Sequence[Grant], wanted: set[tuple[str, ...]]) -> tuple[int, int]:
        with self.db.write() as conn:
            rows = conn.execute(sa.select(grant_rows.c.id, *_GRANT_KEY).where(grant_rows.c.source == "bootstrap")).all()
            stale = [r.id for r in rows if tuple(r[1:]) not in wanted]
            if stale:
                conn.execute(grant_rows.delete().where(grant_rows.c.id.in_(stale)))
            added = self._insert_missing(conn, grants)
        return added, len(stale)

    def _insert_missing(self, conn: Connection, grants: Sequence[Grant]) -> int:
        held = {tuple(r) for r in conn.execute(_select_grants(grants).with_only_columns(*_GRANT_KEY))}
        now = int(time.time() * 1000)
        rows, seen = [], set(held)
        for g in grants:
            key = _grant_key(g)
            if key not in seen:
                seen.add(key)
                rows.append({c.name: value for c, value in zip(_GRANT_KEY, key, strict=True)})
                rows[-1].update(source=g.source, created_ms=now)
        if rows:
            conn.execute(grant_rows.insert(), rows)
        return len(rows)


_GRANT_KEY = (
    grant_rows.c.principal,
    grant_rows.c.privilege,
    grant_rows.c.object_kind,
    grant_rows.c.object_name,
    grant_rows.c.warehouse,
)
_COLUMNS = (grant_rows.c.id, *_GRANT_KEY, grant_rows.c.source)


def _grant_key(g: Grant) -> tuple[str, ...]:
    return g.principal, str(g.privilege), g.target.kind, join_namespace(g.target.path), g.target.warehouse or ""


def _select_grants(grants: Sequence[Grant]) -> sa.Select:
    principals = sorted({g.principal for g in grants})
    keys = {_grant_key(g) for g in grants}
    return sa.select(*_COLUMNS).where(grant_rows.c.principal.in_(principals), sa.tuple_(*_GRANT_KEY).in_(sorted(keys)))


def _grant(row: sa.Row) -> Grant:
    target = Target(row.object_kind, split_namespace(row.object_name), row.warehouse or None)
    return Grant(row.principal, parse_privilege(row.privilege), target, id=row.id, source=row.source)
