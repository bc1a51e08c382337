"""The common non-metrics lines, read in polars: no Python per line.

A busy server's log is mostly metrics lines (parsers/sglang/metrics.py), then uvicorn access
lines, warnings and other lines whose rule does nothing but name them (``Rule.inert``). Such a
line, when it has SGLang's own ``[YYYY-MM-DD HH:MM:SS( TPn)] `` prefix (or the time-only one) and
is plain printable ASCII (so Python's ``re`` and polars' regex engine agree on every class), is
classified here by the rule table itself: the rule that matches it is the first in table order,
``BULK_RULES`` row ``f`` matches when its pattern does and no earlier rule's pattern does
(exactly ``find_rule``). The hot rule (access lines) is tested in polars on every such line;
the lines it leaves are few (``find_rule`` itself reads them) or many (each bulk rule's
pattern in polars). What such a line does to the parser's state is then done for all of
them at once by the parser (counts, run extents, the ``lines`` rows, the timestamp order).

Lines without SGLang's prefix (NCCL_DEBUG=INFO output, Python warnings' code lines, plain
prints) are read here too when they are plain printable ASCII, hold no shape of SGLang's own
(the transport-prefix finder, parsers/prefixes.py, finds nothing in them to strip or learn:
``_BARE_ANCHORS``, ``_BARE_NEEDS``) and their first rule is a bulk rule or none: such a
line's row has no timestamp (``ts`` null) and no rank. The one thing such a line does to the
parser's sequential state is to an open traceback (it may continue it): the parser sends the
unprefixed bulk lines that follow an open traceback through the Python path until it closes
(``gaps``).

Lines of every other shape (tracebacks, stage lines, errors, transport prefixes, anything
non-ASCII) stay on the Python path, in file order.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from forensics_parsers.prefixes import ANCHORS, NEEDS, WEAK_ANCHORS
from forensics_parsers.sglang.rules import RULES, find_rule, scoped
from forensics_parsers.sglang.runs import per_run

# SGLang's own prefix, ASCII digits only: date (optional: the time-only layout), time (a valid
# one: polars would read a leap second Python refuses), fraction, rank tags. The same span
# PREFIX_RX's first alternative matches on such a line.
_PREFIX = (
    r"^\[(?:([0-9]{4}-[0-9]{2}-[0-9]{2}) )?((?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9])(?:[.,]([0-9]+))?"
    r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)[0-9]+)*)\] (.*)$"
)
# a bulk candidate: that prefix, and the whole line plain printable ASCII (one regex, one pass)
_CANDIDATE = _PREFIX.removesuffix("(.*)$") + r"[\x20-\x7e]*$"


# an unprefixed bulk candidate: plain printable ASCII with a non-blank character, where the
# prefix finder finds no anchor (those it searches always, by their pattern; the others by the
# literals every match of theirs holds: ``NEEDS``, a superset of what they match); a
# traceback frame's `File "` is one of them (an orphan frame opens a traceback)
_BARE = r"^[\x20-\x7e]*[\x21-\x7e][\x20-\x7e]*$"
_BARE_ANCHORS = "|".join(p for name, p, _ in ANCHORS + WEAK_ANCHORS if name not in NEEDS)
_NEEDS_RX = "|".join(re.escape(lit) for lits in NEEDS.values() for lit in lits)


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
# what takes an unprefixed line off the plain path (printable, no anchor, no rule: ``unknown``),
# as one regex: a character that is not plain printable ASCII, a blank line, an anchor or a
# literal of ``NEEDS``, any rule. (A polars regex pass costs about the same whatever its
# alternatives: this one ~0.2 us a line of NCCL INFO output, each of its parts alone as much.)
_BARE_ODD = "|".join((r"[^\x20-\x7e]", r"^ *$", _BARE_ANCHORS, _NEEDS_RX, _ANY_RULE))
UNKNOWN = "unknown"  # the `lines` kind of a line no rule matches ...
UNKNOWN_COUNT = "unknown_prefixed"  # ... and its count (a prefixed line) ...
UNKNOWN_BARE = "unknown_bare"  # ... (an unprefixed one: no ``ts``)
MAX_ACCESS_LINES = 100_000  # access lines are kept while a chunk has fewer rows before them
ACCESS = [r.name for r in RULES if r.kind == "access"]
BULK_COLUMNS = ("line", "kind", "ts", "rank", "msg")
GAP_COLUMNS = ("line", "ts", "rank", "msg")  # what the parser reads of a gap's lines
# the bulk rule of most of a busy server's bulk lines (uvicorn's access lines): tested in
# polars on every candidate; the lines it leaves are classified by ``_first_rules``
_HOT = next(r for r in BULK_RULES if r[0] in ACCESS)
# up to this many lines left by the hot rule, of up to this many characters in all, are
# classified by the rule table's own matcher (find_rule: ~2 us a line of 100 bytes, ~0.1 us a
# byte more: its floating rules are searched at every position); more by polars (a regex pass
# per bulk rule and one per group: ~1.5 ms whatever the rows, then ~0.04 us a byte). On the
# real corpus (80 calls, 13,488 lines, 2.3 MB): 283 ms by lines alone, 165 ms with the
# characters as well.
PYTHON_MAX = 1_000
PYTHON_MAX_CHARS = 32_000


def split(other: pl.DataFrame, date_hint: str, max_line: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Non-metrics lines (``line``, ``text``) -> (bulk lines in line order, the rest for the
    Python path).

    A bulk line comes with ``kind`` (its rule's name, or ``unknown`` when no rule matches),
    ``ts`` (the timestamp text the Python path reads: ``text.ts_of``; null on an unprefixed
    line), ``rank`` and ``msg`` (the message after the prefix). Its kind is the first rule of
    the table that matches it: the hot rule's lines are those its pattern matches and no
    earlier rule's does; the others go through ``_first_rules``. (A polars call costs
    ~0.02-0.05 ms, and each regex pass ~1-3 ns a byte of the rows it sees, whatever its
    alternatives: the passes are few, each over the rows left.)"""
    t = pl.col("text")
    short = t.str.len_bytes() <= max_line
    rows = other.with_row_index("_row")
    pre = rows.select(short & t.str.contains(_CANDIDATE)).to_series()
    parts = [_prefixed_kinds(rows.filter(pre), date_hint)]
    if not pre.all():
        # an unprefixed candidate is never a prefixed one (it holds no anchor) and is ASCII: on
        # a non-ASCII line, the Unicode `\b` of some rules makes polars' regex leave its DFA
        # for a slower engine (_ANY_RULE on a 228 KB progress line of the real corpus: 146 ms)
        ascii_ = t.str.len_chars() == t.str.len_bytes()
        parts.append(_bare_kinds(rows.filter(~pre & short & ascii_)))
    parts = [p for p in parts if not p.is_empty()]
    if not parts:
        return empty(), other
    cand = parts[0] if len(parts) == 1 else pl.concat(parts).sort("line")
    if len(cand) == len(other):  # (a busy server's usual chunk: every line bulk)
        return cand.select(BULK_COLUMNS), other.clear()
    rest = other.filter(pl.repeat(True, len(other), eager=True).scatter(cand["_row"], False))
    return cand.select(BULK_COLUMNS), rest


