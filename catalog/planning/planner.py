"""A scan plan over a table's metadata: which data files a scan reads, each with the delete files
that apply to it and the filter left for its rows (the residual), as the REST ``FileScanTask`` JSON.

pyiceberg's evaluators do the pruning, exactly as its own client-side ``plan_files``: manifests by
their partition summaries (``manifest_evaluator`` over each spec's inclusive projection), entries
by partition (``expression_evaluator``) and by column metrics (``_InclusiveMetricsEvaluator``), and
residuals (``residual_evaluator_of``). What is written here: reading manifests through the server's
storage and ``ManifestCache`` (in parallel), the delete index (``deletes.py``, Java's rules), the
incremental append scan (Java's ``BaseIncrementalAppendScan``: data files added by ``append``
snapshots after the start, up to the end), and the grouping of manifests into plan tasks.

A plan is named by its ``Scope`` (snapshot, or start and end) and the ``candidates``: the data
manifests it may read, in a fixed order (the snapshot's manifest list, or each append snapshot's
own manifests, oldest first). Plan tasks carry ordinals into that list, so any server process can
redeem them from the immutable files alone.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import (
    _InclusiveMetricsEvaluator,
    expression_evaluator,
    inclusive_projection,
    manifest_evaluator,
    residual_evaluator_of,
)
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    _inherit_from_manifest,
)
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.snapshots import Snapshot

from catalog import errors
from catalog.planning import content, request
from catalog.planning.cache import ManifestCache
from catalog.planning.deletes import DeleteIndex
from catalog.planning.request import ScanRequest
from catalog.settings import PlanningSettings
from catalog.storage.backends import Storage
from catalog.storage.manifests import ENTRY_READ, LIST_READ, Unreadable, read_records

DELETE_INDEXES = 16  # delete indexes kept, per (manifest list, request)
TABLES = 32  # parsed metadata files kept, by location


@dataclass(frozen=True)
class Scope:
    """What a plan reads: one snapshot, or the appends after ``start`` up to ``end``."""

    snapshot_id: int | None = None
    start: int | None = None
    end: int | None = None

    def key(self) -> list[int | None]:
        return [self.snapshot_id, self.start, self.end]


@dataclass
class Prepared:
    """A request made ready against one table: its schema, filter, evaluators and manifests."""

    metadata: TableMetadata
    scope: Scope
    schema: Schema
    expr: BooleanExpression
    filter_json: Any
    case_sensitive: bool
    stats: list[int]
    candidates: list[ManifestFile]  # data manifests, in the scope's fixed order
    deletes: list[ManifestFile]  # delete manifests (point-in-time scans only)
    appends: frozenset[int] | None  # incremental: the append snapshots whose added files count
    key: bytes  # canonical request, for caches and tokens
    manifest_list: str | None  # of the snapshot (or the end snapshot) planned
    _projections: dict[int, BooleanExpression] = field(default_factory=dict)


@dataclass
class Answer:
    """The planning call's answer: tasks inline, or groups of candidate ordinals (plan tasks)."""

    tasks: dict[str, Any] | None
    groups: list[list[int]]


