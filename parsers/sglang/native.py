"""The compiled line reader (parsers/sglang/_linescan.c), optional.

Per chunk, one pass in C over the bytes: it splits the lines and turns every ``Decode batch``
/ ``Prefill batch`` line of SGLang's plain layout (``[YYYY-MM-DD HH:MM:SS( TPn)] Decode batch,
key: value, ...``, every key one of the tables below, every value a plain number) into a typed
row; every other line comes back with its line number and takes the polars path as before.
The reader takes only what it can decide exactly as that path would (the C file's header says
how), so the rows are the same with it or without it: tests/test_parser_native.py and the
golden digests (tests/test_parser_golden.py) run both.

It is built by setup.py as an optional extension: without a C compiler the package installs
without it and ``scan`` returns None. ``FORENSICS_PURE_PARSER=1`` (or ``ENABLED = False``)
turns it off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import polars as pl

from forensics_parsers.secrets import PEM_BEGIN
from forensics_parsers.sglang import metrics
from forensics_parsers.sglang.frames import DECODE_SCHEMA, PREFILL_SCHEMA
from forensics_parsers.sglang.rules import ANSI_RX

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


if _linescan is not None:
    _configure(_linescan)

ENABLED = _linescan is not None and os.environ.get(PURE_ENV, "").strip() in ("", "0")


@dataclass
class Scanned:
    """A chunk read by the compiled reader: ``n`` lines; ``other`` (``line``, ``text``), the
    lines it left to the polars path (ANSI sequences removed, as text.py removes them);
    ``decode`` / ``prefill``, the rows it typed (``line``, ``ts``, ``rank``, ``iter``, the
    fields, ``cuda_graph``, ``extra``; no ``run_index`` yet); ``cr``: some other line holds a
    CR; ``stats``: text.py's counters of the decoding steps."""

    n: int
    other: pl.DataFrame
    decode: pl.DataFrame
    prefill: pl.DataFrame
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
    other, decode, prefill = (_frame(x) for x in got)
    col = pl.col("text")
    pem, bad, esc, cr = other.select(  # one call: each costs ~0.1 ms whatever its rows
        col.str.contains(PEM_BEGIN, literal=True).any(),
        col.str.count_matches("\ufffd", literal=True).sum().alias("bad"),
        col.str.contains("\x1b", literal=True).any().alias("esc"),
        col.str.contains("\r", literal=True).any().alias("cr"),
    ).row(0)
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
    n = len(other) + len(decode) + len(prefill)
    return Scanned(n, other, decode, prefill, bool(cr), stats)
