"""Server-side scan planning's settings (docs/planning.md). Given to ``planning/``'s ``Planner``; loadTable
and /v1/config tell clients the mode."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from catalog.settings.group import Group


class PlanningSettings(Group):
    """``CATALOG_SCAN_PLANNING_*``, ``CATALOG_PLANNING_*``."""

    scan_planning_mode: Literal["client", "server"] = Field(
        default="client",
        description="server: tell clients to plan scans on the server (planTableScan): pyiceberg through "
        "/v1/config (see scan_planning_config), Java through each loadTable's config; client: say nothing (a "
        "table's catalog.scan-planning-mode property still does). The planning routes are served either way.",
    )
    scan_planning_config: Literal["defaults", "overrides"] = Field(
        default="defaults",
        description="Where /v1/config puts scan-planning-mode=server: defaults (a client may set its own mode) "
        "or overrides (every pyiceberg scan goes to the server, whatever the client or the table says).",
    )
    planning_manifests_per_task: int = Field(
        default=64,
        ge=1,
        description="Scan planning: a plan whose matching data manifests are more than this is answered with "
        "plan tasks (sealed tokens, each naming this many manifests) that the client redeems one by one.",
    )
    planning_cache_manifests: int = Field(
        default=4096,
        ge=0,
        description="Scan planning: decoded manifests and manifest lists kept across plans (least recently "
        "used out; they are immutable, so never stale); 0 disables the cache.",
    )
