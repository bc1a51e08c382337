"""A parallel ingest's verdicts are computed by the workers that parsed the logs from byte 0
(forensics.verdicts.computed): the main process stores them without classifying a run of
them, and they are the serial ingest's, whole (explanation, evidence, next steps); a log a
worker did not parse whole (a grown log), or whose verdict the worker cannot know (a label),
is classified in the main process, as before (issue 15)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import forensics.classifier as classifier
from forensics.ingest import ingest, pool
from forensics.store import Store
from forensics.verdicts import TABLE
from forensics.verdicts import label as label_run

FIX = Path(__file__).parent.parent / "fixtures"


def _verdicts(store: Store) -> dict[str, dict]:
    df = store.table(TABLE).unique("run_id", keep="last", maintain_order=True)
    return {rid: json.loads(v) for rid, v in df.select("run_id", "verdict").iter_rows()}


def _to_workers(monkeypatch) -> list[str]:
    """Every log of a parallel ingest to a worker (none parsed in the main process: a big
    log never is, and here every log is big); -> the paths given to workers."""
    given: list[str] = []
    real_submit = pool.Pool.submit

    def submit(self, job, *a):
        given.append(job.out.path)
        return real_submit(self, job, *a)

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 0)  # an empty log too
    monkeypatch.setattr(pool.Pool, "submit", submit)
    return given


def _classified_here(monkeypatch) -> list[str]:
    """The source ids of the runs classified in this process (the workers are others)."""
    calls: list[str] = []
    real = classifier.classify_stored

    def spy(store, source_id, run_index, *a, **kw):
        calls.append(source_id)
        return real(store, source_id, run_index, *a, **kw)

    monkeypatch.setattr(classifier, "classify_stored", spy)
    return calls


def test_the_workers_verdicts_are_the_serial_ones(tmp_path, monkeypatch, shared_dir):
    """The fixtures and the real corpus, every log parsed by a worker: the main process
    classifies no run, and the verdict table is a serial ingest's."""
    logs = [str(p) for p in sorted(FIX.glob("*.log*"))]
    logs += [str(p) for p in sorted((shared_dir / "real-logs-dev").glob("*.log"))]
    serial = Store.open(tmp_path / "serial")
    ingest(serial, logs, jobs=1)
    given, calls = _to_workers(monkeypatch), _classified_here(monkeypatch)
    store = Store.open(tmp_path / "parallel")
    summary = ingest(store, logs, jobs=3)
    parsed = [f.path for f in summary.files if f.status == "new"]
    assert len(parsed) > 70 and sorted(given) == sorted(parsed)
    assert calls == []
    mine = _verdicts(store)
    assert len(mine) > 80
    assert mine == _verdicts(serial)


def test_a_grown_log_is_classified_here(tmp_path, monkeypatch):
    """A grown log's worker parses only its new bytes (its earlier rows are in the store):
    its runs are classified in the main process; a rewritten log (its old rows dropped) and
    a new one are the workers'. The same verdicts as a serial ingest of the same logs."""
    logs = tmp_path / "logs"
    logs.mkdir()
    grown, rewritten = logs / "grown.log", logs / "rewritten.log"
    text = (FIX / "sglang_eagle3_cg_5dt.log").read_text()
    grown.write_text(text)
    shutil.copy(FIX / "sglang_fail_capture.log", rewritten)
    stores = [Store.open(tmp_path / name) for name in ("serial", "parallel")]
    for store in stores:
        ingest(store, [str(grown), str(rewritten)], jobs=1)
    grown.write_text(text + (FIX / "sglang_two_launches.log").read_text())
    shutil.copy(FIX / "sglang_fail_load_kv_oom.log", rewritten)
    shutil.copy(FIX / "sglang_baseline.log", logs / "new.log")
    paths = [str(p) for p in sorted(logs.iterdir())]
    ingest(stores[0], paths, jobs=1)
    given, calls = _to_workers(monkeypatch), _classified_here(monkeypatch)
    summary = ingest(stores[1], paths, jobs=3)
    status = {Path(f.path).name: f.status for f in summary.files}
    assert status == {"grown.log": "grown", "rewritten.log": "rewritten", "new.log": "new"}
    assert sorted(given) == sorted(paths)
    grown_sid = next(f.source_id for f in summary.files if f.status == "grown")
    assert set(calls) == {grown_sid}  # every run of the grown log, none of the others
    assert _verdicts(stores[1]) == _verdicts(stores[0])


