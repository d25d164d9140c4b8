"""Turn a run's numbers into the one results table (with targets), the JSON, and the chart."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

# -- statistics -----------------------------------------------------------------------------------


def pct(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (NaN when empty)."""
    if not sorted_values:
        return math.nan
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def lat_stats(seconds: list[float]) -> dict:
    """n, mean and p50/p90/p99/max in milliseconds."""
    ms = sorted(v * 1000 for v in seconds)
    return {
        "n": len(ms),
        "mean_ms": sum(ms) / len(ms) if ms else math.nan,
        "p50_ms": pct(ms, 50),
        "p90_ms": pct(ms, 90),
        "p99_ms": pct(ms, 99),
        "max_ms": ms[-1] if ms else math.nan,
    }


def sample(seconds: list[float], limit: int = 20000) -> list[float]:
    """At most ``limit`` latencies in ms (an even subsample), for the JSON and the chart."""
    step = max(1, math.ceil(len(seconds) / limit))
    return [round(v * 1000, 3) for v in seconds[::step]]


# -- the table ------------------------------------------------------------------------------------


def _num(v: float, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}"


def _ms(v: float) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def _verdict(ok: bool | None) -> str:
    return "" if ok is None else " **PASS**" if ok else " **FAIL**"


def _get(r: dict, *keys: str) -> Any:
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return None
        r = r[k]
    return r


def _ratio(a: float | None, b: float | None) -> str:
    if not a or not b or math.isnan(a) or math.isnan(b):
        return "n/a"
    r = a / b
    return f"{r:,.1f}x" if r >= 0.1 else f"1/{1 / r:,.0f}"


Row = tuple[str, str, Callable[[dict], tuple[str, bool | None]]]
GROWTH_KEYS = ("10", "1k", "10k", "50k", "500c", "2000c")
GROWTH_SHORT = {"10": "fresh", "1k": "1k", "10k": "10k", "50k": "50k", "500c": "500 cols", "2000c": "2,000 cols"}


def _load(c: int) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        s = _get(r, "load", str(c))
        if not s:
            return "n/a", None
        ok = s["rps"] >= 3000 and s["p99_ms"] <= 20 if c == 32 else None
        text = f"{_num(s['rps'])}/s; p50 {_ms(s['p50_ms'])}, p99 {_ms(s['p99_ms'])} ms"
        return text + f"; server CPU {s['server_cpu_ms']:.2f} ms/op", ok

    return cell


def _stat(path: tuple[str, ...], with_rate: bool = False) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        s = _get(r, *path)
        if not s or not s.get("n"):
            return "n/a", None
        text = f"p50 {_ms(s['p50_ms'])}, p99 {_ms(s['p99_ms'])} ms"
        if with_rate and s.get("rate"):
            text += f"; {_num(s['rate'])}/s"
        return text, None

    return cell


def _growth(key: str) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        g = _get(r, "growth", key)
        if not g:
            return "n/a", None
        c, ld = g["commit"], g["load"]
        text = (
            f"commit p50 {_ms(c['p50_ms'])}, p99 {_ms(c['p99_ms'])} (n={c['n']}); load p50 {_ms(ld['p50_ms'])}, "
            f"p99 {_ms(ld['p99_ms'])} ms; file {g['metadata_kb']:,.0f} KB"
        )
        if g.get("nominal_snapshots", 0) > 10:
            text += f"; history built in {g['build_s']:,.1f} s"
        return text + _short_history(g), None

    return cell


def _distinct(r: dict) -> tuple[str, bool | None]:
    d = _get(r, "commit_distinct")
    if not d:
        return "n/a", None
    text = f"{_num(d['rate'])}/s; p50 {_ms(d['p50_ms'])}, p99 {_ms(d['p99_ms'])} ms"
    return text + f"; server CPU {d['server_cpu_ms']:.1f} ms/commit", d["rate"] >= 400


def _hot(r: dict) -> tuple[str, bool | None]:
    h, bound = _get(r, "commit_hot"), _get(r, "baselines", "hot_bound_per_s")
    if not h:
        return "n/a", None
    ok = None if not bound else h["rate"] * 2 >= bound
    text = f"{_num(h['rate'], 1)}/s (bound {_num(bound, 0)}/s: {_ratio(h['rate'], bound)}"
    single = _get(r, "commit_single", "rate")
    return text + (f"; vs 1 writer: {_ratio(h['rate'], single)})" if single else ")"), ok


