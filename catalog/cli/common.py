"""What the commands share: the one-line error with its exit status, the options that reach a
running server, and the client of the management API (``/management/v1``) that ``maintenance`` and
``tables dropped|undrop|end-retention`` use."""

from __future__ import annotations

import argparse
import os
from typing import Any

DEFAULT_URI = "http://127.0.0.1:8181"


class CliError(Exception):
    """One line for the user, and the exit status."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def first_line(e: BaseException) -> str:
    """An error as one line for the user (at most 300 characters)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]


def connection_options() -> argparse.ArgumentParser:
    """The options of the commands that talk to a running server (a parent parser): where it is,
    who is calling, which warehouse (``args.rest_warehouse``) and the output."""
    client = argparse.ArgumentParser(add_help=False)
    group = client.add_argument_group("connection (a running server)")
    group.add_argument(
        "--uri",
        default=os.environ.get("CATALOG_URI", DEFAULT_URI),
        help=f"the catalog's REST URI (env CATALOG_URI; default {DEFAULT_URI})",
    )
    group.add_argument("--token", default=os.environ.get("CATALOG_TOKEN"), help="bearer token (env CATALOG_TOKEN)")
    group.add_argument(
        "--credential",
        default=os.environ.get("CATALOG_CREDENTIAL"),
        help="client credentials id:secret, exchanged for a token (env CATALOG_CREDENTIAL)",
    )
    group.add_argument(
        "--warehouse",
        dest="rest_warehouse",
        metavar="NAME",
        help="the warehouse, by name (default: the server's default warehouse)",
    )
    group.add_argument("--json", action="store_true", help="machine-readable output (one JSON document)")
    return client


class Management:
    """Requests to a running server's management API, with the caller's token; with a warehouse,
    every management request names it (``?warehouse=``; the ``/v1`` routes name it in their
    prefix: ``v1``)."""

    def __init__(self, uri: str, token: str | None, warehouse: str | None = None) -> None:
        import requests

        self.uri = uri.rstrip("/")
        self.warehouse = warehouse
        self.http = requests.Session()
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"

    @classmethod
    def connect(cls, args: argparse.Namespace) -> Management:
        """With ``--token``, or a token for ``--credential`` from the server's token endpoint."""
        token = args.token
        if args.credential and not token:
            import requests

            client_id, _, secret = args.credential.partition(":")
            form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
            try:
                response = requests.post(f"{args.uri.rstrip('/')}/v1/oauth/tokens", data=form, timeout=30)
            except requests.exceptions.RequestException:
                raise CliError(f"cannot reach the catalog at {args.uri} (is the server running? set --uri)") from None
            if response.status_code != 200:
                raise CliError(f"not authenticated at {args.uri}: {response.text[:200]}", 2)
            token = response.json()["access_token"]
        return cls(args.uri, token, getattr(args, "rest_warehouse", None))

    def v1(self, route: str) -> str:
        """The path of an Iceberg REST ``route`` (``/events``) in this session's warehouse."""
        from urllib.parse import quote

        return f"/v1/{quote(self.warehouse, safe='')}{route}" if self.warehouse else f"/v1{route}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        import requests

        if self.warehouse and path.startswith("/management/"):
            kwargs["params"] = {**kwargs.get("params", {}), "warehouse": self.warehouse}
        try:
            response = self.http.request(method, self.uri + path, timeout=30, **kwargs)
        except requests.exceptions.RequestException:
            raise CliError(f"cannot reach the catalog at {self.uri} (is the server running? set --uri)") from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except Exception:  # noqa: BLE001 - not an Iceberg error body
                message = response.text[:200]
            status = 2 if response.status_code in (400, 401, 403) else 1
            raise CliError(f"{response.status_code}: {message}", status)
        return response.json() if response.content else None
