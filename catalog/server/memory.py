"""Process tuning for the server's workers."""

from __future__ import annotations

import ctypes


def large_buffers_from_the_heap() -> None:
    """Serve allocations up to 64 MiB from glibc's heap instead of fresh ``mmap`` pages.

    A commit or load of a big table builds a few buffers of the whole file (its JSON, the response):
    with glibc's default, each comes from new pages that fault in one by one and go back to the
    system on free. Measured on a 4.4 MB metadata file (10,000 snapshots): joining the response
    5.7 ms -> 1.2 ms. Freed memory stays in the process for reuse (up to 128 MiB is kept), a
    bounded cost next to the metadata cache. A no-op where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 2**20)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 * 2**20)
    except (OSError, AttributeError):  # not glibc (musl, macOS): its defaults stand
        pass


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
