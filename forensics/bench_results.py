"""Result files of other benchmark tools -> the ``bench`` table, each attached to its run.

``forensics ingest`` routes ``*.json`` / ``*.jsonl`` inputs here (after the logs of the same
call, so a log and its benchmarks can be ingested together). The file is parsed by
``forensics_parsers.benchresults`` (SGLang ``bench_serving``, ``vllm bench serve``, AIPerf) and
each result is attached to one run by the first rule of ``ATTACH_RULES`` that names exactly
one; ``--run NAME`` attaches every result of the file to that run instead. A result no rule
attaches is stored with no run (a warning says so); ingesting the file again once its log is
in the store attaches it then.

A results file is a source of the store like a log: unchanged (size, mtime, first bytes) and
fully attached -> skipped; otherwise its rows are replaced, so ingesting twice stores once.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from forensics.errors import ParseError

if TYPE_CHECKING:
    import polars as pl

    from forensics.ingest import FileOutcome, IngestSummary
    from forensics.store import Store

RESULT_SUFFIXES = (".json", ".jsonl")
WINDOW_SLACK_S = 60.0  # a run's log may end a little before the last request it served
HEAD_BYTES = 4096


# forensics launch's own journal beside a log (<log>.journal.jsonl, forensics/launcher/) is
# not a benchmark result: it stays with the logs, as before results were read
NOT_RESULTS = (".journal.jsonl",)


def is_results_file(path: str) -> bool:
    p = path.lower()
    return p.endswith(RESULT_SUFFIXES) and not p.endswith(NOT_RESULTS)


# --------------------------------------------------------------------------------------
# Attaching a result to its run
# --------------------------------------------------------------------------------------
def _last_part(p: Any) -> str:
    return PurePosixPath(str(p).rstrip("/")).name.lower() if p else ""


def _hints(rec: dict[str, Any]) -> dict[str, Any]:
    """What a result says about the server it measured: port, model, SGLang settings."""
    server = json.loads(rec["server"]) if rec.get("server") else {}
    port = server.get("port") if isinstance(server.get("port"), int) else None
    if port is None and rec.get("url"):
        try:
            port = urlsplit(rec["url"]).port
        except ValueError:
            port = None
    return {
        "port": port,
        "model": server.get("model_path") or rec.get("model"),
        # SGLang's server_info carries the launch's settings: a run must agree with each
        "settings": {
            "tp_size": server.get("tp_size"),
            "spec_algorithm": server.get("speculative_algorithm"),
            "num_steps": server.get("speculative_num_steps"),
            "topk": server.get("speculative_eagle_topk"),
            "num_draft_tokens": server.get("speculative_num_draft_tokens"),
        },
    }


def _agrees(run: dict[str, Any], hints: dict[str, Any]) -> bool:
    """Nothing the result says about its server contradicts this run."""
    if hints["port"] is not None and run.get("port") is not None:
        if str(run["port"]) != str(hints["port"]):
            return False
    for col, want in hints["settings"].items():
        have = run.get(col)
        if want is not None and have is not None and str(want).lower() != str(have).lower():
            return False
    return True


def _same_model(run: dict[str, Any], hints: dict[str, Any]) -> bool:
    """Model names compare by their last path part: a served name, an HF id or a local path."""
    return bool(hints["model"]) and _last_part(run.get("model_path")) == _last_part(hints["model"])


def _window(rec: dict[str, Any]) -> tuple[dt.datetime, dt.datetime] | None:
    start = rec.get("started_at")
    if start is None:
        return None
    return start, start + dt.timedelta(seconds=rec.get("duration_s") or 0.0)


def _by_window(runs: list[dict[str, Any]], rec: dict[str, Any]) -> list[dict[str, Any]]:
    win = _window(rec)
    if win is None:
        return []
    slack = dt.timedelta(seconds=WINDOW_SLACK_S)
    hints = _hints(rec)
    hits = [
        r
        for r in runs
        if r.get("started_at") is not None
        and r["started_at"] <= win[0]
        and win[1] <= (r.get("ended_at") or r["started_at"]) + slack
        and _agrees(r, hints)
    ]
    same = [r for r in hits if _same_model(r, hints)]
    return same if len(hits) > 1 and same else hits


def _by_server(runs: list[dict[str, Any]], rec: dict[str, Any]) -> list[dict[str, Any]]:
    hints = _hints(rec)
    if hints["port"] is None or not hints["model"]:
        return []
    hits = [r for r in runs if r.get("port") is not None and _agrees(r, hints)]
    hits = [r for r in hits if _same_model(r, hints)]
    win = _window(rec)
    # the run started before the benchmark ended (or before the file was last written)
    end = win[1] if win is not None else rec.get("_not_after")
    if end is not None:
        hits = [r for r in hits if r.get("started_at") is None or r["started_at"] <= end]
    if len(hits) > 1:  # relaunches of one configuration: the latest of them served it
        hits.sort(key=lambda r: r.get("started_at") or dt.datetime.min)
        hits = hits[-1:]
    return hits


@dataclass(frozen=True)
class AttachRule:
    name: str  # the `attached_by` column
    says: str  # docs/bench.md
    candidates: Callable[[list[dict[str, Any]], dict[str, Any]], list[dict[str, Any]]]


ATTACH_RULES: tuple[AttachRule, ...] = (
    AttachRule(
        "window",
        "the benchmark ran inside the run's log (its start to its last line, + 60 s), and the "
        "port and SGLang settings the result names do not contradict the run's; of several, "
        "those of the same model",
        _by_window,
    ),
    AttachRule(
        "server",
        "the server the result names (port and model, and SGLang's settings from its "
        "server_info) is the run's; of relaunches of one configuration, the latest that "
        "started before the benchmark ended",
        _by_server,
    ),
)


def attach(
    runs: pl.DataFrame,
    bench: pl.DataFrame,
    *,
    run: tuple[str, str] | None = None,
    not_after: dt.datetime | None = None,
) -> tuple[pl.DataFrame, list[str]]:
    """Fill ``run_id`` and ``attached_by`` of imported rows; warnings for those left alone.

    ``run``: (run_id, name) given by the user. ``not_after``: the file's mtime, a bound on
    when a result without its own time ended (SGLang's JSONL is appended at the end)."""
    import polars as pl

    if run is not None:
        return bench.with_columns(
            pl.lit(run[0]).alias("run_id"), pl.lit("run").alias("attached_by")
        ), []
    cols = [
        c
        for c in (
            "run_id",
            "name",
            "started_at",
            "ended_at",
            "port",
            "model_path",
            "tp_size",
            "spec_algorithm",
            "num_steps",
            "topk",
            "num_draft_tokens",
        )
        if c in runs.columns
    ]
    rows = runs.select(cols).to_dicts() if not runs.is_empty() else []
    ids: list[str | None] = []
    how: list[str | None] = []
    warnings: list[str] = []
    for rec in bench.iter_rows(named=True):
        rec["_not_after"] = not_after
        got: tuple[str | None, str | None] = (None, None)
        tried: list[str] = []
        for rule in ATTACH_RULES:
            hits = rule.candidates(rows, rec)
            if len(hits) == 1:
                got = (str(hits[0]["run_id"]), rule.name)
                break
            if len(hits) > 1:
                names = ", ".join(str(h.get("name")) for h in hits[:4])
                tried.append(f"{len(hits)} runs fit by {rule.name} ({names})")
        ids.append(got[0])
        how.append(got[1])
        if got[0] is None:
            why = "; ".join(tried) or "no run in the store fits its time or server"
            warnings.append(f"result {rec['record']} ({rec['tool']}): not attached: {why}")
    return bench.with_columns(
        pl.Series("run_id", ids, dtype=pl.String),
        pl.Series("attached_by", how, dtype=pl.String),
    ), warnings


def _with_log_accept_len(
    store: Store, bench: pl.DataFrame, decode: Callable[[], pl.DataFrame]
) -> pl.DataFrame:
    """The attached run's own accept length inside each timed result's window (as
    ``forensics bench`` records it: ``accept_len_log``, ``accept_len_log_lines``)."""
    import polars as pl

    from forensics.bench import log_accept_len

    timed = bench.filter(pl.col("run_id").is_not_null() & pl.col("started_at").is_not_null())
    if timed.is_empty():
        return bench
    dec = decode()
    means: list[float | None] = []
    lines: list[int | None] = []
    for r in bench.iter_rows(named=True):
        m, n = (None, None)
        if r["run_id"] is not None and r["started_at"] is not None:
            m, n = log_accept_len(store, r["run_id"], r["started_at"], r["duration_s"] or 0.0, dec)
        means.append(m)
        lines.append(n)
    return bench.with_columns(
        pl.Series("accept_len_log", means, dtype=pl.Float64),
        pl.Series("accept_len_log_lines", lines, dtype=pl.Int64),
    )


# --------------------------------------------------------------------------------------
# Ingesting one results file
# --------------------------------------------------------------------------------------
class RunIndex:
    """What results attach to, read once per ingest call however many results files it
    has (the logs of the call are ingested before them): the runs table, the run ``--run``
    names, the decode lines."""

    def __init__(self, store: Store, run: str | None = None):
        self.store = store
        self.run = run
        self._memo: dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def runs(self) -> pl.DataFrame:
        from forensics.runs import runs_table

        return self._once("runs", lambda: runs_table(self.store, classify=False))

    def target(self) -> tuple[str, str] | None:
        from forensics.bench import resolve_run

        if self.run is None:
            return None
        return self._once("target", lambda: resolve_run(self.store, self.run))

    def decode(self) -> pl.DataFrame:
        from forensics.bench.storage import LOG_ACCEPT_COLUMNS

        cols = list(LOG_ACCEPT_COLUMNS)
        return self._once("decode", lambda: self.store.columns("decode", cols))


def ingest_results(
    store: Store,
    host: Any,
    path: str,
    out: FileOutcome,
    summary: IngestSummary,
    *,
    run: str | None = None,
    lock_timeout: float | None = None,
    index: RunIndex | None = None,
) -> FileOutcome:
    """Parse, attach and store one results file (one transaction). Raises ParseError when
    the file is not a result of a known tool."""
    from forensics_parsers.benchresults import MAX_BYTES, NotBenchResult, parse

    st = host.stat(path)
    if st.size > MAX_BYTES:  # refused before it is read: memory stays bounded
        raise ParseError(
            f"{path}: {st.size >> 20} MiB, more than the {MAX_BYTES >> 20} MiB a results "
            "file may hold",
            hint="split it, or re-run the tool without per-request details",
        )
    data = host.read(path)
    head_hash = hashlib.sha1(data[:HEAD_BYTES]).hexdigest()
    prev = store.sources().get(out.source_id)
    if (
        prev is not None
        and prev.get("kind") == "benchresults"
        and (prev.get("size"), prev.get("mtime"), prev.get("head_hash_full"))
        == (st.size, st.mtime, head_hash)
        and prev.get("run") == run
        and prev.get("attached") == prev.get("results")
    ):
        out.status = "unchanged"
        out.results = prev.get("results", 0)
        out.attached = prev.get("attached", 0)
        return out
    try:
        res = parse(data, source=out.source_id)
    except NotBenchResult as exc:
        raise ParseError(f"{path}: {exc.cause}", hint=exc.fix) from None
    index = index or RunIndex(store, run)
    bench, warnings = attach(
        index.runs(),
        res.bench,
        run=index.target(),
        not_after=dt.datetime.fromtimestamp(st.mtime),
    )
    bench = _with_log_accept_len(store, bench, index.decode)
    summary.warnings.extend(f"{path}: {w}" for w in res.warnings + warnings)
    with store.transaction(lock_timeout) as tx:
        if prev is not None:
            out.status = "rewritten"
            tx.drop_source(out.source_id)
        tx.append("bench", bench, source_id=out.source_id)
        tx.append("bench_requests", res.requests, source_id=out.source_id)
        out.results = bench.height
        out.attached = int(bench["run_id"].is_not_null().sum())
        tx.set_source(
            out.source_id,
            {
                "kind": "benchresults",
                "tools": res.tools,
                "path": path,
                "host": host.name,
                "size": st.size,
                "mtime": st.mtime,
                "head_hash_full": head_hash,
                "run": run,
                "results": out.results,
                "attached": out.attached,
                "ingested_at": dt.datetime.now().timestamp(),
            },
        )
    out.bytes_parsed = len(data)
    return out


__all__ = [
    "ATTACH_RULES",
    "RESULT_SUFFIXES",
    "RunIndex",
    "attach",
    "ingest_results",
    "is_results_file",
]
