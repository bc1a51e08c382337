"""Polars' threads in an ingest (forensics/ingest/heap.py ``cap_polars_threads``): at most
POLARS_THREADS, fewer on fewer cores, the user's POLARS_MAX_THREADS kept. On 16 cores polars'
16 threads made one ingest no faster and 60 MB bigger (docs/performance.md, "Polars' threads,
twelfth stop"); on a 128-core GPU host it would start 128."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import forensics.ingest.pool as pool
from forensics.ingest.heap import POLARS_THREADS

FIX = Path(__file__).parent.parent / "fixtures"

# an ingest in a process that believes it has ``cores`` cores, then polars' own thread count
PROBE = """
import forensics.ingest.heap as heap
heap.default_jobs = lambda: {cores}
from forensics.ingest import ingest
from forensics.store import Store
ingest(Store.open({store!r}), [{log!r}], jobs=1)
import polars
print(polars.thread_pool_size())
"""


def _threads(tmp_path: Path, cores: int, env_threads: str | None = None) -> int:
    env = dict(os.environ, FORENSICS_HOME=str(tmp_path / "home"))
    env.pop("POLARS_MAX_THREADS", None)
    if env_threads is not None:
        env["POLARS_MAX_THREADS"] = env_threads
    code = PROBE.format(
        cores=cores, store=str(tmp_path / f"st{cores}"), log=str(FIX / "sglang_fail_capture.log")
    )
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    return int(got.stdout.split()[-1])


def test_an_ingest_runs_at_most_polars_threads_of_polars(tmp_path):
    assert _threads(tmp_path, 16) == POLARS_THREADS  # polars' default would be every core
    assert _threads(tmp_path, 2) == min(2, POLARS_THREADS)


def test_the_users_polars_max_threads_is_kept(tmp_path):
    assert _threads(tmp_path, 16, env_threads="7") == 7


def test_a_workers_threads_are_its_share_of_the_cores_and_at_most_polars_threads(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(pool, "default_jobs", lambda: 16)
    shares = {}
    for jobs in (1, 2, 4, 8, 16):
        p = pool.Pool(jobs, tmp_path, pool.worker_threads(jobs))
        shares[jobs] = p._threads
    assert shares == {1: POLARS_THREADS, 2: POLARS_THREADS, 4: 4, 8: 2, 16: 1}
