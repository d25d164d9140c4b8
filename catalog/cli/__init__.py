"""The command line, one module per command (``register`` its arguments, ``run`` it): on the server's
machine ``serve``, ``migrate`` and ``grants`` (their settings: ``local.py``); for people, over a running
server's HTTP API, ``namespaces``/``tables``/``views`` (``browse.py``), ``tables dropped`` and its
actions (``dropped.py``), ``doctor``, ``maintenance``, ``events`` and ``warehouses``. The entry point
is ``catalog/__main__.py``."""
