"""Authorization on the routes: every handler names what it needs before it does anything.

``require`` refuses with 403 unless the request's principal holds the privileges (``catalog.auth.policy``);
``visible`` filters what a list shows. Both record the action and object for the audit line
(``app.RequestObservation``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from litestar import Request

from catalog import errors
from catalog.api import selection, wire
from catalog.auth.policy import Policy, Privilege, Target, principal_keys
from catalog.auth.principals import ANONYMOUS, Principal


def principal(request: Request) -> Principal:
    """The request's principal (set by the bearer middleware). Missing only when authentication is
    off; with it on, a request without one is refused rather than let through."""
    who = request.scope.get("principal")
    if who is None:
        if selection.current(request.app.state).access.enforced:
            raise errors.NotAuthorized("Not authorized: no principal")
        return ANONYMOUS
    return who


def grantee(request: Request) -> str:
    """The grant principal the caller is (``user:<name>``, ``client:<id>``)."""
    who = principal(request)
    return principal_keys(who.name, (), who.kind)[0]


async def require(request: Request, needs: Iterable[tuple[Privilege, Target]]) -> Principal:
    needs = list(needs)
    who = principal(request)
    _audit(request, who, needs)
    checked = await _policy(request, who)
    if checked is not None:
        keys, policy = checked
        for privilege, target in needs:
            if not policy.allows(keys, privilege, target):
                raise errors.Forbidden(f"Forbidden: {who.name} does not have privilege {privilege} on {target}")
    return who


async def visible(request: Request, targets: Iterable[Target]) -> list[bool]:
    """For each target, whether the caller may see it (``Policy.sees``)."""
    targets = list(targets)
    checked = await _policy(request, principal(request))
    if checked is None:
        return [True] * len(targets)
    keys, policy = checked
    return [policy.sees(keys, t) for t in targets]


async def readable(request: Request, targets: Iterable[Target]) -> list[bool]:
    """For each target, whether the caller may read it (``read``, or a privilege that gives it)."""
    targets = list(targets)
    checked = await _policy(request, principal(request))
    if checked is None:
        return [True] * len(targets)
    keys, policy = checked
    return [policy.allows(keys, Privilege.READ, t) for t in targets]


async def require_visible(request: Request, target: Target) -> None:
    who = principal(request)
    _audit(request, who, [(Privilege.READ, target)])
    if not (await visible(request, [target]))[0]:
        raise errors.Forbidden(f"Forbidden: {who.name} has no privilege on {target}")


async def holds(request: Request, privilege: Privilege, target: Target) -> bool:
    checked = await _policy(request, principal(request))
    return checked is None or checked[1].allows(checked[0], privilege, target)


async def _policy(request: Request, who: Principal) -> tuple[list[str], Policy] | None:
    access = selection.current(request.app.state).access
    if who.unrestricted or not access.enforced:
        return None
    policy = access.cached() or await wire.blocking(access.policy)
    return principal_keys(who.name, who.groups, who.kind), policy


def _audit(request: Request, who: Principal, needs: list[tuple[Privilege, Target]]) -> None:
    """What the audit line will say: the principal and what it needed (the line, written only for
    mutating requests and refusals, spells them out: ``audited``)."""
    record: dict[str, Any] | None = request.scope.get("audit")
    if record is not None:
        record["principal"] = who.name
        record["needs"] = needs


def audited(record: dict[str, Any]) -> tuple[str | None, list[str] | None]:
    """The audit line's object and privileges from what ``require`` recorded (None: nothing was)."""
    needs = record.get("needs")
    if needs is None:
        return None, None
    return ", ".join(sorted({str(t) for _, t in needs})), sorted({str(p) for p, _ in needs})
