"""``Prefill batch`` / ``Decode batch`` lines (the bulk of a long log), vectorised with polars
string kernels: no Python per line."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import polars as pl

from forensics_parsers.sglang import runs as runs_
from forensics_parsers.sglang.frames import DECODE_SCHEMA, PREFILL_SCHEMA, empty

# Key/value fields of Prefill/Decode batch lines that get their own column.
DECODE_FIELDS: list[tuple[str, str, type]] = [
    ("running_req", "#running-req", int),
    ("token", "#token", int),
    ("token_usage", "token usage", float),
    ("accept_len", "accept len", float),
    ("accept_rate", "accept rate", float),
    ("gen_throughput", "gen throughput (token/s)", float),
    ("queue_req", "#queue-req", int),
]
PREFILL_FIELDS: list[tuple[str, str, type]] = [
    ("new_seq", "#new-seq", int),
    ("new_token", "#new-token", int),
    ("cached_token", "#cached-token", int),
    ("token_usage", "token usage", float),
    ("running_req", "#running-req", int),
    ("queue_req", "#queue-req", int),
    ("input_throughput", "input throughput (token/s)", float),
]
GRAPH_DEVICES = ("cuda", "cpu", "npu", "musa", "xpu")  # `<device> graph: True` -> cuda_graph
GRAPH_KEY = r"(?:" + "|".join(GRAPH_DEVICES) + r") graph"
# Keys SGLang writes with a plain number that have no column of their own: they go to `extra`
# on every path; the compiled line reader (native.py) takes the lines that hold them (a line
# with a key of no table is left to the polars path).
EXTRA_KEYS = (
    "#pending-token",
    "pre-allocated usage",
    "#prealloc-req",
    "#transfer-req",
    "#retracted-req",
    "#inflight-req",
    "#full token",
    "full token usage",
    "#swa token",
    "swa token usage",
)
RANK_TAGS = ("DP", "PP", "ATTN_CP", "MOE_DP", "TP", "EP")  # a rank tag: one of these + digits


# Three steps. ``read_heads`` gives each metrics line its kind and timestamp, ``run_of_lines``
# its run (the parser then updates its runs from them: the lines after depend on them);
# ``extract_batch`` turns the prepared lines into the decode/prefill frames. All are pure, so
# an ingest runs the first while it splits the next chunk and the last in a worker thread
# (polars releases the GIL) while the parser goes on with the next chunk.
BATCH_HEAD = r"(?:Decode|Prefill) batch(?: \[\d+\])?[.,] "  # what makes a line a metrics line


def read_heads(batch: pl.DataFrame, date_hint: str) -> tuple[pl.DataFrame, int]:
    """Metrics lines (``line``, ``text``) -> (the lines with their kind, head and timestamp,
    how many are decode lines). It depends on the lines alone, so the parser reads it while
    it splits a chunk; ``run_of_lines`` adds each line's run after."""
    t = pl.col("text")
    if batch["text"].str.contains("\r", literal=True).any():
        batch = batch.with_columns(t.str.split("\r").list.last().alias("text"))
    parts = _heads(batch)
    p = pl.col("prefix")
    # fast path: SGLang's own `[YYYY-MM-DD HH:MM:SS...` prefix; other layouts by regex
    std = p.str.starts_with("[") & (p.str.slice(5, 1) == "-") & (p.str.slice(11, 1) == " ")
    has_frac = p.str.slice(20, 1) == "."
    all_std, any_frac, n_dec = parts.select(
        std.all().alias("a"), has_frac.any().alias("f"), (pl.col("which") == "Decode").sum()
    ).row(0)
    if any_frac:
        fast_ts = (
            pl.when(has_frac)
            .then(p.str.extract(r"^\[([\d-]+ [\d:]+\.\d+)", 1))
            .otherwise(p.str.slice(1, 19))
            .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us", cache=False)
        )
    else:  # no fraction anywhere: the same instants, and a format polars parses fastest
        fast_ts = p.str.slice(1, 19).str.to_datetime(
            "%Y-%m-%d %H:%M:%S", strict=False, time_unit="us", cache=False
        )
    ts = fast_ts if all_std else pl.when(std).then(fast_ts).otherwise(_general_ts(date_hint))
    return parts.with_columns(ts.alias("ts")), int(n_dec or 0)