def _hot_detail(r: dict) -> tuple[str, bool | None]:
    h = _get(r, "commit_hot")
    if not h:
        return "n/a", None
    return (
        f"409 rate {100 * h['rate_409']:.0f}%; {h['retries_per_commit']:.2f} retries/commit; "
        f"commit p50 {_ms(h['p50_ms'])}, p99 {_ms(h['p99_ms'])} ms; {h['abandoned']} abandoned at deadline; "
        f"{(h.get('server') or {}).get('server_rebases', 0):.0f} server-side rebases"
    ), None


def _hot_append(writers: int, rebase: bool) -> Callable[[dict], tuple[str, bool | None]]:
    """One window of the pyiceberg-style hot-append scenario (``bench/hot.py``)."""

    def cell(r: dict) -> tuple[str, bool | None]:
        h = _get(r, "hot_appends", f"{writers}_{'on' if rebase else 'off'}")
        if not h:
            return "n/a", None
        text = (
            f"{_num(h['rate'], 1)}/s; 409 rate {100 * h['rate_409']:.1f}%; p50 {_ms(h['p50_ms'])}, "
            f"p99 {_ms(h['p99_ms'])} ms; {h['lists_per_append']:.2f} manifest lists (and manifests) written per "
            f"append; client CPU {h['client_cpu_ms_per_append']:,.0f} ms/append, server "
            f"{h['server_cpu_ms_per_append']:,.0f}; {h['abandoned']} abandoned"
        )
        if not rebase:
            return text, None
        srv = h.get("server") or {}
        text += f"; {srv.get('append_rebases', 0):,.0f} server rebases"
        if srv.get("groups"):
            text += f"; group commit: {srv['group_mean_size']:.1f} appends per metadata write + CAS"
        ok = h["rate_409"] <= 0.01 and h["commits"] > 0
        if "sqlite" in (r.get("versions") or {}):  # the latency target is SQLite's
            ok = ok and h["p99_ms"] <= 250
        return text, ok

    return cell


def _hot_append_ratio(writers: int) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        off, on = _get(r, "hot_appends", f"{writers}_off", "rate"), _get(r, "hot_appends", f"{writers}_on", "rate")
        if off is None or on is None:
            return "n/a", None
        return f"{_ratio(on, off)} ({_num(on, 1)} vs {_num(off, 1)}/s)", bool(off) and on >= 10 * off

    return cell


def _hot_append_verify(r: dict) -> tuple[str, bool | None]:
    h = _get(r, "hot_appends")
    if not h:
        return "n/a", None
    parts, ok = [], True
    for key, s in h.items():
        v = s.get("verify") or {}
        good = bool(v.get("exactly_once") and v.get("linear"))
        ok = ok and good
        parts.append(
            f"{key.replace('_', ' ')}: {v.get('acknowledged', 0):,} acked, {v.get('manifests', 0):,} "
            f"manifests, chain {v.get('chain', 0):,}/{v.get('snapshots', 0):,}" + ("" if good else " **BAD**")
        )
    return "; ".join(parts), ok


def _rebase_probe(r: dict) -> tuple[str, bool | None]:
    probe = _get(r, "rebase_probe")
    if not probe:
        return "n/a", None
    return "; ".join(
        f"{int(k):,} manifests: rebased p50 {_ms(p['rebased']['p50_ms'])} vs direct {_ms(p['direct']['p50_ms'])} ms, "
        f"server rebase step {_ms(p['server_rebase_step_ms'])} ms"
        for k, p in probe.items()
    ), None


def _client_probe(r: dict) -> tuple[str, bool | None]:
    c = _get(r, "client_probe")
    if not c:
        return "n/a", None
    text = "; ".join(f"{p['snapshots']:,} snapshots: {_ms(p['cpu_ms'])} ms" for p in c["points"])
    if c.get("soak_client_cpu_s"):
        soak, cores = c["soak_client_cpu_s"], c["cores"]
        text += f"; so 800 appends to one table: {soak:,.0f} s of client CPU, >= {soak / cores:,.0f} s on {cores} cores"
    return text, None


def _lost(r: dict) -> tuple[str, bool | None]:
    lost, acked = _get(r, "integrity", "lost"), _get(r, "integrity", "acknowledged")
    if lost is None:
        return "n/a", None
    unknown = _get(r, "integrity", "unknown_outcome") or 0
    return f"{lost} of {acked:,} acknowledged" + (f" ({unknown} unknown outcome)" if unknown else ""), lost == 0


