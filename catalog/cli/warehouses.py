"""``iceberg-catalog warehouses list|show|create|delete``: the warehouses of a running server, through
its management API (``/management/v1/warehouses``, admin only when grants are enforced), with the same
``--uri``/``--token``/``--credential`` as the other client commands. The server probes a new storage
profile (a file written, read back and deleted) before it accepts it.

  iceberg-catalog warehouses list
  iceberg-catalog warehouses create --name team-a --location /data/team-a
  iceberg-catalog warehouses create --name team-b --location s3://lake/b --set s3.endpoint=http://minio:9000 \\
      --set s3.access-key-id=... --set s3.secret-access-key=... --set s3.path-style-access=true
  iceberg-catalog warehouses create --file team-c.yaml       # one warehouse, as in CATALOG_WAREHOUSES_FILE
  iceberg-catalog warehouses show team-a
  iceberg-catalog warehouses delete team-a                   # only when it has no namespaces
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from catalog.cli.common import DEFAULT_URI, CliError, Management

BASE = "/management/v1/warehouses"


def register(sub: argparse._SubParsersAction) -> None:
    top = sub.add_parser("warehouses", help="the warehouses of a running server (admin)")
    actions = top.add_subparsers(dest="action", required=True)
    for name, help_text in (
        ("list", "every warehouse, the default one first"),
        ("show", "one warehouse (secrets masked)"),
        ("create", "create a warehouse (its storage is probed first)"),
        ("delete", "delete an empty warehouse"),
    ):
        action = actions.add_parser(name, help=help_text)
        action.add_argument("--uri", default=os.environ.get("CATALOG_URI", DEFAULT_URI), help="the catalog's REST URI")
        action.add_argument("--token", default=os.environ.get("CATALOG_TOKEN"), help="bearer token (env CATALOG_TOKEN)")
        action.add_argument("--credential", default=os.environ.get("CATALOG_CREDENTIAL"), help="client id:secret")
        if name in ("show", "delete"):
            action.add_argument("name", help="the warehouse's name")
        if name == "create":
            action.add_argument("--name", help="the warehouse's name (its route prefix)")
            action.add_argument(
                "--location",
                help="where its tables live: s3://, abfss://, gs://, or a directory under CATALOG_WAREHOUSE_ROOTS",
            )
            action.add_argument(
                "--set",
                action="append",
                default=[],
                metavar="SECTION.KEY=VALUE",
                help="a profile key, e.g. s3.endpoint=http://minio:9000 (repeatable; sections s3, azure, gcs, "
                "maintenance)",
            )
            action.add_argument("--file", help="a YAML or JSON file with one warehouse")


def run(args: argparse.Namespace) -> int:
    try:
        session = Management.connect(args)
        if args.action == "list":
            for w in session.call("GET", BASE)["warehouses"]:
                print(json.dumps(w))
        elif args.action == "show":
            print(json.dumps(session.call("GET", f"{BASE}/{args.name}"), indent=2))
        elif args.action == "create":
            created = session.call("POST", BASE, json=_document(args))
            print(json.dumps(created))
            for warning in created.get("warnings", []):  # it works for the server, maybe not for clients
                print(f"warning: {warning}", file=sys.stderr)
        elif args.action == "delete":
            session.call("DELETE", f"{BASE}/{args.name}")
            print(f"deleted warehouse {args.name}")
        return 0
    except CliError as e:
        print(f"iceberg-catalog warehouses {args.action}: {e}", file=sys.stderr)
        return e.status


def _document(args: argparse.Namespace) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if args.file:
        import yaml

        try:
            doc = yaml.safe_load(Path(args.file).read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise CliError(f"cannot read {args.file}: {e}", 2) from None
        if not isinstance(doc, dict):
            raise CliError(f"{args.file}: one warehouse, a mapping {{name, location, ...}}", 2)
    if args.name:
        doc["name"] = args.name
    if args.location:
        doc["location"] = args.location
    for item in args.set:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and name):
            raise CliError(f"--set {item!r}: SECTION.KEY=VALUE (e.g. s3.endpoint=http://minio:9000)", 2)
        doc.setdefault(section, {})[name] = _value(value)
    if "name" not in doc or "location" not in doc:
        raise CliError("create needs --name and --location (or a --file with both)", 2)
    return doc


def _value(text: str) -> Any:
    """``true``/``false`` and numbers as such (path-style-access=true), anything else a string."""
    if text in ("true", "false"):
        return text == "true"
    try:
        return int(text)
    except ValueError:
        return text
