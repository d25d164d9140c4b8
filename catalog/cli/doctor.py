"""``iceberg-catalog doctor``: checks the LOCAL configuration (``CATALOG_*`` variables, as ``serve``
reads them): the database is reachable and at the migration head, the warehouse is writable, S3
answers, each other warehouse's storage takes a probe, the clock agrees with the storage's, and
which settings are risky. One line per check; the exit status is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from catalog.cli.common import first_line


def register(sub: argparse._SubParsersAction) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check this machine's configuration (CATALOG_* variables, as `serve` reads them)",
        description="Checks, against the local configuration: the database is reachable and migrated, the "
        "warehouse is writable, S3 answers, the clock is sane, and which settings are risky. One line per "
        "check; the exit status is 1 if any check failed.",
    )
    doctor.add_argument("--database-url", dest="database_url", help="overrides CATALOG_DATABASE_URL")
    doctor.add_argument("--warehouse", dest="warehouse", help="overrides CATALOG_WAREHOUSE")
    doctor.add_argument("--strict", action="store_true", help="risky settings count as failures")
    doctor.add_argument("--json", action="store_true", help="the checks as a JSON list")


class _Check:
    def __init__(self, name: str, ok: bool | None, detail: str, warning: bool = False) -> None:
        self.name, self.ok, self.detail, self.warning = name, ok, detail, warning

    @property
    def mark(self) -> str:
        if self.warning:
            return "!"
        return {True: "✓", False: "✗", None: "-"}[self.ok]


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from catalog.settings import Settings

    overrides = {f: getattr(args, f) for f in ("database_url", "warehouse") if getattr(args, f, None) is not None}
    checks: list[_Check] = []
    try:
        settings = Settings(**overrides)
    except ValidationError as e:
        problems = "; ".join(f"CATALOG_{'_'.join(map(str, err['loc'])).upper()}: {err['msg']}" for err in e.errors())
        checks.append(_Check("configuration", False, problems))
    else:
        checks.extend(_doctor_checks(settings))
    failed = [c for c in checks if c.ok is False or (args.strict and c.warning)]
    if args.json:
        print(
            json.dumps(
                [{"check": c.name, "ok": c.ok, "warning": c.warning, "detail": c.detail} for c in checks], indent=2
            )
        )
    else:
        for c in checks:
            print(f"{c.mark} {c.name}: {c.detail}")
        print(f"{len(failed)} check(s) failed" if failed else "all checks passed")
    return 1 if failed else 0


def _doctor_checks(settings: Any) -> Iterator[_Check]:
    from catalog.server import startup
    from catalog.settings import ConfigurationError

    warnings: list[str] = []
    try:
        warnings = startup.check_settings(settings)  # the refusals and warnings of `serve` itself
        yield _Check("configuration", True, "settings are consistent")
    except ConfigurationError as e:
        yield _Check("configuration", False, str(e))
    engine = None
    try:
        engine, db_checks = _database_checks(settings)
        yield from db_checks
        yield from _storage_checks(settings, engine)
        yield from _warehouse_checks(settings, engine)
    finally:
        if engine is not None:
            engine.dispose()
    for warning in [*warnings, *startup.risky(settings)]:
        yield _Check("settings", None, warning, warning=True)


def _warehouse_checks(settings: Any, engine: Any) -> Iterator[_Check]:
    """Each warehouse besides the default: its settings, and the probe through its own storage."""
    import sqlalchemy as sa

    from catalog import errors
    from catalog.database.warehouse_rows import WarehouseRows
    from catalog.server.warehouses import checked_settings
    from catalog.storage.backends import create_storage, probe_writable

    if engine is None:
        return
    try:
        with engine.connect() as conn:
            if not sa.inspect(conn).has_table("warehouses"):
                return
        rows = WarehouseRows(engine, settings.warehouses.secrets_key).list()
    except Exception:  # noqa: BLE001 - the database checks above said why
        return
    for w, _ in rows:
        assert w.id is not None
        try:
            own = checked_settings(settings, w, w.id)
            probe_writable(create_storage(own.storage))
            yield _Check(f"warehouse {w.name}", True, f"writable: wrote, read and deleted a probe file in {w.location}")
        except errors.IcebergError as e:
            yield _Check(f"warehouse {w.name}", False, f"{w.location}: {e.message}")
        except Exception as e:  # noqa: BLE001
            yield _Check(f"warehouse {w.name}", False, f"{w.location}: {first_line(e)}")


def _sqlite_path(url: str) -> str | None:
    from sqlalchemy.engine import make_url

    database = make_url(url).database
    return None if not database or database == ":memory:" else os.path.abspath(database)


def _database_checks(settings: Any) -> tuple[Any, list[_Check]]:
    from catalog.database import migrate
    from catalog.database.db import create_engine
    from catalog.server import startup

    where = startup.masked(settings.database.database_url)
    try:
        if settings.database.is_sqlite:
            path = _sqlite_path(settings.database.database_url)
            if path and not os.path.isfile(path):
                # Connecting would create an empty file: say where the catalog was expected instead.
                return None, [
                    _Check(
                        "database",
                        False,
                        f"SQLite file {path} does not exist (the server creates it at its first start; "
                        "is CATALOG_DATABASE_URL the one the server uses, relative to the same directory?)",
                    )
                ]
        engine = create_engine(settings.database)
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as e:  # noqa: BLE001 - any driver error is the finding
        return None, [_Check("database", False, f"cannot connect to {where}: {first_line(e)}")]
    checks = [_Check("database", True, f"reachable: {where}")]
    try:
        current, heads = migrate.current(engine), migrate.heads()
    except Exception as e:  # noqa: BLE001
        checks.append(_Check("migrations", False, f"cannot read the schema revision: {first_line(e)}"))
    else:
        if current == heads:
            checks.append(_Check("migrations", True, f"at head ({', '.join(sorted(heads))})"))
        else:
            have = ", ".join(sorted(current)) or "empty (never migrated)"
            checks.append(
                _Check(
                    "migrations",
                    False,
                    f"at {have}, head is {', '.join(sorted(heads))}: run `iceberg-catalog migrate` "
                    "(or start the server with CATALOG_AUTO_MIGRATE=true)",
                )
            )
    return engine, checks


def _storage_checks(settings: Any, engine: Any) -> Iterator[_Check]:
    from catalog import errors
    from catalog.storage.backends import create_storage, probe_writable

    kind = settings.storage.storage_kind
    s3 = kind == "s3"
    if kind == "local":
        from catalog.server import startup

        path = startup.local_warehouse(settings)
        refusal = startup.warehouse_refusal(settings, create=False)  # what `serve` would refuse, in its words
        if refusal is not None or not path.exists():
            detail = refusal or (
                f"{path} does not exist (the server creates it at start; is CATALOG_WAREHOUSE the one it uses?)"
            )
            yield _Check("warehouse", False, detail)
            yield _Check("s3", None, "skipped: the warehouse is a local directory")
            yield from _clock_from_database(settings, engine)
            return
    try:
        storage: Any = create_storage(settings.storage)
    except Exception as e:  # noqa: BLE001
        yield _Check("warehouse", False, f"cannot open {settings.storage.warehouse}: {first_line(e)}")
        return
    date_header = None
    if s3:
        where = f"bucket {storage.bucket} at {settings.storage.s3_endpoint or 'AWS S3'}"
        try:
            response = storage.client.head_bucket(Bucket=storage.bucket)
            date_header = response.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
            yield _Check("s3", True, f"{where} answers")
        except Exception as e:  # noqa: BLE001
            yield _Check("s3", False, f"{where}: {first_line(e)}")
    elif kind in ("azure", "gcs"):
        yield _Check("s3", None, f"skipped: the warehouse is on {'Azure' if kind == 'azure' else 'Cloud Storage'}")
        try:
            storage.ping()
            yield _Check(kind, True, f"{storage.root()} answers (endpoint {storage.endpoint})")
        except errors.IcebergError as e:
            yield _Check(kind, False, e.message)
    else:
        yield _Check("s3", None, "skipped: the warehouse is a local directory")
    try:
        probe_writable(storage)
        yield _Check("warehouse", True, f"writable: wrote, read and deleted a probe file in {storage.root()}")
    except errors.IcebergError as e:
        yield _Check("warehouse", False, f"not writable: {e.message}")
    except Exception as e:  # noqa: BLE001
        yield _Check("warehouse", False, f"not writable ({storage.root()}): {first_line(e)}")
    if date_header:
        yield _clock_check("S3", _parse_http_date(date_header))
    else:
        yield from _clock_from_database(settings, engine)


# Beyond this, OIDC tokens (default leeway 60 s) and S3 signatures (15 min) start being refused.
_MAX_SKEW_SECONDS = 30.0


def _clock_check(source: str, their: float | None) -> _Check:
    if their is None:
        return _Check("clock", None, f"skipped: {source} did not say its time")
    skew = time.time() - their
    detail = f"{abs(skew):.1f} s {'ahead of' if skew > 0 else 'behind'} {source}"
    if abs(skew) > _MAX_SKEW_SECONDS:
        return _Check("clock", False, f"{detail}: fix NTP (tokens and S3 signatures are refused when clocks differ)")
    return _Check("clock", True, detail)


def _clock_from_database(settings: Any, engine: Any) -> Iterator[_Check]:
    if engine is None or settings.database.is_sqlite:
        yield _Check("clock", None, "skipped: no remote service to compare with (SQLite and a local warehouse)")
        return
    try:
        with engine.connect() as conn:
            their = conn.exec_driver_sql("SELECT extract(epoch from clock_timestamp())").scalar()
        yield _clock_check("the database server", float(their))
    except Exception as e:  # noqa: BLE001
        yield _Check("clock", None, f"skipped: cannot read the database's time: {first_line(e)}")


def _parse_http_date(value: str) -> float | None:
    from email.utils import parsedate_to_datetime

    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
