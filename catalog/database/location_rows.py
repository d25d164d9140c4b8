"""The locations entries own, as rows: the overlap query over live and dropped entries (one
statement per dialect), their write paths (``entry_paths``), the dropped entries a register of the
same table supersedes, and the 409s a claim meets (``LocationTaken``, ``HeldByDropped``). The parts
that insert or move entries (``entries.py``) call these in their own transactions; which locations an
entry owns, and who asks, is ``ownership.py``'s.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from catalog import errors
from catalog.database.db import catalog_entries as entries
from catalog.database.db import dropped_entries as dropped
from catalog.database.db import entry_paths as paths
from catalog.database.db import split_namespace
from catalog.database.dropped import forget_records
from catalog.locations import ancestors, overlaps


@dataclass(frozen=True, slots=True)
class Located:
    """An entry and one location it owns, normalised (the ownership rule's view of an entry):
    its ``location``, or one of its ``write.*.path`` prefixes (``what`` names which)."""

    id: int
    namespace: tuple[str, ...]
    name: str
    kind: str
    location: str
    dropped: bool = False
    what: str = "location"
    released: bool = False  # a dropped entry whose retention ended without purge (dropped.py)


class LocationTaken(errors.AlreadyExists):
    """409: ``location`` equals, contains or lies inside the location of another entry. The message
    names neither (the caller may not see that entry, and a location may be the server's own path):
    which entry and where go to ``detail``, for the server log."""

    def __init__(self, location: str, other: Located, what: str = "location") -> None:
        mine = "Location" if what == "location" else what
        if other.released:
            message = (
                f"{mine} overlaps the location of a table dropped without purge, whose files are kept "
                "there: register that table again, or ask someone who may drop its name to create this"
            )
        elif other.dropped:
            message = (
                f"{mine} overlaps the location of a dropped table or view, which keeps it until its "
                "retention ends (undrop it, or end its retention: see the catalog's dropped entries)"
            )
        else:
            message = f"{mine} overlaps the location of another table or view"
        which = f"{'dropped ' if other.dropped else ''}{other.kind} {'.'.join((*other.namespace, other.name))}"
        super().__init__(message, detail=f"{location} overlaps {which}'s {other.what} {other.location}")


class HeldByDropped(errors.AlreadyExists):
    """409 unless the caller may drop them: the locations a register or a create claims are held
    by dropped entries (``ids``) it may supersede (``Catalog.register``, ``Catalog.create_table``);
    the message is ``LocationTaken``'s."""

    def __init__(self, ids: list[int], released: bool) -> None:
        holder = Located(ids[0], (), "", "table", "", dropped=True, released=released)
        super().__init__(LocationTaken("", holder).message)
        self.ids = ids


def overlapping_rows(conn: Connection, location: str, exclude_id: int | None) -> list[Located]:
    """Live and dropped entries (a dropped entry keeps its locations until it is purged or
    forgotten) whose location or a write path overlaps ``location``: ONE statement, each of its four
    parts answered by an index (equality with each ancestor, and a prefix: a range on SQLite, a
    ``LIKE`` on PostgreSQL). ``bench/ownership.py`` measures how it grows with the entries."""
    sqlite = conn.dialect.name == "sqlite"
    values: dict[str, object] = {"ancestors": ancestors(location), "exclude": -1 if exclude_id is None else exclude_id}
    if sqlite:
        values.update(low=location + "/", high=location + "0")  # '0' follows '/' in binary order
    else:
        escaped = location.replace("/", "//").replace("%", "/%").replace("_", "/_")
        values["pattern"] = escaped + "//%"
    return [
        Located(r[0], split_namespace(r[1]), r[2], r[3], r[4], bool(r[6]), r[5], r[6] == 2)
        for r in conn.execute(_OVERLAPPING[sqlite], values)
        if overlaps(r[4], location)  # exact, whatever the collation
    ]


def _overlapping_statement(sqlite: bool) -> sa.CompoundSelect:
    """The overlap query, built once per dialect (its parameters bound per call)."""

    def near(column: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
        if sqlite:  # a range: SQLite's LIKE (case-insensitive) never uses an index
            inside = sa.and_(column > sa.bindparam("low"), column < sa.bindparam("high"))
        else:  # PostgreSQL: the text_pattern_ops index answers a left-anchored LIKE
            inside = column.like(sa.bindparam("pattern"), escape="/")
        return sa.or_(column.in_(sa.bindparam("ancestors", expanding=True)), inside)

    parts = []
    for table, is_dropped in ((entries, False), (dropped, True)):
        who = (table.c.id, table.c.namespace, table.c.name, table.c.kind)
        # 0 live, 1 dropped, 2 released (constants: no bound parameter to type)
        flag = sa.case((dropped.c.released_ms.is_(None), 1), else_=2) if is_dropped else sa.literal_column("0")
        own = sa.select(*who, table.c.location, sa.literal_column("'location'").label("what"), flag.label("state"))
        parts.append(own.where(near(table.c.location), table.c.id != sa.bindparam("exclude")))
        written = sa.select(*who, paths.c.location, paths.c.property, flag)
        written = written.select_from(paths.join(table, table.c.id == paths.c.entry_id))
        parts.append(written.where(near(paths.c.location), table.c.id != sa.bindparam("exclude")))
    return sa.union_all(*parts)


_OVERLAPPING = {True: _overlapping_statement(True), False: _overlapping_statement(False)}


def supersede(conn: Connection, ids: Collection[int]) -> None:
    """Forget the dropped entries a register of the same table supersedes (``Catalog.register``):
    only while they are dropped without purge and no purge began, else 409."""
    for dropped_id in ids:
        gone = conn.execute(
            dropped.delete().where(
                dropped.c.id == dropped_id, dropped.c.purge.is_(False), dropped.c.purging_ms.is_(None)
            )
        ).rowcount
        if gone != 1:
            raise errors.AlreadyExists("A dropped entry holding the location changed meanwhile: try again")
        forget_records(conn, [dropped_id])


def record_paths(conn: Connection, entry_id: int, write_paths: Mapping[str, str]) -> None:
    """The entry's write paths are ``write_paths`` from now on."""
    conn.execute(paths.delete().where(paths.c.entry_id == entry_id))
    if write_paths:
        conn.execute(
            paths.insert(), [{"entry_id": entry_id, "property": k, "location": v} for k, v in write_paths.items()]
        )


def paths_of(conn: Connection, entry_id: int) -> dict[str, str]:
    rows = conn.execute(sa.select(paths.c.property, paths.c.location).where(paths.c.entry_id == entry_id))
    return {r.property: r.location for r in rows}


# The advisory lock key that serialises location claims on PostgreSQL (any constant the catalog owns).
LOCATIONS_LOCK = 0x1CEB_E4C0
