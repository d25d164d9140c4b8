"""The spliced metadata dump (catalog.metadata.encoding) against the plain one: pure, no server."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog.metadata.encoding import SPLICED, dump

LISTS = sorted(SPLICED)
scalars = st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=8), st.booleans(), st.none())
elements = st.dictionaries(st.text(max_size=6), scalars, max_size=4)


def doc_with(lists: dict[str, list]) -> dict:
    return {"format-version": 2, "location": "s3://b/t", **lists, "properties": {"snapshots": '"snapshots":[]'}}


# One commit's change to one list: appended to, trimmed at the front, an element replaced, reordered.
edits = st.sampled_from(["append", "trim", "replace", "reverse", "same"])


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from(LISTS), st.lists(elements, max_size=6), min_size=1),
    st.lists(st.tuples(st.sampled_from(LISTS), edits, elements), min_size=1, max_size=12),
)
def test_spliced_dump_is_byte_identical_to_a_full_dump(lists, history):
    """Through a history of commits that share elements with their base (as the engine's do), each
    spliced dump equals ``orjson.dumps`` of the document, byte for byte and key order included."""
    doc = doc_with(lists)
    dumped = dump(doc)
    assert dumped.raw == orjson.dumps(doc)
    for name, edit, element in history:
        items = list(doc.get(name) or [])
        if edit == "append":
            items.append(element)
        elif edit == "trim":
            items = items[1:]
        elif edit == "replace" and items:
            items[len(items) // 2] = element
        elif edit == "reverse":
            items.reverse()
        doc = {**doc, name: items}
        dumped = dump(doc, dumped)
        assert dumped.raw == orjson.dumps(doc)


def test_shared_elements_are_copied_not_serialised_again():
    """An element shared with the previous dump keeps its previous bytes, even if (against the
    engine's contract) it was mutated since: proof that the copy, not a new dump, was used."""
    first = {"snapshot-id": 1}
    doc = doc_with({"snapshots": [first]})
    dumped = dump(doc)
    first["snapshot-id"] = 99
    new = {**doc, "snapshots": [first, {"snapshot-id": 2}]}
    assert orjson.loads(dump(new, dumped).raw)["snapshots"] == [{"snapshot-id": 1}, {"snapshot-id": 2}]


def test_a_log_trimmed_at_the_front_is_copied_as_one_run():
    """A metadata log at its maximum drops its oldest entry and appends one per commit: the entries
    it keeps are copied from the previous dump (mutated since, they keep their previous bytes), and
    the next dump still finds them (their offsets carry over)."""
    log = [{"metadata-file": f"m{i}"} for i in range(4)]
    doc = doc_with({"metadata-log": log})
    dumped = dump(doc)
    log[2]["metadata-file"] = "changed"
    trimmed = {**doc, "metadata-log": [*log[1:], {"metadata-file": "m4"}]}
    dumped = dump(trimmed, dumped)
    files = [e["metadata-file"] for e in orjson.loads(dumped.raw)["metadata-log"]]
    assert files == ["m1", "m2", "m3", "m4"]
    again = {**trimmed, "metadata-log": [*trimmed["metadata-log"][1:], {"metadata-file": "m5"}]}
    assert [e["metadata-file"] for e in orjson.loads(dump(again, dumped).raw)["metadata-log"]] == [
        "m2",
        "m3",
        "m4",
        "m5",
    ]


def test_offsets_carried_over_a_dropped_element_longer_than_what_precedes_the_list():
    """The kept elements' offsets count from before the list's new start when the dropped element
    was longer than everything before the list: later dumps, whatever they change, still copy the
    right bytes."""
    big = {"metadata-file": "x" * 500}
    log = [big, {"metadata-file": "a"}, {"metadata-file": "b"}]
    doc = {"metadata-log": log}
    dumped = dump(doc)
    for items in (log[1:], [*log[1:], {"metadata-file": "c"}], [log[2], log[1]], [log[1]]):
        doc = {"metadata-log": items}
        dumped = dump(doc, dumped)
        assert dumped.raw == orjson.dumps(doc)
        log = items
