"""`forensics sweep --executor slurm` through a real Slurm (tests/plugins/slurm.py).

sim-mix plus one config whose job is given too little memory: every config ends as it does
locally, and the starved job is diagnosed from Slurm (its state and exit code from
`scontrol show job`, slurmstepd's line in the job's own output file: there is no slurmdbd,
so no sacct).
"""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from forensics.cli import cli
from forensics.store import Store
from tests.test_sweep_sim import EXPECTED, SIM_MIX, no_group_left

OOM = "sglang_eagle3_cg_2step_topk1_3dt"


def test_sim_mix_through_slurm_with_a_job_over_its_memory(slurm_env, tmp_path):
    text = SIM_MIX.read_text().replace('name = "sim-mix"', 'name = "sim-mix-slurm"')
    text += "\n".join(
        [
            "",
            "[[configs]]",
            "speculative_num_steps = 2",
            "speculative_eagle_topk = 1",
            "speculative_num_draft_tokens = 3",
            'slurm_mem = "30M"',
            "[slurm]",
            f'partition = "{slurm_env.partition}"',
            'mem = "1G"',
            "max_parallel = 2",
            "",
        ]
    )
    path = tmp_path / "sim-mix-slurm.toml"
    path.write_text(text)
    r = CliRunner().invoke(
        cli, ["sweep", str(path), "--executor", "slurm", "--poll", "0.5", "--json"]
    )
    assert r.exit_code == 0, r.output[-3000:] + slurm_env.logs()
    data = json.loads(r.output[r.output.index("{") :])
    got = {
        c["config_id"]: (c["outcome"], c["phase"], c["cause_id"], c["signature"])
        for c in data["configs"]
    }
    want = {**EXPECTED, OOM: ("failed", "job", "job-oom", None)}
    assert got == want, json.dumps(data["configs"], indent=1)[-4000:]
    by = {c["config_id"]: c for c in data["configs"]}
    assert "exceeding its memory limit" in by[OOM]["cause"]
    assert "MiB used >" in by[OOM]["cause"]
    jobs = {c["job_id"] for c in data["configs"] if c["outcome"] in ("ok", "failed")}
    assert len(jobs) == 7 and None not in jobs
    # every job is done and nothing it started is left
    q = slurm_env.run("squeue", "-h", "-o", "%i %T")
    assert q.stdout.strip() == ""
    assert no_group_left(Store.open()) == []
    assert "fx-sim-mix-slurm" not in os.popen("ps -eo args").read()