def run_of_lines(
    batch: pl.DataFrame, boundaries: list[tuple[int, int]], start_run: int
) -> pl.DataFrame:
    """Each line with the run in force at it."""
    if not boundaries:
        return batch.with_columns(pl.lit(start_run, dtype=pl.Int32).alias("run_index"))
    b = pl.DataFrame(
        {"line": [x[0] for x in boundaries], "run_index": [x[1] for x in boundaries]},
        schema={"line": pl.Int64, "run_index": pl.Int32},
    )
    batch = batch.sort("line").join_asof(b, on="line", strategy="backward")
    return batch.with_columns(pl.col("run_index").fill_null(start_run))


_TOUCHED = ("run_index", "line", "ts")  # what ``runs.touch_lines`` reads of a metrics line


def prepare(
    runs: dict[int, dict],
    batch: pl.DataFrame | None,
    typed: tuple[pl.DataFrame, pl.DataFrame] | None,
    boundaries: list[tuple[int, int]],
    start_run: int,
) -> tuple[pl.DataFrame | Prepared | None, int, int]:
    """A chunk's metrics lines (``read_heads``' lines, the compiled reader's typed rows) with
    their runs, the runs they extend touched -> (what ``extract_batch`` takes, or None; decode
    lines, prefill lines)."""
    touch: dict[str, list[pl.DataFrame]] = {"Decode": [], "Prefill": []}
    parts = None
    if batch is not None:
        parts = run_of_lines(batch, boundaries, start_run)
        for (which,), sub in (
            parts.select(_TOUCHED + ("which",))
            .partition_by("which", as_dict=True, include_key=False)
            .items()
        ):
            touch[which].append(sub)
    if typed is not None:
        typed = tuple(  # type: ignore[assignment]
            run_of_lines(t, boundaries, start_run) if len(t) else t for t in typed
        )
        for which, t in zip(touch, typed):
            if len(t):
                touch[which].append(t)
    counts = [sum(len(x) for x in touch[w]) for w in touch]
    for frames_, kind in zip(touch.values(), ("decode", "prefill")):
        if frames_:  # (the same aggregates over any order of the lines)
            one = pl.concat([f.select(_TOUCHED) for f in frames_]) if len(frames_) > 1 else None
            runs_.touch_lines(runs, frames_[0] if one is None else one, kind)
    if typed is not None:
        if not any(counts):
            return None, 0, 0
        return Prepared(parts, typed), counts[0], counts[1]
    return parts, counts[0], counts[1]


def _heads(batch: pl.DataFrame) -> pl.DataFrame:
    """Split each line at its "Decode batch" / "Prefill batch" head with literal finds
    (regex-free: this runs on millions of lines; each find once, as a column: far cheaper
    than repeating them in the expressions)."""
    t = pl.col("text")
    pos_d, pos_p = pl.col("_d"), pl.col("_p")
    is_dec = pos_d.is_not_null() & (pos_p.is_null() | (pos_d < pos_p.fill_null(1 << 30)))
    return (
        batch.with_columns(
            t.str.find("Decode batch", literal=True).alias("_d"),
            t.str.find("Prefill batch", literal=True).alias("_p"),
        )
        .with_columns(is_dec.alias("_dec"))
        .with_columns(
            pl.when(pl.col("_dec")).then(pos_d).otherwise(pos_p).alias("_pos"),
            pl.when(pl.col("_dec"))
            .then(pl.lit("Decode"))
            .otherwise(pl.lit("Prefill"))
            .alias("which"),
        )
        .drop("_d", "_p", "_dec")
        .with_columns(t.str.slice(0, pl.col("_pos")).alias("prefix"))
    )


