"""The compiled line reader (parsers/sglang/_linescan.c), optional.

Per chunk, one pass in C over the bytes: it splits the lines and turns every ``Decode batch``
/ ``Prefill batch`` line of SGLang's plain layout (``[YYYY-MM-DD HH:MM:SS( TPn)] Decode batch,
key: value, ...``, every key one of the tables below, every value a plain number) into a typed
row; every other line comes back with its line number and takes the polars path as before.
The reader takes only what it can decide exactly as that path would (the C file's header says
how), so the rows are the same with it or without it: tests/test_parser_native.py and the
golden digests (tests/test_parser_golden.py) run both.

It also reads uvicorn's access lines and the ``WARNING:`` lines of that layout into the rows
parsers/sglang/bulk.py gives them (``Scanned.bulk``), by the shape of their rules
(``SHAPES``) and, for the earlier rules of the table and the secrets step, by the literals
their own patterns need (parsers/regex_literals.py): a line holding one of those is decided
here by the patterns themselves (``_checked``).

It is built by setup.py as an optional extension: without a C compiler the package installs
without it and ``scan`` returns None. ``FORENSICS_PURE_PARSER=1`` (or ``ENABLED = False``)
turns it off.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any

import polars as pl

from forensics_parsers.regex_literals import required
from forensics_parsers.secrets import HINT_SIEVE, PEM_BEGIN, redact_lines
from forensics_parsers.sglang import metrics
from forensics_parsers.sglang.frames import DECODE_SCHEMA, PREFILL_SCHEMA
from forensics_parsers.sglang.rules import ANSI_RX, RULES, find_rule

try:
    from forensics_parsers.sglang import _linescan
except ImportError:  # built without a compiler: the pure path
    _linescan = None

PURE_ENV = "FORENSICS_PURE_PARSER"
_TYPES = {pl.Int32: "i", pl.Int64: "l", pl.Float32: "f"}  # a field's column -> the C type


def _configure(mod: Any) -> None:
    """The layout tables, from metrics.py's (one definition of each key)."""
    kinds = [
        (head, [(col, key, _TYPES[schema[col]]) for col, key, _ in fields])
        for head, fields, schema in (
            ("Decode batch", metrics.DECODE_FIELDS, DECODE_SCHEMA),
            ("Prefill batch", metrics.PREFILL_FIELDS, PREFILL_SCHEMA),
        )
    ]
    graph = [f"{d} graph" for d in metrics.GRAPH_DEVICES]
    # keys are written into `extra`'s JSON as they are: none may need escaping
    assert not any(c in k for k in metrics.EXTRA_KEYS for c in '"\\')
    mod.configure(kinds, graph, list(metrics.EXTRA_KEYS), list(metrics.RANK_TAGS))


# the messages the C readers `access_shape` / `warning_shape` accept: the patterns of the
# rules marked ``compiled`` (in table order) as they were when the readers were written (a
# rule changed: the reader types no such line, and tests/test_parser_native.py fails)
SHAPES = (r"^INFO: +\S+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}", r"^WARNING: +")
SHAPED = [r for r in RULES if r.compiled]
BULK_MAX_LINE = 1 << 16  # longer lines are left to the polars path (at most parser.MAX_LINE)
_MSG, _LINE = 0, 1  # a literal searched in the message, or in the whole line


def bulk_tables() -> tuple[list[tuple[bytes, bool, bool, int]], list[list]] | None:
    """``configure_bulk``'s literals and groups (the rules before each of SHAPES' rules, the
    secrets sieve, a line the reader leaves), or None where a pattern's literals cannot be read (or a
    shape is not its rule's pattern): the reader then types no such line."""
    lits: dict[tuple[bytes, bool, bool, int], int] = {}
    # each rule's pattern read once (the rules before each shape: 53 reads of 31 patterns)
    needs = functools.cache(required)

    def dnf(patterns: list[str], scope: int) -> list[list[list[int]]] | None:
        out = []
        for pattern in patterns:
            alts = needs(pattern)
            if alts is None:
                return None
            for alt in alts:  # (a clause of a character the lines cannot hold: left out)
                ok = [c for c in alt if all(lit.text.isascii() for lit in c)]
                if not ok:  # (it would match any line)
                    return None
                keys = [
                    [(lit.text.encode(), lit.icase, lit.anchored, scope) for lit in c] for c in ok
                ]
                out.append([[lits.setdefault(k, len(lits)) for k in c] for c in keys])
        return out

    if [r.pattern for r in SHAPED] != list(SHAPES) or not all(r.inert for r in SHAPED):
        return None
    before = [[r.pattern for r in RULES[: RULES.index(r)]] for r in SHAPED]
    groups = [dnf(b, _MSG) for b in before]
    # (a metrics line is the polars path's, a PEM key's BEGIN makes the chunk that path's)
    groups += [dnf(list(HINT_SIEVE), _LINE), dnf([metrics.BATCH_HEAD, re.escape(PEM_BEGIN)], _LINE)]
    if any(g is None for g in groups) or len(lits) > 512:
        return None
    return list(lits), groups


if _linescan is not None:
    _configure(_linescan)
    _tables = bulk_tables()
    if _tables is not None:
        _linescan.configure_bulk(BULK_MAX_LINE, *_tables, [r.name for r in SHAPED])

ENABLED = _linescan is not None and os.environ.get(PURE_ENV, "").strip() in ("", "0")


