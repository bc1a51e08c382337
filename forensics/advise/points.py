"""Runs as points: configuration label, family, tok/s, accept length, outcome (one per run).

What the plots, the advisor, the baseline rule and the report read (``run_points``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store


def is_spec(row: dict[str, Any]) -> bool:
    algo = row.get("spec_algorithm")
    return bool(algo) and str(algo).lower() not in ("none", "null", "")


def short_config(row: dict[str, Any]) -> str:
    """'cg 5dt topk4 3step' (speculative) or 'baseline cg' (plain)."""
    cg = row.get("cuda_graph")
    cg_txt = "" if cg is None else ("cg" if cg else "nocg")
    if not is_spec(row):
        return " ".join(p for p in ("baseline", cg_txt) if p)
    parts = [cg_txt]
    if row.get("num_draft_tokens") is not None:
        parts.append(f"{row['num_draft_tokens']}dt")
    if row.get("topk") is not None:
        parts.append(f"topk{row['topk']}")
    if row.get("num_steps") is not None:
        parts.append(f"{row['num_steps']}step")
    algo = str(row.get("spec_algorithm") or "")
    if algo.upper() not in ("EAGLE3", "EAGLE"):
        parts.insert(0, algo.lower())
    return " ".join(p for p in parts if p) or "spec"


def family_of(row: dict[str, Any]) -> str:
    """The configuration family of a speculative run: 'cg/5dt/topk4/3step'."""
    return short_config(row).replace(" ", "/")


def _single_stream_stats(store: Store) -> pl.DataFrame:
    """Per run: tok/s and accept length from single-stream decode lines (all lines if none)."""
    import polars as pl

    key = ["source_id", "run_index"]
    dec = store.columns("decode", [*key, "gen_throughput", "accept_len", "running_req"])
    schema = {
        "source_id": pl.String,
        "run_index": pl.Int32,
        "ss_tok_s": pl.Float64,
        "ss_accept": pl.Float64,
        "ss_lines": pl.Int64,
        "ss_round_lo": pl.Float64,
        "ss_round_hi": pl.Float64,
        "ss_batched": pl.Boolean,
    }
    if dec.is_empty() or "gen_throughput" not in dec.columns:
        return pl.DataFrame(schema=schema)
    dec = dec.filter(pl.col("gen_throughput").is_not_null() & (pl.col("gen_throughput") > 0))
    if dec.is_empty():
        return pl.DataFrame(schema=schema)
    rr = pl.col("running_req").cast(pl.Int64, strict=False)
    dec = dec.with_columns(
        pl.col("gen_throughput").cast(pl.Float64),
        pl.col("accept_len").cast(pl.Float64),
        (rr == 1).fill_null(False).alias("_single"),
        (rr > 1).fill_null(False).alias("_multi"),
    )
    has_single = dec.group_by(key).agg(
        pl.col("_single").any().alias("_has_single"), pl.col("_multi").any().alias("_has_multi")
    )
    dec = dec.join(has_single, on=key).filter(pl.col("_single") | ~pl.col("_has_single"))
    round_ms = 1000.0 * pl.col("accept_len") / pl.col("gen_throughput")
    return dec.group_by(key).agg(
        pl.col("gen_throughput").median().alias("ss_tok_s"),
        pl.col("accept_len").mean().alias("ss_accept"),
        pl.len().cast(pl.Int64).alias("ss_lines"),
        round_ms.quantile(0.1).alias("ss_round_lo"),
        round_ms.quantile(0.9).alias("ss_round_hi"),
        # batched: measured with several requests in flight, never with one (a line without
        # #running-req proves nothing either way)
        (~pl.col("_has_single").first() & pl.col("_has_multi").first()).alias("ss_batched"),
    )


def run_points(
    store: Store, match: str | None = None, *, group_by: str | list[str] | None = None
) -> pl.DataFrame:
    """One row per run, in launch order, with what the plots and the advisor need.

    Columns: the runs table's (``experiment`` included), plus ``order`` (1-based launch
    order), ``label`` (short config), ``family``, ``spec``, ``failed`` and ``died_in`` (the
    classifier's stored verdict: a phase other than ok, or hung), ``drafter`` (D1, D2, ... when
    an experiment has several draft models, else empty), ``tok_s_server`` (median gen
    throughput over single-stream decode lines), ``tok_s_bench``, ``tok_s`` (bench, else
    server), ``tok_s_source``, ``accept_len``, ``round_ms``, ``decode_n``,
    ``round_lo``/``round_hi`` (10th/90th percentile of the per-line round cost), ``batched``
    (``tok_s`` was measured with several requests in flight: a benchmark at
    ``--concurrency N``/``--rate``, or decode lines that never show one request alone). A
    batched figure is not what one user sees, so it is never the default baseline.
    """
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, match, group_by=group_by)
    if df.is_empty() or "run_id" not in df.columns:
        return pl.DataFrame()
    ss = _single_stream_stats(store)
    df = df.with_columns(pl.col("run_index").cast(pl.Int32)).join(
        ss, on=["source_id", "run_index"], how="left"
    )
    pts = _points_frame(df)
    names = [c for c in ("path", "name", "host", "experiment") if c in df.columns]
    logless = _logless_launches(store, df.select(names).to_dicts(), match)
    if not logless:
        return pts
    pts = pl.concat([pts, pl.DataFrame(logless, infer_schema_length=None)], how="diagonal_relaxed")
    return pts.sort("started_at", nulls_last=True, maintain_order=True).with_columns(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("order")
    )


def _num_col(df: pl.DataFrame, col: str) -> pl.Expr:
    """A stored figure as Float64 (``as_float`` over a column): null for null, NaN or text."""
    import polars as pl

    if col not in df.columns:
        return pl.lit(None, dtype=pl.Float64)
    return pl.col(col).cast(pl.Float64, strict=False).fill_nan(None)


def _truthy(e: pl.Expr) -> pl.Expr:
    return e.is_not_null() & (e != 0)


def _column(df: pl.DataFrame, name: str, dtype: Any = None) -> pl.Expr:
    """``df``'s column, or nulls of ``dtype`` (String by default) where it has none."""
    import polars as pl

    return pl.col(name) if name in df.columns else pl.lit(None, dtype=dtype or pl.String)


