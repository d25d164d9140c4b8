"""Table care the catalog runs itself: snapshot expiry and the cleanup of the files only expired
snapshots used (``expire.py``, ``reachability.py``), orphan removal (``orphans.py``), run as durable
tasks (``store/tasks.py``) by workers in each server process and scheduled by one scheduler per
deployment (``worker.py``), each job in ``care.py``. Every commit goes through the commit engine;
every delete is of a file provably unreachable and inside the table's own locations.
"""
