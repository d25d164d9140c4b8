"""Pure logic of the Azure and GCS warehouses, no service: the location policy's normal forms and
confinement under hostile input, the SAS and the GCS access boundary as built, the settings refused."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import errors
from catalog.locations import Locations, normalise
from catalog.settings import ConfigurationError, Settings
from catalog.storage import cloud_vending as cv

AZ = "abfss://lake@acct.dfs.core.windows.net"
KEY = "a2V5LWZvci11bml0LXRlc3RzLW9ubHktMzItYnl0ZXMhIQ=="  # base64, like an account key


# -- normal forms ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        f"{AZ}/wh/t",
        "abfs://lake@acct.dfs.core.windows.net/wh/t",
        "wasbs://lake@acct.blob.core.windows.net/wh/t",
        "wasb://lake@ACCT.BLOB.core.windows.net/wh//t/",
        "ABFSS://lake@acct.dfs.core.windows.net/wh/t",
    ],
)
def test_the_spellings_of_one_azure_container_are_one_location(spelling: str) -> None:
    assert normalise(spelling) == f"{AZ}/wh/t"


def test_gcs_locations_normalise_their_path() -> None:
    assert normalise("gs://lake//wh/t/") == "gs://lake/wh/t"
    assert normalise("GS://lake/wh") == "gs://lake/wh"


@pytest.mark.parametrize(
    "bad",
    [
        "abfss://acct.dfs.core.windows.net/wh",  # no container
        "abfss://Lake@acct.dfs.core.windows.net/wh",  # container names are lower-case
        "abfss://la@acct.dfs.core.windows.net/wh",  # too short
        "abfss://la--ke@acct.dfs.core.windows.net/wh",  # double hyphen
        "abfss://lake@acct/wh",  # not a host with a domain
        "abfss://lake@acct.dfs.core.windows.net:443/wh",  # a port
        "abfss://a@lake@acct.dfs.core.windows.net/wh",  # two @
        "abfss://@acct.dfs.core.windows.net/wh",
        f"{AZ}/wh/a\\b",  # Azure reads a backslash as /
        f"{AZ}/wh/%2e%2e/x",
        f"{AZ}/wh/..%2Fx",
        "gs://Lake/wh",  # bucket names are lower-case
        "gs://l/wh",
        "gs://lake/wh/..",
        "gs://lake/wh/a\\..\\b",
    ],
)
def test_malformed_cloud_locations_are_refused(bad: str) -> None:
    with pytest.raises(errors.BadRequest):
        normalise(bad)


@pytest.mark.parametrize(
    "outside",
    [
        "abfss://other@acct.dfs.core.windows.net/wh/t",
        "abfss://lake@other.dfs.core.windows.net/wh/t",
        "abfss://lake@acct.dfs.core.chinacloudapi.cn/wh/t",
        f"{AZ}/wh2/t",
        f"{AZ}/w",
        "gs://lake/wh/t",
        "s3://lake/wh/t",
        "file:///wh/t",
    ],
)
def test_only_the_warehouse_container_and_prefix_are_allowed(outside: str) -> None:
    with pytest.raises(errors.Forbidden):
        Locations(f"{AZ}/wh").check(outside)


def test_the_blob_spelling_of_the_warehouse_is_inside_it() -> None:
    assert Locations(f"{AZ}/wh").check("wasbs://lake@acct.blob.core.windows.net/wh/ns/t") == f"{AZ}/wh/ns/t"


_PIECES = [*"ab.%2eEfF/\\-_~@:?#", "..", "%2e%2e", "%2F", "%5C", "%252e"]
_segment = st.lists(st.sampled_from(_PIECES), max_size=8).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(_segment, max_size=6), st.sampled_from([f"{AZ}/wh", "gs://lake/wh"]))
def test_whatever_is_accepted_lies_under_the_root_in_every_decoding(parts: list[str], root: str) -> None:
    """Hostile paths: an accepted location is under the root as a string, has no dot segment and no
    backslash, even once percent-decoded (some FileIOs decode)."""
    from urllib.parse import unquote

    candidate = root + "/" + "/".join(parts)
    try:
        normal = Locations(root).check(candidate)
    except (errors.BadRequest, errors.Forbidden):
        return
    assert normal == root or normal.startswith(root + "/")
    decoded = unquote(normal[len(root) :])
    assert "\\" not in decoded
    assert not {".", ".."} & set(decoded.split("/"))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_no_authority_reaches_another_container_or_bucket(authority: str) -> None:
    for scheme, root in (("abfss", f"{AZ}/wh"), ("wasbs", f"{AZ}/wh"), ("gs", "gs://lake/wh")):
        try:
            normal = Locations(root).check(f"{scheme}://{authority}/wh/t")
        except (errors.BadRequest, errors.Forbidden):
            continue
        assert normal == f"{root}/t"


# -- Azure SAS ------------------------------------------------------------------------------------


def _sas(scope: str, access: str) -> dict[str, list[str]]:
    now = datetime(2026, 11, 27, tzinfo=UTC)
    token = cv.azure_sas(scope, "acct", KEY, "lake", "wh/ns/t", access, now, now + timedelta(hours=1))
    return parse_qs(token)


def test_a_directory_sas_names_the_tables_directory_and_the_access() -> None:
    read, write = _sas("directory", cv.READ), _sas("directory", cv.WRITE)
    assert read["sr"] == ["d"] and read["sp"] == ["rl"]
    assert write["sr"] == ["d"] and write["sp"] == ["racwdl"]
    assert read["sdd"] == ["3"]  # wh/ns/t: the depth Azure checks the path against
    assert read["se"] == ["2026-11-27T01:00:00Z"]


def test_a_container_sas_is_the_container_and_says_so() -> None:
    read = _sas("container", cv.READ)
    assert read["sr"] == ["c"] and read["sp"] == ["rl"] and "sdd" not in read


def test_the_vendor_scopes_to_its_account_and_never_the_container_root() -> None:
    assert cv.azure_scope(f"{AZ}/wh/ns/t", "acct") == ("lake", "wh/ns/t")
    assert cv.azure_scope("wasbs://lake@acct.blob.core.windows.net/wh/ns/t", "acct") == ("lake", "wh/ns/t")
    for bad in ("abfss://lake@other.dfs.core.windows.net/wh/t", f"{AZ}", "gs://lake/wh/t", f"{AZ}/wh/../x"):
        with pytest.raises((errors.Forbidden, errors.BadRequest)):
            cv.azure_scope(bad, "acct")


def test_adls_properties_carry_the_sas_for_both_hosts_and_no_key() -> None:
    props = cv.adls_properties("acct.dfs.core.windows.net", "sv=x&sig=y", 123, "http://127.0.0.1:1/acct")
    assert props["adls.sas-token.acct.dfs.core.windows.net"] == "sv=x&sig=y"
    assert props["adls.sas-token.acct.blob.core.windows.net"] == "sv=x&sig=y"
    assert props["adls.sas-token-expires-at-ms.acct.dfs.core.windows.net"] == "123"
    assert props["adls.connection-string"] == "BlobEndpoint=http://127.0.0.1:1/acct;SharedAccessSignature=sv=x&sig=y"
    assert not [k for k in props if "key" in k.lower()] and "AccountKey" not in str(props)
    assert "adls.connection-string" not in cv.adls_properties("acct.dfs.core.windows.net", "s", 1, None)


# -- GCS downscoping (built here; not verified against Google's STS) --------------------------------


def test_the_access_boundary_confines_objects_and_listings_to_the_prefix() -> None:
    bucket, prefix = cv.gcs_scope("gs://lake/wh/ns/t")
    boundary = cv.access_boundary(bucket, prefix, cv.READ)
    (rule,) = boundary["accessBoundary"]["accessBoundaryRules"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/lake"
    assert rule["availablePermissions"] == ["inRole:roles/storage.objectViewer"]
    expression = rule["availabilityCondition"]["expression"]
    assert "resource.name.startsWith('projects/_/buckets/lake/objects/wh/ns/t/')" in expression
    assert "objectListPrefix', '').startsWith('wh/ns/t/')" in expression
    write = cv.access_boundary(bucket, prefix, cv.WRITE)["accessBoundary"]["accessBoundaryRules"][0]
    assert write["availablePermissions"] == ["inRole:roles/storage.objectAdmin"]


def test_the_token_exchange_form_is_googles() -> None:
    boundary = cv.access_boundary("lake", "wh/t", cv.WRITE)
    form = cv.token_exchange_form("source-token", boundary)
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert form["subject_token_type"] == form["requested_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert form["subject_token"] == "source-token"
    assert json.loads(form["options"]) == boundary


@pytest.mark.parametrize("bad", ["gs://lake", "gs://lake/wh/it's", 'gs://lake/wh/a"b', "s3://lake/wh/t"])
def test_a_prefix_a_condition_cannot_hold_gets_no_token(bad: str) -> None:
    with pytest.raises((errors.Forbidden, errors.BadRequest)):
        cv.gcs_scope(bad)


# -- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"warehouse": f"{AZ}/wh"}, "CATALOG_AZURE_ACCOUNT_KEY"),
        ({"warehouse": "abfss://lake/wh", "azure_account_key": KEY}, "container"),
        ({"warehouse": f"{AZ}/wh", "azure_account_key": KEY, "azure_blob_endpoint": "ftp://x"}, "BLOB_ENDPOINT"),
        ({"warehouse": "gs://Lake/wh"}, "bucket"),
        ({"warehouse": "gs://lake/wh", "gcs_no_auth": True}, "CATALOG_GCS_ENDPOINT"),
        ({"warehouse": "/tmp/wh", "azure_vend_credentials": True}, "CATALOG_AZURE_VEND_CREDENTIALS"),
        ({"warehouse": f"{AZ}/wh", "azure_account_key": KEY, "gcs_vend_credentials": True}, "GCS_VEND"),
    ],
)
def test_unusable_cloud_settings_are_refused_naming_the_setting(values: dict, says: str) -> None:
    from catalog.server import startup

    with pytest.raises(ConfigurationError, match=says) as refused:
        startup.check_settings(Settings(**values))
    assert KEY not in str(refused.value)


def test_clients_are_told_the_endpoint_never_a_credential() -> None:
    from catalog.storage import vending

    azure = Settings(
        warehouse=f"{AZ}/wh", azure_account_key=KEY, azure_blob_endpoint="http://in:1/acct",
        azure_client_blob_endpoint="http://out:1/acct",
    )  # fmt: skip
    assert vending.client_io_properties(azure.storage) == {
        "adls.connection-string.acct.dfs.core.windows.net": "http://out:1/acct",
        "adls.connection-string.acct.blob.core.windows.net": "http://out:1/acct",
    }
    gcs = Settings(warehouse="gs://lake/wh", gcs_endpoint="http://in:2")
    assert vending.client_io_properties(gcs.storage) == {"gcs.service.host": "http://in:2"}
    assert azure.storage.storage_kind == "azure" and gcs.storage.storage_kind == "gcs"
    assert Settings(warehouse="wasbs://lake@acct.blob.core.windows.net/w").storage.storage_kind == "azure"


def test_the_container_scope_is_warned_about() -> None:
    from catalog.server import startup

    s = Settings(warehouse=f"{AZ}/wh", azure_account_key=KEY, azure_vend_credentials=True, azure_sas_scope="container")
    assert any("whole container lake" in w for w in startup.risky(s))
    assert not any("whole container" in w for w in startup.risky(Settings(warehouse=f"{AZ}/wh", azure_account_key=KEY)))


def test_a_plain_http_cloud_endpoint_off_this_machine_is_warned_about() -> None:
    from catalog.server import startup

    remote = Settings(warehouse=f"{AZ}/wh", azure_account_key=KEY, azure_blob_endpoint="http://azurite:10000/acct")
    local = Settings(warehouse="gs://lake/wh", gcs_endpoint="http://127.0.0.1:9023")
    assert any(
        "CATALOG_AZURE_BLOB_ENDPOINT http://azurite:10000/acct is plain HTTP" in w for w in startup.risky(remote)
    )
    assert not any("plain HTTP" in w for w in startup.risky(local))
