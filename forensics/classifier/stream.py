"""Classifying a log as a stream: what is kept of a run (bounded memory), the same view of a stored run."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from forensics.classifier.analysis import analyze

# What classify keeps of one run while it streams a log (docs/diagnose.md, "Bounded memory"):
# per table, the first and the last half of this many rows; a kept line's text is cut to
# KEEP_TEXT characters. Decode lines are kept as counts (all analysis reads of them).
KEEP_ROWS = {"lines": 10_000, "events": 10_000, "errors": 1_000}


KEEP_TEXT = 8 << 10


def _metrics_summary(*frames: pl.DataFrame) -> pl.DataFrame:
    """Decode (or prefill) rows -> per run and rank, its first and its last line (``n``: how
    many rows they stand for). All analysis reads of them: counts, first, last per rank."""
    cols = ["run_index", "line", "rank"]
    parts = [
        df.select(
            *cols, (pl.col("n") if "n" in df.columns else pl.lit(1)).cast(pl.Int64).alias("n")
        )
        for df in frames
        if not df.is_empty()
    ]
    if not parts:
        return pl.DataFrame(
            schema={"run_index": pl.Int64, "line": pl.Int64, "rank": pl.String, "n": pl.Int64}
        )
    g = (
        pl.concat(parts, how="vertical_relaxed")
        .group_by("run_index", "rank")
        .agg(
            pl.col("line").min().alias("first"),
            pl.col("line").max().alias("last"),
            pl.col("n").sum(),
        )
    )
    return pl.concat(
        [
            g.select("run_index", pl.col("first").alias("line"), "rank", "n"),
            g.select(
                "run_index", pl.col("last").alias("line"), "rank", pl.lit(0, pl.Int64).alias("n")
            ),
        ]
    ).sort("run_index", "line")


def metrics_reduce(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The metrics summary of every source of a decode/prefill table at once, lazily (for
    Store.source_rows: associative, and _metrics_summary of it is itself)."""
    names = lf.collect_schema().names()
    n = pl.col("n") if "n" in names else pl.lit(1)
    rank = pl.col("rank") if "rank" in names else pl.lit("")
    g = (
        lf.select("source_id", "run_index", "line", rank.alias("rank"), n.cast(pl.Int64).alias("n"))
        .group_by("source_id", "run_index", "rank")
        .agg(
            pl.col("line").min().alias("first"),
            pl.col("line").max().alias("last"),
            pl.col("n").sum(),
        )
    )
    return pl.concat(
        [
            g.select("source_id", "run_index", pl.col("first").alias("line"), "rank", "n"),
            g.select(
                "source_id",
                "run_index",
                pl.col("last").alias("line"),
                "rank",
                pl.lit(0, pl.Int64).alias("n"),
            ),
        ]
    )


def _head_tail_reduce(table: str) -> Callable[[pl.LazyFrame], pl.LazyFrame]:
    """The rows of every source of ``table`` as _bounded keeps them (the first and last
    KEEP_ROWS / 2 per run; the lines' text cut to KEEP_TEXT), lazily, for Store.source_rows:
    order-preserving, so applied part by part and again over their union it keeps what one
    pass over the table would. One function per table (the store caches by it)."""

    def reduce(lf: pl.LazyFrame) -> pl.LazyFrame:
        half = KEEP_ROWS[table] // 2
        pos = pl.int_range(pl.len()).over("source_id", "run_index")
        size = pl.len().over("source_id", "run_index")
        kept = lf.filter((pos < half) | (pos >= size - half))
        if table == "lines":
            kept = kept.with_columns(pl.col("text").str.slice(0, KEEP_TEXT))
        return kept

    return reduce


# what the verdict of a stored run reads of each table: never one of them whole (a log of a
# million stage lines is a million events)
HEAD_TAIL_REDUCES = {table: _head_tail_reduce(table) for table in KEEP_ROWS}


