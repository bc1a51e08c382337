"""Lint, seventh round (issue 14, class "Lint misses dangerous steps", and the shell-syntax
agreement with bash): a probe of the installed CLI over 2,400 dangerous chains (33 kill forms
under 72 wrappers, variables, aliases, functions) found two runners lint did not look into:
`script -qc '…'` (a cluster ending in `-c`) and `trap '…' EXIT` (the action runs at the
chain's end). Syntax: verdicts compared with `bash -n` (scripts/shell_syntax_agreement.py,
seeds 1-3, 1,500 chains each): 32 / 22 / 27 valid chains were called shell-syntax (a relaunch
refused them). Never runs a chain; bash only parses them (and `[[ ]]`, below, runs nothing)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from forensics.lint import lint
from forensics_parsers.shell import parse_chain

DANGEROUS = [
    "script -qc 'kill -9 -1' /dev/null",
    "script -qc 'pkill -9 -f python3' /dev/null",
    "script -qfc 'fuser -k -9 /dev/nvidia0' /dev/null",
    "su -lc 'kill -9 -1'",
    "trap 'killall -9 python3' EXIT",
    "trap 'kill -9 -1' INT TERM",
    "trap -- 'pkill -u root' EXIT",
    "trap 'fuser -k /dev/nvidia0' EXIT",
]
CLEAN = ["trap - EXIT", "trap 'rm -f /tmp/x.pid' EXIT", "trap -p", "script -q /dev/null"]


def _errors(chain: str) -> list[str]:
    return [f.id for f in lint(chain) if f.severity == "error"]


@pytest.mark.parametrize("chain", DANGEROUS)
def test_a_kill_run_by_script_or_trap_is_an_error(chain):
    errors = _errors(chain)
    assert errors and "shell-syntax" not in errors, (chain, errors)


@pytest.mark.parametrize("chain", CLEAN)
def test_the_harmless_forms_stay_clean(chain):
    assert not _errors(chain), chain


# (chain, whether bash refuses it): each checked against bash -n below
SYNTAX = [
    ("function x=(1 2)", False),  # the function `x=` whose body is the subshell `(1 2)`
    ("function x=(1 2) |& b", False),
    ("function x=(1 2) b", True),
    ("function g [[ a ]]", False),  # a function's body may be a test
    ("function g [[ a ]] && b", False),
    ("function g [[ a ]] b", True),
    ("function g < /dev/null", True),
    ("function g\n x=1", True),
    ("function g\n { a; }", False),
    ("{ a; } < f b", True),  # a redirection after a compound: still no word may follow
    ("[[ a ]] > f b", True),
    ("f() { a; } > f b", True),
    ("( a ) > f && b", False),
    ("[[ a ]] > f", False),
    ("coproc", True),
    ("coproc ;", True),
    ("coproc a", False),
    ("a | !", True),
    ("! && a", True),
    ("! ;", False),
    ("!", False),
    ("a | time", False),
    ("x=1 > f b", False),
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize(("chain", "refused"), SYNTAX)
def test_the_syntax_verdict_agrees_with_bash(chain, refused):
    done = subprocess.run(["bash", "-n", "-c", chain], capture_output=True)
    assert (done.returncode != 0 or bool(done.stderr.strip())) == refused  # the table is right
    assert bool(parse_chain(chain).errors) == refused, parse_chain(chain).errors


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_an_empty_test_is_a_syntax_error_because_bash_runs_nothing_of_the_chain():
    """`[[ ]]`: bash -n says nothing, exit 0, yet bash runs none of the text, not even what
    comes before it (its parser gives up there without a word). A relaunch would replay
    nothing: lint calls it shell-syntax (the agreement script counts it as a refusal)."""
    ran = subprocess.run(["bash", "-c", "echo before; [[ ]]; echo after"], capture_output=True)
    assert ran.returncode == 0 and ran.stdout == b""  # what bash does
    errors = parse_chain("echo before; [[ ]]; echo after").errors
    assert errors and "[[ ]]" in errors[0]
    assert not parse_chain("[[ -n $x ]] && echo y").errors