class Planner:
    def __init__(self, storage: Storage, settings: PlanningSettings, threads: int = 4) -> None:
        self.storage = storage
        self.settings = settings  # also what loadTable tells clients (scan_planning_mode, api/entries.py)
        self.cache = ManifestCache(settings.planning_cache_manifests)
        self.manifests_per_task = settings.planning_manifests_per_task
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="planning")
        self._indexes: OrderedDict[tuple, DeleteIndex] = OrderedDict()
        self._tables: OrderedDict[str, TableMetadata] = OrderedDict()
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def metadata(self, location: str, raw: bytes) -> TableMetadata:
        """The table metadata file at ``location`` as pyiceberg's model (a few kept: parsing costs)."""
        with self._lock:
            if location in self._tables:
                self._tables.move_to_end(location)
                return self._tables[location]
        parsed = TableMetadataUtil.parse_raw(raw)
        with self._lock:
            self._tables[location] = parsed
            while len(self._tables) > TABLES:
                self._tables.popitem(last=False)
        return parsed

    # -- the request against the table ------------------------------------------------------------

    def prepare(self, metadata: TableMetadata, req: ScanRequest) -> Prepared:
        scope, snapshot = _scope(metadata, req)
        schema = request.schema_for(metadata, snapshot.schema_id if snapshot else None, req.use_snapshot_schema)
        expr = request.bound_filter(req.filter_json, schema, req.case_sensitive)
        request.check_columns(req.select, schema, req.case_sensitive, "select")
        stats = request.check_columns(req.stats_fields, schema, req.case_sensitive, "stats-fields")
        candidates: list[ManifestFile] = []
        deletes: list[ManifestFile] = []
        appends = None
        if scope.end is not None:
            chosen = _appends_between(metadata, scope.start, scope.end)
            appends = frozenset(s.snapshot_id for s in chosen)
            for snap in chosen:
                candidates += [
                    m
                    for m in self._manifests(snap)
                    if m.content == ManifestContent.DATA and m.added_snapshot_id == snap.snapshot_id
                ]
        elif snapshot is not None:
            for m in self._manifests(snapshot):
                (candidates if m.content == ManifestContent.DATA else deletes).append(m)
        return Prepared(
            metadata, scope, schema, expr, req.filter_json, req.case_sensitive, stats, candidates, deletes,
            appends, req.canonical(), snapshot.manifest_list if snapshot else None,
        )  # fmt: skip

    def plan(self, prep: Prepared) -> Answer:
        """Inline tasks when the surviving data manifests fit one task, else groups of them."""
        keep = self._manifest_filter(prep)
        survivors = [i for i, m in enumerate(prep.candidates) if keep(m)]
        if len(survivors) <= self.manifests_per_task:
            return Answer(self.tasks(prep, survivors), [])
        size = self.manifests_per_task
        return Answer(None, [survivors[i : i + size] for i in range(0, len(survivors), size)])

    def tasks(self, prep: Prepared, ordinals: Sequence[int]) -> dict[str, Any]:
        """``file-scan-tasks`` and ``delete-files`` for the candidates at ``ordinals``."""
        if any(not 0 <= i < len(prep.candidates) for i in ordinals):
            raise errors.NoSuchPlanTask("Plan task does not exist: it names manifests the snapshot does not have")
        manifests = [prep.candidates[i] for i in ordinals]
        entries = self._matching(prep, manifests)
        if prep.appends is not None:
            entries = [e for e in entries if e.status == ManifestEntryStatus.ADDED and e.snapshot_id in prep.appends]
        index = self._delete_index(prep) if prep.appends is None else None
        specs = prep.metadata.specs()
        residuals: dict[int, Any] = {}
        delete_files: list[dict[str, Any]] = []
        position: dict[str, int] = {}
        out = []
        for entry in entries:
            data = entry.data_file
            spec, part_schema = specs[data.spec_id], self._spec_schema(prep, data.spec_id)
            task: dict[str, Any] = {"data-file": content.content_file(data, spec, part_schema, prep.stats)}
            applied = index.for_data_file(entry.sequence_number or 0, data) if index else []
            if applied:
                refs = []
                for d in applied:
                    if d.file_path not in position:
                        position[d.file_path] = len(delete_files)
                        d_spec = specs[d.spec_id]
                        delete_files.append(
                            content.content_file(d, d_spec, self._spec_schema(prep, d.spec_id), prep.stats)
                        )
                    refs.append(position[d.file_path])
                task["delete-file-references"] = refs
            if data.spec_id not in residuals:
                residuals[data.spec_id] = residual_evaluator_of(
                    spec=spec, expr=prep.expr, case_sensitive=prep.case_sensitive, schema=prep.schema
                )
            task["residual-filter"] = _residual(residuals[data.spec_id].residual_for(data.partition), prep)
            out.append(task)
        result: dict[str, Any] = {"file-scan-tasks": out}
        if delete_files:
            result["delete-files"] = delete_files
        return result

    # -- reading ----------------------------------------------------------------------------------

    def _manifests(self, snapshot: Snapshot) -> list[ManifestFile]:
        path = snapshot.manifest_list

        def load() -> list[ManifestFile]:
            return list(_read(self.storage, path, LIST_READ))

        return self.cache.get(path, load)

    def _entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        def load() -> list[ManifestEntry]:
            out = []
            for e in _read(self.storage, manifest.manifest_path, ENTRY_READ):
                if e.status == ManifestEntryStatus.DELETED:
                    continue
                e = _inherit_from_manifest(e, manifest)
                e.data_file.spec_id = manifest.partition_spec_id
                out.append(e)
            return out

        return self.cache.get(manifest.manifest_path, load)

    def _matching(self, prep: Prepared, manifests: list[ManifestFile]) -> list[ManifestEntry]:
        """The live entries of ``manifests`` whose partition and metrics may match the filter."""
        metrics_eval = _InclusiveMetricsEvaluator(prep.schema, prep.expr, prep.case_sensitive, False).eval
        partition_evals: dict[int, Callable[[DataFile], bool]] = {}
        for m in manifests:
            if m.partition_spec_id not in partition_evals:
                partition_evals[m.partition_spec_id] = self._partition_evaluator(prep, m.partition_spec_id)
        found: list[ManifestEntry] = []
        for m, entries in zip(manifests, self._pool.map(self._entries, manifests), strict=True):
            keep = partition_evals[m.partition_spec_id]
            found += [e for e in entries if keep(e.data_file) and metrics_eval(e.data_file)]
        return found

    def _delete_index(self, prep: Prepared) -> DeleteIndex:
        snapshot = prep.metadata.snapshot_by_id(prep.scope.snapshot_id) if prep.scope.snapshot_id else None
        key = (snapshot.manifest_list if snapshot else None, prep.key)
        with self._lock:
            if key in self._indexes:
                self._indexes.move_to_end(key)
                return self._indexes[key]
        keep = self._manifest_filter(prep)
        manifests = [m for m in prep.deletes if (m.has_added_files() or m.has_existing_files()) and keep(m)]
        unpartitioned = [sid for sid, spec in prep.metadata.specs().items() if spec.is_unpartitioned()]
        index = DeleteIndex(prep.schema, unpartitioned)
        for entry in self._matching(prep, manifests):
            if entry.data_file.content != DataFileContent.DATA:
                index.add(entry.data_file, entry.sequence_number or 0)
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > DELETE_INDEXES:
                self._indexes.popitem(last=False)
        return index

    # -- evaluators (pyiceberg's) -----------------------------------------------------------------

    def _projection(self, prep: Prepared, spec_id: int) -> BooleanExpression:
        if spec_id not in prep._projections:
            spec = prep.metadata.specs()[spec_id]
            project = inclusive_projection(self._spec_schema(prep, spec_id), spec, prep.case_sensitive)
            prep._projections[spec_id] = project(prep.expr)
        return prep._projections[spec_id]

    def _manifest_filter(self, prep: Prepared) -> Callable[[ManifestFile], bool]:
        evaluators: dict[int, Callable[[ManifestFile], bool]] = {}

        def keep(m: ManifestFile) -> bool:
            sid = m.partition_spec_id
            if sid not in evaluators:
                spec = prep.metadata.specs()[sid]
                schema = self._spec_schema(prep, sid)
                evaluators[sid] = manifest_evaluator(spec, schema, self._projection(prep, sid), prep.case_sensitive)
            return evaluators[sid](m)

        return keep

    def _partition_evaluator(self, prep: Prepared, spec_id: int) -> Callable[[DataFile], bool]:
        spec = prep.metadata.specs()[spec_id]
        partition_schema = Schema(*spec.partition_type(self._spec_schema(prep, spec_id)).fields)
        evaluator = expression_evaluator(partition_schema, self._projection(prep, spec_id), prep.case_sensitive)
        return lambda data_file: evaluator(data_file.partition)

    def _spec_schema(self, prep: Prepared, spec_id: int) -> Schema:
        """The plan's schema when it has the spec's source columns, else the newest schema that does."""
        return spec_schema(prep.metadata, prep.metadata.specs()[spec_id], prep.schema)


