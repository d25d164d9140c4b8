"""Table maintenance: snapshot expiry and the clean-up of the files it leaves unreachable.

``expire`` and ``reachability`` are pure planners (Java's ``RemoveSnapshots`` and
``ReachableFileCleanup``): they decide, from table metadata and the manifests a FileIO reads,
what to remove; committing and deleting belong to their callers.
"""
