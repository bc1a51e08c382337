"""Classifying stored runs: the store's rows of a run, cached verdicts."""

from __future__ import annotations

import functools
import io
import json
import threading
import time

import polars as pl

from forensics.classifier.analysis import analyze
from forensics.classifier.corpus import corpus_digest
from forensics.classifier.labels import _labels_for
from forensics.classifier.model import MODEL_VERSION, Model
from forensics.classifier.modelstore import load_model
from forensics.classifier.phases import STALE_S
from forensics.classifier.records import Analysis
from forensics.classifier.stream import HEAD_TAIL_REDUCES, _bounded, metrics_reduce
from forensics.classifier.verdict import Verdict, verdict
from forensics.errors import StoreError
from forensics.tables import VERDICT_SCHEMA


def _store_tables(
    store, source_id: str, runs: tuple[int, int] | None = None
) -> dict[str, pl.DataFrame]:
    """What the analysis reads of a stored log; ``runs`` (first, last): of those runs only,
    read part by part, uncached (a log of 100,000 launches: verdicts.refresh, a batch at a
    time); else of every run, the store splitting each table once."""
    where = pl.col("run_index").is_between(*runs) if runs is not None else None
    return _bounded(
        {
            name: store.source_rows(name, source_id, reduce=reduce, where=where)
            for name, reduce in TABLE_READS
        }
    )


# what the analysis reads of each table: the runs rows whole; events, errors, lines: head and
# tail per run; decode, prefill: counts per run and rank (never a table whole)
TABLE_READS = (("runs", None), *HEAD_TAIL_REDUCES.items())
TABLE_READS += (("decode", metrics_reduce), ("prefill", metrics_reduce))
_READS = dict(TABLE_READS)


def batch_tables(
    store, run_ids: list[str], written: Written | None = None
) -> dict[str, dict[str, pl.DataFrame]]:
    """Per source id, what the analysis reads of the runs ``run_ids`` ("source:index", runs
    of many logs): one read of each table, part by part, for the whole batch
    (verdicts.refresh). A read per log scanned every part once per log: 10,000 small files
    were quadratic (issue 14, seventh round). Each log's tables as _store_tables gives them.
    ``written``: read from what it kept of the parts this process wrote (the runs of sources
    it ``covers``), not from the files."""
    keep = (pl.col("source_id") + ":" + pl.col("run_index").cast(pl.String)).is_in(run_ids)
    if written is None:  # only the parts holding rows of the batch's logs are read
        sources = {r.rsplit(":", 1)[0] for r in run_ids}
        read = functools.partial(store.reduced, sources=sources)
    else:
        read = functools.partial(written.reduced, store)
    tables = {name: read(name, reduce, where=keep) for name, reduce in TABLE_READS}
    per_source: dict[str, dict[str, pl.DataFrame]] = {}
    for name, df in tables.items():
        if df.is_empty():
            continue
        for (sid,), part in df.partition_by("source_id", as_dict=True).items():
            per_source.setdefault(str(sid), {})[name] = part
    empty = {name: df.clear() for name, df in tables.items()}
    return {sid: _bounded({**empty, **t}) for sid, t in per_source.items()}


WRITTEN_MAX_BYTES = 16 << 20  # what Written keeps at most; past it, the store is read


