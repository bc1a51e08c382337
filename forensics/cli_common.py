"""Helpers shared by the command modules: store access, output formats, tables."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from forensics.terminal import visible
from forensics.urls import shown_text

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store


class Number(click.ParamType):
    """A finite number within bounds: ``--deadline -1``, ``nan`` or ``inf`` is a usage error.

    Shown in --help as FLOAT / INTEGER like click's own types (the bounds are in the error).
    """

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        *,
        open_low: bool = False,
        integer: bool = False,
    ):
        self.low, self.high, self.open_low, self.integer = low, high, open_low, integer
        self.name = "integer" if integer else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None):
        import math

        try:
            v = int(value) if self.integer else float(value)
        except (TypeError, ValueError):
            kind = "an integer" if self.integer else "a number"
            self.fail(f"{value!r} is not {kind}", param, ctx)
        if not self.integer and not math.isfinite(v):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        too_low = self.low is not None and (v < self.low or (self.open_low and v == self.low))
        too_high = self.high is not None and v > self.high
        if too_low or too_high:
            self.fail(f"{v:g} is out of range (must be {self._range()})", param, ctx)
        return v

    def _range(self) -> str:
        if self.high is None:
            return f"more than {self.low:g}" if self.open_low else f"at least {self.low:g}"
        if self.open_low:
            return f"more than {self.low:g} and at most {self.high:g}"
        return f"{self.low:g} to {self.high:g}"


# Seconds (deadlines, waits, grace) and speeds: finite, and at most 30 days: a wait of 1e308 s
# is no wait a person means (and overflows the timers). Every numeric option of every command
# has a high bound (tests/test_cli_flags.py walks them).
MAX_SECONDS = 30 * 86400.0
POSITIVE = Number(0, MAX_SECONDS, open_low=True)  # more than 0
NON_NEGATIVE = Number(0, MAX_SECONDS)
PORT = Number(1, 65535, integer=True)


@dataclasses.dataclass(frozen=True)
class OptionRule:
    """A row of a command's option table: ``option`` (a parameter name), when given, needs
    one of ``needs`` given too, none of ``excludes``, and not ``refused(params)``; else exit 2
    (``why``, or a sentence made from the row). A flag a command would ignore is refused, never
    dropped in silence."""

    option: str
    needs: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    refused: Callable[[dict[str, Any]], bool] | None = None
    why: str = ""


def option_rules(*rules: OptionRule):
    """Check a command's OptionRule rows after click parsed it, before its body runs (so a
    bad combination is exit 2 before anything is looked up)."""

    def deco(f):
        @functools.wraps(f)
        def wrapper(*args: Any, **kwargs: Any):
            ctx = click.get_current_context()
            for rule in rules:
                _check_rule(ctx, rule)
            return f(*args, **kwargs)

        return wrapper

    return deco


# Text values typed empty (`launch --name ''`, `hosts check ''`, `bench --run ''`, `report ''`,
# `ingest ''`): the command took them for "not given" (a name derived from the flags, every
# host checked, every run reported, the current folder read). Every text or path parameter
# given '' on the command line is refused before the command runs (exit 2; issue 14, CLI
# contract, sixth round), except the rows here, whose empty value means something.
# Pass-through argvs (``launch -- FLAGS``, ``sim serve ARGS``) are click.UNPROCESSED: their
# values are the server's, never checked here.
EMPTY_MEANS_SOMETHING: frozenset[tuple[str, str]] = frozenset()


def refuse_empty_values(ctx: click.Context) -> None:
    """UsageError for the first text/path parameter of ``ctx`` (and its parents: the root's
    --store) typed as an empty string."""
    from click.core import ParameterSource

    from forensics.errors import UsageError

    while ctx is not None:
        command = ctx.command_path.partition(" ")[2]
        for p in ctx.command.params:
            if not isinstance(p.type, (click.types.StringParamType, click.Path)):
                continue
            if (command, p.name) in EMPTY_MEANS_SOMETHING:
                continue
            if ctx.get_parameter_source(p.name) is not ParameterSource.COMMANDLINE:
                continue
            value = ctx.params.get(p.name)
            if "" in (value if isinstance(value, (tuple, list)) else (value,)):
                shown = p.opts[-1] if isinstance(p, click.Option) else p.human_readable_name
                fix = "give it a value" if p.required else "give it a value, or leave it out"
                raise UsageError(f"{shown} '': an empty value names nothing", hint=fix)
        ctx = ctx.parent


def guard_empty_values(command: click.Command) -> None:
    """Every leaf command of the tree under ``command`` checks refuse_empty_values first."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            guard_empty_values(sub)
        return
    body = command.callback
    if body is None or getattr(body, "refuses_empty", False):
        return

    @functools.wraps(body)
    def checked(*args: Any, **kwargs: Any):
        refuse_empty_values(click.get_current_context())
        return body(*args, **kwargs)

    checked.refuses_empty = True  # type: ignore[attr-defined]
    command.callback = checked


