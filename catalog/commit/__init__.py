"""The commit loop: a change is validated, applied to the current metadata, written as a new
metadata file and published by the pointer's compare-and-swap (``engine``). Around it: the inline
committer for SQLite and local disk (``inline``), group commit (``grouping``), append rebase
(``rebasable``: which commits qualify; ``rebase``: the files read and written; ``rebuilt``: its pure
computations), a retry over the catalog's own maintenance commits (``rollback``), what to do when the
swap is lost (``conflicts``) and deleting what a commit left behind (``cleanup``).
"""
