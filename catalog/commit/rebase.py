"""Server-side rebase of pure appends: what a client's retry of a FastAppend/MergeAppend does after a
409, done by the catalog without the round trip.

A table commit that qualifies (``rebasable.candidate``: an append whose branch B moved from the
client's parent X to Y, with rebase on or B moved only by the catalog's own maintenance snapshots) is
rebuilt on Y:

* the client's manifest list is read (bounded, confined to the table's own locations); every manifest
  the snapshot adds (``added_snapshot_id`` = its id) must hold data files, ADDED entries whose
  sequence numbers and (v3) row ids are inherited, and no DELETED entry (checked in the list and in
  the manifest itself); the other manifests must be X's, each once;
* X's manifests it left out are those that hold no live file (which writers leave out) and those it
  merged: Java's MergeAppend (Spark's ``INSERT``, pyiceberg's merge-append), once a spec has
  ``commit.manifest.min-count-to-merge`` manifests, rewrites X's manifests into its new one, their
  live files as EXISTING entries. Those are accepted when the files carried as EXISTING are exactly
  the live files of X's manifests it left out (so, with the ones it kept unchanged, exactly X's live
  files): by path, each once, with the snapshot id and data and file sequence numbers they have in X
  (as a reader inherits them; X's left-out manifests are read, at most ``MAX_MERGED_MANIFESTS`` and
  ``MAX_MERGED_BYTES``, confined as above). Anything else is refused;
* a merged manifest's ADDED entries are written create-only, next to the client's list, into a new
  manifest of this snapshot (``rebased-<uuid>-m<n>.avro``, sequence numbers inherited); its EXISTING
  entries are dropped, since Y's manifests hold Y's live files (Java's retry on a refreshed base
  would merge Y's instead: the same live files);
* a new manifest list = the new manifests (the client's, or those written for its merged ones)
  followed by Y's manifests is written create-only next to the client's (pyiceberg's Avro writers;
  the new manifests get the new sequence number and, v3, fresh ``first_row_id``s from the table's
  ``next-row-id``; Y's list is carried as Avro blocks, ``manifest_io.extend``, when its schema and
  codec allow, else re-encoded);
* the snapshot keeps its id (Java's post-commit cleanup keeps exactly the files the committed
  snapshot references), gets parent Y, sequence number last+1, a new timestamp, recomputed
  ``first-row-id``/``added-rows`` (v3) and summary totals (Y's totals + this snapshot's changes).

That is exactly Java's ``SnapshotProducer.apply`` on a refreshed base for a ``FastAppend``: new
manifests first, then the base snapshot's manifests, no validation (appends conflict with nothing).
A refusal never changes the answer: the caller raises the original 409.

``Rebaser.rebuild`` does the I/O, through ``catalog.storage.manifests`` (pyiceberg's Avro reader and
writers over the server's storage), around the pure computations of ``rebuilt.py`` (the checks of the
list's counts, the rebuilt list's records, the summary totals). The files a rebase writes are named in
``Rebased.files``; the engine deletes them when the commit does not land.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass

from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile

from catalog import errors
from catalog.commit.rebasable import Candidate
from catalog.commit.rebuilt import (
    MAX_FILE_BYTES,
    NotRebasable,
    bounded,
    check_counts,
    fresh,
    holds_files,
    identity,
    numbered,
    owned,
    renumbered,
    with_totals,
)
from catalog.commit.rollback import is_int
from catalog.storage.backends import Storage
from catalog.storage.manifests import (
    ENTRY_READ,
    FILE_ROW_ID,
    FIRST_ROW_ID,
    AvroBody,
    BufferOutput,
    added_by,
    body_of,
    extend,
    leading_added,
    list_writer,
    manifest_writer,
    read_records,
    spec_and_schema,
)

log = logging.getLogger("catalog.rebase")

# The most manifests one rebased append may add (each is read to check its entries).
MAX_NEW_MANIFESTS = 32
# A merged append (Java's MergeAppend past ``commit.manifest.min-count-to-merge``): the most of its
# parent's manifests it may have merged, and their bytes in all (each is read to check that the
# merge carried exactly their live files; Java packs a merge into ``commit.manifest.target-size-bytes``,
# 8 MB by default).
MAX_MERGED_MANIFESTS = 1_000
MAX_MERGED_BYTES = 64 * 2**20
# Manifest lists are cached parsed (they never change): the bound, in manifests across all lists.
CACHED_MANIFESTS = 50_000
# A rebased list carries its head's Avro blocks as bytes (one block more per rebase); past this many
# blocks the list is written out whole again, one block, which bounds what readers pay per block.
MAX_BLOCKS = 64
# A group's committer reads and writes its members' files in parallel (``GroupFiles``): reads and
# writes in flight, the largest file read ahead (a list of 1,000 manifests is ~100-250 KB), the
# manifests read ahead per member (a fast append adds one).
PREFETCH_THREADS = 8
PREFETCH_BYTES = 2**20
PREFETCH_MANIFESTS = 2


REBASE_STORAGE_FAILED = (
    "Storage unavailable while rebasing the append onto the branch's new head (nothing was committed); retry later"
)


def storage_failed(e: BaseException) -> bool:
    """A rebase that failed because the store did (a full disk, a store that does not answer, the
    server's own error), not because the append cannot be rebased: a 503, nothing committed. A 409
    would send the client to refresh and retry into the same failure."""
    if isinstance(e, OSError):
        return True
    return isinstance(e, errors.IcebergError) and e.code >= 500


@dataclass(frozen=True, slots=True)
class Rebased:
    requirements: list[dict]
    updates: list[dict]
    manifest_list: str  # written, not yet committed: delete it if the commit does not land
    manifests: tuple[str, ...] = ()  # the same: the new manifests written for a merged append

    @property
    def files(self) -> tuple[str, ...]:
        return (self.manifest_list, *self.manifests)


class Rebaser:
    """Reads and writes manifest lists through the server's storage (confined, size-capped)."""

    def __init__(self, storage: Storage, cache_manifests: int = CACHED_MANIFESTS) -> None:
        self.storage = storage
        self._cache: OrderedDict[str, tuple[tuple[ManifestFile, ...], AvroBody]] = OrderedDict()
        # the entries' manifests, in all (about 1 KB of memory each, parsed, and their bytes)
        self._budget = cache_manifests
        self._held = 0
        self._lock = threading.Lock()
        self._local = threading.local()  # a group committer's GroupFiles (``for_group``)
        self._executor: ThreadPoolExecutor | None = None

    def rebuild(self, c: Candidate, base: dict, now_ms: int) -> Rebased:
        """Write the rebased manifest list; the commit to apply instead. Raises ``NotRebasable``."""
        version, snapshot_id = base["format-version"], c.snapshot["snapshot-id"]
        client_list = owned(c.snapshot.get("manifest-list"), base)
        parent, parent_body = self._list(owned(c.parent.get("manifest-list"), base))
        raw = bounded(self._read(client_list))
        new = added_by(raw, snapshot_id, parent_body)  # the client's list is read once: not cached
        merged: list[ManifestFile] = []  # the parent's manifests with live files it left out
        if new is None:  # not shown by its bytes: every manifest decoded and compared by path
            client, _ = read_records(raw)
            new = [m for m in client if m.added_snapshot_id == snapshot_id]
            rest = [m.manifest_path for m in client if m.added_snapshot_id != snapshot_id]
            if len(set(rest)) != len(rest) or not set(rest) <= {m.manifest_path for m in parent}:
                raise NotRebasable("the manifests it keeps are not its parent's")
            # A writer may leave out the parent's manifests that hold no live file (only DELETED
            # entries: what a compaction or an overwrite leaves), as pyiceberg's and Java's do; the
            # others it left out it must have merged into its new manifests (``_check_merged``).
            merged = [m for m in parent if m.manifest_path not in set(rest) and holds_files(m)]
        if not new or len(new) > MAX_NEW_MANIFESTS:
            raise NotRebasable(f"{len(new)} new manifests")
        for manifest in new:
            check_counts(manifest, c.snapshot, version)
        merges = any(m.existing_files_count for m in new)
        if merged and not merges:
            raise NotRebasable("the manifests it keeps are not its parent's")
        if merges and not merged:
            raise NotRebasable("a manifest with existing or deleted entries, but none of its parent's manifests merged")
        carried: list[tuple[str, tuple]] = []  # (path, snapshot id and sequence numbers) of EXISTING entries
        added: dict[str, list[ManifestEntry]] = {}  # a merged manifest's added entries, by its path
        for manifest in new:
            mine, theirs = self._check_entries(manifest, c.snapshot, base)
            if theirs:
                carried.extend((e.data_file.file_path, identity(e, manifest)) for e in theirs)
                added[manifest.manifest_path] = mine
        if merges:
            self._check_merged(carried, merged, base)
        head, head_body = self._list(owned(c.head.get("manifest-list"), base))  # v1's inline lists: refused
        sequence = base.get("last-sequence-number", 0) + 1
        directory = client_list.rsplit("/", 1)[0]
        location = f"{directory}/snap-{snapshot_id}-rebased-{uuid.uuid4()}.avro"
        codec = (base.get("properties") or {}).get("write.avro.compression-codec", "gzip")
        first_row_id = base.get("next-row-id", 0)
        written_manifests: list[str] = []
        try:  # the manifests written for merged ones are deleted if the list is not written
            if added:  # a merged manifest: its added entries alone, in a new manifest (Java's FastAppend's)
                new = self._unmerged(new, added, base, directory, snapshot_id, codec, written_manifests)

            def write(records: list[ManifestFile]) -> tuple[bytes, int]:
                out = BufferOutput(location)
                writer = list_writer(version, out, snapshot_id, c.head["snapshot-id"], sequence, first_row_id, codec)
                with writer:  # assigns the v3 first_row_ids in place
                    writer.add_manifests(records)
                return out.value, writer.next_row_id - first_row_id

            written = None
            if head_body.blocks < MAX_BLOCKS and numbered(head, version):
                mine = [renumbered(m, version, sequence) for m in new]
                raw, added_rows = write(mine)
                written = extend(raw, head_body)  # None: another schema or codec (a client's list)
            if written is None:  # the whole list, re-encoded
                records = [renumbered(m, version, sequence) for m in new] + [fresh(m, version) for m in head]
                raw, added_rows = write(records)
                written = raw, body_of(raw)
                mine, head = records[: len(new)], tuple(records[len(new) :])
            raw, body = written
            self._write(location, raw)
        except BaseException:
            self._delete_quietly(written_manifests)
            raise
        self._remember(location, (*mine, *head), body)  # as written: the next rebase builds on it
        snapshot = {
            **c.snapshot,
            "parent-snapshot-id": c.head["snapshot-id"],
            "timestamp-ms": max(now_ms, c.head.get("timestamp-ms", 0)),
            "manifest-list": location,
            "summary": with_totals(c.snapshot["summary"], c.head.get("summary") or {}),
        }
        if version >= 2:
            snapshot["sequence-number"] = sequence
        if version >= 3:
            snapshot["first-row-id"] = first_row_id
            snapshot["added-rows"] = added_rows
        updates = [{"action": "add-snapshot", "snapshot": snapshot}, c.ref_update]
        return Rebased(c.requirements, updates, location, tuple(written_manifests))

    def _check_entries(
        self, m: ManifestFile, snapshot: dict, base: dict
    ) -> tuple[list[ManifestEntry], list[ManifestEntry]]:
        """Its entries: ADDED data files of this snapshot that inherit sequence numbers and row ids,
        and (a merged manifest) EXISTING data files of earlier snapshots, nothing DELETED. Both, in order."""
        entries, _ = read_records(bounded(self._read(owned(m.manifest_path, base))), ENTRY_READ)
        added, existing = [], []
        for entry in entries:
            if entry.data_file.content != DataFileContent.DATA:
                raise NotRebasable("an entry that adds a delete file")
            if entry.status == ManifestEntryStatus.EXISTING:
                if entry.snapshot_id in (None, snapshot["snapshot-id"]):
                    raise NotRebasable("an existing entry that is not of an earlier snapshot")
                existing.append(entry)
                continue
            mine = entry.snapshot_id in (None, snapshot["snapshot-id"])
            if entry.status != ManifestEntryStatus.ADDED or not mine:
                raise NotRebasable("an entry that is not an added file of this snapshot")
            explicit = (entry.sequence_number, entry.file_sequence_number, entry.data_file[FILE_ROW_ID])
            if explicit != (None, None, None):
                raise NotRebasable("an entry with an explicit sequence number or row id")
            added.append(entry)
        if (len(added), len(existing)) != (m.added_files_count, m.existing_files_count):
            raise NotRebasable("a manifest whose counts do not match its entries")
        return added, existing

    def _check_merged(self, carried: list[tuple[str, tuple]], merged: list[ManifestFile], base: dict) -> None:
        """What a merged append carried as EXISTING is exactly the live files of its parent's
        manifests it left out: each file once, by path, with the snapshot id and sequence numbers it
        has there (read as Java's reader inherits them). Together with the parent's manifests it kept
        as they are, that is every live file of its parent and nothing else."""
        if len(merged) > MAX_MERGED_MANIFESTS:
            raise NotRebasable(f"{len(merged)} of its parent's manifests merged")
        if any(m.content != ManifestContent.DATA for m in merged):
            raise NotRebasable("a delete manifest of its parent's left out")
        wanted: list[tuple[str, int]] = []  # each read at most the length its list gives: the bound in all
        for m in merged:
            if not is_int(m.manifest_length) or not 0 < m.manifest_length <= MAX_FILE_BYTES:
                raise NotRebasable(f"a manifest of its parent's of {m.manifest_length} bytes")
            wanted.append((owned(m.manifest_path, base), m.manifest_length))
        if sum(size for _, size in wanted) > MAX_MERGED_BYTES:
            raise NotRebasable("its parent's manifests it merged are too large to check")

        def read(item: tuple[str, int]) -> bytes:
            return self.storage.read(*item)

        raws = list(self._pool().map(read, wanted)) if len(wanted) > 1 else [read(w) for w in wanted]
        live: dict[str, tuple] = {}
        for m, raw in zip(merged, raws, strict=True):
            for entry in read_records(bounded(raw), ENTRY_READ)[0]:
                if entry.status != ManifestEntryStatus.DELETED:
                    if entry.data_file.file_path in live:
                        raise NotRebasable("a file live twice in its parent")
                    live[entry.data_file.file_path] = identity(entry, m)
        kept = dict(carried)
        if len(kept) != len(carried) or kept != live:
            raise NotRebasable("the files it carried over are not its parent's live files")

    def _unmerged(
        self,
        new: list[ManifestFile],
        added: dict[str, list[ManifestEntry]],
        base: dict,
        directory: str,
        snapshot_id: int,
        codec: str,
        written: list[str],
    ) -> list[ManifestFile]:
        """``new`` with each merged manifest replaced by a new one holding only its ADDED entries
        (none when it added nothing), written create-only next to the client's list; their locations
        are appended to ``written`` as they are written."""
        out: list[ManifestFile] = []
        version = base["format-version"]
        try:
            for m in new:
                entries = added.get(m.manifest_path)
                if entries is None:
                    out.append(m)
                    continue
                if not entries:
                    continue
                location = f"{directory}/rebased-{uuid.uuid4()}-m{len(written)}.avro"
                buffer = BufferOutput(location)
                try:
                    spec, schema = spec_and_schema(base, m.partition_spec_id)
                    with manifest_writer(version, ManifestContent.DATA, spec, schema, buffer, snapshot_id, codec) as w:
                        for entry in entries:
                            entry.data_file.spec_id = m.partition_spec_id
                            w.add(entry)
                    manifest = w.to_manifest_file()
                except (errors.IcebergError, ValueError, TypeError, KeyError) as e:
                    raise NotRebasable(f"its added entries could not be written again: {e}") from e
                self._write(location, buffer.value)
                written.append(location)
                out.append(ManifestFile(*manifest._data[:FIRST_ROW_ID], *([None] if version >= 3 else [])))
        except BaseException:
            self._delete_quietly(written)
            raise
        return out

    def _delete_quietly(self, locations: list[str]) -> None:
        """Files a rebase wrote and will not name after all (in a group: not written yet)."""
        for location in locations:
            self.forget(location)
            try:
                if getattr(self._local, "group", None) is None:
                    self.storage.delete(location)
            except Exception:  # noqa: BLE001 - an orphan is harmless
                log.warning("could not delete uncommitted file %s", location)
        locations.clear()

    @contextmanager
    def for_group(self) -> Iterator[GroupFiles]:
        """For a group's committer: the rebases this thread makes until the end of the block read
        what ``fetch`` read ahead, and leave their lists for ``flush`` to write (see ``GroupFiles``)."""
        files = GroupFiles(self)
        self._local.group = files
        try:
            yield files
        finally:
            self._local.group = None

    def _fetch_one(self, snapshot: dict, base: dict) -> list[tuple[str, bytes]]:
        """A client list and the first manifests it adds, when they are small (``PREFETCH_BYTES``
        each: a group's files in memory at once stay bounded; larger ones are read by the rebase)."""
        files: list[tuple[str, bytes]] = []
        try:
            location = owned(snapshot.get("manifest-list"), base)
            raw = self.storage.read(location)
            if len(raw) <= PREFETCH_BYTES:
                files.append((location, raw))
                for m in leading_added(raw, snapshot.get("snapshot-id"))[:PREFETCH_MANIFESTS]:
                    manifest = self.storage.read(owned(m.manifest_path, base))
                    if len(manifest) <= PREFETCH_BYTES:
                        files.append((m.manifest_path, manifest))
        except Exception:  # noqa: BLE001 - the rebase reads it again and gives the answer
            pass
        return files

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(PREFETCH_THREADS, thread_name_prefix="rebase-io")
            return self._executor

    def _read(self, location: str) -> bytes:
        group = getattr(self._local, "group", None)
        if group is not None and location in group.fetched:
            return group.fetched[location]
        return self.storage.read(location)

    def _write(self, location: str, raw: bytes) -> None:
        group = getattr(self._local, "group", None)
        if group is None:
            self.storage.write_new(location, raw)
        else:
            group.pending[location] = raw

    def forget(self, location: str) -> None:
        """A rebased list whose commit will not be made: not written after all, if it was waiting."""
        group = getattr(self._local, "group", None)
        if group is not None:
            group.pending.pop(location, None)

    def _list(self, location: str) -> tuple[tuple[ManifestFile, ...], AvroBody]:
        """A manifest list's manifests and body, cached by location (a manifest list never changes)."""
        with self._lock:
            hit = self._cache.get(location)
            if hit is not None:
                self._cache.move_to_end(location)
                return hit
        manifests, body = read_records(bounded(self.storage.read(location)))
        self._remember(location, manifests, body)
        return manifests, body

    def _remember(self, location: str, manifests: tuple[ManifestFile, ...], body: AvroBody) -> None:
        if len(manifests) > self._budget:
            return
        with self._lock:
            previous = self._cache.pop(location, None)
            self._held -= len(previous[0]) if previous is not None else 0
            while self._cache and self._held + len(manifests) > self._budget:
                self._held -= len(self._cache.popitem(last=False)[1][0])
            self._cache[location] = (manifests, body)
            self._held += len(manifests)


class GroupFiles:
    """What a group's committer does with its members' files in parallel instead of one round trip
    to the store after another (on S3 a group of appends otherwise costs two GETs and a PUT per
    member in series): ``fetch`` reads the client lists and the manifests they add before the
    members are rebased, ``flush`` writes the rebased lists before the group's metadata file (which
    names them) is written. Only files inside the table's locations are read; a failed read is left
    for the rebase to make and refuse; a failed write fails the group's attempt, a 503 when the store
    failed (``storage_failed``), and deletes the lists it did write."""

    def __init__(self, rebaser: Rebaser) -> None:
        self.rebaser = rebaser
        self.fetched: dict[str, bytes] = {}
        self.pending: dict[str, bytes] = {}

    def fetch(self, snapshots: Sequence[dict], base: dict) -> None:
        wanted = [s for s in snapshots if s.get("manifest-list") not in self.fetched]
        if len(wanted) > 1:
            for files in self.rebaser._pool().map(lambda snapshot: self.rebaser._fetch_one(snapshot, base), wanted):
                self.fetched.update(files)

    def flush(self) -> None:
        pending, storage = list(self.pending.items()), self.rebaser.storage
        self.pending.clear()

        def write(item: tuple[str, bytes]) -> BaseException | None:
            try:
                storage.write_new(*item)
            except Exception as e:  # noqa: BLE001 - gathered: the written ones are deleted below
                return e
            return None

        failed = [e for e in self.rebaser._pool().map(write, pending) if e is not None]
        if failed:
            for location, _ in pending:
                try:
                    storage.delete(location)
                except Exception:  # noqa: BLE001 - an orphan is harmless
                    pass
            if all(storage_failed(e) for e in failed):
                log.warning("group commit: could not write %d rebased manifest list(s): %s", len(failed), failed[0])
                raise errors.ServiceUnavailable(REBASE_STORAGE_FAILED) from failed[0]
            raise errors.CommitFailed(
                f"Commit failed: could not write {len(failed)} rebased manifest list(s); retry"
            ) from failed[0]
