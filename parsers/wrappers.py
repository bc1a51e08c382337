"""How a log file is stored around SGLang's text: line endings and wrappers.

Decided once per file from its first bytes (``sniff``), before any line is parsed:

* line endings: ``\\n`` (and ``\\r\\n``), or lone ``\\r`` (old Mac style, some Windows tools).
  A ``\\r`` is also how tqdm redraws a bar inside one line, so the choice is made from the
  file's statistics: lone ``\\r`` count against ``\\n`` count, and whether the ``\\r``-separated
  pieces look like progress-bar frames.
* wrappers (``WRAPPERS``, first match wins): JSON lines from Docker's json-file driver, Fluent
  Bit, Vector or Loki exports (the text under a key such as ``log`` or ``message``), and
  markdown quoting of a paste (``> `` quotes, a 4-space code indent of the whole paste,
  ````` fences).

Pure functions over polars string Series; ``parsers.sglang.LogParser`` applies them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import polars as pl

SNIFF_BYTES = 64 << 10  # the file's first 64 lines decide, at most its first 64 KiB
SNIFF_EOLS = 64
SNIFF_LINES = 200
_EOL_RX = re.compile(rb"[\r\n]")


def sniff_window(buf: bytes, final: bool) -> bytes | None:
    """The bytes that decide how a file is stored: up to its 64th line end (``\\n`` or
    ``\\r``) or its first 64 KiB, whichever is shorter; None while ``buf`` (the file's first
    bytes) is shorter than that and more may come. The same bytes whatever the chunking."""
    head = buf[:SNIFF_BYTES]
    n = 0
    for m in _EOL_RX.finditer(head):
        n += 1
        if n == SNIFF_EOLS:
            return head[: m.end()]
    if len(head) >= SNIFF_BYTES or final:
        return head
    return None


JSON_KEYS = ("log", "message", "msg", "line", "MESSAGE", "text")
_FENCE = r"^\s{0,3}(?:> ?)*(?:```|~~~)[\w+-]*\s*$"
_FENCE_RX = re.compile(_FENCE)
_BAR_RX = re.compile(r"\d%\||it/s\]|s/it\]")


# -- line endings -------------------------------------------------------------------------
def lone_cr(head: bytes) -> bool:
    """Whether the file's lines end with a lone ``\\r`` (rather than ``\\r`` being tqdm's
    in-line redraw): lone ``\\r`` outnumber ``\\n`` twice over and fewer than half of the
    pieces between them look like progress-bar frames."""
    n_cr = head.count(b"\r")
    if not n_cr:
        return False
    n_crlf = head.count(b"\r\n")
    lone = n_cr - n_crlf
    n_lf = head.count(b"\n")
    if lone <= 2 * n_lf:
        return False
    pieces = [p for p in re.split(rb"\r\n|\r|\n", head) if p.strip()]
    bars = sum(1 for p in pieces if _BAR_RX.search(p.decode("utf-8", "replace")))
    return bars * 2 < len(pieces)


def cr_to_lf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


# -- wrappers -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Wrapper:
    name: str
    explanation: str
    # sample lines (the first lines of the file) -> parameters, or None when it does not apply
    detect: Callable[[list[str]], dict[str, Any] | None]
    # (lines, parameters) -> lines; markdown keeps one line per line, JSON may join or split
    unwrap: Callable[[pl.Series, dict[str, Any]], pl.Series]
    keeps_lines: bool


def _nonblank(sample: list[str]) -> list[str]:
    return [s for s in sample if s.strip()]


def _detect_json(sample: list[str]) -> dict[str, Any] | None:
    lines = _nonblank(sample)[:40]
    if not lines:
        return None
    keys: dict[str, int] = {}
    terminated = 0
    n = 0
    for s in lines:
        s = s.strip()
        if not (s.startswith("{") and s.endswith("}")):
            continue
        try:
            obj = json.loads(s)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        for k in JSON_KEYS:
            if isinstance(obj.get(k), str):
                keys[k] = keys.get(k, 0) + 1
                n += 1
                terminated += obj[k].endswith("\n")
                break
    if not keys or n * 10 < len(lines) * 6:
        return None
    key = max(keys, key=lambda k: (keys[k], -JSON_KEYS.index(k)))
    return {"key": key, "terminated": terminated * 2 > n}


def _unwrap_json(lines: pl.Series, params: dict[str, Any]) -> pl.Series:
    # Values stay as they are; the caller joins them (see ``join_json``).
    vals = lines.str.json_path_match("$." + params["key"])
    return pl.select(
        pl.when(vals.is_null()).then(pl.lit(lines) + "\n").otherwise(vals)
        if params["terminated"]
        else pl.when(vals.is_null()).then(pl.lit(lines)).otherwise(vals.str.strip_suffix("\n"))
    ).to_series()


def _quote_share(sample: list[str]) -> float:
    lines = _nonblank(sample)
    return sum(1 for s in lines if s.startswith(">")) / len(lines) if lines else 0.0


def _detect_quote(sample: list[str]) -> dict[str, Any] | None:
    return {} if len(_nonblank(sample)) >= 2 and _quote_share(sample) >= 0.6 else None


def _unwrap_quote(lines: pl.Series, params: dict[str, Any]) -> pl.Series:
    return _blank_fences(lines).str.replace(r"^> ?", "")


def _detect_indent(sample: list[str]) -> dict[str, Any] | None:
    lines = [s for s in _nonblank(sample) if not _FENCE_RX.match(s)]
    if len(lines) < 3 or not all(s.startswith(("    ", "\t")) for s in lines):
        return None
    return {}


def _unwrap_indent(lines: pl.Series, params: dict[str, Any]) -> pl.Series:
    return _blank_fences(lines).str.replace(r"^(?: {4}|\t)", "")


def _detect_fence(sample: list[str]) -> dict[str, Any] | None:
    return {} if any(_FENCE_RX.match(s) for s in sample) else None


def _blank_fences(lines: pl.Series, params: dict[str, Any] | None = None) -> pl.Series:
    return (
        pl.select(pl.when(pl.lit(lines).str.contains(_FENCE)).then(pl.lit("")).otherwise(lines))
        .to_series()
        .alias(lines.name)
    )


WRAPPERS: list[Wrapper] = [
    Wrapper(
        "json-lines",
        "one JSON object per line (Docker json-file, Fluent Bit, Vector, Loki): the text under "
        "`log`, `message`, `msg`, `line`, `MESSAGE` or `text`; Docker's split lines (no "
        "trailing newline in `log`) are joined again",
        _detect_json,
        _unwrap_json,
        False,
    ),
    Wrapper(
        "markdown-quote",
        "a paste quoted with `> `: one level of quoting removed, code fences blanked",
        _detect_quote,
        _unwrap_quote,
        True,
    ),
    Wrapper(
        "markdown-indent",
        "a paste indented by 4 spaces (a markdown code block): the indent removed, fences blanked",
        _detect_indent,
        _unwrap_indent,
        True,
    ),
    Wrapper(
        "markdown-fence",
        "a paste inside ``` fences: the fence lines blanked",
        _detect_fence,
        _blank_fences,
        True,
    ),
]
BY_NAME = {w.name: w for w in WRAPPERS}


def sniff_lines(head: bytes, whole: bool) -> list[str]:
    """The first complete lines of the file's first bytes (the last one too when ``whole``)."""
    text = head.decode("utf-8", errors="replace")
    lines = text.split("\n")
    if not whole:
        lines = lines[:-1]
    return [s.rstrip("\r") for s in lines[:SNIFF_LINES]]