def _outcome(df: pl.DataFrame) -> list[pl.Expr]:
    """spec, failed and died_in: ``is_spec`` and ``verdict_outcome`` as expressions."""
    import polars as pl

    algo = _column(df, "spec_algorithm").cast(pl.String)
    spec = algo.is_not_null() & ~algo.str.to_lowercase().is_in(["none", "null", ""])
    phase = _column(df, "phase").cast(pl.String)
    hung = _column(df, "hung", pl.Boolean).fill_null(False)
    died = (
        pl.when(hung)
        .then(
            pl.when(phase.is_not_null() & (phase != "") & ~phase.is_in(["ok", "hang"]))
            .then(pl.lit("hung in ") + phase)
            .otherwise(pl.lit("hung"))
        )
        .when(phase.is_null() | phase.is_in(["", "ok"]))
        .then(pl.lit(None, dtype=pl.String))
        .otherwise(phase)
    )
    failed = hung | (phase.is_not_null() & ~phase.is_in(["", "ok"]))
    return [spec.fill_null(False).alias("spec"), failed.alias("failed"), died.alias("died_in")]


def _figures(df: pl.DataFrame) -> list[pl.Expr]:
    """tok/s of the server and the benchmark, accept length, decode lines, round-cost spread
    and ``batched``: single-stream figures first, the run's own stats as the fallback."""
    import polars as pl

    ss, gen = _num_col(df, "ss_tok_s"), _num_col(df, "gen_throughput_median")
    bench = _num_col(df, "bench_tok_s")
    acc, mean = _num_col(df, "ss_accept"), _num_col(df, "accept_len_mean")
    accept = pl.coalesce(
        pl.when(_truthy(acc)).then(acc).otherwise(mean), _num_col(df, "bench_accept_len")
    )
    lines, dec = _column(df, "ss_lines", pl.Int64), _column(df, "decode_lines", pl.Int64)
    streams = _column(df, "streams", pl.Int64)
    batched = (streams.is_not_null() & (streams > 1)) | (
        bench.is_not_null() & _column(df, "bench_rate", pl.Float64).is_not_null()
    )
    return [
        pl.when(_truthy(ss)).then(ss).otherwise(gen).alias("tok_s_server"),
        bench.alias("tok_s_bench"),
        accept.alias("accept_len"),
        pl.when(_truthy(lines)).then(lines).when(_truthy(dec)).then(dec).otherwise(0)
        .cast(pl.Int64).alias("decode_n"),
        _num_col(df, "ss_round_lo").alias("round_lo"),
        _num_col(df, "ss_round_hi").alias("round_hi"),
        batched.fill_null(False).alias("batched"),
    ]  # fmt: skip


