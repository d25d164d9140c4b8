"""View use cases: the same pointer table and the same compare-and-swap as tables
(``Catalog.swap``), with the pure view commit step from ``views``."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence

from pyiceberg.schema import Schema
from pyiceberg.view.metadata import ViewMetadata, ViewVersion

from . import commit, errors, views
from .files import MetadataFile
from .locations import normalise
from .service import Catalog, Namespace, check_name, check_namespace, ident, not_committed
from .store import Entry, KeyRecord


class Views:
    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.files = catalog.files
        self.store = catalog.store

    def entry(self, ns: Namespace, name: str) -> Entry:
        entry = self.store.get_entry(ns, name)
        if entry is None or entry.kind != "view":
            raise errors.NoSuchView(f"View does not exist: {ident(ns, name)}")
        return entry

    def list(self, ns: Namespace, after: str | None, limit: int | None) -> list[str]:
        self.catalog.load_namespace(ns)
        return self.store.list_entries(ns, "view", after, limit)

    def load(self, ns: Namespace, name: str) -> MetadataFile:
        file = self.files.read(self.entry(ns, name).metadata_location)
        file.view  # noqa: B018 - parse now: a broken file is an error here, not in the response
        return file

    def create(
        self,
        ns: Namespace,
        name: str,
        location: str | None,
        schema: Schema,
        version: ViewVersion,
        properties: dict[str, str],
    ) -> MetadataFile:
        check_name(name)
        ns_props = self.catalog.load_namespace(ns)
        self.catalog.name_must_be_free(ns, name, "view")
        metadata = views.new_view(self.catalog.location_for(ns, name, ns_props, location), schema, version, properties)
        return self._insert(ns, name, self.files.write_view(_next_location(metadata, None), metadata))

    def register(self, ns: Namespace, name: str, location: str) -> MetadataFile:
        check_name(name)
        self.catalog.load_namespace(ns)
        self.catalog.name_must_be_free(ns, name, "view")
        file, own = self.catalog.registrable(location, "view", None)
        self.store.insert_entry(ns, name, "view", location, own)
        return file

    def drop(self, ns: Namespace, name: str) -> None:
        if not self.store.delete_entry(self.entry(ns, name)):
            raise errors.NoSuchView(f"View does not exist: {ident(ns, name)}")

    def rename(self, src: tuple[Namespace, str], dst: tuple[Namespace, str]) -> None:
        entry = self.entry(*src)
        check_namespace(dst[0])
        check_name(dst[1])
        self.store.rename_entry(entry, *dst)

    def replace(
        self,
        ns: Namespace,
        name: str,
        requirements: Sequence[views.AssertViewUUID],
        updates: Sequence[views.ViewUpdate],
        key: KeyRecord | None = None,
    ) -> MetadataFile:
        """The view commit loop: the table loop's steps with view metadata (see ``service``)."""
        for attempt in range(self.catalog.settings.commit_max_attempts):
            entry = self.entry(ns, name)
            current = self.files.read(entry.metadata_location)
            views.check_requirements(requirements, current.view)
            new = views.apply_updates(current.view, updates)
            if new is current.view:
                return current
            if new.location != current.view.location:
                self.catalog.claim(new.location, entry.id)
            try:
                written = self.files.write_view(_next_location(new, entry.metadata_location), new)
            except errors.IcebergError as e:
                raise not_committed(e) from e
            if self.catalog.swap([(entry, written)], key):
                self.catalog.record_moves([(entry, written)])
                return written
            recheck = functools.partial(self._recheck, ns, name, requirements)
            self.catalog.lost(ident(ns, name), attempt, [(entry, written)], recheck)
        raise self.catalog.gave_up(ident(ns, name))

    def _recheck(self, ns: Namespace, name: str, requirements: Sequence[views.AssertViewUUID]) -> None:
        views.check_requirements(requirements, self.files.read(self.entry(ns, name).metadata_location).view)

    def _insert(self, ns: Namespace, name: str, written: MetadataFile) -> MetadataFile:
        try:
            self.store.insert_entry(ns, name, "view", written.location, normalise(written.view.location))
        except errors.IcebergError:
            self.files.delete(written.location)
            raise
        self.files.remember(written)
        return written


def _next_location(metadata: ViewMetadata, current: str | None) -> str:
    version = commit.version_of(current) + 1 if current else 0
    return f"{metadata.location.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"
