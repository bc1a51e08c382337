"""forensics/lint.py: rule findings for launch chains (bad-inputs S14-S17)."""

from __future__ import annotations

import json
import socket

from click.testing import CliRunner

from forensics.cli import cli
from forensics.hosts import LocalHost
from forensics.kills import parse_kill
from forensics.launcher import safe_chain
from forensics.lint import RULES, lint
from forensics.recipe import Recipe
from forensics_parsers.shell import launching_command_line, parse_chain
from tests.test_shell import SEED


def _ids(findings):
    return [(f.id, f.step) for f in findings]


def test_seed_chain_findings_s14_s15():
    ids = _ids(lint(SEED))
    assert ("cleanup-self-kill", 1) in ids  # pkill -f "sglang.launch_server"
    assert ("cleanup-self-kill", 3) in ids  # pkill -9 -f python3
    assert ("broad-kill", 3) in ids
    assert ("gpu-collateral-kill", 5) in ids
    assert ("and-after-pkill", 1) in ids
    assert ("no-process-group", 7) in ids
    assert ("no-redirect-stdin", 7) in ids  # S17
    assert ("sleep-as-sync", 2) in ids


def test_self_kill_explanation_is_concrete():
    f = next(f for f in lint(SEED) if f.id == "cleanup-self-kill" and f.step == 3)
    assert "`python3`" in f.explanation
    assert "SIGKILL (exit 137)" in f.explanation
    assert "no log is written" in f.explanation
    assert f.alternative.startswith("stop the previous run by its process group")


def test_self_kill_is_a_regex_match_on_the_launching_command_line():
    # the classic bracket trick does not match its own text ...
    chain = "pkill -f '[s]erver_x'; sleep 1"
    assert "cleanup-self-kill" not in [f.id for f in lint(chain)]
    # ... unless the chain itself contains what it matches
    chain2 = "pkill -f '[s]erver_x'; nohup server_x > /tmp/l.log 2>&1 &"
    assert "cleanup-self-kill" in [f.id for f in lint(chain2)]
    # a name match (no -f) never sees the shell's command line
    assert "cleanup-self-kill" not in [f.id for f in lint("pkill -x python3; sleep 1")]


def test_parse_kill_options():
    spec = parse_kill(["pkill", "-9", "-f", "python3"])
    assert (spec.pattern, spec.full, spec.signal, spec.kills) == ("python3", True, 9, True)
    spec = parse_kill(["pkill", "--signal", "KILL", "-u", "root", "-f", "x"])
    assert (spec.pattern, spec.signal) == ("x", 9)
    assert parse_kill(["killall", "python"]).full is False
    assert parse_kill(["pgrep", "-f", "x"]).kills is False
    assert parse_kill(["ls"]) is None


def test_kill_of_pgrep_substitution_counts_as_a_kill():
    ids = [f.id for f in lint("kill -9 $(pgrep -f launch_server); nohup a > /tmp/x.log 2>&1 &")]
    assert "cleanup-self-kill" in ids


def test_killall_python_is_broad_not_self_kill():
    ids = [f.id for f in lint("killall python; sleep 1")]
    assert "broad-kill" in ids and "cleanup-self-kill" not in ids


def test_safe_server_start_has_no_findings():
    chain = "setsid nohup python3 -m sglang.launch_server --port 1 </dev/null >>/tmp/a.log 2>&1 &"
    assert lint(chain) == []


def test_log_dir_missing_checked_on_the_host(tmp_path):
    chain = f"nohup python3 -m sglang.launch_server </dev/null > {tmp_path}/nope/x.log 2>&1 &"
    assert "log-dir-missing" not in [f.id for f in lint(chain)]  # no host: not checked
    findings = lint(chain, host=LocalHost())
    f = next(f for f in findings if f.id == "log-dir-missing")
    assert f.step == 1 and f"{tmp_path}/nope" in f.explanation


def test_port_in_use_checked_on_the_host():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        chain = f"setsid nohup python3 -m sglang.launch_server --port {port} </dev/null >>/tmp/x.log 2>&1 &"
        ids = [f.id for f in lint(chain, host=LocalHost())]
    assert "port-in-use" in ids


