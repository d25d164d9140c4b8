"""Differential tests: our metadata engine against Iceberg Java 1.9's parsers and builders.

Every request (a base metadata JSON, requirements, updates) goes through both sides:

- ours: ``catalog.metadata.tables.apply`` / ``views.apply`` (``new_table`` / ``new_view`` for creates);
- Java: ``tests/java/DiffOracle.java`` (one JVM for the session, see ``tests/java_oracle.py``), which does
  what the REST reference server's ``CatalogHandlers`` does with the same request: parse it with
  ``UpdateTableRequestParser``, validate the requirements on ``TableMetadataParser.fromJson(base)``, apply
  the updates to ``TableMetadata.buildFrom(base)``, ``build()``, ``TableMetadataParser.toJson``
  (``TableMetadata.buildFromEmpty`` for a staged create, ``TableMetadata.newTableMetadata`` for a create,
  ``ViewMetadata`` for views).

Compared: the outcome class (200 / 400 / 409) and, when both accept, the resulting metadata, normalised:
builder-assigned times ("now") and generated uuids become placeholders, statistics lists are sorted (Java
keeps them in a hash map). The result is compared twice: as Java re-reads and re-writes ours (so Java must be
able to read every file we write) and as our JSON itself. Also checked on every request: ``apply`` never
mutates its base and returns the base itself exactly when Java reports no change.

Requests come from hypothesis (chains of commits on v1/v2/v3 tables and on views, creates, staged creates;
each commit's base is Java's result of the previous one) and from the recorded corpus ``tests/corpus/*.jsonl``.
Deliberate differences are listed once, in ``DELIBERATE``, each with its reason; anything else fails with a
readable diff. ``DIFF_COLLECT=<file>`` records disagreements as JSON lines instead of failing (for surveying
an engine under construction); ``DIFF_SCALE=<n>`` multiplies the number of generated examples; ``DIFF_RANDOM=1``
draws new examples instead of the fixed (derandomized) ones CI runs; ``DIFF_VERBOSE=1`` adds a tally of Java's
rejection messages to the summary (to see what the generators exercise).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.java_oracle import JavaOracle, classpath
from tests.support import skip_or_fail

pytestmark = pytest.mark.java  # needs Java and the Iceberg Spark runtime jar, not a Spark session

CORPUS = Path(__file__).resolve().parent / "corpus"
SCALE = float(os.environ.get("DIFF_SCALE", "1"))
COLLECT = os.environ.get("DIFF_COLLECT", "")
NOW = "<now>"  # placeholders for what a builder makes up
UUID = "<generated uuid>"


def examples(n: int) -> int:
    return max(1, int(n * SCALE))


def hypothesis_settings(n: int):
    return settings(
        max_examples=examples(n),
        derandomize=not os.environ.get("DIFF_RANDOM"),  # the same examples on every run, unless exploring
        database=None,
        deadline=None,  # one JVM round trip per commit; timing varies on a shared machine
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


# --- the Java side -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def oracle():
    cp, missing = classpath()
    if cp is None:
        skip_or_fail(f"the Java oracle cannot run: {missing}")
    java = JavaOracle(cp)
    yield java
    java.close()


# --- what is counted, and reported at the end of the session ------------------------------------------


@dataclass
class Stats:
    requests: Counter = field(default_factory=Counter)  # kind -> requests compared
    updates: Counter = field(default_factory=Counter)  # kind -> updates in them
    outcomes: Counter = field(default_factory=Counter)  # (kind, java status) -> count
    deliberate: Counter = field(default_factory=Counter)  # DELIBERATE name -> requests skipped
    reasons: Counter = field(default_factory=Counter)  # Java's rejections, by message start (DIFF_VERBOSE=1)
    disagreements: int = 0
    chains: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        total = sum(self.requests.values())
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.requests.items()))
        accepted = sum(n for (_, s), n in self.outcomes.items() if s == 200)
        per_status = ", ".join(
            f"{s}: {sum(n for (_, st_), n in self.outcomes.items() if st_ == s)}" for s in (200, 400, 409)
        )
        deliberate = sum(self.deliberate.values())
        return (
            f"differential vs Iceberg Java 1.9: {total} requests ({kinds}) with {sum(self.updates.values())} "
            f"updates compared, {self.chains} generated chains; Java outcomes {per_status} "
            f"({accepted} metadata results compared); {deliberate} deliberate differences skipped "
            f"{dict(self.deliberate) if deliberate else ''}; {self.disagreements} disagreements; "
            f"{self.seconds:.1f}s ({OR.seconds():.1f}s of it in the Java oracle)"
        )


STATS = Stats()


class _Summary:
    def pytest_terminal_summary(self, terminalreporter):
        if sum(STATS.requests.values()):
            terminalreporter.write_sep("-", "differential testing")
            terminalreporter.write_line(STATS.line())
            if os.environ.get("DIFF_VERBOSE"):
                for reason, n in STATS.reasons.most_common(60):
                    terminalreporter.write_line(f"  {n:6d}  {reason}")


@pytest.fixture(scope="module", autouse=True)
def _report(request):
    plugin = _Summary()
    request.config.pluginmanager.register(plugin, "differential-summary")
    start = time.perf_counter()
    yield
    STATS.seconds += time.perf_counter() - start
    print("\n" + STATS.line())


# --- our side ------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    status: int  # 200, or the error's HTTP code; 500 = crashed with a non-Iceberg exception
    error: str = ""
    result: dict | None = None
    identical: bool = False  # apply returned its base object itself
    now_ms: int = 0


def engine(kind: str):
    """``catalog.metadata.tables`` or ``.views`` (imported when first used: collecting needs no engine)."""
    return importlib.import_module("catalog.metadata." + ("tables" if kind in ("table", "new_table") else "views"))


def ours_apply(kind: str, base: dict | None, base_location: str | None, requirements, updates) -> Outcome:
    from catalog import errors

    before = orjson.dumps(base) if base is not None else None
    now_ms = int(time.time() * 1000)
    try:
        result = engine(kind).apply(
            base, copy.deepcopy(requirements), copy.deepcopy(updates), base_location=base_location, now_ms=now_ms
        )
        out = Outcome(200, result=result, identical=result is base, now_ms=now_ms)
    except errors.IcebergError as e:
        out = Outcome(e.code, f"{type(e).__name__}: {e.message}", now_ms=now_ms)
    except Exception as e:  # noqa: BLE001 - a crash is a finding, reported with the request
        out = Outcome(500, f"crash {type(e).__name__}: {e}", now_ms=now_ms)
    if before is not None and orjson.dumps(base) != before:
        out.error = f"MUTATED ITS BASE; {out.error}"
        out.status = -1
    return out


def ours_create(kind: str, args: dict) -> Outcome:
    from catalog import errors

    now_ms = int(time.time() * 1000)
    try:
        if kind == "new_table":
            result = engine(kind).new_table(
                location=args["location"],
                schema=copy.deepcopy(args["schema"]),
                spec=copy.deepcopy(args.get("spec")),
                order=copy.deepcopy(args.get("order")),
                properties=dict(args.get("properties") or {}),
                now_ms=now_ms,
            )
        else:
            result = engine(kind).new_view(
                location=args["location"],
                schema=copy.deepcopy(args["schema"]),
                version=copy.deepcopy(args["version"]),
                properties=dict(args.get("properties") or {}),
                now_ms=now_ms,
            )
        return Outcome(200, result=result, now_ms=now_ms)
    except errors.IcebergError as e:
        return Outcome(e.code, f"{type(e).__name__}: {e.message}", now_ms=now_ms)
    except Exception as e:  # noqa: BLE001
        return Outcome(500, f"crash {type(e).__name__}: {e}", now_ms=now_ms)


# --- deliberate differences (the lead decides what goes here; each says why) ---------------------------


def _actions(req: dict) -> set[str]:
    return {u.get("action") for u in req.get("updates") or [] if isinstance(u, dict)}


def _uuid_change(req: dict) -> bool:
    base = req.get("base")
    if base is None:
        return False
    own = base.get("table-uuid", base.get("view-uuid"))
    return any(u.get("action") == "assign-uuid" and u.get("uuid") != own for u in req["updates"])


def _multi_arg(req: dict) -> bool:
    def has(spec):
        return isinstance(spec, dict) and any("source-ids" in f for f in spec.get("fields") or [])

    return any(has(u.get("spec")) or has(u.get("sort-order")) for u in req.get("updates") or []) or has(req.get("spec"))


def _view_version_renumbered_with_last_schema(req: dict) -> bool:
    base = req.get("base") or {}
    if "versions" not in base:
        return False
    next_id = max(v["version-id"] for v in base["versions"]) + 1
    for u in req.get("updates") or []:
        if isinstance(u, dict) and u.get("action") == "add-view-version" and isinstance(u.get("view-version"), dict):
            version = u["view-version"]
            if version.get("schema-id") == -1 and version.get("version-id") != next_id:
                return True
            next_id += 1
    return False


def _view_history_as_upstream(req: dict, expected: dict) -> bool:
    """In Java 1.9's view result, the version-log entries this commit added for versions the base already had
    carry the version's timestamp; newer Java (and ours) the time of the commit: make them ``"<now>"``."""
    base = req.get("base") or {}
    if "versions" not in base or "version-log" not in expected:
        return False
    if not any(isinstance(u, dict) and u.get("action") == "set-current-view-version" for u in req["updates"]):
        return False
    old_versions = {v["version-id"]: v["timestamp-ms"] for v in base["versions"]}
    old_log, log = base.get("version-log") or [], expected["version-log"]
    if not log or (len(log) <= len(old_log) and log[-1] == old_log[-1]):
        return False  # the builder logged nothing new (a commit logs at most one entry, the last)
    last = log[-1]
    if old_versions.get(last.get("version-id")) != last.get("timestamp-ms"):
        return False
    last["timestamp-ms"] = NOW
    return True