def _given(ctx: click.Context, name: str) -> bool:
    from click.core import ParameterSource

    source = ctx.get_parameter_source(name)
    value = ctx.params.get(name)
    if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        return value not in (None, False, ())
    return False


def _shown(ctx: click.Context, name: str) -> str:
    for p in ctx.command.params:
        if p.name == name:
            return p.opts[-1] if isinstance(p, click.Option) else p.human_readable_name
    return name


def _check_rule(ctx: click.Context, rule: OptionRule) -> None:
    if not _given(ctx, rule.option):
        return
    opt = _shown(ctx, rule.option)
    if rule.needs and not any(_given(ctx, n) for n in rule.needs):
        wanted = " or ".join(_shown(ctx, n) for n in rule.needs)
        raise click.UsageError(rule.why or f"{opt} goes with {wanted}", ctx)
    for other in rule.excludes:
        if _given(ctx, other):
            raise click.UsageError(
                rule.why or f"{opt} and {_shown(ctx, other)} do not go together", ctx
            )
    if rule.refused is not None and rule.refused(ctx.params):
        raise click.UsageError(rule.why or f"{opt} does not apply here", ctx)


def get_store(ctx: click.Context, *, create: bool = True) -> Store:
    from forensics.store import Store

    root = ctx.find_root()
    obj = root.obj or {}
    if "store" not in obj:
        obj["store"] = Store.open(obj.get("store_path"), create=create)
    return obj["store"]


def json_default(value: Any) -> Any:
    import datetime as dt

    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    return str(value)


# JSON floats: as many significant digits as a float32 holds, so means of float32 columns
# print as 2.55, not 2.550000015894572; large values (counters, epoch seconds) are kept whole.
JSON_DIGITS = 7
JSON_WHOLE_ABOVE = 1e6


def json_float(x: float) -> float | None:
    """The one rounding of a float at the JSON boundary (None for NaN and infinities, which
    JSON does not have)."""
    if x != x or x in (float("inf"), float("-inf")):
        return None
    if abs(x) >= JSON_WHOLE_ABOVE or x.is_integer():
        return x
    return float(f"{x:.{JSON_DIGITS}g}")


def json_ready(value: Any) -> Any:
    """``value`` with every float through json_float (dicts, lists and tuples walked)."""
    if isinstance(value, float):
        return json_float(value)
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def json_text(data: Any, *, rounded: bool = False) -> str:
    """The one JSON rendering of every `--json` output: floats through json_float, two-space
    indent, UTF-8 as is. orjson's encoder (about ten times Python's indenting one, which is
    pure Python: a third of `runs --json` at 10,000 runs); the standard library only for what
    orjson refuses (integers past 64 bits), with the same layout."""
    import orjson

    ready = data if rounded else json_ready(data)
    try:
        text = orjson.dumps(
            ready,
            default=json_default,
            option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME,
        ).decode()
    except (TypeError, orjson.JSONEncodeError):
        text = json.dumps(ready, default=json_default, indent=2, ensure_ascii=False)
    if not writes_unicode(sys.stdout):  # `\u00b7`, not `?`: JSON that says what the data is
        text = re.sub(r"[^\x00-\x7f]", _json_escape, text)
    return shown_text(text)  # an output boundary: no secret is ever printed


def writes_unicode(stream: Any) -> bool:
    """Whether a text stream writes every character: its encoding is a UTF codec, or it names
    none (closed, ``None``, or an in-memory stream: nothing to encode)."""
    import codecs

    enc = getattr(stream, "encoding", None)
    if not enc:
        return True
    try:
        return codecs.lookup(enc).name.startswith("utf")
    except LookupError:
        return False