def detect(sample: list[str]) -> tuple[str | None, dict[str, Any]]:
    """-> (wrapper name or None, its parameters), the first row of ``WRAPPERS`` that applies."""
    for w in WRAPPERS:
        params = w.detect(sample)
        if params is not None:
            return w.name, params
    return None, {}


def join_json(
    values: pl.Series, carry: str, terminated: bool, *, final: bool = False
) -> tuple[str | None, str]:
    """Unwrapped JSON values -> (text of the complete lines or None, an unfinished piece).

    ``terminated`` (Docker's ``log``): each value holds its own ``\\n``; a value without one
    is the first piece of a line Docker split, joined with the next (``final``: the end of
    the file, the piece is a line of its own). Otherwise each value is one line (or several,
    when it holds newlines)."""
    if not terminated:
        return ("\n".join(values.to_list()) if len(values) else None), ""
    text = carry + "".join(values.to_list())
    if final:
        text = text.removesuffix("\n")
        return (text if text or len(values) or carry else None), ""
    cut = text.rfind("\n")
    if cut < 0:
        return None, text[: 1 << 20]  # bounded like any line
    return text[:cut], text[cut + 1 :]


__all__ = [
    "BY_NAME",
    "JSON_KEYS",
    "SNIFF_BYTES",
    "WRAPPERS",
    "Wrapper",
    "cr_to_lf",
    "detect",
    "join_json",
    "lone_cr",
    "sniff_window",
    "sniff_lines",
]