def _versions_differ(java: dict, ours: Outcome) -> bool:
    error = java.get("error", "")
    if java["status"] == 400 and ours.status == 200:
        return any(
            m in error
            for m in (
                "Cannot set current version to unknown version",
                "Multiple entries with same key",
                "Cannot replace view due to loss of view dialects",  # the clobbered version was the current one
            )
        )
    if java["status"] == 200 and ours.status == 200 and ours.result is not None:
        ids = [(v["version-id"], v["schema-id"]) for v in java["result"]["versions"]]
        return ids != [(v.get("version-id"), v.get("schema-id")) for v in ours.result.get("versions") or []]
    return False


def _dangling_default(m: dict) -> bool:
    return (
        m.get("default-spec-id") not in {s.get("spec-id") for s in m.get("partition-specs") or []}
        or m.get("current-schema-id") not in {s.get("schema-id") for s in m.get("schemas") or []}
        or m.get("default-sort-order-id") not in {s.get("order-id") for s in m.get("sort-orders") or []}
    )


@dataclass(frozen=True)
class Deliberate:
    """A known difference: ``applies(request, java answer, our outcome)`` skips the comparison; ``adjust(request,
    Java's normalised result)`` instead rewrites what Java 1.9 does into what the server does, and returns
    whether it changed anything."""

    name: str
    reason: str
    applies: Callable[[dict, dict, Outcome], bool] = lambda req, java, ours: False
    adjust: Callable[[dict, dict], bool] | None = None


DELIBERATE = [
    Deliberate(
        "encryption keys",
        "Iceberg Java 1.9 has no encryption keys in table metadata (no add-/remove-encryption-key, drops "
        "`encryption-keys` and snapshots' `key-id`); the spec has them and the server keeps them",
        lambda req, java, ours: bool(_actions(req) & {"add-encryption-key", "remove-encryption-key"}),
    ),
    Deliberate(
        "multi-argument transforms",
        "Iceberg Java 1.9 cannot parse a partition field or sort field with `source-ids` (v3 multi-argument "
        "transforms); the spec has them",
        lambda req, java, ours: _multi_arg(req),
    ),
    Deliberate(
        "unreadable result",
        "Java 1.9 accepts a commit whose metadata it cannot read back (a staged create without set-location "
        "writes `location: null`): the server refuses it",
        lambda req, java, ours: "unreadable" in java and ours.status == 400,
    ),
    Deliberate(
        "dangling default id",
        "Java 1.9's remove-partition-specs / remove-schemas leave the removed ids in the builder's index, so a later "
        "set-default-spec / set-current-schema to a removed id is accepted and the metadata names a default that is "
        "not in its list: the server refuses it",
        lambda req, java, ours: java["status"] == 200 and ours.status == 400 and _dangling_default(java["result"]),
    ),
    Deliberate(
        "remove-snapshots beyond the count",
        "Java (1.9 and still upstream) sizes a list by `snapshots - ids to remove` and throws `arraySize cannot be "
        "negative` when a remove-snapshots names more ids than the table has (unknown ids among them); unknown ids "
        "are ignored otherwise, and the server ignores them always",
        lambda req, java, ours: "arraySize cannot be negative" in java.get("error", ""),
    ),
    Deliberate(
        "view version id with schema-id -1",
        "Java 1.9 bug, fixed upstream since (ViewMetadata.Builder.addVersionInternal rebuilt the version from the "
        "request, not the renumbered one): a view version with schema-id -1 keeps the version-id the client sent "
        "instead of the id the builder assigns, so set-current-view-version -1 then names an unknown version or "
        "two versions share an id; the server assigns the id",
        lambda req, java, ours: _view_version_renumbered_with_last_schema(req) and _versions_differ(java, ours),
    ),
    Deliberate(
        "format-version 0",
        "Java's newTableMetadata checks the format-version property against the highest supported version only and "
        "creates a `format-version: 0` table no reader accepts; the server refuses versions below 1, so it never "
        "commits to such a table either (a chain that goes on from Java's v0 table)",
        lambda req, java, ours: (
            (
                req["op"] == "new_table"
                and (req.get("properties") or {}).get("format-version", "").strip().lstrip("-").isdigit()
                and int(req["properties"]["format-version"]) < 1
                and ours.status == 400
            )
            or (req["op"] == "table" and (req.get("base") or {}).get("format-version", 1) < 1 and ours.status == 400)
        ),
    ),
    Deliberate(
        "view history time",
        "set-current-view-version to a version an earlier commit added: Java 1.9 logs the version's own timestamp, "
        "Iceberg upstream since (ViewMetadata.Builder: `System.currentTimeMillis()` unless the version is added in "
        "the same change) and the server the time of the change; compared as builder-assigned",
        adjust=_view_history_as_upstream,
    ),
    Deliberate(
        "table uuid is immutable",
        "assign-uuid with a different uuid on an existing table: Java's builder accepts it, the server refuses "
        "(as in test_invariants: a table's identity never changes)",
        lambda req, java, ours: _uuid_change(req) and java["status"] == 200 and ours.status == 400,
    ),
]

# Java 1.9 throws a plain ValidationException for these; Iceberg 1.11 made them RetryableValidationException
# (the client must rebase and retry), which the server answers 409 as the issue asks. The oracle's 400 for
# them is read as 409.
RETRYABLE = (
    "Cannot add snapshot with sequence number",
    "Cannot add a snapshot, first-row-id is behind table next-row-id",
)


def java_status(answer: dict) -> int:
    if answer["status"] == 400 and any(f"ValidationException: {m}" in answer.get("error", "") for m in RETRYABLE):
        return 409
    return answer["status"]


# --- normalisation and diff ------------------------------------------------------------------------------


def normalise(doc: dict, is_now: Callable[[int], bool], generated_uuid: bool) -> dict:
    """A copy with the values a builder makes up (the time of the commit, a fresh uuid) as placeholders,
    and lists Java keeps in hash order sorted."""
    doc = copy.deepcopy(doc)
    if isinstance(doc.get("last-updated-ms"), int) and is_now(doc["last-updated-ms"]):
        doc["last-updated-ms"] = NOW
    for entry in [*(doc.get("snapshot-log") or []), *(doc.get("version-log") or [])]:
        if isinstance(entry, dict) and isinstance(entry.get("timestamp-ms"), int) and is_now(entry["timestamp-ms"]):
            entry["timestamp-ms"] = NOW
    if generated_uuid:
        for key in ("table-uuid", "view-uuid"):
            if key in doc:
                doc[key] = UUID
    for key in ("statistics", "partition-statistics"):
        if isinstance(doc.get(key), list):
            doc[key] = sorted(doc[key], key=lambda s: json.dumps(s, sort_keys=True))
    return doc


