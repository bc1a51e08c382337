"""`forensics sweep`: the plan, SGLang's constraints, the journal and resume (pure logic).

The real sweeps (simulated servers, locally and through Slurm) are in test_sweep_sim.py and
test_sweep_slurm.py. Here the executor's per-unit work is replaced by a recorder so that the
loop, the journal and --resume can be killed at every journal-write boundary cheaply.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import sweep as sw
from forensics.cli import cli
from forensics.errors import UsageError
from forensics.store import Store
from forensics.sweep import executor_local, runner
from forensics.sweep.constraints import CONSTRAINTS, check
from forensics.sweep.journal import Journal, unit_state

ROOT = Path(__file__).resolve().parent.parent
SIM_MIX = ROOT / "fixtures" / "sweeps" / "sim-mix.toml"

SMALL = """
name = "small"
[base]
server = ["python3", "-m", "sglang.launch_server", "--model-path", "sim://m",
          "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d/4"]
[grid]
speculative_num_steps = [2, 3]
speculative_eagle_topk = [1, 4]
[zip]
speculative_num_draft_tokens = [4, 8]
cuda_graph = [true, false]
[run]
repeats = 2
prune = false
"""


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


# ---------------------------------------------------------------------- the plan


def test_sim_mix_plan_has_one_of_each_ending():
    s = sw.load(SIM_MIX)
    assert s.name == "sim-mix"
    assert [u.config_id for u in s.units] == [
        "sglang_baseline",
        "sglang_eagle3_cg_3step_topk1_4dt",
        "sglang_eagle3_cg_5step_topk4_16dt",
        "sglang_eagle3_cg_4step_topk1_5dt",
        "sglang_eagle3_cg_1step_topk2_8dt",
        "sglang_eagle3_cg_2step_topk4_5dt",
        "sglang_eagle3_cg_3step_topk2_4dt",
    ]
    base = s.units[0]
    assert base.baseline and not any(a.startswith("--speculative") for a in base.argv)
    skipped = [u for u in s.units if u.skip]
    assert [(u.config_id, u.skip) for u in skipped] == [
        ("sglang_eagle3_cg_1step_topk2_8dt", "draft-tokens-exceed-tree")
    ]
    assert "7 candidates" in skipped[0].skip_reason and "offer 2" in skipped[0].skip_reason
    inject = {u.config_id: u.inject for u in s.units if u.inject}
    assert inject["sglang_eagle3_cg_5step_topk4_16dt"]["fail"] == "capture-oom"
    assert inject["sglang_eagle3_cg_4step_topk1_5dt"]["flags"] == ["--sim-hang", "load"]


def test_grid_zip_repeats_and_sglang_adjustment(tmp_path):
    s = sw.load(write(tmp_path, SMALL))
    ids = sorted({u.config_id for u in s.units})
    # 2 steps x 2 topk x 2 zipped rows, plus the baseline
    assert len(ids) == 9
    runs = [u for u in s.units if not u.skip]
    # topk 1 makes SGLang set ndt = steps + 1 (its warning is the unit's note)
    t1 = [u for u in s.units if u.config.get("speculative_eagle_topk") == 1]
    assert all(
        u.config["speculative_num_draft_tokens"] == u.config["speculative_num_steps"] + 1
        for u in t1
    )
    noted = {u.config_id for u in t1 if any(n.startswith("topk1-sets-") for n in u.notes)}
    assert len(noted) == 3  # all but steps 3 / ndt 4, which already is steps + 1
    assert all(len([r for r in runs if r.config_id == c]) == 2 for c in {r.config_id for r in runs})
    nocg = [u for u in s.units if u.config.get("cuda_graph") is False]
    assert nocg and all("--disable-cuda-graph" in u.argv for u in nocg)
    assert all(u.run_name.endswith("_r2") for u in s.units if u.repeat == 2)


def test_duplicate_after_adjustment_is_skipped(tmp_path):
    p = write(
        tmp_path,
        """
        baseline = false
        [base]
        server = ["python3", "-m", "sglang.launch_server", "--model-path", "m",
                  "--speculative-algorithm", "EAGLE3"]
        [grid]
        speculative_num_steps = [3]
        speculative_eagle_topk = [1]
        speculative_num_draft_tokens = [4, 6]
        """,
    )
    s = sw.load(p)
    assert [(u.config["speculative_num_draft_tokens"], u.skip) for u in s.units] == [
        (4, None),
        (4, "duplicate"),
    ]
    assert "sglang_eagle3_cg_3step_topk1_4dt" in s.units[1].skip_reason


@pytest.mark.parametrize(
    ("cfg", "rule"),
    [
        ({"speculative_eagle_topk": 4}, "topk-without-steps"),
        (
            {
                "speculative_num_steps": 2,
                "speculative_eagle_topk": 2,
                "speculative_num_draft_tokens": 8,
            },
            "draft-tokens-exceed-tree",
        ),
        (
            {
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 1,
                "speculative_num_draft_tokens": 8,
            },
            "topk1-sets-draft-tokens",
        ),
        (
            {
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 4,
                "speculative_use_rejection_sampling": True,
            },
            "rejection-sampling-needs-topk1",
        ),
        (
            {
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 4,
                "attention_backend": "trtllm_mha",
            },
            "trtllm-mha-needs-topk1",
        ),
        (
            {
                "speculative_num_steps": 3,
                "speculative_eagle_topk": 4,
                "page_size": 16,
                "attention_backend": "flashmla",
            },
            "paged-tree-backend",
        ),
        (
            {"speculative_num_steps": 3, "speculative_eagle_topk": 4, "drafter_topk1": True},
            "draft-model-needs-topk1",
        ),
    ],
)
def test_each_constraint_fires(cfg, rule):
    _, fired = check({"speculative_algorithm": "EAGLE3", **cfg})
    assert [r.id for r, _ in fired][-1] == rule
    assert rule in {r.id for r in CONSTRAINTS}


def test_valid_configs_pass_the_table():
    for steps, topk, ndt in ((2, 4, 5), (5, 4, 16), (3, 2, 7), (1, 4, 5)):
        _, fired = check(
            {
                "speculative_algorithm": "EAGLE3",
                "speculative_num_steps": steps,
                "speculative_eagle_topk": topk,
                "speculative_num_draft_tokens": ndt,
            }
        )
        assert fired == [], (steps, topk, ndt)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[base]\nserver = 'x'\n", "[base] server must be the server command"),
        ("[base]\nserver = ['x', '--port', '1']\n[grid]\na = [1]\n", "sets --port"),
        ("[base]\nserver = ['x']\n[grid]\na = []\n", "[grid] a must be a non-empty list"),
        ("[base]\nserver = ['x']\n[zip]\na = [1, 2]\nb = [1]\n", "different lengths"),
        (
            "[base]\nserver = ['x']\n[bench]\nnum_promts = 2\n",
            "unknown key 'num_promts' in [bench]",
        ),
        ("[base]\nserver = ['x']\n[run]\nrepeats = 0\n", "[run] repeats must be an integer"),
        ("nonsense = = 1\n", "not valid TOML"),
        ("[base]\nserver = ['x']\n[grid]\na = [1]\n[whatever]\n", "unknown key 'whatever'"),
    ],
)
def test_bad_sweep_files_give_one_line_exit_2(tmp_path, text, needle):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    r = CliRunner().invoke(cli, ["sweep", str(p), "--dry-run"])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert line.startswith("Error: ") and needle in line and "\n" not in line
    assert "Traceback" not in r.output


def test_cli_dry_run_json_and_missing_file(tmp_path):
    r = CliRunner().invoke(cli, ["sweep", str(SIM_MIX), "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["sweep"] == "sim-mix" and len(data["units"]) == 7
    r = CliRunner().invoke(cli, ["sweep", str(tmp_path / "none.toml")])
    assert r.exit_code == 3 and "no such sweep file" in r.output
    r = CliRunner().invoke(cli, ["sweep", "status", "nope"])
    assert r.exit_code == 3 and "no sweep named 'nope'" in r.output


# ---------------------------------------------------------------------- resume


class Killed(BaseException):
    """Stands for a kill -9 of forensics: nothing after it runs (not even `finally` writes,
    since the hook raises before or right after a journal write commits)."""


def _fake_results(calls: list[str]):
    def fake_run_unit(store, sweep, unit, *, progress=None):
        calls.append(unit.key)
        out = executor_local.base_result(unit)
        ok = "16dt" not in unit.config_id
        out.update(
            outcome="ok" if ok else "failed",
            phase="ok" if ok else "capture",
            tok_s=90.0 if unit.baseline else 80.0 + unit.repeat,
            run=unit.run_name,
        )
        return out

    return fake_run_unit


def _sweep_file(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        """
        name = "resume"
        [base]
        server = ["python3", "-m", "sglang.launch_server", "--model-path", "sim://m",
                  "--speculative-algorithm", "EAGLE3"]
        [[configs]]
        speculative_num_steps = 3
        speculative_eagle_topk = 1
        speculative_num_draft_tokens = 4
        [[configs]]
        speculative_num_steps = 5
        speculative_eagle_topk = 4
        speculative_num_draft_tokens = 16
        [[configs]]
        speculative_num_steps = 1
        speculative_eagle_topk = 2
        speculative_num_draft_tokens = 8
        [run]
        repeats = 2
        prune = false
        """,
    )


def _writes_of_one_run(tmp_path: Path, monkeypatch) -> int:
    count = []
    monkeypatch.setattr(executor_local, "run_unit", _fake_results([]))
    store = Store.open(tmp_path / "count-store")
    sw.run(store, sw.load(_sweep_file(tmp_path)), hook=lambda e, when: count.append(when))
    return count.count("before")


def test_resume_after_a_kill_at_every_journal_boundary(tmp_path, monkeypatch):
    """Killed just before or just after each journal write, then resumed: no unit that had
    finished runs again, every unit ends finished exactly once."""
    n = _writes_of_one_run(tmp_path, monkeypatch)
    assert n >= 10
    path = _sweep_file(tmp_path)
    expected = {u.key for u in sw.load(path).units}
    for k in range(n):
        for when in ("before", "after"):
            store = Store.open(tmp_path / f"store-{k}-{when}")
            first: list[str] = []
            monkeypatch.setattr(executor_local, "run_unit", _fake_results(first))
            seen: list[str] = []

            def hook(event, phase, k=k, when=when, seen=seen):
                if phase == when:
                    seen.append(event)
                    if len(seen) == k + 1:
                        raise Killed

            with pytest.raises(Killed):
                sw.run(store, sw.load(path), hook=hook)
            done = _finished(store)
            second: list[str] = []
            monkeypatch.setattr(executor_local, "run_unit", _fake_results(second))
            resumed = sw.run(store, sw.load(path), resume=True)
            assert not set(second) & done, (k, when)
            assert len(second) == len(set(second))
            assert {c["key"] for c in resumed["configs"] if c["outcome"]} == expected
            assert resumed["state"] == "done"
            finishes = [
                e["key"] for e in Journal(store, "resume").events() if e["event"] == "finish"
            ]
            assert sorted(finishes) == sorted(expected), (k, when)


def _finished(store: Store) -> set[str]:
    st = unit_state(Journal(store, "resume").events())
    return {k for k, s in st.items() if s["status"] == "finished"}


def test_resume_needs_the_flag_and_keeps_results(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(executor_local, "run_unit", _fake_results(calls))
    path = _sweep_file(tmp_path)
    store = Store.open(tmp_path / "st")
    first = sw.run(store, sw.load(path))
    n = len(calls)
    with pytest.raises(UsageError) as exc:
        sw.run(store, sw.load(path))
    assert "--resume" in str(exc.value.hint)
    again = sw.run(store, sw.load(path), resume=True)
    assert len(calls) == n  # nothing ran again
    assert [c["tok_s"] for c in again["configs"]] == [c["tok_s"] for c in first["configs"]]
    b = again["best"]
    assert b["config_id"] == "sglang_eagle3_cg_3step_topk1_4dt"
    assert (b["repeats"], b["tok_s_min"], b["tok_s_max"]) == (2, 81.0, 82.0)
    assert b["margin"] == pytest.approx(81.5 / 90.0 - 1)
    outcomes = {c["key"]: c["outcome"] for c in again["configs"]}
    assert outcomes["sglang_eagle3_cg_1step_topk2_8dt#1"] == "skipped"
    assert outcomes["sglang_eagle3_cg_5step_topk4_16dt#2"] == "failed"


def test_budget_leaves_configs_for_resume(tmp_path, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(executor_local, "run_unit", _fake_results(calls))
    path = _sweep_file(tmp_path)
    path.write_text(path.read_text().replace("prune = false", "prune = false\nbudget_s = 0.000001"))
    store = Store.open(tmp_path / "st")
    res = sw.run(store, sw.load(path))
    assert calls == []  # the budget was spent before the first unit
    assert res["counts"]["pending"] == 6 and res["counts"]["skipped"] == 1
    path.write_text(path.read_text().replace("budget_s = 0.000001", ""))
    res = sw.run(store, sw.load(path), resume=True)
    assert res["counts"]["pending"] == 0 and len(calls) == 6


def test_prune_uses_the_measured_round_cost(tmp_path, monkeypatch):
    """A config whose round cannot be cheaper than a measured family's, and whose best
    possible accept length is below what that round needs, is pruned with the reason."""
    from forensics import advise

    path = write(
        tmp_path,
        """
        name = "prune"
        [base]
        server = ["python3", "-m", "sglang.launch_server", "--model-path", "m",
                  "--speculative-algorithm", "EAGLE3"]
        [[configs]]
        speculative_num_steps = 2
        speculative_eagle_topk = 4
        speculative_num_draft_tokens = 5
        cuda_graph = false
        [[configs]]
        speculative_num_steps = 3
        speculative_eagle_topk = 4
        speculative_num_draft_tokens = 5
        cuda_graph = false
        [[configs]]
        speculative_num_steps = 3
        speculative_eagle_topk = 4
        speculative_num_draft_tokens = 6
        cuda_graph = false
        [[configs]]
        speculative_num_steps = 3
        speculative_eagle_topk = 1
        speculative_num_draft_tokens = 4
        [run]
        prune_after = 2
        """,
    )
    calls: list[str] = []
    monkeypatch.setattr(executor_local, "run_unit", _fake_results(calls))
    fam = advise.FamilyEstimate(
        family="nocg/5dt/topk4/2step", cuda_graph=False, num_draft_tokens=5, num_steps=2,
        topk=4, runs=["x"], n_runs=1, decode_lines=9, round_ms=60.0, round_lo=59.0,
        round_hi=61.0, spread_source="lines", tok_s_best=40.0, accept_len=2.4, drafter=None,
        accept_needed=60.0 / (1000.0 / 90.0),
    )  # fmt: skip
    monkeypatch.setattr(advise, "estimate_families", lambda points, baseline: [fam])
    res = sw.run(Store.open(tmp_path / "st"), sw.load(path))
    out = {c["config_id"]: (c["outcome"], c["cause"]) for c in res["configs"]}
    # baseline + the first two spec configs run; the third (steps 3, ndt 6, no graphs) is
    # bounded by the measured 60 ms round: accept at most 4 < 5.4 needed
    assert out["sglang_eagle3_nocg_3step_topk4_6dt"][0] == "pruned"
    assert "needs accept len ≥ 5.40" in out["sglang_eagle3_nocg_3step_topk4_6dt"][1]
    assert "at most" not in out["sglang_eagle3_nocg_3step_topk4_6dt"][1]
    # CUDA graphs on may be cheaper than the measured no-graphs round: never pruned by it
    assert out["sglang_eagle3_cg_3step_topk1_4dt"][0] == "ok"
    assert "sglang_eagle3_nocg_3step_topk4_6dt#1" not in calls
    r = CliRunner().invoke(cli, ["sweep", str(path), "--dry-run"])
    assert r.exit_code == 0


def test_status_lists_sweeps(tmp_path, monkeypatch):
    monkeypatch.setattr(executor_local, "run_unit", _fake_results([]))
    store = Store.open()
    sw.run(store, sw.load(_sweep_file(tmp_path)))
    r = CliRunner().invoke(cli, ["sweep", "status", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["sweeps"]
    assert [(x["sweep"], x["units"], x["finished"]) for x in rows] == [("resume", 7, 7)]
    r = CliRunner().invoke(cli, ["sweep", "status", "resume", "--json"])
    data = json.loads(r.output)
    keys = {"config", "outcome", "phase", "signature", "cause", "tok_s", "accept_len", "run"}
    assert all(keys <= set(c) for c in data["configs"])
    r = CliRunner().invoke(cli, ["sweep", "status", "resume"])
    assert "best: steps=3 topk=1 ndt=4" in r.output
    assert runner.EXECUTORS == ("local", "slurm")


# ---------------------------------------------------------------------- Slurm job causes


def test_job_causes_from_state_and_output():
    from forensics.sweep.executor_slurm import explain, parse_scontrol

    info = parse_scontrol(
        "JobId=2 JobName=wrap JobState=FAILED Reason=JobLaunchFailure ExitCode=0:9 "
        "RunTime=00:00:03 StartTime=2026-12-01T11:08:21 MinMemoryNode=30M TimeLimit=UNLIMITED"
    )
    out = (
        "slurmstepd-fxnode: error: StepId=2.batch exceeded memory limit (80000000 > 31457280), "
        "being killed\nslurmstepd-fxnode: error: *** JOB 2 ON fxnode CANCELLED AT 2026 ***\n"
    )
    cid, text, fix = explain(info, out, {})
    assert cid == "job-oom" and "(76 MiB used > 30 MiB)" in text and "--mem 30M" in text
    assert "mem" in fix
    timeout = parse_scontrol("JobState=TIMEOUT TimeLimit=00:01:00 StartTime=2026 ExitCode=0:15")
    assert (
        explain(timeout, "*** JOB 3 CANCELLED AT x DUE TO TIME LIMIT ***", {})[0] == "job-timeout"
    )
    pending = parse_scontrol("JobState=CANCELLED Reason=Resources StartTime=Unknown ExitCode=0:0")
    cid, text, _ = explain(pending, "", {})
    assert cid == "job-never-started" and "Resources" in text
    cid, text, _ = explain(parse_scontrol("JobState=FAILED ExitCode=1:0 StartTime=x"), "boom\n", {})
    assert cid == "job-failed" and "boom" in text


def test_without_a_baseline_config_the_summary_has_none_to_compare(tmp_path, monkeypatch):
    """baseline = false and no stored or plain run in the store: no vs_baseline, no margin."""
    monkeypatch.setattr(executor_local, "run_unit", _fake_results([]))
    path = _sweep_file(tmp_path)
    path.write_text("baseline = false\n" + path.read_text())
    res = sw.run(Store.open(tmp_path / "st"), sw.load(path))
    assert res["baseline"] is None and res["best"]["margin"] is None
    assert all(c["vs_baseline"] is None for c in res["configs"])
    assert "best: steps=3 topk=1 ndt=4: 81.5 tok/s" in sw.render(res)
