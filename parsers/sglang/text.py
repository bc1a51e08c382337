"""Small helpers on log text: line ends, timestamps."""

from __future__ import annotations

import datetime as dt
import re


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