def _errors(r: dict) -> tuple[str, bool | None]:
    e = _get(r, "integrity", "http_5xx")
    if e is None:
        return "n/a", None
    t = _get(r, "integrity", "transport_errors") or 0
    return f"{e} (transport errors: {t})", e == 0 and t == 0


def _short_history(g: dict) -> str:
    """A note when the history could not be built within the time budget (a server slow to apply)."""
    if g.get("snapshots", 0) >= 0.9 * g.get("nominal_snapshots", 0):
        return ""
    return f" (**only {g['snapshots']:,} snapshots**: history build stopped at its time budget)"


def _growth_ratio(key: str, limit: float | None) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        a, b = _get(r, "growth", key, "commit", "p50_ms"), _get(r, "growth", "10", "commit", "p50_ms")
        if not a or not b:
            return "n/a", None
        text = f"{a / b:.1f}x ({_ms(a)} vs {_ms(b)} ms)" + _short_history(_get(r, "growth", key))
        return text, None if limit is None else a <= limit * b

    return cell


def _vs(what: str, mine: tuple[str, ...], theirs: tuple[str, ...], unit: str = "") -> Callable:
    def cell(r: dict) -> tuple[str, bool | None]:
        a, b = _get(r, *mine), _get(r, *theirs)
        if a is None or b is None:
            return "n/a", None
        return (
            f"{_ratio(a, b)} ({_ms(a) if unit == 'ms' else _num(a, 1)} vs {_ms(b) if unit == 'ms' else _num(b, 1)}"
            f"{' ms' if unit == 'ms' else '/s'})",
            None,
        )

    return cell


def _split(path: tuple[str, ...]) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        s = _get(r, *path)
        srv = (s or {}).get("server") or {}
        if not s or "http_mean_ms" not in srv:
            return "n/a", None
        text = f"client {_ms(s['mean_ms'])} ms > HTTP layer {_ms(srv['http_mean_ms'])} ms"
        if "service_commit_mean_ms" in srv:
            text += f" > commit loop {_ms(srv['service_commit_mean_ms'])} ms"
            steps = [f"{k[5:-3]} {_ms(v)}" for k, v in srv.items() if k.startswith("step_")]
            text += f" ({', '.join(steps)} ms)" if steps else ""
        return text + " (means)", None

    return cell


def _server_steps(key: str) -> Callable[[dict], tuple[str, bool | None]]:
    """The commit loop's steps from the server's /metrics (ms per commit), inside the HTTP layer."""

    def cell(r: dict) -> tuple[str, bool | None]:
        srv = _get(r, "growth", key, "commit", "server")
        if not srv or "service_commit_mean_ms" not in srv:
            return "n/a", None
        steps = [(k[5:-3], v) for k, v in srv.items() if k.startswith("step_")]
        text = (
            " + ".join(f"{name} {_ms(v)}" for name, v in steps)
            if steps
            else "n/a (no catalog_commit_step_seconds on /metrics)"
        )
        text += f" of commit loop {_ms(srv['service_commit_mean_ms'])}"
        if "http_mean_ms" in srv:
            text += f" < HTTP layer {_ms(srv['http_mean_ms'])}"
        return text + " ms (means)", None

    return cell


def _cpu_step(step: str) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        c = _get(r, "cpu_steps")
        if not c:
            return "n/a", None
        if step == "apply" and not c.get("engine"):
            return "n/a (no catalog.metadata.tables in this checkout)", None
        parts = []
        for key in GROWTH_KEYS:
            v = (c.get(key) or {}).get(step)
            if v is not None:
                parts.append(f"{GROWTH_SHORT[key]} {_ms(v)}")
            elif (c.get(key) or {}).get(f"{step}_error"):
                parts.append(f"{GROWTH_SHORT[key]} error")
        return ("; ".join(parts) + " ms") if parts else "n/a", None

    return cell


def _rss(r: dict) -> tuple[str, bool | None]:
    m = _get(r, "server_rss_mb")
    if not m:
        return "n/a", None
    names = {
        "load": "after loads",
        "commit_scenarios": "after commits",
        "growth": "after growth",
        "baselines": "at end",
    }
    own = ("care", "care_scale", "footprint", "compaction", "events")  # those run on servers of their own
    m = {k: v for k, v in m.items() if k not in own}
    if not m:
        return "n/a", None
    return ", ".join(f"{names.get(k, k)} {v:,.0f} MB" for k, v in m.items()), None