def _prefixed_kinds(cand: pl.DataFrame, date_hint: str) -> pl.DataFrame:
    """SGLang-prefixed candidates (``_row``, ``line``, ``text``) -> the bulk lines among them
    (``_row``, BULK_COLUMNS)."""
    if cand.is_empty():
        return cand
    cand = _prefixed(cand, date_hint)
    m = pl.col("msg")
    name, pattern, before = _HOT
    hot = m.str.contains(pattern) & ~m.str.contains(before)
    cand = cand.with_columns(pl.when(hot).then(pl.lit(name)).alias("kind"))
    return _rest_by_rules(cand)


def _bare_kinds(cand: pl.DataFrame) -> pl.DataFrame:
    """Unprefixed candidates (``_row``, ``line``, ``text``) -> the bulk lines among them
    (``_row``, BULK_COLUMNS; ``ts`` null, ``rank`` empty, ``msg`` the whole line): plain
    printable ASCII with a non-blank character, no anchor of the prefix finder in them, and no
    rule or a bulk rule first. Most are plain and match no rule: one regex pass (``_BARE_ODD``)
    finds the others, which the tests one by one read; ``_first_rules`` those a rule matches."""
    t = pl.col("text")
    odd = cand.select(t.str.contains(_BARE_ODD)).to_series()
    kind = pl.repeat(UNKNOWN, len(cand), eager=True)
    keep = None
    if odd.any():
        at = odd.arg_true()
        tests = cand.filter(odd).select(
            (
                t.str.contains(_BARE) & ~t.str.contains(_BARE_ANCHORS) & ~t.str.contains(_NEEDS_RX)
            ).alias("ok"),
            t.str.contains(_ANY_RULE).alias("ruled"),
        )
        kind = kind.scatter(at.filter(tests["ruled"]), None)
        keep = pl.repeat(True, len(cand), eager=True).scatter(at.filter(~tests["ok"]), False)
    cand = cand.select(
        "_row",
        "line",
        pl.lit(None, pl.String).alias("ts"),
        pl.lit("").alias("rank"),
        t.alias("msg"),
        kind.alias("kind"),
    )
    return _rest_by_rules(cand if keep is None else cand.filter(keep))


