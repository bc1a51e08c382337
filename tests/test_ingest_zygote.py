"""A parallel ingest's workers forked from one process that imported the parse, the pool's
zygote (forensics/ingest/zygote.py, issue 15): the workers are its children and import
nothing again; the store is the serial ingest's; a worker's exit (a signal's too) is known;
no process of the pool outlives the ingest; a zygote that is not single-threaded when asked
to fork leaves the pool to spawn its workers, with the same store."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import forensics.ingest.pool as pool
from forensics.ingest import ingest
from forensics.store import Store
from tests.plugins.sshd import proc_stat
from tests.test_ingest_parallel import _big_log, _children, _gone, _same_store

# a sitecustomize: the pid of each process that loads polars' package, a line each
IMPORTS = """
import os, sys

def _noted(event, args):
    if event == "import" and args[0] == "polars":
        with open({path!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")

sys.addaudithook(_noted)
"""

# a sitecustomize: a pool's zygote starts a thread before it serves (as an import that starts
# one would), and notes its pid
THREADED = """
import os, sys, threading, time

if sys.argv[:1] == ["-c"]:
    try:
        import forensics.ingest.zygote as z
    except ImportError:  # no zygote here
        z = None
    if z is not None:
        serve = z._serve

        def threaded(*args):
            threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
            with open({path!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            serve(*args)

        z._serve = threaded
"""


def _parent(pid: int) -> int:
    return proc_stat(pid)[1]


def _cmdline(pid: int) -> bytes:
    """``pid``'s command line (a process spawned a moment ago may not have it yet: Popen
    returns once its exec began, before its arguments are in place)."""
    deadline = time.monotonic() + 30
    while not (line := Path(f"/proc/{pid}/cmdline").read_bytes()) and time.monotonic() < deadline:
        time.sleep(0.01)
    return line


def _site(tmp_path: Path, monkeypatch, code: str) -> None:
    """``code`` as the sitecustomize of the processes this one starts."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(code)
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))


def _parallel(tmp_path: Path, monkeypatch, logs: list[str]) -> list[tuple]:
    """A parallel ingest (2 workers) of ``logs`` into tmp_path/st, every log given to a
    worker, and its store compared with a serial one's: (the worker's pid, its parent's,
    their command lines) of each log."""
    seen = []
    submit = pool.Pool.submit

    def noted(self, job, *a):
        submit(self, job, *a)
        pid = job.worker.proc.pid
        seen.append((pid, _parent(pid), _cmdline(pid), _cmdline(_parent(pid))))

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(pool.Pool, "submit", noted)
    s = ingest(Store.open(tmp_path / "st"), logs, jobs=2)
    assert [f.status for f in s.files] == ["new"] * len(logs)
    monkeypatch.undo()
    ingest(Store.open(tmp_path / "serial"), logs, jobs=1)
    _same_store(tmp_path / "serial", tmp_path / "st")
    return seen


def test_the_workers_are_forked_by_the_pools_zygote_and_import_nothing_again(tmp_path, monkeypatch):
    imported = tmp_path / "imported"
    _site(tmp_path, monkeypatch, IMPORTS.format(path=str(imported)))
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.5, i)) for i in range(3)]
    seen = _parallel(tmp_path, monkeypatch, logs)
    workers, parents = {w for w, *_ in seen}, {p for _, p, *_ in seen}
    assert len(workers) == 2 and len(parents) == 1, seen
    zygote = parents.pop()
    assert zygote != os.getpid(), "the workers are this process's children: spawned"
    assert b"zygote_entry" in seen[0][3]
    importers = {int(line) for line in imported.read_text().split()}
    assert zygote in importers, "the zygote did not import polars"
    assert not workers & importers, "a forked worker imported polars again"
    assert _gone({zygote, *workers}), "a process of the pool outlived the ingest"


