"""What runs in a process besides the requests, per warehouse: table maintenance (the maintenance workers
and the scheduler, on the warehouse's own queue) and the delivery of its change events.

``serve`` starts them for the default warehouse and for each warehouse its Registry opens;
``iceberg-catalog maintenance worker`` runs them alone, for the default warehouse and every created
one, those created after it started included: its own Registry (of ``Cared`` warehouses) opens them
as the servers' does, within ``REFRESH_SECONDS``, and closes those deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catalog.delivery import loop as delivery
from catalog.delivery import sinks
from catalog.maintenance.worker import Scheduler, Workers
from catalog.usecases import Catalog


def start_care(catalog: Catalog, threads: int | None = None) -> list[Workers | Scheduler]:
    """The table-maintenance workers of this process and its scheduler (which acts only while it holds
    the deployment's scheduler lease); none with ``threads`` 0 (by default
    ``CATALOG_MAINTENANCE_WORKERS``)."""
    threads = catalog.settings.maintenance.maintenance_workers if threads is None else threads
    if threads == 0:
        return []
    workers, scheduler = Workers(catalog.jobs, threads), Scheduler(catalog.jobs, catalog.leases)
    workers.start()
    scheduler.start()
    return [workers, scheduler]


def start_parts(catalog: Catalog, warehouse: str | None = None, threads: int | None = None) -> list[Any]:
    """One warehouse's maintenance and event delivery, started (``warehouse``: a created one's name, None
    for the default); each has ``stop()``."""
    events = catalog.settings.events
    return [
        *start_care(catalog, threads),
        *delivery.start_delivery(catalog.outbox, catalog.leases, events, sinks.configured(events, warehouse)),
    ]


@dataclass(frozen=True, slots=True)
class Cared:
    """A warehouse as a worker process holds it: its catalog (what the Registry needs of it)."""

    catalog: Catalog
