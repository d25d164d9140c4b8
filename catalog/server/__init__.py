"""The server process and its wiring: the ASGI app and what it is built from (``app``), start-up
checks and the start-up line (``startup``), the open warehouses (``warehouses``), the background
work of each warehouse (``background``: maintenance workers, scheduler, event delivery), connection
limits (``connections``), one socket write per response (``coalescing``), the workers' memory tuning
(``memory``) and the command-line flag of each setting (``flags``).
"""
