"""THE location policy: which storage locations the server may read, write or delete.

Every location in a request or in a metadata file is hostile until ``Locations.check`` accepts it:
table, view and namespace locations, ``write.*.path`` properties, register's metadata file, and
every path purge would delete. A location is accepted when, once normalised, it lies under the
warehouse root or under one of the operator's ``CATALOG_ALLOWED_LOCATIONS``.

Normalisation (``normalise``) makes one spelling per place, so that a prefix comparison means
"inside": the scheme is lower-cased (``s3a``/``s3n`` are ``s3``); ``file:/p``, ``file:///p``,
``file://localhost/p`` and a bare ``/p`` are ``file:///p``; repeated and trailing ``/`` go. Azure's
four spellings of one container (``abfs``, ``abfss``, ``wasb``, ``wasbs``; the ``blob`` and ``dfs``
hosts) are ``abfss://container@account.dfs.<suffix>``, host lower-cased; ``gs://bucket``. Their
container, account and bucket names must be valid ones (lower-case; refused, not lower-cased), and
their paths hold no backslash, not even percent-encoded (Azure reads it as ``/``). What
cannot be compared safely is refused rather than repaired: relative and empty locations, ``.`` and
``..`` segments (also percent-encoded, since some FileIOs decode them), control characters, and
anything over ``MAX_LOCATION_BYTES``. ``segment`` is how a name becomes a segment (``/`` as ``%2F``,
never a separator). Paths are otherwise literal, as the storage layer and the
clients' FileIOs read them (``%41`` is three characters, not ``A``).

Only pure string logic lives here; ``storage`` re-checks every path it touches (and, on local disk,
where symlinks really lead), and ``service`` adds the ownership rule: no entry's location may
equal, contain or lie inside another's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

from catalog import errors

# A location is stored in the catalog and in every metadata file; S3 keys stop at 1,024 bytes.
MAX_LOCATION_BYTES = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.DOTALL)
_ALIASES = {"s3a": "s3", "s3n": "s3", "abfs": "abfss", "wasb": "abfss", "wasbs": "abfss"}
AZURE_SCHEMES = ("abfss://", "abfs://", "wasbs://", "wasb://")
GCS_SCHEMES = ("gs://",)
# Azure: container names (3-63: lower-case letters, digits, single hyphens; $root) and the account's
# host (DNS labels); GCS: bucket names (3-222: lower-case letters, digits, '-', '_', '.').
_CONTAINER = re.compile(r"^(?:[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}|\$root)$")
_HOST = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


def normalise(location: object, what: str = "location") -> str:
    """The one spelling of ``location``; ``BadRequest`` (400) when it cannot be compared safely."""
    if not isinstance(location, str) or not location.strip():
        raise errors.BadRequest(f"Invalid {what}: must be a non-empty absolute location")
    if len(location.encode("utf-8", "surrogatepass")) > MAX_LOCATION_BYTES:
        raise errors.BadRequest(f"Invalid {what}: longer than {MAX_LOCATION_BYTES} bytes")
    if _CONTROL.search(location):
        raise errors.BadRequest(f"Invalid {what}: contains a control character")
    match = _SCHEME.match(location)
    if match is None:
        if not location.startswith("/"):
            raise errors.BadRequest(f"Invalid {what} {location!r}: relative locations are not allowed")
        scheme, authority, path = "file", "", location
    else:
        scheme, rest = _ALIASES.get(match.group(1).lower(), match.group(1).lower()), match.group(2)
        if scheme == "file":
            authority, path = _file_parts(rest, location, what)
        elif rest.startswith("//"):
            authority, _, path = rest[2:].partition("/")
            if not authority:
                raise errors.BadRequest(f"Invalid {what} {location!r}: no bucket or host")
            path = "/" + path
            if scheme == "abfss":
                authority = _azure_authority(authority, location, what)
            elif scheme == "gs" and not _BUCKET.match(authority):
                raise errors.BadRequest(f"Invalid {what} {location!r}: not a valid Cloud Storage bucket name")
            if scheme in ("abfss", "gs") and "\\" in unquote(path):  # also %5C: some FileIOs decode
                raise errors.BadRequest(f"Invalid {what} {location!r}: backslashes are not allowed")
        else:
            raise errors.BadRequest(f"Invalid {what} {location!r}: expected scheme://bucket/path")
    segments = [s for s in path.split("/") if s]
    # A segment that decodes to '.' or '..', or to a path with one ('..%2Fx'): a FileIO that decodes
    # %2F must not be led out of the directory either.
    if any(_dot_segment(s) for s in segments):
        raise errors.BadRequest(f"Invalid {what} {location!r}: '.' and '..' segments are not allowed")
    return f"{scheme}://{authority}/" + "/".join(segments)


def _azure_authority(authority: str, location: str, what: str) -> str:
    """``container@account.dfs.<suffix>``: the one spelling of an Azure container (``blob`` hosts are
    the same account's ``dfs`` ones), or ``BadRequest``."""
    container, at, host = authority.partition("@")
    host = host.lower()
    if not at or not _CONTAINER.match(container) or not _HOST.match(host):
        raise errors.BadRequest(
            f"Invalid {what} {location!r}: expected abfss://container@account.dfs.core.windows.net/path "
            "(a valid container name and account host)"
        )
    labels = host.split(".")
    if labels[1] == "blob":
        labels[1] = "dfs"
    return f"{container}@{'.'.join(labels)}"


def azure_parts(normal: str) -> tuple[str, str, str, str]:
    """(container, account name, account host, blob path) of a normalised ``abfss://`` location."""
    authority, _, path = normal[len("abfss://") :].partition("/")
    container, _, host = authority.partition("@")
    return container, host.partition(".")[0], host, path


def gcs_parts(normal: str) -> tuple[str, str]:
    """(bucket, object path) of a normalised ``gs://`` location."""
    bucket, _, path = normal[len("gs://") :].partition("/")
    return bucket, path


def _dot_segment(segment: str) -> bool:
    """Whether ``segment`` is ``.`` or ``..``, or decodes to a path with one. Most segments have no
    ``%`` and no ``\\``: they are what they read (the split on ``/`` already happened)."""
    if "%" not in segment and "\\" not in segment:
        return segment in (".", "..")
    return any(part in (".", "..") for part in re.split(r"[/\\]", unquote(segment)))


def _file_parts(rest: str, location: str, what: str) -> tuple[str, str]:
    if rest.startswith("//"):  # file://host/p: only the local host
        host, _, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise errors.BadRequest(f"Invalid {what} {location!r}: only local file locations are supported")
        return "", "/" + path
    if not rest.startswith("/"):
        raise errors.BadRequest(f"Invalid {what} {location!r}: relative locations are not allowed")
    return "", rest  # file:/p, Hadoop's spelling


def segment(name: str) -> str:
    """A namespace level or a table or view name as one segment of a location the server chooses:
    ``/`` (allowed in names) is percent-encoded as ``%2F``, so ``tab/le`` is the directory ``tab%2Fle``,
    not ``tab`` holding ``le``. Paths are literal otherwise, so the FileIOs see that very directory."""
    return name.replace("/", "%2F")


def is_within(location: str, root: str) -> bool:
    """``location`` is ``root`` or lies below it (both normalised)."""
    return location == root or location.startswith(root.rstrip("/") + "/")


def overlaps(a: str, b: str) -> bool:
    """One of two normalised locations equals or contains the other."""
    return is_within(a, b) or is_within(b, a)


def ancestors(location: str) -> list[str]:
    """``location`` and every location that contains it, down to the bucket (normalised input)."""
    scheme, _, rest = location.partition("://")
    authority, _, path = rest.partition("/")
    out = [f"{scheme}://{authority}/"]
    parts = [p for p in path.split("/") if p]
    out += [f"{scheme}://{authority}/" + "/".join(parts[: i + 1]) for i in range(len(parts))]
    return out


class Locations:
    """The roots the server may touch: the warehouse and the operator's allow-list."""

    def __init__(self, warehouse_root: str, allowed: Iterable[str] = ()) -> None:
        self.roots = tuple(dict.fromkeys(normalise(r, "allowed location") for r in (warehouse_root, *allowed)))

    def allows(self, location: str) -> bool:
        """For a normalised location: under one of the roots."""
        return any(is_within(location, root) for root in self.roots)

    def check(self, location: object, what: str = "location") -> str:
        """Normalise ``location`` and require it under a root: 400 when malformed, 403 outside."""
        normal = normalise(location, what)
        if not self.allows(normal):
            raise errors.Forbidden(
                f"Invalid {what} {location!r}: outside the warehouse and the allowed locations "
                "(CATALOG_ALLOWED_LOCATIONS)"
            )
        return normal