def _write(r: dict) -> tuple[str, bool | None]:
    w = _get(r, "baselines", "metadata_write")
    if not w:
        return "n/a", None
    return f"p50 {_ms(w['p50_ms'])}, p99 {_ms(w['p99_ms'])} ms ({w['bytes'] / 1024:,.0f} KB file)", None


def _cas_multi(r: dict) -> tuple[str, bool | None]:
    m = _get(r, "baselines", "raw_cas_16")
    if not m:
        return "n/a", None
    return f"{_num(m['rate'])} CAS/s won ({m['losses']:,} lost CAS)", None


def _sqlcat_multi(r: dict) -> tuple[str, bool | None]:
    m = _get(r, "baselines", "sqlcatalog_16")
    if not m:
        return "n/a", None
    return f"{_num(m['rate'])}/s; p50 {_ms(m['p50_ms'])}, p99 {_ms(m['p99_ms'])} ms", None


def _care_table(key: str) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        c = _get(r, "care")
        t = _get(c, "window", "tables", key)
        if not t:
            return "n/a", None
        text = (
            f"{t['snapshots']:,} snapshots, metadata file {t['metadata_file_kb']:,.0f} KB; "
            f"commit p50 {_ms(t['commit']['p50_ms'])}, p99 {_ms(t['commit']['p99_ms'])} ms; "
            f"load p50 {_ms(t['load']['p50_ms'])}, p99 {_ms(t['load']['p99_ms'])} ms"
        )
        a = c.get("on_appends") or {}
        if key == "on" and a:
            text += (
                f"; during the {c['appends']:,} appends: {_num(a['rate'])}/s, commit p50 {_ms(a['p50_ms'])} ms "
                f"(first 1,000 {_ms(a['first_1000']['p50_ms'])}, last 1,000 {_ms(a['last_1000']['p50_ms'])}), "
                f"p99 {_ms(a['p99_ms'])} ms, at most {max(n for _, n in a['trajectory']):,} snapshots at the "
                f"10% marks, {a['snapshots_right_after']:,} right after"
            )
        if key == "off" and c.get("off_build_s") is not None:
            text += f"; history built in {c['off_build_s']:,.1f} s (commits of 500 snapshots)"
        return text, None

    return cell


def _care_ratio(r: dict) -> tuple[str, bool | None]:
    t = _get(r, "care", "window", "tables")
    if not t:
        return "n/a", None
    on, fresh = t["on"]["commit"]["p50_ms"], t["fresh"]["commit"]["p50_ms"]
    off = t["off"]["commit"]["p50_ms"]
    text = f"{on / fresh:.2f}x ({_ms(on)} vs {_ms(fresh)} ms); off / fresh {off / fresh:.2f}x"
    return text, on <= 1.5 * fresh


def _care_during(r: dict) -> tuple[str, bool | None]:
    a = _get(r, "care", "on_appends")
    if not a:
        return "n/a", None
    m = a["maintenance"]
    text = (
        f"{m['expire_tasks']:.0f} expiry tasks ({m['expire_task_s']:.1f} s in all), {m['snapshots_expired']:,.0f} "
        f"snapshots expired, {m['files_deleted']:,.0f} files deleted; server CPU {a['server_cpu_ms_per_append']:.2f} "
        f"ms per append (commits and care together)"
    )
    if m["failed_or_retried"]:
        text += f"; {m['failed_or_retried']:.0f} task attempts failed (retried later)"
    put_off = _get(r, "care", "tasks_put_off") or []
    if put_off:
        first = put_off[0]
        text += (
            f"; {len(put_off)} tasks put off after a failed attempt, e.g. {first['kind']} of {first['table']}: "
            f"{first['last-error']}"
        )
    left = _get(r, "care", "on_leftovers")
    if left:
        text += f"; manifest lists of expired snapshots left on storage: {left['left_behind']:,}"
    return text, None


