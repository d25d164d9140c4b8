"""Namespaces through pyiceberg and raw HTTP."""

from __future__ import annotations

import uuid

import pytest
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NamespaceNotEmptyError, NoSuchNamespaceError, RESTError

from tests.support import PY_SCHEMA, assert_error


def test_create_load_update_drop(catalog):
    name = f"n_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(name, {"owner": "alice", "team": "data"})
    assert catalog.load_namespace_properties(name) == {"owner": "alice", "team": "data"}
    assert catalog.namespace_exists(name)
    summary = catalog.update_namespace_properties(name, removals={"team", "absent"}, updates={"owner": "bob"})
    assert summary.updated == ["owner"] and summary.removed == ["team"] and summary.missing == ["absent"]
    assert catalog.load_namespace_properties(name) == {"owner": "bob"}
    with pytest.raises(NamespaceAlreadyExistsError):
        catalog.create_namespace(name)
    catalog.drop_namespace(name)
    assert not catalog.namespace_exists(name)
    with pytest.raises(NoSuchNamespaceError):
        catalog.drop_namespace(name)
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties(name)


def test_nested_namespaces(catalog):
    root = f"n_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(root)
    catalog.create_namespace((root, "b"))
    catalog.create_namespace((root, "a"))
    catalog.create_namespace((root, "a", "deep"))
    assert catalog.list_namespaces(root) == [(root, "a"), (root, "b")]
    assert catalog.list_namespaces((root, "a")) == [(root, "a", "deep")]
    assert (root,) in catalog.list_namespaces()
    assert catalog.load_namespace_properties((root, "a", "deep")) == {}
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(root)
    # pyiceberg maps a 404 on create to its generic RESTError; the type string says why
    with pytest.raises(RESTError, match="NoSuchNamespaceException"):
        catalog.create_namespace((f"{root}_missing", "child"))
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces(f"{root}_missing")


def test_drop_not_empty_with_table(catalog, ns):
    catalog.create_table(f"{ns}.t", PY_SCHEMA)
    with pytest.raises(NamespaceNotEmptyError):
        catalog.drop_namespace(ns)
    catalog.drop_table(f"{ns}.t")
    catalog.drop_namespace(ns)


def test_update_properties_conflict_is_422(http, ns):
    resp = http.post(f"/v1/namespaces/{ns}/properties", json={"removals": ["a"], "updates": {"a": "1"}})
    assert_error(resp, 422, "UnprocessableEntityException")


def test_update_properties_missing_always_present(http, ns):
    resp = http.post(f"/v1/namespaces/{ns}/properties", json={"updates": {"k": "v"}})
    assert resp.status_code == 200
    assert resp.json() == {"updated": ["k"], "removed": [], "missing": []}


def test_pagination_never_returns_empty_token(http):
    root = f"p_{uuid.uuid4().hex[:8]}"
    http.post("/v1/namespaces", json={"namespace": [root]})
    for i in range(5):
        assert http.post("/v1/namespaces", json={"namespace": [root, f"c{i}"]}).status_code == 200
    seen, token, pages = [], "", 0
    while token is not None:
        resp = http.get("/v1/namespaces", params={"parent": root, "pageToken": token, "pageSize": 2})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        seen += body["namespaces"]
        token = body.get("next-page-token")
        assert token != ""
        pages += 1
    assert seen == [[root, f"c{i}"] for i in range(5)] and pages == 3
    # without pageSize: everything at once
    body = http.get("/v1/namespaces", params={"parent": root, "pageToken": ""}).json()
    assert len(body["namespaces"]) == 5 and body.get("next-page-token") is None
    assert_error(http.get("/v1/namespaces", params={"pageSize": 0}), 400, "BadRequestException")
    assert_error(http.get("/v1/namespaces", params={"pageSize": "x"}), 400, "BadRequestException")