def test_rules_are_data_with_explanations():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    for r in RULES:
        assert r.severity in ("error", "warning", "info") and r.why and r.alternative


def test_safe_patterns_keep_self_kill_and_touch_nothing_else(tmp_path):
    chain = parse_chain(SEED)
    token = "fxrtesttoken01"
    out = safe_chain(chain, token, str(tmp_path / "gpu"))
    new = parse_chain(out)
    assert len(new.steps) == len(chain.steps)
    assert new.steps[0].command.argv == ["pkill", "-f", token]
    assert new.steps[2].command.argv == ["pkill", "-9", "-f", token]
    assert new.steps[4].command.argv == ["fuser", "-k", str(tmp_path / "gpu")]
    assert "python3" not in " ".join(s.text for s in new.steps[:6])
    assert [s.connector for s in new.steps] == [s.connector for s in chain.steps]
    # still a self-kill: the replayed chain's own command line contains the token
    r = Recipe.from_shell(out)
    assert ("cleanup-self-kill", 1) in _ids(lint(r))
    assert token in launching_command_line(out)


def test_cli_lint_json_and_text():
    runner = CliRunner()
    res = runner.invoke(cli, ["lint", "--shell", SEED, "--json"])
    assert res.exit_code == 1, res.output  # the seed chain has errors
    data = json.loads(res.output)
    assert data["name"] == "sglang_eagle3_cg_2step"
    assert {"cleanup-self-kill", "broad-kill", "gpu-collateral-kill", "and-after-pkill"} <= {
        f["id"] for f in data["findings"]
    }
    res = runner.invoke(cli, ["lint", "--shell", SEED])
    assert res.exit_code == 1 and "step 1 [error] cleanup-self-kill" in res.output
    res = runner.invoke(cli, ["lint", "--rules", "--json"])
    assert "gpu-collateral-kill" in res.output


def test_S10_disk_full_checked_on_the_host_with_the_recipes_threshold(tmp_path):
    from forensics.hostprobe import free_space

    log = tmp_path / "not" / "yet" / "x.log"  # the nearest existing parent is measured
    ((_, mount, free),) = free_space(LocalHost(), [str(log.parent)])
    assert free > 0 and str(tmp_path).startswith(mount)
    chain = f"setsid nohup python3 -m sglang.launch_server </dev/null >>{log} 2>&1 &"
    recipe = Recipe.from_shell(chain)
    assert "disk-full" not in [f.id for f in lint(recipe, host=LocalHost())]
    # a threshold above what this filesystem has: the finding, naming the mount and the numbers
    over = recipe.replace(min_free_mb=free * 4 + 1)
    f = next(f for f in lint(over, host=LocalHost()) if f.id == "disk-full")
    assert f.severity == "error" and f"{mount} (holding" in f.explanation
    assert "MiB free" in f.explanation and "No space left on device" in f.explanation
    assert "min_free_mb" in f.alternative and "MOUNT" not in f.alternative
    assert "disk-full" not in [f.id for f in lint(over.replace(min_free_mb=0), host=LocalHost())]
    assert "disk-full" not in [f.id for f in lint(over)]  # no host: not checked


def test_cli_lint_says_which_checks_need_a_host(tmp_path):
    """Without --host the host checks were skipped without a word."""
    chain = f"nohup python3 -m sglang.launch_server > {tmp_path}/nope/x.log 2>&1 &"
    runner = CliRunner()
    res = runner.invoke(cli, ["lint", "--shell", chain, "--json"])
    data = json.loads(res.output)
    assert data["host"] is None
    assert data["skipped"] == ["log-dir-missing", "disk-full", "port-in-use"]
    res = runner.invoke(cli, ["lint", "--shell", chain])
    assert "note: not checked without a host: log-dir-missing" in res.output
    res = runner.invoke(cli, ["lint", "--shell", chain, "--host", "local", "--json"])
    data = json.loads(res.output)
    assert data["host"] == "local" and data["skipped"] == []
    assert "log-dir-missing" in {f["id"] for f in data["findings"]}
