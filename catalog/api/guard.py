"""Authorization on the routes: every handler names what it needs before it does anything.

``require`` refuses with 403 unless the request's principal holds the privileges (``catalog.auth.policy``);
``visible`` filters what a list shows; ``require_seen`` answers for an object named by an id (a task,
a dropped entry, a grant) that the caller may not see exactly as for an id that names nothing. They
record the action and object for the audit line (``app.RequestObservation``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from litestar import Request

from catalog import errors
from catalog.api import selection, wire
from catalog.auth.grants import Access
from catalog.auth.policy import ROOT, Policy, Privilege, Target, principal_keys
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
    """403 unless the caller holds every privilege on its object (decided by the grants of the
    object's warehouse: ``deciding``)."""
    needs = list(needs)
    who = principal(request)
    _audit(request, who, needs)
    for privilege, target in needs:
        access, inside = deciding(request, target)
        checked = await _policy(access, who)
        if checked is not None and not checked[1].allows(checked[0], privilege, inside):
            raise errors.Forbidden(f"Forbidden: {who.name} does not have privilege {privilege} on {target}")
    return who


def deciding(request: Request, target: Target) -> tuple[Access, Target]:
    """Whose grants decide on ``target`` and the target as seen by them: the request's warehouse's
    for an object that names no warehouse (what the catalog routes ask about), else the named
    warehouse's (``{warehouse: w}`` is w's catalog). A warehouse not served (deleted meanwhile, or
    never one) is the request's catalog level: only a catalog-wide grant decides on it."""
    where, inside = target.where()
    if where is None:
        return selection.current(request.app.state).access, target
    registry = request.app.state.ctx.registry()
    if not registry.knows(where):
        return selection.current(request.app.state).access, ROOT
    return registry.state(where).access, inside


async def visible(request: Request, targets: Iterable[Target]) -> list[bool]:
    """For each target, whether the caller may see it (``Policy.sees``)."""
    targets = list(targets)
    checked = await _policy(selection.current(request.app.state).access, principal(request))
    if checked is None:
        return [True] * len(targets)
    keys, policy = checked
    return [policy.sees(keys, t) for t in targets]


async def readable(request: Request, targets: Iterable[Target]) -> list[bool]:
    """For each target, whether the caller may read it (``read``, or a privilege that gives it)."""
    targets = list(targets)
    checked = await _policy(selection.current(request.app.state).access, principal(request))
    if checked is None:
        return [True] * len(targets)
    keys, policy = checked
    return [policy.allows(keys, Privilege.READ, t) for t in targets]


async def require_visible(request: Request, target: Target) -> None:
    who = principal(request)
    _audit(request, who, [(Privilege.READ, target)])
    if not (await visible(request, [target]))[0]:
        raise errors.Forbidden(f"Forbidden: {who.name} has no privilege on {target}")


async def require_seen(
    request: Request, target: Target, missing: errors.IcebergError, privilege: Privilege | None = None
) -> None:
    """Raise ``missing`` (the very error an id that names nothing gets) unless the caller may see
    ``target``: holds ``privilege`` on it, or, with None, any privilege (``Policy.sees``). So walking
    the small sequential ids of the management routes tells a caller nothing about objects it may not
    see, not even that they exist. The refusal is still audited as one (``denied``)."""
    who = principal(request)
    _audit(request, who, [(privilege or Privilege.READ, target)])
    if privilege is None:
        seen = (await visible(request, [target]))[0]
    else:
        seen = await holds(request, privilege, target)
    if not seen:
        record: dict[str, Any] | None = request.scope.get("audit")
        if record is not None:
            record["denied"] = True
        raise missing


async def holds(request: Request, privilege: Privilege, target: Target) -> bool:
    access, inside = deciding(request, target)
    checked = await _policy(access, principal(request))
    return checked is None or checked[1].allows(checked[0], privilege, inside)


async def holds_any(request: Request, access: Access) -> bool:
    """The caller holds some grant among those deciding in ``access``'s warehouse (on its catalog
    or on anything in it): it may know the warehouse exists."""
    checked = await _policy(access, principal(request))
    return checked is None or checked[1].sees(checked[0], ROOT)


async def _policy(access: Access, who: Principal) -> tuple[list[str], Policy] | None:
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
