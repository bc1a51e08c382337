"""The benchmarks of each run, for the runs table and ``show``: every completed benchmark
attached to a run (bench_results), the latest of each (latest_bench) and one run's list
(run_benchmarks). Benchmarks are written by forensics.bench and forensics.bench_results."""

from __future__ import annotations

import polars as pl

from forensics.store import Store

BENCH_SCHEMA = {
    "run_id": pl.String,
    "bench_tok_s": pl.Float64,
    "bench_accept_len": pl.Float64,
    "bench_at": pl.Datetime("us"),
    "bench_streams": pl.Int64,
    "bench_rate": pl.Float64,
    "bench_in_len": pl.Float64,
    "bench_out_len": pl.Int64,
}


def _col(df: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Expr:
    """A column of a stored table that older parts may lack (null then)."""
    if name in df.columns:
        return pl.col(name).cast(dtype, strict=False)
    return pl.lit(None, dtype=dtype)


def bench_results(store: Store) -> pl.DataFrame:
    """Every completed benchmark attached to a run, oldest first (``bench_id`` and
    BENCH_SCHEMA): its tok/s and accept length, and its shape: streams (1 single, N at
    --concurrency N, null at a --rate), rate, the median prompt length of its requests and
    its max new tokens."""
    df = store.table("bench")
    schema = {"bench_id": pl.String, **BENCH_SCHEMA}
    if df.is_empty() or "run_id" not in df.columns or "completed" not in df.columns:
        return pl.DataFrame(schema=schema)
    df = df.filter(pl.col("run_id").is_not_null() & (pl.col("completed") > 0))
    if df.is_empty():
        return pl.DataFrame(schema=schema)
    if "started_at" in df.columns:
        df = df.sort("started_at", nulls_last=False, maintain_order=True)
    prompt = pl.DataFrame(schema={"bench_id": pl.String, "_in": pl.Float64})
    reqs = store.table("bench_requests")
    if not reqs.is_empty() and {"bench_id", "prompt_tokens"} <= set(reqs.columns):
        prompt = reqs.group_by("bench_id").agg(
            pl.col("prompt_tokens").cast(pl.Float64).median().alias("_in")
        )
    if "bench_id" in df.columns:
        df = df.join(prompt, on="bench_id", how="left", maintain_order="left")
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.Float64).alias("_in"))
    mode = _col(df, "mode", pl.String)
    conc = _col(df, "concurrency", pl.Int64)
    streams = (
        pl.when(mode == "single")
        .then(pl.lit(1, dtype=pl.Int64))
        .when(mode == "rate")
        .then(pl.lit(None, dtype=pl.Int64))
        .otherwise(conc.fill_null(1))
    )
    return df.select(
        _col(df, "bench_id", pl.String).alias("bench_id"),
        pl.col("run_id").cast(pl.String),
        _col(df, "output_tok_s", pl.Float64).alias("bench_tok_s"),
        pl.coalesce(
            _col(df, "accept_len_client", pl.Float64), _col(df, "accept_len_server", pl.Float64)
        ).alias("bench_accept_len"),
        _col(df, "started_at", pl.Datetime("us")).alias("bench_at"),
        streams.alias("bench_streams"),
        pl.when(mode == "rate")
        .then(_col(df, "rate", pl.Float64))
        .otherwise(None)
        .alias("bench_rate"),
        pl.coalesce(_col(df, "input_len", pl.Float64), pl.col("_in")).alias("bench_in_len"),
        pl.coalesce(_col(df, "output_len", pl.Int64), _col(df, "max_new_tokens", pl.Int64)).alias(
            "bench_out_len"
        ),
    )


def latest_bench(store: Store) -> pl.DataFrame:
    """The latest completed benchmark of each run (BENCH_SCHEMA, see bench_results), and
    ``bench_results``: how many it has (a sweep of shapes is several)."""
    df = bench_results(store)
    return df.group_by("run_id", maintain_order=True).agg(
        *[pl.col(c).last() for c in BENCH_SCHEMA if c != "run_id"],
        pl.len().cast(pl.Int64).alias("bench_results"),
    )


def run_benchmarks(store: Store, run_id: str) -> list[dict]:
    """Each completed benchmark of one run, oldest first: when, its shape (as the experiment
    key writes it), tok/s and accept length (``show NAME``)."""
    from forensics.experiment import KEY_FIELDS

    df = bench_results(store).filter(pl.col("run_id") == run_id)
    shape = next(f for f in KEY_FIELDS if f.name == "shape").expr()
    df = df.rename({"bench_streams": "streams"}).with_columns(shape.alias("shape"))
    return [
        {"started_at": r["bench_at"], "shape": r["shape"], "tok_s": r["bench_tok_s"],
         "accept_len": r["bench_accept_len"], "bench_id": r["bench_id"]}
        for r in df.iter_rows(named=True)
    ]  # fmt: skip
