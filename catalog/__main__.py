"""Command line: ``iceberg-catalog`` (also ``python -m catalog``). Each command is a module of
``catalog/cli/`` with ``register`` and ``run``: on the server's machine ``serve``, ``migrate`` and
``grants`` (``local.py``: settings from the environment and the flags); over a running server's HTTP
API ``namespaces``, ``tables``, ``views`` (``browse.py``), ``tables dropped|undrop|end-retention``
(``dropped.py``), ``doctor``, ``maintenance``, ``events`` and ``warehouses``.
"""

from __future__ import annotations

import sys

from catalog import __version__
from catalog.cli import browse, doctor, dropped, events, grants, maintenance, migrate, serve, warehouses

# Each command's module, by the command's name (``tables`` is browse's, but for dropped's actions).
_BY_NAME = {
    "serve": serve,
    "migrate": migrate,
    "grants": grants,
    "doctor": doctor,
    "maintenance": maintenance,
    "events": events,
    "warehouses": warehouses,
}


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="iceberg-catalog", description="Apache Iceberg REST catalog server")
    parser.add_argument("--version", action="version", version=f"iceberg-catalog {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.register(sub)
    migrate.register(sub)
    grants.register(sub)
    tables, client = browse.register(sub)
    dropped.register(tables, client)
    for module in (doctor, maintenance, events, warehouses):
        module.register(sub)
    args = parser.parse_args(argv)
    if args.command == "tables" and args.action in dropped.ACTIONS:
        return dropped.run(args)
    if args.command in browse.COMMANDS:
        return browse.run(args)
    return _BY_NAME[args.command].run(args)


if __name__ == "__main__":
    sys.exit(main())
