"""`make demo` end to end (fast mode): the integration test of the whole toolkit."""

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT


# a hang guard, not a timing assertion: the whole demo (five launches, benchmarks, the sweep act)
# takes ~3.5 min on a busy 2-core machine, past the suite's default 300 s per test
@pytest.mark.timeout(600)
def test_demo_tells_the_seed_story_and_leaves_nothing_running(tmp_path):
    out = tmp_path / "demo-out"
    env = {
        **os.environ,
        "FORENSICS_DEMO_OUT": str(out),
        "FORENSICS_DEMO_FAST": "1",
        "COLUMNS": "200",
    }
    env.pop("FORENSICS_HOME", None)
    p = subprocess.run(
        [sys.executable, "-m", "forensics.demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=560,
    )
    text = p.stdout + p.stderr
    assert p.returncode == 0, text[-4000:]
    assert "Traceback" not in text
    # 1. five launches, benchmarked; 2. the chain left no log
    for name in (
        "sglang_baseline",
        "sglang_eagle3_nocg_16dt",
        "sglang_eagle3_nocg_16dt_other",
        "sglang_eagle3_cg_16dt",
        "sglang_eagle3_cg_5dt",
    ):
        assert (out / "eagle3" / f"{name}.log").exists(), name
    assert not (out / "eagle3" / "sglang_eagle3_cg_2step.log").exists()
    assert "No such file or directory" in text
    # 3. the journal proves the self-kill
    assert "cause: cleanup-self-kill" in text
    assert "killed the launching shell" in text
    # the table, the advisor, the plot and the report
    store_env = {**env, "FORENSICS_HOME": str(out / "store")}
    runs = json.loads(
        subprocess.run(
            [sys.executable, "-m", "forensics", "runs", "--json"],
            cwd=out,
            env=store_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    by_name = {r["name"]: r for r in runs}
    assert set(by_name) >= {"sglang_baseline", "sglang_eagle3_cg_5dt"}
    base = by_name["sglang_baseline"]["bench_tok_s"]
    # one-sided: the model gives ~90 tok/s and a busy machine only slows the stream (61 tok/s
    # was seen with a load of 22 on 2 cores), so a lower bound would be a timing assertion
    assert base is not None and 0 < base < 110
    # speculation with CUDA graphs beats speculation without, as in the seed table
    assert (
        by_name["sglang_eagle3_cg_16dt"]["bench_tok_s"]
        > by_name["sglang_eagle3_nocg_16dt"]["bench_tok_s"]
    )
    assert "Verdict:" in text
    # 6. the sweep act (fast mode: its plan)
    assert "sweep sim-mix: 7 launches planned" in text
    assert "skip: num_draft_tokens 8 needs 7 candidates" in text
    assert (out / "trend.png").stat().st_size > 10_000
    html = (out / "report.html").read_text()
    assert "sglang_eagle3_cg_5dt" in html
    # 4. nothing left running: no server process group it launched, no sshd of this demo
    launches = json.loads(
        subprocess.run(
            [sys.executable, "-m", "forensics", "launch", "--list", "--json"],
            cwd=out,
            env=store_env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert len({la["name"] for la in launches}) >= 6  # five launches + the relaunch
    for la in launches:
        if la.get("pgid"):
            try:
                os.killpg(la["pgid"], 0)
                alive = True
            except ProcessLookupError:
                alive = False
            assert not alive, la
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(out) not in ps
