"""The common non-metrics lines, read in polars: no Python per line.

A busy server's log is mostly metrics lines (parsers/sglang/metrics.py), then uvicorn access
lines, warnings and other lines whose rule does nothing but name them (``Rule.inert``). Such a
line, when it has SGLang's own ``[YYYY-MM-DD HH:MM:SS( TPn)] `` prefix (or the time-only one) and
is plain printable ASCII (so Python's ``re`` and polars' regex engine agree on every class), is
classified here by the rule table itself: the rule that matches it is the first in table order,
``BULK_RULES`` row ``f`` matches when its pattern does and no earlier rule's pattern does
(exactly ``find_rule``). What such a line does to the parser's state is then done for all of
them at once by the parser (counts, run extents, the ``lines`` rows, the timestamp order).

Lines of every other shape (tracebacks, stage lines, errors, transport prefixes, anything
non-ASCII) stay on the Python path, in file order.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics_parsers.sglang.rules import RULES, scoped

# SGLang's own prefix, ASCII digits only: date (optional: the time-only layout), time (a valid
# one: polars would read a leap second Python refuses), fraction, rank tags. The same span
# PREFIX_RX's first alternative matches on such a line.
_PREFIX = (
    r"^\[(?:([0-9]{4}-[0-9]{2}-[0-9]{2}) )?((?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])(?:[.,]([0-9]+))?"
    r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)[0-9]+)*)\] (.*)$"
)
_PRINTABLE = r"^[\x20-\x7e]*$"


def _bulk_rules() -> list[tuple[str, str, str | None]]:
    """(rule name, its pattern, the patterns of every earlier rule as one alternation)."""
    out = []
    for i, rule in enumerate(RULES):
        if rule.inert:
            before = "|".join(scoped(r.pattern) for r in RULES[:i]) or None
            out.append((rule.name, rule.pattern, before))
    return out


BULK_RULES = _bulk_rules()
_ANY_RULE = "|".join(scoped(r.pattern) for r in RULES)
UNKNOWN = "unknown"  # the `lines` kind of a line no rule matches ...
UNKNOWN_COUNT = "unknown_prefixed"  # ... and its count (a bulk line is prefixed)
MAX_ACCESS_LINES = 100_000  # access lines are kept while a chunk has fewer rows before them
ACCESS = [r.name for r in RULES if r.kind == "access"]
BULK_COLUMNS = ("line", "kind", "ts", "rank", "msg")


def split(other: pl.DataFrame, date_hint: str, max_line: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Non-metrics lines (``line``, ``text``) -> (bulk lines, the rest for the Python path).

    A bulk line comes with ``kind`` (its rule's name, or ``unknown`` when no rule matches),
    ``ts`` (the timestamp text the Python path reads: ``text.ts_of``), ``rank`` and ``msg``
    (the message after the prefix)."""
    t = pl.col("text")
    cand = other.filter(
        t.str.starts_with("[") & (t.str.len_bytes() <= max_line) & t.str.contains(_PRINTABLE)
    )
    if cand.is_empty():
        return empty(), other
    cand = _prefixed(cand.filter(t.str.contains(_PREFIX))).filter(
        pl.col("msg").str.strip_chars() != ""
    )
    if cand.is_empty():
        return empty(), other
    m = pl.col("msg")
    first = pl.lit(None, dtype=pl.Int32)
    for i in reversed(range(len(BULK_RULES))):  # the first bulk rule that matches
        first = pl.when(m.str.contains(BULK_RULES[i][1])).then(pl.lit(i, pl.Int32)).otherwise(first)
    cand = cand.with_columns(first.alias("_first"))
    kept = []
    for (i,), group in cand.group_by("_first", maintain_order=True):
        if i is None:  # no bulk rule: a bulk line only if no rule at all matches
            kind, before = UNKNOWN, _ANY_RULE
        else:
            kind, _, before = BULK_RULES[i]
        if before is not None:  # and no earlier rule matches (the table's order)
            group = group.filter(~m.str.contains(before))
        kept.append(group.with_columns(pl.lit(kind).alias("kind")))
    bulk = pl.concat(kept).sort("line") if len(kept) > 1 else kept[0]
    if bulk.is_empty():
        return empty(), other
    ts = (
        pl.coalesce(pl.col("_d"), pl.lit(date_hint))
        + pl.lit(" ")
        + pl.col("_t")
        + pl.when(pl.col("_f").is_not_null())
        .then(pl.lit(".") + pl.col("_f").str.slice(0, 6))
        .otherwise(pl.lit(""))
    )
    bulk = bulk.select(
        "line", "kind", ts.alias("ts"), pl.col("_tags").str.strip_chars().alias("rank"), "msg"
    )
    rest = other.join(bulk.select("line"), on="line", how="anti", maintain_order="left")
    return bulk, rest


