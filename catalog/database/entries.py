"""Namespaces, entries (tables and views) and the locations they own: the catalog's rows apart
from the pointers (``pointers.py``), the grants (``grant_rows.py``), the maintenance queue
(``tasks.py``) and the dropped entries (``dropped.py``; a drop and an undrop move a row between
the two tables here; the locations' rows and the overlap query are ``location_rows.py``'s).
Database errors are translated by ``sql.translate``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.engine import Connection

from catalog import errors
from catalog.database.db import catalog_entries as entries
from catalog.database.db import dropped_entries as dropped
from catalog.database.db import idempotency_keys as keys
from catalog.database.db import join_namespace, maintenance_runs, namespaces, split_namespace
from catalog.database.dropped import COLUMNS as DROPPED_COLUMNS
from catalog.database.dropped import SHOWN, Dropped, as_dropped
from catalog.database.location_rows import (
    LOCATIONS_LOCK,
    Located,
    LocationTaken,
    overlapping_rows,
    paths_of,
    record_paths,
    supersede,
)
from catalog.database.outbox import EventRows
from catalog.database.pointers import Entry, KeyRecord, Swapped, key_row
from catalog.database.sql import Database, exists
from catalog.database.tasks import now_ms
from catalog.events import records
from catalog.events.records import Event
from catalog.names import dotted


class Entries:
    """Namespaces, entries and their locations on the catalog's ``Database``; each change writes its
    event through ``outbox`` in its own transaction."""

    def __init__(self, db: Database, outbox: EventRows) -> None:
        self.db = db
        self.outbox = outbox

    # -- namespaces ------------------------------------------------------------------------------

    def get_namespace(self, ns: tuple[str, ...]) -> dict[str, str] | None:
        with self.db.read() as conn:
            row = conn.execute(
                sa.select(namespaces.c.properties).where(namespaces.c.name == join_namespace(ns))
            ).first()
        return None if row is None else dict(row.properties)

    def namespace_locations(self) -> list[tuple[tuple[str, ...], str | None]]:
        """Every namespace and its ``location`` property (None: the default, under the warehouse)."""
        with self.db.read() as conn:
            rows = conn.execute(sa.select(namespaces.c.name, namespaces.c.properties)).all()
        return [(split_namespace(r.name), (r.properties or {}).get("location")) for r in rows]

    def list_namespaces(self, parent: tuple[str, ...], after: str | None, limit: int | None) -> list[tuple[str, ...]]:
        q = (
            sa.select(namespaces.c.name)
            .where(namespaces.c.parent == join_namespace(parent))
            .order_by(namespaces.c.name)
        )
        if after is not None:
            q = q.where(namespaces.c.name > after)
        if limit is not None:
            q = q.limit(limit)
        with self.db.read() as conn:
            return [split_namespace(r.name) for r in conn.execute(q)]

    def create_namespace(self, ns: tuple[str, ...], properties: dict[str, str]) -> None:
        try:
            with self.db.write() as conn:
                if len(ns) > 1 and not exists(conn, namespaces, namespaces.c.name == join_namespace(ns[:-1])):
                    raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns[:-1])}")
                conn.execute(
                    namespaces.insert().values(
                        name=join_namespace(ns), parent=join_namespace(ns[:-1]), properties=properties
                    )
                )
                self.outbox.write(conn, [records.namespace_event(records.CREATE_NAMESPACE, ns, properties=properties)])
        except exc.IntegrityError as e:
            raise errors.AlreadyExists(f"Namespace already exists: {'.'.join(ns)}") from e

    def update_namespace_properties(
        self, ns: tuple[str, ...], removals: Sequence[str], updates: dict[str, str]
    ) -> tuple[list[str], list[str], list[str]]:
        """Apply removals then updates in one transaction; returns (updated, removed, missing)."""
        key = join_namespace(ns)
        with self.db.write() as conn:
            row = conn.execute(
                sa.select(namespaces.c.properties).where(namespaces.c.name == key).with_for_update()
            ).first()
            if row is None:
                raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
            props = dict(row.properties)
            removals = list(dict.fromkeys(removals))  # a key named twice is removed (and reported) once
            removed = [k for k in removals if k in props]
            missing = [k for k in removals if k not in props]
            for k in removed:
                del props[k]
            props.update(updates)
            conn.execute(namespaces.update().where(namespaces.c.name == key).values(properties=props))
            if removed or updates:
                event = records.namespace_event(
                    records.UPDATE_NAMESPACE, ns, updated=sorted(updates), removed=removed, properties=props
                )
                self.outbox.write(conn, [event])
        return sorted(updates), removed, missing

    def drop_namespace(self, ns: tuple[str, ...]) -> None:
        key = join_namespace(ns)
        with self.db.write() as conn:
            if not exists(conn, namespaces, namespaces.c.name == key):
                raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
            children = conn.execute(sa.select(sa.func.count()).where(namespaces.c.parent == key)).scalar_one()
            tables = conn.execute(
                sa.select(sa.func.count()).where(entries.c.namespace == key, entries.c.kind == "table")
            ).scalar_one()
            views = conn.execute(
                sa.select(sa.func.count()).where(entries.c.namespace == key, entries.c.kind == "view")
            ).scalar_one()
            if children or tables or views:
                raise errors.NamespaceNotEmpty(
                    f"Namespace {'.'.join(ns)} is not empty. Contains {tables} table(s), {views} view(s) "
                    f"and {children} namespace(s)."
                )
            conn.execute(namespaces.delete().where(namespaces.c.name == key))
            self.outbox.write(conn, [records.namespace_event(records.DROP_NAMESPACE, ns)])

    # -- tables and views ------------------------------------------------------------------------

    def list_entries(self, ns: tuple[str, ...], kind: str, after: str | None, limit: int | None) -> list[str]:
        q = (
            sa.select(entries.c.name)
            .where(entries.c.namespace == join_namespace(ns), entries.c.kind == kind)
            .order_by(entries.c.name)
        )
        if after is not None:
            q = q.where(entries.c.name > after)
        if limit is not None:
            q = q.limit(limit)
        with self.db.read() as conn:
            return [r.name for r in conn.execute(q)]

    def insert_entry(
        self,
        ns: tuple[str, ...],
        name: str,
        kind: str,
        metadata_location: str,
        location: str,
        key: KeyRecord | None = None,
        event: Event | None = None,
        write_paths: Mapping[str, str] | None = None,
        superseding: Collection[int] = (),
    ) -> Swapped:
        """Register a new table or view (``location``: its normalised location; ``write_paths``: its
        normalised ``write.*.path`` prefixes by property). 409 if the name is taken (by a table or a
        view) or another entry overlaps one of those. ``key`` is recorded in the same transaction (a create's
        Idempotency-Key): ``KEY_TAKEN`` when another request recorded it first, nothing inserted.
        ``event`` (a create's or a register's) is written in it, with the new entry's id."""
        ident = dotted(ns, name)
        try:
            with self.db.write() as conn:
                if key is not None and exists(conn, keys, keys.c.key == key.key):
                    return Swapped.KEY_TAKEN
                taken = _holder_of(conn, ns, name)
                if taken is not None:
                    raise name_taken(kind, taken, ident)
                supersede(conn, superseding)
                self._location_free(conn, location, None, write_paths)
                inserted = conn.execute(
                    entries.insert().values(
                        namespace=join_namespace(ns),
                        name=name,
                        kind=kind,
                        metadata_location=metadata_location,
                        location=location,
                    )
                )
                entry_id = inserted.inserted_primary_key[0]
                record_paths(conn, entry_id, write_paths or {})
                if event is not None:
                    self.outbox.write(conn, [replace(event, entry_id=entry_id)])
                if key is not None:
                    conn.execute(keys.insert().values(**key_row(key)))
        except exc.IntegrityError as e:
            raise name_taken(kind, kind, ident) from e
        return Swapped.WON

    def overwrite_entry(
        self,
        ns: tuple[str, ...],
        name: str,
        metadata_location: str,
        location: str,
        event: Event | None = None,
        write_paths: Mapping[str, str] | None = None,
        superseding: Collection[int] = (),
    ) -> None:
        """Register-with-overwrite: point an existing table at another metadata file (``event``
        written with it)."""
        where = (entries.c.namespace == join_namespace(ns), entries.c.name == name, entries.c.kind == "table")
        with self.db.write() as conn:
            replaced = conn.execute(sa.select(entries.c.id).where(*where)).scalar()
            supersede(conn, superseding)
            self._location_free(conn, location, replaced, write_paths)
            if replaced is not None:
                record_paths(conn, replaced, write_paths or {})
            conn.execute(
                entries.update()
                .where(*where)
                .values(
                    metadata_location=metadata_location,
                    previous_metadata_location=entries.c.metadata_location,
                    location=location,
                )
            )
            if event is not None:
                self.outbox.write(conn, [replace(event, entry_id=replaced)])

    # -- locations (the ownership rule, see service) ---------------------------------------------

    def overlapping(self, location: str, exclude_id: int | None = None) -> list[Located]:
        """Entries whose location equals, contains or lies inside ``location`` (normalised).

        Containing locations are found by equality with each ancestor, contained ones by prefix
        (``LIKE`` with the wildcards escaped). Runs on creates, registers and location changes only.
        """
        with self.db.read() as conn:
            return overlapping_rows(conn, location, exclude_id)

    def _location_free(
        self, conn: Connection, location: str, exclude_id: int | None, write_paths: Mapping[str, str] | None = None
    ) -> None:
        """In the transaction that inserts or moves an entry: ``LocationTaken`` if another entry
        overlaps ``location`` or one of ``write_paths``. The service checked before writing any
        file; this closes the race between two creates that both passed that check. Writers are
        serialised for it: SQLite's write transactions are (BEGIN IMMEDIATE); on PostgreSQL an
        advisory lock held until the transaction ends does it, taken only by these rare inserts,
        never by commits."""
        if not self.db.local:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCATIONS_LOCK})
        for mine in (location, *(write_paths or {}).values()):
            for other in overlapping_rows(conn, mine, exclude_id):
                raise LocationTaken(mine, other)

    def referencing(self, metadata_location: str) -> Entry | None:
        """The entry whose pointer is this metadata file, if any."""
        q = sa.select(
            entries.c.id, entries.c.namespace, entries.c.name, entries.c.kind, entries.c.metadata_location
        ).where(entries.c.metadata_location == metadata_location)
        with self.db.read() as conn:
            row = conn.execute(q.limit(1)).first()
        return None if row is None else Entry(row[0], split_namespace(row[1]), row[2], row[3], row[4])

    def entries_without_location(self, limit: int) -> list[Entry]:
        """Live and dropped entries whose location or write paths are not recorded yet (rows from
        before migrations 0003 and 0011), live ones first."""
        found: list[Entry] = []
        for table in (entries, dropped):
            q = sa.select(table.c.id, table.c.namespace, table.c.name, table.c.kind, table.c.metadata_location)
            q = q.where(sa.or_(table.c.location.is_(None), table.c.paths_recorded.is_(False)))
            with self.db.read() as conn:
                rows = conn.execute(q.order_by(table.c.id).limit(limit - len(found))).all()
            found += [Entry(r[0], split_namespace(r[1]), r[2], r[3], r[4]) for r in rows]
            if len(found) >= limit:
                break
        return found

    def record_locations(
        self, entry_id: int, metadata_location: str, location: str, write_paths: Mapping[str, str]
    ) -> None:
        """Record a live or dropped entry's location and write paths read from its metadata file,
        if its pointer is still that file (a commit since recorded them itself)."""
        with self.db.write() as conn:
            for table in (entries, dropped):
                moved = conn.execute(
                    table.update()
                    .where(table.c.id == entry_id, table.c.metadata_location == metadata_location)
                    .values(location=location, paths_recorded=True)
                ).rowcount
                if moved:
                    record_paths(conn, entry_id, write_paths)
                    return

    def get_entry_by_id(self, entry_id: int) -> Entry | None:
        """An entry by its identity (maintenance tasks name entries so: a rename keeps it)."""
        q = sa.select(entries.c.id, entries.c.namespace, entries.c.name, entries.c.kind, entries.c.metadata_location)
        with self.db.read() as conn:
            row = conn.execute(q.where(entries.c.id == entry_id)).first()
        return None if row is None else Entry(row[0], split_namespace(row[1]), row[2], row[3], row[4])

    def drop_entry(self, entry: Entry, purge: bool, retention_ms: int, by: str | None) -> Dropped | None:
        """Drop the entry: keep it as a dropped entry until ``retention_ms`` from now (its name free,
        its id, pointer and location kept), or, with no retention and no purge, release it at once
        (``dropped.py``: not restorable, its files kept and its locations still held). The dropped
        entry (None when released); ``NoSuchTable``/``NoSuchView`` when it is gone."""
        event = records.entry_event(
            records.DROP, entry.kind, entry.namespace, entry.name, entry.id, purge_requested=purge
        )
        released = retention_ms <= 0 and not purge
        with self.db.write() as conn:
            if not _to_dropped(conn, entry, None, purge, retention_ms, by, released):
                raise _missing(entry.kind, entry.ident)
            self.outbox.write(conn, [event])
            if released:
                return None
            return as_dropped(conn.execute(sa.select(*DROPPED_COLUMNS).where(dropped.c.id == entry.id)).one())

    def undrop_entry(self, dropped_id: int) -> Entry:
        """Bring a dropped entry back under its name, with its id and pointer (so its history, its
        grants, which name it, and its maintenance record come back too). 409 when its name or
        location has been taken since, or its purge has begun; 404 when there is no such entry."""
        try:
            return self._undrop(dropped_id)
        except exc.IntegrityError as e:  # a create of the same name committed in between
            raise errors.AlreadyExists(f"Cannot undrop {dropped_id}: its name was taken meanwhile") from e

    def _undrop(self, dropped_id: int) -> Entry:
        with self.db.write() as conn:
            row = conn.execute(sa.select(*DROPPED_COLUMNS).where(dropped.c.id == dropped_id, SHOWN)).first()
            if row is None:
                raise errors.NotFound(f"Dropped table or view does not exist: {dropped_id}")
            gone = as_dropped(row)
            if gone.purging_ms is not None:
                raise errors.AlreadyExists(f"Cannot undrop {gone.ident}: its purge has begun")
            taken = _holder_of(conn, gone.namespace, gone.name)
            if taken is not None:
                raise errors.AlreadyExists(
                    f"Cannot undrop {gone.ident}: a {taken} of that name exists (rename or drop it first)"
                )
            if gone.location is not None:
                self._location_free(conn, gone.location, gone.id, paths_of(conn, gone.id))
            # the purge claims the row with a conditional UPDATE: whichever of the two writes it first wins
            if (
                conn.execute(dropped.delete().where(dropped.c.id == gone.id, dropped.c.purging_ms.is_(None))).rowcount
                != 1
            ):
                raise errors.AlreadyExists(f"Cannot undrop {gone.ident}: its purge has begun")
            conn.execute(
                entries.insert().values(
                    id=gone.id,
                    namespace=join_namespace(gone.namespace),
                    name=gone.name,
                    kind=gone.kind,
                    metadata_location=gone.metadata_location,
                    location=gone.location,
                    paths_recorded=conn.execute(
                        sa.select(dropped.c.paths_recorded).where(dropped.c.id == gone.id)
                    ).scalar_one_or_none()
                    or False,
                )
            )
            self.outbox.write(
                conn, [records.entry_event(records.UNDROP, gone.kind, gone.namespace, gone.name, gone.id)]
            )
        return Entry(gone.id, gone.namespace, gone.name, gone.kind, gone.metadata_location)

    def release_entry(self, entry: Entry, at: str, by: str | None = None) -> bool:
        """Unregister: the entry goes at once, only while its pointer is still ``at`` (whether it
        went), as a released dropped entry: its files kept and its locations still held, so that no
        other principal takes them over (``dropped.py``). Its event is a drop's."""
        event = records.entry_event(records.DROP, entry.kind, entry.namespace, entry.name, entry.id)
        with self.db.write() as conn:
            if not _to_dropped(conn, entry, at, False, 0, by, True):
                return False
            self.outbox.write(conn, [event])
            return True

    def rename_entry(self, entry: Entry, to_ns: tuple[str, ...], to_name: str) -> None:
        noun = "Table" if entry.kind == "table" else "View"
        src, dst = entry.ident, dotted(to_ns, to_name)
        try:
            with self.db.write() as conn:
                taken = _holder_of(conn, to_ns, to_name)
                if taken is not None:
                    other = "Table" if taken == "table" else "View"
                    raise errors.AlreadyExists(f"Cannot rename {src} to {dst}. {other} already exists")
                moved = conn.execute(
                    entries.update()
                    .where(entries.c.id == entry.id)
                    .values(namespace=join_namespace(to_ns), name=to_name)
                ).rowcount
                if moved != 1:
                    raise (errors.NoSuchTable if entry.kind == "table" else errors.NoSuchView)(
                        f"{noun} does not exist: {src}"
                    )
                destination = {"namespace": list(to_ns), "name": to_name}
                event = records.entry_event(
                    records.RENAME, entry.kind, entry.namespace, entry.name, entry.id, destination=destination
                )
                self.outbox.write(conn, [event])
        except exc.IntegrityError as e:
            raise errors.AlreadyExists(f"Cannot rename {src} to {dst}. {noun} already exists") from e