def _json_escape(m: re.Match[str]) -> str:
    """A non-ASCII character (inside a JSON string: the only place one can be) as JSON's
    ``\\uXXXX`` (a surrogate pair past U+FFFF)."""
    code = ord(m.group(0))
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def echo(message: Any = "", *, err: bool = False, nl: bool = True, wrap: bool = True) -> None:
    """The one writer of text for people (every command's prose, summaries, warnings): data
    in it made visible (forensics.terminal.visible: ``\\r``, ``\\x1b``, ``\\u202e``), and
    each line longer than the terminal wrapped at spaces when the width is known
    (forensics.terminal.prose_width; ``wrap=False``: lines that are data, kept whole).
    ``--json`` and ``--csv`` go through echo_json / emit_frame instead: exact values."""
    from forensics.terminal import prose_width, visible, wrapped

    text = visible(shown_text(str(message)), lines=True)
    width = prose_width(sys.stderr if err else sys.stdout) if wrap else None
    click.echo(wrapped(text, width) if width else text, err=err, nl=nl)


def echo_json(data: Any, *, rounded: bool = False) -> None:
    """``rounded``: the floats already went through json_float (frame_rows)."""
    click.echo(json_text(data, rounded=rounded))


def echo_wrote(path: Any, summary: dict[str, Any] | None = None, *, what: str = "output") -> None:
    """The status of a command that wrote ``path`` (-o): the path, or ``summary`` as JSON.
    When the output went to stdout (``-o -``, ``-o /dev/stdout``) it goes to stderr, never
    after the output's own bytes (forensics.output.status_to_stderr), and says so ("report
    written to standard output"), not the path ``-``."""
    from forensics.output import status_to_stderr

    to_stderr = status_to_stderr(path)
    if summary is not None:
        click.echo(json_text(summary), err=to_stderr)
    elif to_stderr:
        echo(f"{what} written to standard output", err=True)
    else:
        echo(str(path), wrap=False)


