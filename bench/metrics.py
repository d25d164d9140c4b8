"""The server's own account of where the time goes, from its Prometheus ``/metrics``.

The bench reads only the metric names the server documents, never its code: a scenario's numbers
are the difference between a scrape just before the measurement window (clients warm) and one
just after. Used:

- ``catalog_http_request_duration_seconds{method,route}``: the HTTP layer of table routes;
- ``catalog_commit_duration_seconds`` (with a ``kind`` label once the server has one): the commit loop;
- ``catalog_commit_step_seconds{kind,step}``: the commit loop's steps (read, apply, write, cas).
  Absent from servers that do not export it: reported as missing, never guessed.
"""

from __future__ import annotations

import re

STEPS = ("read", "apply", "rebase", "write", "cas")  # rebase: inside apply, when the server rebased
TABLE_ROUTE = "/v1/namespaces/{namespace:str}/tables/{table:str}"
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(text: str) -> dict[str, float]:
    """'name{labels} value' lines -> {'name{labels}': value} (comments skipped)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            values[key] = float(value)
        except ValueError:
            continue
    return values


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def total(d: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the series ``name`` whose labels include ``labels`` (a label the series lacks matches)."""
    out = 0.0
    for key, value in d.items():
        metric, _, rest = key.partition("{")
        if metric != name:
            continue
        have = dict(_LABEL.findall(rest))
        if all(have.get(k, v) == v for k, v in labels.items()):
            out += value
    return out


def _mean_ms(d: dict[str, float], name: str, **labels: str) -> tuple[float, float]:
    n = total(d, f"{name}_count", **labels)
    return (1000 * total(d, f"{name}_sum", **labels) / n if n else 0.0), n


def server_split(d: dict[str, float], method: str, kind: str = "table") -> dict[str, float]:
    """Mean server-side times (ms) from a metrics delta: the HTTP layer of the table route for
    ``method``; for commits, the commit loop, its steps (when exported; ms per commit) and the
    conflict and rebase counts."""
    out: dict[str, float] = {}
    mean, n = _mean_ms(d, "catalog_http_request_duration_seconds", method=method, route=TABLE_ROUTE)
    if n:
        out["http_mean_ms"], out["http_requests"] = mean, n
    mean, commits = _mean_ms(d, "catalog_commit_duration_seconds", kind=kind)
    if commits:
        out["service_commit_mean_ms"], out["service_commits"] = mean, commits
        for step in STEPS:
            if total(d, "catalog_commit_step_seconds_count", kind=kind, step=step):
                seconds = total(d, "catalog_commit_step_seconds_sum", kind=kind, step=step)
                out[f"step_{step}_ms"] = 1000 * seconds / commits
    groups = total(d, "catalog_group_commit_size_count")
    if groups:  # group commit: mean appends landed per metadata file + CAS
        out["groups"], out["group_mean_size"] = groups, total(d, "catalog_group_commit_size_sum") / groups
    for name, key, labels in (
        ("catalog_commit_attempts_total", "cas_attempts", {}),
        ("catalog_commit_rebase_total", "server_rebases", {}),
        ("catalog_commit_append_rebase_total", "append_rebases", {}),
        ("catalog_commit_conflict_total", "conflicts_requirement", {"cause": "requirement"}),
        ("catalog_commit_conflict_total", "conflicts_cas", {"cause": "cas"}),
    ):
        out[key] = total(d, name, **labels)
    return out