def _owned(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` in buffers of its own: a head or tail of a part shares the whole part's buffers
    (polars slices without copying), which ``estimated_size`` does not count, so a kept reduce
    held every written part's text (8 files of 100 MB: +70 MB peak RSS). One IPC round trip
    copies only the rows kept."""
    buf = io.BytesIO()
    df.write_ipc(buf, compression="uncompressed")
    buf.seek(0)
    return pl.read_ipc(buf)


class Written:
    """What the verdict step reads of the parts a transaction writes (``Transaction.on_write``),
    kept as they are written: each part's ``TABLE_READS`` reduce (the runs rows whole, head and
    tail of the lines, events and errors, the metrics as counts), so the verdicts of the logs
    an ingest just parsed do not read back the parts it just wrote (issue 15).

    It is the store's own read (``Store.reduced``) over the same rows: each part's reduce, in
    the manifest's order, then the reduce of their union; a reduce keeps or summarises whole
    (source, run) groups, so it filters as well before as after. It answers only for the
    sources whose every part it saw (``covers``): a part it did not see (a grown log's earlier
    ingest, a worker's part adopted from another process) sends that source to the store.
    A worker of a parallel ingest keeps its own and sends it with its parts
    (forensics/ingest/pool.py): the main process ``keep``s it under the adopted part's name.
    Memory: bounded by WRITTEN_MAX_BYTES; a part that does not fit is not kept, so its
    sources are read from the store (a log of 100,000 launches), the others are not (eight
    100 MB logs keep ~18 MB: a cap that dropped everything sent all eight to the store)."""

    def __init__(self) -> None:
        self.parts: dict[str, dict[str, pl.DataFrame]] = {}  # table -> part name -> reduce
        self.size = 0
        # parts are told from several threads at once (a commit writes its last parts 4 at a
        # time): each reduce is computed outside it, what is kept is added under it
        self._lock = threading.Lock()

    def __call__(self, table: str, name: str, df: pl.DataFrame) -> None:
        """A part written (the transaction's ``on_write``)."""
        if self.size >= WRITTEN_MAX_BYTES or table not in _READS:
            return
        reduce = _READS[table]
        self.keep(table, name, _owned(df if reduce is None else reduce(df.lazy()).collect()))

    def keep(self, table: str, name: str, kept: pl.DataFrame) -> None:
        """Part ``name``'s reduce ``kept``, in buffers of its own: computed here (``_owned``)
        or by the worker that wrote it (unpickled here: a copy already, not copied again)."""
        size = kept.estimated_size()
        with self._lock:
            if self.size + size > WRITTEN_MAX_BYTES:
                return  # not kept: the sources of the part are read from the store (covers)
            self.size += size
            self.parts.setdefault(table, {})[name] = kept

    def get(self, table: str, name: str) -> pl.DataFrame | None:
        """What it kept of part ``name`` of ``table`` (None: not kept)."""
        return self.parts.get(table, {}).get(name)

    def covers(self, store, source_ids) -> set[str]:
        """The sources of ``source_ids`` whose rows in the store are all in parts it kept."""
        man, unseen = store.manifest(), set()
        for table in _READS:
            kept = self.parts.get(table, {})
            for part in man.tables.get(table, []):
                if part not in kept:
                    unseen |= man.part_sources(part) or {""}
        return set(source_ids) - unseen

    def reduced(self, store, name: str, reduce, where: pl.Expr) -> pl.DataFrame:
        """``store.reduced(name, reduce, where=where)`` over the parts kept (see the class)."""
        kept = self.parts.get(name, {})
        pieces = [kept[p].filter(where) for p in store.manifest().tables.get(name, []) if p in kept]
        if not pieces:  # none of its rows: the store's answer for a table with no part
            from forensics.store.folder import _empty

            pieces = [_empty(name).filter(where)]
        union = pl.concat(pieces, how="diagonal_relaxed").lazy()
        return (union if reduce is None else reduce(union)).collect()


def analyze_stored(
    store,
    source_id: str,
    run_index: int,
    tables: dict[str, pl.DataFrame] | None = None,
    src: dict | None = None,
) -> Analysis:
    """``tables``: rows holding the run's (``RunRows``: its own, verdicts.refresh), else the
    source's are read; ``src``: the source's manifest entry, when the caller holds it."""
    tables = tables if tables is not None else _store_tables(store, source_id)
    src = src if src is not None else store.sources().get(source_id, {})
    mtime = src.get("mtime")
    return analyze(tables, run_index, path=src.get("path", source_id), mtime=mtime)


def _state_key(store, source_id: str, model: Model | None) -> str:
    src = store.sources().get(source_id, {})
    label = _labels_for(store).get(source_id, {})
    return "|".join(
        str(x)
        for x in (
            src.get("size"),
            src.get("mtime"),
            src.get("offset"),
            src.get("content_hash"),  # a log rewritten with the same size and mtime
            MODEL_VERSION,
            corpus_digest(),
            json.dumps(label, sort_keys=True),
            int(time.time() // STALE_S)
            if src.get("mtime") and time.time() - src["mtime"] < 2 * STALE_S
            else 0,
        )
    )


def classify_stored(
    store,
    source_id: str,
    run_index: int,
    model: Model | None = None,
    tables: dict[str, pl.DataFrame] | None = None,
    known: tuple[dict, dict] | None = None,
) -> Verdict:
    """The verdict of a stored run (``tables``: that run's rows, as verdicts.refresh splits
    them; ``known``: the source's manifest entry and its labels, read once by a caller that
    classifies many runs: inside a transaction every read of them parses the manifest)."""
    src, labels = known if known is not None else (None, _labels_for(store).get(source_id, {}))
    a = analyze_stored(store, source_id, run_index, tables, src)
    v = verdict(a, model if model is not None else load_model(store))
    label = labels.get(run_index)
    if label:
        v.phase, v.confidence, v.decided = label, 1.0, True
        v.explanation = f"labeled {label} by you (forensics label); " + v.explanation
    return v


def classify_runs(store, runs_df: pl.DataFrame) -> pl.DataFrame:
    """Verdicts for the runs table: run_id, phase, hung, signature, confidence (cached)."""
    if runs_df is None or runs_df.is_empty():
        return pl.DataFrame(schema={"run_id": pl.String})
    cached = store.table("verdicts")
    cache: dict[str, tuple[str, dict]] = {}
    if not cached.is_empty():
        for rid, key, vj in cached.select("run_id", "key", "verdict").iter_rows():
            cache[rid] = (key, json.loads(vj))
    rows = []
    new_rows = []
    model = None
    keys: dict[str, str] = {}
    for rid, sid, ri in runs_df.select("run_id", "source_id", "run_index").iter_rows():
        if sid not in keys:
            keys[sid] = _state_key(store, sid, None)
        key = keys[sid]
        hit = cache.get(rid)
        if hit and hit[0] == key:
            d = hit[1]
        else:
            if model is None:
                model = load_model(store)
            v = classify_stored(store, sid, int(ri), model)
            d = {
                "phase": v.phase,
                "hung": v.hung,
                "signature": v.signature,
                "confidence": round(v.confidence, 3),
            }
            new_rows.append({"run_id": rid, "key": key, **d, "verdict": json.dumps(d)})
        rows.append({"run_id": rid, **d})
    if new_rows:
        try:
            with store.transaction(lock_timeout=2.0) as tx:
                done = {r["run_id"] for r in new_rows}
                if not cached.is_empty():
                    tx.drop_rows("verdicts", ~pl.col("run_id").is_in(list(done)))
                tx.append("verdicts", pl.DataFrame(new_rows, schema=VERDICT_SCHEMA))
        except StoreError:
            pass  # the cache is an optimisation; a locked store just recomputes next time
    return pl.DataFrame(
        rows,
        schema={
            "run_id": pl.String,
            "phase": pl.String,
            "hung": pl.Boolean,
            "signature": pl.String,
            "confidence": pl.Float64,
        },
    )


def _labeled_runs(store) -> list[tuple[Analysis, str]]:
    df = store.table("labels")
    if df.is_empty():
        return []
    out = []
    for sid, ri, ph in df.select("source_id", "run_index", "phase").iter_rows():
        if sid not in store.sources():
            continue
        out.append((analyze_stored(store, sid, int(ri)), ph))
    return out