def _general_ts(hint: str) -> pl.Expr:
    """The timestamp of a line in any layout: a transport prefix may come before SGLang's own
    (kubectl, an aggregator): SGLang's timestamp is the last one before the head."""
    p = (
        pl.col("prefix")
        .str.extract_all(
            r"(?:\d{4}-\d{2}-\d{2}[ T]|\[\d{2}-\d{2} |\[)?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
        )
        .list.last()
    )
    date = p.str.extract(r"(\d{4}-\d{2}-\d{2})[ T]\d{2}:\d{2}:\d{2}", 1)
    date_md = p.str.extract(r"\[(\d{2}-\d{2}) \d{2}:\d{2}:\d{2}", 1)
    clock = p.str.extract(r"(\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)", 1).str.replace(",", ".")
    date = pl.coalesce(date, pl.lit(hint[:4] + "-") + date_md, pl.lit(hint))
    return (
        pl.when(clock.is_not_null())
        .then(
            (date + pl.lit(" ") + clock).str.to_datetime(
                "%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"
            )
        )
        .otherwise(None)
    )


@dataclass
class Prepared:
    """Metrics lines for ``extract_batch`` when the compiled line reader (native.py) typed
    some of them: ``parts``, the lines for the polars path (or None), and ``typed``, the
    decode and prefill rows the reader filled (with their runs)."""

    parts: pl.DataFrame | None
    typed: tuple[pl.DataFrame, pl.DataFrame]


