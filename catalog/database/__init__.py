"""The catalog's database (SQLite or PostgreSQL through SQLAlchemy), as narrow parts over one
``Database`` (``db``): table and view pointers and their compare-and-swap (``pointers``), entries
and namespaces (``entries``), the locations' rows and the overlap query (``location_rows``),
dropped entries (``dropped``), maintenance tasks (``tasks``), leases (``leases``), the change-event
outbox (``outbox``), grants (``grant_rows``), created warehouses (``warehouse_rows``), location
ownership (``ownership``) and the schema's migrations (``migrate``); ``store`` is the set of the
parts that ``build_catalog`` hands out.
"""