def diff(java, ours, path: str = "") -> list[str]:
    """Readable differences: one line per differing leaf (``path: java=... ours=...``)."""

    def short(v) -> str:
        s = json.dumps(v, sort_keys=True)
        return s if len(s) <= 200 else s[:200] + "..."

    if isinstance(java, dict) and isinstance(ours, dict):
        out = []
        for k in sorted(set(java) | set(ours)):
            p = f"{path}.{k}" if path else k
            if k not in ours:
                out.append(f"{p}: only in Java = {short(java[k])}")
            elif k not in java:
                out.append(f"{p}: only in ours = {short(ours[k])}")
            else:
                out += diff(java[k], ours[k], p)
        return out
    if isinstance(java, list) and isinstance(ours, list):
        if len(java) != len(ours):
            return [f"{path}: Java has {len(java)} entries, ours {len(ours)}: java={short(java)} ours={short(ours)}"]
        return [line for i, (a, b) in enumerate(zip(java, ours, strict=True)) for line in diff(a, b, f"{path}[{i}]")]
    if java != ours or type(java) is not type(ours):
        return [f"{path}: java={short(java)} ours={short(ours)}"]
    return []


# --- one request through both sides ------------------------------------------------------------------


def summary(m: dict | None) -> str:
    """A base in one line (the whole JSON goes to the failure file)."""
    if m is None:
        return "None (a create)"
    if "versions" in m:
        return (
            f"view v{m.get('format-version')} versions={[v.get('version-id') for v in m['versions']]} "
            f"current={m.get('current-version-id')} schemas={[s.get('schema-id') for s in m.get('schemas', [])]}"
        )
    return (
        f"table v{m.get('format-version')} last-seq={m.get('last-sequence-number')} next-row-id={m.get('next-row-id')} "
        f"snapshots={[s.get('snapshot-id') for s in m.get('snapshots', [])]} current={m.get('current-snapshot-id')} "
        f"refs={ {k: v.get('snapshot-id') for k, v in (m.get('refs') or {}).items()} } "
        f"schemas={[s.get('schema-id') for s in m.get('schemas', [])]}/{m.get('current-schema-id')} "
        f"last-column-id={m.get('last-column-id')} specs={[s.get('spec-id') for s in m.get('partition-specs', [])]}"
        f"/{m.get('default-spec-id')} orders={[s.get('order-id') for s in m.get('sort-orders', [])]}"
        f"/{m.get('default-sort-order-id')} props={sorted(m.get('properties') or {})}"
    )


class Disagreement(AssertionError):
    pass


def report(req: dict, java: dict, ours: Outcome, problems: list[str]) -> None:
    STATS.disagreements += 1
    record = {
        "request": req,
        "java": {k: v for k, v in java.items() if k in ("status", "error", "where")},
        "ours": {"status": ours.status, "error": ours.error},
        "problems": problems,
    }
    if COLLECT:
        with open(COLLECT, "ab") as f:
            f.write(orjson.dumps(record) + b"\n")
        return
    # one file, overwritten: hypothesis replays the shrunk example last, so it is the one left
    dump = Path(os.environ.get("TMPDIR", "/tmp")) / f"diff-disagreement-{os.getpid()}.json"
    dump.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
    requirements = json.dumps(req.get("requirements"))
    updates = "\n    ".join(json.dumps(u) for u in req.get("updates") or [])
    extra = "" if "updates" in req else f"\n  create: {json.dumps({k: v for k, v in req.items() if k != 'ours'})}"
    raise Disagreement(
        f"Java 1.9 and ours disagree on a {req['op']} request (whole record: {dump})\n"
        f"  base: {summary(req.get('base'))}\n  requirements: {requirements}\n  updates:\n    {updates}{extra}\n"
        f"  Java: {java['status']} {java.get('error', '')} (at {java.get('where', '')})\n"
        f"  ours: {ours.status} {ours.error}\n  " + "\n  ".join(problems[:40])
    )


def compare(req: dict, ours: Outcome) -> dict:
    """Ask Java, compare, count; returns Java's answer."""
    kind = req["op"]
    t0 = int(time.time() * 1000)
    java = OR.ask({**req, "ours": ours.result if ours.status == 200 else None})
    t1 = int(time.time() * 1000) + 1
    java["ours_status"] = ours.status
    status = java_status(java)
    if status == 500:
        raise RuntimeError(f"the Java oracle failed: {java.get('error')}")
    if status == 200 and ours.status == 400 and "result" in java:  # does Java accept what it cannot read?
        read = OR.ask({"op": "read", "metadata": java["result"]})
        if read["status"] != 200:
            java["unreadable"] = read.get("error", "")
    for d in DELIBERATE:
        if d.applies(req, java, ours):
            STATS.deliberate[d.name] += 1
            return java
    STATS.requests[kind] += 1
    STATS.updates[kind] += len(req.get("updates") or [])
    STATS.outcomes[(kind, status)] += 1
    if status != 200:
        STATS.reasons[f"{kind} {status} {java.get('error', '')[:90]}"] += 1
    problems: list[str] = []
    if ours.status != status:
        problems.append(f"outcome: Java {status}, ours {ours.status}")
    elif status == 200:
        generated = req.get("base") is None and not any(
            u.get("action") == "assign-uuid" for u in req.get("updates") or [] if isinstance(u, dict)
        )
        expected = normalise(java["result"], lambda v: t0 <= v <= t1, generated)
        for d in DELIBERATE:
            if d.adjust is not None and d.adjust(req, expected):
                STATS.deliberate[d.name] += 1
        if "ours_error" in java:
            problems.append(f"Java cannot read our result: {java['ours_error']}")
        else:
            got = normalise(java["ours_reparsed"], lambda v: v == ours.now_ms, generated)
            problems += [f"as Java reads ours: {line}" for line in diff(expected, got)]
        if not problems:
            got = normalise(ours.result, lambda v: v == ours.now_ms, generated)
            problems += [f"our JSON: {line}" for line in diff(expected, got)]
        if "changed" in java and req.get("base") is not None and java["changed"] is not True and not ours.identical:
            problems.append("Java made no change (no new metadata file) but apply did not return its base")
        if java.get("changed") is True and ours.identical:
            problems.append("Java made a change but apply returned its base unchanged")
    if problems:
        report(req, java, ours, problems)
    return java


class _OracleRef:
    """The module's oracle, set by each test from the fixture (hypothesis tests cannot take it per example)."""

    java: JavaOracle | None = None

    def seconds(self) -> float:
        return self.java.seconds if self.java is not None else 0.0

    def ask(self, request: dict) -> dict:
        assert self.java is not None
        return self.java.ask(request)


OR = _OracleRef()


def accepted(answer: dict) -> bool:
    """Both sides accepted: a chain goes on from Java's result only then (not from a deliberate difference)."""
    return java_status(answer) == 200 and answer["ours_status"] == 200


def commit(kind: str, base: dict | None, base_location: str | None, requirements, updates) -> dict:
    """One commit request through both sides; Java's answer (its result is the next base of a chain)."""
    req = {
        "op": kind,
        "base": base,
        "base_location": base_location,
        "requirements": requirements,
        "updates": updates,
    }
    if base is not None:  # "now" must be later than every time in the base, or a kept time looks made up
        latest = max(
            [base.get("last-updated-ms") or 0, *(v.get("timestamp-ms", 0) for v in base.get("versions") or [])]
        )
        while int(time.time() * 1000) <= latest:
            time.sleep(0.0005)
    ours = ours_apply(kind, base, base_location, requirements, updates)
    return compare(req, ours)


def create(kind: str, args: dict) -> dict:
    req = {"op": kind, **args}
    return compare(req, ours_create(kind, args))


# --- generation ----------------------------------------------------------------------------------------


def weighted(draw, options: dict):
    """Draw a key of ``options`` with probability proportional to its weight."""
    keys = [k for k, w in options.items() for _ in range(w)]
    return draw(st.sampled_from(keys))


def chance(draw, percent: int) -> bool:
    """True with about ``percent`` % probability; shrinks to False (hypothesis shrinks towards 0)."""
    return draw(st.integers(0, 99)) >= 100 - percent


PRIMITIVES = [
    "boolean", "int", "long", "float", "double", "date", "time", "timestamp", "timestamptz",
    "string", "uuid", "fixed[4]", "binary", "decimal(9,2)",
]  # fmt: skip
V3_PRIMITIVES = ["timestamp_ns", "timestamptz_ns", "unknown", "geometry", "geography"]
NAMES = ["id", "ts", "name", "data", "amount", "day", "category", "flag", "payload", "geo"]
LOCATION = "s3://warehouse/db/t"


class Ids:
    def __init__(self, next_id: int) -> None:
        self.next = next_id

    def take(self) -> int:
        self.next += 1
        return self.next - 1


