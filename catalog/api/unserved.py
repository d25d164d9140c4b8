"""Operations of the contract this server deliberately does not serve: a 501 in the Iceberg error
shape (never a bare 404 "no route"), and never advertised in ``/v1/config``."""

from __future__ import annotations

from litestar import route

from .. import errors

T = "/v1/namespaces/{namespace:str}/tables/{table:str}"


@route(
    [
        T + "/plan",
        T + "/plan/{plan_id:str}",
        T + "/tasks",
        T + "/sign",
        T + "/unregister",
        "/v1/namespaces/{namespace:str}/functions",
        "/v1/namespaces/{namespace:str}/functions/{function:str}",
    ],
    http_method=["GET", "POST", "DELETE"],
)
async def not_served() -> None:
    raise errors.NotImplementedOperation(
        "Not implemented: this catalog does not serve server-side scan planning, remote signing, "
        "unregister or functions; see /v1/config for the operations it serves"
    )


ROUTES = [not_served]
