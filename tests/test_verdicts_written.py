"""The verdict step of an ingest reads the runs it just parsed from what it kept of the parts
it wrote (classifier.stored.Written), not from the store's files (issue 15): the verdicts must
be the ones the store's rows give, whole (explanation, evidence, next steps)."""

from __future__ import annotations

import ctypes
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import polars as pl

from forensics.classifier import stored
from forensics.classifier.stream import KEEP_ROWS
from forensics.ingest import ingest
from forensics.store import Store
from forensics.store.manifest import Manifest
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
    import forensics.verdicts
    from forensics.ingest import pool

    monkeypatch.setattr(pool, "POOL_MIN_BYTES", 1)  # every log to a worker
    # the verdicts the workers computed are not taken (a label, another model: the main
    # process classifies those logs itself, tests/test_verdicts_workers.py), so every run is
    # classified here, from what the workers kept
    monkeypatch.setattr(forensics.verdicts, "_accepted", lambda *a: {})
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


# -- Written's memory: copies of the rows kept, and at most WRITTEN_MAX_BYTES of them ----------
class _ArrowArray(ctypes.Structure):
    pass


_ArrowArray._fields_ = [
    ("length", ctypes.c_int64),
    ("null_count", ctypes.c_int64),
    ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64),
    ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)),
    ("children", ctypes.POINTER(ctypes.POINTER(_ArrowArray))),
    ("dictionary", ctypes.POINTER(_ArrowArray)),
    ("release", ctypes.CFUNCTYPE(None, ctypes.POINTER(_ArrowArray))),
    ("private_data", ctypes.c_void_p),
]


class _ArrowSchema(ctypes.Structure):
    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_char_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("private_data", ctypes.c_void_p),
    ]


def _buffers(df: pl.DataFrame, column: str) -> set[int]:
    """The addresses of the Arrow buffers holding ``column`` (every chunk, exported through
    the Arrow C data interface): a slice or filter of a string column shares its data buffers,
    so a frame that holds another's rows without copying them has some of its addresses."""

    def walk(arr: _ArrowArray) -> set[int]:
        out = {arr.buffers[i] for i in range(arr.n_buffers) if arr.buffers[i]}
        for c in range(arr.n_children):
            out |= walk(arr.children[c].contents)
        return out

    found: set[int] = set()
    for chunk in df[column].get_chunks():
        arr, schema = _ArrowArray(), _ArrowSchema()
        chunk._export_arrow_to_c(ctypes.addressof(arr), ctypes.addressof(schema))
        found |= walk(arr)
        arr.release(ctypes.byref(arr))
        schema.release(ctypes.addressof(schema))
    return found


def _lines_part(runs: int, rows: int, width: int, source: str = "s") -> pl.DataFrame:
    """A part of the lines table: ``rows`` lines of ``width`` characters in each of ``runs``
    runs (distinct texts, longer than a string view's 12 inline bytes)."""
    n = runs * rows
    return pl.DataFrame(
        {
            "source_id": [source] * n,
            "run_index": [i // rows for i in range(n)],
            "text": [f"{i:012d} " + "x" * width for i in range(n)],
        }
    )


def test_written_keeps_copies_of_the_rows_not_the_parts_buffers():
    """What Written keeps of a part (its head and tail per run) is in buffers of its own: a
    slice of the part shared the whole part's text, which estimated_size does not count
    (8 files of 100 MB: +70 MB peak RSS before the copy)."""
    part = _lines_part(runs=2, rows=KEEP_ROWS["lines"] * 2, width=40)
    w = stored.Written()
    w("lines", "p1", part)
    w("runs", "p2", part.select("source_id", "run_index").unique(maintain_order=True))
    kept = w.parts["lines"]["p1"]
    assert 0 < len(kept) < len(part)  # a head and a tail of each run
    assert _buffers(part, "text")  # the check sees the part's buffers ...
    assert not _buffers(kept, "text") & _buffers(part, "text")  # ... and none is kept
    # the reduce alone (no copy) shares them: what the assertion above would see
    reduced = stored._READS["lines"](part.lazy()).collect()
    assert _buffers(reduced, "text") & _buffers(part, "text")


def test_written_keeps_at_most_its_cap():
    """Parts past WRITTEN_MAX_BYTES (16 MB) of what the verdict step reads: Written keeps
    those that fit and no more, its bytes never over the cap, and answers only for the
    sources whose parts it kept (the others are read from the store)."""
    w = stored.Written()
    part_bytes = 0
    for i in range(12):  # 12 parts of ~2.3 MB kept each: ~28 MB in all
        part = _lines_part(runs=1, rows=8_000, width=280, source=f"s{i}")
        w("lines", f"p{i}", part)
        part_bytes += stored._owned(stored._READS["lines"](part.lazy()).collect()).estimated_size()
        kept = sum(df.estimated_size() for t in w.parts.values() for df in t.values())
        assert kept <= 16 << 20
    assert part_bytes > 16 << 20  # the parts were over the cap ...
    kept_parts = set(w.parts["lines"])
    assert 0 < len(kept_parts) < 12  # ... so it kept some of them, not all
    man = Manifest(
        tables={"lines": [f"p{i}" for i in range(12)]},
        part_source={f"p{i}": f"s{i}" for i in range(12)},
    )
    store = SimpleNamespace(manifest=lambda: man)
    sources = [f"s{i}" for i in range(12)]
    assert w.covers(store, sources) == {f"s{p[1:]}" for p in kept_parts}