def gen_type(draw, ids: Ids, depth: int, v3: int):
    kind = weighted(draw, {"primitive": 14, "v3": v3, "variant": v3 // 2, "struct": 2, "list": 2, "map": 1})
    if depth >= 2 and kind in ("struct", "list", "map"):
        kind = "primitive"
    if kind == "primitive":
        return draw(st.sampled_from(PRIMITIVES))
    if kind == "v3":
        return draw(st.sampled_from(V3_PRIMITIVES))
    if kind == "variant":
        return "variant"
    if kind == "struct":
        return {"type": "struct", "fields": gen_fields(draw, ids, depth + 1, v3, draw(st.integers(1, 2)))}
    if kind == "list":
        element_id = ids.take()
        return {
            "type": "list",
            "element-id": element_id,
            "element": gen_type(draw, ids, depth + 1, v3),
            "element-required": draw(st.booleans()),
        }
    key_id, value_id = ids.take(), ids.take()
    return {
        "type": "map",
        "key-id": key_id,
        "key": draw(st.sampled_from(["string", "int", "long"])),
        "value-id": value_id,
        "value": gen_type(draw, ids, depth + 1, v3),
        "value-required": draw(st.booleans()),
    }


def gen_fields(draw, ids: Ids, depth: int, v3: int, n: int, taken: set[str] | None = None) -> list[dict]:
    fields = []
    names = set(taken or ())
    for _ in range(n):
        fid = ids.take()
        name = draw(st.sampled_from(NAMES))
        if name in names and not chance(draw, 3):  # now and then a duplicate name
            name = f"{name}_{fid}"
        names.add(name)
        ftype = gen_type(draw, ids, depth, v3)
        required = chance(draw, 30) and (ftype != "unknown" or chance(draw, 10))
        f = {"id": fid, "name": name, "required": required, "type": ftype}
        if chance(draw, 10):
            f["doc"] = f"the {name}"
        if ftype in ("int", "long", "string") and chance(draw, v3):  # default values: v3 only
            literal = {"int": 7, "long": 8, "string": "x"}[ftype]
            f[draw(st.sampled_from(["initial-default", "write-default"]))] = literal
        fields.append(f)
    return fields


def top_primitive_fields(schema: dict, draw=None) -> list[dict]:
    """Source column candidates: top-level primitives (now and then also variant, geometry, unknown...)."""
    fields = [f for f in schema["fields"] if isinstance(f["type"], str)]
    if draw is not None and not chance(draw, 5):
        fields = [f for f in fields if f["type"] in COMPATIBLE] or fields
    return fields


COMPATIBLE = {
    "int": ["identity", "bucket[16]", "truncate[10]"],
    "long": ["identity", "bucket[16]", "truncate[10]"],
    "decimal(9,2)": ["identity", "bucket[8]", "truncate[4]"],
    "string": ["identity", "bucket[4]", "truncate[3]"],
    "binary": ["identity", "bucket[4]", "truncate[3]"],
    "date": ["identity", "bucket[4]", "year", "month", "day"],
    "timestamp": ["identity", "year", "month", "day", "hour", "bucket[4]"],
    "timestamptz": ["identity", "year", "month", "day", "hour"],
    "timestamp_ns": ["identity", "day", "hour", "bucket[4]"],
    "timestamptz_ns": ["identity", "year", "hour"],
    "time": ["identity", "bucket[2]"],
    "uuid": ["identity", "bucket[2]"],
    "fixed[4]": ["identity", "bucket[2]"],
    "boolean": ["identity"],
    "float": ["identity"],
    "double": ["identity"],
}
ALL_TRANSFORMS = ["identity", "bucket[16]", "truncate[10]", "year", "month", "day", "hour", "void"]


def gen_transform(draw, source_type) -> str:
    good = COMPATIBLE.get(source_type, []) if isinstance(source_type, str) else []
    if good and not chance(draw, 8):
        return draw(st.sampled_from([*good, "void"] if chance(draw, 10) else good))
    return draw(st.sampled_from(ALL_TRANSFORMS))


def gen_spec_fields(draw, schema: dict, first_field_id: int | None, max_fields: int = 3) -> list[dict]:
    sources = top_primitive_fields(schema, draw)
    fields, names = [], set()
    for i in range(draw(st.integers(0 if not sources else 1, max_fields))):
        if sources and not chance(draw, 5):
            src = draw(st.sampled_from(sources))
            sid, stype = src["id"], src["type"]
        else:  # a source column that is not there
            sid, stype = draw(st.sampled_from([999, 0, -1])), None
        transform = gen_transform(draw, stype)
        base_name = transform.split("[")[0]
        name = f"{base_name}_{sid}" if chance(draw, 95) else "p"
        if name in names and not chance(draw, 20):
            name = f"{name}_{i}"
        names.add(name)
        f = {"source-id": sid, "transform": transform, "name": name}
        if first_field_id is not None:
            f["field-id"] = first_field_id + i
        if chance(draw, 2):  # a v3 multi-argument transform
            f = {"source-ids": [sid, sid], "transform": transform, "name": name, **({"field-id": 1000 + i})}
        fields.append(f)
    return fields


def gen_order_fields(draw, schema: dict) -> list[dict]:
    sources = top_primitive_fields(schema, draw)
    fields = []
    for _ in range(draw(st.integers(0 if not sources else 1, 2))):
        if sources and not chance(draw, 5):
            src = draw(st.sampled_from(sources))
            sid, stype = src["id"], src["type"]
        else:
            sid, stype = 999, None
        fields.append(
            {
                "transform": gen_transform(draw, stype) if chance(draw, 40) else "identity",
                "source-id": sid,
                "direction": draw(st.sampled_from(["asc", "desc"])),
                "null-order": draw(st.sampled_from(["nulls-first", "nulls-last"])),
            }
        )
    return fields


def identifier_ids(draw, fields: list[dict]) -> list[int] | None:
    if not chance(draw, 25):
        return None
    good = [f["id"] for f in fields if f["required"] and f["type"] in ("int", "long", "string", "date", "uuid")]
    pool = good if good and not chance(draw, 8) else [f["id"] for f in fields] + [12345]
    return draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True))


@st.composite
def new_table_args(draw, format_version: int | None = None):
    """createTable's inputs: a schema (ids as a client sends them: fresh ones get assigned), spec, order,
    properties (format-version among them)."""
    fv = format_version or draw(st.sampled_from([1, 2, 3]))
    start = draw(st.sampled_from([1, 1, 1, 5, 0]))
    ids = Ids(start)
    fields = gen_fields(draw, ids, 0, 8 if fv >= 3 else draw(st.sampled_from([0, 0, 0, 1])), draw(st.integers(1, 5)))
    schema = {"type": "struct", "schema-id": draw(st.sampled_from([0, 0, 3])), "fields": fields}
    ident = identifier_ids(draw, fields)
    if ident is not None:
        schema["identifier-field-ids"] = ident
    props = {}
    if fv != 2 or chance(draw, 50):
        props["format-version"] = str(fv)
    if chance(draw, 5):
        props["format-version"] = draw(st.sampled_from(["4", "0", "x"]))
    if chance(draw, 30):
        props["write.metadata.previous-versions-max"] = draw(st.sampled_from(["1", "2", "3"]))
    if chance(draw, 20):
        props["owner"] = "someone"
    args = {"location": LOCATION, "schema": schema, "properties": props}
    if chance(draw, 50):
        spec_fields = gen_spec_fields(draw, schema, draw(st.sampled_from([1000, None])), 2)
        args["spec"] = {"spec-id": 0, "fields": [f for f in spec_fields if "source-ids" not in f]}
    if chance(draw, 30):
        args["order"] = {"order-id": 1, "fields": gen_order_fields(draw, schema)}
    return args


# --- table commits ---


class TableState:
    """What a commit's generator knows of its base and of what its own earlier updates added."""

    def __init__(self, m: dict, now: int) -> None:
        self.m = m
        self.now = now
        self.fv = m["format-version"]
        self.snapshot_ids = [s["snapshot-id"] for s in m.get("snapshots") or []]
        self.last_seq = m.get("last-sequence-number", 0)
        self.next_row_id = m.get("next-row-id", 0)
        self.schema = next(s for s in m["schemas"] if s["schema-id"] == m["current-schema-id"])
        self.last_column_id = m["last-column-id"]
        self.last_partition_id = m.get("last-partition-id", 999)
        self.added_schema = self.added_spec = self.added_order = False
        self.current = m.get("current-snapshot-id")
        if self.current == -1:
            self.current = None
        self.ts = max(now, m.get("last-updated-ms", 0))


