"""Operations of the contract this server deliberately does not serve: a 501 in the Iceberg error
shape (never a bare 404 "no route"), and never advertised in ``/v1/config``.

Each is routed with exactly the methods the contract gives it (spec/openapi.yaml documents them);
any other method on these paths is a 405, as on every other path.
"""

from __future__ import annotations

from litestar import get

from catalog import errors

F = "/v1/namespaces/{namespace:str}/functions"


def _refuse() -> None:
    raise errors.NotImplementedOperation(
        "Not implemented: this catalog does not serve functions; see /v1/config for the operations it serves"
    )


@get([F, F + "/{function:str}"])
async def not_served_get() -> None:
    _refuse()


ROUTES = [not_served_get]
