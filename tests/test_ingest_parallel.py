"""Files parsed in worker processes (``ingest --jobs``, forensics/ingest/pool.py): the store
ends with the tables and source records of a serial ingest; a worker that dies fails its file
alone; kill -9 and Ctrl-C of a parallel ingest leave no worker behind, never a file in part or
twice, and the same command completes the store (issue 15).

POOL_MIN_BYTES is lowered in these tests so that small real files go to the workers too."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forensics.ingest.pool as pool
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES, SHARED, assert_prints

# a subprocess whose pool takes every file (and commits every 2 files)
CODE = (
    "import sys; import forensics.entry as e; import forensics.ingest.pool as p; "
    "import forensics.ingest.batch as b; p.POOL_MIN_BYTES = 1 << 20; b.BATCH_FILES = 2; "
    "b.BATCH_SECONDS = 1e9; e.main(sys.argv[1:])"
)

# prefixed to CODE: the pid of each worker given a file, a line each, appended to a file
SUBMITTED = (
    "import forensics.ingest.pool as q\n"
    "_submit = q.Pool.submit\n"
    "def submit(self, job, *a):\n"
    "    _submit(self, job, *a)\n"
    "    with open({!r}, 'a') as f: f.write(f'{{job.worker.proc.pid}}\\n')\n"
    "q.Pool.submit = submit\n"
)


def _tables(root: Path) -> dict:
    """Every table of the store, its columns sorted and its rows sorted by all of them."""
    st = Store.open(root)
    man = json.loads((root / "manifest.json").read_text())
    out = {}
    for t in sorted(man["tables"]):
        df = st.table(t)
        cols = sorted(df.columns)
        out[t] = df.select(cols).sort(cols, nulls_last=True)
    return out


def _sources(root: Path) -> dict:
    man = json.loads((root / "manifest.json").read_text())
    return {
        sid: {k: v for k, v in rec.items() if k != "ingested_at"}
        for sid, rec in man["sources"].items()
    }


def _same_store(a: Path, b: Path, skip: tuple[str, ...] = ()) -> None:
    ta, tb = _tables(a), _tables(b)
    assert sorted(ta) == sorted(tb)
    for t in set(ta) - set(skip):
        assert ta[t].columns == tb[t].columns, t
        assert ta[t].equals(tb[t]), f"table {t} differs"
    assert _sources(a) == _sources(b)


def _big_log(path: Path, mb: float, seed: int) -> Path:
    """A startup (a real fixture's) and then decode lines, ``mb`` MB."""
    head = (FIXTURES / "sglang_eagle3_cg_16dt.log").read_text()
    lines, i = [head], 0
    size = len(head)
    while size < mb * (1 << 20):
        s = f"{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}"
        line = (
            f"[2026-10-31 {s} TP0] Decode batch, #running-req: {(i + seed) % 40 + 1}, "
            f"#token: {i % 9000}, token usage: 0.{i % 90:02d}, accept len: 3.{i % 9}0, "
            f"accept rate: 0.17, cuda graph: True, gen throughput (token/s): {70 + i % 13}.25, "
            "#queue-req: 0\n"
        )
        lines.append(line)
        size += len(line)
        i += 1
    path.write_text("".join(lines))
    return path


def _children(pid: int) -> set[int]:
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.add(int(d.name))
    return kids


def _descendants(pid: int) -> set[int]:
    """The children of ``pid`` and the workers a pool's zygote among them forked (forensics/
    ingest/zygote.py): every process of a pool, spawned or forked."""
    found = _children(pid)
    for kid in list(found):
        try:
            if b"zygote_entry" in Path(f"/proc/{kid}/cmdline").read_bytes():
                found |= _children(kid)
        except OSError:
            continue
    return found


def _gone(pids: set[int], timeout: float = 60) -> bool:
    """Every process of ``pids`` exited (a zombie counts as exited) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for pid in pids:
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state != "Z":
                alive.append(pid)
        if not alive:
            return True
        time.sleep(0.05)
    return False


def _wait_for_workers(p: subprocess.Popen, n: int = 1, timeout: float = 120) -> set[int]:
    deadline = time.monotonic() + timeout
    while p.poll() is None and time.monotonic() < deadline:
        kids = _descendants(p.pid)
        if len(kids) > n:  # its zygote and n workers (or n + 1 spawned ones)
            return kids
        time.sleep(0.005)
    raise AssertionError(f"no worker process appeared (exit {p.poll()})")


def _running_past_a_commit(cmd: list[str], home: Path) -> tuple[subprocess.Popen, set[int]]:
    """``cmd`` (a parallel ingest into ``home``) started in a session of its own and running
    once its first batch is committed: the process and every process of its pool seen."""
    p = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    man = home / "manifest.json"
    workers = _wait_for_workers(p)
    deadline = time.monotonic() + 300
    while p.poll() is None and time.monotonic() < deadline:  # the first batch is committed
        if man.exists() and json.loads(man.read_text()).get("sources"):
            break
        time.sleep(0.01)
    workers |= _descendants(p.pid)
    assert p.poll() is None, "the ingest ended before it could be interrupted"
    return p, workers


def test_parallel_store_equals_serial_on_fixtures_real_logs_and_a_grown_log(tmp_path, monkeypatch):
    """Every fixture and real log through the workers, then a log that grew (resumed from its
    saved parser state in a worker): every table, sorted, and every source record are those
    of the serial ingest."""
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    # a log that stops mid-stage is 'hung' once untouched for STALE_S: a checkout or a copy of
    # the real logs made minutes before (CI's shared/) could cross that line between the two
    # ingests. So every log is a copy untouched for a year (the workers classify their logs
    # too, in processes that a monkeypatch of STALE_S here does not reach)
    old = time.time() - 365 * 86400
    logs = {"fixtures": FIXTURES, "real": SHARED / "real-logs-dev"}
    for name, src in logs.items():
        (tmp_path / name).mkdir()
        for f in sorted(p for p in src.iterdir() if p.is_file()):
            os.utime(shutil.copy2(f, tmp_path / name / f.name), (old, old))
    grown = tmp_path / "grown.log"
    body = (FIXTURES / "sglang_two_launches.log").read_bytes()
    cut = body.index(b"\n", len(body) // 2) + 1
    grown.write_bytes(body[:cut] + b"[2026-05-01 10:00:00 TP0] Decode batch, #running-re")
    os.utime(grown, (old, old))
    inputs = [str(tmp_path / "fixtures"), str(tmp_path / "real"), str(grown)]
    stores = {1: tmp_path / "serial", 2: tmp_path / "parallel"}
    for jobs, root in stores.items():
        s = ingest(Store.open(root), inputs, jobs=jobs)
        assert not [f for f in s.files if f.status == "failed"], [f.reason for f in s.files]
    _same_store(stores[1], stores[2])
    assert not list((stores[2] / "staging").glob("*")), "the staging folder is removed"
    with grown.open("ab") as f:
        f.write(body[cut:])
    os.utime(grown, (old + 60, old + 60))
    for jobs, root in stores.items():
        s = ingest(Store.open(root), inputs, jobs=jobs)
        assert {f.path: f.status for f in s.files}[str(grown)] == "grown"
    _same_store(stores[1], stores[2])


def test_a_parallel_ingest_gives_every_big_log_to_a_worker(tmp_path, monkeypatch):
    """With a pool, every log of POOL_MIN_BYTES or more goes to a worker (``jobs`` of them), a
    log waiting for a free one when all are busy; only small logs are parsed here. The main
    process once parsed a big log itself when every worker was busy: with polars' whole
    thread pool, beside its feeds and adoptions, it was the ingest's peak RSS (399-420 MB,
    ``--jobs 8`` of 8 x 100 MB logs on 16 cores; docs/performance.md, issue 15)."""
    import forensics.ingest.batch as batch

    here: list[str] = []
    given: list[str] = []
    workers: list[int] = []
    parse, submit = batch._parse_file, pool.Pool.submit

    def parsed_here(tx, opened, *a):
        here.append(opened.out.path)
        return parse(tx, opened, *a)

    def given_to_a_worker(self, job, *a):
        given.append(job.out.path)
        submit(self, job, *a)
        workers.append(len(self.workers))

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 150_000)
    monkeypatch.setattr(batch, "_parse_file", parsed_here)
    monkeypatch.setattr(pool.Pool, "submit", given_to_a_worker)
    big = [str(_big_log(tmp_path / f"big{i}.log", 0.2, i)) for i in range(5)]
    small = str(_big_log(tmp_path / "small.log", 0.1, 9))
    logs = [*big[:2], small, *big[2:]]
    home, serial = tmp_path / "st", tmp_path / "serial"
    s = ingest(Store.open(home), logs, jobs=2)
    assert [f.status for f in s.files] == ["new"] * len(logs)
    assert here == [small], "a big log parsed in the main process"
    assert given == big
    assert max(workers) == 2
    monkeypatch.undo()
    ingest(Store.open(serial), logs, jobs=1)
    _same_store(serial, home)


def test_a_worker_that_dies_fails_its_file_alone(tmp_path):
    """A worker killed (as the OOM killer would) while it parses: that file is `failed` with
    one warning line and exit 4; the other files are ingested; the same command ingests it."""
    logs = [_big_log(tmp_path / f"big{i}.log", 4, i) for i in range(3)]
    home, given = tmp_path / "st", tmp_path / "given"
    # the worker given the first file is the one killed: workers start ahead of their files
    # (forensics/ingest/ahead.py), and one killed before it has a file is only replaced
    code = SUBMITTED.format(str(given)) + CODE
    cmd = [sys.executable, "-c", code, "--store", str(home), "ingest", "--jobs", "2", "--json"]
    cmd += [str(p) for p in logs]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (given.exists() and given.read_text().endswith("\n")):
        assert p.poll() is None and time.monotonic() < deadline, "no file given to a worker"
        time.sleep(0.005)
    victim = int(given.read_text().split()[0])
    os.kill(victim, signal.SIGKILL)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 4, err
    files = json.loads(out)["file_details"]
    failed = [f for f in files if f["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "worker", files
    assert sorted(f["status"] for f in files) == ["failed", "new", "new"]
    warning = [w for w in json.loads(out)["warnings"] if failed[0]["path"] in w]
    assert len(warning) == 1 and "worker process died (exit -9)" in warning[0], warning
    st = Store.open(home)
    assert len(st.sources()) == 2 and st.table("runs").height == 2
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    by = {f["path"]: f["status"] for f in json.loads(again.stdout)["file_details"]}
    assert by[failed[0]["path"]] == "new" and sorted(by.values()) == [
        "new",
        "unchanged",
        "unchanged",
    ]


@pytest.mark.parametrize("how", ["kill -9", "ctrl-c", "sigterm"])
def test_interrupted_parallel_ingest_leaves_no_worker_and_the_same_command_completes(tmp_path, how):
    """kill -9 of the main process: its workers exit (end of their pipe), the store holds
    whole committed batches only; Ctrl-C (SIGINT to the process group, as a terminal sends
    it): exit 130, one line saying what was committed, no traceback, no worker left. Either
    way the same command again gives the store of a serial ingest."""
    logs = [_big_log(tmp_path / f"big{i}.log", 3, i) for i in range(6)]
    home = tmp_path / "st"
    cmd = [sys.executable, "-c", CODE, "--store", str(home), "ingest", "--jobs", "2"]
    cmd += [str(p) for p in logs]
    p, workers = _running_past_a_commit(cmd, home)
    if how == "kill -9":
        p.send_signal(signal.SIGKILL)
    else:  # to the process group, as a terminal's Ctrl-C or `kill -- -PGID`
        os.killpg(p.pid, signal.SIGINT if how == "ctrl-c" else signal.SIGTERM)
    out, err = p.communicate(timeout=120)
    assert _gone(workers), "a worker process outlived the ingest"
    if how != "kill -9":
        assert p.returncode == 130, err
        assert "Traceback" not in err
        said = [line for line in err.splitlines() if line.startswith("Interrupted:")]
        assert len(said) == 1 and "committed before Ctrl-C" in said[0], err
    else:
        assert p.returncode == -signal.SIGKILL
    st = Store.open(home)
    n = len(st.sources())
    # kill -9: whole batches only; an interrupt also commits the files adopted since the last
    assert n >= 2 and (n % 2 == 0 or how != "kill -9")
    runs = st.table("runs")
    assert runs.height == n and runs.select("source_id", "run_index").is_duplicated().sum() == 0
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    serial = tmp_path / "serial"
    ingest(Store.open(serial), [str(p) for p in logs], jobs=1)
    # the verdicts of files committed before an interrupt are not stored by that ingest (it
    # stops before classifying, serial or not); reads classify such runs in memory
    _same_store(serial, home, skip=("verdicts",))
    assert not [d for d in (home / "staging").glob("*")], "staging folders left behind"
    shutil.rmtree(serial)


@pytest.mark.parametrize("where", ["whenever", "in_the_next_files_run"])
def test_ctrl_c_right_after_an_adoption_commits_that_file(tmp_path, monkeypatch, where):
    """Ctrl-C between a file's adoption and its batch's commit: the adopted parts (still in
    the staging folder) are committed, the files in workers are not, no worker is left and
    the staging folder is gone. ``in_the_next_files_run``: the worker is done before the
    next file is read, so the adoption (and the Ctrl-C) lands in that file's run, after it
    was parsed here; it was once committed but missing from the summary (half the runs)."""
    import forensics.ingest.batch as batch

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(batch, "BATCH_FILES", 1000)
    monkeypatch.setattr(batch, "BATCH_SECONDS", 1e9)
    adopt = batch._Batch._adopt
    if where == "in_the_next_files_run":  # the next file is parsed here (the worker is
        adopt_done = batch._Batch.adopt  # still starting), then its run waits for the worker

        def adopt_after_the_worker(self, summary, block):
            while self.pending and not self.pending[0].done:
                self.pool.wait(block=True)
            return adopt_done(self, summary, block)

        monkeypatch.setattr(batch._Batch, "adopt", adopt_after_the_worker)

    def adopt_then_interrupt(self, job, summary):
        adopt(self, job, summary)
        raise KeyboardInterrupt

    monkeypatch.setattr(batch._Batch, "_adopt", adopt_then_interrupt)
    logs = [_big_log(tmp_path / f"big{i}.log", 1, i) for i in range(4)]
    root = tmp_path / "st"
    # children of this test process that are not the ingest's (a session's sshd, a simulator)
    before = _descendants(os.getpid())
    s = ingest(Store.open(root), [str(p) for p in logs], jobs=2)
    assert s.interrupted
    # the first file went to the worker, and was adopted; the files this process parsed
    # meanwhile are committed with it; none is listed that the store does not hold
    assert s.files[0].path == str(logs[0]) and all(f.committed for f in s.files)
    workers = _descendants(os.getpid()) - before
    assert _gone(workers, 30), f"worker processes {sorted(workers)} outlived the ingest"
    st = Store.open(root)
    assert sorted(st.sources()) == sorted(f.source_id for f in s.files)
    assert st.table("runs").height == len(s.files)
    assert not list((root / "staging").glob("*"))


def test_a_second_interrupt_at_an_adoptions_rollback_commits_no_part_without_its_source(
    tmp_path, monkeypatch
):
    """One Ctrl-C, two KeyboardInterrupts (forensics/errors.py): polars' own in the adoption of
    a worker's file (Written.keep's IPC round trip), then Python's handler's at the next check,
    the first instruction of the savepoint's rollback. The interrupt's commit held that file's
    adopted parts without its source record, and the same command stored its rows again (a
    flake of test_interrupted_parallel_ingest_..._completes[ctrl-c]: one log's decode rows
    twice). Here both interrupts are raised at those points."""
    import forensics.ingest.batch as batch
    from forensics.store.transaction import Transaction

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    monkeypatch.setattr(batch, "BATCH_FILES", 1000)
    monkeypatch.setattr(batch, "BATCH_SECONDS", 1e9)
    fired: list[str] = []
    written, rollback = batch._Batch._written, Transaction.rollback

    def polars_interrupt(self, table, name, df, reduced=False):
        if reduced and not fired:  # a worker's kept reduce, as the file is adopted
            fired.append("polars")
            raise KeyboardInterrupt
        return written(self, table, name, df, reduced)

    def handler_interrupt(self, point):
        if fired == ["polars"]:  # the pending second one, before the rollback's first line
            fired.append("handler")
            raise KeyboardInterrupt
        return rollback(self, point)

    monkeypatch.setattr(batch._Batch, "_written", polars_interrupt)
    monkeypatch.setattr(Transaction, "rollback", handler_interrupt)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 1, i)) for i in range(3)]
    home = tmp_path / "st"
    assert ingest(Store.open(home), logs, jobs=2).interrupted
    assert fired == ["polars", "handler"]
    st = Store.open(home)
    for t in json.loads((home / "manifest.json").read_text())["tables"]:
        ids = set(st.table(t)["source_id"]) if "source_id" in st.table(t).columns else set()
        assert ids <= set(st.sources()), f"rows of {t} committed without their source record"
    assert ingest(Store.open(home), logs, jobs=2).files
    serial = tmp_path / "serial"
    ingest(Store.open(serial), logs, jobs=1)
    _same_store(serial, home, skip=("verdicts",))


def test_a_ctrl_c_just_after_a_commit_replaced_the_manifest_lists_its_files_committed(
    tmp_path, monkeypatch
):
    """A Ctrl-C in a batch's commit after its manifest replaced the store's (the store's
    clean-up, the fsync of its folder, the lock's release): the batch's files are in the
    store and listed as committed ("Interrupted: 0 file(s) committed" was said of a store
    holding 2, in about 1 of 5 interrupted parallel ingests)."""
    import forensics.ingest.batch as batch
    from forensics.store.folder import Store as Folder

    monkeypatch.setattr(batch, "BATCH_FILES", 2)
    monkeypatch.setattr(batch, "BATCH_SECONDS", 1e9)
    gc = Folder._gc

    def interrupted_gc(self, man):
        gc(self, man)
        if man.sources:  # the first batch's commit, its manifest written
            raise KeyboardInterrupt

    monkeypatch.setattr(Folder, "_gc", interrupted_gc)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.2, i)) for i in range(3)]
    home = tmp_path / "st"
    s = ingest(Store.open(home), logs, jobs=1)
    assert s.interrupted
    stored = set(Store.open(home).sources())
    assert len(stored) == 2
    assert {f.source_id for f in s.files if f.committed} == stored


def test_an_interrupt_in_a_parse_threads_start_leaves_no_row_without_its_source(
    tmp_path, monkeypatch
):
    """A Ctrl-C (or SIGTERM) in ThreadPoolExecutor.submit's ``Thread.start``, which waits for
    the new thread to run, left that thread out of the executor's list: leaving the parse's
    ``with`` did not wait for it, and it ran the job it was started for, staging the rows of
    the file parsed in the main process after that file was rolled back. The interrupt's
    commit held them without the file's source record, and the same command stored them
    again (a flake of test_interrupted_parallel_ingest_..._completes[sigterm]: the log parsed
    here, beside a worker's file never adopted, twice). Here the interrupt is raised as the
    parse's staging thread starts, and the thread stages after the rollback."""
    import threading

    import forensics.ingest.batch as batch
    import forensics.ingest.file as file
    from forensics.store.transaction import Transaction

    # the first file (0.2 MB) to a worker, the next ones (0.1 MB: small) parsed here, with
    # their threads
    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 150_000)
    monkeypatch.setattr(file, "SERIAL_BYTES", 0)
    monkeypatch.setattr(batch, "BATCH_FILES", 1000)
    monkeypatch.setattr(batch, "BATCH_SECONDS", 1e9)
    fired, rolled = threading.Event(), threading.Event()
    started: list[threading.Thread] = []
    start, rollback, stage = threading.Thread.start, Transaction.rollback, file._stage
    commit = Transaction.commit

    def interrupted_start(self):
        start(self)
        if self.name.startswith("forensics-ingest_") and not fired.is_set():
            fired.set()  # the thread runs: the interrupt lands in start's wait for it
            started.append(self)
            raise KeyboardInterrupt

    def rolled_back(self, point):
        rollback(self, point)
        rolled.set()

    def late_stage(*args):
        if fired.is_set() and threading.current_thread() in started:
            rolled.wait(60)  # the main thread rolls the file back meanwhile
        return stage(*args)

    def commit_after_the_thread(self):
        for thread in started:  # whatever it does, it has done it before the commit
            thread.join(60)
        return commit(self)

    monkeypatch.setattr(threading.Thread, "start", interrupted_start)
    monkeypatch.setattr(Transaction, "rollback", rolled_back)
    monkeypatch.setattr(file, "_stage", late_stage)
    monkeypatch.setattr(Transaction, "commit", commit_after_the_thread)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.2 if i == 0 else 0.1, i)) for i in range(3)]
    home = tmp_path / "st"
    assert ingest(Store.open(home), logs, jobs=2).interrupted
    assert fired.is_set(), "no parse thread started in the main process"
    st, man = Store.open(home), home / "manifest.json"
    for t in json.loads(man.read_text())["tables"] if man.exists() else []:  # else none kept
        ids = set(st.table(t)["source_id"]) if "source_id" in st.table(t).columns else set()
        assert ids <= set(st.sources()), f"rows of {t} committed without their source record"
    monkeypatch.undo()
    ingest(Store.open(home), logs, jobs=2)
    serial = tmp_path / "serial"
    ingest(Store.open(serial), logs, jobs=1)
    _same_store(serial, home, skip=("verdicts",))