def _head_tail(df: pl.DataFrame, keep: int) -> pl.DataFrame:
    """The first and the last ``keep // 2`` rows of each run (all of a run with fewer)."""
    if df.is_empty() or len(df) <= keep:
        return df
    half = keep // 2
    pos = pl.int_range(pl.len()).over("run_index")
    size = pl.len().over("run_index")
    return df.filter((pos < half) | (pos >= size - half))


def iter_analyses(src, *, tail: int | None = None, warn=None):
    """Analyses of every run of a ``forensics.logsource.LogSource``, parsed as a stream.

    Memory is bounded by one run (KEEP_ROWS, KEEP_TEXT), not by the file: a run's rows are
    analysed and dropped once the next run begins. A damaged compressed stream keeps what
    decoded and says so through ``warn`` (nothing decoded: the error is raised).
    """
    from forensics.errors import StreamDamaged
    from forensics_parsers.sglang import Frames, LogParser

    parser = LogParser(src.where)
    mtime = src.stat.mtime or None
    held: list[Frames] = []
    rows = dict.fromkeys(KEEP_ROWS, 0)
    done = 0  # runs below this index were analysed

    def keep(f: Frames) -> None:
        f.decode, f.prefill = _metrics_summary(f.decode), _metrics_summary(f.prefill)
        if not f.lines.is_empty():
            f.lines = f.lines.with_columns(pl.col("text").str.slice(0, KEEP_TEXT))
        held.append(f)
        for t in KEEP_ROWS:
            rows[t] += len(getattr(f, t))
        if any(rows[t] > 2 * KEEP_ROWS[t] for t in KEEP_ROWS):
            compact(Frames.concat(held))

    def compact(fr: Frames, below: int | None = None) -> None:
        """Keep the rows of runs >= ``below`` (all), each table cut to its cap."""
        for t in (*KEEP_ROWS, "decode", "prefill", "runs"):
            df = getattr(fr, t)
            if below is not None and not df.is_empty():
                df = df.filter(pl.col("run_index") >= below)
            if t in KEEP_ROWS:
                df = _head_tail(df, KEEP_ROWS[t])
                rows[t] = len(df)
            elif t in ("decode", "prefill"):
                df = _metrics_summary(df)
            setattr(fr, t, df)
        fr.counts, fr.stats = {}, {}
        held[:] = [fr]

    def settle(below: int | None):
        """Analyse the runs below ``below`` (every run when None) and drop their rows."""
        nonlocal done
        fr = Frames.concat(held)
        tables = fr.tables()
        runs = tables["runs"]
        idx = sorted(set(runs["run_index"].to_list())) if not runs.is_empty() else []
        for i in idx:
            if i >= done and (below is None or i < below):
                yield analyze(tables, i, path=src.where, mtime=mtime)
        if below is None:
            if not idx and not done:
                yield analyze(tables, 0, path=src.where, mtime=mtime)
            return
        done = below
        compact(fr, below)

    try:
        for chunk in src.chunks(tail=tail):
            keep(parser.feed(chunk))
            if parser.run_index > done:
                yield from settle(parser.run_index)
    except StreamDamaged as exc:
        if warn is None or not exc.kept:
            raise  # nothing decoded: no log to classify (never a run "hung before exec")
        warn(str(exc))
    keep(parser.finish())
    yield from settle(None)


def _bounded(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """What the analysis sees of a stored run: what classify keeps of a streamed one (metrics
    as counts, KEEP_ROWS per table, KEEP_TEXT per line), so a big run costs no more to
    classify at ingest than a small one, and ``classify FILE`` and the store agree."""
    out = dict(tables)
    for name in ("decode", "prefill"):
        df = out[name]
        if not df.is_empty() and "rank" not in df.columns:
            df = df.with_columns(pl.lit("").alias("rank"))
        out[name] = _metrics_summary(df)
    for name, keep in KEEP_ROWS.items():
        out[name] = _head_tail(out[name], keep)
    if not out["lines"].is_empty():
        out["lines"] = out["lines"].with_columns(pl.col("text").str.slice(0, KEEP_TEXT))
    return out
