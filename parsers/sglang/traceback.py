"""Tracebacks in a log: which lines continue an open one, and what it says (exception type,
message). The open traceback is a plain dict (it is part of the parser's resumable state);
``closed_row`` turns it into a row of the ``errors`` frame."""

from __future__ import annotations

import re
from typing import Any

from forensics_parsers.sglang.text import to_dt

MAX_TRACEBACK = 64_000  # text kept per traceback

# A traceback frame line with no open traceback: the header was lost.
ORPHAN_FRAME_RX = re.compile(r'^\s+File "[^"]+", line \d+, in \S|^\s+File "/')
# After a frame line, a flush-left piece that is no exception line: the rest of the frame line,
# hard-wrapped at the screen width (a copy from a terminal, a mail).
WRAP_PIECE_RX = re.compile(r'^[\w<>.,/" -]+$')
# Traceback continuation lines (unprefixed) and the final exception line.
TB_CONT_RX = re.compile(
    r'^(?:\s+\S|File "[^"]+", line \d+, in |'
    r"\s*$|Traceback \(most recent call last\)|During handling of the above|The above exception was|\s*\^+\s*$|Possible solutions:|\d+\. |Open an issue on GitHub|Search for `|CUDA kernel errors might|For debugging consider|Compile with `TORCH_USE_CUDA_DSA`|Exception raised from|frame #\d+|[\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b)"
)
EXC_LINE_RX = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Warning)|Exception|KeyboardInterrupt)(?::\s?(?P<msg>.*))?$"
)


def new(run_index: int, line_no: int, ts: str | None, rank: str, component: str) -> dict[str, Any]:
    return {
        "run_index": run_index,
        "line": line_no,
        "last_line": line_no,
        "ts": ts,
        "rank": rank,
        "component": component,
        "text": [],
        "exc_type": None,
        "message": None,
        "lines": 0,
        "in_message": False,
        "ambiguous": False,
        "size": 0,
    }


def continues(tb: dict[str, Any], msg: str) -> bool:
    """Whether an unprefixed line continues the open traceback."""
    return bool(
        TB_CONT_RX.match(msg)
        or tb["in_message"]
        or tb.get("code_next")
        or (tb.get("wrap", 0) and WRAP_PIECE_RX.match(msg))
    )


def add(tb: dict[str, Any], line_no: int, msg: str) -> None:
    """One more line of the open traceback."""
    tb["last_line"] = line_no
    tb["lines"] += 1
    if tb["size"] < MAX_TRACEBACK:
        tb["text"].append(msg)
        tb["size"] += len(msg) + 1
    s = msg.rstrip()
    # a frame line that lost its indentation (a paste, some collectors): the next
    # line is its code line, flush left too
    code_line = tb.get("code_next", False)
    tb["code_next"] = s.startswith('File "')
    if code_line and not tb["code_next"]:
        tb["wrap"] = 0
        return
    if s.lstrip().startswith('File "') or (s.startswith((" ", "\t")) and tb.get("wrap")):
        # pieces of a hard-wrapped frame or code line may follow, flush left (frames_of
        # rejoins a frame line's pieces)
        tb["wrap"] = 3
    elif tb.get("wrap") and WRAP_PIECE_RX.match(s) and not EXC_LINE_RX.match(s):
        tb["wrap"] -= 1
        return
    else:
        tb["wrap"] = 0
    if not s.startswith((" ", "\t")):
        em = EXC_LINE_RX.match(s)
        if em:
            tb["exc_type"] = em.group("type")
            tb["message"] = em.group("msg") or ""
            tb["in_message"] = True
            return
        if s.startswith(("Traceback", "During handling", "The above exception")):
            tb["in_message"] = False


def closed_row(tb: dict[str, Any]) -> dict[str, Any]:
    """The ``errors`` row of a finished traceback."""
    return {
        "run_index": tb["run_index"],
        "line": tb["line"],
        "last_line": tb["last_line"],
        "ts": to_dt(tb["ts"]),
        "rank": tb["rank"],
        "kind": "traceback",
        "component": tb["component"],
        "exc_type": tb["exc_type"],
        "message": (tb["message"] or "")[:2000],
        "text": "\n".join(tb["text"]),
        "ambiguous": tb["ambiguous"],
    }
