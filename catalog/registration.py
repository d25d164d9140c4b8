"""Registering an existing metadata file as a table or view (``Catalog.register``, once the name is
checked): the file's checks, each before the next is read, the locations it claims (superseding the
dropped entries of the same table the caller may drop) and the new or overwritten entry with its
event.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

from catalog import errors
from catalog.commit.changes import TABLE, Kind
from catalog.database.entries import Entries
from catalog.database.ownership import PATH_PROPERTIES, Ownership
from catalog.database.pointers import Entry
from catalog.events import records
from catalog.locations import is_within, normalise
from catalog.metadata import registered
from catalog.names import dotted
from catalog.placement import Placement
from catalog.storage.metadata_files import MetadataFile, MetadataFiles

log = logging.getLogger("catalog.usecases")  # the use cases' logger: their lines are as they were
Namespace = tuple[str, ...]


class Registration:
    """``register`` and ``register-view`` past the name check, over the parts they use."""

    def __init__(self, files: MetadataFiles, entries: Entries, ownership: Ownership, placement: Placement) -> None:
        self.files = files
        self.entries = entries
        self.ownership = ownership
        self.placement = placement

    def register(
        self,
        kind: Kind,
        ns: Namespace,
        name: str,
        location: str,
        replaced: Entry | None,
        superseding: Collection[int],
    ) -> MetadataFile:
        """The entry ``ns.name`` (``replaced``: the table a register with overwrite points elsewhere)
        pointing at the metadata file at ``location``, checked as ``Catalog.register`` says."""
        self.ownership.locations.check(location, "metadata location")
        holder = self.entries.referencing(location)
        if holder is not None and (replaced is None or holder.id != replaced.id):
            other = holder.ident
            raise errors.AlreadyExists(
                "Metadata file is the current metadata of another table or view",
                detail=f"{location} is the current metadata of {holder.kind} {other}",
            )
        file = self.files.read(location)
        try:
            doc = (registered.check_table if kind is TABLE else registered.check_view)(file.data)
        except errors.IcebergError as e:  # the file may not be the client's to read: the field, not its value
            reason = e.message.rsplit(": ", 1)[0]
            raise type(e)(f"Invalid {kind.name} metadata file {location}: {reason}") from e
        exclude = replaced.id if replaced is not None else None
        uuid_key = kind.uuid_key
        claimed = [normalise(doc["location"])]
        if kind is TABLE:
            properties = doc.get("properties") or {}
            claimed += [normalise(properties[k], k) for k in PATH_PROPERTIES if properties.get(k) is not None]
        superseded = self.placement.superseded(kind, claimed, doc.get(uuid_key), superseding, exclude)
        own = self.ownership.claim(doc["location"], exclude, superseded)
        homes = [own]
        paths: dict[str, str] = {}
        if kind is TABLE:
            paths = self.ownership.check_paths(doc.get("properties") or {}, exclude, superseded)
            homes += [p for k, p in paths.items() if k == "write.metadata.path"]
        if not any(is_within(normalise(location), home) for home in homes):
            raise errors.BadRequest(
                f"Metadata file {location} is not in the location of the {kind.name} it describes ({doc['location']})"
            )
        event = records.entry_event(
            records.REGISTER, kind.name, ns, name, None, metadata_location=location, overwrite=replaced is not None,
            **{uuid_key.replace("-", "_"): doc.get(uuid_key)},
        )  # fmt: skip
        if replaced is not None:
            self.entries.overwrite_entry(ns, name, location, own, event, paths, superseded)
        else:
            self.entries.insert_entry(
                ns, name, kind.name, location, own, event=event, write_paths=paths, superseding=superseded
            )
        if superseded:
            log.info("register of %s superseded the dropped entries %s", dotted(ns, name), sorted(superseded))
        return file