def test_parent_query_encodings(http):
    root = f"q_{uuid.uuid4().hex[:8]}"
    http.post("/v1/namespaces", json={"namespace": [root]})
    http.post("/v1/namespaces", json={"namespace": [root, "a b"]})
    http.post("/v1/namespaces", json={"namespace": [root, "a b", "c"]})
    # Java: levels joined by the raw 0x1F, then query-encoded once
    java = http.get("/v1/namespaces", params={"parent": f"{root}\x1fa b"}).json()
    # pyiceberg: levels quoted, joined by %1F, then encoded again by requests
    py = http.get("/v1/namespaces", params={"parent": f"{root}%1Fa%20b"}).json()
    assert java["namespaces"] == py["namespaces"] == [[root, "a b", "c"]]


def test_namespace_path_decoding(http):
    root = f"e_{uuid.uuid4().hex[:8]}"
    for levels in ([root], [root, "with space"], [root, "with space", "dot.ted"], [root, "ünï"], [root, "a+b"]):
        if len(levels) > 2 and levels[1] != "with space":
            continue
        assert http.post("/v1/namespaces", json={"namespace": levels}).status_code == 200, levels
    http.post("/v1/namespaces", json={"namespace": [root, "ünï"]})
    http.post("/v1/namespaces", json={"namespace": [root, "a+b"]})
    # Java form-encoding (+ for space), pyiceberg percent-encoding (%20), both with %1F separators
    for path in (f"{root}%1Fwith+space", f"{root}%1Fwith%20space", f"{root}%1fwith%20space"):
        body = http.get(f"/v1/namespaces/{path}").json()
        assert body["namespace"] == [root, "with space"], (path, body)
    assert http.get(f"/v1/namespaces/{root}%1Fwith+space%1Fdot.ted").json()["namespace"] == [
        root,
        "with space",
        "dot.ted",
    ]
    assert http.get(f"/v1/namespaces/{root}%1F%C3%BCn%C3%AF").json()["namespace"] == [root, "ünï"]
    assert http.get(f"/v1/namespaces/{root}%1Fa%2Bb").json()["namespace"] == [root, "a+b"]


def test_head_has_no_body(http, ns):
    ok = http("HEAD", f"/v1/namespaces/{ns}")
    assert ok.status_code == 204 and ok.content == b""
    missing = http("HEAD", f"/v1/namespaces/{ns}_missing")
    assert missing.status_code == 404 and missing.content == b""


def test_namespace_errors(http, ns):
    assert_error(
        http.get(f"/v1/namespaces/{ns}_nope"), 404, "NoSuchNamespaceException", f"Namespace does not exist: {ns}_nope"
    )
    assert_error(
        http.post("/v1/namespaces", json={"namespace": [ns]}),
        409,
        "AlreadyExistsException",
        f"Namespace already exists: {ns}",
    )
    assert_error(http.post("/v1/namespaces", json={"namespace": []}), 400, "BadRequestException")
    assert_error(http.post("/v1/namespaces", json={"namespace": ["a/.."]}), 400, "BadRequestException")
    assert_error(http.post("/v1/namespaces", json={"namespace": [".."]}), 400, "BadRequestException")
    assert_error(http.post("/v1/namespaces", json={"namespace": "flat"}), 400, "BadRequestException")
    assert_error(
        http.post("/v1/namespaces", json={"namespace": ["x"], "properties": {"a": 1}}), 400, "BadRequestException"
    )
    assert_error(http.post("/v1/namespaces", data=b"{not json"), 400, "BadRequestException")
    assert_error(http.post("/v1/namespaces", data=b""), 400, "BadRequestException")


def test_a_removal_named_twice_is_removed_once(http, ns):
    assert http.post(f"/v1/namespaces/{ns}/properties", json={"updates": {"k": "v"}}).status_code == 200
    resp = http.post(f"/v1/namespaces/{ns}/properties", json={"removals": ["k", "k", "", ""]})
    assert resp.status_code == 200, resp.text
    assert resp.json() == {"updated": [], "removed": ["k"], "missing": [""]}
