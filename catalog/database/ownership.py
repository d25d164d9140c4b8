"""Which locations a table or view owns: the rule that keeps one entry's commits, purge or
registration away from another's files.

Every location must lie in the allowed roots (``locations.Locations``, 403 outside). Every entry
owns its location and, for a table, its ``write.*.path`` prefixes (they put a table's files
elsewhere, normal on object stores), while it is live and
while it is dropped (until it is purged; a released drop keeps them): no prefix of one entry may equal, contain or
lie inside a prefix of another (409), the prefixes are recorded in the database next to the
location (``entry_paths``) so that the check is one indexed query, and each lies strictly below a
root (a table at the warehouse root would own the whole warehouse). Every job that deletes files by
itself (purge, expiry, orphan removal, compaction and manifest rewrite clean-up) deletes only what
``Ownership.owned`` accepts: inside the table's own prefixes and inside no other entry's.

The manifest lists a commit adds must be the table's own too (``check_added_files``), refused 403
otherwise: the catalog reads them. Purge would skip them anyway, but a table that names another
table's files, or files outside the allowed roots, is refused when it is made, not discovered when
it is dropped. Only what the commit adds: the snapshots a table already has (a registered table's
foreign paths) still load and commit. Statistics files may lie anywhere, as Iceberg Java allows:
the catalog never reads them, and deletes one only if the table owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from catalog import errors
from catalog.database.entries import Entries
from catalog.database.location_rows import LocationTaken
from catalog.locations import Locations, is_within, normalise

# Properties that put a table's files somewhere other than under its location.
PATH_PROPERTIES = ("write.metadata.path", "write.data.path", "write.object-storage.path", "write.folder-storage.path")


class Ownership:
    def __init__(self, entries: Entries, locations: Locations) -> None:
        self.entries = entries
        self.locations = locations

    def claim(self, location: str, exclude_id: int | None = None, superseded: Collection[int] = ()) -> str:
        """The normalised ``location`` if an entry may live there (``exclude_id``: the entry itself;
        ``superseded``: dropped entries a register forgets, see ``Catalog.register``)."""
        normal = self._below_a_root(self.locations.check(location), location, "location")
        for other in self.entries.overlapping(normal, exclude_id):
            if other.id not in superseded:
                raise LocationTaken(location, other)
        return normal

    def check_paths(
        self, properties: dict[str, str], exclude_id: int | None = None, superseded: Collection[int] = ()
    ) -> dict[str, str]:
        """``write.*.path`` properties, owned like a location: each in the allowed roots and below
        one (403/400), and overlapping no other entry's location or write paths (409). The
        normalised prefixes by property."""
        out: dict[str, str] = {}
        for key in PATH_PROPERTIES:
            if (value := properties.get(key)) is None:
                continue
            normal = self._below_a_root(self.locations.check(value, f"{key} property"), value, f"{key} property")
            for other in self.entries.overlapping(normal, exclude_id):
                if other.id not in superseded:
                    raise LocationTaken(value, other, what=key)
            out[key] = normal
        return out

    def _below_a_root(self, normal: str, given: str, what: str) -> str:
        """A table's files lie strictly below the warehouse root or an allowed location: a table AT
        a root would own the whole root, and its purge would sweep everything in it."""
        if normal in self.locations.roots:
            raise errors.BadRequest(
                f"Invalid {what} {given!r}: it is the warehouse root or an allowed location itself; "
                "a table's files go in a directory below it"
            )
        return normal

    def check_new(
        self,
        entry_id: int | None,
        base: dict[str, Any] | None,
        new: dict[str, Any],
        superseded: Collection[int] = (),
    ) -> tuple[str, dict[str, str] | None]:
        """A commit's new metadata: the same rules as a create for what it moved (a create: all of
        it). The entry's normalised location, and its write paths when they changed (None: as
        they were). Costs no SQL when nothing moved (commits)."""
        moved = base is None or new["location"] != base["location"]
        location = self.claim(new["location"], entry_id, superseded) if moved else normalise(new["location"])
        before = (base or {}).get("properties") or {}
        after = new.get("properties") or {}
        paths = None
        if "view-uuid" not in new and (base is None or any(before.get(k) != after.get(k) for k in PATH_PROPERTIES)):
            paths = self.check_paths(after, entry_id, superseded)
        self.check_added_files(entry_id, base, new, location)
        return location, paths

    def check_added_files(
        self, entry_id: int | None, base: dict[str, Any] | None, new: dict[str, Any], location: str
    ) -> None:
        """The manifest lists ``new`` adds to ``base`` (the catalog reads them: purge, maintenance,
        planning): each in the table's own locations (``owned``), else 403 (400 when malformed). A
        path under the table's location is its own without a query: no other entry may lie inside
        it (``claim``)."""
        owned: Callable[[str], bool] | None = None
        for what, path in added_files(base, new):
            if is_within(normalise(path, what), location):
                continue
            if owned is None:
                owned = self.owned(new, entry_id)
            if not owned(path):
                raise errors.Forbidden(
                    f"Invalid {what}: not in the table's own locations (its location, or its "
                    "write.*.path properties inside the allowed locations)"
                )

    def owned(self, doc: dict[str, Any], exclude_id: int | None = None) -> Callable[[str], bool]:
        """Whether a path is the table's own: inside its location or its ``write.*.path`` prefixes
        (those the policy allows), and inside no other live or dropped entry's location or write
        paths. What every deleting job asks before it deletes a file."""
        prefixes = [normalise(doc["location"])]
        properties = doc.get("properties") or {}
        for key in PATH_PROPERTIES:
            if (value := properties.get(key)) is not None:
                try:
                    prefixes.append(self.locations.check(value))
                except errors.IcebergError:
                    continue
        others = [o.location for p in prefixes for o in self.entries.overlapping(p, exclude_id)]

        def owned(path: str) -> bool:
            try:
                normal = normalise(path)
            except errors.IcebergError:
                return False
            return (
                self.locations.allows(normal)
                and normal not in self.locations.roots
                and any(is_within(normal, p) for p in prefixes)
                and not any(is_within(normal, o) for o in others)
            )

        return owned


def added_files(base: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, path) of each manifest list ``new`` has that ``base`` has not. The engine shares the
    base's untouched snapshot objects, so a snapshot is new when it is not one of the base's objects.
    Statistics files are not checked, as Iceberg Java does not: the catalog never reads one, and
    deletes one only inside the table's own locations (``owned``)."""
    base = base or {}
    out: list[tuple[str, str]] = []
    before, after = base.get("snapshots") or [], new.get("snapshots") or []
    if after is not before:
        known = {id(snapshot) for snapshot in before}
        for snapshot in after:
            if id(snapshot) not in known and snapshot.get("manifest-list") is not None:
                out.append((f"manifest-list of snapshot {snapshot.get('snapshot-id')}", snapshot["manifest-list"]))
    return out
