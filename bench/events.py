"""Change events on vs off (``--only events``): what the outbox costs a commit.

Two servers of their own on the backend's services (``Backend.own_server``), identical but for
``CATALOG_EVENTS_ENABLED`` (``true``: each commit also INSERTs its event row in its own transaction,
and the outbox loop orders and prunes them; ``false``: neither). Each gets the namespace and 16
tables; then 16 writers (one process each, one table each, the commit scenarios' append: see
``clients.commit_worker``) commit to one server for a window, then to the other, alternately, for
``ROUNDS`` rounds, so that both are measured in the same minutes of the same machine. Reported:
commits/s of each (the median over the rounds), the ratio on / off (target >= 0.90), and the
server's CPU per commit of each.
"""

from __future__ import annotations

import statistics
from typing import Any

from . import clients, wire

WRITERS = 16
COLUMNS = 50
ROUNDS = 3


def _setup(url: str) -> list[tuple]:
    http = wire.client(url)
    try:
        return wire.create_tables(http, [f"e{i:02d}" for i in range(WRITERS)], COLUMNS)
    finally:
        http.close()


def run(backend: Any, quick: bool, server_env: dict[str, str], log: Any) -> dict[str, Any]:
    window = 4.0 if quick else 10.0
    servers = {
        mode: backend.own_server(
            f"events-{mode}",
            {**server_env, "CATALOG_EVENTS_ENABLED": flag, "CATALOG_MAINTENANCE_WORKERS": "0"},
        )
        for mode, flag in (("on", "true"), ("off", "false"))
    }
    try:
        tables = {mode: _setup(srv.url) for mode, srv in servers.items()}
        rates: dict[str, list[float]] = {"on": [], "off": []}
        cpu: dict[str, list[float]] = {"on": [], "off": []}
        for r in range(ROUNDS):
            for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
                srv = servers[mode]
                args = [{"url": srv.url, "tables": [t], "client": "http", "warmup": r == 0} for t in tables[mode]]
                try:
                    rate, cpu_ms, _ = clients.measured(
                        clients.commit_worker, args, window, srv.proc.pid, lambda x: x["commits"]
                    )
                except RuntimeError as e:
                    raise RuntimeError(f"events {mode}: {e}") from None
                rates[mode].append(rate)
                cpu[mode].append(cpu_ms)
                log(f"[{backend.name}] events {mode}, round {r + 1}: {rates[mode][-1]:,.0f} commits/s")
        out = {
            mode: {
                "rate": statistics.median(rates[mode]),
                "rates": rates[mode],
                "server_cpu_ms": statistics.median(cpu[mode]),
            }
            for mode in ("on", "off")
        }
        out["ratio"] = out["on"]["rate"] / out["off"]["rate"] if out["off"]["rate"] else float("nan")
        out["writers"] = WRITERS
        out["window_s"] = window
        return out
    finally:
        for srv in servers.values():
            srv.stop()