def extract_batch(parts: pl.DataFrame | Prepared | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Prepared metrics lines (``read_heads`` + ``run_of_lines``, or ``Prepared``) ->
    (decode, prefill) frames.

    Pure: reads only its argument, so it may run in another thread than the parser's.
    """
    if isinstance(parts, Prepared):
        dec, pre = extract_batch(parts.parts)
        return _with_typed(dec, parts.typed[0], DECODE_SCHEMA), _with_typed(
            pre, parts.typed[1], PREFILL_SCHEMA
        )
    if parts is None:
        return empty("decode"), empty("prefill")
    t = pl.col("text")
    # where the head's words end; the text after them is sliced once (a copy of every line)
    end = pl.col("_pos") + pl.when(pl.col("which") == "Decode").then(12).otherwise(13)
    if parts.select((t.str.slice(end, 2) == " [").any()).item():
        # `[N]` iteration tags (SGLANG_LOG_FORWARD_ITERS, 0.5.4)
        a = t.str.slice(end)
        parts = parts.with_columns(
            a.str.extract(r"^ \[(\d+)\]", 1).cast(pl.Int64, strict=False).alias("iter"),
            a.str.replace(r"^(?: \[\d+\])?[.,] ", "").alias("rest"),
        )
    else:
        parts = parts.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("iter"), t.str.slice(end + 2).alias("rest")
        )
    parts = parts.drop("text", "_pos").with_columns(_rank(parts).alias("rank"))
    out = []
    by_kind = parts.partition_by("which", as_dict=True)  # one pass, in line order
    for which, fields, schema in (
        ("Decode", DECODE_FIELDS, DECODE_SCHEMA),
        ("Prefill", PREFILL_FIELDS, PREFILL_SCHEMA),
    ):
        sub = by_kind.get((which,))
        if sub is None or sub.is_empty():
            out.append(empty(which.lower()))
            continue
        done, rest = _fields_fast(sub, fields, schema)
        frames_ = [done] if done is not None and not done.is_empty() else []
        if not rest.is_empty():
            frames_.append(_fields_general(rest, fields, schema))
        res = pl.concat(frames_, how="vertical_relaxed") if len(frames_) > 1 else frames_[0]
        out.append(res.sort("line") if len(frames_) > 1 else res)
    return out[0], out[1]


def _with_typed(done: pl.DataFrame, typed: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """The rows of the polars path and the compiled reader's, in line order."""
    if typed.is_empty():
        return done
    have = typed.schema  # (built anew at each read: once, not once a column)
    if all(have.get(c) == dt_ for c, dt_ in schema.items()):
        # the reader's columns are of the table's types (the usual case): taken in its order,
        # without a cast for each (~0.1 ms a chunk)
        typed = pl.DataFrame([typed.get_column(c) for c in schema])
    else:
        typed = typed.select([pl.col(c).cast(dt_) for c, dt_ in schema.items()])
    return typed if done.is_empty() else pl.concat([done, typed]).sort("line")


_TAGS = "|".join(RANK_TAGS)
_RANK = r"((?: (?:" + _TAGS + r")\d+)+)\]"  # the rank tags, first match in the prefix
# SGLang's own head, `[YYYY-MM-DD HH:MM:SS( TPn...)] `: its tags are the first match of _RANK
# (the only spaces before them are followed by digits), so they are cut by position
_PLAIN_HEAD = (
    r"^\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?: (?:" + _TAGS + r")[0-9]+)*\] $"  # (ASCII: a byte per character)
)


def _rank(parts: pl.DataFrame) -> pl.Expr:
    """Each line's rank tags (`TP3`, `DP1 TP3`; "" without): cut by position where every
    prefix has SGLang's own plain head (a match test, no capture), else by _RANK."""
    p = pl.col("prefix")
    if parts.select(p.str.contains(_PLAIN_HEAD).all()).item():
        return p.str.slice(20, p.str.len_bytes() - 22).str.strip_chars().fill_null("")
    return p.str.extract(_RANK, 1).str.strip_chars().fill_null("")


def _fields_general(sub: pl.DataFrame, fields: list, schema: dict) -> pl.DataFrame:
    """Key/value fields of metrics lines in any layout: one literal find per known key."""
    r = pl.col("rest")
    cols = []
    known = []
    found = []
    for col, key, _typ in fields:
        known.append(re.escape(key) + r": (?:-?[\d.]+|nan|inf)%?")
        # literal find + short slice: far cheaper than a capture regex per field
        pos = (
            pl.when(r.str.starts_with(key + ": "))
            .then(pl.lit(-2, dtype=pl.Int64))
            .otherwise(r.str.find(", " + key + ": ", literal=True).cast(pl.Int64))
        )
        raw = (
            r.str.slice(pos + len(key) + 4, 32)
            .str.split_exact(",", 0)
            .struct.field("field_0")
            .str.strip_chars(" %")
        )
        dtype = schema[col]
        cols.append(raw.cast(pl.Float64, strict=False).cast(dtype, strict=False).alias(col))
        found.append(pos.is_not_null().cast(pl.Int32))
    graph = r.str.extract(r"(?:^|, )" + GRAPH_KEY + r": (True|False)", 1)
    known.append(GRAPH_KEY + r": (?:True|False)")
    cols.append((graph == "True").alias("cuda_graph"))
    found.append(graph.is_not_null().cast(pl.Int32))
    # segments not matched by a known key go to `extra` (kept, never dropped)
    nseg = r.str.strip_chars_end(", ").str.count_matches(", ", literal=True) + 1
    cols.append((nseg - pl.sum_horizontal(found)).alias("_unknown"))
    sub = sub.with_columns(cols)
    if (sub["_unknown"].max() or 0) > 0:  # all-null when no line kept its head
        leftover = r.str.replace_all(r"(?:^|, )(?:" + "|".join(known) + r")", "").str.strip_chars(
            ", "
        )
        sub = sub.with_columns(
            pl.when(pl.col("_unknown") > 0)
            .then(leftover)
            .otherwise(None)
            .map_elements(_extra_json, return_dtype=pl.String)
            .alias("extra")
        )
    else:
        sub = sub.with_columns(pl.lit(None, dtype=pl.String).alias("extra"))
    return sub.select([pl.col(c).cast(dt_) for c, dt_ in schema.items()])


def _json_value(v: pl.Expr) -> pl.Expr:
    numeric = v.str.contains(r"^-?\d+(?:\.\d+)?(?:e[-+]?\d+)?$")
    quoted = (
        pl.lit('"')
        + v.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
        + pl.lit('"')
    )
    return pl.when(numeric).then(v).otherwise(quoted)


# a value with a space or % around it: `key:  1`, `1 , key`, `87%` (literal finds: several
# times cheaper than one regex alternation of them over every metrics line)
_PADDED = ("%", ":  ", " ,")
# the fast path's widest layout: it builds a column (and an expression or two) per key, so a
# line of thousands of `key: value` fields costs memory per field there (a 4 MB chunk of
# 60 KB lines: ~300 MB); wider lines take the general path (one pass per known key)
FAST_KEYS_MAX = 64


def _fields_fast(
    sub: pl.DataFrame, fields: list, schema: dict
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """The common case: every line has the key layout of the first one (one run, one version).

    One ``splitn`` per line and a prefix check per key, instead of a search per key. Lines
    that do not fit the layout are returned for the general path.
    """
    first = sub["rest"].drop_nulls().head(1).to_list()
    if not first:
        return None, sub
    segs = [x for x in first[0].rstrip().rstrip(",").split(", ") if x]
    keys = [seg.partition(": ")[0] for seg in segs]
    if (
        not keys
        or len(keys) > FAST_KEYS_MAX
        or any(not k or ": " not in seg for k, seg in zip(keys, segs))
    ):
        return None, sub
    n = len(keys)
    r = pl.col("rest")
    # the strips only where they can change something (each is a copy of the column)
    ragged, padded = sub.select(
        (r.str.ends_with(",") | r.str.ends_with(" ")).any().alias("ragged"),
        pl.any_horizontal(r.str.contains(x, literal=True) for x in _PADDED).any().alias("padded"),
    ).row(0)
    split = sub.with_columns(
        (r.str.strip_chars_end(", ") if ragged else r).str.splitn(", ", n).alias("_s")
    ).unnest("_s")
    names = [f"field_{i}" for i in range(n)]
    ok = pl.all_horizontal(
        [pl.col(c).str.starts_with(k + ": ").fill_null(False) for c, k in zip(names, keys)]
        + [~pl.col(names[-1]).str.contains(", ", literal=True).fill_null(True)]
    )
    split = split.with_columns(ok.alias("_ok"))
    if split["_ok"].all():  # the common case: no copy of the lines by a filter
        good, bad = split, sub.clear()
    else:
        good = split.filter(pl.col("_ok"))
        bad = sub.filter(split["_ok"].not_())
    if good.is_empty():
        return None, sub
    by_key = {k: (c, len(k) + 2) for c, k in zip(names, keys)}
    cols = []
    for col, key, _typ in fields:
        if key in by_key:
            c, off = by_key[key]
            v = pl.col(c).str.slice(off)
            v = v.str.strip_chars(" %") if padded else v
            cols.append(v.cast(pl.Float64, strict=False).cast(schema[col], strict=False).alias(col))
        else:
            cols.append(pl.lit(None, dtype=schema[col]).alias(col))
    graph = [k for k in keys if re.fullmatch(GRAPH_KEY, k)]
    if graph:
        c, off = by_key[graph[0]]
        cols.append((pl.col(c).str.slice(off) == "True").alias("cuda_graph"))
    else:
        cols.append(pl.lit(None, dtype=pl.Boolean).alias("cuda_graph"))
    known = {key for _, key, _ in fields} | set(graph)
    unknown = [k for k in keys if k not in known]
    if unknown:
        parts_ = []
        for i, k in enumerate(unknown):
            c, off = by_key[k]
            parts_ += [
                pl.lit(("{" if i == 0 else ", ") + json.dumps(k) + ": "),
                _json_value(pl.col(c).str.slice(off).str.strip_chars_end("%")),
            ]
        parts_.append(pl.lit("}"))
        cols.append(pl.concat_str(parts_).alias("extra"))
    else:
        cols.append(pl.lit(None, dtype=pl.String).alias("extra"))
    done = good.with_columns(cols).select([pl.col(c).cast(dt_) for c, dt_ in schema.items()])
    return done, bad


_JSON_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _extra_json(s: str | None) -> str | None:
    """Unknown ``key: value`` segments as a JSON object, numbers kept as the log wrote them
    (the same text ``_fields_fast`` builds, so both paths store identical rows)."""
    if not s:
        return None
    items: list[str] = []
    unparsed: list[str] = []
    for seg in s.split(", "):
        k, sep, v = seg.partition(": ")
        if not sep:
            unparsed.append(seg)
            continue
        v = v.rstrip("%")
        value = v if _JSON_NUMBER.fullmatch(v) else json.dumps(v, ensure_ascii=False)
        items.append(f"{json.dumps(k, ensure_ascii=False)}: {value}")
    if unparsed:
        items.append('"_unparsed": ' + json.dumps(unparsed, ensure_ascii=False))
    return "{" + ", ".join(items) + "}"
