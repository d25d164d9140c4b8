"""What the commands share."""

from __future__ import annotations


def first_line(e: BaseException) -> str:
    """An error as one line for the user (at most 300 characters)."""
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:300]