def test_a_worker_imports_the_parser_without_running_importlib_metadata():
    """A worker imports polars as the entry point's process does: importlib.metadata, which
    polars imports and a parse never reads (~12 ms), runs only when read (forensics/unread.py)."""
    code = (
        "import socket, sys\n"
        "import forensics.ingest.pool as pool\n"
        "ours, theirs = socket.socketpair()\n"
        "sys.argv = ['worker', str(theirs.fileno())]\n"
        "pool._worker_main = lambda conn: None\n"
        "pool._worker_entry()\n"
        "print('polars' in sys.modules, 'version' in vars(sys.modules['importlib.metadata']))\n"
    )
    assert_prints(code, ["True", "False"])


def test_the_main_process_warms_what_adoption_needs_while_the_workers_parse(tmp_path, monkeypatch):
    """A parallel ingest's main process parses nothing; adopting a worker's parts needs the
    parser's and the classifier's code. Their import (and the model's load) starts in a thread
    when the main process begins to wait for the workers, not at the first adoption (there it
    was ~0.06 s here, ~0.1 s on 16 cores, after the last worker ended: issue 15)."""
    import forensics.ingest.batch as batch

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    seen = []
    adopt = batch._Batch._adopt

    def adopt_seen(self, job, summary):
        seen.append(self.warming is not None)  # (started, not necessarily done)
        adopt(self, job, summary)

    monkeypatch.setattr(batch._Batch, "_adopt", adopt_seen)
    logs = [_big_log(tmp_path / f"big{i}.log", 1, i) for i in range(2)]
    s = ingest(Store.open(tmp_path / "st"), [str(p) for p in logs], jobs=2)
    assert len(s.files) == 2 and seen, "the logs were not given to workers"
    assert seen[0], "no warm-up of the adoption's imports before the first adoption"


