"""Server-side scan planning (the REST ``planTableScan``/``fetchScanTasks`` operations): the request
(``request.py``, ``filters.py``), the plan over the table's manifests (``planner.py``, with the
manifest cache of ``cache.py`` and the delete index of ``deletes.py``), and the answer's JSON
(``content.py``). Pure of HTTP and of the store: it reads metadata and manifests it is given."""