def _points_frame(df: pl.DataFrame) -> pl.DataFrame:
    """Every ingested run as a point, in one pass of polars expressions: its figures (bench,
    else server), outcome (``verdict_outcome``), label and family, drafter tag (D1, D2, ...)."""
    import polars as pl

    labels = _labels(df)
    base = [c for c in df.columns if not c.startswith("ss_")]
    tok = pl.col("tok_s")
    out = (
        df.with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).alias("order"),
            *_outcome(df),
            *_figures(df),
            *(pl.Series(k, labels[k]) for k in ("label", "family", "drafter")),
        )
        .with_columns(
            pl.col("failed").alias("crashed"),
            pl.coalesce("tok_s_bench", "tok_s_server").alias("tok_s"),
        )
        .with_columns(
            pl.when(pl.col("tok_s_bench").is_not_null())
            .then(pl.lit("bench"))
            .when(_truthy(tok))
            .then(pl.lit("server"))
            .otherwise(pl.lit(None, pl.String))
            .alias("tok_s_source"),
            pl.when(pl.col("spec") & _truthy(pl.col("accept_len")) & _truthy(tok))
            .then(1000.0 * pl.col("accept_len") / tok)
            .otherwise(None)
            .alias("round_ms"),
        )
    )
    return out.select([*base, *[c for c in POINT_COLUMNS if c not in base]])


# The columns run_points adds to the runs table's, in order.
POINT_COLUMNS = (
    "order", "label", "family", "spec", "failed", "crashed", "died_in", "drafter",
    "tok_s_server", "tok_s_bench", "tok_s", "tok_s_source", "accept_len", "round_ms",
    "decode_n", "round_lo", "round_hi", "batched",
)  # fmt: skip


def _labels(df: pl.DataFrame) -> dict[str, list[str]]:
    """label (short config plus the drafter tag), family and drafter tag of every row: the
    short config once per distinct configuration, tags in order of first use per experiment."""
    keys = [c for c in _CONFIG_FIELDS if c in df.columns]
    rows = (
        df.select([*keys, "experiment", "draft_model_path"]).rows()
        if "draft_model_path" in df.columns
        else [(*r, None) for r in df.select([*keys, "experiment"]).rows()]
    )
    cache: dict[tuple, tuple[str, bool]] = {}
    drafters: dict[Any, list[Any]] = {}
    infos = []
    for r in rows:
        k = r[: len(keys)]
        if k not in cache:
            conf = dict(zip(keys, k, strict=True))
            cache[k] = (short_config(conf), is_spec(conf))
        short, spec = cache[k]
        exp, d = r[len(keys)], r[len(keys) + 1]
        seen = drafters.setdefault(exp, [])
        if spec and d and d not in seen:
            seen.append(d)
        infos.append((short, spec, exp, d))
    out: dict[str, list[str]] = {"label": [], "family": [], "drafter": []}
    for short, spec, exp, d in infos:
        mine = drafters[exp]
        tag = f"D{mine.index(d) + 1}" if (len(mine) > 1 and spec and d) else ""
        out["label"].append(f"{short} {tag}".strip())
        out["family"].append(short.replace(" ", "/") if spec else "baseline")
        out["drafter"].append(tag)
    return out