def gen_snapshot(draw, t: TableState) -> dict:
    new_id = draw(st.integers(1, 2**62))
    if t.snapshot_ids and chance(draw, 3):
        new_id = draw(st.sampled_from(t.snapshot_ids))  # already there
    parent = t.current
    r = draw(st.integers(0, 99))
    if r < 8 and t.snapshot_ids:
        parent = draw(st.sampled_from(t.snapshot_ids))
    elif r < 12:
        parent = None
    elif r < 14:
        parent = 4242  # gone (Java accepts a parent it does not know)
    snap = {"snapshot-id": new_id}
    if parent is not None:
        snap["parent-snapshot-id"] = parent
    r = draw(st.integers(0, 99))
    if t.fv >= 2 or r < 10:
        seq = t.last_seq + 1
        if r >= 90:
            seq = max(0, t.last_seq - draw(st.integers(0, 1)))  # stale: a concurrent writer got there first
        snap["sequence-number"] = seq
    # timestamps: at or a little before "now" (Java allows a minute of skew), or an hour behind
    # (strictly before the generation's "now", so never mistaken for a builder-assigned time)
    snap["timestamp-ms"] = t.ts - (3_600_000 if chance(draw, 4) else draw(st.integers(1, 20_000)))
    snap["manifest-list"] = f"{LOCATION}/metadata/snap-{new_id}-1-x.avro"
    summary = {"operation": draw(st.sampled_from(["append", "overwrite", "delete", "replace"]))}
    if chance(draw, 40):
        summary["added-records"] = "10"
    if not chance(draw, 3):
        snap["summary"] = summary
    if chance(draw, 90):
        snap["schema-id"] = t.schema["schema-id"] if chance(draw, 95) else 77
    if t.fv >= 3 or chance(draw, 3):
        r = draw(st.integers(0, 99))
        first = t.next_row_id + (draw(st.integers(1, 50)) if r >= 95 else 0)
        if r < 5:
            first = max(0, t.next_row_id - draw(st.integers(1, 10)))  # stale first-row-id
        added = draw(st.integers(0, 1000))
        if r not in range(5, 8):
            snap["first-row-id"] = first
        if not chance(draw, 3):
            snap["added-rows"] = added
        else:
            added = 0
        t.next_row_id = max(t.next_row_id, first + added)
    if "sequence-number" in snap:
        t.last_seq = max(t.last_seq, snap["sequence-number"])
    t.snapshot_ids.append(new_id)
    return snap


def ref_update(draw, t: TableState, name: str, snapshot_id: int, ref_type: str | None = None) -> dict:
    u = {"action": "set-snapshot-ref", "ref-name": name, "snapshot-id": snapshot_id}
    u["type"] = ref_type or ("tag" if name.startswith("tag") else "branch")
    if chance(draw, 15):
        u["max-ref-age-ms"] = draw(st.sampled_from([86_400_000, 0, -5]))
    if chance(draw, 15):
        u["min-snapshots-to-keep"] = draw(st.sampled_from([1, 5, 0]))
    if chance(draw, 10):
        u["max-snapshot-age-ms"] = draw(st.sampled_from([3_600_000, 0]))
    return u


REF_NAMES = ["main", "main", "main", "dev", "audit", "tag-v1", "tag-v2"]


def gen_add_snapshot(draw, t: TableState) -> list[dict]:
    snap = gen_snapshot(draw, t)
    out = [{"action": "add-snapshot", "snapshot": snap}]
    r = draw(st.integers(0, 99))
    if r < 75:
        out.append(ref_update(draw, t, "main", snap["snapshot-id"]))
        t.current = snap["snapshot-id"]
    elif r < 90:
        out.append(ref_update(draw, t, draw(st.sampled_from(REF_NAMES[3:])), snap["snapshot-id"]))
    return out


def known_snapshot(draw, t: TableState) -> int:
    if t.snapshot_ids and not chance(draw, 8):
        return draw(st.sampled_from(t.snapshot_ids))
    return draw(st.sampled_from([4242, -1, 0]))


def gen_set_ref(draw, t: TableState) -> list[dict]:
    name = draw(st.sampled_from(REF_NAMES))
    ref_type = None if chance(draw, 90) else draw(st.sampled_from(["branch", "tag"]))
    return [ref_update(draw, t, name, known_snapshot(draw, t), ref_type)]


def gen_remove_ref(draw, t: TableState) -> list[dict]:
    names = list((t.m.get("refs") or {}).keys()) + REF_NAMES
    return [{"action": "remove-snapshot-ref", "ref-name": draw(st.sampled_from(names))}]


def gen_remove_snapshots(draw, t: TableState) -> list[dict]:
    ids = []
    if t.snapshot_ids:
        ids = draw(st.lists(st.sampled_from(t.snapshot_ids), max_size=len(t.snapshot_ids), unique=True))
    if chance(draw, 20):
        ids.append(987654321)  # unknown: ignored
    if chance(draw, 5):
        ids = ids + ids[:1]  # a duplicate
    return [{"action": "remove-snapshots", "snapshot-ids": ids}]


def gen_schema(draw, t: TableState) -> dict:
    fields = copy.deepcopy(t.schema["fields"])
    if fields and chance(draw, 20):
        fields.pop(draw(st.integers(0, len(fields) - 1)))  # drop a column
    if fields and chance(draw, 10):
        i = draw(st.integers(0, len(fields) - 1))
        fields[i]["name"] = fields[i]["name"] + "_renamed"
    # change a type (the builder does not judge schema evolution) of a column no spec or order uses: Java 1.9
    # accepts breaking a spec's transform this way, and then cannot read its own metadata back
    used = {f.get("source-id") for spec in t.m["partition-specs"] for f in spec["fields"]}
    used |= {f.get("source-id") for order in t.m["sort-orders"] for f in order["fields"]}
    if fields and chance(draw, 8):
        i = draw(st.integers(0, len(fields) - 1))
        if isinstance(fields[i]["type"], str) and fields[i]["id"] not in used:
            fields[i]["type"] = draw(st.sampled_from(PRIMITIVES))
            fields[i].pop("initial-default", None)
            fields[i].pop("write-default", None)
    ids = Ids(t.last_column_id + 1)
    if chance(draw, 5):
        ids = Ids(max(1, t.last_column_id - 1))  # ids that collide with existing ones
    v3 = 10 if t.fv >= 3 else draw(st.sampled_from([0, 0, 0, 1]))
    fields += gen_fields(draw, ids, 0, v3, draw(st.integers(0, 2)), {f["name"] for f in fields})
    t.last_column_id = max(t.last_column_id, ids.next - 1)
    schema = {
        "type": "struct",
        "schema-id": draw(st.sampled_from([0, 1, 5, t.schema["schema-id"] + 1])),
        "fields": fields,
    }
    ident = identifier_ids(draw, fields)
    if ident is not None:
        schema["identifier-field-ids"] = ident
    return schema


def gen_add_schema(draw, t: TableState) -> list[dict]:
    schema = gen_schema(draw, t)
    u = {"action": "add-schema", "schema": schema}
    if chance(draw, 30):
        u["last-column-id"] = max(t.last_column_id, 0) + draw(st.sampled_from([0, 0, 1, -1]))
    out = [u]
    t.added_schema = True
    if chance(draw, 60):
        out.append({"action": "set-current-schema", "schema-id": -1 if chance(draw, 80) else schema["schema-id"]})
        t.schema = schema
    return out


def gen_set_current_schema(draw, t: TableState) -> list[dict]:
    ids = [s["schema-id"] for s in t.m["schemas"]]
    sid = draw(st.sampled_from([*ids, -1, 99]))
    if sid in ids:
        t.schema = next(s for s in t.m["schemas"] if s["schema-id"] == sid)
    return [{"action": "set-current-schema", "schema-id": sid}]


def gen_add_spec(draw, t: TableState) -> list[dict]:
    first = t.last_partition_id + 1 if chance(draw, 70) else (1000 if chance(draw, 50) else None)
    fields = gen_spec_fields(draw, t.schema, first)
    spec = {"fields": fields}
    if not chance(draw, 4):  # Java 1.9 requires it
        spec["spec-id"] = draw(st.sampled_from([0, 1, 7]))
    out = [{"action": "add-spec", "spec": spec}]
    t.added_spec = True
    if chance(draw, 60):
        out.append({"action": "set-default-spec", "spec-id": -1 if chance(draw, 85) else 0})
    return out


def gen_set_default_spec(draw, t: TableState) -> list[dict]:
    ids = [s["spec-id"] for s in t.m["partition-specs"]]
    return [{"action": "set-default-spec", "spec-id": draw(st.sampled_from([*ids, -1, 42]))}]


