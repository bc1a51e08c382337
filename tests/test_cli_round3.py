"""Issue 14, class "The CLI contract a new user hits", third round.

* Flags (C01): a flag a command would ignore, or two that contradict each other, is exit 2
  before anything is looked up: each command's rows of ``cli_common.OptionRule``
  (``option_rules``), and one output format (``chosen_format``: ``--csv --json`` is exit 2).
* Numbers: every numeric option of every command is finite and has a high bound
  (``cli_common.Number``: seconds at most 30 days; bench's ``BOUNDS`` table has a high column):
  ``--grace 1e308``, ``--lock-timeout 1e308``, ``--deadline 1e308``, ``--concurrency 10**30``.
* Names: every command that acts on one run resolves it with ``runs.only_one`` (label and
  baseline used their own rules: one silently picked the newest).
* Markup: every rich console is ``forensics.terminal.console`` (markup off): a run or a path
  named ``[bold]x[s]`` prints as typed in ``show``, ``diagnose``, ``runs``.
* Paths: a file that exists is that file, whatever characters it holds (``ingest`` took
  ``[bold]x[s].log`` for a glob).
* Config: forensics.toml is read as a capped regular file (a FIFO or a device is exit 2, never
  a hang), with a BOM allowed; ``$VAR`` in an address is refused, not kept verbatim.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
from pathlib import Path

import click
import pytest

from forensics.cli import cli, main

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"


def run(capsys, *args: str, store: str | Path) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def one_error(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def names_store(tmp_path_factory):
    """Two runs named `dup` (one file name in two folders), a file of two launches, and a log
    whose name holds rich markup."""
    root = tmp_path_factory.mktemp("names")
    (root / "a").mkdir()
    (root / "b").mkdir()
    shutil.copy(FIX / "sglang_baseline.log", root / "a" / "dup.log")
    shutil.copy(FIX / "sglang_eagle3_cg_5dt.log", root / "b" / "dup.log")
    shutil.copy(FIX / "sglang_two_launches.log", root / "two.log")
    shutil.copy(FIX / "sglang_fail_capture.log", root / "[bold]x[s].log")
    store = root / "store"
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), "ingest", "-r", str(root)])
    assert exc.value.code == 0
    return store


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["runs", "--csv", "--json"], "two formats"),
        (["runs", "--format", "csv", "--json"], "two formats"),
        (["runs", "--all-columns", "--json"], "--all-columns"),
        (["runs", "--group-by", ""], "--group-by"),
        (["launch", "--list", "--shell", "echo hi"], "--list"),
        (["launch", "x", "--check", "--shell", "echo hi"], "--check"),
        (["launch", "--shell", "echo hi", "--sim-speed", "5"], "--sim"),
        (["plot", "decode", "two#1", "--experiment", "x"], "--experiment"),
        (["plot", "decode", "two#1", "--baseline", "90"], "--baseline"),
        (["diagnose", "x", "--sim"], "--relaunch"),
        (["bench", "DEAD", "--port", "8000"], "--port"),
        (["bench", "DEAD", "--direct"], "--direct"),
        (["bench", "DEAD", "--model", "m"], "--model"),
        (["bench", "DEAD", "--no-store", "--run", "two#1"], "--no-store"),
        (["lint", "--rules", "--strict"], "--rules"),
        (["lint", "--rules", "--shell", "pkill -f x"], "--rules"),
        # numbers: finite and bounded, checked before any lookup (stop x is not looked up)
        (["stop", "x", "--grace", "1e308"], "--grace"),
        (["ingest", "--lock-timeout", "1e308", "x.log"], "--lock-timeout"),
        (["launch", "--sim", "--deadline", "inf", "--", "--model-path", "sim://k2"], "--dead"),
        (["bench", "DEAD", "--deadline", "1e308"], "--deadline"),
        (["bench", "DEAD", "--concurrency", str(10**30)], "--concurrency"),
        (["bench", "DEAD", "--num-prompts", str(10**30)], "--num-prompts"),
        (["bench", "DEAD", "--run", "nope", "--ttft-timeout", "1e308"], "--ttft-timeout"),
        # a baseline figure is bounded too (1e308 tok/s divided by zero: an internal error)
        (["advise", "--baseline", "1e308"], "--baseline"),
        (["plot", "trend", "--baseline", "1e308"], "--baseline"),
        (["baseline", "--tok-s", "1e308"], "--tok-s"),
        (["plot", "trend", "-o", ""], "--out"),
    ],
)
def test_ignored_or_contradicting_flags_are_usage_errors(capsys, names_store, args, needle):
    args = [_dead_url() if a == "DEAD" else a for a in args]
    code, _, err = run(capsys, *args, store=names_store)
    assert code == 2, err
    assert needle in one_error(err)


def _numeric_params():
    def walk(cmd, path):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from walk(sub, (*path, name))
            return
        for p in cmd.params:
            yield path, p

    yield from walk(cli, ())


# Numeric options whose bounds live in the library, with the message that names them.
LIBRARY_BOUNDED = {"--folds", "--seed", "--tok-s"}


def test_every_numeric_option_has_a_high_bound():
    from forensics.bench import BOUNDS
    from forensics.cli_common import Number

    bench_flags = {flag for flag, *_ in BOUNDS}
    loose = []
    for path, p in _numeric_params():
        if not isinstance(p, click.Option):
            continue
        flag = p.opts[-1] if p.opts[-1].startswith("--") else p.opts[0]
        if isinstance(p.type, Number):
            if p.type.high is None and flag not in LIBRARY_BOUNDED:
                loose.append((path, flag))
        elif isinstance(p.type, (click.types.IntParamType, click.types.FloatParamType)):
            if flag not in bench_flags | LIBRARY_BOUNDED:
                loose.append((path, flag))
    assert loose == []
    assert all(high < float("inf") for *_, high in BOUNDS)


def test_one_format_flag_still_works(capsys, names_store):
    for args in (["runs", "--json"], ["runs", "--json", "--json"], ["runs", "--csv"]):
        code, out, err = run(capsys, *args, store=names_store)
        assert code == 0 and out and not err, (args, err)


@pytest.mark.parametrize(
    "args",
    [["show", "dup"], ["label", "dup", "ok"], ["baseline", "dup"], ["bench", "D", "--run", "dup"]],
)
def test_one_run_commands_refuse_a_name_of_two_runs(capsys, names_store, args):
    args = [_dead_url() if a == "D" else a for a in args]
    code, _, err = run(capsys, *args, store=names_store)
    line = one_error(err)
    assert code == 2, err
    assert "matches 2 runs" in line and "a/dup.log" in line and "b/dup.log" in line


def test_numbering_shown_is_numbering_accepted(capsys, names_store):
    """`two#2` (as runs shows it) and its run id `SOURCE:1` are the same run."""
    import json

    code, out, _ = run(capsys, "show", "two#2", "--json", store=names_store)
    assert code == 0
    shown = json.loads(out)
    code, out2, _ = run(capsys, "show", shown["run_id"], "--json", store=names_store)
    assert code == 0 and json.loads(out2)["name"] == "two#2"
    assert shown["run_id"].endswith(":1")
    code, _, err = run(capsys, "show", "two#0", store=names_store)
    assert code == 3 and "two#1" in one_error(err)


@pytest.mark.parametrize("args", [["show", "[bold]x[s]"], ["diagnose", "[bold]x[s]"], ["runs"]])
def test_markup_in_names_prints_as_typed(capsys, names_store, monkeypatch, args):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = run(capsys, *args, store=names_store)
    assert code == 0
    assert "[bold]x[s]" in out


def test_every_console_is_the_markup_free_one():
    """rich's Console is made in forensics/terminal.py only (markup off)."""
    offenders = []
    for path in (ROOT / "forensics").rglob("*.py"):
        if path.name == "terminal.py":
            continue
        text = path.read_text()
        if re.search(r"\bConsole\(", text) or re.search(r"TextColumn\((?![^)]*markup=False)", text):
            offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_an_existing_file_with_glob_characters_is_that_file(capsys, tmp_path):
    log = tmp_path / "[bold]x[s].log"
    shutil.copy(FIX / "sglang_fail_capture.log", log)
    code, out, err = run(capsys, "ingest", "--json", str(log), store=tmp_path / "st")
    assert code == 0, err
    code, _, err = run(capsys, "ingest", str(tmp_path / "[ab].log"), store=tmp_path / "st")
    assert code == 3 and "no files matched" in one_error(err)


