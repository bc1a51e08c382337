"""Stored verdicts: the classifier's answer for every run, written when it can change.

A verdict (phase, hung, signature, confidence) changes only when the run's log does (ingest),
when the user labels it (``forensics label``) or when the model is retrained (``forensics
classify train``). Those writers call :func:`refresh`; every reading command (``runs``,
``show``, ``diagnose``, ``advise``, ``signatures``, ``report``) reads the ``verdicts`` table
through :func:`stored_verdicts` and never writes to the store. A run with no stored verdict
(a store written before verdicts were stored at ingest) is classified in memory for that read
only; ``forensics classify train`` stores them.

The table's schema is the classifier's (:data:`forensics.classifier.VERDICT_SCHEMA`); the
``verdict`` column holds the whole verdict (every field of ``Verdict``), so diagnose and the report
show a run's explanation and evidence without loading the model.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from forensics.classifier.stored import Written
    from forensics.store import Store, Transaction

TABLE = "verdicts"
STORED_KEY = "stored"  # rows written here (classify_runs' own cache rows carry its key)
COLUMNS = {
    "run_id": pl.String,
    "phase": pl.String,
    "hung": pl.Boolean,
    "signature": pl.String,
    "confidence": pl.Float64,
}


def refresh(
    store: Store,
    source_ids: Iterable[str] | None = None,
    *,
    unplaced: set[str] | None = None,
    done_meta: str | None = None,
    written: Written | None = None,
    ready: dict[str, dict[str, Any]] | None = None,
    into: Transaction | None = None,
) -> int:
    """Classify the runs of ``source_ids`` (None: every run) and store their verdicts, whole
    (explanation, evidence and next steps too, so diagnose needs no model). Returns how many
    runs were classified; ``unplaced`` collects the source ids of texts that are no SGLang log
    at all (a verdict with no phase: ingest warns about them). ``done_meta``: a manifest meta
    key cleared in the same commit as the verdicts (ingest's pending-verdicts marker).
    ``written``: what the ingest kept of the parts it wrote (classifier.stored.Written): the
    runs of the sources it covers are read from there, not from the store. ``ready``: per
    source id, the verdicts an ingest worker computed (``computed``): stored as they are
    where they are the ones computed here would be (``_accepted``), else computed here.
    ``into``: an open transaction the verdicts are added to, ``store`` being its ``view``
    (an ingest's: its rows and their verdicts in one commit); else they are committed here."""
    from forensics.classifier import VERDICT_SCHEMA, load_model
    from forensics.classifier.labels import _labels_for
    from forensics.runs import run_keys

    runs = run_keys(store, source_ids)
    if runs.is_empty():
        if done_meta is not None:
            with _writing(store, into) as tx:
                tx.set_meta(done_meta, None)
        return 0
    model = load_model(store)
    # read once: inside the transaction each read of them parses the manifest again
    sources, labels = store.sources(), _labels_for(store)
    done = _accepted(ready, runs, model, sources, labels) if ready else {}
    rest = runs.filter(~pl.col("source_id").is_in(list(done))) if done else runs
    held = written.covers(store, rest["source_id"].unique()) if written is not None else set()
    with _writing(store, into) as tx:
        tx.drop_rows(TABLE, ~pl.col("run_id").is_in(runs["run_id"].to_list()))
        if done:  # in the order of the runs (source id, run index), as computed here
            rows = [row for sid in sorted(done) for row in done[sid]]
            if unplaced is not None:
                unplaced |= {sid for sid, rs in done.items() if any(r["phase"] is None for r in rs)}
            tx.append(TABLE, pl.DataFrame(rows, schema=VERDICT_SCHEMA))
        for rows in _classified(store, rest, written, held, model, (sources, labels), unplaced):
            tx.append(TABLE, pl.DataFrame(rows, schema=VERDICT_SCHEMA))
        if done_meta is not None:
            tx.set_meta(done_meta, None)
    return len(runs)


@contextlib.contextmanager
def _writing(store: Store, into: Transaction | None) -> Iterator[Transaction]:
    """``into`` (committed by its owner), else a transaction of ``store`` committed here."""
    if into is not None:
        yield into
        return
    with store.transaction() as tx:
        yield tx


def _classified(
    store: Any,
    runs: pl.DataFrame,
    written: Written | None,
    held: set[str],
    model: Any,
    known: tuple[dict[str, dict], dict[str, dict]],
    unplaced: set[str] | None,
) -> Iterator[list[dict[str, Any]]]:
    """The verdict rows of ``runs`` (run_id, source_id, run_index, sorted), a batch at a
    time: their rows read (by run range; ``held``: the sources read from ``written``), then
    classified. Memory is one batch's, whatever the number of runs (a log of 100,000
    launches) or their lines (_next_batch), and each run's rows are read once, not once per
    run of its log. ``known``: the sources' manifest entries and labels."""
    from forensics.classifier import classify_stored

    sources, labels = known
    at, n = 0, min(VERDICT_FIRST, VERDICT_BATCH)
    while at < len(runs):
        batch, rows = runs.slice(at, n), []
        at += len(batch)
        read = _batch_rows(store, batch, written, held)  # one read per batch
        n = _next_batch(n, read)
        for (sid,), one in batch.group_by("source_id", maintain_order=True):
            tables = _per_run(read.get(str(sid)))
            src = (sources.get(sid, {}), labels.get(sid, {}))
            for rid, ri in one.select("run_id", "run_index").iter_rows():
                v = classify_stored(store, sid, int(ri), model, tables.get(ri), src)
                if v.phase is None and unplaced is not None:
                    unplaced.add(sid)
                rows.append(_row(rid, v))
        yield rows


VERDICT_BATCH = 2_000  # runs classified, and their verdicts written, at most at a time (refresh)
# runs of the first batch: one run reads at most KEEP_ROWS lines a table, so the first batch is
# bounded whatever the log; the next ones are sized by what it read (_next_batch)
VERDICT_FIRST = 1
VERDICT_READ_BYTES = 16 << 20  # rows a batch reads, at most about (polars' estimate)


def _next_batch(n: int, read: dict[str, dict[str, pl.DataFrame]]) -> int:
    """The number of runs of the next batch after one of ``n`` runs read ``read``: scaled so
    it reads about VERDICT_READ_BYTES (runs of long-lined logs read up to KEEP_ROWS lines of
    KEEP_TEXT each: a fixed count of them grew with the log, 200 MB for a 103 MB real log,
    issue 15), at most doubled, between 1 and VERDICT_BATCH."""
    size = sum(df.estimated_size() for tables in read.values() for df in tables.values())
    fit = n * VERDICT_READ_BYTES // size if size else VERDICT_BATCH
    return max(1, min(fit, 2 * n, VERDICT_BATCH))


def _batch_rows(
    store: Store, batch: pl.DataFrame, written: Written | None, held: set[str]
) -> dict[str, dict[str, pl.DataFrame]]:
    """classifier.batch_tables of the runs of ``batch``: those of the sources in ``held``
    from ``written``, the others from the store."""
    from forensics.classifier.stored import batch_tables

    mine = pl.col("source_id").is_in(list(held))
    out: dict[str, dict[str, pl.DataFrame]] = {}
    for ids, where in ((batch.filter(~mine), None), (batch.filter(mine), written)):
        if not ids.is_empty():
            out.update(batch_tables(store, ids["run_id"].to_list(), where))
    return out


# -- verdicts computed by an ingest worker (forensics/ingest/pool.py) ---------------------------
OPEN_RUNS = "open-runs"  # the name a worker gives the runs rows the main process stages


class _Kept:
    """A worker's parts of the one log it parsed, as ``refresh`` reads a store: what its
    ``Written`` kept of them, listed in the order the main process adopts them (a run's head
    and tail of lines depend on it)."""

    def __init__(self, written: Written, man: Any):
        self.written, self.man = written, man

    def manifest(self) -> Any:
        return self.man

    def reduced(self, name: str, reduce: Any, where: pl.Expr | None = None) -> pl.DataFrame:
        return self.written.reduced(self, name, reduce, pl.lit(True) if where is None else where)


def computed(
    written: Written, parts: list[tuple[str, str, list[str]]], open_runs: Any, source: dict
) -> dict[str, Any] | None:
    """In an ingest worker, after it wrote the parts of a log it parsed from byte 0: the
    verdict rows of the log's runs, computed as ``refresh`` computes them in the main
    process, over the same rows: ``written``, what it kept of its ``parts`` ((table, name,
    source keys), in their order), and ``open_runs``, the runs rows the main process stages
    with the log's source record (forensics/ingest/file.py ``_record``). ``source``: the
    source id (``id``), the store's folder (``store``) and what the verdict reads of the
    source record (``path``, ``mtime``). None where they cannot be: a part not kept (past
    WRITTEN_MAX_BYTES), no model but one trained now. The main process stores them only
    where they are the ones it would compute (``_accepted``)."""
    from forensics.runs import run_keys
    from forensics.store.manifest import Manifest

    model = _untrained(source["store"])
    if model is None:
        return None
    sid, man = source["id"], Manifest()
    for table, name, keys in parts:
        man.tables.setdefault(table, []).append(name)
        man.shared[name] = keys
    if open_runs is not None and not open_runs.is_empty():
        from forensics.tables import conform

        written.keep("runs", OPEN_RUNS, conform("runs", open_runs))  # as the main writes it
        man.tables.setdefault("runs", []).append(OPEN_RUNS)
        man.shared[OPEN_RUNS] = [sid + "~runs"]
    kept = _Kept(written, man)
    if written.covers(kept, [sid]) != {sid}:
        return None
    src = {"path": source["path"], "mtime": source["mtime"]}
    batches = _classified(kept, run_keys(kept), written, {sid}, model, ({sid: src}, {}), None)
    rows = [row for batch in batches for row in batch]
    return {"model": _fingerprint(model), "source": src, "rows": rows}


def _accepted(
    ready: dict[str, dict[str, Any]],
    runs: pl.DataFrame,
    model: Any,
    sources: dict[str, dict],
    labels: dict[str, dict],
) -> dict[str, list[dict[str, Any]]]:
    """Per source id of ``ready`` (``computed`` by the worker that parsed the log), its
    verdict rows where they are the ones ``refresh`` would compute here: the same model, no
    label of the log (a worker reads no label), the source record's path and mtime it saw,
    and the same runs (the store holds no run of the log that the worker did not parse)."""
    fp = _fingerprint(model)
    per_source = dict(runs.group_by("source_id").agg("run_id").iter_rows())
    out = {}
    for sid, r in ready.items():
        src = sources.get(sid, {})
        if r["model"] != fp or labels.get(sid) or sid not in per_source:
            continue
        if r["source"] != {"path": src.get("path"), "mtime": src.get("mtime")}:
            continue
        if [row["run_id"] for row in r["rows"]] == list(per_source[sid]):
            out[sid] = r["rows"]
    return out


_UNTRAINED: dict[str, Any] = {}  # store folder -> model (a worker's process: one ingest's)


def _untrained(root: str) -> Any:
    """The model a worker classifies with (modelstore.model_untrained), loaded once."""
    from types import SimpleNamespace

    from forensics.classifier.modelstore import model_untrained

    if root not in _UNTRAINED:
        _UNTRAINED[root] = model_untrained(SimpleNamespace(root=root))
    return _UNTRAINED[root]


def _fingerprint(model: Any) -> str:
    """Which model: the packaged one (the same file in the worker: the same package), else
    its data's digest (a model saved in the store, or trained now)."""
    import hashlib

    if model.packaged:
        return "packaged:" + str(model.data.get("digest"))
    data = json.dumps(model.data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(data.encode()).hexdigest()


def warm(store_root: str | None = None) -> None:
    """What ``refresh`` needs before it reads a row, ahead: the classifier's imports and the
    packaged model (cached in the process). Ingest runs it in a thread beside a parse (the
    line reader and polars leave the GIL free most of the time; ~0.1 s of an ingest). It
    reads nothing of the store, whose caches are the main thread's. ``store_root``: in an
    ingest worker, the model ``computed`` uses (``_untrained``)."""
    try:
        from forensics.classifier import load_model
        from forensics.classifier.labels import _labels_for  # noqa: F401 - imported ahead
        from forensics.classifier.stored import classify_stored  # noqa: F401 - imported ahead

        if store_root is None:
            load_model(None)  # modelstore._MODEL_CACHE: refresh's load_model starts from it
        else:
            _untrained(store_root)
    except Exception:  # noqa: BLE001 - refresh does it again and reports what fails
        pass


def _per_run(tables: dict[str, pl.DataFrame] | None) -> dict[int, Any]:
    """A log's analysis tables (classifier.batch_tables) split by run."""
    from forensics.classifier.analysis import RunRows

    if not tables:
        return {}
    per_run: dict[int, dict[str, pl.DataFrame]] = {}
    for name, df in tables.items():
        if df.is_empty() or "run_index" not in df.columns:
            continue
        runs = df["run_index"]
        if runs.null_count() == 0 and runs.min() == runs.max():  # one run (most logs): whole
            per_run.setdefault(int(runs[0]), {})[name] = df
            continue
        for (ri,), part in df.partition_by("run_index", as_dict=True).items():
            per_run.setdefault(int(ri), {})[name] = part
    empty = {name: df.clear() for name, df in tables.items()}
    return {ri: RunRows({**empty, **t}) for ri, t in per_run.items()}


def _row(rid: str, v: Any) -> dict[str, Any]:
    return {
        "run_id": rid,
        "key": STORED_KEY,
        "phase": v.phase,
        "hung": v.hung,
        "signature": v.signature,
        "confidence": round(v.confidence, 3),
        "verdict": json.dumps(asdict(v), default=str, ensure_ascii=False),
    }


def explained(store: Store, run: dict[str, Any]):
    """The whole stored verdict of a runs-table row (a classifier ``Verdict``): what diagnose
    and the report show. Classified now (not stored) when the store has none for it."""
    from forensics.classifier import Verdict, classify_stored

    df = store.table(TABLE)
    if not df.is_empty() and "verdict" in df.columns:
        hit = df.filter(pl.col("run_id") == run["run_id"]).tail(1)
        if not hit.is_empty():
            d = json.loads(hit["verdict"][0] or "{}")
            names = {f.name for f in fields(Verdict)}
            if "explanation" in d and {"phase", "hung", "confidence"} <= set(d):
                return Verdict(**{k: v for k, v in d.items() if k in names})
    return classify_stored(store, run["source_id"], int(run["run_index"]))


def unverdicted(store: Store) -> set[str]:
    """The sources of runs with no stored verdict: an ingest interrupted (Ctrl-C, SIGTERM)
    between its commit and its verdict step. The next ingest classifies them, so every
    read does not classify them again in memory."""
    from forensics.runs import base_runs

    runs = base_runs(store)
    if runs.is_empty():
        return set()
    df = store.table(TABLE)
    done = (
        df.select("run_id")
        if "run_id" in df.columns
        else pl.DataFrame(schema={"run_id": pl.String})
    )
    return set(runs.join(done, on="run_id", how="anti")["source_id"].to_list())


def stored_verdicts(store: Store, runs: pl.DataFrame) -> pl.DataFrame:
    """COLUMNS for the runs of ``runs`` (run_id, source_id, run_index): stored, else computed
    in memory (not written)."""
    df = store.table(TABLE)
    have = pl.DataFrame(schema=COLUMNS)
    if not df.is_empty() and set(COLUMNS) <= set(df.columns):
        have = (
            df.select([pl.col(c).cast(t) for c, t in COLUMNS.items()])
            .unique("run_id", keep="last", maintain_order=True)
            .join(runs.select("run_id"), on="run_id", how="semi")
        )
    missing = runs.join(have, on="run_id", how="anti")
    if missing.is_empty():
        return have
    return pl.concat([have, _classify_in_memory(store, missing)], how="vertical_relaxed")


def _classify_in_memory(store: Store, runs: pl.DataFrame) -> pl.DataFrame:
    from forensics.classifier import classify_stored, load_model

    model = load_model(store)
    rows: list[dict[str, Any]] = []
    for rid, sid, ri in runs.select("run_id", "source_id", "run_index").iter_rows():
        v = classify_stored(store, sid, int(ri), model)
        rows.append(
            {
                "run_id": rid,
                "phase": v.phase,
                "hung": v.hung,
                "signature": v.signature,
                "confidence": round(v.confidence, 3),
            }
        )
    return pl.DataFrame(rows, schema=COLUMNS)


def label(store: Store, match: str, phase: str) -> list[dict[str, Any]]:
    """``forensics label``: record the user's phase, then store the run's new verdict."""
    from forensics.classifier import label as record_label

    rows = record_label(store, match, phase)
    refresh(store, {r["source_id"] for r in rows})
    return rows


def train(store: Store):
    """``forensics classify train``: fit the model, then store every run's verdict under it.

    The store is checked before the fit: a damaged or read-only store is refused at once
    (exit 7), not after a minute of training (issue 14, seventh round)."""
    from forensics.classifier import train as fit

    store.manifest()  # StoreDamaged (exit 7) before any work
    store.require_writable("cannot save the retrained model")
    model = fit(store)
    refresh(store)
    return model
