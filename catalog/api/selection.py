"""Which warehouse a request addresses: its ``/v1/<prefix>/``, or a management route's
``?warehouse=`` (set by ``api.routing``), None for none (the default)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

WAREHOUSE: ContextVar[str | None] = ContextVar("warehouse", default=None)


def current(state: Any) -> Any:
    """The ``AppState`` of the request's warehouse, from the app's state (middleware and guards,
    which have no ``ctx``): ``NoSuchWarehouse`` (404) for a prefix that names none."""
    return state.ctx.registry().state(WAREHOUSE.get())