def frame_rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``df`` as dicts, float columns through json_float column by column (not a
    walk over every cell: 10,000 runs are 330,000 cells, 46,000 of them floats)."""
    import polars as pl

    floats = [c for c, t in df.schema.items() if t in (pl.Float32, pl.Float64)]
    if floats:
        df = df.with_columns(
            pl.Series(
                c, [None if x is None else json_float(x) for x in df[c].to_list()], pl.Float64
            )
            for c in floats
        )
    return df.to_dicts()


def emit_frame(
    df: pl.DataFrame, fmt: str, *, title: str | None = None, keep: tuple[str, ...] = ()
) -> None:
    """Print a frame as a rich table (people), JSON (array of objects) or CSV (scripts).
    ``keep``: the columns a narrow terminal should show longest."""
    if fmt == "json":
        _echo_json_rows(df)
    elif fmt == "csv":
        # exact values: color=True, or click strips an ESC sequence out of a name when piped
        click.echo(shown_text(df.write_csv()), nl=False, color=True)  # (`>&-`: nothing)
    else:
        print_table(df.head(TABLE_ROWS_MAX), title=title, keep=keep)
        if df.height > TABLE_ROWS_MAX:
            echo(
                f"... {df.height - TABLE_ROWS_MAX:,} more row(s) not shown (a table shows the "
                f"first {TABLE_ROWS_MAX:,}; every row: --json or --csv)"
            )


# A terminal table holds this many rows at most (rich lays out every cell in memory: the
# runs of a log of 56,000 launches took 1 GB and 50 s CPU); --json / --csv print every row.
TABLE_ROWS_MAX = 1_000
JSON_SLICE_ROWS = 2_000  # --json rows rendered (as Python objects) this many at a time


def _echo_json_rows(df: pl.DataFrame) -> None:
    """``df`` as one JSON array, rendered a slice of rows at a time: the same bytes as
    json_text of every row at once, without every row as a dict in memory."""
    if df.height <= JSON_SLICE_ROWS:
        echo_json(frame_rows(df), rounded=True)
        return
    for i, part in enumerate(df.iter_slices(JSON_SLICE_ROWS)):
        inner = json_text(frame_rows(part), rounded=True)[2:-2]  # within "[\n" ... "\n]"
        click.echo(("[\n" if i == 0 else ",\n") + inner, nl=False)
    click.echo("\n]")


def fmt_cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        return f"{value:.2f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return visible(shown_text(str(value)))


def print_table(df: pl.DataFrame, *, title: str | None = None, keep: tuple[str, ...] = ()) -> None:
    """A frame as a rich table that fits the terminal (see forensics.cli_table). Cells are
    plain text: ``[s]glang`` prints as typed, never as markup."""
    from rich.table import Table
    from rich.text import Text

    from forensics.cli_table import layout, terminal_width
    from forensics.terminal import console as make_console

    width = terminal_width()
    cells = [[fmt_cell(v) for v in row] for row in df.iter_rows()]
    plan = layout(df.columns, cells, width, keep)
    table = Table(
        title=Text(visible(title)) if title else None, show_lines=False, header_style="bold"
    )
    for k in plan.shown:
        numeric = df[df.columns[k]].dtype.is_numeric()
        table.add_column(
            Text(plan.headers[k]),
            justify="right" if numeric else "left",
            overflow="fold",
            width=plan.widths[k],
        )
    for row in cells:
        table.add_row(*(Text(row[k]) for k in plan.shown))
    console = make_console(width=width)
    console.print(table)
    if plan.hidden:
        console.print(
            Text(
                f"({len(plan.hidden)} column(s) left out to fit {width} columns: "
                f"{', '.join(plan.hidden)}; widen the terminal or use --json / --csv)"
            )
        )


def chosen_format(params: dict[str, Any]) -> str:
    """The one output format --json / --csv / --format ask for (format_option's parameters);
    two different ones are a usage error."""
    asked = {v for v in (params.get("fmt_json"), params.get("fmt_csv")) if v}
    if params.get("fmt") not in (None, "table"):
        asked.add(params["fmt"])
    if len(asked) > 1:
        raise click.UsageError(f"--{' and --'.join(sorted(asked))} ask for two formats: give one")
    return asked.pop() if asked else "table"


def format_option(*, csv: bool = True):
    """--json / --csv flags and --format folded into one `fmt` parameter (chosen_format)."""
    choices = ["table", "json", "csv"] if csv else ["table", "json"]

    def deco(f):
        @functools.wraps(f)
        def merged(*args: Any, **kwargs: Any):
            fmt = chosen_format(kwargs)
            kwargs.pop("fmt_json", None)
            kwargs.pop("fmt_csv", None)
            kwargs["fmt"] = fmt
            return f(*args, **kwargs)

        g = click.option(
            "--json", "fmt_json", flag_value="json", help="Print JSON (an array of objects)."
        )(merged)
        if csv:
            g = click.option("--csv", "fmt_csv", flag_value="csv", help="Print CSV.")(g)
        return click.option(
            "--format",
            "fmt",
            type=click.Choice(choices),
            default="table",
            show_default=True,
            help="Output format.",
        )(g)

    return deco


def print_launch_result(res: dict, fmt: str) -> None:
    """A launch or a journaled relaunch, for people (or JSON)."""
    if fmt == "json":
        echo_json(res)
        return
    echo(f"{res['name']} on {res['host']}: {res['status']}")
    if res.get("cause"):
        echo(f"cause: {res['cause']} (phase {res.get('phase')}, step {res.get('step')})")
    if res.get("explanation"):
        echo(res["explanation"])
    journal = [e for e in res.get("evidence") or [] if isinstance(e, dict)]
    if journal:
        echo("journal (evidence):")
        for e in journal[:30]:
            who = f"step {e['step']}" if e.get("step") is not None else "wrapper"
            bits = []
            if e.get("orig"):
                bits.append(str(e["orig"])[:100])
            if e.get("pid") is not None:
                bits.append(f"pid {e['pid']}")
            if e.get("rc") is not None:
                bits.append(f"rc {e['rc']}")
            if e.get("signal"):
                bits.append(f"signal {e['signal']}")
            if e.get("waiting_on"):
                bits.append(f"waiting on {e['waiting_on']}")
            seq = e.get("seq", "")
            echo(f"  #{seq} {e.get('event') or '':<8} {who}: {', '.join(bits)}")
    for step in res.get("next_steps") or []:
        echo(f"  try: {step}")
    echo(f"log: {res.get('log_path')}  journal: {res.get('journal_path')}")
    if res.get("pgid") and res["status"] == "ready":
        echo(f"process group {res['pgid']}; stop it with: forensics stop {res['name']}")


GROUP_BY_HELP = (
    "Experiment key: which of model,layout,hardware,shape make runs comparable "
    "(default: all four; none: one experiment)."
)


def group_by_option():
    """``--group-by FIELDS``: the experiment key of forensics.experiment for this command."""
    return click.option("--group-by", metavar="FIELDS", default=None, help=GROUP_BY_HELP)
