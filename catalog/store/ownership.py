"""Which locations a table or view owns: the rule that keeps one entry's commits, purge or
registration away from another's files.

Every location must lie in the allowed roots (``locations.Locations``, 403 outside), and an
entry's location must not equal, contain or lie inside another entry's (409). The ``write.*.path``
properties put a table's files elsewhere: they must lie in the allowed roots too, and the metadata
path, where the server itself writes, in no other entry's location.
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
                            f"{key} {value} lies in the location of {other.kind} "
                            f"{'.'.join((*other.namespace, other.name))}"
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
        return location

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
