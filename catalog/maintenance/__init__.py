"""Table maintenance the catalog runs itself, each job one durable task (``database/tasks.py``):
snapshot expiry and the cleanup of what only expired snapshots used (``expire``, ``reachability``,
``old_metadata``), orphan removal (``orphans``), manifest rewrite (``rewrite_manifests``), compaction
(``compaction``, ``compaction_plan``, or on Spark: ``spark``) and the purge of dropped tables, all run
by ``jobs``; what a table gets comes from its properties (``inheritance``) and each result explains
itself (``explain``). Workers in each server process claim the tasks and one scheduler per deployment
enqueues them (``worker``). Every commit goes through the commit engine; every delete is of a file
provably unreachable and inside the table's own locations.
"""