def spec_schema(metadata: TableMetadata, spec: PartitionSpec, preferred: Schema) -> Schema:
    for schema in [preferred, *sorted(metadata.schemas, key=lambda s: -s.schema_id)]:
        try:
            spec.partition_type(schema)
            return schema
        except Exception:  # noqa: BLE001 - a source column dropped since: another schema
            continue
    raise errors.ValidationFailed(f"No schema of the table has the source columns of partition spec {spec.spec_id}")


def _read(storage: Storage, path: str, read: tuple) -> tuple[Any, ...]:
    try:
        return read_records(storage.read(path), read)[0]
    except Unreadable as e:
        raise errors.ValidationFailed(f"A manifest of the table cannot be read: {e}") from None


def _residual(expr: BooleanExpression, prep: Prepared) -> Any:
    """The residual as spec JSON; the original filter when pyiceberg cannot write it."""
    if isinstance(expr, AlwaysTrue):
        return True
    try:
        return orjson.loads(expr.model_dump_json(by_alias=True))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a literal pydantic cannot write: the whole filter is always right
        return prep.filter_json if prep.filter_json is not None else True


def _scope(metadata: TableMetadata, req: ScanRequest) -> tuple[Scope, Snapshot | None]:
    if req.end_snapshot_id is not None:
        end = metadata.snapshot_by_id(req.end_snapshot_id)
        if end is None:
            raise errors.BadRequest(f"Invalid end-snapshot-id: the table has no snapshot {req.end_snapshot_id}")
        if req.start_snapshot_id is not None and metadata.snapshot_by_id(req.start_snapshot_id) is None:
            raise errors.BadRequest(f"Invalid start-snapshot-id: the table has no snapshot {req.start_snapshot_id}")
        return Scope(start=req.start_snapshot_id, end=req.end_snapshot_id), end
    if req.snapshot_id is not None:
        snapshot = metadata.snapshot_by_id(req.snapshot_id)
        if snapshot is None:
            raise errors.BadRequest(f"Invalid snapshot-id: the table has no snapshot {req.snapshot_id}")
        return Scope(snapshot_id=snapshot.snapshot_id), snapshot
    current = metadata.current_snapshot()
    return Scope(snapshot_id=current.snapshot_id if current else None), current


def _appends_between(metadata: TableMetadata, start: int | None, end: int) -> list[Snapshot]:
    """The ``append`` snapshots after ``start`` (exclusive; None: from the first) up to ``end``
    (inclusive) on ``end``'s ancestry, oldest first; 400 when ``start`` is not an ancestor of ``end``."""
    chain: list[Snapshot] = []
    snapshot = metadata.snapshot_by_id(end)
    while snapshot is not None and snapshot.snapshot_id != start:
        chain.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    if start is not None and snapshot is None:
        raise errors.BadRequest(f"Invalid start-snapshot-id: {start} is not an ancestor of {end}")
    chain.reverse()
    return [s for s in chain if s.summary is not None and s.summary.operation.value == "append"]
