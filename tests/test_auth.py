"""OAuth2 client credentials and bearer tokens, against a server with auth switched on."""

from __future__ import annotations

import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import OAuthError

from catalog.auth import InvalidToken, Tokens, parse_clients
from tests.conftest import assert_error, start_server
from tests.test_tables import SCHEMA


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "etl:s3cret,bi:other",
        "CATALOG_TOKEN_SECRET": "k",
        "CATALOG_AUTHORIZATION": "none",
    }
    server = start_server(tmp_path_factory.mktemp("auth"), "sqlite", env)
    yield server
    server.stop()


def test_pyiceberg_with_credential_works_end_to_end(secured):
    catalog = RestCatalog("sec", uri=secured.url, credential="etl:s3cret")
    catalog.create_namespace("secure")
    catalog.create_table("secure.t", SCHEMA)
    assert catalog.list_tables("secure") == [("secure", "t")]


def test_wrong_secret_is_invalid_client(secured):
    with pytest.raises(OAuthError):
        RestCatalog("sec", uri=secured.url, credential="etl:wrong")
    resp = requests.post(
        f"{secured.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "etl", "client_secret": "x"},
    )
    assert resp.status_code == 401 and resp.json()["error"] == "invalid_client"
    resp = requests.post(f"{secured.url}/v1/oauth/tokens", data={"grant_type": "password"})
    assert resp.status_code == 400 and resp.json()["error"] == "unsupported_grant_type"


def test_routes_need_a_valid_token(secured):
    for headers in (
        {},
        {"Authorization": "Bearer None"},
        {"Authorization": "Bearer abc.def"},
        {"Authorization": "Basic eA=="},
    ):
        assert_error(
            requests.get(f"{secured.url}/v1/namespaces", headers=headers, timeout=10), 401, "NotAuthorizedException"
        )
    token = requests.post(
        f"{secured.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "bi", "client_secret": "other", "scope": "catalog"},
        timeout=10,
    ).json()
    assert token["token_type"] == "bearer" and token["expires_in"] == 3600
    ok = requests.get(
        f"{secured.url}/v1/namespaces", headers={"Authorization": f"Bearer {token['access_token']}"}, timeout=10
    )
    assert ok.status_code == 200
    assert requests.get(f"{secured.url}/health/ready", timeout=10).status_code == 200  # probes stay open


def test_tokens_unit():
    tokens = Tokens(parse_clients("a:b"), "key", 60)
    issued = tokens.issue("a", now=1000)["access_token"]
    assert tokens.verify(issued, now=1010) == "a"
    with pytest.raises(InvalidToken):
        tokens.verify(issued, now=2000)  # expired
    with pytest.raises(InvalidToken):
        Tokens({}, "other-key", 60).verify(issued, now=1010)  # another secret
    with pytest.raises(InvalidToken):
        tokens.verify(issued[:-2] + "xx", now=1010)
    with pytest.raises(ValueError):
        parse_clients("no-secret")
