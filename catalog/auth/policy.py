"""Authorization: who may do what, decided from grants. Pure: no I/O (``access`` loads and caches
the grants; ``api/guard`` asks on every route).

A grant gives one privilege on one object to one principal:

- privileges: ``read`` (list, load and see metadata), ``write`` (commit data: snapshots, refs,
  statistics; replace a view's version), ``alter`` (schema, partition spec, sort order, location,
  format version), ``manage-properties``, ``create`` (namespaces, tables and views inside),
  ``drop``, ``purge`` (drop and delete the files), ``register``, ``manage-grants``, and ``admin``
  (all of them);
- objects: the ``catalog``, a namespace, a table or a view. A grant on the catalog or a namespace is
  inherited by everything below it (child namespaces and their tables and views). With
  warehouses, ``{warehouse: name}`` is that warehouse's catalog level, and a namespace, table or
  view may name the warehouse it is in (``Target.warehouse``; none: the default warehouse's);
- principals: ``user:<name>`` (an identity provider's token: its principal claim), ``client:<id>``
  (a built-in client of the token endpoint) or ``role:<name>`` (one of the token's groups/roles).

Grants name objects, not their incarnations: a table dropped and created again under the same name
has the same grants, as a declarative policy file expects.

Why not a policy library (Casbin, OPA): a decision here is "does one of the caller's few principal
keys hold one of the privileges implying P on the object or one of its ancestors" — a handful of
set lookups over a snapshot of the grants table. Casbin would add a model language and an adapter
that loads the same rows, and its matcher would still need a hand-written function for the
namespace hierarchy; OPA adds a service to run. The evaluator below is the whole rule, tested
directly (tests/test_authz.py).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from catalog import errors, names
from catalog.warehouse_profiles import NAME


class Privilege(enum.StrEnum):
    READ = "read"
    WRITE = "write"
    ALTER = "alter"
    MANAGE_PROPERTIES = "manage-properties"
    CREATE = "create"
    DROP = "drop"
    PURGE = "purge"
    REGISTER = "register"
    MANAGE_GRANTS = "manage-grants"
    ADMIN = "admin"


P = Privilege
# The held privileges that give each one: reading comes with every privilege that works on an
# object's content; purging includes dropping; admin gives everything.
_GIVEN_BY: dict[Privilege, frozenset[Privilege]] = {
    P.READ: frozenset({P.READ, P.WRITE, P.ALTER, P.MANAGE_PROPERTIES, P.ADMIN}),
    P.DROP: frozenset({P.DROP, P.PURGE, P.ADMIN}),
    **{p: frozenset({p, P.ADMIN}) for p in P if p not in (P.READ, P.DROP)},
}

CATALOG, NAMESPACE, TABLE, VIEW = "catalog", "namespace", "table", "view"
# A warehouse (path: its name): inside that warehouse, a grant on it is a grant on its catalog
# (``Access`` maps it to ``ROOT`` there); catalog-level grants span every warehouse.
WAREHOUSE = "warehouse"


@dataclass(frozen=True, slots=True)
class Target:
    """An object grants are given on: ``path`` is the namespace levels, then the name of a table
    or view; empty for the catalog. ``warehouse``: the warehouse a namespace, table or view is in
    (None: the default one); decisions are made on targets seen from inside their warehouse, where
    it is None (``auth.grants.in_warehouse``)."""

    kind: str
    path: tuple[str, ...] = ()
    warehouse: str | None = None

    def scopes(self) -> Iterable[Target]:
        """The objects whose grants apply to this one: the catalog, each enclosing namespace, itself."""
        yield ROOT
        levels = self.levels
        for i in range(1, len(levels) + 1):
            yield Target(NAMESPACE, levels[:i])
        if self.kind in (TABLE, VIEW):
            yield self

    @property
    def levels(self) -> tuple[str, ...]:
        """The namespace levels: the namespace itself, or the one a table or view is in."""
        return self.path if self.kind in (CATALOG, NAMESPACE) else self.path[:-1]

    def contains(self, other: Target) -> bool:
        """True when ``other`` is this namespace (or the catalog) or lies below it."""
        if self.kind == CATALOG:
            return True
        return self.kind == NAMESPACE and other.levels[: len(self.path)] == self.path

    def __str__(self) -> str:
        shown = self.kind if self.kind == CATALOG else f"{self.kind} {'.'.join(self.path)}"
        return f"{shown} in warehouse {self.warehouse}" if self.warehouse else shown

    def to_json(self) -> dict[str, Any]:
        if self.kind == WAREHOUSE:
            return {WAREHOUSE: self.path[0]}
        shown = {"catalog": True} if self.kind == CATALOG else {self.kind: list(self.path)}
        return {WAREHOUSE: self.warehouse, **shown} if self.warehouse else shown

    def where(self) -> tuple[str | None, Target]:
        """The warehouse whose grants decide on this object (None: the default one) and the object
        as seen from inside it: ``{warehouse: w}`` is w's catalog, ``{warehouse: w, table: t}`` w's t."""
        if self.kind == WAREHOUSE:
            return self.path[0], ROOT
        return self.warehouse, Target(self.kind, self.path)


ROOT = Target(CATALOG)


def namespace(levels: Iterable[str]) -> Target:
    levels = tuple(levels)
    return Target(NAMESPACE, levels) if levels else ROOT


def entry(kind: str, ns: Iterable[str], name: str) -> Target:
    return Target(kind, (*ns, name))


@dataclass(frozen=True, slots=True)
class Grant:
    principal: str
    privilege: Privilege
    target: Target
    id: int | None = None
    source: str = "api"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "principal": self.principal,
            "privilege": str(self.privilege),
            "on": self.target.to_json(),
            "source": self.source,
        }


def principal_keys(name: str, groups: Iterable[str], kind: str = "user") -> list[str]:
    """The grant principals a token stands for: itself (``user:<name>`` for an identity provider's
    user, ``client:<id>`` for a built-in client) and each of its groups/roles."""
    return [f"{kind}:{name}", *(f"role:{g}" for g in groups)]


class Policy:
    """A snapshot of the grants, indexed for decisions."""

    def __init__(self, grants: Iterable[Grant]) -> None:
        self._held: dict[str, dict[Target, set[Privilege]]] = {}
        for g in grants:
            self._held.setdefault(g.principal, {}).setdefault(g.target, set()).add(g.privilege)

    def allows(self, keys: list[str], privilege: Privilege, target: Target) -> bool:
        giving = _GIVEN_BY[privilege]
        for key in keys:
            held = self._held.get(key)
            if held and any(not giving.isdisjoint(held.get(scope, ())) for scope in target.scopes()):
                return True
        return False

    def sees(self, keys: list[str], target: Target) -> bool:
        """The caller may know the object exists: it holds some privilege on it (or above it), or,
        for a namespace, on something inside it (so that it can navigate to what it was granted)."""
        scopes = set(target.scopes())
        for key in keys:
            for granted in self._held.get(key, {}):
                if granted in scopes or target.contains(granted):
                    return True
        return False


# -- what a commit needs ----------------------------------------------------------------------------

_WRITE_ACTIONS = frozenset(
    {
        "add-snapshot",
        "set-snapshot-ref",
        "remove-snapshots",
        "remove-snapshot-ref",
        "set-statistics",
        "remove-statistics",
        "set-partition-statistics",
        "remove-partition-statistics",
        "add-view-version",
        "set-current-view-version",
    }
)
_PROPERTY_ACTIONS = frozenset({"set-properties", "remove-properties"})


def commit_privileges(updates: Iterable[Mapping[str, Any]]) -> set[Privilege]:
    """The privileges a commit's updates need: data changes ``write``, property changes
    ``manage-properties``, everything else (schema, specs, sort orders, location, format version,
    encryption keys, and actions the engine will refuse) ``alter``."""
    needed: set[Privilege] = set()
    for update in updates:
        action = update.get("action")
        if action in _WRITE_ACTIONS:
            needed.add(P.WRITE)
        elif action in _PROPERTY_ACTIONS:
            needed.add(P.MANAGE_PROPERTIES)
        else:
            needed.add(P.ALTER)
    return needed or {P.WRITE}


# -- parsing (management API, CLI, bootstrap file) --------------------------------------------------

MAX_PRINCIPAL_CHARS = 256
PRINCIPAL_KINDS = ("user", "client", "role")


def parse_privilege(value: Any) -> Privilege:
    try:
        return Privilege(value)
    except ValueError:
        raise errors.BadRequest(
            f"Unknown privilege {str(value)[:40]!r}: expected one of {', '.join(p.value for p in P)}"
        ) from None


def parse_principal(value: Any) -> str:
    kind, sep, name = value.partition(":") if isinstance(value, str) else ("", "", "")
    if not sep or kind not in PRINCIPAL_KINDS or not name:
        raise errors.BadRequest(
            "A grant's principal is 'user:<name>' (an identity provider's user), 'client:<id>' (a built-in "
            "client) or 'role:<name>'"
        )
    if len(value) > MAX_PRINCIPAL_CHARS or any(ord(c) < 32 for c in value):
        raise errors.BadRequest(f"A principal is at most {MAX_PRINCIPAL_CHARS} printable characters")
    return value


def as_client(grant: Grant, client_ids: Collection[str]) -> Grant:
    """A grant to ``user:<id>`` where ``<id>`` is a built-in client, as a grant to ``client:<id>``
    (how grants named built-in clients before principal kinds); any other grant as it is."""
    kind, _, name = grant.principal.partition(":")
    if kind != "user" or name not in client_ids:
        return grant
    return Grant("client:" + name, grant.privilege, grant.target, grant.id, grant.source)


def refuse_ambiguous(grants: Iterable[Grant], client_ids: Collection[str]) -> None:
    """400 for a new grant to ``user:<id>`` where ``<id>`` is a built-in client: before principal
    kinds that meant the client, now it would mean an identity provider's user of that name."""
    for g in grants:
        if as_client(g, client_ids) is not g:
            name = g.principal.partition(":")[2]
            raise errors.BadRequest(
                f"{g.principal!r} names an identity provider's user, but {name!r} is a built-in client: grant "
                f"'client:{name}' to the built-in client (an identity provider's user of the same name cannot be "
                "granted while the built-in client exists)"
            )


