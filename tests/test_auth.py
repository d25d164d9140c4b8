"""Authentication: built-in client-credentials tokens and OIDC tokens, against real server processes.

Servers: ``secured`` (built-in clients + an OIDC provider found by discovery + a metrics token),
``restarted`` (the same database started again with clients removed/changed, OIDC by explicit JWKS URL),
``two_workers`` (2 processes sharing CATALOG_TOKEN_SECRET; its identity provider is down).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import json
import subprocess
import sys
import time
import uuid
from urllib.parse import urlencode, urlsplit

import pytest
import requests
from cryptography.hazmat.primitives import serialization
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import OAuthError

from catalog.auth.lockout import FailureLimiter
from catalog.auth.oidc import claim_at
from catalog.auth.principals import InvalidToken, Principal
from catalog.auth.tokens import BUILTIN_ISSUER, BuiltinTokens, parse_clients
from catalog.server.startup import check_settings
from catalog.settings import ConfigurationError, Settings
from tests.idp import LocalIdP, new_key
from tests.support import PY_SCHEMA, ROOT, assert_error, builtin_token, free_port, start_server

SECRET = "test-token-secret-0123456789abcdef"  # >= 32 bytes
AUDIENCE = "iceberg-catalog"
METRICS_TOKEN = "scrape-me-please"


@pytest.fixture(scope="module")
def idp():
    with LocalIdP(audience=AUDIENCE, clients={"spark": ("idp-secret", ["analysts", "etl"])}) as provider:
        yield provider


@pytest.fixture(scope="module")
def secured(tmp_path_factory, idp):
    env = {
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "etl:s3cret,bi:other,victim:victim-secret-XYZ",
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_OIDC_ISSUER": idp.issuer,
        "CATALOG_OIDC_AUDIENCE": AUDIENCE,
        "CATALOG_METRICS_TOKEN": METRICS_TOKEN,
        "CATALOG_AUTHORIZATION": "none",  # who the caller is, here; what it may do: tests/test_authz.py
    }
    server = start_server(tmp_path_factory.mktemp("auth"), "sqlite", env)
    yield server
    server.stop()


def get(server, path: str, token: str | None = None, **headers: str) -> requests.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return requests.get(server.url + path, headers=headers, timeout=10)


def assert_refused(resp: requests.Response, contains: str = "") -> None:
    """401 in the Iceberg body, with the RFC 6750 challenge for a refused token."""
    assert_error(resp, 401, "NotAuthorizedException", contains)
    assert resp.headers["WWW-Authenticate"] == 'Bearer realm="iceberg-catalog", error="invalid_token"'


# -- built-in tokens ----------------------------------------------------------------------------------


# These two configure pyiceberg with ``credential`` alone on purpose: its default token endpoint
# (``<uri>/v1/oauth/tokens``) is the one the server serves. pyiceberg deprecates that default.
DEFAULT_TOKEN_URL = pytest.mark.filterwarnings("ignore:Deprecated in 0.8.0.*OAuth2 server URI:DeprecationWarning")


@DEFAULT_TOKEN_URL
def test_pyiceberg_with_builtin_credential_works_end_to_end(secured):
    catalog = RestCatalog("sec", uri=secured.url, credential="etl:s3cret")
    catalog.create_namespace("secure")
    catalog.create_table("secure.t", PY_SCHEMA)
    assert catalog.list_tables("secure") == [("secure", "t")]


def test_builtin_token_is_a_jwt_bound_to_its_client(secured):
    token = builtin_token(secured, "bi", "other")
    header, claims = (json.loads(base64.urlsafe_b64decode(p + "==")) for p in token.split(".")[:2])
    assert header["alg"] == "HS256"
    assert claims["iss"] == BUILTIN_ISSUER and claims["sub"] == "bi" and claims["exp"] - claims["iat"] == 3600
    assert "other" not in json.dumps(claims)  # the binding is a keyed hash, not the secret
    assert get(secured, "/v1/namespaces", token).status_code == 200
    basic = base64.b64encode(b"bi:other").decode()
    resp = requests.post(
        f"{secured.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials"},
        headers={"Authorization": f"Basic {basic}"},
        timeout=10,
    )
    assert resp.status_code == 200 and resp.json()["token_type"] == "bearer"


@DEFAULT_TOKEN_URL
def test_wrong_secret_is_invalid_client(secured):
    with pytest.raises(OAuthError):
        RestCatalog("sec", uri=secured.url, credential="etl:wrong")
    resp = requests.post(
        f"{secured.url}/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "etl", "client_secret": "x"},
        timeout=10,
    )
    assert resp.status_code == 401 and resp.json()["error"] == "invalid_client"
    resp = requests.post(f"{secured.url}/v1/oauth/tokens", data={"grant_type": "password"}, timeout=10)
    assert resp.status_code == 400 and resp.json()["error"] == "unsupported_grant_type"


def test_routes_need_a_valid_token(secured):
    for path in ("/v1/namespaces", "/v1/config", "/v1/namespaces/secure/tables/t"):
        resp = get(secured, path)  # no credentials at all: a challenge without an error code (RFC 6750 3.1)
        assert_error(resp, 401, "NotAuthorizedException", "missing bearer token")
        assert resp.headers["WWW-Authenticate"] == 'Bearer realm="iceberg-catalog"'
    # what pyiceberg sends without a token: no token, said so (not a malformed one)
    assert_error(get(secured, "/v1/namespaces", "None"), 401, "NotAuthorizedException", "missing bearer token")
    assert_refused(get(secured, "/v1/namespaces", "abc.def"))
    assert_error(get(secured, "/v1/namespaces", Authorization="Basic eA=="), 401, "NotAuthorizedException")
    head = requests.head(f"{secured.url}/v1/namespaces/secure/tables/t", timeout=10)
    assert head.status_code == 401 and head.content == b""
    assert get(secured, "/health/ready").status_code == 200  # probes stay open
    assert get(secured, "/health/live", "garbage").status_code == 200


def test_metrics_need_the_metrics_token(secured):
    for token in (None, "wrong", builtin_token(secured, "bi", "other")):
        resp = get(secured, "/metrics", token)
        assert_error(resp, 401, "NotAuthorizedException", "metrics token")
        assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = get(secured, "/metrics", METRICS_TOKEN)
    assert resp.status_code == 200 and "catalog_http_requests_total" in resp.text


# -- OIDC tokens --------------------------------------------------------------------------------------


def test_pyiceberg_with_an_oidc_provider(secured, idp):
    """What a user configures: credential + oauth2-server-uri (the provider's token endpoint) + scope."""
    catalog = RestCatalog(
        "oidc",
        uri=secured.url,
        credential="spark:idp-secret",
        scope="catalog",
        **{"oauth2-server-uri": idp.token_url},
    )
    catalog.create_namespace("oidc_ns")
    assert ("oidc_ns",) in catalog.list_namespaces()
    # A ready-made token (`token=`), e.g. from a user's login
    by_token = RestCatalog("oidc2", uri=secured.url, token=idp.mint("alice", groups=["analysts"]))
    assert ("oidc_ns",) in by_token.list_namespaces()
    assert "/.well-known/openid-configuration" in idp.requests and "/jwks" in idp.requests


def test_key_rotation_is_accepted_without_restart(secured, idp):
    old = idp.mint("alice")
    assert get(secured, "/v1/namespaces", old).status_code == 200
    fetches = idp.requests.count("/jwks")
    idp.rotate()
    assert get(secured, "/v1/namespaces", idp.mint("alice")).status_code == 200
    assert idp.requests.count("/jwks") == fetches + 1  # the unknown kid made it fetch the keys once
    assert get(secured, "/v1/namespaces", old).status_code == 200  # the old key is still published
    assert get(secured, "/v1/namespaces", idp.mint("bob")).status_code == 200
    assert idp.requests.count("/jwks") == fetches + 1  # cached


def _b64(data: bytes | dict) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _forged(header: dict, claims: dict | bytes, key: bytes | None = None) -> str:
    """A token signed HS256 with ``key`` (or unsigned), built by hand: PyJWT refuses to make these."""
    signing_input = f"{_b64(header)}.{_b64(claims)}"
    signature = _b64(hmac.new(key, signing_input.encode(), hashlib.sha256).digest()) if key else ""
    return f"{signing_input}.{signature}"


def _relabelled(token: str, alg: str) -> str:
    """The token with another ``alg`` in its header (the signature left as it was)."""
    header, rest = token.split(".", 1)
    fields = json.loads(base64.urlsafe_b64decode(header + "=="))
    return f"{_b64({**fields, 'alg': alg})}.{rest}"


def refused_tokens(idp) -> dict[str, str]:
    now = int(time.time())
    claims = {"iss": idp.issuer, "aud": AUDIENCE, "sub": "mallory", "iat": now, "exp": now + 600}
    public_pem = (
        idp.keys[-1][1]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    nested = ("[" * 4000 + "]" * 4000).encode()
    return {
        "expired": idp.mint("alice", iat=now - 7200, exp=now - 3600),
        "not yet valid": idp.mint("alice", nbf=now + 3600),
        "wrong issuer": idp.mint("alice", iss="https://evil.example.com"),
        "no issuer": idp.mint("alice", iss=None),
        "wrong audience": idp.mint("alice", aud="another-service"),
        "no audience": idp.mint("alice", aud=None),
        "unknown key": idp.mint("alice", key=new_key(), kid="not-a-published-kid"),
        "known kid, other key": idp.mint("alice", key=new_key()),
        "HS256 with the public key": _forged({"alg": "HS256", "kid": idp.kid, "typ": "JWT"}, claims, public_pem),
        "alg none": _forged({"alg": "none", "kid": idp.kid}, claims),
        "alg none, builtin issuer": _forged({"alg": "none"}, {**claims, "iss": BUILTIN_ISSUER}),
        "builtin issuer, other key": _forged({"alg": "HS256"}, {**claims, "iss": BUILTIN_ISSUER, "cb": "x"}, b"k" * 32),
        "garbage": "garbage",
        "three garbage parts": "!!!.@@@.###",
        "bad base64": "eyJ.eyJ.x",
        "header is a list": f"{_b64([1, 2])}.{_b64(claims)}.sig",
        "payload not json": f"{_b64({'alg': 'RS256'})}.{_b64(b'not json')}.sig",
        "nested json": f"{_b64({'alg': 'RS256', 'kid': idp.kid})}.{_b64(nested)}.sig",
        "huge": idp.mint("alice", padding="x" * 20_000),
        "missing sub": idp.mint(None),
        "non-string sub": idp.mint(12345),
        "object sub": idp.mint({"name": "alice"}),
        "groups an object": idp.mint("alice", groups={"admin": True}),
        "groups of numbers": idp.mint("alice", groups=[1, 2]),
        "exp a string": idp.mint("alice", exp="tomorrow"),
        "kid not a string": _forged({"alg": "RS256", "kid": ["a"]}, claims),
        "ES256 header on an RSA key": _relabelled(idp.mint("alice"), "ES256"),
        "PS256 header on an RS256 signature": _relabelled(idp.mint("alice"), "PS256"),
    }


def test_refused_tokens_are_401_with_a_challenge_never_500(secured, idp):
    for case, token in refused_tokens(idp).items():
        resp = get(secured, "/v1/namespaces", token)
        assert resp.status_code == 401, (case, resp.status_code, resp.text)
        assert_refused(resp)
    # Messages say what is wrong
    assert_refused(get(secured, "/v1/namespaces", idp.mint("alice", exp=int(time.time()) - 3600)), "expired")
    assert_refused(get(secured, "/v1/namespaces", idp.mint("a", iss="https://x.example")), "not trusted")
    assert_refused(get(secured, "/v1/namespaces", idp.mint("a", aud="other")), "audience")
    assert_refused(get(secured, "/v1/namespaces", idp.mint("a", groups={"x": 1})), "'groups'")
    assert_refused(get(secured, "/v1/namespaces", idp.mint(7)), "'sub'")
    metrics = get(secured, "/metrics", METRICS_TOKEN).text
    assert 'status="500"' not in metrics


# -- failed-attempt lockout ---------------------------------------------------------------------------


def token_request(server, client_id: str, secret: str, source: str) -> tuple[int, dict, dict]:
    """POST /v1/oauth/tokens from a chosen loopback address (each 127.x.y.z is its own source)."""
    parts = urlsplit(server.url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10, source_address=(source, 0))
    try:
        body = urlencode({"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret})
        conn.request("POST", "/v1/oauth/tokens", body, {"Content-Type": "application/x-www-form-urlencoded"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, json.loads(resp.read())
    finally:
        conn.close()


def test_guessing_a_clients_secret_slows_the_guesser_not_the_client(secured):
    source = "127.0.0.15"
    for i in range(FailureLimiter.PAIR_FREE - 1):  # 401 each; the failure that reaches the limit is a 429
        status, _, body = token_request(secured, "victim", f"wrong-guess-{i}", source)
        assert status == 401 and body["error"] == "invalid_client"
    status, headers, body = token_request(secured, "victim", "wrong-guess-x", source)
    assert status == 429 and body["error"] == "slow_down", body  # the guesser is slowed down
    assert 1 <= int(headers["retry-after"]) <= 2
    assert token_request(secured, "victim", "victim-secret-XYZ", "127.0.0.16")[0] == 200  # the client is not
    assert token_request(secured, "victim", "victim-secret-XYZ", source)[0] == 200  # nor the right secret there
    log = secured.log.read_text()
    audit = [json.loads(line) for line in log.splitlines() if '"catalog.audit"' in line]
    assert any("slowed" in e["message"] and "'victim'" in e["message"] and source in e["message"] for e in audit)
    assert any("wrong secret" in e["message"] and source in e["message"] for e in audit)
    assert "victim-secret-XYZ" not in log and "wrong-guess" not in log


def test_guessing_from_one_address_slows_the_address_down(secured):
    source = "127.0.0.30"
    for _ in range(FailureLimiter.ADDRESS_FREE - 1):  # random ids: counted on the address
        status, _, _ = token_request(secured, uuid.uuid4().hex, "x", source)
        assert status == 401
    status, headers, body = token_request(secured, uuid.uuid4().hex, "x", source)
    assert status == 429 and body["error"] == "slow_down" and int(headers["retry-after"]) >= 1
    assert token_request(secured, "bi", "other", source)[0] == 200  # the right secret is never refused
    assert token_request(secured, "bi", "other", "127.0.0.31")[0] == 200


# -- restart: clients removed or changed; OIDC by explicit JWKS URL -----------------------------------


@pytest.fixture(scope="module")
def restarted(tmp_path_factory, idp):
    workdir = tmp_path_factory.mktemp("restart")
    env = {"CATALOG_AUTH_REQUIRED": "true", "CATALOG_TOKEN_SECRET": SECRET}
    first = start_server(workdir, "sqlite", {**env, "CATALOG_OAUTH_CLIENTS": "gone:g1,changed:c1,kept:k1"})
    try:
        tokens = {c: builtin_token(first, c, s) for c, s in (("gone", "g1"), ("changed", "c1"), ("kept", "k1"))}
        assert all(get(first, "/v1/namespaces", t).status_code == 200 for t in tokens.values())
    finally:
        first.stop()
    env |= {"CATALOG_OAUTH_CLIENTS": "changed:c2,kept:k1", "CATALOG_OIDC_JWKS_URL": idp.jwks_url}
    server = start_server(workdir, "sqlite", {**env, "CATALOG_OIDC_GROUPS_CLAIM": "realm_access.roles"})
    yield server, tokens
    server.stop()


def test_removing_a_client_or_changing_its_secret_invalidates_its_tokens(restarted):
    server, tokens = restarted
    assert_refused(get(server, "/v1/namespaces", tokens["gone"]), "no longer exists")
    assert_refused(get(server, "/v1/namespaces", tokens["changed"]), "secret has changed")
    assert get(server, "/v1/namespaces", tokens["kept"]).status_code == 200  # same secret: survives the restart


def test_explicit_jwks_url_and_nested_groups_claim(restarted, idp):
    server, _ = restarted
    # Only a JWKS URL: tokens of any issuer signed by its keys, no audience check
    other_issuer = idp.mint("alice", aud=None, iss="https://kc.example/realms/x")
    assert get(server, "/v1/namespaces", other_issuer).status_code == 200
    roles = idp.mint("alice", realm_access={"roles": ["analysts"]})
    assert get(server, "/v1/namespaces", roles).status_code == 200
    for odd in ({"roles": "one-role"}, {"roles": [["nested"]]}, "not-an-object", {"roles": {"a": 1}}):
        resp = get(server, "/v1/namespaces", idp.mint("alice", realm_access=odd))
        if odd == {"roles": "one-role"}:
            assert resp.status_code == 200  # a single string is one group
        else:
            assert_refused(resp, "realm_access")
    fetches = idp.requests.count("/jwks")
    for _ in range(5):  # random kids: at most one fetch per 10 s
        assert_refused(get(server, "/v1/namespaces", idp.mint("a", key=new_key(), kid=uuid.uuid4().hex)), "key")
    assert idp.requests.count("/jwks") <= fetches + 1


# -- two workers sharing CATALOG_TOKEN_SECRET; the identity provider is down ---------------------------


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: the provider is down from the start
    env = {
        "CATALOG_WORKERS": "2",
        "CATALOG_AUTH_REQUIRED": "true",
        "CATALOG_OAUTH_CLIENTS": "etl:s3cret",
        "CATALOG_TOKEN_SECRET": SECRET,
        "CATALOG_OIDC_ISSUER": dead,
    }
    server = start_server(tmp_path_factory.mktemp("workers"), "sqlite", env)  # starts although the IdP is down
    yield server, dead
    server.stop()


def test_every_fresh_token_works_on_every_worker(two_workers):
    server, _ = two_workers
    refused = []
    for i in range(100):  # requests without a session: a new connection each, spread over both workers
        token = builtin_token(server, "etl", "s3cret")
        resp = get(server, "/v1/namespaces", token)
        if resp.status_code != 200:
            refused.append((i, resp.status_code, resp.text))
    assert not refused


def test_an_unreachable_identity_provider_is_a_503(two_workers, idp):
    server, dead = two_workers
    for _ in range(2):
        resp = get(server, "/v1/namespaces", idp.mint("alice", iss=dead))
        assert_error(resp, 503, "ServiceUnavailableException", "Identity provider unavailable")
        assert dead.split("//")[-1] not in resp.text  # its host and port: in the log only
        assert resp.headers["retry-after"] == "1"
    assert get(server, "/v1/namespaces", builtin_token(server, "etl", "s3cret")).status_code == 200


# -- configurations refused at start ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"CATALOG_AUTH_REQUIRED": "true"}, "CATALOG_AUTH_REQUIRED"),
        ({"CATALOG_OAUTH_CLIENTS": "a:b", "CATALOG_WORKERS": "2"}, "CATALOG_TOKEN_SECRET"),
        (
            {"CATALOG_OAUTH_CLIENTS": "a:b", "CATALOG_DATABASE_URL": "postgresql+psycopg://u@127.0.0.1:1/x"},
            "CATALOG_TOKEN_SECRET",
        ),
        ({"CATALOG_OAUTH_CLIENTS": "a:b", "CATALOG_TOKEN_SECRET": "short"}, "CATALOG_TOKEN_SECRET"),
        ({"CATALOG_AUTH_REQUIRED": "true", "CATALOG_OAUTH_CLIENTS": "no-secret"}, "CATALOG_OAUTH_CLIENTS"),
        ({"CATALOG_AUTH_REQUIRED": "true", "CATALOG_OIDC_ISSUER": "keycloak.local"}, "CATALOG_OIDC_ISSUER"),
    ],
)
@pytest.mark.slow
def test_misconfiguration_is_refused_with_one_line(tmp_path, env, names):
    full = {
        **{k: v for k, v in __import__("os").environ.items() if not k.startswith("CATALOG_")},
        "CATALOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
        "CATALOG_PORT": str(free_port()),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "serve"], env=full, cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("iceberg-catalog: configuration error:") and names in lines[0], lines


def test_one_sqlite_process_without_a_secret_only_warns():
    warnings = check_settings(Settings(oauth_clients="a:b", database_url="sqlite:///x.db", workers=1))
    assert len(warnings) == 1 and "CATALOG_TOKEN_SECRET" in warnings[0]
    assert check_settings(Settings(oauth_clients="a:b", token_secret=SECRET, workers=4)) == []
    with pytest.raises(ConfigurationError, match="CATALOG_TOKEN_SECRET"):
        check_settings(Settings(token_secret="x" * 31))


def test_gate_covers_management_routes_and_sets_the_principal():
    """In process, around a stand-in app: /management/* needs a token like /v1/* (those routes come later)."""
    import asyncio

    from catalog.api.oauth import BearerAuth
    from catalog.auth.identity import Authenticator
    from catalog.auth.principals import ANONYMOUS, UNAUTHENTICATED

    settings = Settings(auth_required=True, oauth_clients="a:b", token_secret=SECRET)
    authenticator = Authenticator.from_settings(settings.auth)
    token = authenticator.builtin.issue("a")["access_token"]

    def call(path: str, required: bool = True, bearer: str | None = None) -> tuple[int, object]:
        seen: dict = {}

        async def app(scope, receive, send):
            seen["principal"] = scope["principal"]
            await send({"type": "http.response.start", "status": 200, "headers": []})

        sent: list = []

        async def send(message):
            sent.append(message)

        headers = [(b"authorization", f"Bearer {bearer}".encode())] if bearer else []
        scope = {"type": "http", "method": "GET", "path": path, "headers": headers, "client": ("1.2.3.4", 5)}
        gate = BearerAuth(app, authenticator=authenticator, required=required, metrics_token=None)
        asyncio.run(gate(scope, None, send))
        return sent[0]["status"], seen.get("principal")

    assert call("/management/grants") == (401, None)
    assert call("/management/grants", bearer=token) == (200, Principal("a", kind="client"))
    assert call("/v1/namespaces", bearer="junk")[0] == 401
    assert call("/v1/namespaces", required=False, bearer="None") == (200, ANONYMOUS)
    assert call("/health/live") == (200, UNAUTHENTICATED)
    assert call("/v1/oauth/tokens") == (200, UNAUTHENTICATED)


# -- units --------------------------------------------------------------------------------------------


def test_builtin_tokens_unit():
    tokens = BuiltinTokens(parse_clients("a:b"), SECRET, 60)
    issued = tokens.issue("a", now=1000)["access_token"]
    assert tokens.verify(issued, now=1010) == Principal("a", kind="client")
    with pytest.raises(InvalidToken, match="expired"):
        tokens.verify(issued, now=2000)
    with pytest.raises(InvalidToken, match="signature"):
        BuiltinTokens({"a": "b"}, "another-secret-of-at-least-32-bytes", 60).verify(issued, now=1010)
    with pytest.raises(InvalidToken):
        tokens.verify(issued[:-2] + "xx", now=1010)
    with pytest.raises(InvalidToken, match="no longer exists"):
        BuiltinTokens({"z": "b"}, SECRET, 60).verify(issued, now=1010)
    with pytest.raises(InvalidToken, match="secret has changed"):
        BuiltinTokens({"a": "c"}, SECRET, 60).verify(issued, now=1010)
    with pytest.raises(ConfigurationError):
        parse_clients("no-secret")


def test_claim_at():
    claims = {"realm_access": {"roles": ["a"]}, "https://example.com/groups": ["g"], "s": "x"}
    assert claim_at(claims, "realm_access.roles") == ["a"]
    assert claim_at(claims, "https://example.com/groups") == ["g"]
    assert claim_at(claims, "missing.path") is None
    with pytest.raises(InvalidToken):
        claim_at(claims, "s.deeper")


# --- an OIDC token's times are numbers (issue 28, item e) ---------------------------------------


def test_an_oidc_token_whose_exp_is_a_string_is_refused(tmp_path):
    from tests.idp import LocalIdP

    with LocalIdP(audience="catalog") as idp:
        env = {
            "CATALOG_AUTH_REQUIRED": "true",
            "CATALOG_TOKEN_SECRET": SECRET,
            "CATALOG_OIDC_ISSUER": idp.issuer,
            "CATALOG_OIDC_AUDIENCE": "catalog",
            "CATALOG_AUTHORIZATION": "none",
        }
        server = start_server(tmp_path / "oidc", extra_env=env)
        try:

            def get(token: str) -> requests.Response:
                return requests.get(
                    f"{server.url}/v1/namespaces", headers={"Authorization": f"Bearer {token}"}, timeout=10
                )

            assert get(idp.mint("alice")).status_code == 200
            later = int(time.time()) + 3600
            for claims in ({"exp": str(later)}, {"exp": f"{later}.0"}, {"iat": str(int(time.time()))}, {"exp": True}):
                resp = get(idp.mint("alice", **claims))
                assert_error(resp, 401, "NotAuthorizedException")
        finally:
            server.stop()
