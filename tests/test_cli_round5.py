"""Issue 14, class "The CLI contract a new user hits", fifth round: the text output contract.

* Data a terminal would obey (C07): a file, run, host or message holding ``\\r``, ESC
  sequences, ``\\b``, other C0/C1 controls, bidi overrides (U+202E, U+2066–2069) or zero-width
  characters prints them escaped (``\\r``, ``\\x1b``, ``\\u202e``) in every text output: tables,
  ``show``, ``diagnose`` evidence, ``classify``, ingest summaries, ``Error:`` lines and click's
  own usage errors. One function (``forensics.terminal.visible``, its ``INVISIBLE`` table) at
  the output layer: ``cli_common.echo``, table cells, ``cli.shown``, the rich consoles of
  ``forensics.terminal.console``. ``--json`` and ``--csv`` keep the exact value.
* Width (C08): prose (explanations, ``try:`` hints, warnings, summaries, --help) is wrapped to
  the terminal's width (``$COLUMNS``, else the tty, else 120 when piped, the width tables fit
  too); a word longer than the width (a path) is kept whole; ``Error:`` lines stay one line.
  ``COLUMNS=0/-5/abc`` are taken as unset, ``COLUMNS=100000`` as 1000.
* ``-o -`` (C09): the status line of ``report`` / ``plot`` writing to stdout says
  "report written to standard output", not ``-`` (tests/test_output.py).
* Ctrl-C (C10): from the moment forensics' first line runs, a SIGINT at any delay is exit 130
  and one line (tests/test_entry.py covers the import moments; here fixed delays).
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.terminal import INVISIBLE, terminal_columns, visible, wrapped

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
SCRIPT = Path(sys.executable).with_name("forensics")

# what a terminal obeys: any of these in text output is a failure
RAW = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064"
    "\u2066-\u206f\ufeff]"
)
HOSTILE = {  # file stem -> how it prints
    "a\rEVIL": "a\\rEVIL",
    "b\x1b[31mred": "b\\x1b[31mred",
    "c\u202eexe.gol": "c\\u202eexe.gol",
    "d\u2066iso\u2069": "d\\u2066iso\\u2069",
    "e\u200bzw": "e\\u200bzw",
    "f\bback": "f\\x08back",
    "g\x85nel": "g\\x85nel",
    "h\x7fdel": "h\\x7fdel",
}


def run(capsys, *args: str, store: str | Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_visible_escapes_each_class_of_its_table():
    for c, shown in (
        ("\r", "\\r"),
        ("\n", "\\n"),
        ("\t", "\\t"),
        ("\x1b", "\\x1b"),
        ("\x00", "\\x00"),
        ("\x7f", "\\x7f"),
        ("\x9b", "\\x9b"),  # C1 CSI
        ("\u202e", "\\u202e"),
        ("\u2067", "\\u2067"),
        ("\u200b", "\\u200b"),
        ("\ufeff", "\\ufeff"),
        ("\u2028", "\\u2028"),
        ("\udce9", "\\xe9"),  # a byte of a non-UTF-8 file name (surrogateescape)
        ("\U000e0041", "\\U000e0041"),
    ):
        assert visible(f"x{c}y") == f"x{shown}y", repr(c)
    # one value: its line break escaped; a block of lines keeps them
    assert visible("a\nb", lines=True) == "a\nb"
    assert visible("a\r\nb", lines=True) == "a\\r\nb"
    # what a terminal shows as it is stays as it is (accents, CJK, emoji, box drawing, [s])
    for text in ("été ü→ 日本 🙂 ┃ [s]glang — ·", "C:\\path\\x", ""):
        assert visible(text) == text
    assert len(INVISIBLE) >= 5


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    logs = root / "logs"
    logs.mkdir()
    for stem in HOSTILE:
        shutil.copy(FIX / "sglang_fail_capture.log", logs / f"{stem}.log")
    store = root / "store"
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), "ingest", str(logs)])
    assert exc.value.code == 0
    return store, logs


def _clean(text: str) -> None:
    m = RAW.search(text)
    assert m is None, f"raw {m.group(0)!r} in: {text[max(0, m.start() - 80) : m.end() + 40]!r}"


def test_hostile_names_print_escaped_in_every_text_output(capsys, hostile_store):
    """C07: tables, show, diagnose (evidence lines name the file), classify, ingest summary,
    runs filtered, label and baseline messages."""
    store, logs = hostile_store
    rc, out, err = run(capsys, "runs", store=store)
    assert rc == 0
    _clean(out + err)
    for shown in HOSTILE.values():
        assert shown in out
    for stem, shown in HOSTILE.items():
        path = str(logs / f"{stem}.log")
        for args in (
            ("show", stem),
            ("diagnose", stem),
            ("classify", path),
            ("diagnose", "x", "--log", path),
            ("ingest", path),
            ("runs", stem),
        ):
            rc, out, err = run(capsys, *args, store=store)
            assert rc == 0, (args, err)
            _clean(out + err)
        assert shown in out  # ingest / runs name it


def test_hostile_names_in_error_lines_are_escaped_and_one_line(capsys, hostile_store):
    store, logs = hostile_store
    for stem, shown in HOSTILE.items():
        for args, code in (
            (("show", stem + "zz"), 3),
            (("classify", str(logs / f"{stem}.missing")), 3),
            (("ingest", str(logs / f"{stem}.nope")), 3),
        ):
            rc, out, err = run(capsys, *args, store=store)
            assert rc == code, (args, err)
            _clean(out + err)
            assert err.count("\n") == 1 and err.startswith("Error: "), err
            assert shown in err
    # a line break in a name: still one Error line
    rc, _, err = run(capsys, "show", "x\nError: fake", store=store)
    assert rc == 3 and err.count("\n") == 1 and "x\\nError: fake" in err


def test_click_usage_errors_quote_the_argument_escaped(capsys, hostile_store):
    store, _ = hostile_store
    rc, _, err = run(capsys, "\x1b[2Jnope\u202e", store=store)
    assert rc == 2
    _clean(err)
    assert "No such command '\\x1b[2Jnope\\u202e'" in err
    rc, _, err = run(capsys, "runs", "--format", "\rx", store=store)
    assert rc == 2 and "'\\rx' is not one of" in err


def test_json_and_csv_keep_the_exact_names(capsys, hostile_store):
    store, _ = hostile_store
    rc, out, _ = run(capsys, "runs", "--json", store=store)
    assert rc == 0
    assert {r["name"] for r in json.loads(out)} == set(HOSTILE)
    rc, out, _ = run(capsys, "runs", "--csv", store=store)
    assert rc == 0
    for stem in HOSTILE:
        if "\r" not in stem:  # (csv quotes a name with \r; the csv module reads it back)
            assert stem in out
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(out, newline="")))
    assert {r["name"] for r in rows} == set(HOSTILE)


def test_rich_consoles_escape_what_they_are_given_raw():
    """The safety net under every rich output (show's rule, bench's tables): a console of
    forensics.terminal writes no raw control even when a caller forgot to escape."""
    import io

    from rich.text import Text

    from forensics.terminal import console

    buf = io.StringIO()
    c = console(file=buf, width=60)
    c.print(Text("name: b\x1b[31mred \u202eexe"))
    c.print("plain \x1b[2J string")
    _clean(buf.getvalue())
    assert "b\\x1b[31mred \\u202eexe" in buf.getvalue()


# --- C08: prose fitted to the terminal ---------------------------------------------------


def test_wrapped_breaks_at_spaces_under_the_lines_indent():
    text = "  try: forensics diagnose x --relaunch to replay the chain under the journal and see"
    lines = wrapped(text, 40).splitlines()
    assert all(len(x) <= 40 for x in lines), lines
    assert lines[0].startswith("  try: ") and all(x.startswith("       ") for x in lines[1:])
    assert " ".join(x.strip() for x in lines) == text.strip()
    path = "/very/long/" + "x" * 60 + ".log"
    assert wrapped(f"  {path}", 40) == f"  {path}"  # one word: never cut
    assert wrapped("short\n\nlines", 40) == "short\n\nlines"
    error = "Error: x: " + "word " * 30  # a one-line record, whatever its length
    assert wrapped(error, 40) == error
    warning = "Warning: " + "word " * 20
    lines = wrapped(warning, 40).splitlines()
    assert len(lines) > 1 and all(len(x) <= 40 for x in lines)
    assert all(x.startswith(" " * len("Warning: ")) for x in lines[1:])


def test_piped_prose_without_columns_is_kept_whole(capsys, hostile_store, monkeypatch):
    """Not a terminal and no $COLUMNS: no width is known, lines stay whole (for grep)."""
    store, _ = hostile_store
    monkeypatch.delenv("COLUMNS", raising=False)
    rc, out, _ = run(capsys, "diagnose", "a\rEVIL", store=store)
    assert rc == 0 and max(len(x) for x in out.splitlines()) > 100
    monkeypatch.setenv("COLUMNS", "100")
    rc, out, _ = run(capsys, "diagnose", "a\rEVIL", store=store)
    assert max(len(x) for x in out.splitlines() if " " in x.strip()) <= 100


@pytest.mark.parametrize("cols", ["40", "60"])
def test_prose_fits_the_terminal_width(capsys, hostile_store, monkeypatch, cols):
    store, logs = hostile_store
    monkeypatch.setenv("COLUMNS", cols)
    width = int(cols)
    for args in (
        ("diagnose", "a\rEVIL"),
        ("classify", str(logs / "a\rEVIL.log")),
        ("advise",),
        ("experiments",),
        ("store", "check"),
        ("baseline",),
        ("runs",),
        ("--help",),
        ("diagnose", "--help"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(["--store", str(store), *args])
        out, err = capsys.readouterr()
        assert exc.value.code == 0, (args, err)
        over = [
            x for x in (out + err).splitlines() if len(x) > width and " " in x.strip()
        ]  # a line of one word (a path) is kept whole
        assert not over, (args, over)


@pytest.mark.parametrize(
    "value,expected", [("0", 120), ("-5", 120), ("abc", 120), ("", 120), ("100000", 1000)]
)
def test_odd_columns_values(capsys, hostile_store, monkeypatch, value, expected):
    """Not a terminal here: COLUMNS that is not a positive number is taken as unset (120)."""
    store, _ = hostile_store
    monkeypatch.setenv("COLUMNS", value)
    assert terminal_columns() == expected
    rc, out, err = run(capsys, "runs", store=store)
    assert rc == 0 and "Traceback" not in err
    assert max(len(x) for x in out.splitlines()) <= expected


# --- C10: Ctrl-C at fixed delays, once forensics runs --------------------------------------


def _handler_in_place(pid: int) -> bool:
    """forensics.entry takes over SIGHUP, which Python's own start-up leaves alone: once the
    child catches it, forensics' first lines have run."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(x for x in f if x.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & (1 << (signal.SIGHUP - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.4])
