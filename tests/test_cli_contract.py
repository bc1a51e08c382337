"""Issue 14, class "The CLI contract a new user hits": what a first session trips over.

Each test names the case it was: `show NAME` matching two runs, remedies that do not fit the
log's values, config differences for a host failure, float32 noise in JSON, `--json` keys
that differ from `--help`, a dead port stored as a benchmark, internal ids in messages, and
two numbering schemes for the launches of one file.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct

import pytest
from click.testing import CliRunner

from forensics.cli import cli, main
from forensics.cli_common import json_ready
from tests.conftest import FIXTURES


def _run(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out, err = capsys.readouterr()
    return (exc.value.code or 0), out, err


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two folders holding a log of the same name, and a file with two launches."""
    tmp_path = tmp_path_factory.mktemp("contract")
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        shutil.copy(FIXTURES / "sglang_baseline.log", tmp_path / d / "sglang_baseline.log")
    for f in ("sglang_two_launches.log", "sglang_fail_load_kv_oom.log"):
        shutil.copy(FIXTURES / f, tmp_path / "a" / f)
    shutil.copy(FIXTURES / "sglang_fail_capture_disk_full.log", tmp_path / "a")
    shutil.copy(FIXTURES / "sglang_eagle3_cg_5dt.log", tmp_path / "a")
    root = tmp_path / "store"
    res = CliRunner().invoke(cli, ["--store", str(root), "ingest", "-r", str(tmp_path)])
    assert res.exit_code == 0, res.output
    return root


