"""Issue 14, sixth round: a sweep of every command and every option that takes a path, URL,
host, number or name (docs/bad-inputs.md, "Sixth round"). Each test cites its class.

- CLI contract: a text or path value typed empty (`launch --name ''`, `hosts check ''`,
  `bench --run ''`, `report ''`) was taken for "not given": a name derived from the flags,
  the local machine probed, every run reported. One check (cli_common.refuse_empty_values,
  wrapped around every leaf command) makes it exit 2 before anything runs;
- CLI contract: an option a command drops in silence (`baseline RUN --experiment X`) is
  refused (an OptionRule row);
- non-regular inputs: `sweep x.toml/` and `bench --dataset x.jsonl/` read the file (a
  pathlib.Path drops the trailing slash); the user's path is opened as typed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import cli
from forensics.cli_common import EMPTY_MEANS_SOMETHING
from tests.conftest import FIXTURES


def forensics(tmp_path: Path, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI in its own process, with a store of its own under tmp_path."""
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "home")}
    env.pop("FORENSICS_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "forensics", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(p: subprocess.CompletedProcess, *needles: str) -> str:
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("Error:")]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _ingested(tmp_path: Path) -> None:
    p = forensics(tmp_path, "ingest", str(FIXTURES / "sglang_baseline.log"))
    assert p.returncode == 0, p.stderr


# ------------------------------------------------------------ CLI contract: empty values


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (
            ["launch", "--shell", "python3 -m sglang.launch_server --model-path /x", "--name", ""],
            "--name",
        ),
        (["hosts", "check", ""], "NAME"),
        (["bench", "http://127.0.0.1:1/", "--run", ""], "--run"),
        (["report", "", "--out", "r.html"], "MATCH"),
        (["report", "--baseline", "", "--out", "r.html"], "--baseline"),
        (["runs", ""], "MATCH"),
        (["ingest", ""], "INPUTS"),
        (["classify", ""], "PATHS"),
        (["sweep", "", "--dry-run"], "FILE"),
        (["--store", "", "runs"], "--store"),
    ],
)
def test_cli_contract_an_empty_value_is_a_usage_error_before_anything_runs(tmp_path, argv, shown):
    """Each of these ran with the empty value as "not given": `launch --name ''` started a
    server under a name derived from its flags, `hosts check ''` probed this machine,
    `bench --run ''` benchmarked without a run, `report ''` reported every run."""
    _ingested(tmp_path)
    p = forensics(tmp_path, *argv)
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, f"{shown} ''", "empty value", "(try:")
    assert p.stdout == ""
    assert not (tmp_path / "home" / "logs").exists()  # no launch was attempted
    assert not (tmp_path / "r.html").exists()


def test_cli_contract_every_text_parameter_is_guarded():
    """The check is wrapped around every leaf command (a new command gets it too), and the
    table of parameters whose empty value means something names real parameters."""
    import click

    def leaves(cmd, path=()):
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                yield from leaves(sub, (*path, name))
        else:
            yield " ".join(path), cmd

    found = dict(leaves(cli))
    assert len(found) > 20
    for name, cmd in found.items():
        assert getattr(cmd.callback, "refuses_empty", False), name
    for command, param in EMPTY_MEANS_SOMETHING:
        assert param in {p.name for p in found[command].params}


def test_cli_contract_a_server_flag_may_still_be_empty(tmp_path):
    """`launch -- FLAGS` passes the server's own flags as typed: an empty value there is the
    server's business (click.UNPROCESSED), not refused by the check."""
    from forensics.cli_common import refuse_empty_values

    ctx = cli.make_context("forensics", ["launch", "--sim", "--name", "x", "--", "--api-key", ""])
    sub = cli.commands["launch"].make_context(
        "launch", ["--sim", "--name", "x", "--", "--api-key", ""], parent=ctx
    )
    assert "" in sub.params["server_args"]
    refuse_empty_values(sub)  # no error


def test_cli_contract_baseline_run_with_experiment_is_refused(tmp_path):
    """`baseline RUN --experiment X` set the run's own experiment and dropped X in silence."""
    _ingested(tmp_path)
    p = forensics(tmp_path, "baseline", "sglang_baseline", "--experiment", "other")
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, "--experiment", "--tok-s")
    listed = forensics(tmp_path, "baseline", "--json")
    assert listed.returncode == 0 and listed.stdout.strip() in ("[]", ""), listed.stdout


# ------------------------------------------------------------ non-regular inputs: `file/`


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["sweep", "{p}/", "--dry-run"], "s.toml"),
        (["sweep", "run", "{p}/", "--dry-run"], "s.toml"),
        (["bench", "http://127.0.0.1:1/", "--dataset", "{p}/"], "d.jsonl"),
    ],
)
def test_non_regular_a_user_file_with_a_trailing_slash_is_not_read(tmp_path, argv, name):
    """`x.toml/` names a folder `x.toml`: the system says "not a directory"; a
    pathlib.Path dropped the slash and the file was read as the sweep or the dataset."""
    f = tmp_path / name
    if name.endswith(".toml"):
        f.write_bytes((FIXTURES / "sweeps" / "sim-mix.toml").read_bytes())
    else:
        f.write_text('{"prompt": "hello"}\n')
    p = forensics(tmp_path, *[a.replace("{p}", str(f)) for a in argv])
    assert p.returncode == 2, p.stdout + p.stderr
    one_error_line(p, f"{f}/", "not a directory")


def test_non_regular_classify_of_a_folder_or_an_unreadable_file_goes_through_the_one_reader(
    tmp_path,
):
    """click's own Path check answered `classify DIR` with "File '…' is a directory." (no
    fix) and an unreadable file with exit 2 ("is not readable"), where ingest and diagnose
    --log say exit 3 "permission denied" (docs/exit-codes.md): the paths now go to the one
    reader, as every other log path does."""
    folder = tmp_path / "logs"
    folder.mkdir()
    p = forensics(tmp_path, "classify", str(folder))
    assert p.returncode == 2, p.stderr
    one_error_line(p, str(folder), "is a directory", "(try:")
    if os.geteuid() == 0:
        return  # root reads a file of mode 000: the case needs another user
    locked = tmp_path / "locked.log"
    locked.write_bytes((FIXTURES / "sglang_baseline.log").read_bytes())
    locked.chmod(0)
    p = forensics(tmp_path, "classify", str(locked))
    assert p.returncode == 3, p.stderr
    one_error_line(p, str(locked), "permission denied")