def gen_add_order(draw, t: TableState) -> list[dict]:
    fields = gen_order_fields(draw, t.schema)
    order = {"order-id": 0 if not fields else draw(st.sampled_from([1, 2, 5])), "fields": fields}
    out = [{"action": "add-sort-order", "sort-order": order}]
    t.added_order = True
    if chance(draw, 60):
        out.append({"action": "set-default-sort-order", "sort-order-id": -1 if chance(draw, 85) else 0})
    return out


def gen_set_default_order(draw, t: TableState) -> list[dict]:
    ids = [s["order-id"] for s in t.m["sort-orders"]]
    return [{"action": "set-default-sort-order", "sort-order-id": draw(st.sampled_from([*ids, -1, 42]))}]


PROPERTY_KEYS = [
    "owner", "comment", "write.format.default", "write.metadata.previous-versions-max",
    "write.metadata.delete-after-commit.enabled", "commit.retry.num-retries", "format-version",
]  # fmt: skip


def gen_set_properties(draw, t: TableState) -> list[dict]:
    updates = {}
    for key in draw(st.lists(st.sampled_from(PROPERTY_KEYS), max_size=3, unique=True)):
        updates[key] = {"write.metadata.previous-versions-max": draw(st.sampled_from(["1", "2", "3", "0"]))}.get(
            key, draw(st.sampled_from(["a", "b", "2", ""]))
        )
    return [{"action": "set-properties", "updates": updates}]


def gen_remove_properties(draw, t: TableState) -> list[dict]:
    keys = list((t.m.get("properties") or {}).keys()) + PROPERTY_KEYS[:3] + ["never-set"]
    return [{"action": "remove-properties", "removals": draw(st.lists(st.sampled_from(keys), max_size=3))}]


def gen_set_statistics(draw, t: TableState) -> list[dict]:
    sid = known_snapshot(draw, t)
    stats = {
        "snapshot-id": sid,
        "statistics-path": f"{LOCATION}/metadata/stats-{sid}-{draw(st.integers(0, 3))}.puffin",
        "file-size-in-bytes": draw(st.sampled_from([100, 4096])),
        "file-footer-size-in-bytes": 40,
        "blob-metadata": [
            {"type": "apache-datasketches-theta-v1", "snapshot-id": sid, "sequence-number": 1, "fields": [1]}
        ]
        if chance(draw, 60)
        else [],
    }
    u = {"action": "set-statistics", "statistics": stats}
    if chance(draw, 30):
        u["snapshot-id"] = sid  # the deprecated duplicate a few clients still send
    return [u]


def gen_remove_statistics(draw, t: TableState) -> list[dict]:
    return [{"action": "remove-statistics", "snapshot-id": known_snapshot(draw, t)}]


def gen_set_partition_statistics(draw, t: TableState) -> list[dict]:
    sid = known_snapshot(draw, t)
    stats = {
        "snapshot-id": sid,
        "statistics-path": f"{LOCATION}/metadata/partition-stats-{sid}-{draw(st.integers(0, 3))}.parquet",
        "file-size-in-bytes": draw(st.sampled_from([100, 4096])),
    }
    return [{"action": "set-partition-statistics", "partition-statistics": stats}]


def gen_remove_partition_statistics(draw, t: TableState) -> list[dict]:
    return [{"action": "remove-partition-statistics", "snapshot-id": known_snapshot(draw, t)}]


def gen_upgrade(draw, t: TableState) -> list[dict]:
    v = draw(st.sampled_from([t.fv, t.fv + 1, t.fv + 1, 3, 3, 4, t.fv - 1]))
    if 1 <= v <= 3 and v >= t.fv:
        t.fv = v
    return [{"action": "upgrade-format-version", "format-version": v}]


def gen_remove_schemas(draw, t: TableState) -> list[dict]:
    ids = [s["schema-id"] for s in t.m["schemas"]]
    others = [i for i in ids if i != t.m["current-schema-id"]]
    pool = others if others and not chance(draw, 10) else [*ids, 55]
    return [{"action": "remove-schemas", "schema-ids": draw(st.lists(st.sampled_from(pool), max_size=3))}]


def gen_remove_specs(draw, t: TableState) -> list[dict]:
    ids = [s["spec-id"] for s in t.m["partition-specs"]]
    others = [i for i in ids if i != t.m["default-spec-id"]]
    pool = others if others and not chance(draw, 10) else [*ids, 55]
    return [{"action": "remove-partition-specs", "spec-ids": draw(st.lists(st.sampled_from(pool), max_size=3))}]


def gen_set_location(draw, t: TableState) -> list[dict]:
    loc = draw(st.sampled_from([t.m["location"], LOCATION + "2", LOCATION + "/"]))
    return [{"action": "set-location", "location": loc}]


def gen_assign_uuid(draw, t: TableState) -> list[dict]:
    own = t.m.get("table-uuid") or t.m.get("view-uuid")
    return [{"action": "assign-uuid", "uuid": own if chance(draw, 70) else "00000000-0000-4000-8000-000000000001"}]


def gen_encryption(draw, t: TableState) -> list[dict]:
    if chance(draw, 60):
        key = {"key-id": "k1", "encrypted-key-metadata": "AAEC", "encrypted-by-id": "root"}
        return [{"action": "add-encryption-key", "encryption-key": key}]
    return [{"action": "remove-encryption-key", "key-id": draw(st.sampled_from(["k1", "missing"]))}]


def gen_malformed(draw, t: TableState) -> list[dict]:
    return [
        draw(
            st.sampled_from(
                [
                    {"action": "no-such-action"},
                    {"action": "set-properties"},
                    {"action": "set-properties", "updates": {"k": 1}},
                    {"action": "remove-snapshots", "snapshot-ids": "1"},
                    {"action": "set-current-schema"},
                    {"action": "add-snapshot"},
                    {"action": "set-snapshot-ref", "ref-name": "main", "snapshot-id": 1},
                    {"action": "upgrade-format-version", "format-version": "3"},
                    {"action": "set-location"},
                    {"action": "add-schema", "schema": {"type": "struct", "fields": [{"id": 1, "name": "x"}]}},
                ]
            )
        )
    ]


TABLE_UPDATES = {
    gen_add_snapshot: 26,
    gen_set_ref: 8,
    gen_remove_ref: 4,
    gen_remove_snapshots: 6,
    gen_add_schema: 10,
    gen_set_current_schema: 3,
    gen_add_spec: 7,
    gen_set_default_spec: 3,
    gen_add_order: 5,
    gen_set_default_order: 2,
    gen_set_properties: 8,
    gen_remove_properties: 5,
    gen_set_statistics: 4,
    gen_remove_statistics: 2,
    gen_set_partition_statistics: 3,
    gen_remove_partition_statistics: 2,
    gen_upgrade: 4,
    gen_remove_schemas: 2,
    gen_remove_specs: 2,
    gen_set_location: 2,
    gen_assign_uuid: 1,
    gen_encryption: 1,
    gen_malformed: 1,
}


def gen_table_requirements(draw, m: dict) -> list[dict]:
    """Requirements on ``m``: most hold, some do not."""
    out = []
    kinds = draw(
        st.lists(
            st.sampled_from(
                [
                    "assert-table-uuid",
                    "assert-ref-snapshot-id",
                    "assert-ref-snapshot-id",
                    "assert-last-assigned-field-id",
                    "assert-current-schema-id",
                    "assert-last-assigned-partition-id",
                    "assert-default-spec-id",
                    "assert-default-sort-order-id",
                    "assert-create",
                ]
            ),  # fmt: skip
            max_size=3,
            unique=True,
        )
    )
    if chance(draw, 3):
        kinds.append("assert-view-uuid")
    for kind in kinds:
        hold = chance(draw, 85)
        if kind == "assert-table-uuid":
            out.append({"type": kind, "uuid": m["table-uuid"] if hold else "00000000-0000-4000-8000-00000000000f"})
        elif kind == "assert-view-uuid":
            out.append({"type": kind, "uuid": m["table-uuid"]})  # a view requirement on a table
        elif kind == "assert-create":
            if chance(draw, 30):
                out.append({"type": kind})
        elif kind == "assert-ref-snapshot-id":
            refs = m.get("refs") or {}
            name = draw(st.sampled_from([*refs.keys(), "main", "dev"]))
            actual = refs.get(name, {}).get("snapshot-id")
            wrong = draw(st.sampled_from([None, 1, *(s["snapshot-id"] for s in m.get("snapshots") or [])]))
            sid = actual if hold else wrong
            out.append({"type": kind, "ref": name, "snapshot-id": sid})
        else:
            field_of = {
                "assert-last-assigned-field-id": ("last-assigned-field-id", "last-column-id"),
                "assert-current-schema-id": ("current-schema-id", "current-schema-id"),
                "assert-last-assigned-partition-id": ("last-assigned-partition-id", "last-partition-id"),
                "assert-default-spec-id": ("default-spec-id", "default-spec-id"),
                "assert-default-sort-order-id": ("default-sort-order-id", "default-sort-order-id"),
            }
            req_field, md_field = field_of[kind]
            value = m.get(md_field)
            out.append({"type": kind, req_field: value if hold else (value or 0) + draw(st.sampled_from([1, -1]))})
    return out


