"""Idempotency-Key over raw HTTP: a retried request is answered as the first time, with no second
effect, including when the twins run at the same time."""

from __future__ import annotations

import uuid
from collections import Counter

import requests

from tests.support import As, add_column, assert_error, create, load, race, start_server


def keyed(key: str) -> dict:
    return {"headers": {"Idempotency-Key": key}}


def set_prop(value: str, requirements=()) -> dict:
    return {"requirements": list(requirements), "updates": [{"action": "set-properties", "updates": {"k": value}}]}


def test_config_advertises_the_key_lifetime(http):
    assert http.get("/v1/config").json()["idempotency-key-lifetime"] == "PT1800S"


def test_retried_commit_is_replayed_not_applied_again(http, ns):
    create(http, ns, "t")
    path, key = f"/v1/namespaces/{ns}/tables/t", str(uuid.uuid4())
    first = http.post(path, json=set_prop("first"), **keyed(key))
    assert first.status_code == 200, first.text
    assert http.post(path, json=set_prop("second")).status_code == 200  # another writer, no key

    retry = http.post(path, json=set_prop("first"), **keyed(key))
    assert retry.status_code == 200 and retry.json() == first.json()
    after = load(http, ns, "t")
    assert after["metadata"]["properties"]["k"] == "second"  # the retry changed nothing
    assert len(after["metadata"]["metadata-log"]) == 2


def test_failed_requirement_is_final_and_replayed(http, ns):
    created = create(http, ns, "t")
    path, key = f"/v1/namespaces/{ns}/tables/t", str(uuid.uuid4())
    wants_column = [{"type": "assert-last-assigned-field-id", "last-assigned-field-id": 3}]
    refused = http.post(path, json=set_prop("x", wants_column), **keyed(key))
    assert_error(refused, 409, "CommitFailedException")
    assert http.post(path, json=add_column(created, "c")).status_code == 200  # now the requirement holds

    retry = http.post(path, json=set_prop("x", wants_column), **keyed(key))
    assert retry.status_code == 409 and retry.json() == refused.json()
    assert "k" not in load(http, ns, "t")["metadata"]["properties"]


def test_retried_transaction_is_replayed(http, ns):
    create(http, ns, "a")
    create(http, ns, "b")
    changes = [{"identifier": {"namespace": [ns], "name": name}, **set_prop("tx")} for name in ("a", "b")]
    key = str(uuid.uuid4())
    assert http.post("/v1/transactions/commit", json={"table-changes": changes}, **keyed(key)).status_code == 204
    assert http.post(f"/v1/namespaces/{ns}/tables/a", json=set_prop("later")).status_code == 200
    retry = http.post("/v1/transactions/commit", json={"table-changes": changes}, **keyed(key))
    assert retry.status_code == 204 and not retry.content
    assert load(http, ns, "a")["metadata"]["properties"]["k"] == "later"


def test_retried_create_and_drop_answer_as_the_first_time(http, ns):
    key = str(uuid.uuid4())
    body = {"namespace": [ns, "child"], "properties": {"owner": "x"}}
    first = http.post("/v1/namespaces", json=body, **keyed(key))
    assert first.status_code == 200, first.text
    retry = http.post("/v1/namespaces", json=body, **keyed(key))
    assert retry.status_code == 200 and retry.json() == first.json()  # not 409 AlreadyExists
    assert_error(http.post("/v1/namespaces", json=body), 409, "AlreadyExistsException")  # no key: runs again

    create(http, ns, "doomed")
    key = str(uuid.uuid4())
    for _ in range(2):  # not 404 the second time
        assert http("DELETE", f"/v1/namespaces/{ns}/tables/doomed", **keyed(key)).status_code == 204


def test_key_reused_for_another_request_is_refused(http, ns):
    create(http, ns, "t")
    key = str(uuid.uuid4())
    assert http.post(f"/v1/namespaces/{ns}/tables/t", json=set_prop("a"), **keyed(key)).status_code == 200
    refused = http.post(f"/v1/namespaces/{ns}/tables/t", json=set_prop("b"), **keyed(key))
    assert_error(refused, 400, "BadRequestException", "Idempotency-Key")
    assert load(http, ns, "t")["metadata"]["properties"]["k"] == "a"
    assert_error(http.post("/v1/namespaces", json={"namespace": [ns, "n"]}, **keyed("")), 400, "BadRequestException")


