"""S3 remote signing: a client without S3 keys asks the catalog to sign each S3 request it is about
to send; the catalog signs it with its own credentials only when the request stays inside the
table's location and the caller may do that kind of access.

The rules, each refused with 403 (``errors.Forbidden``) unless it is malformed (400):

- the URI is ``http(s)`` to the S3 endpoint clients are told (or the server's own, or AWS's when
  none is configured), path-style (``host/bucket/key``) or virtual-hosted (``bucket.host/key``);
  a ``Host`` header, if sent, names the same host: the signature covers it and S3 routes on it;
- the bucket is the table's, and every key (percent-decoded, as S3 decodes it) lies under the
  table's location + ``/``, with no ``.``/``..`` segment (also percent-encoded once more: ``%2e%2e``),
  no backslash and no control character; a listing
  (``GET bucket?list-type=2``) needs a ``prefix`` under the location;
- only object operations and listings: the query parameters are an allow-list (``?acl``,
  ``?policy``, ``?tagging``, ``?versionId``... are refused), and so are headers that reach beyond
  the object (``x-amz-copy-source`` reads any object the server may read, ``x-amz-acl`` and
  ``x-amz-grant-*`` publish it, object-lock headers);
- ``DeleteObjects`` (``POST bucket?delete``) only when ``s3_remote_signing_bulk_delete`` is on: its
  XML body comes with the request, every key in it must pass the rules, and the signature covers
  the body's SHA-256. That binds the body only where the store checks the hash against the body:
  AWS S3 and MinIO do; SeaweedFS checks neither it nor Content-MD5 (measured), so there a signed
  DeleteObjects would delete whatever keys the client sends with it — hence off by default;
- reads (GET/HEAD) need ``read`` on the table, everything else ``write``.

The signature itself is botocore's ``S3SigV4Auth`` over the client's method, URI and headers. The
payload hash is the client's ``x-amz-content-sha256`` (``UNSIGNED-PAYLOAD`` when it sent none), as
S3 then checks the body against it; only DeleteObjects' is computed here. The answer holds only the
headers the signature added or changed (``Authorization``, ``X-Amz-Date``, ...): pyiceberg adds the
returned headers to its request, Java's client lets its own win, so echoing the client's own
headers back would duplicate them.

Pure apart from the clock and the credentials: no I/O, no framework.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from catalog import errors
from catalog.locations import normalise
from catalog.settings import StorageSettings

READ, WRITE = "read", "write"
REMOTE_SIGNING, VENDED_CREDENTIALS = "remote-signing", "vended-credentials"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()

MAX_URI_CHARS = 8192
MAX_HEADERS = 100
MAX_HEADER_BYTES = 16 * 1024  # all values together
MAX_BODY_BYTES = 2 * 2**20  # DeleteObjects: at most 1,000 keys of at most 1,024 bytes, in XML
MAX_DELETE_KEYS = 1000

# Query parameters of the object operations and ListObjectsV2; anything else (a sub-resource such
# as acl, policy, tagging, cors, lifecycle, versionId, or a response-* override) is refused.
_LIST_PARAMS = frozenset(
    {"list-type", "prefix", "continuation-token", "delimiter", "max-keys", "start-after", "encoding-type"}
    | {"fetch-owner"}
)
_OBJECT_PARAMS = frozenset({"uploads", "uploadId", "partNumber"})
_ALLOWED_PARAMS = _LIST_PARAMS | _OBJECT_PARAMS | {"delete", "x-id"}
# x-id names the operation (newer AWS SDKs send it): only object operations and listings.
_X_IDS = frozenset(
    {
        "GetObject",
        "HeadObject",
        "PutObject",
        "DeleteObject",
        "DeleteObjects",
        "ListObjectsV2",
        "CreateMultipartUpload",
        "UploadPart",
        "CompleteMultipartUpload",
        "AbortMultipartUpload",
        "ListParts",
    }
)
_REFUSED_HEADER = re.compile(
    r"^(x-amz-copy-source.*|x-amz-acl|x-amz-grant-.*|x-amz-object-lock-.*|x-amz-bypass-governance-retention"
    r"|x-amz-website-redirect-location|x-amz-metadata-directive|x-amz-tagging-directive)$"
)
# Not signed (botocore leaves them out too, or they are transport): the rest of the client's headers are.
_HOP_HEADERS = frozenset({"host", "authorization", "x-amz-date", "x-amz-security-token"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# -- what loadTable advertises ----------------------------------------------------------------------


def offered(settings: StorageSettings, delegation: str | None) -> bool:
    """Whether a load result offers remote signing: it is switched on, the warehouse is S3, and the
    client asked for it, or asked for vended credentials while the server vends none (it never
    hands out its own keys, so signing is how a client without keys reaches the data)."""
    if not settings.s3_remote_signing or not is_s3(settings.warehouse):
        return False
    modes = {m.strip().lower() for m in (delegation or "").split(",")}
    return REMOTE_SIGNING in modes or (VENDED_CREDENTIALS in modes and not settings.s3_vend_credentials)


def properties_for(prefix: str, ns: tuple[str, ...], name: str) -> dict[str, str]:
    """The table ``config`` entries that make clients sign through the catalog: Java's S3FileIO
    (``s3.remote-signing-enabled``, ``s3.signer.endpoint`` resolved against the catalog URI) and
    pyiceberg (its ``S3V4RestSigner`` lives in the fsspec FileIO; PyArrow's cannot sign), and the
    contract's generic ``signer.endpoint`` for clients that read that one. ``prefix``: the warehouse's."""
    endpoint = endpoint_path(prefix, ns, name)
    return {
        "s3.remote-signing-enabled": "true",
        "s3.signer.endpoint": endpoint,
        "signer.endpoint": endpoint,
        "s3.signer": "S3V4RestSigner",
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
    }


# The load result's ``remote-signing-config`` (the contract's RemoteSigningConfig) next to the ``config``
# properties above, which stay for clients that predate it: this signer needs no static properties or
# headers passed back to it (the endpoint names the table; the caller's token authorizes).
REMOTE_SIGNING_CONFIG: dict[str, dict] = {"properties": {}, "headers": {}}


def endpoint_path(prefix: str, ns: tuple[str, ...], name: str) -> str:
    """``v1/{prefix}/namespaces/{ns}/tables/{t}/sign``, relative to the catalog URI, encoded as the
    routes decode it (levels joined by ``%1F``, each URL-encoded)."""
    levels = "%1F".join(quote(level, safe="") for level in ns)
    head = f"v1/{quote(prefix, safe='')}/" if prefix else "v1/"
    return f"{head}namespaces/{levels}/tables/{quote(name, safe='')}/sign"


def is_s3(location: str) -> bool:
    return location.lower().startswith(("s3://", "s3a://", "s3n://"))


# -- the request: parse and classify ----------------------------------------------------------------


@dataclass(frozen=True)
class SignRequest:
    method: str
    uri: str
    headers: Mapping[str, list[str]]
    body: str | None = None


@dataclass(frozen=True)
class Plan:
    """What a sign request would do: ``access`` (read | write) on ``keys`` (object keys, or the
    prefix of a listing) of ``bucket``; ``payload``: the SHA-256 the signature covers."""

    access: str
    bucket: str
    keys: list[str]
    uri: str
    headers: dict[str, str] = field(default_factory=dict)
    payload: str = UNSIGNED_PAYLOAD


def plan(req: SignRequest, hosts: list[tuple[str, int]], bulk_delete: bool = False) -> Plan:
    """Parse and classify ``req`` against the endpoint ``hosts`` ((hostname, port) pairs).
    BadRequest when malformed, Forbidden when it is not an operation this signer signs.
    ``bulk_delete``: sign DeleteObjects (see ``StorageSettings.s3_remote_signing_bulk_delete``)."""
    method = req.method.upper()
    headers = _headers(req.headers)
    split = _split(req.uri)
    # The query as S3 canonicalises it (each name and value percent-encoded), so that the signature
    # holds whichever way the client spelt it; the answer's uri carries this spelling.
    uri = split._replace(query=_canonical_query(split.query)).geturl()
    host = (split.hostname or "").lower(), _port(split)
    if "host" in headers and _host_of(headers["host"], split.scheme) != host:
        raise errors.Forbidden("Refused to sign: the Host header names another host than the URI")
    bucket, key = _bucket_and_key(split, host, hosts)
    params = _params(split.query)
    for name in headers:
        if _REFUSED_HEADER.match(name):
            raise errors.Forbidden(f"Refused to sign: header {name} is not allowed")
    if "x-id" in params and params["x-id"] not in _X_IDS:
        raise errors.Forbidden(f"Refused to sign: operation {params['x-id'][:40]!r} is not allowed")
    params.pop("x-id", None)
    signed = {k: v for k, v in headers.items() if k not in _HOP_HEADERS}
    # A request without a body has the empty body's hash (as botocore signs one); a body only the
    # client holds is UNSIGNED-PAYLOAD unless the client states its hash.
    bodyless = method in ("GET", "HEAD", "DELETE")
    payload = headers.get("x-amz-content-sha256") or (EMPTY_SHA256 if bodyless else UNSIGNED_PAYLOAD)
    if key:
        access = _object_access(method, set(params))
        return Plan(access, bucket, [_checked_key(key)], uri, signed, payload)
    if method == "GET" and params.get("list-type") == "2" and set(params) <= _LIST_PARAMS:
        if not params.get("prefix"):
            raise errors.Forbidden("Refused to sign: a listing needs a prefix inside the table's location")
        return Plan(READ, bucket, [_checked_key(params["prefix"])], uri, signed, payload)
    if method == "POST" and set(params) == {"delete"}:
        if not bulk_delete:
            raise errors.Forbidden(
                "Refused to sign: DeleteObjects is not signed (CATALOG_S3_REMOTE_SIGNING_BULK_DELETE is off); "
                "delete objects one at a time"
            )
        body = (req.body or "").encode("utf-8", "surrogatepass")
        digest = hashlib.sha256(body).hexdigest()
        if payload not in (digest, UNSIGNED_PAYLOAD):
            raise errors.Forbidden("Refused to sign: x-amz-content-sha256 does not match the body")
        return Plan(WRITE, bucket, [_checked_key(k) for k in delete_keys(body)], uri, signed, digest)
    raise errors.Forbidden(f"Refused to sign: {method} on the bucket with {sorted(params)} is not allowed")


def _canonical_query(query: str) -> str:
    pairs = []
    for pair in query.split("&") if query else ():
        name, _, value = pair.partition("=")
        pairs.append(f"{quote(_query_part(name), safe='-_.~')}={quote(_query_part(value), safe='-_.~')}")
    return "&".join(pairs)


def _object_access(method: str, params: set[str]) -> str:
    if method in ("GET", "HEAD") and params <= {"partNumber"}:
        return READ
    allowed = {
        "PUT": ({"partNumber", "uploadId"},),
        "POST": ({"uploads"}, {"uploadId"}),
        "DELETE": ({"uploadId"},),
        "GET": ({"uploadId"},),  # ListParts
    }
    if method in ("PUT", "DELETE") and not params:
        return WRITE
    if any(params == shape for shape in allowed.get(method, ())):
        return WRITE
    raise errors.Forbidden(f"Refused to sign: {method} on an object with {sorted(params)} is not allowed")


def _headers(raw: Mapping[str, Any]) -> dict[str, str]:
    """Lower-cased names, multiple values joined with ``,``; bounded."""
    if len(raw) > MAX_HEADERS:
        raise errors.BadRequest(f"Malformed request: more than {MAX_HEADERS} headers")
    out: dict[str, str] = {}
    size = 0
    for name, values in raw.items():
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise errors.BadRequest("Malformed request: headers map names to lists of strings")
        value = ",".join(v.strip() for v in values)
        size += len(name) + len(value)
        if not name or _CONTROL.search(name) or _CONTROL.search(value) or ":" in name:
            raise errors.BadRequest("Malformed request: a header name or value holds a control character")
        lower = name.lower()
        out[lower] = f"{out[lower]},{value}" if lower in out else value
    if size > MAX_HEADER_BYTES:
        raise errors.BadRequest(f"Malformed request: headers larger than {MAX_HEADER_BYTES} bytes")
    return out


def _split(uri: str) -> Any:
    if len(uri) > MAX_URI_CHARS or _CONTROL.search(uri) or " " in uri:
        raise errors.BadRequest("Malformed request: uri is too long or holds a control character")
    try:
        split = urlsplit(uri)
        split.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise errors.BadRequest(f"Malformed request: uri: {e}") from None
    if split.scheme not in ("http", "https") or not split.hostname or split.username or split.password:
        raise errors.BadRequest("Malformed request: uri must be http(s)://host/...")
    if split.fragment:
        raise errors.BadRequest("Malformed request: uri has a fragment")
    return split


def _port(split: Any) -> int:
    return split.port or (443 if split.scheme == "https" else 80)


def _host_of(value: str, scheme: str) -> tuple[str, int]:
    try:
        split = urlsplit(f"{scheme}://{value.strip()}/")
        return (split.hostname or "").lower(), _port(split)
    except ValueError:
        raise errors.BadRequest("Malformed request: Host header") from None


def _bucket_and_key(split: Any, host: tuple[str, int], hosts: list[tuple[str, int]]) -> tuple[str, str]:
    """Path-style when the host is an endpoint host, virtual-hosted when it is ``bucket.<host>``."""
    path = split.path or "/"
    if not path.startswith("/"):
        raise errors.BadRequest("Malformed request: uri path")
    name, port = host
    if host in hosts:
        bucket, _, key = path[1:].partition("/")
        return _decode(bucket), _decode(key)
    for endpoint, endpoint_port in hosts:
        if port == endpoint_port and name.endswith("." + endpoint):
            return name[: -len(endpoint) - 1], _decode(path[1:])
    raise errors.Forbidden(f"Refused to sign: {name}:{port} is not this catalog's S3 endpoint")


def _decode(part: str) -> str:
    try:
        return unquote(part, errors="strict")
    except UnicodeDecodeError:
        raise errors.BadRequest("Malformed request: uri path is not UTF-8 once percent-decoded") from None


def _params(query: str) -> dict[str, str]:
    """The query as S3 reads it (``?uploads`` and ``?uploads=`` alike); allow-listed, no repeats."""
    out: dict[str, str] = {}
    for pair in query.split("&") if query else ():
        name, _, value = pair.partition("=")
        name, value = _query_part(name), _query_part(value)
        if name not in _ALLOWED_PARAMS:
            raise errors.Forbidden(f"Refused to sign: query parameter {name[:40]!r} is not allowed")
        if name in out:
            raise errors.Forbidden(f"Refused to sign: query parameter {name!r} is repeated")
        out[name] = value
    return out


def _query_part(raw: str) -> str:
    return _decode(raw.replace("+", " "))


def _checked_key(key: str) -> str:
    if _CONTROL.search(key):
        raise errors.Forbidden("Refused to sign: the key holds a control character")
    # a segment that is '.' or '..' once decoded again (%2e%2e, %2E.: a FileIO or proxy that decodes
    # once more would climb out), and backslashes (a separator to some tools) are refused as well
    if any(unquote(segment) in (".", "..") for segment in key.split("/")):
        raise errors.Forbidden("Refused to sign: '.' and '..' segments are not allowed (also percent-encoded)")
    if "\\" in key:
        raise errors.Forbidden("Refused to sign: the key holds a backslash")
    return key


def delete_keys(body: bytes) -> list[str]:
    """The keys of a DeleteObjects body; a ``VersionId`` is refused like ``?versionId``."""
    from defusedxml import DefusedXmlException
    from defusedxml.ElementTree import ParseError, fromstring

    if not body:
        raise errors.BadRequest("Malformed request: DeleteObjects needs its body")
    if len(body) > MAX_BODY_BYTES:
        raise errors.BadRequest(f"Malformed request: DeleteObjects body larger than {MAX_BODY_BYTES} bytes")
    try:
        root = fromstring(body, forbid_dtd=True)
    except (ParseError, DefusedXmlException, ValueError) as e:
        raise errors.BadRequest(f"Malformed request: DeleteObjects body: {type(e).__name__}") from None
    if _local(root.tag) != "Delete":
        raise errors.BadRequest("Malformed request: DeleteObjects body is not a <Delete> document")
    keys = []
    for obj in root:
        if _local(obj.tag) != "Object":
            continue
        fields = {_local(child.tag): child.text or "" for child in obj}
        if "VersionId" in fields:
            raise errors.Forbidden("Refused to sign: deleting object versions is not allowed")
        if not fields.get("Key"):
            raise errors.BadRequest("Malformed request: DeleteObjects <Object> without a <Key>")
        keys.append(fields["Key"])
    if not keys or len(keys) > MAX_DELETE_KEYS:
        raise errors.BadRequest(f"Malformed request: DeleteObjects names 1 to {MAX_DELETE_KEYS} keys")
    return keys


def _local(tag: Any) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


# -- confinement and the signature ------------------------------------------------------------------


def confine(p: Plan, table_location: str) -> None:
    """Every key of ``p`` under the table's location; Forbidden otherwise."""
    location = normalise(table_location, "table location")
    scheme, _, rest = location.partition("://")
    bucket, _, prefix = rest.partition("/")
    if scheme != "s3":
        raise errors.Forbidden("Refused to sign: the table does not live in S3")
    if p.bucket != bucket:
        raise errors.Forbidden(f"Refused to sign: bucket {p.bucket[:64]!r} is not the table's")
    inside = prefix.rstrip("/") + "/" if prefix else ""
    for key in p.keys:
        if not key.startswith(inside) or key == inside and p.access == WRITE:
            raise errors.Forbidden(f"Refused to sign: {key[:200]!r} is outside the table's location")


def endpoint_hosts(settings: StorageSettings) -> list[tuple[str, int]]:
    """The hosts a signed request may go to: the endpoint clients are told (``s3_client_endpoint``),
    the server's own, and AWS's regional and global endpoints when neither is configured."""
    out = []
    for url in (getattr(settings, "s3_client_endpoint", None), settings.s3_endpoint):
        if url:
            split = urlsplit(url if "://" in url else f"https://{url}")
            out.append(((split.hostname or "").lower(), _port(split)))
    if not out:
        region = settings.s3_region
        names = ("s3.amazonaws.com", f"s3.{region}.amazonaws.com", f"s3.dualstack.{region}.amazonaws.com")
        out = [(name, 443) for name in names]
    return list(dict.fromkeys(out))


class Signer:
    """Signs planned requests with the server's credentials (botocore's S3 SigV4)."""

    def __init__(self, settings: StorageSettings, prefix: str) -> None:
        """``prefix``: the warehouse's URL prefix, in the signer endpoint its tables are given."""
        self.settings = settings
        self.prefix = prefix
        self.hosts = endpoint_hosts(settings)
        self._credentials: Any = None

    def credentials(self) -> Any:
        if self._credentials is None:
            import boto3

            from catalog.storage.s3 import s3_keys

            session = boto3.session.Session(**s3_keys(self.settings), region_name=self.settings.s3_region)
            self._credentials = session.get_credentials()
            if self._credentials is None:
                raise errors.ServiceUnavailable("The catalog has no S3 credentials to sign with")
        return self._credentials.get_frozen_credentials()

    def sign(self, req: SignRequest, p: Plan) -> dict[str, list[str]]:
        """The headers to add to the client's request: what the signature added or changed."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        payload = p.payload

        class _ClientPayload(S3SigV4Auth):
            def payload(self, request: Any) -> str:  # noqa: ARG002 - the body stays with the client
                return payload

        request = AWSRequest(method=req.method.upper(), url=p.uri, headers=dict(p.headers))
        _ClientPayload(self.credentials(), "s3", self.settings.s3_region).add_auth(request)
        out = {}
        for name, value in request.headers.items():
            if p.headers.get(name.lower()) != value:
                out[name] = [value]
        return out
