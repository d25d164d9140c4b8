"""The expiry planner (catalog/maintenance/expire.py) against Java's ``RemoveSnapshots`` rules, on
table metadata JSON built here: pure, no server."""

from __future__ import annotations

import gc
import time

import pytest

from catalog import errors
from catalog.maintenance.expire import DEFAULT_MAX_SNAPSHOT_AGE_MS, Expiry, Retention, plan, retention

DAY = 24 * 60 * 60 * 1000
NOW = 1_700_000_000_000


def snap(sid: int, age_days: float, parent: int | None = None) -> dict:
    out = {"snapshot-id": sid, "timestamp-ms": NOW - int(age_days * DAY), "manifest-list": f"s3://b/t/ml-{sid}.avro"}
    if parent is not None:
        out["parent-snapshot-id"] = parent
    return out


def branch(sid: int, **retention: int) -> dict:
    return {"snapshot-id": sid, "type": "branch", **retention}


def tag(sid: int, **retention: int) -> dict:
    return {"snapshot-id": sid, "type": "tag", **retention}


def table(snapshots: list[dict], refs: dict[str, dict] | None, version: int = 2) -> dict:
    out: dict = {"format-version": version, "snapshots": snapshots}
    if refs is not None:
        out["refs"] = refs
        out["current-snapshot-id"] = refs["main"]["snapshot-id"] if "main" in refs else -1
    return out


def chain(n: int, first_age: float = 10, step: float = 1) -> list[dict]:
    """Snapshots 1..n on one line, 1 the oldest (``first_age`` days), each ``step`` days younger."""
    return [snap(i, first_age - (i - 1) * step, i - 1 if i > 1 else None) for i in range(1, n + 1)]


def test_main_history_older_than_the_cut_off_goes_keeping_the_minimum() -> None:
    meta = table(chain(10), {"main": branch(10)})  # ages 10..1 days
    assert plan(meta, NOW, Retention()).snapshot_ids == (1, 2, 3, 4, 5)  # 5 days: ages 5..1 stay
    assert plan(meta, NOW, Retention(max_snapshot_age_ms=0)).snapshot_ids == tuple(range(1, 10))
    assert plan(meta, NOW, Retention(max_snapshot_age_ms=0, min_snapshots_to_keep=3)).snapshot_ids == tuple(range(1, 8))


def test_spark_arguments_override_the_table_defaults() -> None:
    meta = table(chain(10), {"main": branch(10)})
    assert plan(meta, NOW, Retention(), older_than_ms=NOW - int(7.5 * DAY)).snapshot_ids == (1, 2, 3)
    assert plan(meta, NOW, Retention(), older_than_ms=NOW, retain_last=4).snapshot_ids == tuple(range(1, 7))
    # retain_last wins over an older cut-off (Java: kept while under the minimum OR young enough)
    assert plan(meta, NOW, Retention(), older_than_ms=NOW - 100 * DAY, retain_last=4).snapshot_ids == ()


def test_the_walk_stops_at_the_first_old_ancestor() -> None:
    """Java keeps ancestors only while the walk lasts: a young snapshot below an old one goes."""
    snaps = [snap(1, 1), snap(2, 9, 1), snap(3, 0, 2)]  # 2 is old, its parent 1 young (clock skew)
    assert plan(table(snaps, {"main": branch(3)}), NOW, Retention()).snapshot_ids == (1, 2)


def test_a_branch_keeps_its_own_history_and_its_own_retention_wins() -> None:
    snaps = [*chain(6), snap(7, 8, 2), snap(8, 7, 7), snap(9, 6.5, 8)]  # b forks from 2
    refs = {"main": branch(6), "b": branch(9)}
    expiry = plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0))
    # main keeps 6; b keeps 9; everything else is old and on a branch history past the minimum
    assert expiry.snapshot_ids == (1, 2, 3, 4, 5, 7, 8)
    refs["b"] = branch(9, **{"min-snapshots-to-keep": 3})
    assert plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0)).snapshot_ids == (1, 2, 3, 4, 5)
    refs["b"] = branch(9, **{"max-snapshot-age-ms": 100 * DAY})
    assert plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0)).snapshot_ids == (3, 4, 5)
    assert plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0)).refs == ()


