"""The verdict step of an ingest reads the runs it just parsed from what it kept of the parts
it wrote (classifier.stored.Written), not from the store's files (issue 15): the verdicts must
be the ones the store's rows give, whole (explanation, evidence, next steps)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl

from forensics.classifier import stored
from forensics.ingest import ingest
from forensics.store import Store
from forensics.verdicts import TABLE, refresh

FIX = Path(__file__).parent.parent / "fixtures"


def _verdicts(store: Store) -> dict[str, dict]:
    df = store.table(TABLE).unique("run_id", keep="last", maintain_order=True)
    return {rid: json.loads(v) for rid, v in df.select("run_id", "verdict").iter_rows()}


def _spy(monkeypatch) -> list[tuple[bool, list[str]]]:
    """(from memory, run ids) of every batch_tables call."""
    calls: list[tuple[bool, list[str]]] = []
    real = stored.batch_tables

    def spy(store, run_ids, written=None):
        calls.append((written is not None, list(run_ids)))
        return real(store, run_ids, written)

    monkeypatch.setattr(stored, "batch_tables", spy)
    return calls


def _logs(shared_dir: Path) -> list[Path]:
    return sorted(FIX.glob("*.log*")) + sorted((shared_dir / "real-logs-dev").glob("*.log"))


def test_the_verdicts_from_memory_are_the_stores(tmp_path, monkeypatch, shared_dir):
    """Every log of the fixtures and the real corpus: the ingest classifies each run from
    memory, and classifying them again from the store's rows gives the same verdicts."""
    calls = _spy(monkeypatch)
    store = Store.open(tmp_path / "store")
    ingest(store, [str(p) for p in _logs(shared_dir)], jobs=1)
    in_memory = _verdicts(store)
    assert len(in_memory) > 70
    assert calls and all(mine for mine, _ in calls)  # no run read back from the store
    assert sorted(r for _, ids in calls for r in ids) == sorted(in_memory)
    calls.clear()
    refresh(store)  # every run again, from the store
    assert calls and not any(mine for mine, _ in calls)
    assert _verdicts(store) == in_memory


def test_a_grown_log_is_read_from_the_store(tmp_path, monkeypatch):
    """Rows of a log written by an earlier ingest are not in memory: a grown log's runs are
    read from the store, a rewritten one's from memory, a new one's from memory. (Each log
    ingested alone first: a part shared with a rewritten log is written again by the next
    ingest, without that log's rows, and then holds all that is stored of the others.)"""
    logs = tmp_path / "logs"
    logs.mkdir()
    grown, rewritten = logs / "grown.log", logs / "rewritten.log"
    text = (FIX / "sglang_eagle3_cg_5dt.log").read_text()  # past the parser's sniff window:
    grown.write_text(text)  # rows of its own ("~tail" rows only are parsed again)
    shutil.copy(FIX / "sglang_fail_capture.log", rewritten)
    store = Store.open(tmp_path / "store")
    for log in (grown, rewritten):
        ingest(store, [str(log)], jobs=1)
    grown.write_text(text + (FIX / "sglang_two_launches.log").read_text())
    shutil.copy(FIX / "sglang_fail_load_kv_oom.log", rewritten)
    shutil.copy(FIX / "sglang_baseline.log", logs / "new.log")
    calls = _spy(monkeypatch)
    summary = ingest(store, [str(p) for p in sorted(logs.iterdir())], jobs=1)
    assert {f.status for f in summary.files} == {"grown", "rewritten", "new"}
    name = {f.source_id: Path(f.path).name for f in summary.files}
    read = {name[r.rsplit(":", 1)[0]]: mine for mine, ids in calls for r in ids}
    assert read == {"grown.log": False, "new.log": True, "rewritten.log": True}
    in_ingest = _verdicts(store)
    refresh(store)
    assert _verdicts(store) == in_ingest


def test_written_answers_as_the_store_reads(tmp_path, monkeypatch):
    """Written.reduced over the parts it kept is Store.reduced over the files, table by table."""
    import forensics.verdicts

    seen = []
    real = forensics.verdicts.refresh

    def refresh_spy(store, source_ids=None, **kw):
        seen.append(kw["written"])
        return real(store, source_ids, **kw)

    monkeypatch.setattr(forensics.verdicts, "refresh", refresh_spy)
    store = Store.open(tmp_path / "store")
    ingest(store, [str(p) for p in sorted(FIX.glob("sglang_*.log"))], jobs=1)
    (written,) = seen
    keys = store.reduced("runs", lambda lf: lf.select("source_id", "run_index"))
    ids = keys.select(pl.col("source_id") + ":" + pl.col("run_index").cast(pl.String))
    ids = ids.to_series().to_list()
    assert written.covers(store, keys["source_id"].unique()) == set(keys["source_id"])
    keep = (pl.col("source_id") + ":" + pl.col("run_index").cast(pl.String)).is_in(ids)
    for name, reduce in stored.TABLE_READS:
        mine = written.reduced(store, name, reduce, where=keep)
        theirs = store.reduced(name, reduce, where=keep)
        cols = mine.columns
        assert sorted(cols) == sorted(theirs.columns), name
        assert mine.sort(cols).equals(theirs.select(cols).sort(cols)), name