def test_twins_racing_with_one_key_all_get_the_one_commit(server, http, ns):
    """16 copies of one keyed commit released at once (a client retrying while its first attempt
    is in flight): one commit lands and every copy is answered with it. Without the key, 15 of
    them would get 409 (see test_concurrency)."""
    created = create(http, ns, "hot")
    n, key = 16, str(uuid.uuid4())
    body = add_column(created, "c")

    def send(_):
        resp = requests.post(f"{server.url}/v1/namespaces/{ns}/tables/hot", json=body, timeout=60, **keyed(key))
        return resp.status_code, resp.json()["metadata-location"] if resp.status_code == 200 else resp.text

    answers = race(n, send)
    assert Counter(code for code, _ in answers) == Counter({200: n}), answers
    final = load(http, ns, "hot")
    assert {location for _, location in answers} == {final["metadata-location"]}
    assert len(final["metadata"]["metadata-log"]) == 1


def test_switched_off_the_key_is_ignored(tmp_path):
    srv = start_server(tmp_path, extra_env={"CATALOG_IDEMPOTENCY_KEY_LIFETIME_SECONDS": "0"})
    try:
        with requests.Session() as s:
            assert "idempotency-key-lifetime" not in s.get(f"{srv.url}/v1/config").json()
            body, key = {"namespace": ["n"]}, str(uuid.uuid4())
            assert s.post(f"{srv.url}/v1/namespaces", json=body, **keyed(key)).status_code == 200
            assert s.post(f"{srv.url}/v1/namespaces", json=body, **keyed(key)).status_code == 409
    finally:
        srv.stop()


def test_commit_and_its_key_land_in_one_transaction(tmp_path):
    """Store level, real SQLite: the key row is written by the CAS transaction itself, and a
    second commit carrying an already recorded key rolls back entirely."""
    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.database.pointers import KeyRecord, Swap, Swapped
    from catalog.database.store import Store
    from catalog.settings import Settings

    engine = create_engine(Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}").database)
    migrate.upgrade(engine)
    store = Store(engine)
    store.create_namespace(("n",), {})
    store.insert_entry(("n",), "t", "table", "v0", "file:///wh/n/t")
    entry = store.get_entry(("n",), "t")

    key = KeyRecord("k1", "f" * 64, 200, metadata_location="v1")
    assert store.swap_pointers([Swap(entry.id, "v0", "v1", "file:///wh/n/t")], key) is Swapped.WON
    assert store.get_key("k1") == key
    retried = KeyRecord("k1", "f" * 64, 200, metadata_location="v2")
    assert store.swap_pointers([Swap(entry.id, "v1", "v2", "file:///wh/n/t")], retried) is Swapped.KEY_TAKEN
    assert store.get_entry(("n",), "t").metadata_location == "v1"  # the CAS rolled back with the key
    assert store.swap_pointers([Swap(entry.id, "v0", "v2", "file:///wh/n/t")]) is Swapped.LOST
    assert not store.put_key(KeyRecord("k1", "g" * 64, 409, b"{}"))
    assert store.expire_keys(older_than_ms=0) == 0 and store.get_key("k1") is not None
    assert store.expire_keys(older_than_ms=2**62) == 1 and store.get_key("k1") is None
    engine.dispose()


# --- an Idempotency-Key is a principal's own (issue 28, item g) ---------------------------------


def test_another_principal_reusing_a_key_gets_its_own_processing_and_learns_nothing(peers):
    alice, bob = As(peers, "alice"), As(peers, "bob")
    ns = f"idem_{uuid.uuid4().hex[:8]}"
    assert alice.post("/v1/namespaces", json={"namespace": [ns]}).status_code == 200
    create(alice, ns, "t")
    key = {"Idempotency-Key": f"k-{uuid.uuid4()}"}
    body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"by": "alice"}}]}
    first = alice.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert first.status_code == 200, first.text

    # bob, same key, a different request: his own commit, not "already used for a different request"
    mine = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"by": "bob"}}]}
    resp = bob.post(f"/v1/namespaces/{ns}/tables/t", json=mine, headers=key)
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"]["properties"]["by"] == "bob"
    assert "Idempotency" not in resp.text
    # the key is now bob's own too: his reuse of it for another request is his own 400, never alice's record
    again = bob.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert again.status_code == 400 and "Idempotency-Key" in again.text  # his own key, his own other request
    # alice's retry is still her replay: the same response, nothing applied again
    replay = alice.post(f"/v1/namespaces/{ns}/tables/t", json=body, headers=key)
    assert replay.status_code == 200 and replay.json()["metadata-location"] == first.json()["metadata-location"]
    assert alice.get(f"/v1/namespaces/{ns}/tables/t").json()["metadata"]["properties"]["by"] == "bob"