@st.composite
def table_commit(draw, m: dict):
    t = TableState(m, int(time.time() * 1000))
    requirements = gen_table_requirements(draw, m) if chance(draw, 50) else []
    updates = []
    for _ in range(weighted(draw, {0: 1, 1: 8, 2: 8, 3: 6, 4: 4, 6: 2, 10: 1})):
        updates += weighted(draw, TABLE_UPDATES)(draw, t)
    return requirements, updates


SIMPLE = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "required": True, "type": "long"},
        {"id": 2, "name": "ts", "required": False, "type": "timestamptz"},
        {"id": 3, "name": "data", "required": False, "type": "string"},
    ],
}


def metadata_file(i: int) -> str:
    return f"{LOCATION}/metadata/{i:05d}-{i:08x}-0000-0000-0000-000000000000.metadata.json"


@hypothesis_settings(700)
@given(data=st.data())
@pytest.mark.slow
def test_table_commit_chains(oracle, data):
    """A create, then a chain of commits; each commit's base is Java's result of the one before."""
    OR.java = oracle
    STATS.chains += 1
    fv = data.draw(st.sampled_from([1, 2, 3, 3]), label="format-version")
    args = data.draw(new_table_args(fv), label="create")
    answer = create("new_table", args)
    if not accepted(answer):  # the chain still needs a table: the simplest one of that version
        answer = create(
            "new_table", {"location": LOCATION, "schema": SIMPLE, "properties": {"format-version": str(fv)}}
        )
    m = answer["result"]
    for i in range(data.draw(st.integers(1, 10), label="commits")):
        requirements, updates = data.draw(table_commit(m), label=f"commit {i}")
        answer = commit("table", m, metadata_file(i), requirements, updates)
        if accepted(answer):
            m = answer["result"]


# --- creates ---


@hypothesis_settings(300)
@given(args=new_table_args())
def test_creates(oracle, args):
    """createTable: ``new_table`` against ``TableMetadata.newTableMetadata``."""
    OR.java = oracle
    create("new_table", args)


FIXED_UUID = "4f0a1c2e-6b7d-4e8f-9a0b-1c2d3e4f5a6b"


@st.composite
def staged_create(draw):
    """A staged create's commit (Spark CTAS/RTAS, DuckDB and pyiceberg create transactions): assert-create and
    the updates the clients derive from a fresh table's metadata, sometimes with the first snapshot."""
    fv = draw(st.sampled_from([1, 2, 3, 3]))
    args = draw(new_table_args(fv))
    schema = args["schema"]
    spec = {"spec-id": 0, "fields": [f for f in (args.get("spec") or {}).get("fields", []) if "source-ids" not in f]}
    order = args.get("order") or {"order-id": 0, "fields": []}
    props = {k: v for k, v in args["properties"].items() if k != "format-version" or chance(draw, 5)}
    updates = [
        {"action": "assign-uuid", "uuid": FIXED_UUID},
        {"action": "upgrade-format-version", "format-version": fv if not chance(draw, 3) else 4},
        {"action": "add-schema", "schema": schema, **({"last-column-id": 9} if chance(draw, 20) else {})},
        {"action": "set-current-schema", "schema-id": -1},
        {"action": "add-spec", "spec": spec},
        {"action": "set-default-spec", "spec-id": -1},
        {"action": "add-sort-order", "sort-order": order},
        {"action": "set-default-sort-order", "sort-order-id": -1},
        {"action": "set-location", "location": LOCATION},
        {"action": "set-properties", "updates": props},
    ]
    if chance(draw, 10):  # pyiceberg leaves some out, or a client gets them wrong
        updates.pop(draw(st.integers(0, len(updates) - 1)))
    if chance(draw, 5):
        updates = draw(st.permutations(updates))
    if chance(draw, 35):  # CTAS: the first snapshot comes with the create
        now = int(time.time() * 1000)
        snap = {
            "snapshot-id": draw(st.integers(1, 2**62)),
            "timestamp-ms": now - draw(st.integers(1, 5000)),
            "manifest-list": f"{LOCATION}/metadata/snap-1.avro",
            "summary": {"operation": "append"},
            "schema-id": schema["schema-id"],
        }
        if fv >= 2:
            snap["sequence-number"] = draw(st.sampled_from([1, 1, 1, 0]))
        if fv >= 3 and not chance(draw, 5):
            snap["first-row-id"] = draw(st.sampled_from([0, 0, 0, 5]))
            snap["added-rows"] = draw(st.integers(0, 100))
        updates += [
            {"action": "add-snapshot", "snapshot": snap},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snap["snapshot-id"]},
        ]
    requirements = [{"type": "assert-create"}]
    if chance(draw, 5):
        requirements.append({"type": "assert-current-schema-id", "current-schema-id": 0})
    return requirements, updates


@hypothesis_settings(400)
@given(request=staged_create())
def test_staged_creates(oracle, request):
    """A staged create's commit (base None): ``apply`` against ``TableMetadata.buildFromEmpty`` + the updates."""
    OR.java = oracle
    requirements, updates = request
    commit("table", None, None, requirements, updates)


# --- views ---

DIALECTS = ["spark", "trino", "spark", "duckdb"]


def gen_view_version(draw, version_id: int, schema_id: int, now: int) -> dict:
    representations = []
    for dialect in draw(st.lists(st.sampled_from(DIALECTS), min_size=1, max_size=2, unique=not chance(draw, 8))):
        representations.append({"type": "sql", "sql": f"SELECT * FROM db.t -- {dialect}", "dialect": dialect})
    version = {
        "version-id": version_id,
        "timestamp-ms": now - draw(st.integers(1, 5000)),
        "schema-id": schema_id,
        "summary": {"engine-name": "spark", "engine-version": "3.5.1"},
        "representations": representations,
        "default-namespace": draw(st.sampled_from([["db"], [], ["a", "b"]])),
    }
    if chance(draw, 30):
        version["default-catalog"] = "lake"
    return version


@st.composite
def new_view_args(draw):
    ids = Ids(1)
    schema = {"type": "struct", "schema-id": 0, "fields": gen_fields(draw, ids, 0, 3, draw(st.integers(1, 3)))}
    now = int(time.time() * 1000)
    props = {"comment": "a view"} if chance(draw, 30) else {}
    if chance(draw, 20):
        props["version.history.num-entries"] = draw(st.sampled_from(["1", "2", "3"]))
    return {
        "location": "s3://warehouse/db/v",
        "schema": schema,
        "version": gen_view_version(draw, 1, 0, now),
        "properties": props,
    }


VIEW_PROPERTY_KEYS = ["comment", "replace.drop-dialect.allowed", "version.history.num-entries", "owner"]


