"""The one table of every run: configuration, startup timings, decode metrics, outcome.

Derived from the stored parse (``runs``, ``events``, ``decode``, ``errors``) at read time,
joined with the verdicts stored at ingest (``verdicts``, written by :mod:`forensics.verdicts`)
and the latest benchmark of each run (``bench``). Reading never writes to the store. Each run
carries its experiment (:mod:`forensics.experiment`): the key every comparison is made within.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from forensics.errors import RunNotFound, UsageError
from forensics.runs_bench import latest_bench
from forensics.store import Store

# The columns of `forensics runs`, in order (JSON: these keys; null where unknown).
RUN_COLUMNS = [
    "run_id",
    "name",
    "path",
    "host",
    "started_at",
    "model_path",
    "draft_model_path",
    "spec_algorithm",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "cuda_graph",
    "tp_size",
    "phase_reached",
    "load_s",
    "capture_s",
    "ready_s",
    "decode_lines",
    "gen_throughput_median",
    "accept_len_mean",
    "accept_rate_mean",
    "accept_rate_norm",
    "phase",
    "hung",
    "signature",
    "bench_tok_s",
    "bench_accept_len",
    "bench_results",  # completed benchmarks of the run (bench_tok_s is the latest one's)
    "error",
    "experiment",  # forensics.experiment: the runs it may be compared with
    "sweep",  # the sweep that launched it (forensics sweep), and its config there
    "sweep_config",
]


@dataclass(frozen=True)
class ConfigColumn:
    """One configuration column of a run: where it is used, declared once.

    ``similarity``: its weight when diagnose looks for the closest run that worked (None: not
    compared); ``show``: listed by ``forensics show``; ``classify``: given to the classifier.
    """

    name: str
    similarity: float | None = None
    show: bool = True
    classify: bool = False


# The configuration of a run (the parser's ``runs`` frame), in display order.
CONFIG_COLUMNS: list[ConfigColumn] = [
    ConfigColumn("model_path", similarity=5),
    ConfigColumn("draft_model_path", similarity=2),
    ConfigColumn("spec_algorithm", similarity=2, classify=True),
    ConfigColumn("num_steps", similarity=1, classify=True),
    ConfigColumn("topk", similarity=1, classify=True),
    ConfigColumn("num_draft_tokens", similarity=1, classify=True),
    ConfigColumn("cuda_graph", similarity=1.5, classify=True),
    ConfigColumn("cuda_graph_max_bs", similarity=0.5),
    ConfigColumn("tp_size", similarity=2, classify=True),
    ConfigColumn("dp_size"),
    ConfigColumn("ep_size"),
    ConfigColumn("port"),
    ConfigColumn("mem_fraction", similarity=0.5, classify=True),
    ConfigColumn("config_source"),
    ConfigColumn("style"),
]
COMPARED_COLUMNS = [c.name for c in CONFIG_COLUMNS if c.similarity is not None]
SHOWN_COLUMNS = [c.name for c in CONFIG_COLUMNS if c.show]
CLASSIFIER_COLUMNS = [c.name for c in CONFIG_COLUMNS if c.classify]

# phase_reached: furthest startup stage seen, highest rank wins.
STAGE_RANK = [
    ("server_args", "args", 1),
    ("dist_init_begin", "load", 2),
    ("dist_init_end", "load", 2),
    ("load_begin", "load", 2),
    ("load_end", "load", 2),
    ("kv_pool", "load", 2),
    ("pool_end", "load", 2),
    ("capture_begin", "capture", 3),
    ("capture_progress", "capture", 3),
    ("capture_end", "capture", 3),
    ("capacity", "capture", 3),
    ("uvicorn_started", "capture", 3),
    ("warmup", "capture", 3),
    ("ready", "ready", 4),
]
PHASE_NAMES = {0: "none", 1: "args", 2: "load", 3: "capture", 4: "ready", 5: "serving"}


def _run_names(runs: pl.DataFrame) -> pl.DataFrame:
    counts = runs.group_by("source_id").agg(pl.len().alias("_n"))
    runs = runs.join(counts, on="source_id", how="left")
    from forensics.logsource import COMPRESSED_SUFFIXES

    # the file name without its compression suffix (FORMATS) and its last extension
    packed = "|".join(re.escape(x) for x in COMPRESSED_SUFFIXES)
    stem = (
        pl.col("path")
        .str.replace(r"^.*/", "")
        .str.replace(f"({packed})$", "")
        .str.replace(r"^(.*)\.[^.]*$", "${1}")
    )
    return runs.with_columns(
        (pl.col("source_id") + ":" + pl.col("run_index").cast(pl.String)).alias("run_id"),
        pl.when(pl.col("_n") > 1)
        .then(stem + "#" + (pl.col("run_index") + 1).cast(pl.String))
        .otherwise(stem)
        .alias("name"),
    ).drop("_n")


def _run_keys(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.select("source_id", "run_index").unique()


def run_keys(store: Store, source_ids: Iterable[str] | None = None) -> pl.DataFrame:
    """run_id, source_id, run_index of the stored runs (of ``source_ids``), sorted: two
    columns read part by part, never the runs table whole (the server_args of 100,000
    launches: verdicts.refresh)."""
    keys = store.reduced("runs", _run_keys)
    if source_ids is not None:
        keys = keys.filter(pl.col("source_id").is_in(list(source_ids)))
    return keys.sort("source_id", "run_index").select(
        (pl.col("source_id") + ":" + pl.col("run_index").cast(pl.String)).alias("run_id"),
        "source_id",
        "run_index",
    )


def base_runs(store: Store) -> pl.DataFrame:
    runs = store.table("runs")
    if runs.is_empty():
        return pl.DataFrame()
    runs = runs.unique(["source_id", "run_index"], keep="last", maintain_order=True)
    return (
        _run_names(runs)
        .rename({"host_name": "host_at"})
        .with_columns(pl.col("host_at").alias("host_name"))
    )


RUN_KEY = ("source_id", "run_index")  # a run's key in every table but runs' own run_id


def _timings(store: Store) -> pl.DataFrame:
    ev = store.columns("events", [*RUN_KEY, "stage", "scope", "ts", "elapsed_s"])
    if ev.is_empty():
        return pl.DataFrame(
            schema={
                "source_id": pl.String,
                "run_index": pl.Int32,
                "_rank": pl.Int32,
                "load_s": pl.Float64,
                "capture_s": pl.Float64,
                "ready_s_ev": pl.Float64,
            }
        )
    key = ["source_id", "run_index"]
    rank_map = {stage: r for stage, _, r in STAGE_RANK}
    ev = ev.lazy()  # one plan, one collect: the scans of `ev` below are shared
    reached = ev.group_by(key).agg(
        pl.col("stage")
        .replace_strict(rank_map, default=0, return_dtype=pl.Int32)
        .max()
        .alias("_rank")
    )
    t_load_begin = (
        ev.filter((pl.col("stage") == "load_begin") & (pl.col("scope") == "target"))
        .group_by(key)
        .agg(pl.col("ts").min().alias("_lb"))
    )
    t_load_end = (
        ev.filter((pl.col("stage") == "load_end") & (pl.col("scope") == "target"))
        .group_by(key)
        .agg(pl.col("ts").max().alias("_le"), pl.col("elapsed_s").max().alias("_le_el"))
    )
    cap_end = (
        ev.filter(pl.col("stage") == "capture_end")
        .group_by([*key, "scope"])
        .agg(pl.col("elapsed_s").max().alias("_c"))
        .group_by(key)
        .agg(pl.col("_c").sum().alias("_cap_el"))
    )
    cap_span = (
        ev.filter(pl.col("stage").is_in(["capture_begin", "capture_end"]))
        .group_by(key)
        .agg(
            (pl.col("ts").max() - pl.col("ts").min()).dt.total_milliseconds().alias("_cap_ms"),
            (pl.col("stage") == "capture_end").any().alias("_cap_ended"),
        )
        # a capture that never ended (crash, hang) has no duration here
        .filter(pl.col("_cap_ended"))
        .drop("_cap_ended")
    )
    first = ev.group_by(key).agg(pl.col("ts").min().alias("_t0"))
    ready = (
        ev.filter(pl.col("stage") == "ready").group_by(key).agg(pl.col("ts").min().alias("_ready"))
    )
    out = reached
    for df in (t_load_begin, t_load_end, cap_end, cap_span, first, ready):
        out = out.join(df, on=key, how="left")
    return out.with_columns(
        pl.coalesce(
            (pl.col("_le") - pl.col("_lb")).dt.total_milliseconds() / 1000.0,
            pl.col("_le_el"),
        ).alias("load_s"),
        pl.coalesce(pl.col("_cap_el"), pl.col("_cap_ms") / 1000.0).alias("capture_s"),
        ((pl.col("_ready") - pl.col("_t0")).dt.total_milliseconds() / 1000.0).alias("ready_s_ev"),
    ).collect()


def _decode_stats(store: Store) -> pl.DataFrame:
    """Per run: decode line count, median gen throughput, mean accept, and ``dec_streams``:
    1 when some line shows one request alone, else the median ``#running-req``."""
    cols = [*RUN_KEY, "gen_throughput", "accept_len", "accept_rate", "running_req"]
    dec = store.columns("decode", cols)
    if dec.is_empty():
        return pl.DataFrame(
            schema={
                "source_id": pl.String,
                "run_index": pl.Int32,
                "decode_lines": pl.UInt32,
                "gen_throughput_median": pl.Float64,
                "accept_len_mean": pl.Float64,
                "accept_rate_mean": pl.Float64,
                "dec_streams": pl.Int64,
            }
        )
    rr = pl.col("running_req").cast(pl.Int64, strict=False)
    return dec.group_by(["source_id", "run_index"]).agg(
        pl.len().alias("decode_lines"),
        pl.col("gen_throughput").cast(pl.Float64).median().alias("gen_throughput_median"),
        pl.col("accept_len").cast(pl.Float64).mean().alias("accept_len_mean"),
        pl.col("accept_rate").cast(pl.Float64).mean().alias("accept_rate_mean"),
        pl.when((rr == 1).any())
        .then(pl.lit(1, dtype=pl.Int64))
        .otherwise(rr.filter(rr > 0).median().round(0).cast(pl.Int64))
        .alias("dec_streams"),
    )


