"""Which locations a table or view owns: the rule that keeps one entry's commits, purge or
registration away from another's files.

Every location must lie in the allowed roots (``locations.Locations``, 403 outside), and an
entry's location must not equal, contain or lie inside another entry's (409). The ``write.*.path``
properties put a table's files elsewhere: they must lie in the allowed roots too, and the metadata
path, where the server itself writes, in no other entry's location.

The files a commit adds must be the table's own too (``check_added_files``): the manifest list of each
snapshot it adds and each statistics file it sets, refused 403 otherwise. Purge would skip them anyway
(``Ownership.owned``), but a table that names another table's files, or files outside the allowed
roots, is refused when it is made, not discovered when it is dropped. Only what the commit adds: the
snapshots and statistics a table already has (a registered table's foreign paths) still load and commit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from catalog import errors
from catalog.locations import Locations, is_within, normalise
from catalog.store.entries import LocationTaken, Store

# Properties that put a table's files somewhere other than under its location.
PATH_PROPERTIES = ("write.metadata.path", "write.data.path", "write.object-storage.path", "write.folder-storage.path")


class Ownership:
    def __init__(self, store: Store, locations: Locations) -> None:
        self.store = store
        self.locations = locations

    def claim(self, location: str, exclude_id: int | None = None) -> str:
        """The normalised ``location`` if an entry may live there (``exclude_id``: the entry itself)."""
        normal = self.locations.check(location)
        for other in self.store.overlapping(normal, exclude_id):
            raise LocationTaken(location, other)
        return normal

    def check_paths(self, properties: dict[str, str], exclude_id: int | None = None) -> None:
        """``write.*.path`` properties: in the allowed roots; the metadata path in no other entry."""
        for key in PATH_PROPERTIES:
            if (value := properties.get(key)) is None:
                continue
            normal = self.locations.check(value, f"{key} property")
            if key == "write.metadata.path":
                for other in self.store.overlapping(normal, exclude_id):
                    if is_within(normal, other.location):
                        raise errors.AlreadyExists(
                            f"{key} lies in the location of another table or view",
                            detail=f"{value} lies in {other.kind} {'.'.join((*other.namespace, other.name))}",
                        )

    def check_new(self, entry_id: int | None, base: dict[str, Any] | None, new: dict[str, Any]) -> str:
        """A commit's new metadata: the same rules as a create for what it moved (a create: all of
        it). Returns the entry's normalised location. Costs no SQL when nothing moved (commits)."""
        moved = base is None or new["location"] != base["location"]
        location = self.claim(new["location"], entry_id) if moved else normalise(new["location"])
        before = (base or {}).get("properties") or {}
        after = new.get("properties") or {}
        if base is None or any(before.get(k) != after.get(k) for k in PATH_PROPERTIES):
            self.check_paths(after, entry_id)
        self.check_added_files(entry_id, base, new, location)
        return location

    def check_added_files(
        self, entry_id: int | None, base: dict[str, Any] | None, new: dict[str, Any], location: str
    ) -> None:
        """The manifest lists and statistics files ``new`` adds to ``base``: each in the table's own
        locations (``owned``), else 403 (400 when malformed). A path under the table's location is its
        own without a query: no other entry may lie inside it (``claim``)."""
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
        (those the policy allows), and not inside any other entry's location."""
        prefixes = [normalise(doc["location"])]
        properties = doc.get("properties") or {}
        for key in PATH_PROPERTIES:
            if (value := properties.get(key)) is not None:
                try:
                    prefixes.append(self.locations.check(value))
                except errors.IcebergError:
                    continue
        others = [o.location for p in prefixes for o in self.store.overlapping(p, exclude_id)]

        def owned(path: str) -> bool:
            try:
                normal = normalise(path)
            except errors.IcebergError:
                return False
            return (
                self.locations.allows(normal)
                and any(is_within(normal, p) for p in prefixes)
                and not any(is_within(normal, o) for o in others)
            )

        return owned


def added_files(base: dict[str, Any] | None, new: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, path) of each manifest list and statistics file ``new`` has that ``base`` has not. The
    engine shares the base's untouched lists and snapshot objects, so an unchanged list costs nothing
    and a snapshot is new when it is not one of the base's objects."""
    base = base or {}
    out: list[tuple[str, str]] = []
    before, after = base.get("snapshots") or [], new.get("snapshots") or []
    if after is not before:
        known = {id(snapshot) for snapshot in before}
        for snapshot in after:
            if id(snapshot) not in known and snapshot.get("manifest-list") is not None:
                out.append((f"manifest-list of snapshot {snapshot.get('snapshot-id')}", snapshot["manifest-list"]))
    for key in ("statistics", "partition-statistics"):
        before, after = base.get(key) or [], new.get(key) or []
        if after is before:
            continue
        files = {(f.get("snapshot-id"), f.get("statistics-path")) for f in before}
        for f in after:
            if (f.get("snapshot-id"), f.get("statistics-path")) not in files:
                out.append((f"statistics-path of {key} for snapshot {f.get('snapshot-id')}", f["statistics-path"]))
    return out
