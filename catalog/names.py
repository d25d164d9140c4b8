"""What a namespace or a name can be: limits checked before any SQL, so that every backend gives the
same 400 instead of a database error (PostgreSQL refuses what SQLite silently stores).

- A namespace level, and a table or view name, is at most 255 bytes of UTF-8. It becomes one
  segment of a table location, and 255 is the segment limit of common filesystems.
- A namespace has at most 32 levels, joined (by 0x1F) into at most 1024 bytes. The key columns are
  ``String(1024)`` (catalog/database/db.py). The limit counts bytes, not characters, so that a namespace key
  plus a name stays far below PostgreSQL's B-tree entry limit (about 2.7 kB).
- No NUL, anywhere: PostgreSQL text cannot hold it, so no name with one can exist.

Creating something checks more (``check_name`` below: no control characters, backslashes, relative
path segments or URI delimiters; ``/`` is allowed, and encoded in locations). A lookup checks only
what no stored name can be, so that a stored name stays reachable.
"""

from __future__ import annotations

from collections.abc import Sequence

from catalog import errors

# Joins a namespace's levels into one key (the database's, and the list routes' page tokens').
SEP = "\x1f"
MAX_NAME_BYTES = 255
MAX_NAMESPACE_BYTES = 1024
MAX_NAMESPACE_LEVELS = 32


def dotted(namespace: Sequence[str], name: str | None = None) -> str:
    """``a.b.t``: a namespace, or a name in it, as people read it (log lines, messages, the CLI). Not
    a key and not parseable back: a level may itself hold a dot."""
    return ".".join((*namespace, name) if name is not None else namespace)


def shown(text: str) -> str:
    """A value quoted in an error message, cut short: the client sent it, it need not get it all back."""
    return repr(text) if len(text) <= 64 else repr(text[:64]) + "..."


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def check_name_fits(name: str, what: str = "name") -> None:
    """400 unless ``name`` could be a stored level or name: not empty, no NUL, at most 255 bytes."""
    if not name:
        raise errors.BadRequest(f"Invalid {what}: empty")
    if "\x00" in name:
        raise errors.BadRequest(f"Invalid {what}: {shown(name)} contains NUL")
    if utf8_size(name) > MAX_NAME_BYTES:
        raise errors.BadRequest(f"Invalid {what}: {shown(name)} is longer than {MAX_NAME_BYTES} bytes (UTF-8)")


def check_namespace_fits(levels: Sequence[str], what: str = "namespace") -> None:
    """400 unless ``levels`` could be a stored namespace: every level fits, within the depth and size."""
    if not levels:
        raise errors.BadRequest(f"Invalid {what}: must have at least one level")
    if len(levels) > MAX_NAMESPACE_LEVELS:
        raise errors.BadRequest(f"Invalid {what}: {len(levels)} levels, at most {MAX_NAMESPACE_LEVELS} are allowed")
    for level in levels:
        check_name_fits(level, f"{what} level")
    if utf8_size("\x1f".join(levels)) > MAX_NAMESPACE_BYTES:
        raise errors.BadRequest(f"Invalid {what}: longer than {MAX_NAMESPACE_BYTES} bytes (UTF-8) in all")


def check_key_fits(key: str, what: str) -> None:
    """A stored key sent back by the client (a page token): no NUL, no longer than any key can be."""
    if "\x00" in key or utf8_size(key) > MAX_NAMESPACE_BYTES:
        raise errors.BadRequest(f"Invalid {what}: not a key this server issued")


def check_name(name: str) -> None:
    """A new name (or namespace level) becomes a path segment of a table location, inside a URI:
    nothing that could escape the warehouse or that a URI cannot carry, and within the limits of
    ``catalog.names``. 400 before any SQL."""
    if not isinstance(name, str) or not name.strip():
        raise errors.BadRequest("Invalid name: must be a non-empty string")
    check_name_fits(name)
    if any(c < " " or c == "\x7f" for c in name):  # includes 0x1F, the level separator
        raise errors.BadRequest(f"Invalid name: {shown(name)} contains a control character (tab, CR, LF, ...)")
    if "\\" in name:
        raise errors.BadRequest(f"Invalid name: {shown(name)} contains a backslash")
    # '/' is a character of names (Java's catalogs accept it): a location's segment encodes it as %2F
    # (catalog.locations.segment). Still refused: a name that, split at '/', has a relative segment, so
    # that not even a FileIO that decodes %2F could be led out of the namespace's directory.
    if any(part in (".", "..") for part in name.split("/")):
        raise errors.BadRequest(f"Invalid name: {shown(name)} is or contains a relative path segment ('.' or '..')")
    if "#" in name or "?" in name:  # a URI parser would cut the location there
        raise errors.BadRequest(f"Invalid name: {shown(name)} contains '#' or '?'")


def check_namespace(ns: tuple[str, ...]) -> None:
    check_namespace_fits(ns)  # first: the depth bounds the loop
    for level in ns:
        check_name(level)