def test_a_zygote_with_threads_leaves_the_pool_to_spawn_its_workers(tmp_path, monkeypatch):
    """fork is safe only in a process of one thread: a zygote with another says so, and the
    pool spawns fresh interpreters instead (as where fork is not available)."""
    noted = tmp_path / "zygotes"
    _site(tmp_path, monkeypatch, THREADED.format(path=str(noted)))
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.5, i)) for i in range(3)]
    seen = _parallel(tmp_path, monkeypatch, logs)
    assert noted.exists(), "no zygote was started"
    zygotes = {int(line) for line in noted.read_text().split()}
    assert len(zygotes) == 1
    workers = {w for w, *_ in seen}
    assert {p for _, p, *_ in seen} == {os.getpid()}, "a worker forked by a zygote with threads"
    assert all(b"_worker_entry" in cmdline for _, _, cmdline, _ in seen), seen
    assert _gone(zygotes | workers), "a process of the pool outlived the ingest"


def test_the_zygote_reports_each_workers_exit_and_ends_the_rest_when_closed():
    """A worker that ends (STOP) exits 0, one killed by a signal -9: the zygote, their
    parent, reaps them and says so. Closing it ends it and the worker it still has."""
    from forensics.ingest.zygote import Zygote

    z = Zygote.start()
    assert z is not None
    workers = [pool._Worker(1, z) for _ in range(3)]
    try:
        assert {_parent(w.proc.pid) for w in workers} == {z.proc.pid}
        workers[0].conn.send(pool.STOP)
        assert workers[0].proc.wait(60) == 0
        os.kill(workers[1].proc.pid, signal.SIGKILL)
        assert workers[1].proc.wait(60) == -signal.SIGKILL
        assert workers[2].proc.poll() is None
        last = workers[2].proc.pid
        z.close()
        assert _gone({last, z.proc.pid}), "the zygote or its worker outlived its close"
        assert z.proc.returncode == 0
    finally:
        for w in workers:
            w.conn.close()


def test_a_worker_killed_before_this_process_knows_its_pid_ends_its_pipe():
    """No end of a forked worker's socket stays in the main process: killed before the
    zygote's reply is read, the worker's pipe still ends (a wait on it would hang)."""
    from multiprocessing.connection import wait

    from forensics.ingest.zygote import Zygote

    z = Zygote.start()
    assert z is not None
    w = pool._Worker(1, z)
    try:
        deadline, kids = time.monotonic() + 120, set()
        while not kids and time.monotonic() < deadline:
            kids = _children(z.proc.pid)
            time.sleep(0.01)
        assert len(kids) == 1, "the zygote forked no worker"
        os.kill(kids.pop(), signal.SIGKILL)
        assert wait([w.conn], timeout=60) == [w.conn], "the worker's pipe did not end"
        assert w.proc.wait(60) == -signal.SIGKILL
    finally:
        z.close()
        w.conn.close()


# a sitecustomize: each `-c` process (a zygote, a worker) notes its pid at its exit handlers
AT_EXIT = """
import atexit, os, sys

if sys.argv[:1] == ["-c"]:
    def _noted():
        with open({path!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")

    atexit.register(_noted)
"""


def test_a_closed_zygote_ends_without_the_interpreters_teardown(tmp_path, monkeypatch):
    """Its workers reaped, the zygote has nothing to flush: it exits at once (os._exit), not
    through the teardown of the parse's modules (~0.1 s on 2 cores, at the end of every
    parallel ingest); a forked worker still runs the exit handlers (polars' own)."""
    from forensics.ingest.zygote import Zygote

    noted = tmp_path / "exits"
    _site(tmp_path, monkeypatch, AT_EXIT.format(path=str(noted)))
    z = Zygote.start()
    assert z is not None
    w = pool._Worker(1, z)
    try:
        w.conn.send(pool.STOP)
        assert w.proc.wait(60) == 0
        worker = w.proc.pid
        z.close()
        assert z.proc.returncode == 0
    finally:
        w.conn.close()
    exits = {int(line) for line in noted.read_text().split()}
    assert worker in exits, "the forked worker skipped its exit handlers"
    assert z.proc.pid not in exits, "the zygote ran the interpreter's teardown"


