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


def test_a_workers_threads_are_its_share_of_the_cores_less_its_own_at_most_polars_threads(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(pool, "default_jobs", lambda: 16)
    shares = {}
    for jobs in (1, 2, 4, 8, 16):
        shares[jobs] = pool.Pool(jobs, tmp_path).share()  # (none expected: ``jobs`` at once)
    assert shares == {1: POLARS_THREADS, 2: POLARS_THREADS, 4: 3, 8: 1, 16: 1}


def test_a_workers_share_is_of_the_files_it_expects_at_once(tmp_path, monkeypatch):
    """2 hosts' logs on 16 cores: each of the 2 workers gets 4 threads, not 16 jobs' 1; the
    share shrinks as more workers start than the pool expected (a glob of many logs)."""
    monkeypatch.setattr(pool, "default_jobs", lambda: 16)
    p = pool.Pool(16, tmp_path, expected=2)
    assert p.share() == POLARS_THREADS
    p.workers = [object()] * 3  # 3 started: the 4th is one of 4 at once
    assert p.share() == 16 // 4 - 1
    p.workers = [object()] * 15
    assert p.share() == 1
    assert pool.Pool(16, tmp_path).share() == 1  # none expected


# a sitecustomize: each process that has imported polars notes, at its exit, its pid and the
# size of polars' thread pool (a forked worker runs the exit handlers it inherited)
POOL_SIZE = """
import atexit, os, sys

def _noted():
    if "polars" in sys.modules:
        with open({path!r}, "a") as f:
            f.write(f"{{os.getpid()}} {{sys.modules['polars'].thread_pool_size()}}\\n")

atexit.register(_noted)
"""


def test_the_workers_of_two_logs_on_16_cores_run_their_share_of_polars_threads(
    tmp_path, monkeypatch
):
    import forensics.ingest.heap as heap
    from forensics.ingest import ingest
    from forensics.store import Store
    from tests.test_ingest_parallel import _big_log
    from tests.test_ingest_zygote import _site

    noted = tmp_path / "sizes"
    _site(tmp_path, monkeypatch, POOL_SIZE.format(path=str(noted)))
    monkeypatch.setattr(heap, "default_jobs", lambda: 16)
    monkeypatch.setattr(pool, "default_jobs", lambda: 16)
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    workers = []
    submit = pool.Pool.submit

    def seen(self, job, *a):
        submit(self, job, *a)
        workers.append(job.worker.proc.pid)

    monkeypatch.setattr(pool.Pool, "submit", seen)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.5, i)) for i in range(2)]
    s = ingest(Store.open(tmp_path / "st"), logs)  # --jobs: the cores (16 here)
    assert [f.status for f in s.files] == ["new", "new"]
    sizes = dict(line.split() for line in noted.read_text().splitlines())
    assert len(set(workers)) == 2
    assert {sizes.get(str(pid)) for pid in workers} == {str(POLARS_THREADS)}, (workers, sizes)