def _rest_by_rules(cand: pl.DataFrame) -> pl.DataFrame:
    """The candidates whose ``kind`` the vectorised test left null get it from ``_first_rules``;
    those still without one (a rule that is not a bulk rule: the Python path's) are dropped."""
    kind = cand["kind"]
    if not kind.null_count():
        return cand
    at = kind.is_null().arg_true()
    kind = kind.scatter(at, _first_rules(cand["msg"].gather(at)))
    cand = cand.with_columns(kind)
    return cand.filter(kind.is_not_null()) if kind.null_count() else cand


def _kind_of(msg: str) -> str | None:
    """A bulk line's kind by the rule table's matcher (None: the Python path takes it)."""
    if not msg.strip():
        return None
    found = find_rule(msg)
    if found is None:
        return UNKNOWN
    return found[0].name if found[0].inert else None


def _first_rules(msgs: pl.Series) -> pl.Series:
    """Messages -> the kind of each that is a bulk line, else null: a blank message is not one;
    else the first rule of the table that matches it is a bulk rule, or none matches
    (``unknown``). Few lines by ``find_rule``; many in polars: the first bulk rule that
    matches, and no earlier rule."""
    if len(msgs) <= PYTHON_MAX:
        few = msgs.to_list()
        if sum(map(len, few)) <= PYTHON_MAX_CHARS:
            return pl.Series("kind", [_kind_of(msg) for msg in few], dtype=pl.String)
    m = pl.col("msg")
    first = pl.lit(None, dtype=pl.Int32)
    for i in reversed(range(len(BULK_RULES))):  # the first bulk rule that matches
        first = pl.when(m.str.contains(BULK_RULES[i][1])).then(pl.lit(i, pl.Int32)).otherwise(first)
    lines = msgs.to_frame("msg").with_row_index("_c")
    lines = lines.filter(m.str.strip_chars() != "").with_columns(first.alias("_first"))
    kinds = pl.repeat(None, len(msgs), dtype=pl.String, eager=True).alias("kind")
    for (i,), group in lines.group_by("_first"):
        if i is None:  # no bulk rule: a bulk line only if no rule at all matches
            kind, before = UNKNOWN, _ANY_RULE
        else:
            kind, _, before = BULK_RULES[i]
        if before is not None:  # and no earlier rule matches (the table's order)
            group = group.filter(~m.str.contains(before))
        kinds = kinds.scatter(group["_c"], kind)
    return kinds