@pytest.mark.parametrize(
    "content, needle",
    [
        ("FIFO", "FIFO"),
        ("/dev/zero", "character device"),
        ('[hosts.a]\naddress = "$USER@h"\n', "not expanded"),
        ('[hosts.a]\naddress = "@h"\n', "not an address"),
        ('[hosts.a]\naddress = "u@h:0"\n', "port"),
        ('[hosts.a]\naddress = "u@h"\nconnect_timeout = -0.0\n', "connect_timeout"),
        ('[hosts.a]\naddress = "u@h"\nconnect_timeout = [1]\n', "connect_timeout"),
        (
            "".join(
                f'[hosts.h{i}]\naddress = "u@h{i}"\njump = "h{(i + 1) % 4}"\n' for i in range(4)
            ),
            "circle",
        ),
    ],
)
def test_bad_config_files_are_exit_2(capsys, tmp_path, monkeypatch, content, needle):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "forensics.toml"
    if content == "FIFO":
        os.mkfifo(cfg)
    elif content.startswith("/dev/"):
        cfg.symlink_to(content)
    else:
        cfg.write_text(content)
    code, _, err = run(capsys, "hosts", "list", store=tmp_path / "st")
    assert code == 2, err
    assert needle in one_error(err)


def test_a_config_file_with_a_bom_is_read(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forensics.toml").write_bytes(b'\xef\xbb\xbf[hosts.a]\naddress = "u@h"\n')
    code, out, err = run(capsys, "hosts", "list", "--json", store=tmp_path / "st")
    assert code == 0 and '"a"' in out, err