def test_the_packaged_model_is_not_copied_into_the_store(tmp_path):
    """load_model caches in the store only a model it trained (a stale packaged model, the
    user's labels): the packaged one is read from the package (the copy cost the first
    ingest into a store a 450 KB write and fsync)."""
    from forensics.classifier import _model_path

    store = Store.open(tmp_path / "store")
    ingest(store, [str(FIX / "sglang_fail_capture.log")], jobs=1)
    assert _verdicts(store)
    assert not _model_path(store).exists()


def test_a_workers_parts_are_read_from_memory(tmp_path, monkeypatch, shared_dir):
    """A parallel ingest: each worker keeps what the verdict step reads of the parts it
    writes and sends it with them, so the main process reads none of them back from the
    store (it read 8 x 100 MB of parts on its one core), and the verdicts are the store's."""
    from forensics.ingest import pool

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 1)  # every log to a worker
    given = []
    real_submit = pool.Pool.submit
    monkeypatch.setattr(
        pool.Pool, "submit", lambda self, job, *a: given.append(job) or real_submit(self, job, *a)
    )
    calls = _spy(monkeypatch)
    store = Store.open(tmp_path / "store")
    logs = sorted(FIX.glob("sglang_*.log")) + sorted((shared_dir / "real-logs-dev").glob("*.log"))
    summary = ingest(store, [str(p) for p in logs], jobs=3)
    assert {f.status for f in summary.files} == {"new"}
    assert len(given) >= 10  # logs parsed by the two workers (the others here, when both busy)
    in_memory = _verdicts(store)
    assert len(in_memory) > 60
    assert calls and all(mine for mine, _ in calls)
    assert sorted(r for _, ids in calls for r in ids) == sorted(in_memory)
    calls.clear()
    refresh(store)
    assert calls and not any(mine for mine, _ in calls)
    assert _verdicts(store) == in_memory


def test_past_the_cap_the_parts_kept_still_answer(tmp_path, monkeypatch):
    """Written keeps parts while they fit in WRITTEN_MAX_BYTES: a part that does not fit is
    not kept, and only its logs go to the store; the logs whose parts all fit are still
    covered and read as the store reads them (a cap that dropped everything kept sent every
    log to the store: eight 100 MB logs keep ~18 MB)."""
    store = Store.open(tmp_path / "store")
    for log in sorted(FIX.glob("sglang_*.log"))[:6]:  # one ingest each: parts of their own
        ingest(store, [str(log)], jobs=1)
    man = store.manifest()
    parts = [
        (t, p, pl.read_parquet(store.root / "tables" / t / p))
        for t, _ in stored.TABLE_READS
        for p in man.tables.get(t, [])
    ]
    sids = sorted(store.sources())
    sizes = {}
    for t, p, df in parts:
        reduce = dict(stored.TABLE_READS)[t]
        kept = df if reduce is None else reduce(df.lazy()).collect()
        sizes[p] = stored._owned(kept).estimated_size()  # as Written counts it
    total = {
        sid: sum(sizes[p] for _, p, _ in parts if man.part_sources(p) == {sid}) for sid in sids
    }
    first = max(sizes, key=sizes.get)  # the largest part, fed first: it does not fit
    small: list[str] = []  # then every part of the smallest logs, which all fit after it
    for sid in sorted(set(sids) - man.part_sources(first), key=total.get):
        if sum(total[x] for x in small) + total[sid] >= sizes[first]:
            break
        small.append(sid)
    assert small, "no log smaller than the largest part"
    monkeypatch.setattr(stored, "WRITTEN_MAX_BYTES", sizes[first] - 1)
    written = stored.Written()
    order = [x for x in parts if x[1] == first]
    order += [x for x in parts if man.part_sources(x[1]) & set(small)]
    for t, p, df in order:
        written(t, p, df)
    assert written.get(order[0][0], first) is None  # past the cap: not kept
    assert all(written.get(t, p) is not None for t, p, _ in order[1:])  # kept after the miss
    covered = written.covers(store, sids)
    assert covered == set(small)
    keep = pl.col("source_id").is_in(sorted(covered))
    for name, reduce in stored.TABLE_READS:
        mine = written.reduced(store, name, reduce, where=keep)
        theirs = store.reduced(name, reduce, where=keep)
        cols = mine.columns
        assert mine.sort(cols).equals(theirs.select(cols).sort(cols)), name


def test_a_read_for_some_logs_reads_only_their_parts(tmp_path, monkeypatch):
    """Store.reduced(..., sources=S) reads only the parts holding rows of S (and the parts
    tied to no source), and gives the rows the whole read gives for S: a verdict batch of
    one log read every log's parts (8 x 100 MB logs: each batch a scan of all of them)."""
    from forensics.store import folder

    store = Store.open(tmp_path / "store")
    logs = sorted(FIX.glob("sglang_*.log"))[:8]
    ingest(store, [str(p) for p in logs], jobs=1)
    read: list[str] = []
    real = folder.part_path
    monkeypatch.setattr(folder, "part_path", lambda p: read.append(p.name) or real(p))
    man = store.manifest()
    sids = sorted(store.sources())
    assert len(sids) == len(logs)
    for name, reduce in stored.TABLE_READS:
        for sid in sids:
            read.clear()
            mine = pl.col("source_id") == sid
            pruned = store.reduced(name, reduce, where=mine, sources={sid})
            wanted = [p for p in man.tables.get(name, []) if sid in man.part_sources(p)]
            assert sorted(read) == sorted(wanted), (name, sid)
            read.clear()
            whole = store.reduced(name, reduce, where=mine)
            assert len(read) == len(man.tables.get(name, []))
            assert pruned.equals(whole), (name, sid)
