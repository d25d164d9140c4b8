"""The warehouses this process serves: the default one (the server's settings) and each row of the
``warehouses`` table, opened as a catalog of its own (``catalog/warehouse_profiles.py`` says how they are
kept apart). Requests find theirs by name (``state``); the management API and the bootstrap file
create, change and delete them here (``create``, ``update``, ``delete``).

Other processes (uvicorn workers, replicas, ``maintenance worker``) see a change within
``REFRESH_SECONDS``: each reads the table again in the background and opens, reopens (a changed
profile) or closes warehouses to match. What a warehouse is opened as is the opener's: a server's
``AppState``, a worker's ``server.maintenance.Cared``; the Registry needs only its ``catalog``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import sqlalchemy as sa
import yaml

from catalog import errors
from catalog.database import migrate
from catalog.database.warehouse_rows import WarehouseRows
from catalog.locations import normalise, overlaps
from catalog.sealing import unseal
from catalog.server import startup
from catalog.settings import Settings
from catalog.storage import gcs
from catalog.storage.backends import create_storage, probe_writable
from catalog.usecases import Catalog
from catalog.warehouse_profiles import MASK, Warehouse, confined, default_name, parse, real_path, settings_for

log = logging.getLogger("catalog.warehouses")
REFRESH_SECONDS = 5.0
MAX_WAREHOUSES = 1000


class Served(Protocol):
    """What a warehouse is opened as (a server's ``AppState``): at least its catalog."""

    @property
    def catalog(self) -> Catalog: ...


S = TypeVar("S", bound=Served)


@dataclass
class Opened(Generic[S]):
    """One open warehouse: its handlers' state, what runs for it (maintenance, delivery), when it changed."""

    warehouse: Warehouse
    state: S
    settings: Settings
    updated_ms: int
    parts: list[Any] = field(default_factory=list)

    def close(self) -> None:
        for part in self.parts:
            part.stop()
        self.state.catalog.close()


# (the warehouse's settings, its name) -> what it is opened as, and what runs for it (each with stop())
Opener = Callable[[Settings, str], tuple[S, list[Any]]]


class Registry(Generic[S]):
    def __init__(
        self, settings: Settings, default: S, opener: Opener[S], grants_changed: Callable[[], None] = lambda: None
    ) -> None:
        """``grants_changed``: called when deleting a warehouse deleted its grants (the process's
        grants in force reload)."""
        self.settings = settings
        self.default = default
        self._grants_changed = grants_changed
        self.default_name = default_name(settings)
        self.default_names = settings.warehouses.default_warehouse_names
        self.rows = WarehouseRows(default.catalog.db.engine, settings.warehouses.secrets_key)
        self._opener = opener
        self._open: dict[str, Opened[S]] = {}
        self._lock = threading.RLock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # -- requests ------------------------------------------------------------------------------

    def knows(self, name: str) -> bool:
        return name in self.default_names or name in self._open

    def state(self, name: str | None) -> S:
        if name is None or name in self.default_names:
            return self.default
        opened = self._open.get(name)
        if opened is None:
            raise errors.NoSuchWarehouse.named(name)
        return opened.state

    def opened(self) -> dict[str, S]:
        """The created warehouses open now, by name (readiness and the gauges cover them)."""
        return {name: opened.state for name, opened in dict(self._open).items()}

    def for_config(self, asked: str | None) -> S:
        """``/v1/config?warehouse=``: nothing, the default's name, an alias of it
        (``CATALOG_WAREHOUSE_ALIASES``) or its location (what clients from before warehouses may send)
        is the default warehouse; a created one's name is that one."""
        if not asked or asked in self.default_names or asked.rstrip("/") == self.settings.storage.warehouse.rstrip("/"):
            return self.default
        return self.state(asked)

    # -- keeping in step with the table ---------------------------------------------------------

    def start(self) -> None:
        try:
            if resealed := self.rows.reseal():
                log.info(
                    "warehouses: sealed the secrets of %d warehouse(s) with the first CATALOG_SECRETS_KEY", resealed
                )
            self.refresh()
        except Exception as e:  # noqa: BLE001 - e.g. the schema not migrated yet: the default serves, retried
            log.warning("could not read the warehouses (retried every %.0f s): %s", REFRESH_SECONDS, e)
        self._thread = threading.Thread(target=self._refreshing, name="warehouses", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            for opened in self._open.values():
                opened.close()
            self._open.clear()

    def _refreshing(self) -> None:
        while not self._stopped.wait(REFRESH_SECONDS):
            try:
                self.refresh()
            except Exception as e:  # noqa: BLE001 - the database may be away for a while: retried
                log.warning("could not read the warehouses: %s", e)

    def refresh(self) -> None:
        """Open what is new, reopen what changed (the new one serves before the old one closes, so a
        change never makes a warehouse unknown for a moment), close what is gone."""
        with self._lock:
            rows = {w.name: (w, updated) for w, updated in self.rows.list()}
            for name in list(self._open):
                if name not in rows:
                    self._open.pop(name).close()
            for name, (w, updated) in rows.items():
                old = self._open.get(name)
                if old is not None and old.updated_ms == updated:
                    continue
                try:
                    self._open[name] = self._opened(w, updated)
                except Exception as e:  # noqa: BLE001 - one warehouse that cannot open leaves the others
                    log.error("cannot open warehouse %s: %s", name, e)
                    continue
                if old is not None:
                    old.close()

    def _opened(self, w: Warehouse, updated_ms: int) -> Opened[S]:
        assert w.id is not None
        settings = checked_settings(self.settings, w, w.id)
        self._prepare_database(settings)
        state, parts = self._opener(settings, w.name)
        return Opened(w, state, settings, updated_ms, parts)

    def _prepare_database(self, settings: Settings) -> None:
        """The warehouse's own database brought to head: a new SQLite file, or a new schema."""
        if settings.database.database_schema:
            with self.default.catalog.db.engine.begin() as conn:
                conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{settings.database.database_schema}"'))
        from catalog.database.db import create_engine

        engine = create_engine(settings.database)
        try:
            if not migrate.is_at_head(engine):
                migrate.upgrade(engine)
        finally:
            engine.dispose()

    # -- management ----------------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        default = {"name": self.default_name, "location": self.settings.storage.warehouse, "default": True}
        return [default, *(w.to_json() for w, _ in self.rows.list())]

    def get(self, name: str) -> dict[str, Any]:
        if name == self.default_name:
            return self.list()[0]
        w = self.rows.get(name)
        if w is None:
            raise errors.NoSuchWarehouse(f"Warehouse does not exist: {name}")
        return w.to_json()

    def create(self, doc: Any) -> Warehouse:
        w = parse(doc, self.settings)
        with self._lock:
            if len(self.rows.list()) >= MAX_WAREHOUSES:
                raise errors.BadRequest(f"At most {MAX_WAREHOUSES} warehouses")
            if self.rows.get(w.name) is not None:
                raise errors.AlreadyExists(f"Warehouse already exists: {w.name}")
            self._check_apart(w)
            warnings = self._probe(w)
            stored = self.rows.insert(w)
            try:
                self.refresh()
                if w.name not in self._open:
                    raise errors.ServiceUnavailable(f"Warehouse {w.name} could not be opened (see the server's log)")
            except Exception:
                self.rows.delete(w.name)
                raise
        log.info("warehouse %s created at %s", w.name, w.location)
        for warning in warnings:
            log.warning("warehouse %s: %s", w.name, warning)
        return dataclasses.replace(stored, warnings=tuple(warnings))

    def update(self, name: str, doc: Any) -> Warehouse:
        if name == self.default_name:
            raise errors.BadRequest("The default warehouse is the server's settings: change them instead")
        if isinstance(doc, dict) and doc.get("name", name) != name:
            raise errors.BadRequest("A warehouse keeps its name")
        with self._lock:
            old = self.rows.get(name)
            if old is None:
                raise errors.NoSuchWarehouse(f"Warehouse does not exist: {name}")
            w = parse(kept_secrets({**doc, "name": name}, old) if isinstance(doc, dict) else doc, self.settings)
            if normalise(w.location) != normalise(old.location) and not self._empty(name):
                raise errors.Conflict(f"Warehouse {name} is not empty: its location cannot change")
            self._check_apart(w)
            warnings = self._probe(w)
            self.rows.update(w)
            self.refresh()
        log.info("warehouse %s changed", name)
        for warning in warnings:
            log.warning("warehouse %s: %s", name, warning)
        return Warehouse(w.name, w.location, w.profile, id=old.id, warnings=tuple(warnings))

    def delete(self, name: str) -> None:
        if name == self.default_name:
            raise errors.BadRequest("The default warehouse cannot be deleted")
        with self._lock:
            w = self.rows.get(name)
            if w is None:
                raise errors.NoSuchWarehouse(f"Warehouse does not exist: {name}")
            if not self._empty(name):
                raise errors.Conflict(f"Warehouse {name} is not empty: drop its namespaces first")
            self.rows.delete(name)
            opened = self._open.pop(name, None)
            if opened is not None:
                opened.close()
                self._drop_database(opened.settings)
            grants = self.default.catalog.grants  # its grants go too: a later one of the name starts anew
            for g in grants.list_grants():
                if g.target.where()[0] == name and g.id is not None:
                    grants.delete_grant(g.id)
            self._grants_changed()
        log.info("warehouse %s deleted", name)

    def _empty(self, name: str) -> bool:
        return not self.state(name).catalog.entries.list_namespaces((), None, 1)

    def _drop_database(self, settings: Settings) -> None:
        """An empty warehouse's database goes with it (a later warehouse of the same name starts anew)."""
        if settings.database.database_schema:
            with self.default.catalog.db.engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{settings.database.database_schema}" CASCADE'))
            return
        path = settings.database.database_url.split(":///", 1)[1]
        for suffix in ("", "-wal", "-shm"):
            Path(path + suffix).unlink(missing_ok=True)

    def _check_apart(self, w: Warehouse) -> None:
        """A warehouse's location overlaps no other's (nor the default's): each owns its tree. On local
        disk also where symbolic links really lead: a link into another warehouse is that warehouse."""
        mine = normalise(w.location, "warehouse location")
        mine_real = real_path(w.location)
        local = startup.local_warehouse(self.settings)
        others = [(self.default_name, str(local) if local else self.settings.storage.warehouse)]
        others += [(o.name, o.location) for o, _ in self.rows.list() if o.name != w.name]
        others += [(f"allowed location {loc}", loc) for loc in self.settings.storage.allowed_location_list]
        for other, location in others:
            try:
                theirs = normalise(location)
                theirs_real = real_path(location)
            except errors.IcebergError:
                continue
            if overlaps(mine, theirs) or (
                mine_real is not None and theirs_real is not None and overlaps(mine_real, theirs_real)
            ):
                raise errors.Conflict(f"Warehouse location {w.location} overlaps warehouse {other}")

    def _probe(self, w: Warehouse) -> list[str]:
        """The storage profile works: a probe written, read back and deleted at the location. Returns
        what works for the server but may not for clients (warnings the caller logs and answers)."""
        settings = checked_settings(self.settings, w, 0)
        if (refusal := startup.warehouse_refusal(settings)) is not None:
            reason = refusal.replace(" (CATALOG_WAREHOUSE / --warehouse)", "")
            raise errors.BadRequest(f"Storage probe failed: {reason}")
        try:
            probe_writable(create_storage(settings.storage))
        except errors.IcebergError as e:
            raise errors.BadRequest(f"Storage probe failed at {w.location}: {e.message}"[:500]) from None
        except Exception as e:  # noqa: BLE001 - whatever the store's client raised: the profile is refused
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise errors.BadRequest(f"Storage probe failed at {w.location}: {reason}"[:500]) from None
        return gcs.client_access_warnings(settings.storage)

    def bootstrap(self, path: str) -> None:
        """Create or change the warehouses of the bootstrap file (``CATALOG_WAREHOUSES_FILE``) to match
        it; warehouses not in it are left alone (delete them through the API or the CLI). Several
        workers may apply it at once: a warehouse another one created first is taken as it is."""
        items = read_file(path, self.settings)
        for i, item in enumerate(items):
            try:
                w = parse(item, self.settings)
                existing = self.rows.get(w.name)
                if existing is None:
                    self.create(item)
                elif (existing.location, unseal(existing.profile, self.settings.warehouses.secrets_key, w.name)) != (
                    w.location,
                    w.profile,
                ):
                    self.update(w.name, item)
            except errors.AlreadyExists:
                self.refresh()
            except errors.IcebergError as e:
                raise ValueError(f"CATALOG_WAREHOUSES_FILE: {path}: warehouses[{i}]: {e.message}") from None
        log.info("warehouses bootstrap %s: %d warehouses", path, len(items))


def kept_secrets(doc: dict[str, Any], old: Warehouse) -> dict[str, Any]:
    """A change that sends a secret back as shown (``********``) keeps the stored one: what ``GET``
    answered can be edited and sent back with ``PUT``."""
    out = dict(doc)
    for section, keys in doc.items():
        if isinstance(keys, dict):
            out[section] = {k: old.profile.get(section, {}).get(k, v) if v == MASK else v for k, v in keys.items()}
    return out


def read_file(path: str, settings: Settings) -> list[Any]:
    """The warehouses of a bootstrap file, each checked (not probed); ``ValueError`` naming the
    file and the problem otherwise (``serve`` refuses to start with it, in one line)."""
    try:
        doc = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise ValueError(f"CATALOG_WAREHOUSES_FILE: cannot read {path}: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("warehouses", []), list):
        raise ValueError(f"CATALOG_WAREHOUSES_FILE: {path}: a mapping with a 'warehouses' list")
    items = doc.get("warehouses") or []
    names = []
    for i, item in enumerate(items):
        try:
            names.append(parse(item, settings).name)
        except errors.IcebergError as e:
            raise ValueError(f"CATALOG_WAREHOUSES_FILE: {path}: warehouses[{i}]: {e.message}") from None
    if len(set(names)) != len(names):
        raise ValueError(f"CATALOG_WAREHOUSES_FILE: {path}: a warehouse name appears twice")
    return items


def checked_settings(base: Settings, w: Warehouse, warehouse_id: int) -> Settings:
    """``settings_for``, refused (400) where the server would refuse them at start (an Azure
    location without a key, vending without STS, a keyless S3 profile that does not opt in to the
    process's own credentials, ...), and 403 where it may not live (``confined``: also for rows
    stored before ``CATALOG_WAREHOUSE_ROOTS`` existed, which then do not open)."""
    confined(w.location, base)
    settings = settings_for(base, w, warehouse_id)
    try:
        startup.check_settings(settings)
    except Exception as e:  # noqa: BLE001 - ConfigurationError and the like: the client's profile is wrong
        raise errors.BadRequest(f"Invalid warehouse: {str(e).splitlines()[0][:300]}") from None
    return settings