def _compaction(key: str) -> Callable[[dict], tuple[str, bool | None]]:
    def cell(r: dict) -> tuple[str, bool | None]:
        c = _get(r, "compaction")
        t = _get(c, *key.split("."))
        if not t:
            return "n/a", None
        spark = _get(c, "spark", f"{key.split('.')[0]}_ms")
        text = (
            f"{t['data_files']:,} data files, {t['manifests']:,} manifests, {t['rows']:,} rows; plan_files "
            f"{_ms(t['plan_files_ms'])} ms, DuckDB full scan {_ms(t['duckdb_scan_ms'])} ms"
        )
        if spark is not None and key != "on.at_stop":
            text += f", Spark full scan {_ms(spark)} ms"
        return text, None

    return cell


def _compaction_writers(r: dict) -> tuple[str, bool | None]:
    c = _get(r, "compaction")
    if not c:
        return "n/a", None
    on, off = c["on"]["appends"], c["off"]["appends"]
    text = (
        f"compaction on: {on['commits']:,} appends, {on['http_409s']} 409s, {on['failed'] + on['errors']} failed; "
        f"off: {off['commits']:,} appends, {off['http_409s']} 409s ({c['appenders']} appenders, {c['seconds']} s each)"
    )
    return text, on["http_409s"] == 0 and on["failed"] == 0 and on["errors"] == 0


def _compaction_cpu(r: dict) -> tuple[str, bool | None]:
    t = _get(r, "compaction", "tasks")
    if not t:
        return "n/a", None
    per_gb = f"{t['cpu_s_per_gb']:,.0f} s per GB" if t["cpu_s_per_gb"] is not None else "n/a"
    return (
        f"{per_gb}, {t['cpu_ms_per_file']:.1f} ms per file ({t['cpu_s']:.1f} s for {t['rewritten_mb']:,.1f} MB, "
        f"{t['rewritten_files']:,} files in "
        f"{t['landed']} landed runs of {t['runs']}; {t['landed_on_moved_head']} landed on a moved head, "
        f"{t['yielded']} yielded)"
    ), None


def _care_cpu(r: dict) -> tuple[str, bool | None]:
    e = _get(r, "care", "expiry")
    if not e:
        return "n/a", None
    return (
        f"{_num(e['cpu_ms_per_1000_expired'])} ms ({e['server_cpu_s']:.1f} s of server CPU for {e['expired']:,} "
        f"snapshots expired, {e['deleted_files']:,} files deleted; task {e['task_s']:.1f} s)"
    ), None


def _care_deletes(r: dict) -> tuple[str, bool | None]:
    e = _get(r, "care", "expiry")
    if not e:
        return "n/a", None
    return (
        f"{_num(e['files_per_s'])} files/s ({e['delete_phase_files']:,} files in {e['delete_phase_s']:.2f} s; "
        f"the task read for {e['before_delete_s']:.1f} s before its first delete)"
    ), None


def _care_scale_expiry(r: dict) -> tuple[str, bool | None]:
    s = _get(r, "care_scale")
    if not s:
        return "n/a", None
    if "skipped" in s:
        return s["skipped"], None
    e = s.get("expiry")
    if not e:
        return "n/a", None
    return (
        f"{e['expired']:,} of {e['snapshots_before']:,} snapshots expired ({e['metadata_kb_before'] / 1024:,.0f} MB "
        f"metadata), {e['deleted_files']:,} files deleted: task {e['task_s']:,.1f} s, server CPU "
        f"{e['server_cpu_s']:,.1f} s, peak RSS {_num(e['peak_rss_mb'])} MB (from {_num(e['rss_before_mb'])}); "
        f"delete phase {_num(e['files_per_s'])} files/s; history built in {s['build_s']:,.0f} s"
    ), None


def _care_scale_orphans(r: dict) -> tuple[str, bool | None]:
    o = _get(r, "care_scale", "orphans")
    if not o:
        return "n/a", None
    return (
        f"{o['scanned']:,} files listed ({o['kept_young']:,} unreferenced but young, {o['orphans']:,} orphans): "
        f"task {o['task_s']:,.1f} s, server CPU {o['server_cpu_s']:,.1f} s, peak RSS {_num(o['peak_rss_mb'])} MB "
        f"(from {_num(o['rss_before_mb'])})"
    ), None


