"""The warehouses' settings: the default warehouse's names, where created warehouses may live, the file
that declares them, and the key sealing their storage secrets (catalog/warehouse_profiles.py)."""

from __future__ import annotations

from pydantic import Field, field_validator

from catalog.settings.group import Group


class WarehouseSettings(Group):
    """``CATALOG_PREFIX``, ``CATALOG_WAREHOUSE_ALIASES``, ``CATALOG_WAREHOUSE_ROOTS``, ``CATALOG_WAREHOUSES_FILE``,
    ``CATALOG_SECRETS_KEY``."""

    prefix: str = Field(
        default="",
        description="Advertised URL prefix (overrides.prefix) of the default warehouse, also its name among the "
        "warehouses (default when empty). Requests are accepted with or without it.",
    )
    warehouse_aliases: str = Field(
        default="warehouse",
        description="Comma-separated names that also select the default warehouse (in /v1/config?warehouse= and as "
        "a route prefix), for clients from before warehouses that send a fixed name (DuckDB's ATTACH 'warehouse').",
    )
    warehouse_roots: str = Field(
        default="",
        description="Comma-separated roots under which created warehouses (management API, CLI, "
        "CATALOG_WAREHOUSES_FILE) may live, e.g. /data/lakes,s3://lakes. A local directory is accepted only "
        "under a local root listed here; object-store locations (s3://, abfss://, gs://) anywhere, unless "
        "object-store roots are listed, then only under one of them. Never the database's directory, the "
        "working directory or a system directory (catalog/warehouse_profiles.py, confined).",
    )
    warehouses_file: str | None = Field(
        default=None,
        description="A YAML file of warehouses besides the default one ({warehouses: [{name, location, s3: {...}}]}), "
        "created or changed at start to match it (README, Warehouses).",
    )
    secrets_key: str | None = Field(
        default=None,
        description="Key(s) encrypting the storage secrets of created warehouses in the database (Fernet keys, "
        "comma-separated: the first encrypts, each decrypts; every server re-encrypts what it finds with the first "
        "at start). Unset: those secrets are stored as given.",
    )

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key(cls, value: str | None) -> str | None:
        if value:
            from catalog.sealing import keys

            keys(value)  # raises what is wrong with it
        return value

    @field_validator("warehouse_roots")
    @classmethod
    def _warehouse_roots(cls, value: str) -> str:
        from catalog.errors import IcebergError
        from catalog.locations import normalise

        for root in filter(None, (p.strip() for p in value.split(","))):
            try:
                normalise(root, "root")
            except IcebergError as e:
                raise ValueError(f"each root is an absolute directory or an object-store prefix: {e.message}") from None
        return value

    @property
    def default_warehouse_names(self) -> frozenset[str]:
        """The names of the default warehouse: its own (``prefix``, else ``default``) and the aliases."""
        aliases = {a.strip() for a in self.warehouse_aliases.split(",") if a.strip()}
        return frozenset({self.prefix or "default", *aliases})

    @property
    def warehouse_root_list(self) -> list[str]:
        return [p.strip() for p in self.warehouse_roots.split(",") if p.strip()]