def _prefixed(lines: pl.DataFrame, date_hint: str) -> pl.DataFrame:
    """Lines ``_PREFIX`` matches -> (``_row``, ``line``, ``ts``, ``rank``, ``msg``). The common
    shape, a date and no fraction (`[2026-11-01 11:00:01 TP3] `), is cut by position (the tags
    end at the line's first `]`); a chunk with another shape by the regex's groups."""
    t = pl.col("text")
    plain = (t.str.slice(5, 1) == "-") & ~t.str.slice(20, 1).is_in([".", ","])
    cut = t.str.find("]", literal=True)
    fast = lines.select(
        "_row",
        "line",
        t.str.slice(1, 19).alias("ts"),  # the date, a space, the time
        t.str.slice(20, cut - 20).str.strip_chars().alias("rank"),
        t.str.slice(cut + 2).alias("msg"),
        plain.all().alias("_plain"),
    )
    if fast.drop_in_place("_plain")[0]:  # (in place: no polars call)
        return fast
    g = t.str.extract_groups(_PREFIX)
    d, clock, frac = g.struct.field("1"), g.struct.field("2"), g.struct.field("3")
    ts = (
        pl.coalesce(d, pl.lit(date_hint))
        + pl.lit(" ")
        + clock
        + pl.when(frac.is_not_null()).then(pl.lit(".") + frac.str.slice(0, 6)).otherwise(pl.lit(""))
    )
    return lines.select(
        "_row",
        "line",
        ts.alias("ts"),
        g.struct.field("4").str.strip_chars().alias("rank"),
        g.struct.field("5").alias("msg"),
    )


_SCHEMA = {
    "line": pl.Int64,
    "kind": pl.String,
    "ts": pl.String,
    "rank": pl.String,
    "msg": pl.String,
}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=_SCHEMA)


def merged(quick: pl.DataFrame, typed: pl.DataFrame) -> pl.DataFrame:
    """The bulk lines read here and those the compiled reader typed, in line order (its
    ``dt``, the time read there, null on the others)."""
    if quick.is_empty():
        return typed
    return pl.concat([quick, typed], how="diagonal").sort("line")


def gaps(quick: pl.DataFrame, rare: pl.DataFrame) -> dict[int | None, tuple[int, str | None]]:
    """Where bulk lines lie between the rare ones: the line of each rare line that has bulk
    lines just before it (None: after the last) -> (the row of the first of them in ``quick``,
    its rank, or None when it is unprefixed)."""
    if quick.is_empty():
        return {}
    # per bulk line, the index of the rare line after it (both in line order); a run of
    # bulk lines starts where that index changes
    nxt = rare["line"].search_sorted(quick["line"])
    first = quick.select(
        pl.int_range(pl.len()).alias("i"),
        nxt.alias("next"),
        pl.when(pl.col("ts").is_not_null()).then("rank").alias("rank"),
        (nxt != nxt.shift(1)).fill_null(True).alias("_first"),
    ).filter("_first")
    after = rare["line"].to_list()
    return {
        (after[n] if n < len(after) else None): (i, rank)
        for i, n, rank in first.select("i", "next", "rank").iter_rows()
    }


def counts(quick: pl.DataFrame) -> dict[str, int]:
    """Lines by kind, as ``Frames.counts`` counts them (an ``unknown`` line by whether it is
    prefixed: ``ts`` null or not)."""
    kind = quick.get_column("kind")
    out = dict(kind.value_counts().iter_rows())
    n = out.pop(UNKNOWN, 0)
    if n:
        bare = int((kind.eq(UNKNOWN) & quick.get_column("ts").is_null()).sum())
        out.update({k: v for k, v in ((UNKNOWN_BARE, bare), (UNKNOWN_COUNT, n - bare)) if v})
    return out


def _touched(quick: pl.DataFrame) -> tuple:
    """Bulk lines -> (their last line, latest timestamp, the first line with a timestamp and
    that timestamp; None where none has one)."""
    line, ts = quick.get_column("line"), quick.get_column("ts")
    nulls = ts.null_count()
    if nulls == len(ts):
        return line.max(), None, None, None
    i = 0 if not nulls else ts.is_not_null().arg_true()[0]
    return line.max(), ts.max(), line[i], ts[i]