def _footprint(r: dict) -> tuple[str, bool | None]:
    f = _get(r, "footprint")
    m = _get(f, "final")
    if not m:
        return "n/a", None
    mib = 2**20
    text = (
        f"after {f['commits']:,} commits and {f['settle_s']:.0f} s of settling: files {m['files_under']:,} under / "
        f"{m['files_referenced']:,} referenced = {m['files_ratio']:.2f}x; bytes {m['bytes_under'] / mib:,.1f} / "
        f"{m['bytes_referenced'] / mib:,.1f} MiB = {m['bytes_ratio']:.2f}x; excess {m['unreferenced_files']:,} files "
        f"({m['unreferenced_bytes'] / mib:,.1f} MiB), of which {m['unreferenced_metadata_json']:,} metadata.json "
        f"({m['unreferenced_metadata_json_bytes'] / mib:,.1f} MiB)"
    )
    ok = m["files_ratio"] <= 2 and m["bytes_ratio"] <= 2 and m["referenced_missing"] == 0
    return text, ok


def _footprint_metadata(r: dict) -> tuple[str, bool | None]:
    f = _get(r, "footprint")
    m = _get(f, "final")
    if not m:
        return "n/a", None
    p = f["peak"]
    return (
        f"{m['metadata_json_under']:,} under vs {m['metadata_json_in_log']} current + log at the end; peak at the "
        f"1,000-commit samples {p['metadata_json_under']:,} under, {p['bytes_under'] / 2**20:,.0f} MiB under the "
        f"table ({p['bytes_ratio']:.2f}x bytes, {p['files_ratio']:.2f}x files); expiry tasks "
        f"{sum(1 for t in f['tasks'] if t['kind'] == 'expire-snapshots')}"
    ), None


def _events(r: dict) -> tuple[str, bool | None]:
    e = _get(r, "events")
    if not e:
        return "n/a", None
    text = (
        f"on {e['on']['rate']:,.0f}/s ({e['on']['server_cpu_ms']:.2f} ms server CPU/commit), "
        f"off {e['off']['rate']:,.0f}/s ({e['off']['server_cpu_ms']:.2f} ms): on/off {e['ratio']:.2f}"
    )
    return text, e["ratio"] >= 0.9


def _warehouses(kind: str) -> Callable[[dict], tuple[str, bool | None]]:
    """Several warehouses / the default only, same run, alternating (``bench/warehouses.py``)."""

    def cell(r: dict) -> tuple[str, bool | None]:
        w = _get(r, "warehouses", kind)
        if not w:
            return "n/a", None
        rounds = ", ".join(f"{x:.2f}" for x in w["per_round"])
        text = (
            f"{r['warehouses']['created']} created: {_num(w['several'])}/s, default only: {_num(w['one'])}/s: "
            f"{w['ratio']:.2f}x (rounds {rounds}); server CPU ms/op {w['several_cpu_ms']:.2f} vs {w['one_cpu_ms']:.2f}"
        )
        return text, w["ratio"] >= 0.9

    return cell


def _warehouses_idle(r: dict) -> tuple[str, bool | None]:
    w = _get(r, "warehouses", "idle_cpu_ms_per_s")
    if not w:
        return "n/a", None
    return f"several {w['several']:.1f} ms/s, one {w['one']:.1f} ms/s", None


def _warehouses_integrity(r: dict) -> tuple[str, bool | None]:
    w = _get(r, "warehouses", "integrity")
    if not w:
        return "n/a", None
    text = "; ".join(f"{side}: 5xx {i['http_5xx']}, lost {i['lost']} of {i['acknowledged']:,}" for side, i in w.items())
    return text, all(i["http_5xx"] == 0 and i["lost"] == 0 for i in w.values())


def _weed(key: str) -> Callable[[dict], tuple[str, bool | None]]:
    """Ours / SeaweedFS's catalog, same run, alternating (``bench/weed.py``)."""

    def cell(r: dict) -> tuple[str, bool | None]:
        w = _get(r, "weed", key)
        if not w:
            return "n/a", None
        rounds = ", ".join(f"{x:.2f}" for x in w["per_round"])
        text = (
            f"ours {_num(w['ours'])}/s, SeaweedFS {_num(w['weed'])}/s: {w['ratio']:.2f}x (rounds {rounds}); "
            f"server CPU ms/op ours {w['ours_cpu_ms']:.2f}, SeaweedFS {w['weed_cpu_ms']:.2f}"
        )
        return text, w["ratio"] >= w["target"]

    return cell