def test_the_workers_are_told_to_stop_before_the_last_commit(tmp_path, monkeypatch):
    """The last file adopted, no file comes: the workers are sent STOP then, so they exit
    while the batch commits (the pool's close after it only waits for them)."""
    import forensics.ingest.batch as batch

    commit, seen = batch._Batch.commit, []

    def noted(self, *a, **k):
        if self.pool is not None:
            seen.append([w.stopping for w in self.pool.workers if w.used])
        return commit(self, *a, **k)

    monkeypatch.setattr(batch._Batch, "commit", noted)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.5, i)) for i in range(3)]
    _parallel(tmp_path, monkeypatch, logs)
    assert seen and seen[-1] and all(seen[-1]), seen


# a sitecustomize: each zygote notes its pid and whether the entry point started it
STARTED = """
import os, sys

_o = getattr(sys, "orig_argv", [])
if "-c" in _o[:2] and "zygote_entry" in _o[_o.index("-c") + 1]:
    with open({path!r}, "a") as f:
        f.write(f"{{os.getpid()}} {{sys.argv[2:3]}}\\n")
"""


def test_an_ingest_of_several_hosts_starts_its_zygote_before_the_cli(
    tmp_path, monkeypatch, ssh_config
):
    """`forensics ingest` of two remote inputs or more: the entry point starts the pool's
    zygote before the CLI is imported (its imports then run while the CLI is imported and the
    hosts connect: docs/performance.md, "Eight hosts on 16 cores, fifteenth stop"), and the
    pool forks its workers from that one; the store is the serial ingest's. A command of the
    same shape that fails leaves none behind."""
    import subprocess
    import sys

    from tests.test_ingest_parallel import CODE

    started = tmp_path / "started"
    _site(tmp_path, monkeypatch, STARTED.format(path=str(started)))
    logs = [_big_log(tmp_path / f"big{i}.log", 3, i) for i in range(3)]
    inputs = [f"sshtest:{p}" for p in logs]
    home = tmp_path / "st"
    cmd = [sys.executable, "-c", CODE, "--store", str(home), "ingest", "--jobs", "2", *inputs]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    zygotes = started.read_text().splitlines()
    assert len(zygotes) == 1 and zygotes[0].endswith("['early']"), zygotes

    started.unlink()
    bad = [*cmd[:-3], "sshtest:/no/such/dir/*.log", "nosuchhost:/x.log"]
    p = subprocess.run(bad, capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert started.exists(), p.stderr
    pid = int(started.read_text().split()[0])  # started, then no pool took it
    assert _gone({pid}, timeout=10), "the entry point's zygote outlived the command"
    monkeypatch.delenv("PYTHONPATH")
    ingest(Store.open(tmp_path / "serial"), inputs, jobs=1)
    _same_store(tmp_path / "serial", home, skip=("verdicts",))


def test_the_entry_points_guess_of_an_ingest_of_several_hosts(ssh_config):
    """``early`` starts a zygote only for ``ingest`` of two remote inputs or more and not
    ``--jobs 1``; the pool takes it whatever its workers' threads (each fork sets them)."""
    from forensics.ingest import zygote

    assert [zygote._jobs_of(a) for a in (["-j", "3"], ["-j3"], ["--jobs=4"], ["--jobs", "x"])] == [
        3,
        3,
        4,
        None,
    ]
    two = ["sshtest:/a.log", "sshtest:/b.log"]
    for args, started in (
        (["ingest", *two], True),
        (["--store", "/s", "ingest", "--jobs", "3", *two], True),
        (["ingest", "--jobs", "1", *two], False),
        (["ingest", "-j1", *two], False),
        (["ingest", "sshtest:/a.log", "/local.log"], False),
        (["runs", *two], False),
    ):
        zygote.early(args)
        try:
            assert bool(zygote._EARLY) == started, args
            if started and "3" in args:
                z = zygote._EARLY[0]
                assert zygote.Zygote.start() is z and not zygote._EARLY
                zygote._EARLY.append(z)  # (closed below)
        finally:
            while zygote._EARLY:
                zygote._EARLY.pop().close()
