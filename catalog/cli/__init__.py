"""The command line for people: browse a running catalog (``browse``), check a configuration
(``doctor``), confirm a downgrade (``migrate``). The entry point is ``catalog/__main__.py``."""