def parse_target(value: Any) -> Target:
    """``"catalog"``, ``{"catalog": true}``, ``{"warehouse": "name"}``, or
    ``{"namespace"|"table"|"view": "a.b.t"}`` (a list of levels when a level contains a dot), the
    last ones with ``"warehouse": "name"`` beside them for that warehouse's object."""
    if value == CATALOG or value == {CATALOG: True}:
        return ROOT
    if isinstance(value, Mapping) and WAREHOUSE in value and 1 <= len(value) <= 2:
        name = value[WAREHOUSE]
        if isinstance(name, str) and NAME.match(name):
            if len(value) == 1:
                return Target(WAREHOUSE, (name,))
            inner = _object({k: v for k, v in value.items() if k != WAREHOUSE})
            if inner is not None:
                return Target(inner.kind, inner.path, name)
    elif (inner := _object(value)) is not None:
        return inner
    raise errors.BadRequest(
        "A grant's object is 'catalog' or one of {warehouse: name}, {namespace: a.b}, {table: a.b.t}, {view: a.b.v} "
        "(a list of levels when a level contains a dot; a table or view needs a namespace), the last three with "
        "'warehouse: name' for an object of that warehouse"
    )


def _object(value: Any) -> Target | None:
    """``{"namespace"|"table"|"view": levels}`` as a target; None when it is not one."""
    if not isinstance(value, Mapping) or len(value) != 1:
        return None
    ((kind, name),) = value.items()
    if kind not in (NAMESPACE, TABLE, VIEW):
        return None
    levels = name.split(".") if isinstance(name, str) else name
    if not (
        isinstance(levels, list)
        and levels
        and all(isinstance(s, str) and s and len(s) <= 255 for s in levels)
        and (kind == NAMESPACE or len(levels) >= 2)
        and len(levels) <= 32
    ):
        return None
    # named like every namespace, table and view: no NUL, control characters, '/', '..'
    names.check_namespace(tuple(levels) if kind == NAMESPACE else tuple(levels[:-1]))
    if kind != NAMESPACE:
        names.check_name(levels[-1])
    return Target(kind, tuple(levels))


def parse_grants(doc: Any) -> list[Grant]:
    """The grants of a bootstrap document: ``{"grants": [{"principal", "privileges", "on"}]}``."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("grants", []), list):
        raise errors.BadRequest("The bootstrap file is a mapping with a 'grants' list")
    found: list[Grant] = []
    for i, item in enumerate(doc.get("grants") or []):
        if not isinstance(item, Mapping):
            raise errors.BadRequest(f"grants[{i}] is not a mapping")
        privileges = item.get("privileges", item.get("privilege"))
        if isinstance(privileges, str):
            privileges = [privileges]
        if not isinstance(privileges, list) or not privileges:
            raise errors.BadRequest(f"grants[{i}] needs 'privileges' (a list)")
        try:
            # YAML 1.1 (PyYAML) reads a bare ``on:`` key as the boolean true
            principal, target = parse_principal(item.get("principal")), parse_target(item.get("on", item.get(True)))
            found += [Grant(principal, parse_privilege(p), target, source="bootstrap") for p in privileges]
        except errors.BadRequest as e:
            raise errors.BadRequest(f"grants[{i}]: {e.message}") from None
    return found