def test_ctrl_c_at_fixed_delays_after_start_is_one_line(tmp_path, delay):
    if not SCRIPT.exists():
        pytest.fail(f"{SCRIPT}: the console script is not installed (pip install -e .)")
    p = subprocess.Popen(
        [str(SCRIPT), "--store", str(tmp_path / "s"), "classify", "-"],
        stdin=subprocess.PIPE,  # held open: the paste never ends
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not _handler_in_place(p.pid):
            assert time.monotonic() < deadline and p.poll() is None
            time.sleep(0.0005)
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = err.decode(errors="replace")
    assert "Traceback" not in text and p.returncode == 130, text
    assert [x for x in text.splitlines() if x.strip()] == ["Interrupted."]


def test_command_modules_write_text_through_echo_only():
    """C07: one output layer. Text goes through cli_common.echo (visible + wrapped); the raw
    click.echo is left to the exact outputs (JSON, CSV, echo itself) and the Error lines,
    which cli.shown makes visible."""
    # cli.py: the Error lines (through cli.shown) and "Interrupted."; cli_common.py: echo
    # itself, echo_json, --json rows in slices (2), echo_wrote's JSON summary, CSV
    allowed = {"cli.py": 5, "cli_common.py": 6}
    for path in sorted((ROOT / "forensics").glob("cli*.py")):
        n = path.read_text().count("click.echo(")
        assert n <= allowed.get(path.name, 0), f"{path.name}: {n} click.echo( (use echo)"
