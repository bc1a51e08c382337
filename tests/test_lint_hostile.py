"""Issue 14, class "Lint misses dangerous steps", second round: other spellings of the same
kills (glued and long options, quoting, wrappers such as sudo/doas/env/xargs/timeout, groups),
and the shell's own verdict on syntax, asked of the real bash (`bash -n -c`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from click.testing import CliRunner

from forensics.cli import cli
from forensics.kills import parse_kill
from forensics.lint import RULES, lint
from forensics_parsers.shell import parse_chain

SERVER = "setsid nohup python3 -m sglang.launch_server --port 1 </dev/null >>/tmp/a.log 2>&1 &"


def _ids(step: str) -> set[str]:
    return {f.id for f in lint(f"{step}; {SERVER}")}


@pytest.mark.parametrize(
    "step",
    [
        # the user's selector glued to its option, or spelled long
        "pkill -uroot",
        "pkill -U0",
        "pkill -9 -U0",
        "pkill --uid=root",
        "pkill --uid root",
        "pkill --euid=0",
        "killall --user root",
        "pkill --pgroup 0",
        "pkill --session=0",
        # kill's own spellings and quoting
        "/bin/kill -9 -1",
        "kill -SIGKILL -1",
        "kill -n 9 -- -1",
        "kill -9 '-1'",
        'kill -9 "-1"',
        "k'ill' -9 -1",
        "\\kill -9 -1",
        "kill -HUP -1 2>/dev/null",
        "kill -TERM -- -$$",
        "/usr/sbin/killall5 -15",
        # behind wrappers: their options and values are peeled off
        "sudo -u root -E kill -9 -1",
        "sudo -- pkill -U 0",
        "doas -u root killall5",
        "env -u HOME kill -9 -1",
        "env -i A=1 kill -- -1",
        "timeout -k 2 -s KILL 5 pkill -u root",
        "nice -n 19 ionice -c 3 kill -9 -1",
        "xargs kill -9 -1",
        "xargs -r -n 1 pkill -u root",
        "stdbuf -o L kill 0",
        "command kill -9 -1",
        # inside groups, subshells and nested shells
        "(kill -9 -1)",
        "{ kill -- -1; }",
        "( (killall5) )",
        "sudo bash -c 'kill -9 -1'",
        'env X=1 sh -c "eval \\"pkill -U 0\\""',
        "echo $(sudo kill -9 -1)",
    ],
)
def test_other_spellings_of_kills_of_everything_are_errors(step):
    found = [f for f in lint(f"{step}; {SERVER}") if f.id == "mass-kill"]
    assert found and found[0].severity == "error" and found[0].step == 1, step


@pytest.mark.parametrize(
    "step",
    [
        "pkill -u root python3",  # a pattern: root's python3 processes (broad-kill says so)
        "kill -9 -- -4242",  # one process group
        "kill -l 9",
        "sudo kill -9 4242",
        "xargs -n 1 echo kill -9 -1",
        "pkill -o sglang",  # -o is --oldest for pkill, not an option with a value
    ],
)
def test_near_misses_are_not_mass_kills(step):
    assert "mass-kill" not in _ids(step), step


def test_value_options_belong_to_their_program():
    """pkill's -o is --oldest (a flag): it must not swallow the pattern; killall's -o takes
    a time and -s a signal; a cluster `-fu root` is -f then -u root."""
    assert parse_kill(["pkill", "-o", "-f", "sglang"]).pattern == "sglang"
    spec = parse_kill(["killall", "-o", "5m", "-s", "KILL", "python3"])
    assert (spec.pattern, spec.signal) == ("python3", 9)
    spec = parse_kill(["pkill", "-fu", "root", "launch_server"])
    assert (spec.pattern, spec.full) == ("launch_server", True)


@pytest.mark.parametrize(
    "step",
    [
        "xargs pkill -f sglang.launch_server",
        "(pkill -f sglang.launch_server)",
        "{ sleep 1; pkill -9 -f launch_server; }",
        "sudo -u root pkill -f sglang",
        "timeout -s KILL 5 pkill -f sglang",
        "doas pkill -f sglang",
        "pkill -9f sglang",
        "kill -9 $(pgrep -f 'sglang.launch_server')",
    ],
)
def test_self_kills_behind_wrappers_and_groups_are_found(step):
    assert "cleanup-self-kill" in _ids(step), step


# Chains and what bash itself says of them: the refused ones and, as important, valid ones
# that lint must not refuse (relaunch would refuse to replay them, exit 2).
SYNTAX_CASES = [
    # refused
    "))) ; a",
    "  || b",
    "# note\n|| b",
    "a\n\n&& b",
    "a &&& b",
    "a & & b",
    "a; ;",
    "( )",
    "{ }",
    "{ a }",
    "( a ) b",
    "{ a; } b",
    "a |& | b",
    "|& b",
    "a ;& b",
    "fi",
    "then a",
    "a && done",
    "do a",
    "esac",
    "if a; fi",
    "if ; then a; fi",
    "while a; done",
    "if a; then b; else; fi",
    "if a; then b; fi; fi",
    "if a; then b",
    "for x in 1 2; do a",
    "if a; then b; fi c",
    "echo 'unclosed",
    "echo $(a",
    # accepted
    "a |& b",
    "f() { a; }",
    "f () { a; }",
    "function f { a; }",
    "echo function g { a",  # `function` as an argument opens nothing
    "x=(1 2 3); a",
    "a=( ) b",
    "diff <(a) >(b)",
    "cat <(ls) file",
    "if a; then b; elif c; then d; else e; fi",
    "if a\nthen b\nfi",
    "if a; then { b; } fi",
    "while a; do (b) done",
    "for x in do done; do a; done",
    "for ((i=0;i<3;i++)); do a; done",
    "case $x in a) b;; *) c;; esac",
    "case x in esac",
    "time ! a | b",
    "! if a; then b; fi",
    "a | while read x; do b; done &",
    "[[ ( a ) ]] && b",
    "echo if then fi done esac",
    "then=1; echo $then",
    "pkill -f x && sleep 2 && pkill -9 -f python3; sleep 3 && fuser -k /dev/nvidia* 2>/dev/null;"
    " sleep 3 && nohup bash -c 'python3 -m sglang.launch_server' > /data/x.log 2>&1 &",
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("chain", SYNTAX_CASES)
def test_shell_syntax_agrees_with_bash(chain):
    refused = subprocess.run(["bash", "-n", "-c", chain], capture_output=True).returncode != 0
    ours = parse_chain(chain).errors
    assert bool(ours) == refused, (chain, ours)
    assert ("shell-syntax" in {f.id for f in lint(chain)}) == refused


def test_relaunch_refuses_a_chain_with_a_stray_keyword(tmp_path):
    res = CliRunner().invoke(
        cli,
        ["--store", str(tmp_path), "launch", "--replay", "--shell",
         "pkill -x srv; fi; nohup sleep 1 > /tmp/x.log 2>&1 &"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "unexpected token `fi`" in res.output and "Traceback" not in res.output


def test_rules_table_shows_every_bracket_literally():
    """Every rule's text reaches the terminal as written: rich markup would eat any `[x]`."""
    res = CliRunner(env={"COLUMNS": "2000"}).invoke(cli, ["lint", "--rules"])
    assert res.exit_code == 0, res.output
    shown = " ".join(res.output.split())
    for rule in RULES:
        for text in (rule.detects, rule.why, rule.alternative):
            assert " ".join(text.split()) in shown, (rule.id, text)
