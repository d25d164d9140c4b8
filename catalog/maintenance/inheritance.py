"""What maintenance a table gets: Iceberg's own table properties where they exist, inherited from the
table's namespaces (the nearest one that sets a key wins), then the server's settings.

- ``catalog.maintenance.enabled`` (``true`` | ``false``) on a table or namespace; the default is
  ``CATALOG_MAINTENANCE_ENABLED`` (on).
- ``history.expire.max-snapshot-age-ms``, ``history.expire.min-snapshots-to-keep`` and
  ``history.expire.max-ref-age-ms``: the table's, else its namespaces', else
  ``CATALOG_MAINTENANCE_MAX_SNAPSHOT_AGE_MS`` / ``..._MIN_SNAPSHOTS_TO_KEEP`` (Iceberg's defaults:
  5 days, 1) and no ref age limit. A ref's own retention fields override them (``expire.plan``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from catalog import errors
from catalog.settings import MaintenanceSettings

ENABLED = "catalog.maintenance.enabled"
EXPIRE_KEYS = (
    "history.expire.max-snapshot-age-ms",
    "history.expire.min-snapshots-to-keep",
    "history.expire.max-ref-age-ms",
)


def inherited(namespaces: Sequence[Mapping[str, str]], keys: Sequence[str]) -> dict[str, str]:
    """``keys`` as the namespaces set them, outermost first (the innermost wins)."""
    found: dict[str, str] = {}
    for properties in namespaces:
        found.update({k: properties[k] for k in keys if k in properties})
    return found


def enabled(table: Mapping[str, str], namespaces: Sequence[Mapping[str, str]], settings: MaintenanceSettings) -> bool:
    """Whether the catalog takes care of this table (the table's property, then its namespaces')."""
    value = table.get(ENABLED, inherited(namespaces, (ENABLED,)).get(ENABLED))
    if value is None:
        return settings.maintenance_enabled
    if value.strip().lower() not in ("true", "false"):
        raise errors.BadRequest(f"Invalid {ENABLED}: {value!r} (true or false)")
    return value.strip().lower() == "true"


def expire_defaults(namespaces: Sequence[Mapping[str, str]], settings: MaintenanceSettings) -> dict[str, str]:
    """The expiry properties a table falls back to: its namespaces', then the settings'."""
    return {
        "history.expire.max-snapshot-age-ms": str(settings.maintenance_max_snapshot_age_ms),
        "history.expire.min-snapshots-to-keep": str(settings.maintenance_min_snapshots_to_keep),
        **inherited(namespaces, EXPIRE_KEYS),
    }