def touch_runs(
    runs: dict[int, dict[str, Any]], quick: pl.DataFrame, started: dict[int, int]
) -> None:
    """Bulk lines (with ``run_index``) extend their runs as the Python path's ``_touch`` would
    have, line by line: ``started`` holds, per run, the line whose timestamp became its
    ``started_at`` in this chunk (an earlier bulk line's is the one it would have taken)."""
    for ri, last, t1, l0, t0 in per_run(quick, _touched):
        run = runs[ri]
        run["has_content"] = True
        run["last_line"] = max(run["last_line"], last)
        if t0 is None:
            continue
        if run["started_at"] is None or (ri in started and l0 < started[ri]):
            run["started_at"] = t0
        if run["ended_at"] is None or t1 > run["ended_at"]:
            run["ended_at"] = t1


def disorder(
    stamps: list[tuple[int, str]], quick: pl.DataFrame, last: str | None
) -> tuple[int, str | None]:
    """(timestamps earlier than the one before them, the last timestamp) over the Python
    path's stamps and the bulk lines', in file order, after ``last``."""
    if not stamps:  # (a busy server's chunk: bulk lines only, already in file order)
        ts = quick.get_column("ts").drop_nulls()
    else:
        seq = pl.DataFrame(stamps, schema={"line": pl.Int64, "ts": pl.String}, orient="row")
        if not quick.is_empty():
            bulk = quick.select("line", "ts").drop_nulls("ts")
            seq = pl.concat([seq, bulk]).sort("line", maintain_order=True)
        ts = seq["ts"]
    if ts.is_empty():
        return 0, last
    # each against the one before it (views: ~12 us, where a shifted copy costs ~0.1 ms)
    now, prev = ts.slice(1), ts.slice(0, len(ts) - 1)
    n = int((now.lt(prev) & prev.ne("")).sum()) + bool(last and ts[0] < last)
    return n, ts[-1]


def lines_frame(python: pl.DataFrame, quick: pl.DataFrame, max_text: int) -> pl.DataFrame:
    """The ``lines`` frame: the Python path's rows and the bulk lines', in file order; uvicorn
    access lines are kept while the chunk has fewer than ``MAX_ACCESS_LINES`` rows before them."""
    if not quick.is_empty():
        ts, msg = quick.get_column("ts"), quick.get_column("msg")
        dt = quick.get_column("dt") if "dt" in quick.columns else None
        if dt is not None and not dt.null_count():  # (the compiled reader's rows: read there)
            ts = dt.alias("ts")
        else:
            # no fraction anywhere (19 bytes: date, time): the same instants, by the format
            # polars parses fastest (~4x)
            frac = (ts.str.len_bytes().max() or 0) > 19
            ts = ts.str.to_datetime(
                "%Y-%m-%d %H:%M:%S%.f" if frac else "%Y-%m-%d %H:%M:%S",
                strict=False,
                time_unit="us",
                cache=False,
            )
        if (msg.str.len_bytes().max() or 0) > max_text:  # (bytes >= characters)
            msg = msg.str.slice(0, max_text)
        # Series by Series: a `select` of them costs ~0.1 ms more
        got = [quick.get_column(c) for c in ("run_index", "line")] + [ts]
        got += [quick.get_column(c) for c in ("rank", "kind")] + [msg.alias("text")]
        rows = pl.DataFrame(got)
        if rows.schema != python.schema:
            rows = rows.cast(python.schema)
        if python.is_empty():  # (bulk lines only: already in file order)
            python = rows
        else:
            python = pl.concat([python, rows]).sort("line", maintain_order=True)
    if len(python) > MAX_ACCESS_LINES:
        keep = (pl.int_range(pl.len()) < MAX_ACCESS_LINES) | ~pl.col("kind").is_in(ACCESS)
        python = python.filter(keep)
    return python
