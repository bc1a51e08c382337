"""Where SGLang's own line starts inside a physical line, whatever was put before it.

Whatever collected a log may put its own prefix before every line: kubectl's RFC3339
timestamps, docker compose's `name  | `, a log aggregator's `May 16, 2026 @ 20:44:54.728    `,
torchrun's `[rank0]:`, or anything else. Instead of a list of known prefixes, this module
knows SGLang's own line shapes (``ANCHORS``) and finds the first one in a line: what comes
before it is the transport prefix.

Lines that have no SGLang shape of their own (a traceback's code lines, py-spy dumps, pip
output) are stripped by the prefixes ``PrefixFinder`` has *learned* from the lines that do:
each prefix found is generalised into a shape (digit runs become ``\\d+``, everything else is
literal, whitespace included, so the indentation after it survives) and a shape seen twice
is stripped from every line that starts with it. The learning is sequential and part of the
parser's state, so streaming, resuming and one pass agree.
"""

from __future__ import annotations

import re
from typing import Any

_TAGS = r"(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*"
_LEVEL = r"(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)"

# SGLang's own line shapes: (name, pattern, where the SGLang line starts).
#   "start": the line starts where the pattern starts (flush-left shapes);
#   "indent": an indented shape (a traceback frame): the line starts after the prefix's
#             last non-blank character and one separator blank, so the indentation stays.
# A prefix is learned only from "start" shapes that are not `weak` (see ``locate``).
ANCHORS: list[tuple[str, str, str]] = [
    # [2025-04-28 10:00:00(.123)( DP0 TP0 EP0)] msg, [04:40:55 TP0], [04-28 10:00:00]
    (
        "sglang_bracket",
        r"\[(?:\d{4}-\d{2}-\d{2} |\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?" + _TAGS + r"\] ",
        "start",
    ),
    # Python-logging forks: 2026-06-07 10:59:31,659 [INFO] name: msg
    (
        "pylogging_bracket",
        r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)? \[[A-Z]+\] [\w.\-]+: ",
        "start",
    ),
    # 2026-06-07 10:59:31 INFO 1234 [file.py:12] msg
    (
        "pylogging_pid",
        r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)? "
        + _LEVEL
        + r" \d+ \[[\w./\-]+:\d+\] ",
        "start",
    ),
    # INFO 03-06 10:05:08 __init__.py:190] msg (vLLM-style, printed by shared libraries)
    (
        "level_date_file",
        _LEVEL + r" \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? [\w.\-]+:\d+\] ",
        "start",
    ),
    # INFO server_args.py:1565: msg   /   WARNING model_config.py:1178: msg
    ("level_file", _LEVEL + r" +[\w.\-]+\.py:\d+:? ", "start"),
    # structured: INFO sglang.srt.managers.scheduler.event_loop: msg
    ("level_module", _LEVEL + r" +[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+: ", "start"),
    # uvicorn: INFO:     127.0.0.1:4396 - "POST ..." (the level padded to 9 columns)
    ("uvicorn", r"(?:INFO|WARNING|ERROR|DEBUG|CRITICAL): {2,}\S", "start"),
    ("traceback", r"Traceback \(most recent call last\):", "start"),
    ("frame", r'File "[^"\n]+", line \d+, in ', "indent"),
]
# Flush-left message starts that are SGLang's only when what precedes them looks like a
# transport prefix (it ends with a separator and holds a digit, `|` or `]`): an exception line.
WEAK_ANCHORS: list[tuple[str, str, str]] = [
    (
        "exception",
        r"(?<![\w.])(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault): ",
        "start",
    ),
]
_ALL = ANCHORS + WEAK_ANCHORS
ANCHOR_RX = re.compile("|".join(f"(?P<a{i}>{p})" for i, (_, p, _) in enumerate(_ALL)))
_WEAK_FROM = len(ANCHORS)
# Literals an anchor's every match holds (one of them): a line without any is not searched
# for that anchor. An anchor absent here is always searched.
NEEDS: dict[str, tuple[str, ...]] = {
    "traceback": ("Traceback (",),
    "frame": ('File "',),
    "exception": tuple(f"{w}: " for w in ("Error", "Exception", "Exit", "Interrupt", "Fault")),
}
# Each anchor searched on its own: one alternation of them defeats re's literal scans and
# costs ~1.3-1.6x the searches one by one (a line of an NCCL_DEBUG=INFO log: 15.9 against
# 12.1 us). The earliest start wins and, at a tie, the table's order: the same anchor and
# span the alternation ANCHOR_RX finds.
_EACH = [(re.compile(p), NEEDS.get(name, ())) for name, p, _ in _ALL]