def test_a_tag_keeps_its_snapshot_not_its_history() -> None:
    refs = {"main": branch(10), "v1": tag(3)}
    assert plan(table(chain(10), refs), NOW, Retention(max_snapshot_age_ms=0)).snapshot_ids == (1, 2, 4, 5, 6, 7, 8, 9)


def test_a_ref_past_its_max_ref_age_goes_with_what_only_it_held() -> None:
    snaps = [*chain(4), snap(5, 8, 2)]  # branch b at 5 (8 days old), tag t at 1 (10 days)
    refs = {
        "main": branch(4),
        "b": branch(5, **{"max-ref-age-ms": 7 * DAY}),
        "t": tag(1, **{"max-ref-age-ms": 11 * DAY}),
    }
    expiry = plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0))
    assert expiry.refs == ("b",)
    assert expiry.snapshot_ids == (2, 3, 5)  # 1 stays for the tag
    assert expiry.updates() == [
        {"action": "remove-snapshot-ref", "ref-name": "b"},
        {"action": "remove-snapshots", "snapshot-ids": [2, 3, 5]},
    ]
    # the table's max-ref-age applies to refs without their own; the ref's own wins
    expiry = plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0, max_ref_age_ms=DAY))
    assert expiry.refs == ("b",)
    refs["t"] = tag(1)
    assert plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0, max_ref_age_ms=DAY)).refs == ("b", "t")


def test_main_is_never_removed_however_old() -> None:
    refs = {"main": branch(3, **{"max-ref-age-ms": 1}), "t": tag(3, **{"max-ref-age-ms": 1})}
    expiry = plan(table(chain(3), refs), NOW, Retention(max_snapshot_age_ms=0, max_ref_age_ms=1))
    assert expiry.refs == ("t",)
    assert 3 not in expiry.snapshot_ids


def test_a_snapshot_a_remaining_ref_points_at_is_never_removed() -> None:
    snaps = chain(6)
    refs = {"main": branch(6), **{f"t{i}": tag(i) for i in (1, 3)}, "b": branch(2)}
    expiry = plan(table(snaps, refs), NOW, Retention(max_snapshot_age_ms=0), older_than_ms=NOW, retain_last=1)
    assert expiry.snapshot_ids == (4, 5)
    for ref in refs.values():
        assert ref["snapshot-id"] not in expiry.snapshot_ids


def test_an_unreferenced_snapshot_goes_only_when_older_than_the_cut_off() -> None:
    snaps = [*chain(3), snap(7, 2, 1), snap(8, 6, 1)]  # 7, 8: left behind (a removed branch, a rollback)
    expiry = plan(table(snaps, {"main": branch(3)}), NOW, Retention())
    assert expiry.snapshot_ids == (1, 2, 8)  # 7 is 2 days old: younger than 5 days
    # a ref pointing at a missing snapshot is removed (Java: "Removing invalid ref")
    assert plan(table(snaps, {"main": branch(3), "ghost": tag(99)}), NOW, Retention()).refs == ("ghost",)


def test_v1_metadata_without_refs_has_main_at_the_current_snapshot() -> None:
    meta = {"format-version": 1, "snapshots": chain(8), "current-snapshot-id": 6}
    expiry = plan(meta, NOW, Retention(max_snapshot_age_ms=0))
    assert expiry.snapshot_ids == (1, 2, 3, 4, 5, 7, 8)  # 7, 8 are unreferenced, and old
    assert expiry.refs == ()
    assert plan({"format-version": 1, "snapshots": [], "current-snapshot-id": -1}, NOW, Retention()) == Expiry((), ())


def test_refs_without_main_still_keep_the_current_snapshot() -> None:
    """Java would take such refs as they are and could expire the current snapshot; we never do."""
    meta = {"format-version": 2, "snapshots": chain(4), "current-snapshot-id": 4, "refs": {"t": tag(1)}}
    expiry = plan(meta, NOW, Retention(max_snapshot_age_ms=0))
    assert expiry.snapshot_ids == (2, 3)
    assert expiry.refs == ()  # the stand-in main is not the table's, so nothing removes it


