"""Configuration, read from environment variables prefixed ``CATALOG_`` (and CLI flags), grouped by
concern: one class per group (``server_settings.py``, ``database_settings.py``, ...), each a
pydantic-settings class whose fields are the lowercase names of its variables, and ``Settings``, the
set of them (``settings.storage``, ``settings.maintenance``, ...). The wiring (``server/app.py``,
``usecases.py``, ``cli/``) holds the set and hands each wing its own group (docs/internals.md).

There is no module-level instance: ``create_app(settings)`` receives one, so tests and the CLI build
their own.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from catalog.settings.auth_settings import AuthSettings
from catalog.settings.commit_settings import CommitSettings
from catalog.settings.console_settings import ConsoleSettings
from catalog.settings.database_settings import DATABASE_URL_FORMS, DatabaseSettings, normalise_database_url
from catalog.settings.event_settings import EventSettings
from catalog.settings.group import ConfigurationError, Group, duration_seconds
from catalog.settings.maintenance_settings import MaintenanceSettings
from catalog.settings.planning_settings import PlanningSettings
from catalog.settings.server_settings import LOG_LEVELS, ServerSettings
from catalog.settings.storage_settings import StorageSettings
from catalog.settings.warehouse_settings import WarehouseSettings

__all__ = [
    "DATABASE_URL_FORMS",
    "GROUPS",
    "LOG_LEVELS",
    "OTHER_VARIABLES",
    "AuthSettings",
    "CommitSettings",
    "ConfigurationError",
    "ConsoleSettings",
    "DatabaseSettings",
    "EventSettings",
    "MaintenanceSettings",
    "PlanningSettings",
    "ServerSettings",
    "Settings",
    "StorageSettings",
    "WarehouseSettings",
    "duration_seconds",
    "normalise_database_url",
    "unknown_variables",
]

# CATALOG_* variables that something other than the server's settings reads, so that they are not
# taken for typos: the command line's browse commands (catalog/cli/browse.py) and the test suite.
OTHER_VARIABLES = frozenset({"CATALOG_URI", "CATALOG_TOKEN", "CATALOG_CREDENTIAL", "CATALOG_TEST_BACKENDS"})

# The groups, by the attribute of ``Settings`` that holds each.
GROUPS: dict[str, type[Group]] = {
    "server": ServerSettings,
    "warehouses": WarehouseSettings,
    "database": DatabaseSettings,
    "auth": AuthSettings,
    "commits": CommitSettings,
    "storage": StorageSettings,
    "maintenance": MaintenanceSettings,
    "events": EventSettings,
    "planning": PlanningSettings,
    "console": ConsoleSettings,
}
# Each setting's group: a name is declared by exactly one.
GROUP_OF: dict[str, str] = {name: group for group, cls in GROUPS.items() for name in cls.model_fields}
assert len(GROUP_OF) == sum(len(cls.model_fields) for cls in GROUPS.values()), "a setting in two groups"


class Settings:
    """Every setting, as one group per concern. ``Settings()`` reads the environment (each group its
    own variables); ``Settings(name=value, ...)`` takes any setting by its name (the lowercase name of
    its variable, as the groups declare it) and reads the rest from the environment. An unknown name is
    a ``TypeError``; invalid values are one ``ValidationError`` naming each.

    The whole set, for what works on every setting at once (the CLI's checks, per-warehouse settings,
    the typo warnings): ``model_fields`` (every field, by name), ``model_dump()`` and ``model_copy()``,
    flat, as pydantic's own."""

    model_fields: ClassVar[dict[str, FieldInfo]] = {
        name: info for cls in GROUPS.values() for name, info in cls.model_fields.items()
    }
    model_config: ClassVar[dict[str, Any]] = {"env_prefix": "CATALOG_"}

    server: ServerSettings
    warehouses: WarehouseSettings
    database: DatabaseSettings
    auth: AuthSettings
    commits: CommitSettings
    storage: StorageSettings
    maintenance: MaintenanceSettings
    events: EventSettings
    planning: PlanningSettings
    console: ConsoleSettings

    def __init__(self, **values: Any) -> None:
        unknown = sorted(k for k in values if k not in GROUP_OF and not k.startswith("_"))
        if unknown:
            raise TypeError(f"not settings: {', '.join(unknown)}")
        options = {k: v for k, v in values.items() if k.startswith("_")}  # pydantic-settings' own (_env_file)
        errors: list[Any] = []
        for group, cls in GROUPS.items():
            given = {k: v for k, v in values.items() if GROUP_OF.get(k) == group}
            try:
                setattr(self, group, cls(**options, **given))
            except ValidationError as e:
                errors += e.errors(include_url=False)
        if errors:
            raise ValidationError.from_exception_data("Settings", errors)

    def model_dump(self) -> dict[str, Any]:
        """Every setting's value, by name."""
        return {name: value for group in GROUPS for name, value in getattr(self, group).model_dump().items()}

    def model_copy(self, update: Mapping[str, Any] | None = None) -> Settings:
        """These settings with ``update``'s values instead (validated)."""
        return Settings(**{**self.model_dump(), **(update or {})})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Settings) and self.model_dump() == other.model_dump()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Settings({', '.join(f'{g}={getattr(self, g)!r}' for g in GROUPS)})"


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One warning per ``CATALOG_*`` variable that nothing reads (a typo is otherwise silently ignored, and
    the setting it meant keeps its default), naming the closest real setting."""
    known = {f"CATALOG_{name.upper()}" for name in Settings.model_fields}
    warnings = []
    for variable in sorted(environ):
        name = variable.upper()  # pydantic-settings reads the environment case-insensitively
        if not name.startswith("CATALOG_") or name in known or name in OTHER_VARIABLES:
            continue
        close = difflib.get_close_matches(name, sorted(known | OTHER_VARIABLES), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "docs/configuration.md lists the settings"
        warnings.append(f"{variable} is not a setting and is ignored ({hint})")
    return warnings
