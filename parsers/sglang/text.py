"""Small helpers on log text: line ends, timestamps."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import polars as pl

from forensics_parsers import wrappers as W
from forensics_parsers.sglang.rules import ANSI_RX


def find_eol(buf: bytes, cr: bool) -> int:
    """The first line end (``\\n``; with lone-CR endings ``\\r`` too), or -1."""
    nl = buf.find(b"\n")
    if cr:
        r = buf.find(b"\r")
        if r >= 0 and (nl < 0 or r < nl):
            return r + 1 if buf[r + 1 : r + 2] == b"\n" else r
    return nl


def rfind_eol(buf: bytes, cr: bool) -> int:
    """The last line end, or -1. With lone-CR endings a ``\\r`` at the very end of the bytes
    may be the first half of ``\\r\\n``: it waits for the next byte."""
    nl = buf.rfind(b"\n")
    if not cr:
        return nl
    r = buf.rfind(b"\r", 0, len(buf) - 1)
    return max(nl, r)


def to_dt(ts: str | None) -> dt.datetime | None:
    if ts is None:
        return None
    try:
        return dt.datetime.fromisoformat(ts)
    except ValueError:
        return None


def ts_of(m: re.Match[str], date_hint: str) -> str | None:
    """The timestamp text of a ``PREFIX_RX`` match (the date from the hint where the line has
    none, the year from it where the line has only month and day)."""
    d = m.group("d1") or m.group("d2") or m.group("d3")
    t = m.group("t1") or m.group("t2") or m.group("t3")
    f = m.group("f1") or m.group("f2") or m.group("f3")
    if not t:
        return None
    if d is None:
        d = date_hint
    else:
        d = d.strip()
        if len(d) == 5:  # %m-%d: year from the hint
            d = date_hint[:4] + "-" + d
    return f"{d} {t}" + (f".{f[:6]}" if f else "")


def chunk_text(
    data: bytes, sniff: dict[str, Any], carry: str, partial: bool, stats: dict[str, int]
) -> tuple[str | None, str]:
    """A chunk's text: NUL bytes dropped, decoded, JSON records unwrapped (``carry``: an
    unfinished record of the chunk before), ANSI removed -> (text, or None while a JSON record
    is unfinished; the carry for the next chunk). Counts what it changed in ``stats``."""
    nul = data.count(b"\x00") if b"\x00" in data else 0  # (`in` stops at the first)
    if nul:
        stats["nul_bytes"] = nul
        data = data.replace(b"\x00", b"")
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad:
        stats["decode_errors"] = bad
    if text.endswith("\n"):
        text = text[:-1]
    wrapper = W.BY_NAME.get(sniff.get("wrapper") or "")
    if wrapper is not None and not wrapper.keeps_lines:
        # JSON lines: the text of each record; Docker's split records joined again
        params = sniff["params"]
        raw = pl.Series("text", text.split("\n") if data else [], dtype=pl.String)
        text, carry = W.join_json(
            wrapper.unwrap(raw, params) if len(raw) else raw,
            carry,
            params["terminated"],
            final=partial,
        )
        if text is None:
            return None, carry
    if "\x1b" in text:
        n0 = len(text)
        text = ANSI_RX.sub("", text)
        stats["ansi_stripped"] = n0 - len(text)
    return text, carry


FAST_LINES_MIN = 1 << 16  # smaller chunks are split the plain way
# bytes with which polars' CSV reader would not give exactly the decoded text's lines (and
# its separator): the plain path handles them (NUL, ANSI, CR, decode errors)
_NOT_PLAIN = (b"\x00", b"\x1b", b"\r", b"\x1f")


def plain_lines(data: bytes) -> pl.Series | None:
    """The lines of a chunk of plain ASCII text (no NUL, ESC or CR), as ``chunk_text`` and a
    split at ``\n`` would give them, read by polars' CSV reader as one column (its threads
    split the bytes; no Python string is made); None for any other chunk."""
    if len(data) < FAST_LINES_MIN or not data.isascii() or any(b in data for b in _NOT_PLAIN):
        return None
    return pl.read_csv(
        data,
        has_header=False,
        separator="\x1f",
        quote_char=None,
        schema={"text": pl.String},
        empty_string_is_null=False,
    ).to_series()


def chunk_lines(
    data: bytes, sniff: dict[str, Any], carry: str, partial: bool, stats: dict[str, int]
) -> tuple[pl.Series | None, bool, str]:
    """A chunk's lines, split at LF (``plain_lines`` where it applies, else ``chunk_text``
    split) -> (lines, or None while a JSON record is unfinished; whether a line has a CR;
    the JSON carry for the next chunk)."""
    wrapper = W.BY_NAME.get(sniff.get("wrapper") or "")
    if wrapper is None or wrapper.keeps_lines:
        lines = plain_lines(data)
        if lines is not None:
            return lines, False, carry
    text, carry = chunk_text(data, sniff, carry, partial, stats)
    if text is None:
        return None, False, carry
    return pl.Series("text", [text], dtype=pl.String).str.split("\n").explode(), "\r" in text, carry
