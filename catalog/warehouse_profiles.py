"""Warehouses besides the default one: what a warehouse is, checked, and the settings it runs with.

A warehouse is a name, a location and a profile: its storage keys (``s3``, ``azure``, ``gcs``: the
keys of today's ``CATALOG_S3_*`` / ``CATALOG_AZURE_*`` / ``CATALOG_GCS_*`` settings, lower case with
``-``: ``s3: {endpoint, region, access-key-id, path-style-access, vend-credentials, ...}``) and its
maintenance defaults (``maintenance: {max-snapshot-age-ms, ...}``). The default warehouse is the
server's own settings (``CATALOG_WAREHOUSE`` and the storage settings), named ``CATALOG_PREFIX`` or
``default``; it has no row and nothing of it moves.

Isolation is decided here, in one place: a warehouse runs as a whole catalog of its own (the same
code, ``settings_for``): its storage built from its profile alone (no key of the server's is
inherited), its location the only root its location policy allows, and its namespaces, tables,
views, events, audit and maintenance queue in a database of its own (``database_for``: a SQLite file
next to the server's, ``<stem>.warehouse-<id><suffix>``, or a PostgreSQL schema ``warehouse_<id>``).
The same names in two warehouses are therefore different rows in different databases.

Where a created warehouse may live is decided here too (``confined``): under the operator's
``CATALOG_WAREHOUSE_ROOTS`` (without it: object storage only), and never over the server's own
files (its database's directory, its working directory, its installation, the files its settings
name) or a system directory, compared where symbolic links really lead. Its storage credentials are
its profile's: the process's own (boto3's default chain, Application Default Credentials) only when
the profile says ``use-ambient-credentials: true``.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from catalog import errors
from catalog.locations import is_within, normalise
from catalog.sealing import is_secret, plain
from catalog.settings import Settings

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# Route words: /v1/<word>/... would be ambiguous with an unprefixed route.
RESERVED = frozenset({"namespaces", "tables", "views", "transactions", "events", "config", "oauth"})
MAX_LOCATION = 2048
MAX_VALUE = 4096
DEFAULT_NAME = "default"

# The profile's sections: each maps ``<section>: {a-b: v}`` onto the setting ``<section>_a_b``.
_SECTIONS = ("s3", "azure", "gcs")
# Maintenance defaults a warehouse may set (how its tables are kept), not the process's workers.
_MAINTENANCE = (
    "enabled",
    "expire_every_minutes",
    "expire_every_commits",
    "manifests_every_minutes",
    "compaction_enabled",
    "compaction_every_minutes",
    "orphans_every_hours",
    "orphan_age_hours",
    "max_snapshot_age_ms",
    "min_snapshots_to_keep",
)
MASK = "********"  # a secret as it is shown


@dataclass(frozen=True)
class Warehouse:
    name: str
    location: str
    profile: dict[str, dict[str, Any]] = field(default_factory=dict)
    id: int | None = None
    # What the server warned about when the warehouse was created or changed (never stored).
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def to_json(self) -> dict[str, Any]:
        """The warehouse as the management API and the CLI show it: secrets never leave."""
        shown = {
            section: {k: (MASK if is_secret(k) else v) for k, v in keys.items()}
            for section, keys in self.profile.items()
        }
        warned = {"warnings": list(self.warnings)} if self.warnings else {}
        return {"name": self.name, "location": self.location, **shown, "default": False, **warned}


def default_name(settings: Settings) -> str:
    return settings.warehouses.prefix or DEFAULT_NAME


def _setting_keys(section: str) -> dict[str, str]:
    """``{"access-key-id": "s3_access_key_id", ...}``: the keys a profile section may hold."""
    if section == "maintenance":
        return {k.replace("_", "-"): f"maintenance_{k}" for k in _MAINTENANCE}
    start = f"{section}_"
    return {f[len(start) :].replace("_", "-"): f for f in Settings.model_fields if f.startswith(start)}


def parse(doc: Any, settings: Settings) -> Warehouse:
    """A warehouse from a client's (or the bootstrap file's) mapping; 400 naming what is wrong."""
    if not isinstance(doc, Mapping):
        raise errors.BadRequest("A warehouse is a mapping: {name, location, s3|azure|gcs|maintenance: {...}}")
    unknown = set(doc) - {"name", "location", "maintenance", "default", *_SECTIONS}  # default: as shown
    if unknown:
        raise errors.BadRequest(f"Unknown warehouse keys: {', '.join(sorted(map(str, unknown)))[:200]}")
    if doc.get("default", False) is not False:
        raise errors.BadRequest("Only the server's settings make the default warehouse")
    name = check_name(doc.get("name"), settings)
    location = doc.get("location")
    if not isinstance(location, str) or not location or len(location) > MAX_LOCATION:
        raise errors.BadRequest(f"A warehouse's location is a string of at most {MAX_LOCATION} characters")
    if "\x00" in location or any(ord(c) < 0x20 for c in location):
        raise errors.BadRequest("A warehouse's location has no control characters")
    profile: dict[str, dict[str, Any]] = {}
    for section in (*_SECTIONS, "maintenance"):
        keys = doc.get(section)
        if keys is None:
            continue
        if not isinstance(keys, Mapping) or len(keys) > 64:
            raise errors.BadRequest(f"A warehouse's {section} is a mapping of settings")
        allowed = _setting_keys(section)
        for key, value in keys.items():
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise errors.BadRequest(f"Unknown {section} key {str(key)[:64]!r} (one of {known})")
            if not isinstance(value, (str, int, float, bool)) or (isinstance(value, str) and len(value) > MAX_VALUE):
                raise errors.BadRequest(f"{section}.{key}: a string, number or boolean (at most {MAX_VALUE} chars)")
        profile[section] = dict(keys)
    warehouse = Warehouse(name, location, profile)
    settings_for(settings, warehouse, 0)  # the settings' own checks: types, ranges (the server checks the rest)
    confined(location, settings)  # before anything is written there
    return warehouse


def check_name(name: Any, settings: Settings) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        raise errors.BadRequest(
            "A warehouse's name is 1 to 63 characters: lower-case letters, digits, '-' and '_', "
            "starting with a letter or digit"
        )
    if name in RESERVED or name in settings.warehouses.default_warehouse_names:
        raise errors.BadRequest(f"The warehouse name {name!r} is reserved")
    return name


def settings_for(base: Settings, warehouse: Warehouse, warehouse_id: int) -> Settings:
    """The settings a warehouse runs with: the server's, with the storage, location policy,
    maintenance defaults and database of the warehouse (storage keys start from their defaults:
    nothing of the default warehouse's storage is inherited)."""
    values = base.model_dump()
    for name, info in Settings.model_fields.items():
        if name.startswith(tuple(f"{s}_" for s in _SECTIONS)) or name == "allowed_locations":
            values[name] = info.get_default(call_default_factory=True)
    # The process's own credentials are the default warehouse's; a created one opts in (its profile).
    values.update(s3_use_ambient_credentials=False, gcs_use_ambient_credentials=False)
    for section, keys in warehouse.profile.items():
        allowed = _setting_keys(section)
        for key, value in keys.items():
            values[allowed[key]] = (
                plain(value, base.warehouses.secrets_key, warehouse.name) if is_secret(key) else value
            )
    values.update(
        warehouse=warehouse.location,
        prefix=warehouse.name,
        warehouses_file=None,
        authz_bootstrap=None,
        **database_for(base, warehouse_id),
    )
    try:
        derived = Settings(**values)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise errors.BadRequest(f"Invalid warehouse setting {where}: {first.get('msg', 'invalid')}"[:300]) from None
    return derived


def database_for(base: Settings, warehouse_id: int) -> dict[str, Any]:
    """Where a warehouse's objects live: a SQLite file next to the server's, or a PostgreSQL schema."""
    if base.database.is_sqlite:
        path = base.database.database_url.split(":///", 1)[1] if ":///" in base.database.database_url else ""
        if not path or path == ":memory:":
            raise errors.BadRequest("Warehouses need a database file (not an in-memory SQLite database)")
        p = Path(path)
        return {"database_url": f"sqlite:///{p.with_name(f'{p.stem}.warehouse-{warehouse_id}{p.suffix}')}"}
    return {"database_schema": f"warehouse_{warehouse_id}"}


# -- where a created warehouse may live ----------------------------------------------------------------

OBJECT_STORES = ("s3", "abfss", "gs")  # normalised schemes: their access is the profile's keys
# System directories (as written, and where they really are: /etc is /private/etc on macOS). A
# warehouse may neither be, contain nor lie inside a tree; it may lie inside a shared directory (a
# home, a temporary or data directory) but neither be nor contain it.
SYSTEM_TREES = (
    "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev", "/proc", "/sys",
    "/root", "/run", "/snap", "/var/run", "/var/lock", "/var/log", "/var/cache", "/var/spool", "/var/mail",
    "/var/backups", "/System", "/Library", "/private/etc",
)  # fmt: skip
SHARED_DIRECTORIES = (
    "/", "/home", "/tmp", "/var", "/var/tmp", "/var/lib", "/opt", "/srv", "/mnt", "/media", "/data",
    "/Users", "/Volumes", "/private", "/private/tmp", "/private/var",
)  # fmt: skip
_ROOTS_HINT = "CATALOG_WAREHOUSE_ROOTS"


def real_path(location: str) -> str | None:
    """Where a local location really is (symbolic links followed as far as the path exists, the rest
    as written, as the local storage checks it), or None for object storage."""
    normal = normalise(location, "warehouse location")
    if not normal.startswith("file://"):
        return None
    return os.path.realpath(normal[len("file://") :] or "/")


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _spellings(path: str) -> set[str]:
    return {path, os.path.realpath(path)}


def _protected(settings: Settings) -> list[tuple[str, str, str]]:
    """(real path, rule, what) the server keeps out of created warehouses. Rules: ``tree`` (neither
    be, contain nor lie inside it), ``directory`` (neither be nor contain it), ``file`` (not contain it)."""
    shared = {p for d in SHARED_DIRECTORIES for p in _spellings(d)}
    try:
        shared |= _spellings(str(Path.home()))
    except RuntimeError:  # no home directory known (a container's user without a passwd entry, no HOME)
        pass
    out = [(p, "tree", f"the system directory {d}") for d in SYSTEM_TREES for p in _spellings(d)]
    out += [(p, "directory", f"the directory {p}") for p in sorted(shared)]

    def own(path: str, what: str) -> None:
        real = os.path.realpath(path)
        out.append((real, "directory" if real in shared else "tree", what))

    if settings.database.is_sqlite and ":///" in settings.database.database_url:
        database = settings.database.database_url.split(":///", 1)[1]
        if database and database != ":memory:":
            where = os.path.dirname(os.path.abspath(database))
            own(where, "the directory of the server's databases (CATALOG_DATABASE_URL)")
    own(os.getcwd(), "the server's working directory")
    for installed in {sys.prefix, sys.base_prefix, str(Path(__file__).resolve().parent)}:
        own(installed, "the server's installation")
    files = {
        "warehouses_file": settings.warehouses.warehouses_file,
        "authz_bootstrap": settings.auth.authz_bootstrap,
        "gcs_credentials_file": settings.storage.gcs_credentials_file,
    }
    for name, value in files.items():
        if value:
            out.append((os.path.realpath(value), "file", f"a file the server reads (CATALOG_{name.upper()})"))
    return out


def confined(location: str, settings: Settings) -> None:
    """A created warehouse may live at ``location`` (once normalised), or 403 naming why: under a root
    of ``CATALOG_WAREHOUSE_ROOTS`` (a local directory only under a local one; object storage anywhere
    unless it names object-store roots), and, on local disk, over none of ``_protected``, compared
    where symbolic links really lead. Checked before anything is written there."""
    normal = normalise(location, "warehouse location")
    scheme = normal.partition("://")[0]
    roots = [normalise(r, f"{_ROOTS_HINT} entry") for r in settings.warehouses.warehouse_root_list]
    if scheme in OBJECT_STORES:
        stores = [r for r in roots if not r.startswith("file://")]
        if stores and not any(is_within(normal, r) for r in stores):
            raise errors.Forbidden(
                f"Warehouse location {location!r} is outside the object-store roots of {_ROOTS_HINT}"
            )
        return
    if scheme != "file":
        raise errors.BadRequest(
            f"Unsupported warehouse location {location!r}: a local directory, s3://, abfss:// or gs://"
        )
    local = [os.path.realpath(r[len("file://") :] or "/") for r in roots if r.startswith("file://")]
    if not local:
        raise errors.Forbidden(
            f"Warehouse location {location!r} is a local directory: set {_ROOTS_HINT} to the directories under "
            "which created warehouses may live (without it, created warehouses are on object storage only: "
            "s3://, abfss://, gs://)"
        )
    real = real_path(location)
    assert real is not None
    if not any(_inside(real, root) for root in local):
        raise errors.Forbidden(f"Warehouse location {location!r} is outside the local roots of {_ROOTS_HINT}")
    for path, rule, what in _protected(settings):
        hit = _inside(path, real) if rule != "tree" else (_inside(path, real) or _inside(real, path))
        if hit:
            raise errors.Forbidden(
                f"Warehouse location {location!r} is refused: it {'contains' if rule == 'file' else 'overlaps'} "
                f"{what}, even under {_ROOTS_HINT}"
            )