def _to_dropped(
    conn: Connection,
    entry: Entry,
    at: str | None,
    purge: bool,
    retention_ms: int,
    by: str | None,
    released: bool,
) -> bool:
    """Move the entry's row (only while its pointer is ``at``, when given) to ``dropped_entries``:
    kept ``retention_ms``, or ``released`` at once. Whether it moved."""
    where = [entries.c.id == entry.id, *([entries.c.metadata_location == at] if at is not None else [])]
    row = conn.execute(
        sa.select(entries.c.metadata_location, entries.c.location, entries.c.paths_recorded).where(*where)
    ).first()
    if row is None or conn.execute(entries.delete().where(*where)).rowcount != 1:
        return False
    now = now_ms()
    conn.execute(
        dropped.insert().values(
            id=entry.id,
            namespace=join_namespace(entry.namespace),
            name=entry.name,
            kind=entry.kind,
            metadata_location=row.metadata_location,
            location=row.location,
            purge=purge,
            dropped_ms=now,
            expires_ms=now + max(0, retention_ms),
            dropped_by=by[:256] if by else None,
            paths_recorded=row.paths_recorded,
            released_ms=now if released else None,
        )
    )
    if released:
        conn.execute(maintenance_runs.delete().where(maintenance_runs.c.entry_id == entry.id))
    return True


def _holder_of(conn: Connection, ns: tuple[str, ...], name: str) -> str | None:
    """The kind ('table' | 'view') holding ``ns.name``, or None; 404 if the namespace is missing."""
    if not exists(conn, namespaces, namespaces.c.name == join_namespace(ns)):
        raise errors.NoSuchNamespace(f"Namespace does not exist: {'.'.join(ns)}")
    return conn.execute(
        sa.select(entries.c.kind).where(entries.c.namespace == join_namespace(ns), entries.c.name == name)
    ).scalar()


def _missing(kind: str, ident: str) -> errors.IcebergError:
    if kind == "view":
        return errors.NoSuchView(f"View does not exist: {ident}")
    return errors.NoSuchTable(f"Table does not exist: {ident}")


def name_taken(creating: str, existing: str, ident: str) -> errors.AlreadyExists:
    """THE "name already taken" answer: a ``creating`` ('table' | 'view') finds ``existing`` there."""
    if creating == existing:
        return errors.AlreadyExists(f"{'Table' if creating == 'table' else 'View'} already exists: {ident}")
    if existing == "view":
        return errors.AlreadyExists(f"View with same name already exists: {ident}")
    return errors.AlreadyExists(f"Table with same name already exists: {ident}")
