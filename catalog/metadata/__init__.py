"""The metadata engine: table and view metadata as plain JSON data, changed the way Iceberg's Java
reference changes it. Pure (no I/O; the caller passes the clock) and copy-on-write.

- ``tables.new_table`` / ``tables.apply``: createTable, and a commit's requirements + updates
  (format v1, v2 and v3; staged creates when there is no base).
- ``views.new_view`` / ``views.apply``: the same for views.
- ``schemas`` and ``partitioning``: schema, type, partition spec and sort order JSON, validated.
- ``parsing``: parsing a request's requirements and updates; ``reading``: field access like Java's ``JsonUtil``.
"""

from catalog.metadata import tables, views

__all__ = ["tables", "views"]