def _prefixed(lines: pl.DataFrame) -> pl.DataFrame:
    """Lines ``_PREFIX`` matches -> with its groups (``_d``, ``_t``, ``_f``, ``_tags``, ``msg``).
    The common shape, a date and no fraction (`[2026-11-01 11:00:01 TP3] `), is cut by
    position (the tags end at the line's first `]`); the others by the regex's groups."""
    t = pl.col("text")
    plain = (t.str.slice(5, 1) == "-") & ~t.str.slice(20, 1).is_in([".", ","])
    cut = t.str.find("]", literal=True)
    fast = lines.filter(plain).select(
        "line",
        "text",
        t.str.slice(1, 10).alias("_d"),
        t.str.slice(12, 8).alias("_t"),
        pl.lit(None, dtype=pl.String).alias("_f"),
        t.str.slice(20, cut - 20).alias("_tags"),
        t.str.slice(cut + 2).alias("msg"),
    )
    rest = lines.filter(~plain)
    if rest.is_empty():
        return fast
    rest = (
        rest.with_columns(t.str.extract_groups(_PREFIX).alias("_p"))
        .unnest("_p")
        .rename({"1": "_d", "2": "_t", "3": "_f", "4": "_tags", "5": "msg"})
    )
    return pl.concat([fast, rest.select(fast.columns)]).sort("line")


_SCHEMA = {
    "line": pl.Int64,
    "kind": pl.String,
    "ts": pl.String,
    "rank": pl.String,
    "msg": pl.String,
}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMA)


def gaps(quick: pl.DataFrame, rare: pl.DataFrame) -> dict[int | None, str]:
    """Where bulk lines lie between the rare ones: the line of each rare line that has bulk
    lines just before it (None: after the last) -> the rank of the first of them."""
    if quick.is_empty():
        return {}
    nxt = quick.select("line", "rank").join_asof(
        rare.select(pl.col("line").alias("next")),
        left_on="line",
        right_on="next",
        strategy="forward",
    )
    first = nxt.group_by("next", maintain_order=True).agg(pl.col("rank").first())
    return dict(first.iter_rows())


def counts(quick: pl.DataFrame) -> dict[str, int]:
    """Lines by kind, as ``Frames.counts`` counts them."""
    out = dict(quick.group_by("kind").len().iter_rows())
    if UNKNOWN in out:
        out[UNKNOWN_COUNT] = out.pop(UNKNOWN)
    return out


def touch_runs(
    runs: dict[int, dict[str, Any]], quick: pl.DataFrame, started: dict[int, int]
) -> None:
    """Bulk lines (with ``run_index``) extend their runs as the Python path's ``_touch`` would
    have, line by line: ``started`` holds, per run, the line whose timestamp became its
    ``started_at`` in this chunk (an earlier bulk line's is the one it would have taken)."""
    agg = quick.group_by("run_index").agg(
        pl.col("line").max().alias("last"),
        pl.col("ts").max().alias("t1"),
        pl.col("line").first().alias("l0"),
        pl.col("ts").first().alias("t0"),
    )
    for ri, last, t1, l0, t0 in agg.iter_rows():
        run = runs[ri]
        run["has_content"] = True
        run["last_line"] = max(run["last_line"], last)
        if run["started_at"] is None or (ri in started and l0 < started[ri]):
            run["started_at"] = t0
        if run["ended_at"] is None or t1 > run["ended_at"]:
            run["ended_at"] = t1


def disorder(
    stamps: list[tuple[int, str]], quick: pl.DataFrame, last: str | None
) -> tuple[int, str | None]:
    """(timestamps earlier than the one before them, the last timestamp) over the Python
    path's stamps and the bulk lines', in file order, after ``last``."""
    seq = pl.DataFrame(stamps, schema={"line": pl.Int64, "ts": pl.String}, orient="row")
    if not quick.is_empty():
        seq = pl.concat([seq, quick.select("line", "ts")]).sort("line", maintain_order=True)
    if seq.is_empty():
        return 0, last
    ts = seq["ts"]
    prev = ts.shift(1, fill_value=last or None)
    n = int(((ts < prev) & (prev != "")).sum())
    return n, ts[-1]


def lines_frame(python: pl.DataFrame, quick: pl.DataFrame, max_text: int) -> pl.DataFrame:
    """The ``lines`` frame: the Python path's rows and the bulk lines', in file order; uvicorn
    access lines are kept while the chunk has fewer than ``MAX_ACCESS_LINES`` rows before them."""
    if not quick.is_empty():
        rows = quick.select(
            "run_index",
            "line",
            pl.col("ts").str.to_datetime(
                "%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us", cache=False
            ),
            "rank",
            "kind",
            pl.col("msg").str.slice(0, max_text).alias("text"),
        )
        python = pl.concat([python, rows.cast(python.schema)]).sort("line", maintain_order=True)
    if len(python) > MAX_ACCESS_LINES:
        keep = (pl.int_range(pl.len()) < MAX_ACCESS_LINES) | ~pl.col("kind").is_in(ACCESS)
        python = python.filter(keep)
    return python
