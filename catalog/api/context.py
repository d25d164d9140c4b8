"""What every handler may use, in one typed object: built once at start-up by the server's wiring
(``server/app.py``) and given to each handler as its ``ctx`` dependency (and to the middleware as
``app.state.ctx``). A handler's signature says what it uses; nothing else is reachable from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litestar.di import NamedDependency

from catalog.api.paging import PageTokens
from catalog.auth.grants import Access
from catalog.auth.identity import Authenticator
from catalog.auth.lockout import FailureLimiter
from catalog.planning.task_tokens import PlanTokens
from catalog.storage.signing import Signer
from catalog.storage.vending import Vends
from catalog.usecases import Catalog


@dataclass(frozen=True, slots=True)
class AppState:
    catalog: Catalog  # the use cases: namespaces, tables, views, commits
    access: Access  # the grants in force
    authenticator: Authenticator  # bearer token -> principal (the token endpoint issues built-in ones)
    limiter: FailureLimiter  # failed token requests
    pages: PageTokens  # the list routes' page tokens
    plan_tokens: PlanTokens  # scan planning's plan-task tokens
    signer: Signer | None  # remote signing, when switched on for an S3 warehouse
    vendor: Vends | None  # vended credentials, when switched on
    client_io: dict[str, str]  # the storage properties every client is told (storage/vending.py)
    table_config: bytes  # ``client_io`` as the JSON of a load result's ``config``
    config_body: bytes  # the answer to GET /v1/config
    prefix: str  # the advertised route prefix ('' for none)
    registry: Callable[[], Any]  # the warehouses served (``server.warehouses.Registry``)


# A route handler's ``ctx: Ctx`` parameter: the AppState, by the dependency named ``ctx``.
Ctx = NamedDependency[AppState]