def test_no_snapshots_plans_nothing_not_even_ref_removal() -> None:
    assert plan(table([], {"t": tag(5)}), NOW, Retention()).updates() == []


def test_policy_reads_table_then_defaults_then_iceberg() -> None:
    assert retention({}) == Retention(DEFAULT_MAX_SNAPSHOT_AGE_MS, 1, None, True)
    assert retention({}, {"history.expire.min-snapshots-to-keep": "4"}).min_snapshots_to_keep == 4
    got = retention(
        {"history.expire.min-snapshots-to-keep": "2", "history.expire.max-ref-age-ms": "60000", "gc.enabled": "TRUE"},
        {"history.expire.min-snapshots-to-keep": "4", "history.expire.max-snapshot-age-ms": "1000"},
    )
    assert got == Retention(1000, 2, 60000, True)
    assert retention({"history.expire.max-ref-age-ms": str(2**63 - 1)}).max_ref_age_ms is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("history.expire.max-snapshot-age-ms", "5 days"),
        ("history.expire.max-snapshot-age-ms", "1_000"),
        ("history.expire.max-snapshot-age-ms", " 1000"),
        ("history.expire.max-snapshot-age-ms", "-1"),
        ("history.expire.max-snapshot-age-ms", str(2**63)),
        ("history.expire.min-snapshots-to-keep", "0"),
        ("history.expire.min-snapshots-to-keep", str(2**31)),
        ("history.expire.min-snapshots-to-keep", "1.5"),
        ("history.expire.max-ref-age-ms", ""),
        ("gc.enabled", "yes"),
    ],
)
def test_malformed_properties_are_a_400_naming_the_property(name: str, value: str) -> None:
    for props, defaults in (({name: value}, {}), ({}, {name: value})):
        with pytest.raises(errors.BadRequest) as caught:
            retention(props, defaults)
        assert caught.value.code == 400 and name in caught.value.message


def test_gc_disabled_refuses_as_java_does_and_retain_last_must_be_positive() -> None:
    meta = table(chain(3), {"main": branch(3)})
    with pytest.raises(errors.ValidationFailed, match="GC is disabled"):
        plan(meta, NOW, retention({"gc.enabled": "false"}))
    with pytest.raises(errors.IllegalArgument):
        plan(meta, NOW, Retention(), retain_last=0)


def _wide(n: int) -> dict:
    """``n`` snapshots on main, with a branch and a tag every 100 snapshots (shared history)."""
    snaps = [
        {"snapshot-id": i, "timestamp-ms": NOW - (n - i) * 1000, "parent-snapshot-id": i - 1} for i in range(1, n + 1)
    ]
    del snaps[0]["parent-snapshot-id"]
    refs = {"main": branch(n)}
    for i in range(100, n, 100):
        refs[f"b{i}"] = branch(i)
        refs[f"t{i}"] = tag(i - 1)
    return table(snaps, refs)


def test_planning_is_linear_in_the_number_of_snapshots() -> None:
    """10x the snapshots costs about 10x (measured 10-12x in CPU time); a walk of the whole
    history per branch, as a first version did, costs ~105x. Best of several runs, interleaved so that
    load on the machine weighs on both sizes, in CPU time (a run preempted by other processes is not
    charged for their time), with the collector off (its passes grow with the heap)."""
    small, large = _wide(10_000), _wide(100_000)
    policy = Retention(max_snapshot_age_ms=0)
    best = {id(small): float("inf"), id(large): float("inf")}
    gc.collect()
    gc.disable()
    try:
        for _ in range(7):
            for meta in (small, large):
                start = time.process_time()
                expiry = plan(meta, NOW, policy)
                best[id(meta)] = min(best[id(meta)], time.process_time() - start)
                assert expiry.snapshot_ids  # it did plan something
    finally:
        gc.enable()
    ratio = best[id(large)] / best[id(small)]
    assert ratio <= 20, f"100k snapshots cost {ratio:.1f}x 10k: not linear"
