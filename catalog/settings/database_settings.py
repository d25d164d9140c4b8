"""The database's settings: which database, its schema, the connection pool, migration at start. Given to
``database/db.py``'s ``create_engine``."""

from __future__ import annotations

from pydantic import Field, field_validator

from catalog.settings.group import Group

# What CATALOG_DATABASE_URL accepts, said in every refusal of it.
DATABASE_URL_FORMS = (
    "sqlite:///relative/path.db, sqlite:////absolute/path.db, or postgresql://user:password@host:5432/dbname "
    "(postgres:// and postgresql+psycopg:// are the same)"
)


class DatabaseSettings(Group):
    """``CATALOG_DATABASE_URL``, ``CATALOG_DATABASE_SCHEMA``, ``CATALOG_DB_*``, ``CATALOG_AUTO_MIGRATE``."""

    database_url: str = Field(
        default="sqlite:///catalog.db",
        description="SQLAlchemy URL: sqlite:///path.db (embedded) or postgresql+psycopg://user:pw@host/db.",
    )
    database_schema: str | None = Field(
        default=None,
        description="PostgreSQL schema (search_path) holding the catalog's tables; the server sets it per warehouse.",
        pattern=r"^[a-z_][a-z0-9_]{0,62}$",
    )
    # Pool >= the 40 worker threads that run blocking calls: a smaller pool made overflow connections
    # open and close per request (measured: 1.14 -> 0.79 ms CPU per loadTable at 32 clients).
    db_pool_size: int = Field(default=40, ge=1)
    db_max_overflow: int = Field(default=10, ge=0)
    db_pool_timeout: float = Field(default=10.0, gt=0)
    auto_migrate: bool = Field(
        default=True,
        description="Migrate the schema to head on start (always true for SQLite; set false for PostgreSQL "
        "deployments that run `iceberg-catalog migrate` as a separate step).",
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str) -> str:
        return normalise_database_url(url)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def normalise_database_url(url: str) -> str:
    """The SQLAlchemy URL of a database this server runs on: SQLite, or PostgreSQL through psycopg 3
    (``postgres://`` and ``postgresql://``, as other tools write them, are rewritten to it)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgres", "postgresql", "postgresql+psycopg") and rest:
        return f"postgresql+psycopg://{rest}"
    if sep and scheme == "sqlite":
        return url
    # The value may hold a password: it is not repeated (a "url" that is not one is shown, cut short).
    shown = f"{scheme}://..." if sep else repr(url[:40])
    raise ValueError(f"unsupported database URL {shown}; accepted: {DATABASE_URL_FORMS}")