def test_a_labeled_log_is_classified_here(tmp_path, monkeypatch):
    """A store with a label: its model is the one trained with the label (saved in the
    store), which the workers load too, so a new log's verdicts are the workers'; the
    labeled log, rewritten, is classified here (a worker reads no label). The same verdicts
    as a serial ingest."""
    logs = tmp_path / "logs"
    logs.mkdir()
    labeled = logs / "labeled.log"
    shutil.copy(FIX / "sglang_fail_capture.log", labeled)
    first = Store.open(tmp_path / "serial")
    ingest(first, [str(labeled)], jobs=1)
    label_run(first, next(iter(_verdicts(first))), "load")  # trains and saves the model
    shutil.copytree(first.root, tmp_path / "parallel")  # the trained model in it too
    shutil.copy(FIX / "sglang_fail_load_kv_oom.log", labeled)
    shutil.copy(FIX / "sglang_baseline.log", logs / "new.log")
    paths = [str(p) for p in sorted(logs.iterdir())]
    # opened again: the Store that labeled kept its read of the runs table, which the ingest's
    # verdict step read again (no verdict for new.log): as the CLI, one command per Store
    first = Store.open(tmp_path / "serial")
    ingest(first, paths, jobs=1)
    given, calls = _to_workers(monkeypatch), _classified_here(monkeypatch)
    store = Store.open(tmp_path / "parallel")
    summary = ingest(store, paths, jobs=3)
    assert sorted(given) == sorted(paths)
    sid = {Path(f.path).name: f.source_id for f in summary.files}
    assert set(calls) == {sid["labeled.log"]}
    mine = _verdicts(store)
    assert mine == _verdicts(first)
    assert mine[sid["labeled.log"] + ":0"]["phase"] == "load"


class _Pipe:
    """A worker's end of its pipe, in this process: one log's bytes, then a plain end."""

    def __init__(self, data: bytes):
        self.chunks = [data, b""]

    def recv_bytes(self) -> bytes:
        return self.chunks.pop(0)

    def recv(self):
        return None


def test_a_workers_verdicts_are_computed_while_its_parts_are_fsynced(tmp_path, monkeypatch):
    """A worker's tail: its last parts written, their fsyncs in flight, the verdicts computed
    meanwhile (they need only what it kept of its parts), and its answer once every part is
    on the disk. Here each part's fsync waits (3 s at most) for the verdicts: a worker that
    computed them only after the fsyncs would leave every fsync to its time-out."""
    import threading
    from types import SimpleNamespace

    import forensics.store.durable as durable
    from forensics.store.staging import new_staging

    log = FIX / "sglang_two_launches.log"
    store = Store.open(tmp_path / "store")
    computed, synced, early = threading.Event(), [], []
    real_fsync, real_verdicts = durable.fsync_path, pool._verdicts

    def fsync(path, *a):
        if str(path).endswith(".tmp"):  # a part, not a folder
            early.append(not computed.wait(3))
            synced.append(str(path))
        return real_fsync(path, *a)

    def verdicts(*a):
        try:
            return real_verdicts(*a)
        finally:
            computed.set()

    monkeypatch.setattr(durable, "fsync_path", fsync)
    monkeypatch.setattr(pool, "_verdicts", verdicts)
    spec = {
        "path": str(log),
        "host": "local",
        "sid": "local:two",
        "stat": SimpleNamespace(size=log.stat().st_size, mtime=log.stat().st_mtime),
        "transformed": False,
        "resume": (0, None),
        "name_pattern": None,
        "staging": str(new_staging(store.root)),
        "store": str(store.root),
    }
    got = pool._run_job(_Pipe(log.read_bytes()), spec)
    assert got["verdicts"] is not None and got["verdicts"]["rows"]
    assert got["parts"] and sorted(synced) == sorted(tmp for _, tmp, _, _ in got["parts"])
    assert early == [False] * len(synced)  # no fsync ended before the verdicts were computed
