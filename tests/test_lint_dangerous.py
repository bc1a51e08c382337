"""Issue 14, class "Lint misses dangerous steps": kills of everything, dangerous steps hidden
in `bash -c`/`eval`/`$(…)`/backticks, chains the shell refuses, the rules table shown
literally, lint's exit code, and relaunch refusing what lint calls shell-syntax."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from forensics.cli import cli, main
from forensics.launcher import safe_chain
from forensics.lint import lint, syntax_finding
from forensics_parsers.shell import parse_chain

SERVER = "setsid nohup python3 -m sglang.launch_server --port 1 </dev/null >>/tmp/a.log 2>&1 &"


def _ids(chain: str) -> set[str]:
    return {f.id for f in lint(chain)}


@pytest.mark.parametrize(
    "step",
    [
        "kill -9 -1",
        "kill -- -1",
        "kill -KILL -1",
        "kill -s KILL -1",
        "kill -9 0",
        "kill 0",
        "kill -9 $$",
        "pkill -u root",
        "pkill -U 0",
        "pkill -9 --euid root",
        "pkill -g 0",
        "killall -u bob",
        "killall5",
        "killall5 -9",
        "sudo kill -9 -1",
        "timeout 5 kill -9 -1",
    ],
)
def test_kills_of_everything_are_errors(step):
    findings = [f for f in lint(f"{step}; {SERVER}") if f.id == "mass-kill"]
    assert findings and findings[0].severity == "error" and findings[0].step == 1, step


@pytest.mark.parametrize(
    "step",
    [
        "kill -9 12345",
        "kill -l",
        "kill -- -12345",  # one process group, by its id
        "echo 'kill -9 -1'",  # text, not a command
        'echo "pkill -u root"',
        "pgrep -u root",  # lists, kills nothing
    ],
)
def test_what_only_looks_like_a_mass_kill_is_not_one(step):
    assert "mass-kill" not in _ids(f"{step}; {SERVER}")


@pytest.mark.parametrize(
    "step,rule",
    [
        ('eval "pkill -9 -f python3"', "broad-kill"),
        ('bash -c "pkill -9 -f python3"', "broad-kill"),
        ("sh -c 'kill -9 -1'", "mass-kill"),
        ("nohup bash -c 'killall5' &", "mass-kill"),
        ("echo `pkill -u root`", "mass-kill"),
        ("x=$(kill -9 -1)", "mass-kill"),
        ('echo "$(killall python)"', "broad-kill"),
        ("su -c 'pkill -f python3'", "broad-kill"),
        ("bash -c \"eval 'sh -c killall5'\"", "mass-kill"),  # nested three deep
        ('bash -c "fuser -k /dev/nvidia*"', "gpu-collateral-kill"),
        ('eval "pkill -f sglang.launch_server"', "cleanup-self-kill"),
    ],
)
def test_dangerous_steps_hidden_in_nested_shells_are_found(step, rule):
    assert rule in _ids(f"{step}; {SERVER}"), step


@pytest.mark.parametrize(
    "chain",
    [
        ")))",
        "|| b",
        "&& b",
        "; b",
        "a && && b",
        "a | | b",
        "a & ; b",
        "a;; b",
        "()",
        "(a &&)",
        "a; }",
        "a >",
        "a > && b",
        "a\n&& b",
        "echo $(ls",
        "echo 'abc",
        "a &&",
        "a |",
    ],
)
def test_chains_the_shell_refuses_are_shell_syntax_errors(chain):
    f = syntax_finding(chain)
    assert f is not None and f.severity == "error", chain
    assert [x.id for x in lint(chain)].count("shell-syntax") == 1  # one finding per chain


@pytest.mark.parametrize(
    "chain",
    [
        "(a; b) && c",
        "(a &)",
        "{ a; b; } || c",
        "a &&\n b",
        "a 2>&1 | tee x",
        "echo }",
        "case $x in a) b;; esac",
        "kill $(pgrep -f x); b",
        "! a || true; b &",
        SERVER,
    ],
)
def test_valid_chains_have_no_syntax_error(chain):
    assert parse_chain(chain).errors == [], chain
    assert syntax_finding(chain) is None


def test_rules_table_shows_the_safe_pattern_literally():
    """rich markup swallowed `[s]`: the table showed `pkill -f 'glang.launch_server'`."""
    res = CliRunner(env={"COLUMNS": "400"}).invoke(cli, ["lint", "--rules"])
    assert res.exit_code == 0, res.output
    assert "pkill -f '[s]glang.launch_server'" in res.output
    assert "'glang.launch_server'" not in res.output


@pytest.mark.parametrize(
    "args,code",
    [
        (["--shell", "kill -9 -1"], 1),  # an error
        (["--shell", "kill -9 -1", "--json"], 1),
        (["--shell", f"pkill -x srv && {SERVER}"], 0),  # a warning only (and-after-pkill)
        (["--shell", f"pkill -x srv && {SERVER}", "--strict"], 1),
        (["--shell", "pkill -x srv; sleep 2"], 0),  # info only (sleep-as-sync)
        (["--shell", "pkill -x srv; sleep 2", "--strict"], 0),
        (["--shell", SERVER, "--strict"], 0),  # nothing
    ],
)
def test_lint_exit_code_guards_a_script(args, code):
    res = CliRunner().invoke(cli, ["lint", *args])
    assert res.exit_code == code, res.output


def test_relaunch_refuses_a_chain_lint_calls_shell_syntax(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "x", "--relaunch", "--shell", "|| nohup sleep 1 > /tmp/x.log 2>&1 &"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert err[-1].startswith("Error: ") and "unexpected token `||`" in err[-1]
    assert "forensics lint" in err[-1]
    assert not (tmp_path / "home" / "logs").exists()  # nothing ran


def test_relaunch_refuses_a_mass_kill_unless_safe_patterns_defuses_it(capsys, tmp_path):
    chain = f"kill -9 -1; {SERVER}"
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(tmp_path), "diagnose", "x", "--relaunch", "--shell", chain])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "--safe-patterns" in err, err
    safe = safe_chain(parse_chain(chain), "fxrtok", str(tmp_path / "gpu"))
    assert "mass-kill" not in {f.id for f in lint(safe)}
    assert len(parse_chain(safe).steps) == 2
