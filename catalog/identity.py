"""Placeholder until the authentication branch lands: the principal a request acts as."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    name: str
    groups: frozenset[str] = frozenset()
    unrestricted: bool = False


ANONYMOUS = Principal("anonymous", unrestricted=True)
