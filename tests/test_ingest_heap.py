"""An ingest's threads share one glibc malloc arena (forensics/ingest/heap.py): with an arena
each, the chunks they free stayed resident as free memory of their arenas (8 copies of the
100 MB busy mix: 60-130 MB of the peak RSS, docs/performance.md "Peak RSS, ninth stop")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).parent.parent / "fixtures"

pytestmark = pytest.mark.skipif(
    not hasattr(os, "confstr") or not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc only"
)

# after ``setup``: threads that allocate at once, then glibc's own count of its arenas
# (malloc_stats prints an "Arena N:" block per arena on stderr)
PROBE = """
import ctypes, sys, threading
{setup}
barrier = threading.Barrier(4)
def work():
    barrier.wait()
    keep = [bytes(200_000) for _ in range(50)]
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
sys.stderr.flush()
ctypes.CDLL(None).malloc_stats()
"""


def _probe(code: str, tmp_path: Path, unset: tuple[str, ...]) -> subprocess.CompletedProcess:
    """``code`` run by a fresh interpreter, without the malloc settings ``unset``."""
    env = dict(os.environ, FORENSICS_HOME=str(tmp_path / "home"))
    for name in unset:
        env.pop(name, None)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )


def _arenas(setup: str, tmp_path: Path) -> int:
    got = _probe(PROBE.format(setup=setup), tmp_path, ("MALLOC_ARENA_MAX",))
    return sum(1 for line in got.stderr.splitlines() if line.startswith("Arena "))


def test_threads_after_one_arena_share_the_main_arena(tmp_path):
    assert _arenas("", tmp_path) > 1  # the probe's threads take arenas of their own ...
    setup = "from forensics.ingest.heap import one_arena; one_arena()"
    assert _arenas(setup, tmp_path) == 1  # ... not after one_arena


def test_an_ingest_sets_one_arena(tmp_path):
    log = FIX / "sglang_fail_capture.log"
    setup = (
        "from forensics.ingest import ingest; from forensics.store import Store; "
        f"ingest(Store.open({str(tmp_path / 'store')!r}), [{str(log)!r}], jobs=1)"
    )
    assert _arenas(setup, tmp_path) == 1


# after ``setup``: a chunk of 8 MB allocated and freed, then what glibc keeps at its arena's top
# (mallinfo2's keepcost: the free top it could give back)
KEPT = """
import ctypes
{setup}
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
info = ctypes.CDLL(None).mallinfo2
info.restype = Info
chunk = bytearray(8 << 20)
del chunk
print(info().keepcost)
"""


def _kept(setup: str, tmp_path: Path) -> int:
    unset = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_")
    return int(_probe(KEPT.format(setup=setup), tmp_path, unset).stdout)


def test_one_arena_keeps_a_freed_chunk_for_the_next(tmp_path):
    """The chunks an ingest frees (the bytes read, their lines) stay in the arena for the next
    one: given back, each chunk's pages were faulted in and zeroed again (the parse window,
    eleventh stop)."""
    assert _kept("", tmp_path) < 8 << 20  # mapped on its own and unmapped when freed ...
    setup = "from forensics.ingest.heap import one_arena; one_arena()"
    assert _kept(setup, tmp_path) >= 8 << 20  # ... not after one_arena
