"""``iceberg-catalog migrate --downgrade``: say what a downgrade will do and ask before it runs."""

from __future__ import annotations

import sys


def confirm_downgrade(where: str, current: str, revision: str, yes: bool) -> int | None:
    """None to go ahead; otherwise the exit status of a refusal (printed here)."""
    what = (
        "drops EVERY catalog table (namespaces, tables, views, grants; the warehouse files stay)"
        if revision == "base"
        else "may drop columns and tables added by later revisions"
    )
    plan = f"downgrade {where} from {current} to {revision}: this {what}"
    if yes:
        return None
    if not sys.stdin.isatty():
        print(
            f"iceberg-catalog migrate: refusing to {plan}, without confirmation (stdin is not a terminal): pass --yes",
            file=sys.stderr,
        )
        return 2
    print(f"About to {plan}.", file=sys.stderr)
    try:
        if revision == "base":
            answer = input("Type 'base' to confirm: ").strip()
            ok = answer == "base"
        else:
            answer = input("Continue? [y/N] ").strip().lower()
            ok = answer in ("y", "yes")
    except EOFError:
        ok = False
    if not ok:
        print("iceberg-catalog migrate: not confirmed; nothing changed", file=sys.stderr)
        return 2
    return None