@dataclass
class Scanned:
    """A chunk read by the compiled reader: ``n`` lines; ``other`` (``line``, ``text``), the
    lines it left to the polars path (ANSI sequences removed, as text.py removes them);
    ``decode`` / ``prefill``, the rows it typed (``line``, ``ts``, ``rank``, ``iter``, the
    fields, ``cuda_graph``, ``extra``; no ``run_index`` yet); ``bulk``, the access and warning
    lines, as bulk.py's rows (``line``, ``kind``, ``ts``, ``rank``, ``msg``) and ``dt``, their
    time (the ``lines`` table's ``ts``); ``cr``: some other line holds a CR; ``stats``:
    text.py's counters of the decoding steps."""

    n: int
    other: pl.DataFrame
    decode: pl.DataFrame
    prefill: pl.DataFrame
    bulk: pl.DataFrame
    cr: bool
    stats: dict[str, int]


class _Capsules:
    """An Arrow C data pair (schema, array) as polars imports it (no copy of the values)."""

    def __init__(self, pair: tuple[Any, Any]):
        self._pair = pair

    def __arrow_c_array__(self, requested_schema: Any = None) -> tuple[Any, Any]:
        return self._pair


def _frame(pair: tuple[Any, Any]) -> pl.DataFrame:
    return pl.Series("t", _Capsules(pair)).struct.unnest()


def scan(data: bytes, first_line: int, sniff: dict[str, Any] | None = None) -> Scanned | None:
    """The chunk's lines (numbered from ``first_line``) through the compiled reader, or None
    where the polars path reads the whole chunk: the reader is absent or off, the file has a
    wrapper (``sniff``: JSON lines, markdown: wrappers.py unwraps them), the chunk is not
    valid UTF-8 or holds a NUL (text.py's decoding counts what it changes), an ANSI OSC
    sequence (it may span lines) or a PEM private key (the secrets step redacts the lines
    after its first one, whatever they are)."""
    if not ENABLED or _linescan is None or (sniff or {}).get("wrapper"):
        return None
    got = _linescan.scan(data, first_line)
    if got is None:
        return None
    other, decode, prefill, bulk = (_frame(x) for x in got)
    bulk, back = _checked(bulk)
    if back is not None:
        other = pl.concat([other, back]).sort("line")
    col = pl.col("text")
    pem, bad, esc, cr = (  # one call: each costs ~0.1 ms whatever its rows (none: no call)
        other.select(
            col.str.contains(PEM_BEGIN, literal=True).any(),
            col.str.count_matches("\ufffd", literal=True).sum().alias("bad"),
            col.str.contains("\x1b", literal=True).any().alias("esc"),
            col.str.contains("\r", literal=True).any().alias("cr"),
        ).row(0)
        if other.height
        else (False, 0, False, False)
    )
    if pem:
        return None
    stats: dict[str, int] = {}
    if bad:  # text.py counts every U+FFFD of the decoded text, the log's own ones too
        stats["decode_errors"] = int(bad)
    if esc:
        text = other["text"]
        if text.str.contains("\x1b]", literal=True).any():
            return None
        # CSI sequences end on their line: removed line by line, as from the whole text
        old = text.to_list()
        new = [ANSI_RX.sub("", t) for t in old]
        stats["ansi_stripped"] = sum(len(a) - len(b) for a, b in zip(old, new))
        other = other.with_columns(pl.Series("text", new, dtype=pl.String))
        cr = bool(other["text"].str.contains("\r", literal=True).any())
    n = len(other) + len(decode) + len(prefill) + len(bulk)
    return Scanned(n, other, decode, prefill, bulk, bool(cr), stats)


def gaps(got: Scanned | None, base: int) -> tuple[pl.Series | None, bool]:
    """Where the lines the reader typed lie between those it left (the chunk's first line is
    ``base + 1``): per line left, whether some come just before it, and whether some come
    after the last (``redact_lines``' ``gaps`` and ``tail_gap``); None, False: no reader."""
    if got is None:
        return None, False
    seen = got.other["line"]
    tail = (seen[-1] if len(seen) else base) != base + got.n
    return (seen - seen.shift(1, fill_value=base)) != 1, tail


def texts(bulk: pl.DataFrame) -> pl.DataFrame:
    """Bulk rows the reader typed -> their lines (``line``, ``text``) as they were (the
    reader takes only `[date time( TAGn)*] msg`)."""
    rank = pl.col("rank")
    tags = pl.when(rank != "").then(pl.lit(" ") + rank).otherwise(pl.lit(""))
    text = pl.concat_str(pl.lit("["), pl.col("ts"), tags, pl.lit("] "), pl.col("msg"))
    return bulk.select("line", text.alias("text"))


def _checked(bulk: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """The reader's bulk rows -> (those that stay, the lines (``line``, ``text``) that go back
    to ``other``). A row it flagged holds a literal of an earlier rule (bit 1: the table's own
    matcher decides its rule) or of the secrets sieve (bit 2: it goes back if the secrets step
    would change it)."""
    flag = bulk.drop_in_place("flag")
    if not flag.max():  # (flags are >= 0; None: no row)
        return bulk, None
    at = flag.ne(0).arg_true()
    sus, flags = bulk.gather(at), flag.gather(at).to_list()
    bad = set()
    ruled = [i for i, f in enumerate(flags) if f & 1]
    if ruled:
        rows = sus[ruled].select("line", "kind", "msg").rows()
        bad = {n for n, kind, msg in rows if (f := find_rule(msg)) is None or f[0].name != kind}
    secret = [i for i, f in enumerate(flags) if f & 2]
    if secret:
        lines = texts(sus[secret])
        done = redact_lines(lines["text"])
        if done.changed:
            bad |= set(lines["line"].filter(done.lines.ne(lines["text"])).to_list())
    if not bad:
        return bulk, None
    out = pl.col("line").is_in(pl.Series(sorted(bad), dtype=pl.Int64).implode())
    return bulk.filter(~out), texts(bulk.filter(out))
