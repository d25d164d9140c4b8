"""Who a request is: the ``Principal`` every decision is made for, and the two ways a token fails."""

from __future__ import annotations

from dataclasses import dataclass

USER, CLIENT = "user", "client"


@dataclass(frozen=True)
class Principal:
    """``kind`` keeps identities from different sources apart: ``user`` for an identity provider's
    token (and the pseudo-principals below), ``client`` for a built-in client of the token endpoint.
    Grants name both (``user:<name>``, ``client:<id>``), so an OIDC ``sub`` equal to a built-in
    client's id is not that client."""

    name: str
    groups: frozenset[str] = frozenset()
    unrestricted: bool = False
    kind: str = USER


ANONYMOUS = Principal("anonymous", unrestricted=True)  # auth off: everyone may do everything
UNAUTHENTICATED = Principal("unauthenticated")  # auth on, on a route open to all (health, token endpoint)


class InvalidToken(Exception):
    """The token is not acceptable: 401."""


class IdentityProviderUnavailable(Exception):
    """The token could not be checked because the identity provider's keys cannot be fetched: 503.

    Not a 401: the token may well be valid, and a 401 would tell the client its credentials are wrong
    (clients then drop their token or give up); 503 with Retry-After says "try again" and points the
    operator at the provider."""