def test_a_worker_imports_the_parser_with_the_collector_paused():
    """No garbage collection runs while a worker imports polars and the parser (objects that
    live as long as the worker: forensics/collector.py); it runs again before the first job."""
    code = (
        "import gc, socket, sys\n"
        "import forensics.ingest.pool as pool\n"
        "seen = []\n"
        "gc.callbacks.append(lambda phase, info: seen.append(phase))\n"
        "ours, theirs = socket.socketpair()\n"
        "sys.argv = ['worker', str(theirs.fileno())]\n"
        "imports = pool._import_parse\n"
        "def noted():\n"
        "    n = len(seen)\n"
        "    imports()\n"
        "    print(len(seen) - n, 'polars' in sys.modules)\n"
        "pool._import_parse = noted\n"
        "pool._worker_main = lambda conn: print(gc.isenabled())\n"
        "pool._worker_entry()\n"
    )
    assert_prints(code, ["0", "True", "True"])


def test_an_interrupt_at_the_ingests_end_stops_every_worker_and_says_what_was_committed(
    tmp_path, monkeypatch
):
    """A Ctrl-C just after the last commit, while the pool stops: the ingest still stops
    every process of the pool and removes its staging folder, then returns interrupted (the
    CLI's exit 130 and its line of what was committed), where the interrupt escaped it and
    cut the end short."""
    from forensics.store.staging import STAGING

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)
    close, seen = pool.Pool.close, set()

    def interrupted(self):
        if not seen:  # the first close: the interrupt lands in it
            seen.update(w.proc.pid for w in self.workers)
            if self._zygote:
                seen.add(self._zygote.proc.pid)
            raise KeyboardInterrupt
        close(self)

    monkeypatch.setattr(pool.Pool, "close", interrupted)
    logs = [str(_big_log(tmp_path / f"big{i}.log", 0.5, i)) for i in range(3)]
    try:
        s = ingest(Store.open(tmp_path / "st"), logs, jobs=2)
    except KeyboardInterrupt:
        pytest.fail("the interrupt escaped the ingest's end")
    assert s.interrupted
    assert [(f.status, f.committed) for f in s.files] == [("new", True)] * 3
    assert seen and _gone(seen), "a process of the pool outlived the ingest"
    staging = tmp_path / "st" / STAGING
    assert not staging.exists() or not any(staging.iterdir()), list(staging.iterdir())
    monkeypatch.undo()
    ingest(Store.open(tmp_path / "serial"), logs, jobs=1)
    _same_store(tmp_path / "serial", tmp_path / "st")
