"""Fit a table to the terminal: column widths, header line breaks, columns left out.

Pure layout (no rich, no click): ``layout(headers, cells, width)`` says which columns are
shown, how wide each one is and how its header breaks. A header breaks only after an
underscore (``started_`` / ``at``), never inside a word; cells fold inside their column.
When even the narrowest layout does not fit, columns are left out (the first column always
stays): empty ones first, then from the right those not in ``keep``, then the others; the
caller says which ones.
"""

from __future__ import annotations

import dataclasses
import re

# the box drawing: "│ " before each cell, " " after it, one "│" at the end
BORDER_PER_COLUMN = 3
BORDER_END = 1
CELL_MIN = 8  # a cell column folds down to this many characters, not fewer
FIRST_CELL_MIN = 24  # the first column names the row: keep more of it on one line
NARROWEST = 40
EMPTY = ("", "—")  # what an empty cell shows


@dataclasses.dataclass
class Layout:
    shown: list[int]  # indexes of the columns shown, in order
    widths: dict[int, int]  # content width of each shown column
    headers: dict[int, str]  # each shown column's header, with line breaks
    hidden: list[str]  # the names of the columns left out


def terminal_width() -> int:
    """The width a table fits: the terminal's (forensics.terminal.terminal_columns), at
    least NARROWEST."""
    from forensics.terminal import terminal_columns

    return max(NARROWEST, terminal_columns())


def header_parts(header: str) -> list[str]:
    """Where a header may break: after each underscore (``gen_``, ``throughput_``, ``median``)."""
    return re.findall(r"[^_]*_+|[^_]+", header) or [header]


def wrap_header(header: str, width: int) -> str:
    """The header in lines of at most ``width`` characters, broken only after underscores."""
    lines: list[str] = []
    for part in header_parts(header):
        if lines and len(lines[-1]) + len(part) <= width:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join(lines)


def _longest_line(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def layout(
    headers: list[str], cells: list[list[str]], width: int, keep: tuple[str, ...] = ()
) -> Layout:
    """Widths that fit ``width`` terminal columns (see the module doc)."""
    n = len(headers)
    natural, least = [], []
    for k, h in enumerate(headers):
        cell = max((_longest_line(row[k]) for row in cells), default=0)
        natural.append(max(len(h), cell, 1))
        floor = FIRST_CELL_MIN if k == 0 else CELL_MIN
        least.append(max(max(len(p) for p in header_parts(h)), min(cell, floor), 1))
    shown = list(range(n))

    def room(cols: list[int]) -> int:
        return width - BORDER_PER_COLUMN * len(cols) - BORDER_END

    empty = [k for k in range(n) if all(row[k] in EMPTY for row in cells)]
    drop = [
        *reversed(empty),
        *(k for k in reversed(range(n)) if k not in empty and headers[k] not in keep),
        *(k for k in reversed(range(n)) if k not in empty and headers[k] in keep),
    ]
    for k in [d for d in drop if d != 0]:
        if sum(least[c] for c in shown) <= room(shown):
            break
        shown.remove(k)
    widths = {k: least[k] for k in shown}
    spare = room(shown) - sum(widths.values())
    if sum(natural[k] for k in shown) <= room(shown):
        widths = {k: natural[k] for k in shown}
    else:  # share what is left in proportion to what each column still wants
        want = {k: natural[k] - least[k] for k in shown}
        total = sum(want.values()) or 1
        for k in shown:
            widths[k] += want[k] * spare // total
        left = room(shown) - sum(widths.values())
        for k in sorted(shown, key=lambda c: want[c] - (widths[c] - least[c]), reverse=True):
            if left <= 0:
                break
            if widths[k] < natural[k]:
                widths[k] += 1
                left -= 1
    return Layout(
        shown=shown,
        widths=widths,
        headers={k: wrap_header(headers[k], widths[k]) for k in shown},
        hidden=[headers[k] for k in range(n) if k not in shown],
    )