# What short_config and is_spec read of a run.
_CONFIG_FIELDS = ("spec_algorithm", "cuda_graph", "num_draft_tokens", "topk", "num_steps")


def verdict_outcome(phase: str | None, hung: bool | None) -> tuple[bool, str | None]:
    """(failed, died_in) from the classifier's verdict, the one rule every view uses: a run
    failed when its phase is not ``ok`` (or it hung); it died in that phase."""
    if hung:
        return True, f"hung in {phase}" if phase and phase not in ("ok", "hang") else "hung"
    if phase in (None, "", "ok"):
        return False, None
    return True, str(phase)


def _logless_launches(store: Store, rows: list[dict], match: str | None) -> list[dict]:
    """Failed launches (launcher's ``launches`` table) whose log never made it into the store:
    the seed session's 2step run. They appear as failed points, configuration from the name."""
    import json
    from pathlib import PurePosixPath

    if store.table("launches").is_empty():
        return []  # (the launcher, a heavy import, only when there are launches)
    try:
        from forensics.launcher import launches_frame

        launches = launches_frame(store)
    except Exception:  # noqa: BLE001 - the launcher is optional here
        return []
    if launches.is_empty() or "status" not in launches.columns:
        return []
    from forensics_parsers.names import config_from_name

    known = {PurePosixPath(str(r.get("path") or "")).name for r in rows}
    known |= {str(r.get("name")) for r in rows}
    out = []
    for la in launches.iter_rows(named=True):
        if la.get("status") not in ("failed", "timeout", "killed", "terminated"):
            continue
        log = str(la.get("log_path") or "")
        name = str(la.get("name") or PurePosixPath(log).stem or la.get("launch_id"))
        if PurePosixPath(log).name in known or name in known:
            continue
        if match and match.lower() not in name.lower() and match != la.get("launch_id"):
            continue
        cfg = config_from_name(log or name)
        cfg.setdefault("spec_algorithm", None)
        try:
            diag = json.loads(la.get("diagnosis") or "null")
        except ValueError:
            diag = None
        phase = (diag or {}).get("phase") if isinstance(diag, dict) else None
        row = {
            **cfg,
            "experiment": _launch_experiment(rows, la.get("host")),
            "run_id": f"launch:{la.get('launch_id')}",
            "name": name,
            "path": log or None,
            "host": la.get("host"),
            "started_at": la.get("started_at"),
            "phase_reached": "none",
            "decode_lines": 0,
            "error": la.get("cause"),
        }
        spec = is_spec(row)
        out.append(
            {
                **row,
                "launch_id": la.get("launch_id"),
                "launch_diagnosis": json.dumps(diag) if isinstance(diag, dict) else None,
                "order": 0,
                "label": short_config(row),
                "family": family_of(row) if spec else "baseline",
                "spec": spec,
                "failed": True,
                "crashed": True,
                "died_in": phase or (f"{la['cause']}" if la.get("cause") else "pre-exec (no log)"),
                "drafter": "",
                "tok_s_server": None,
                "tok_s_bench": None,
                "tok_s": None,
                "tok_s_source": None,
                "accept_len": None,
                "round_ms": None,
                "decode_n": 0,
                "round_lo": None,
                "round_hi": None,
                "batched": False,
            }
        )
    return out


def _launch_experiment(rows: list[dict], host: str | None) -> str:
    """A launch that never wrote a log: the experiment of the latest run on its host (its
    model and layout are unknown), else of the latest run."""
    same = [r for r in rows if host and r.get("host") == host] or rows
    return str(same[-1]["experiment"]) if same else "unknown"


def drafter_legend(store: Store, match: str | None = None) -> dict[str, str]:
    """{'D1': '/data/eagle3/output_10k_sglang/4', ...} when several draft models appear."""
    pts = run_points(store, match)
    if pts.is_empty():
        return {}
    legend: dict[str, str] = {}
    for r in pts.iter_rows(named=True):
        if r["drafter"] and r["drafter"] not in legend:
            legend[r["drafter"]] = str(r.get("draft_model_path"))
    return legend