@st.composite
def view_commit(draw, m: dict):
    now = int(time.time() * 1000)
    schema_ids = [s["schema-id"] for s in m["schemas"]]
    version_ids = [v["version-id"] for v in m["versions"]]
    current = next(v for v in m["versions"] if v["version-id"] == m["current-version-id"])
    added_schema = False
    updates = []
    for _ in range(weighted(draw, {0: 1, 1: 6, 2: 8, 3: 4, 5: 1})):
        kind = weighted(
            draw,
            {
                "schema+version": 10,
                "version": 8,
                "add-schema": 3,
                "set-current": 4,
                "set-properties": 5,
                "remove-properties": 3,
                "set-location": 2,
                "upgrade": 2,
                "assign-uuid": 1,
                "remove-schemas": 1,
                "malformed": 1,
            },
        )
        if kind in ("schema+version", "add-schema"):
            ids = Ids(draw(st.sampled_from([1, 1, 4])))
            schema = {
                "type": "struct",
                "schema-id": draw(st.sampled_from([0, 1, max(schema_ids) + 1])),
                "fields": gen_fields(draw, ids, 0, 3, draw(st.integers(1, 3))),
            }
            u = {"action": "add-schema", "schema": schema}
            if chance(draw, 20):
                u["last-column-id"] = ids.next - 1
            updates.append(u)
            added_schema = True
        if kind in ("schema+version", "version"):
            schema_id = -1 if added_schema and chance(draw, 80) else draw(st.sampled_from([*schema_ids, 99]))
            vid = max(version_ids) + 1 if not chance(draw, 10) else draw(st.sampled_from([1, 7]))
            version = gen_view_version(draw, vid, schema_id, now)
            if chance(draw, 10):  # the same query again
                version = {**copy.deepcopy(current), "version-id": vid, "timestamp-ms": now - 1}
            updates.append({"action": "add-view-version", "view-version": version})
            if chance(draw, 85):
                updates.append({"action": "set-current-view-version", "view-version-id": -1})
        elif kind == "set-current":
            updates.append(
                {"action": "set-current-view-version", "view-version-id": draw(st.sampled_from([*version_ids, -1, 42]))}
            )
        elif kind == "set-properties":
            keys = draw(st.lists(st.sampled_from(VIEW_PROPERTY_KEYS), max_size=2, unique=True))
            values = {
                "replace.drop-dialect.allowed": ["true", "false"],
                "version.history.num-entries": ["1", "2", "0"],
            }
            updates.append(
                {
                    "action": "set-properties",
                    "updates": {k: draw(st.sampled_from(values.get(k, ["x", "y"]))) for k in keys},
                }
            )
        elif kind == "remove-properties":
            keys = [*m.get("properties", {}), "missing"]
            updates.append(
                {"action": "remove-properties", "removals": draw(st.lists(st.sampled_from(keys), max_size=2))}
            )
        elif kind == "set-location":
            updates.append({"action": "set-location", "location": draw(st.sampled_from([m["location"], "s3://w/v2"]))})
        elif kind == "upgrade":
            updates.append({"action": "upgrade-format-version", "format-version": draw(st.sampled_from([1, 1, 2, 0]))})
        elif kind == "assign-uuid":
            own = m["view-uuid"]
            updates.append({"action": "assign-uuid", "uuid": own if chance(draw, 70) else FIXED_UUID})
        elif kind == "remove-schemas":
            updates.append({"action": "remove-schemas", "schema-ids": [draw(st.sampled_from(schema_ids))]})
        elif kind == "malformed":
            updates.append(
                draw(
                    st.sampled_from(
                        [
                            {"action": "add-view-version"},
                            {"action": "set-current-view-version"},
                            {"action": "add-view-version", "view-version": {"version-id": 2}},
                            {"action": "add-snapshot", "snapshot": {"snapshot-id": 1}},
                        ]
                    )
                )
            )
    requirements = []
    if chance(draw, 40):
        requirements.append({"type": "assert-view-uuid", "uuid": m["view-uuid"] if chance(draw, 85) else FIXED_UUID})
    if chance(draw, 3):
        requirements.append({"type": "assert-table-uuid", "uuid": m["view-uuid"]})
    return requirements, updates


@hypothesis_settings(450)
@given(data=st.data())
@pytest.mark.slow
def test_view_commit_chains(oracle, data):
    """A view create (``new_view`` against ``ViewMetadata.builder()``), then a chain of commits."""
    OR.java = oracle
    STATS.chains += 1
    answer = create("new_view", data.draw(new_view_args(), label="create"))
    if not accepted(answer):
        return
    m = answer["result"]
    for i in range(data.draw(st.integers(1, 6), label="commits")):
        requirements, updates = data.draw(view_commit(m), label=f"commit {i}")
        answer = commit("view", m, f"s3://warehouse/db/v/metadata/{i:05d}-v.metadata.json", requirements, updates)
        if accepted(answer):
            m = answer["result"]


# --- a long history ---


def long_history(fv: int, n: int) -> tuple[dict, list[int]]:
    """A table of ``n`` snapshots on main (statistics on every tenth), as Java builds it: one request."""
    base = OR.ask(
        {"op": "new_table", "location": LOCATION, "schema": SIMPLE, "properties": {"format-version": str(fv)}}
    )
    m = base["result"]
    start = m["last-updated-ms"] - n - 10
    updates, parent = [], None
    for i in range(1, n + 1):
        snap = {
            "snapshot-id": i,
            "timestamp-ms": start + i,
            "manifest-list": f"{LOCATION}/metadata/snap-{i}.avro",
            "summary": {"operation": "append"},
            "schema-id": 0,
        }
        if fv >= 2:
            snap["sequence-number"] = i
        if fv >= 3:
            snap["first-row-id"], snap["added-rows"] = (i - 1) * 10, 10
        if parent:
            snap["parent-snapshot-id"] = parent
        parent = i
        updates += [
            {"action": "add-snapshot", "snapshot": snap},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": i},
        ]
        if i % 10 == 0:
            path = f"{LOCATION}/metadata/{i}.stats"
            stats = {"snapshot-id": i, "statistics-path": path, "file-size-in-bytes": 1, "file-footer-size-in-bytes": 1}
            updates.append({"action": "set-statistics", "statistics": {**stats, "blob-metadata": []}})
            updates.append(
                {
                    "action": "set-partition-statistics",
                    "partition-statistics": {"snapshot-id": i, "statistics-path": path, "file-size-in-bytes": 1},
                }
            )
    answer = OR.ask(
        {"op": "table", "base": m, "base_location": metadata_file(0), "requirements": [], "updates": updates}
    )
    assert answer["status"] == 200, answer.get("error")
    return answer["result"], list(range(1, n + 1))


@pytest.mark.parametrize("fv", [1, 2, 3])
def test_long_history(oracle, fv):
    """Expiring most of 3,000 snapshots (unknown ids among them), then committing on what is left."""
    OR.java = oracle
    m, ids = long_history(fv, 3000)
    expire = [*ids[:2990:2], *ids[1:2990:2], 10**9]  # not in order, one unknown
    answer = commit("table", m, metadata_file(1), [], [{"action": "remove-snapshots", "snapshot-ids": expire}])
    m = answer["result"]
    snap = {
        "snapshot-id": 5000,
        "parent-snapshot-id": 3000,
        "timestamp-ms": int(time.time() * 1000) - 1,
        "manifest-list": f"{LOCATION}/metadata/snap-5000.avro",
        "summary": {"operation": "append"},
        **({"sequence-number": 3001} if fv >= 2 else {}),
        **({"first-row-id": 30000, "added-rows": 5} if fv >= 3 else {}),
    }
    requirements = [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 3000}]
    updates = [
        {"action": "add-snapshot", "snapshot": snap},
        {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 5000},
        {"action": "remove-snapshots", "snapshot-ids": [2991, 2992, 12345]},
    ]
    commit("table", m, metadata_file(2), requirements, updates)


# --- the recorded corpus ---


def corpus_files() -> list[Path]:
    return sorted(CORPUS.glob("*.jsonl"))


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus(oracle, path: Path):
    """Every recorded request (Spark, pyiceberg, DuckDB) through both sides; all disagreements reported at once."""
    OR.java = oracle
    failures = []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    for n, line in enumerate(lines, 1):
        rec = json.loads(line)
        kind = rec.get("kind", "table")
        assert kind in ("table", "view"), f"{path.name}:{n}: kind {kind!r}"
        try:
            if rec.get("endpoint") in ("createTable", "createView"):  # a plain create: its request's parts
                create("new_table" if kind == "table" else "new_view", _create_args(kind, rec["create"]))
                continue
            assert rec.get("base") is not None or kind == "table", f"{path.name}:{n}: a view commit needs a base"
            commit(kind, rec.get("base"), rec.get("base_location"), rec.get("requirements") or [], rec["updates"])
        except Disagreement as e:
            failures.append(f"{path.name}:{n} ({rec.get('source', '?')}): {e}")
    assert not failures, f"{len(failures)} of {len(lines)} recorded requests disagree:\n\n" + "\n\n".join(failures)


def _create_args(kind: str, request: dict) -> dict:
    """A recorded createTable / createView request as ``create``'s arguments."""
    location = request.get("location") or ("s3://warehouse/db/" + request["name"])
    if kind == "view":
        version = request["view-version"]
        return {
            "location": location,
            "schema": request["schema"],
            "version": version,
            "properties": request.get("properties") or {},
        }
    args = {"location": location, "schema": request["schema"], "properties": request.get("properties") or {}}
    if request.get("partition-spec") is not None:
        args["spec"] = request["partition-spec"]
    if request.get("write-order") is not None:
        args["order"] = request["write-order"]
    return args