def _first_anchor(line: str) -> tuple[int, int] | None:
    """(start, index in _ALL) of the anchor ``ANCHOR_RX.search`` would find, or None."""
    best: tuple[int, int] | None = None
    for i, (rx, needs) in enumerate(_EACH):
        if needs and not any(n in line for n in needs):
            continue
        m = rx.search(line)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), i)
            if best[0] == 0:
                break
    return best


MAX_PREFIX = 256  # longer "prefixes" are message text, not a transport prefix
MAX_SHAPES = 8  # learned shapes kept (the most frequent)
LEARN_AFTER = 2  # a shape is applied to lines without an anchor once seen this often
_SEPARATORS = " \t|:]>"
_DIGITS = re.compile(r"\d+")


def shape_of(prefix: str) -> str:
    """A prefix generalised into a regex: digit runs become ``\\d+``, the rest is literal."""
    out, pos = [], 0
    for m in _DIGITS.finditer(prefix):
        out.append(re.escape(prefix[pos : m.start()]))
        out.append(r"\d+")
        pos = m.end()
    out.append(re.escape(prefix[pos:]))
    return "".join(out)


def locate(line: str) -> tuple[int, bool]:
    """-> (where SGLang's line starts, whether the prefix before it may be learned).

    0 when no SGLang shape is found or the line already starts with one.
    """
    found = _first_anchor(line)
    if found is None or found[0] == 0:
        return 0, False
    p, idx = found
    if p > MAX_PREFIX:
        return 0, False
    prefix = line[:p]
    if _ALL[idx][2] == "indent":
        head = prefix.rstrip(" \t")
        if not head:
            return 0, False  # only indentation before the frame
        cut = len(head) + (1 if len(head) < p else 0)
        return cut, True
    if prefix[-1] not in _SEPARATORS:
        # glued to a word (`fooINFO:`, `x.RuntimeError: `): message text
        return 0, False
    if idx >= _WEAK_FROM and not any(c.isdigit() or c in "|]" for c in prefix):
        return 0, False
    if not prefix.strip():
        return 0, False  # indentation, not a prefix: keeps traceback and quote semantics
    return p, True


class PrefixFinder:
    """Strips transport prefixes line by line, learning their shapes as it goes."""

    def __init__(self, state: list[list[Any]] | None = None):
        # [shape regex, times seen] in first-seen order
        self.shapes: list[list[Any]] = [list(s) for s in (state or [])]
        self._rx: re.Pattern[str] | None = None
        self._compile()

    def state(self) -> list[list[Any]]:
        return [list(s) for s in self.shapes]

    @property
    def live(self) -> bool:
        """Whether a learned shape is applied (else a line that starts with SGLang's own
        prefix is returned as it is by ``strip``)."""
        return self._rx is not None

    def _compile(self) -> None:
        # the most seen first: the first alternative that matches is the one stripped
        live = [s for s, n in sorted(self.shapes, key=lambda x: -x[1]) if n >= LEARN_AFTER]
        self._rx = re.compile("|".join(f"(?:{s})" for s in live)) if live else None

    def _learn(self, prefix: str) -> None:
        shape = shape_of(prefix)
        for s in self.shapes:
            if s[0] == shape:
                s[1] += 1
                if s[1] >= LEARN_AFTER and (s[1] == LEARN_AFTER or len(self.shapes) > 1):
                    self._compile()
                return
        self.shapes.append([shape, 1])
        if len(self.shapes) > MAX_SHAPES:
            # drop the least seen (the oldest of them): bounded, deterministic
            worst = min(range(len(self.shapes)), key=lambda i: (self.shapes[i][1], i))
            del self.shapes[worst]
            self._compile()

    def strip(self, line: str, own_prefix: re.Pattern[str]) -> str:
        """The line without its transport prefix. ``own_prefix`` matches SGLang's own
        prefixes at the start of a line (the common case costs one ``match``)."""
        if self._rx is not None:
            m = self._rx.match(line)
            if m is not None and m.end():
                return line[m.end() :]
        om = own_prefix.match(line)
        if om is not None and om.end():
            return line
        p, learnable = locate(line)
        if p == 0:
            return line
        if learnable:
            self._learn(line[:p])
        return line[p:]


__all__ = ["ANCHORS", "WEAK_ANCHORS", "PrefixFinder", "locate", "shape_of"]
