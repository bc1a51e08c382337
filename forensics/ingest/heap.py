"""The C heap of an ingest process: one glibc malloc arena that keeps the chunks it frees
(issue 15, peak RSS and the parse window's page faults), and polars' threads, at most
``POLARS_THREADS`` (``cap_polars_threads``).

glibc gives a thread that allocates while another holds an arena's lock an arena of its own
(up to 8 per core), and memory freed in the middle of an arena stays resident. An ingest's
threads (the reading and splitting thread, the parser's, the one that stages and writes
parts, the hash, an SSH connection's) each free chunks of megabytes (the bytes read, the
compiled reader's columns): with an arena each, 60-130 MB of the peak was free memory that
glibc kept (``mallinfo2``'s ``fordblks``). In one arena the next chunk reuses it. Polars and
Arrow allocate with their own jemalloc and are not concerned.

In that arena, a freed chunk of megabytes at its top went back to the system (glibc trims
the top above twice its dynamic mmap threshold, 8 MB after the first 4 MB chunk freed) and
the next chunk's pages were faulted in and zeroed again: ~12,000 page faults per 100 MB
parsed in the reading thread alone (docs/performance.md, "The parse window, eleventh stop").
``KEEP_BYTES`` of free top are kept, and chunks up to ``MAP_BYTES`` come from the arena
(fixing either threshold turns glibc's dynamic one off; ``MAP_BYTES`` is the most it grows to).
"""

from __future__ import annotations

# polars' threads in an ingest process (the user's POLARS_MAX_THREADS wins). On 16 cores, one
# ingest of the 100 MB busy mix with 1 / 2 / 4 / 8 / 16 threads: wall 1.11 / 1.07 / 1.01 /
# 1.11 / 1.10 s (medians of 5), CPU 1.4 / 1.6 / 1.6 / 1.9 / 2.3 s, peak RSS 157 / 168 / 177 /
# 204 / 240 MB; 8 hosts' logs with --jobs 1: 242 MB at 4, 285 at 16 (docs/performance.md,
# "Polars' threads, twelfth stop"). More threads only add their memory and hand-overs.
POLARS_THREADS = 4
KEEP_BYTES = 16 << 20  # free memory at the arena's top kept (32 MB: the same faults, +5 MB)
MAP_BYTES = 32 << 20  # larger chunks are mapped on their own (and unmapped when freed)
# mallopt's parameters (malloc.h) -> the value an ingest sets
SETTINGS = (
    (-8, 1),  # M_ARENA_MAX: one arena
    (-1, KEEP_BYTES),  # M_TRIM_THRESHOLD
    (-3, MAP_BYTES),  # M_MMAP_THRESHOLD
)


def one_arena() -> None:
    """Threads that start after this share glibc's main arena (the ones already holding an
    arena keep it), which keeps ``KEEP_BYTES`` of what is freed at its top. Called by an
    ingest before it starts a thread, and by a pool worker. A no-op where the C library has
    no ``mallopt`` (not glibc)."""
    import os

    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return
    except (ValueError, OSError):  # not glibc (the name is unknown here)
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    for param, value in SETTINGS:
        mallopt(param, value)


def cap_polars_threads() -> None:
    """Polars, imported after this, runs ``POLARS_THREADS`` threads at most (fewer on fewer
    cores), unless POLARS_MAX_THREADS is set. Called by an ingest before the parser's import;
    no effect where polars is imported already (a library caller's process)."""
    import os

    os.environ.setdefault("POLARS_MAX_THREADS", str(min(POLARS_THREADS, default_jobs())))


def default_jobs() -> int:
    """The cores this process may run on (the default ``--jobs``)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
