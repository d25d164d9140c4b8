"""Secrets at rest: the storage secrets of created warehouses (a profile's ``secret-access-key``,
``account-key``) are kept in the database encrypted when ``CATALOG_SECRETS_KEY`` is set.

A sealed value is ``fernet:<token>`` (``cryptography``'s Fernet: AES-128-CBC with an HMAC-SHA256, a
timestamp and a version byte). The setting holds one or more keys, comma-separated: the first seals,
each unseals, so a key is rotated by putting the new one first and restarting (each server reseals
what it finds with the first key: ``WarehouseRows.reseal``), then dropping the old one. Without a key
values are stored as given. A value that cannot be unsealed (no key, or none that fits) keeps its
warehouse from opening, and the log and ``doctor`` say why; the value never appears.

``Sealer``: the AES-GCM tokens the server hands out and takes back (scan planning's plan tasks).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from catalog import errors

PREFIX = "fernet:"
_SECRET = frozenset({"secret_access_key", "account_key"})  # a profile section's keys, ``-`` or ``_``


def is_secret(key: str) -> bool:
    """Whether a profile section's ``key`` holds a secret (never shown, sealed at rest)."""
    return key.replace("-", "_") in _SECRET


class Keys:
    """The keys of ``CATALOG_SECRETS_KEY``, in order: ``first`` seals, ``all`` unseals."""

    def __init__(self, fernets: list[Fernet]) -> None:
        self.first = fernets[0]
        self.all = MultiFernet(fernets)


@functools.lru_cache(maxsize=4)
def keys(setting: str) -> Keys:
    """The keys of ``CATALOG_SECRETS_KEY``; a ValueError that says what is wrong (never the key)."""
    parts = [p.strip() for p in setting.split(",") if p.strip()]
    if not parts:
        raise ValueError("no key")
    try:
        return Keys([Fernet(p) for p in parts])
    except (ValueError, TypeError):
        raise ValueError(
            "each key must be 32 url-safe base64-encoded bytes (e.g. the output of "
            '`python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())"`)'
        ) from None


def _keys(setting: str | None) -> Keys | None:
    return keys(setting) if setting else None


def plain(value: Any, setting: str | None, warehouse: str) -> Any:
    """A profile value as the storage client needs it; 400 naming the warehouse (never the value)
    when it is sealed and no key of ``setting`` opens it."""
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return value
    sealer = _keys(setting)
    if sealer is None:
        raise errors.BadRequest(
            f"The secrets of warehouse {warehouse} are encrypted: CATALOG_SECRETS_KEY must be set to read them"
        )
    try:
        return sealer.all.decrypt(value[len(PREFIX) :].encode()).decode()
    except InvalidToken:
        raise errors.BadRequest(
            f"The secrets of warehouse {warehouse} are encrypted with a key CATALOG_SECRETS_KEY does not hold"
        ) from None


def seal(profile: dict[str, Any], setting: str | None, warehouse: str) -> dict[str, Any]:
    """``profile`` as stored: its secrets sealed with the first key (those sealed with another key
    resealed); as given without a key."""
    sealer = _keys(setting)
    if sealer is None:
        return profile
    return _each_secret(
        profile, lambda v: PREFIX + sealer.first.encrypt(str(plain(v, setting, warehouse)).encode()).decode()
    )


def unseal(profile: dict[str, Any], setting: str | None, warehouse: str) -> dict[str, Any]:
    """``profile`` with its secrets readable (``plain``)."""
    return _each_secret(profile, lambda v: plain(v, setting, warehouse))


def sealed_by_first(profile: dict[str, Any], setting: str | None) -> bool:
    """Whether ``seal`` has nothing to do: no key, or every secret sealed with the first key."""
    sealer = _keys(setting)
    if sealer is None:
        return True
    for value in _secrets(profile):
        if not isinstance(value, str) or not value.startswith(PREFIX):
            return False
        try:
            sealer.first.decrypt(value[len(PREFIX) :].encode())
        except InvalidToken:
            return False
    return True


def _secrets(profile: dict[str, Any]) -> list[Any]:
    return [v for keys_ in profile.values() if isinstance(keys_, dict) for k, v in keys_.items() if is_secret(k)]


def _each_secret(profile: dict[str, Any], change: Any) -> dict[str, Any]:
    return {
        section: (
            {k: (change(v) if is_secret(k) else v) for k, v in keys_.items()} if isinstance(keys_, dict) else keys_
        )
        for section, keys_ in profile.items()
    }


class Sealer:
    """Opaque tokens the server alone can read: AES-GCM under a key derived from ``label`` and
    ``CATALOG_TOKEN_SECRET`` (the same on every worker and replica), else the workers' shared key of
    one ``serve`` (hex), else a random key of this process. A token is bound to a ``context`` (the
    AEAD's associated data): opened with another context it is refused like an altered one. Labels
    keep kinds of tokens apart: a page token never opens as a plan task."""

    VERSION = "1"
    NONCE = 12

    def __init__(self, secret: str | None, shared: str | None, label: bytes, max_chars: int = 8192) -> None:
        if secret:
            material = secret.encode()
        elif shared and len(shared) == 64:
            material = bytes.fromhex(shared)
        else:
            material = os.urandom(32)
        self._aead = AESGCM(hmac.new(material, label, hashlib.sha256).digest())
        self.max_chars = max_chars

    def seal(self, payload: bytes, context: str) -> str:
        nonce = os.urandom(self.NONCE)
        sealed = nonce + self._aead.encrypt(nonce, payload, context.encode())
        return self.VERSION + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def open(self, token: object, context: str) -> bytes | None:
        """The payload of a token sealed for ``context``; None for anything else."""
        if not isinstance(token, str) or len(token) > self.max_chars or not token.startswith(self.VERSION):
            return None
        try:
            raw = base64.urlsafe_b64decode(token[1:] + "=" * (-(len(token) - 1) % 4))
            return self._aead.decrypt(raw[: self.NONCE], raw[self.NONCE :], context.encode())
        except (ValueError, InvalidTag):
            return None
