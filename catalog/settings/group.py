"""What every group of settings shares: read from ``CATALOG_*`` environment variables, each group only
its own fields (the others' are ignored here, and ``Settings`` routes each name to the one group that
declares it); ``ConfigurationError``; durations with a unit."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict


class ConfigurationError(Exception):
    """A setting combination the server refuses to start with; the message names the variable."""


class Group(BaseSettings):
    """One concern's settings, each field the lowercase name of its ``CATALOG_`` variable."""

    model_config = SettingsConfigDict(env_prefix="CATALOG_", extra="ignore")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration_seconds(value: object) -> object:
    """``7d``, ``12h``, ``30m``, ``45s`` or a number of seconds: seconds (others left to the field)."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text[-1:] in _UNITS and text[:-1].replace(".", "", 1).isdigit():
            return float(text[:-1]) * _UNITS[text[-1]]
    return value
