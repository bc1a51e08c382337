"""The C heap of an ingest process: one glibc malloc arena (issue 15, peak RSS).

glibc gives a thread that allocates while another holds an arena's lock an arena of its own
(up to 8 per core), and memory freed in the middle of an arena stays resident. An ingest's
threads (the reading and splitting thread, the parser's, the one that stages and writes
parts, the hash, an SSH connection's) each free chunks of megabytes (the bytes read, the
compiled reader's columns): with an arena each, 60-130 MB of the peak was free memory that
glibc kept (``mallinfo2``'s ``fordblks``). In one arena the next chunk reuses it. Polars and
Arrow allocate with their own jemalloc and are not concerned.
"""

from __future__ import annotations

M_ARENA_MAX = -8  # mallopt's parameter (malloc.h)


def one_arena() -> None:
    """Threads that start after this share glibc's main arena (the ones already holding an
    arena keep it). Called by an ingest before it starts a thread, and by a pool worker. A
    no-op where the C library has no ``mallopt`` (not glibc)."""
    import os

    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (ValueError, OSError):  # not glibc (the name is unknown here)
        return
    import ctypes

    try:
        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    except (OSError, AttributeError):
        return
