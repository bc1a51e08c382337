"""Issue 14, class "Lint misses dangerous steps", third round: stops of the host, a service or
a GPU (rows of kills.MASS_KILLS), command names the shell resolves (parsers/shell.py
NAME_LOOKUPS, variables, aliases: ``resolve_words``), remote commands (``ssh HOST '…'`` is a
nested script), and what a step destroys besides processes (forensics/hazards.py:
removes-launch-input, exec-replaces-shell, trap-ignores-signals). A replay refuses what the
rules' ``replay`` column says."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from click.testing import CliRunner

from forensics.cli import cli
from forensics.lint import RULES, lint, replay_blockers
from forensics_parsers.shell import parse_chain

SERVER = (
    "setsid nohup python3 -m sglang.launch_server --model-path /models/k2 --port 1 "
    "</dev/null >>/data/logs/a.log 2>&1 &"
)


def _found(step: str, rule: str) -> list:
    return [f for f in lint(f"{step}; {SERVER}") if f.id == rule]


@pytest.mark.parametrize(
    "step",
    [
        "pkill -P 1",
        "pkill --parent=1",
        "kill -9 $PPID",
        "kill -- -$PPID",
        "reboot",
        "sudo shutdown -h now",
        "/sbin/halt",
        "poweroff",
        "init 0",
        "telinit 6",
        "systemctl stop docker",
        "sudo systemctl restart nvidia-persistenced",
        "systemctl isolate rescue.target",
        "service docker stop",
        "nvidia-smi --gpu-reset",
        "nvidia-smi -r -i 0",
        # the command word as the shell resolves it
        "$(which pkill) -u root",
        "`which killall5`",
        "$(command -v kill) -9 -1",
        "P=-1; kill -9 $P",
        'K="kill -9"; $K -1',
        "export K=killall5; $K",
        "alias k='kill -9'; k -1",
        # remote commands
        "ssh gpu8 'kill -9 -1'",
        "ssh -p 2222 -i ~/.ssh/id gpu8 reboot",
        "ssh -o BatchMode=yes -- gpu8 pkill -u root",
    ],
)
def test_stops_of_everything_are_mass_kills(step):
    found = _found(step, "mass-kill")
    assert found and found[0].severity == "error" and found[0].step in (1, 2), step


@pytest.mark.parametrize(
    "step",
    [
        "systemctl status docker",
        "nvidia-smi -L",
        "./init --config x",
        "kill -9 $PID",  # a variable the chain never set: unknown, not everything
        "ssh gpu8",
        "which pkill",
        "command pkill",  # runs nothing until it has a pattern
        "P=-1; echo $P",
    ],
)
def test_near_misses_are_not_mass_kills(step):
    assert not _found(step, "mass-kill"), step


@pytest.mark.parametrize(
    "step, pattern",
    [
        ("$(which pkill) -f python", "python"),
        ("P=pkill; $P -f python", "python"),
        ("alias k=pkill; k -f python", "python"),
        ("ssh gpu8 'pkill -9 -f python'", "python"),
    ],
)
def test_resolved_names_reach_the_kill_rules(step, pattern):
    ids = {f.id for f in lint(f"{step}; {SERVER}")}
    assert {"broad-kill", "cleanup-self-kill"} <= ids, (step, ids)


def test_the_step_text_stays_as_typed():
    chain = parse_chain("P=pkill; $P -f x")
    assert chain.steps[1].text == "$P -f x"
    assert chain.steps[1].command.argv == ["pkill", "-f", "x"]


@pytest.mark.parametrize(
    "step",
    [
        "rm -rf /data/logs",
        "rm -rf /data",
        "rm -r -- /data/logs/",
        "rm -rf /models/*",
        "sudo rm -rf /models/k2",
        "bash -c 'rm -rf /models'",
    ],
)
def test_removing_what_the_launch_needs_is_an_error(step):
    found = _found(step, "removes-launch-input")
    assert found and found[0].severity == "error", step


@pytest.mark.parametrize(
    "step", ["rm -f /data/logs/a.log", "rm -rf /data/logs/old", "rm -rf /tmp/x", "rm -rf ~/.cache"]
)
def test_removing_other_paths_is_not(step):
    assert not _found(step, "removes-launch-input"), step


def test_exec_before_other_steps_ends_the_chain():
    assert _found("exec bash", "exec-replaces-shell")
    last = lint("cd /x; exec python3 -m sglang.launch_server --model-path m")
    assert all(f.id != "exec-replaces-shell" for f in last)
    assert not _found("exec >/tmp/x 2>&1", "exec-replaces-shell")


def test_trap_ignoring_signals_is_a_warning():
    found = _found("trap '' TERM INT", "trap-ignores-signals")
    assert found and found[0].severity == "warning"
    assert not _found("trap 'echo bye' EXIT", "trap-ignores-signals")


def test_replay_refuses_what_the_rules_say():
    assert {r.id: r.replay for r in RULES if r.replay} == {
        "shell-syntax": "refuse",
        "mass-kill": "safe-patterns",
        "removes-launch-input": "refuse",
        "runs-fetched-script": "refuse",  # round 5
        "removes-shared-data": "refuse",  # round 5
    }
    chain = f"reboot; {SERVER}"
    assert [f.id for f in replay_blockers(chain)] == ["mass-kill"]
    assert replay_blockers(chain, safe_patterns=True) == []
    chain = f"rm -rf /models; {SERVER}"
    # the model, and (round 5) every other model of the folder
    assert [f.id for f in replay_blockers(chain, safe_patterns=True)] == [
        "removes-launch-input",
        "removes-shared-data",
    ]


@pytest.mark.parametrize(
    "chain",
    [
        "nvidia-smi --gpu-reset; python3 -m sglang.launch_server --model-path m",
        "rm -rf /nonexistent-models; python3 -m sglang.launch_server --model-path "
        "/nonexistent-models/k2",
    ],
)
def test_cli_replay_refuses_before_running_anything(tmp_path, monkeypatch, chain):
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path))
    res = CliRunner().invoke(cli, ["launch", "--replay", "--sim", "--shell", chain])
    assert res.exit_code == 2, res.output
    assert "not replayed" in res.output
    assert not (tmp_path / "launches").exists() or not any((tmp_path / "launches").iterdir())


def test_lint_cli_exit_codes_for_the_new_rules(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path))
    run = CliRunner().invoke
    assert run(cli, ["lint", "--shell", "reboot"]).exit_code == 1
    warn = f"trap '' TERM; {SERVER}"
    assert run(cli, ["lint", "--shell", warn]).exit_code == 0
    assert run(cli, ["lint", "--strict", "--shell", warn]).exit_code == 1


# The shell's own verdict, third round: `in` where a command starts, a `(` after a word (only
# `NAME()` where a command starts defines a function), an array after the command word, a
# function with no body (parsers/shell_syntax.py: rows of KEYWORDS and SYNTAX_RULES).
SYNTAX_CASES = [
    "in",
    "while a; do in; done",
    "echo in",
    "for i in 1; do a; done",
    "case x in a) b;; esac",
    "a (",
    "fi (",
    "( a ) ( b )",
    "a > (",
    "f() a",
    "f() ( a )",
    "f()",
    "function g",
    "function g a",
    "function g { a; }",
    "function g() { a; }",
    "a b f()",
    "x=1 f()",
    "f() { a; }",
    "a x=(1 2)",
    "x=(1 2) a",
    "x=1 y=(1 2)",
    "2>&1 x=(1 2)",
    "a=(1 2) b=3",
    "cat <(ls) a",
    "echo $(( 1 + 2 ))",
    "time (a)",
    "a && (b)",
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("chain", SYNTAX_CASES)
def test_syntax_verdict_agrees_with_bash(chain):
    refused = subprocess.run(["bash", "-n", "-c", chain], capture_output=True).returncode != 0
    assert bool(parse_chain(chain).errors) == refused, chain


def test_lint_never_prints_the_chains_secrets():
    """Issue 14, secrets: a finding quotes the chain, and the chain may carry --api-key or an
    HF token; every finding's text goes through the parser's redaction (text and --json)."""
    chain = (
        "pkill -f sglang; HF_TOKEN=hf_abcdefghijklmnopqrstuvwx python3 -m sglang.launch_server "
        "--api-key SEKRET123 --model-path m > /tmp/x.log 2>&1"
    )
    found = lint(chain)
    assert {f.id for f in found} >= {"cleanup-self-kill", "no-process-group"}
    for args in (["lint", "--shell", chain], ["lint", "--json", "--shell", chain]):
        out = CliRunner().invoke(cli, args)
        assert out.exit_code == 1, out.output
        assert "SEKRET123" not in out.output and "hf_abcdefghij" not in out.output
        assert "redacted" in out.output