def _first_errors(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The first traceback and the first error of each run (a reduce for Store.reduced:
    what _first_error picks from, never the errors table whole)."""
    cols = ["source_id", "run_index", "line", "kind", "exc_type", "message"]
    tb = (pl.col("kind") == "traceback").fill_null(False)
    firsts = lf.select(cols).sort("line").with_columns(tb.alias("_tb"))
    return firsts.group_by("source_id", "run_index", "_tb").first().drop("_tb")


def _first_error(store: Store) -> pl.DataFrame:
    err = store.reduced("errors", _first_errors)
    if err.is_empty():
        # no errors anywhere in the store: the column still exists (runs --json, signatures)
        return pl.DataFrame(
            schema={"source_id": pl.String, "run_index": pl.Int32, "error": pl.String}
        )
    tb = err.filter(pl.col("kind") == "traceback")
    chosen = tb if not tb.is_empty() else err
    return (
        chosen.sort("line")
        .group_by(["source_id", "run_index"])
        .agg(
            pl.when(pl.col("exc_type").first().is_not_null())
            .then(pl.col("exc_type").first() + ": " + pl.col("message").first().fill_null(""))
            .otherwise(pl.col("message").first())
            .str.slice(0, 200)
            .alias("error")
        )
    )


# Columns runs_table keeps beside RUN_COLUMNS for the library's own use (keys, shape, times)
INTERNAL_COLUMNS = (
    "source_id",
    "run_index",
    "first_line",
    "last_line",
    "port",
    "style",
    "config_source",
    "ended_at",
    "mem_fraction",
    "dp_size",
    "ep_size",
    "cuda_graph_max_bs",
    "streams",
    "bench_at",
    "bench_rate",
    "bench_in_len",
    "bench_out_len",
    "gpu_model",
)


def runs_table(
    store: Store,
    match: str | None = None,
    *,
    classify: bool = True,
    group_by: str | list[str] | None = None,
) -> pl.DataFrame:
    """One row per run with RUN_COLUMNS (plus internal keys source_id, run_index, ...).

    ``phase``/``hung``/``signature`` are the verdicts stored at ingest (``classify=False``
    leaves them null); ``experiment`` follows ``group_by`` (:mod:`forensics.experiment`).
    """
    from forensics import experiment

    runs = base_runs(store)
    if runs.is_empty():
        return pl.DataFrame(schema={c: pl.String for c in RUN_COLUMNS})
    key = ["source_id", "run_index"]
    df = runs.join(_timings(store), on=key, how="left").join(
        _decode_stats(store), on=key, how="left"
    )
    df = df.join(_first_error(store), on=key, how="left")
    gpu = experiment.gpu_models(store.reduced("lines", experiment.gpu_lines))
    df = df.join(gpu, on=key, how="left")
    df = df.join(latest_bench(store), on="run_id", how="left")
    has_decode = pl.col("decode_lines").fill_null(0) > 0
    args = pl.col("server_args") if "server_args" in df.columns else pl.lit(None, pl.String)
    df = df.with_columns(
        pl.when(has_decode)
        .then(pl.lit(5))
        .otherwise(pl.col("_rank").fill_null(0))
        .replace_strict(PHASE_NAMES, return_dtype=pl.String)
        .alias("phase_reached"),
        pl.col("decode_lines").fill_null(0),
        pl.col("bench_results").fill_null(0),
        pl.col("ready_s_ev").alias("ready_s"),
        pl.col("host_name").alias("host"),
        # version-independent accept rate: accepted drafts / proposed drafts per round
        pl.when(pl.col("accept_len_mean").is_not_null())
        .then(
            (pl.col("accept_len_mean") - 1.0)
            / pl.coalesce(pl.col("num_draft_tokens") - 1, pl.col("num_steps")).cast(pl.Float64)
        )
        .otherwise(None)
        .alias("accept_rate_norm"),
        args.str.json_path_match("$.ep_size").cast(pl.Int32, strict=False).alias("ep_size"),
        # requests in flight: the benchmark's shape, else what the decode lines show
        pl.when(pl.col("bench_tok_s").is_not_null())
        .then(pl.col("bench_streams"))
        .otherwise(pl.col("dec_streams"))
        .alias("streams"),
    )
    if classify:
        from forensics.verdicts import stored_verdicts

        df = df.join(stored_verdicts(store, df), on="run_id", how="left")
    for col in ("phase", "hung", "signature"):
        if col not in df.columns:
            df = df.with_columns(
                pl.lit(None, dtype=pl.Boolean if col == "hung" else pl.String).alias(col)
            )
    df = experiment.assign(df, group_by, store.get_meta(experiment.LABELS_META) or None)
    from forensics.sweep.journal import run_tags  # (forensics.sweep: not for an ingest)

    df = df.join(run_tags(store), on="run_id", how="left")
    df = df.sort(["started_at", "path", "run_index"], nulls_last=True)
    if match:
        df = filter_match(df, match)
    cols = [c for c in RUN_COLUMNS if c in df.columns]
    extra = [*INTERNAL_COLUMNS, *[c for c in df.columns if c.startswith("exp_")]]
    return df.select([*cols, *[c for c in extra if c in df.columns and c not in cols]])


def filter_match(df: pl.DataFrame, match: str) -> pl.DataFrame:
    """Which runs a NAME means, the one rule (runs, show, diagnose, bench --run, baseline RUN,
    label): the exact name or run id first; else a case-insensitive fragment of the name or
    path."""
    exact = df.filter((pl.col("name") == match) | (pl.col("run_id") == match))
    if not exact.is_empty():
        return exact
    m = match.lower()
    return df.filter(
        pl.col("name").str.to_lowercase().str.contains(m, literal=True)
        | pl.col("path").str.to_lowercase().str.contains(m, literal=True)
    )


def find_runs(
    store: Store, match: str, *, classify: bool = True, table: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Runs matching a name fragment, newest first; RunNotFound names the runs that exist.

    ``table``: the runs table when the caller already built it (it is not built twice).
    """
    if not match or not match.strip():
        raise UsageError(
            f"{match!r}: an empty run name matches every run",
            hint="give a run name, a fragment of it, or a run id (forensics runs)",
        )
    df = runs_table(store, classify=classify) if table is None else table
    if df.is_empty():
        raise RunNotFound(
            f"{match}: no runs in the store {store.root}",
            hint="forensics ingest /path/to/*.log",
        )
    hit = filter_match(df, match)
    if hit.is_empty():
        names = ", ".join(df["name"].unique(maintain_order=True).head(12).to_list())
        raise RunNotFound(f"{match}: no run matches (runs: {names})", hint="forensics runs")
    return hit.sort("started_at", descending=True, nulls_last=True)


def find_run(store: Store, match: str, *, classify: bool = True, what: str | None = None) -> dict:
    """The one run ``match`` names (find_runs' rules). Several: UsageError (exit 2) listing
    them, never a silent pick. ``what``: how the caller shows the argument (``--run X``)."""
    return only_one(find_runs(store, match, classify=classify), match, what)


def only_one(hits: pl.DataFrame, match: str, what: str | None = None) -> dict:
    """The one row of ``hits`` (runs ``match`` named); several: UsageError (exit 2) listing
    name, run id and path of each: the one rule of every command that acts on one run (show,
    plot decode, bench --run, baseline RUN / --baseline RUN, label)."""
    if hits.height > 1:
        rows = hits.head(10).iter_rows(named=True)
        names = ", ".join(f"{r['name']} ({r['run_id']}, {r.get('path')})" for r in rows)
        more = f" and {hits.height - 10} more" if hits.height > 10 else ""
        raise UsageError(
            f"{what or match}: matches {hits.height} runs: {names}{more}",
            hint="give the exact run name or its run id",
        )
    return hits.row(0, named=True)


# Startup segments of the timeline: (name, begin stage, end stage, scope or None for any).
SEGMENTS = [
    ("dist_init", "dist_init_begin", "dist_init_end", None),
    ("load target", "load_begin", "load_end", "target"),
    ("kv pool target", "kv_pool", "pool_end", "target"),
    ("capture target", "capture_begin", "capture_end", "target"),
    ("load draft", "load_begin", "load_end", "draft"),
    ("kv pool draft", "kv_pool", "pool_end", "draft"),
    ("capture draft", "capture_begin", "capture_end", "draft"),
    ("capture draft extend", "capture_begin", "capture_end", "draft_extend"),
    ("warmup", "uvicorn_started", "ready", None),
]


def stage_timeline(store: Store, source_id: str, run_index: int) -> list[dict]:
    """Startup segments of one run: start offset and duration (s), and whether each ended."""
    where = pl.col("run_index") == run_index  # the run's rows, read part by part
    ev = store.source_rows("events", source_id, where=where)
    if ev.is_empty():
        return []
    return timeline_from_events(ev, last_ts=_last_ts(store, source_id, where))


def _last_ts(store: Store, source_id: str, where: pl.Expr):
    r = store.source_rows("runs", source_id, where=where)
    return r["ended_at"][-1] if not r.is_empty() else None


# Stages that mark startup progress: a segment SGLang prints no end line for ends where the
# next of these begins (capture_progress is a bar frame inside a segment, not a new stage).
STARTUP_STAGES = frozenset(stage for stage, _, _ in STAGE_RANK) - {"capture_progress"}


def timeline_from_events(ev: pl.DataFrame, *, last_ts=None) -> list[dict]:
    """Startup segments, in the order they began; ``ready`` last when the run got there.

    A segment ends at its own end line (the last rank's). Where SGLang prints none for it, it
    ends where the next startup stage begins: ≥0.5.14 allocates the target and draft KV pools
    back to back and prints one ``Memory pool end`` for both, so the draft pool ends there
    (``end``: ``"line"``, ``"next stage"``). Only a segment nothing follows is unfinished
    (``ended`` false, ``end`` null): the run died or hung in it. A run that reached ready
    therefore has no unfinished segment before ready.
    """
    if ev.is_empty() or ev["ts"].null_count() == len(ev):
        return []
    ev = ev.filter(pl.col("ts").is_not_null()).sort("line")
    t0 = ev["ts"].min()
    progress = ev.filter(pl.col("stage").is_in(list(STARTUP_STAGES)))
    out = []
    for name, b, e, scope in SEGMENTS:
        sub = ev if scope is None else ev.filter(pl.col("scope") == scope)
        begins = sub.filter(pl.col("stage") == b)
        if begins.is_empty():
            continue
        tb = begins["ts"].min()
        ends = sub.filter((pl.col("stage") == e) & (pl.col("line") > begins["line"].min()))
        # the next stage: any startup event after the last begin but this segment's own begins
        own = pl.col("stage") == b
        if scope is not None:
            own = own & (pl.col("scope") == scope)
        after = progress.filter((pl.col("line") > begins["line"].max()) & ~own)
        end: str | None
        if not ends.is_empty():
            te, ended, end = ends["ts"].max(), True, "line"
        elif not after.is_empty():
            te, ended, end = after["ts"][0], True, "next stage"
        else:
            te = last_ts if last_ts is not None else sub["ts"].max()
            ended, end = False, None
        out.append(
            {
                "segment": name,
                "_line": begins["line"].min(),
                "start_s": (tb - t0).total_seconds(),
                "duration_s": max(0.0, (te - tb).total_seconds()) if te is not None else None,
                "ended": ended,
                "end": end,
            }
        )
    out.sort(key=lambda seg: (seg["start_s"], seg["_line"]))
    for seg in out:
        del seg["_line"]
    ready = ev.filter(pl.col("stage") == "ready")
    if not ready.is_empty():
        out.append(
            {
                "segment": "ready",
                "start_s": (ready["ts"].min() - t0).total_seconds(),
                "duration_s": 0.0,
                "ended": True,
                "end": "line",
            }
        )
    return out