def _weed_answers(r: dict) -> tuple[str, bool | None]:
    w = _get(r, "weed")
    if not w:
        return "n/a", None
    parts, fivexx = [], 0
    for side, label in (("ours", "ours"), ("weed", "SeaweedFS")):
        odd = Counter()
        for key in ("load", "commit_16", "props_16", "props_hot"):
            if key not in w:
                continue
            for status, n in w[key][f"{side}_statuses"].items():
                if not 200 <= int(status) < 300:
                    odd[status] += n
                    fivexx += n if int(status) >= 500 or int(status) == 0 else 0
        i = w["integrity"][side]
        parts.append(
            f"{label}: non-2xx {dict(odd) or 0}, lost {i['lost']} of {i['acknowledged']:,} acknowledged"
            + (f", {i['unknown_outcome']} unknown outcome" if i["unknown_outcome"] else "")
        )
    return "; ".join(parts), fivexx == 0 and all(w["integrity"][s]["lost"] == 0 for s in ("ours", "weed"))


ROWS: list[Row] = [
    ("loadTable, 1 client", "", _load(1)),
    ("loadTable, 8 clients", "", _load(8)),
    ("loadTable, 32 clients", ">= 3,000/s, p99 <= 20 ms", _load(32)),
    ("commit, single writer (round-robin, 100 tables)", "", _stat(("commit_single",), with_rate=True)),
    ("commit, 16 writers over 100 tables", ">= 400/s", _distinct),
    ("commit, 16 writers on ONE table: successful", ">= bound / 2", _hot),
    ("... hot table: conflicts and latency", "", _hot_detail),
    ("hot appends (real manifest lists), 16 writers, rebase off", "", _hot_append(16, False)),
    ("hot appends, 16 writers, rebase on", "409 <= 1%; SQLite p99 <= 250 ms", _hot_append(16, True)),
    ("hot appends, 16 writers: rebase on / off", ">= 10x", _hot_append_ratio(16)),
    ("hot appends (real manifest lists), 64 writers, rebase off", "", _hot_append(64, False)),
    ("hot appends, 64 writers, rebase on", "409 <= 1%; SQLite p99 <= 250 ms", _hot_append(64, True)),
    ("hot appends, 64 writers: rebase on / off", ">= 10x", _hot_append_ratio(64)),
    ("hot appends: acknowledged exactly once, linear chain", "all", _hot_append_verify),
    ("one rebased append vs the head's manifest count (1 writer, stale by one)", "", _rebase_probe),
    ("pyiceberg Table.append, client CPU vs the table's snapshots (the soak's bound)", "", _client_probe),
    ("... where a single-writer commit's time goes", "", _split(("commit_single",))),
    ("... where a 1-client loadTable's time goes", "", _split(("load", "1"))),
    ("server resident memory", "", _rss),
    ("lost commits (all scenarios)", "0", _lost),
    ("HTTP 5xx (all scenarios)", "0", _errors),
    ("growth: fresh (10 snapshots, 50 columns)", "", _growth("10")),
    ("growth: 1,000 snapshots", "", _growth("1k")),
    ("growth: 10,000 snapshots", "", _growth("10k")),
    ("growth: 50,000 snapshots", "", _growth("50k")),
    ("growth: 500 columns, 10 snapshots", "", _growth("500c")),
    ("growth: 2,000 columns, 10 snapshots", "", _growth("2000c")),
    ("commit p50: 10,000 snapshots vs fresh", "<= 2x", _growth_ratio("10k", 2)),
    ("commit p50: 50,000 snapshots vs fresh", "", _growth_ratio("50k", None)),
    ("commit p50: 2,000 columns vs fresh", "", _growth_ratio("2000c", None)),
    ("commit steps (server /metrics), fresh", "", _server_steps("10")),
    ("commit steps (server /metrics), 10,000 snapshots", "", _server_steps("10k")),
    ("commit steps (server /metrics), 50,000 snapshots", "", _server_steps("50k")),
    ("CPU: parse metadata file (orjson.loads, median)", "", _cpu_step("parse_metadata")),
    ("CPU: engine apply of one append (median)", "", _cpu_step("apply")),
    ("commit, 16 writers/16 tables: change events on vs off", "on/off >= 0.90", _events),
    ("loadTable, 8 clients over 3 created warehouses vs the default only", "several/one >= 0.90", _warehouses("load")),
    ("commit, 16 writers over 3 created warehouses vs the default only", "several/one >= 0.90", _warehouses("commit")),
    ("... several warehouses vs one: server CPU while idle", "", _warehouses_idle),
    ("... several warehouses vs one: 5xx, lost commits", "0 5xx, 0 lost", _warehouses_integrity),
    ("table maintenance: after the appends, maintenance ON (keep 100 snapshots)", "", _care_table("on")),
    ("table maintenance: after the appends, maintenance OFF", "", _care_table("off")),
    ("table maintenance: fresh table, maintenance on", "", _care_table("fresh")),
    ("table maintenance: commit p50, maintenance on / fresh", "<= 1.5x", _care_ratio),
    ("table maintenance: the server's own care during the appends", "", _care_during),
    ("table maintenance: server CPU per 1,000 expired snapshots (maintenance-off table expired)", "", _care_cpu),
    ("table maintenance: files deleted per second (that expiry's cleanup)", "", _care_deletes),
    ("table maintenance at scale: expiry of a 100,000-snapshot table", "", _care_scale_expiry),
    ("table maintenance at scale: orphan listing over 1,000,000 files", "", _care_scale_orphans),
    ("table footprint after N commits, care at defaults: under / referenced", "<= 2x files and bytes", _footprint),
    ("... footprint: metadata.json files under the table vs in the log", "", _footprint_metadata),
    ("compaction OFF: 16 appenders, when they stop", "", _compaction("off.at_stop")),
    ("compaction ON: 16 appenders, when they stop", "", _compaction("on.at_stop")),
    ("compaction ON: after the next run", "", _compaction("on.after_final_run")),
    ("compaction: appenders' 409s while it runs", "0", _compaction_writers),
    ("compaction: server CPU per GB rewritten in process", "", _compaction_cpu),
    ("vs SeaweedFS's Iceberg catalog: loadTable, 8 clients", ">= 3x", _weed("load")),
    ("vs SeaweedFS's Iceberg catalog: appends over 16 tables, 16 writers", ">= 2x", _weed("commit_16")),
    ("vs SeaweedFS's Iceberg catalog: set-properties over 16 tables, 16 writers", ">= 2x", _weed("props_16")),
    ("vs SeaweedFS's Iceberg catalog: set-properties, 16 writers on ONE table", ">= 3x", _weed("props_hot")),
    ("vs SeaweedFS's Iceberg catalog: non-2xx answers, lost commits", "0 5xx, 0 lost", _weed_answers),
    ("baseline raw CAS, 1 writer", "", _stat(("baselines", "raw_cas_1"), with_rate=True)),
    ("baseline raw CAS, 16 writers on one row", "", _cas_multi),
    ("baseline metadata write (hot table size)", "", _write),
    ("baseline SqlCatalog, 1 writer", "", _stat(("baselines", "sqlcatalog_1"), with_rate=True)),
    ("baseline SqlCatalog, 16 writers over 100 tables", "", _sqlcat_multi),
    (
        "ratio: commit p50 / raw CAS p50",
        "",
        _vs("cas", ("commit_single", "p50_ms"), ("baselines", "raw_cas_1", "p50_ms"), "ms"),
    ),
    (
        "ratio: commit p50 / SqlCatalog p50",
        "",
        _vs("sql", ("commit_single", "p50_ms"), ("baselines", "sqlcatalog_1", "p50_ms"), "ms"),
    ),
    (
        "ratio: 16-writer commits/s / SqlCatalog's",
        "",
        _vs("sql16", ("commit_distinct", "rate"), ("baselines", "sqlcatalog_16", "rate")),
    ),
    (
        "ratio: hot-table commits/s / raw CAS 16 writers",
        "",
        _vs("cas16", ("commit_hot", "rate"), ("baselines", "raw_cas_16", "rate")),
    ),
]


def table(results: dict[str, dict]) -> str:
    """The one markdown table: a row per metric, a column per backend, PASS/FAIL against targets."""
    names = list(results)
    lines = [
        "| Metric | Target | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    for label, target, cell in ROWS:
        cells = []
        for n in names:
            r = results[n]
            if r.get("status") != "ok":
                cells.append(r.get("status", "not run")[:80] if label == ROWS[0][0] else "")
                continue
            try:
                text, ok = cell(r)
            except Exception as e:  # noqa: BLE001 - a missing number must not lose the whole table
                text, ok = f"n/a ({type(e).__name__})", None
            cells.append(text + _verdict(ok))
        if cells and all(c.startswith("n/a") for c in cells):
            continue  # a scenario group this run left out (--only)
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