def test_show_of_a_name_two_runs_share_lists_them_exit_2(store, capsys):
    code, out, err = _run(capsys, "--store", str(store), "show", "sglang_baseline")
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: sglang_baseline: matches 2 runs: sglang_baseline (")
    assert "/a/sglang_baseline.log" in line and "/b/sglang_baseline.log" in line
    # a run id picks one
    runs = json.loads(CliRunner().invoke(cli, ["--store", str(store), "runs", "--json"]).output)
    rid = next(r["run_id"] for r in runs if r["path"].endswith("/b/sglang_baseline.log"))
    code, out, _ = _run(capsys, "--store", str(store), "show", rid, "--json")
    assert code == 0 and json.loads(out)["run_id"] == rid


def test_remedies_fit_the_logs_own_values(store):
    """The log says mem_fraction_static=0.95: "raise --mem-fraction-static (e.g. 0.95)" was
    suggested anyway."""
    res = CliRunner().invoke(
        cli, ["--store", str(store), "diagnose", "sglang_fail_load_kv_oom", "--json"]
    )
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert rep["signature"] == "kv_pool_oom" and rep["config"]["mem_fraction"] == 0.95
    steps = " | ".join(rep["next_steps"])
    assert "raise --mem-fraction-static" not in steps
    assert "--tp-size" in steps  # what still fits


def test_disk_full_lists_no_configuration_differences(store):
    res = CliRunner().invoke(
        cli, ["--store", str(store), "diagnose", "sglang_fail_capture_disk_full", "--json"]
    )
    (rep,) = json.loads(res.output)
    assert rep["signature"] == "disk_full"
    assert rep["comparison"]["differences"] == []
    assert rep["comparison"]["differs_from_all_that_worked"] == []
    assert not any("differs in" in s for s in rep["next_steps"])
    if rep["comparison"]["closest"]:  # the closest run is named, none of its values
        assert "=" not in rep["comparison"]["text"].split("(its configuration")[0]


def test_config_differences_list_only_what_can_explain_the_cause(store):
    """kv_pool_oom: memory, parallelism and the models explain it; speculative settings do
    not (Signature.explaining)."""
    from forensics import signatures as sigs
    from forensics.diagnose import CONFIG_KEYS

    keys = sigs.BY_ID["kv_pool_oom"].explaining(CONFIG_KEYS)
    assert "mem_fraction" in keys and "topk" not in keys and "num_steps" not in keys
    assert sigs.BY_ID["disk_full"].explaining(CONFIG_KEYS) == []
    assert sigs.BY_ID["capture_failed"].explaining(CONFIG_KEYS) == CONFIG_KEYS
    res = CliRunner().invoke(
        cli, ["--store", str(store), "diagnose", "sglang_fail_load_kv_oom", "--json"]
    )
    (rep,) = json.loads(res.output)
    cmp = rep["comparison"]
    listed = {d["key"] for d in cmp["differences"] + cmp["differs_from_all_that_worked"]}
    assert listed <= set(keys), listed


def test_json_floats_carry_no_float32_noise(store):
    f32 = struct.unpack("f", struct.pack("f", 2.55))[0]
    assert json_ready({"a": [f32, 2.550000015894572, 1733051264.5, 90.0]}) == {
        "a": [2.55, 2.55, 1733051264.5, 90.0]
    }
    assert json_ready(float("nan")) is None  # JSON has no NaN
    for args in (["runs", "--json"], ["show", "sglang_eagle3_cg_5dt", "--json"]):
        out = CliRunner().invoke(cli, ["--store", str(store), *args]).output
        noisy = re.findall(r"\d+\.\d{9,}", out)
        assert noisy == [], (args, noisy[:5])


@pytest.mark.parametrize("command", ["plot", "report"])
def test_json_keys_are_what_help_promises(store, tmp_path, command):
    runner = CliRunner()
    help_text = runner.invoke(cli, [command, "--help"]).output
    promised = re.search(r"Print \{([^}]*)\}", " ".join(help_text.split())).group(1)
    keys = {k.strip() for k in promised.split(",")}
    args = ["plot", "trend", "-o", str(tmp_path / "t.png")] if command == "plot" else []
    args = args or ["report", "-o", str(tmp_path / "r.html")]
    res = runner.invoke(cli, ["--store", str(store), *args, "--json"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.output)) == keys


def test_bench_against_a_dead_port_stores_nothing(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing listens
    store = tmp_path / "st"
    res = CliRunner().invoke(
        cli, ["--store", str(store), "bench", f"http://127.0.0.1:{port}", "--num-prompts", "2"]
    )
    # issue 14 seventh round (CLI contract): a server that never answered is exit 5 (remote
    # failure), one Error: line and no empty table; it was exit 4 "stopped answering"
    assert res.exit_code == 5, res.output
    assert "never answered" in res.output and "nothing stored" in res.output
    assert "TTFT" not in res.output
    from forensics.store import Store

    assert Store.open(store).table("bench").is_empty()


def test_no_internal_case_ids_in_what_users_read():
    """ "(S16)" and the like are the bad-inputs catalog's ids, not words a user knows."""
    from forensics import signatures
    from forensics.lint import RULES, lint
    from tests.test_shell import SEED

    texts = [t for r in RULES for t in (r.detects, r.why, r.alternative)]
    texts += [f.explanation for f in lint(SEED)]
    texts += [t for e in signatures.CATALOG for t in (e["explanation"], *e["remedies"])]
    texts += [_help_text(path) for path in _command_paths(cli)]  # every --help (round 3)
    ids = re.compile(r"\b[SHCP]\d{2}\b")
    assert [t for t in texts if ids.search(t)] == []


def _command_paths(group, prefix=()):
    import click

    yield prefix
    for name, sub in getattr(group, "commands", {}).items():
        if isinstance(sub, click.Group):
            yield from _command_paths(sub, (*prefix, name))
        else:
            yield (*prefix, name)


def _help_text(path) -> str:
    return CliRunner().invoke(cli, [*path, "--help"]).output


def test_launches_of_one_file_are_numbered_from_1_everywhere(store):
    runs = json.loads(CliRunner().invoke(cli, ["--store", str(store), "runs", "--json"]).output)
    names = sorted(r["name"] for r in runs if "two_launches" in r["name"])
    assert names == ["sglang_two_launches#1", "sglang_two_launches#2"]
    out = CliRunner().invoke(cli, ["classify", str(FIXTURES / "sglang_two_launches.log")]).output
    assert "sglang_two_launches.log#1:" in out and "sglang_two_launches.log#2:" in out
    assert "#0" not in out
