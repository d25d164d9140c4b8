"""Where the catalog's entries go (``Catalog``'s collaborator for locations): a new entry's location
(as requested, under its namespace's, or in the warehouse; made free), a namespace's ``location``
checked against the others', the location a staged create writes to, the released dropped entries a
create or a register takes over, and the backfill of the locations of entries older than the
ownership rule. The rule itself (what an entry owns, the claims) is ``database/ownership.py``'s.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection

from catalog import errors, names
from catalog.commit.changes import Kind
from catalog.database.dropped import DroppedRows
from catalog.database.entries import Entries
from catalog.database.location_rows import HeldByDropped
from catalog.database.ownership import PATH_PROPERTIES, Ownership
from catalog.database.pointers import Pointers
from catalog.locations import normalise, overlaps, segment
from catalog.storage.backends import Storage
from catalog.storage.metadata_files import MetadataFiles

log = logging.getLogger("catalog.usecases")  # the use cases' logger: their lines are as they were
Namespace = tuple[str, ...]


class Placement:
    """The location choices and checks of the use cases, over the parts they read."""

    def __init__(
        self,
        storage: Storage,
        files: MetadataFiles,
        pointers: Pointers,
        entries: Entries,
        dropped: DroppedRows,
        ownership: Ownership,
    ) -> None:
        self.storage = storage
        self.files = files
        self.pointers = pointers
        self.entries = entries
        self.dropped_rows = dropped
        self.ownership = ownership

    def check_namespace_location(self, ns: Namespace, location: str) -> None:
        """A namespace's ``location``: in the allowed roots (403), and in no other namespace's
        directory, nor containing one, nor overlapping a table or view of another namespace (400):
        its tables would otherwise be created among another namespace's files. Its own ancestors and
        descendants are exempt (nested namespaces nest their directories). The message names no other
        namespace or entry (the caller may not see them); the log has which."""
        normal = self.ownership.locations.check(location, "namespace location")

        def related(other: Namespace) -> bool:
            shorter, longer = sorted((other, ns), key=len)
            return longer[: len(shorter)] == shorter

        root = self.storage.root().rstrip("/")
        for other, other_location in self.entries.namespace_locations():
            if related(other):
                continue
            try:
                directory = normalise(other_location or "/".join([root, *other]))
            except errors.IcebergError:
                continue  # a namespace stored before locations were checked: nothing to compare
            if overlaps(normal, directory):
                raise errors.BadRequest(
                    "Invalid namespace location: it overlaps the directory of another namespace",
                    detail=f"{location} overlaps namespace {'.'.join(other)} at {directory}",
                )
        for entry in self.entries.overlapping(normal):
            if not related(entry.namespace):
                raise errors.BadRequest(
                    "Invalid namespace location: it overlaps the location of a table or view of another namespace",
                    detail=f"{location} overlaps {entry.kind} {entry.ident}",
                )

    def staged_location(self, ns: Namespace, name: str, ns_props: dict[str, str]) -> str | None:
        """``Catalog.staged_location`` once the name is checked and the namespace read."""
        base = self.namespace_base(ns, ns_props)
        chosen = self.ownership.locations.check(f"{base}/{segment(name)}")
        if self.pointers.get_entry(ns, name) is not None or self.entries.overlapping(chosen):
            return None
        return chosen

    def location_for(
        self,
        ns: Namespace,
        name: str,
        ns_props: dict[str, str],
        requested: str | None,
        superseded: Collection[int] = (),
    ) -> str:
        """A new entry's location: as requested, under the namespace's, or in the warehouse.

        A requested location must be free (``Ownership.claim``; ``superseded``: but for the released
        dropped entries the create takes over). A location the server chooses is
        made free: when ``<base>/<name>`` is taken (say, by a table renamed away from this name,
        which keeps its files), a unique suffix is added, so the new entry never shares a directory
        with another.
        """
        if requested:
            self.ownership.claim(requested, None, superseded)
            return requested.rstrip("/")
        base = self.namespace_base(ns, ns_props)
        chosen = f"{base}/{segment(name)}"
        if self.entries.overlapping(self.ownership.locations.check(chosen)):
            # cut to leave room for the suffix: a path segment is at most MAX_NAME_BYTES on disk too
            stem = segment(name).encode()[: names.MAX_NAME_BYTES - 9].decode(errors="ignore")
            stem = stem[:-2] if stem.endswith("%2") else stem[:-1] if stem.endswith("%") else stem
            chosen = f"{base}/{stem}-{uuid.uuid4().hex[:8]}"
        self.ownership.claim(chosen)
        return chosen

    def namespace_base(self, ns: Namespace, ns_props: dict[str, str]) -> str:
        """Where the namespace's entries go by default: its ``location`` property, or the warehouse
        followed by one segment per level (``/`` in a level encoded: ``locations.segment``)."""
        default = "/".join([self.storage.root().rstrip("/"), *map(segment, ns)])
        return (ns_props.get("location") or default).rstrip("/")

    def superseded(
        self,
        kind: Kind,
        claimed: list[str],
        same_uuid: str | None,
        allowed: Collection[int],
        exclude: int | None = None,
    ) -> frozenset[int]:
        """The dropped tables or views (dropped without purge, no purge begun) holding the
        ``claimed`` locations that a register of the same one (``same_uuid``) or a create (None:
        released ones only, never one that may still be undropped) takes over. ``HeldByDropped`` when some
        are not in ``allowed`` yet; anything else holding them is refused by the claims that follow."""
        holders = {o.id for p in claimed for o in self.entries.overlapping(p, exclude) if o.dropped}
        taken: set[int] = set()
        released = False
        for held in holders:
            gone = self.dropped_rows.get_dropped(held, released=True)
            if gone is None or gone.kind != kind.name or gone.purge or gone.purging_ms is not None:
                continue
            released |= gone.released_ms is not None
            if same_uuid is None:
                if gone.released_ms is not None:
                    taken.add(held)
                continue
            try:
                if self.files.read(gone.metadata_location).data.get(kind.uuid_key) == same_uuid:
                    taken.add(held)
            except errors.IcebergError:
                continue
        if taken - set(allowed):
            raise HeldByDropped(sorted(taken - set(allowed)), released)
        return frozenset(taken)

    def backfill_locations(self, batch: int = 500) -> int:
        """Fill in the locations and write paths of live and dropped entries created before
        migrations 0003 and 0011 (read from their metadata files), so the ownership rule covers them
        too. Returns how many were filled."""
        filled = 0
        while entries := self.entries.entries_without_location(batch):
            for entry in entries:
                try:
                    doc = self.files.read(entry.metadata_location).data
                    props = (doc.get("properties") or {}) if entry.kind == "table" else {}
                    paths = {k: normalise(props[k], k) for k in PATH_PROPERTIES if props.get(k) is not None}
                    self.entries.record_locations(entry.id, entry.metadata_location, normalise(doc["location"]), paths)
                    filled += 1
                except Exception as e:  # noqa: BLE001 - an unreadable entry keeps NULL; reported once
                    log.warning("cannot record the location of %s: %s", entry.ident, e)
            if len(entries) < batch or not filled:
                break
        return filled
