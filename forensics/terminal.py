"""The one way forensics writes text for people: data made visible, a console that never reads
markup, prose fitted to the terminal.

Run names, paths, hosts, log lines and kill patterns are data. Data holds brackets
(``[s]glang``, a log named ``[bold]x[s].log``): rich would take them for markup and swallow
them, so every console is made here with ``markup=False``; styles go through ``style=`` or
``rich.text.Text``, never through ``[bold]…[/bold]`` in a string (tests/test_cli_output.py).

Data also holds characters a terminal obeys instead of showing: a carriage return or a
backspace that overwrites what was printed, an ESC sequence that recolours or clears the screen,
a bidi override (U+202E) that prints ``gol.exe`` for ``exe.log``, a zero-width space that makes
two names look the same. ``visible()`` is the one escape of them (``INVISIBLE``, a table of
what each class of character becomes): every text output goes through it at the output layer
(``cli_common.echo``, table cells, ``Error:`` lines, the rich consoles made here), so
``a\\rEVIL.log`` prints as ``a\\rEVIL.log`` with a visible backslash. ``--json`` and ``--csv``
keep the exact value (JSON escapes the controls itself).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

# What a character a terminal would obey (or hide) prints as: (what, the characters, its escape).
# The first row that holds a character decides.
INVISIBLE: tuple[tuple[str, str, Any], ...] = (
    ("named C0 controls", "\t\n\r\b\f\v\a", lambda c: repr(c)[1:-1]),
    ("other C0 controls, DEL, C1 controls", "\x00-\x1f\x7f-\x9f", lambda c: f"\\x{ord(c):02x}"),
    # a file name that is not UTF-8 reaches Python as lone surrogates (surrogateescape):
    # shown as the byte it stands for
    ("undecodable bytes", "\udc80-\udcff", lambda c: f"\\x{ord(c) - 0xDC00:02x}"),
    ("other lone surrogates", "\ud800-\udfff", lambda c: f"\\u{ord(c):04x}"),
    (
        "bidi controls, zero-width and other format characters, line/paragraph separators",
        "\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb",
        lambda c: f"\\u{ord(c):04x}",
    ),
    ("tag characters", "\U000e0000-\U000e007f", lambda c: f"\\U{ord(c):08x}"),
)
_CLASS = [(re.compile(f"[{row[1]}]"), row[2]) for row in INVISIBLE]
_ANY = re.compile("[" + "".join(row[1] for row in INVISIBLE) + "]")
_ANY_BUT_NEWLINE = re.compile("(?!\n)[" + "".join(row[1] for row in INVISIBLE) + "]")


def _escape_one(m: re.Match[str]) -> str:
    c = m.group(0)
    for pattern, escape in _CLASS:
        if pattern.match(c):
            return escape(c)
    return c  # (unreachable: _ANY is the union of the classes)


def visible(text: str, *, lines: bool = False) -> str:
    """``text`` with every character of INVISIBLE escaped (``\\r``, ``\\x1b``, ``\\u202e``).
    ``lines``: a block of lines (prose, a rendered table) whose line breaks are meant;
    otherwise one value (a name, a cell, an error line), whose ``\\n`` is escaped too."""
    if text.isprintable():  # the common case, at C speed (every INVISIBLE character is not)
        return text
    return (_ANY_BUT_NEWLINE if lines else _ANY).sub(_escape_one, text)


# Prose (explanations, hints, warnings, summaries, --help) is wrapped to the terminal's width,
# the width tables fit, when that width is known: $COLUMNS, or the stream is a terminal. Piped
# with no $COLUMNS, prose lines are kept whole (a script greps them; tables then fit 120).
PROSE_MIN = 20  # narrower than this, prose is wrapped at this width
WIDTH_MAX = 1000  # COLUMNS=100000 is taken as this
DEFAULT_WIDTH = 120  # a table's width when the output is not a terminal and COLUMNS is not set
# lines that are one record whatever their length: the one-line contract of docs/exit-codes.md
ONE_LINE = ("Error:", "Interrupted")


def _columns_env() -> int | None:
    import os

    try:
        n = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return min(n, WIDTH_MAX) if n > 0 else None


def terminal_columns() -> int:
    """The width tables fit: ``$COLUMNS`` when it is a positive number, else the terminal's
    own width, else DEFAULT_WIDTH; at most WIDTH_MAX. ``COLUMNS=0``, ``-5``, ``abc`` or empty
    are taken as unset."""
    import shutil  # (here: with bz2 and lzma, ~2 ms a command that draws no table pays not)

    return min(WIDTH_MAX, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns or DEFAULT_WIDTH)


def prose_width(stream: Any) -> int | None:
    """The width prose written to ``stream`` is wrapped at: ``$COLUMNS`` when it is a positive
    number, else the terminal's width when ``stream`` is one, else None (not wrapped)."""
    import os

    cols = _columns_env()
    if cols is not None:
        return cols
    try:
        if stream is not None and stream.isatty():
            return min(WIDTH_MAX, os.get_terminal_size(stream.fileno()).columns) or None
    except (AttributeError, ValueError, OSError):
        pass
    return None


_INDENT = re.compile(r"[ ]*(?:(?:[-*•]|\d+[.)]|try:|Warning:|#\d+)\s+)?")


def wrapped(text: str, width: int) -> str:
    """Each line of ``text`` longer than ``width`` broken at spaces, its continuation lines
    indented under the line's text (after its indent and a leading bullet, ``try:``,
    ``Warning:`` or number); words longer than the width (paths, URLs) are kept whole, and so
    are the ONE_LINE records."""
    import textwrap

    width = max(PROSE_MIN, width)
    out = []
    for line in text.split("\n"):
        if len(line) <= width or " " not in line.strip() or line.startswith(ONE_LINE):
            out.append(line)
            continue
        lead = _INDENT.match(line).group(0)  # type: ignore[union-attr]
        hang = " " * len(lead) if len(lead) < width // 2 else " " * min(4, len(lead))
        out.extend(
            textwrap.wrap(
                line[len(lead) :],
                width,
                initial_indent=lead,
                subsequent_indent=hang,
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [line]
        )
    return "\n".join(out)


def console(**kwargs: Any) -> Console:
    """A rich Console for people's output, markup off (``stderr=True``, ``width=`` as rich).
    What it writes goes through ``visible`` (a name rich was given raw still prints escaped;
    rich's own cursor and colour codes are its control segments and pass). A reader that went
    away (``| head -1``) ends the command as for every other output (forensics.cli.main: exit
    0), not with rich's own ``SystemExit(1)``."""
    from rich.console import Console
    from rich.segment import Segment

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

        def _render_buffer(self, buffer: Any) -> str:
            return super()._render_buffer(
                seg if seg.control else Segment(visible(seg.text, lines=True), seg.style)
                for seg in buffer
            )

    kwargs.setdefault("width", terminal_columns())
    return _Console(markup=False, **kwargs)
