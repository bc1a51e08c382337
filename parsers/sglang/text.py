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
