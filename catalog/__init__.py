"""An Apache Iceberg REST catalog server.

The catalog is a pointer: per table, the location of the current metadata file, moved by one
conditional UPDATE (compare-and-swap). Everything else a table is lives in immutable files.
"""

__version__ = "0.1.0"
