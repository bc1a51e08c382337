"""`forensics sweep --executor slurm` through a real Slurm (tests/plugins/slurm.py).

sim-mix plus one config whose job is given too little memory: every config ends as it does
locally, and the starved job is diagnosed from Slurm (its state and exit code from
`scontrol show job`, slurmstepd's line in the job's own output file: there is no slurmdbd,
so no sacct); a job cancelled by Slurm's time limit is job-timeout (about 50 s, mostly waiting
for slurmctld's 30-second limit check).
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


def test_kill_9_of_the_controller_then_resume_follows_the_running_job(slurm_env, tmp_path):
    """The job outlives a kill -9 of `forensics sweep`: --resume follows that job (no second
    submission) and takes its result."""
    import signal
    import subprocess
    import sys
    import time

    from forensics.sweep.journal import Journal, unit_state

    path = tmp_path / "one.toml"
    path.write_text(
        "\n".join(
            [
                'name = "one"',
                "[base]",
                'server = ["python3", "-m", "sglang.launch_server", "--model-path", "sim://m"]',
                "stop_grace_s = 5",
                "min_free_mb = 0",
                "[bench]",
                "num_prompts = 2",
                "max_new_tokens = 200",
                "[sim]",
                "speed = 60",
                "[slurm]",
                f'partition = "{slurm_env.partition}"',
                'mem = "1G"',
                "",
            ]
        )
    )
    cmd = [sys.executable, "-m", "forensics", "sweep", str(path), "--executor", "slurm"]
    p = subprocess.Popen(
        [*cmd, "--poll", "0.5"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    store = Store.open()
    key = "sglang_baseline#1"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            st = unit_state(Journal(store, "one").events()).get(key, {})
            if st.get("status") == "submitted":
                break
            time.sleep(0.2)
        job = st["job"]
        while time.monotonic() < deadline:  # the job runs (its launch is under way)
            if "RUNNING" in slurm_env.run("squeue", "-h", "-j", job, "-o", "%T").stdout:
                break
            time.sleep(0.2)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
    r = subprocess.run([*cmd, "--poll", "0.5", "--resume"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "its Slurm job still runs: following it" in r.stderr or "result collected" in r.stderr
    evs = Journal(store, "one").events()
    assert [e["data"]["job_id"] for e in evs if e["event"] == "submit"] == [job]
    res = unit_state(evs)[key]["result"]
    assert (res["outcome"], res["job_id"]) == ("ok", job) and res["tok_s"] > 10


def test_a_job_past_its_time_limit_is_diagnosed_as_timeout(slurm_env, tmp_path):
    """Slurm's own time limit, for real: the job's server hangs at load (its health deadline
    far away), and once the job runs its end time is moved to now (``scontrol update
    EndTime``, as an admin would; Slurm's smallest ``--time`` is a minute). slurmctld's time
    check (every 30 s) cancels it with state TIMEOUT and slurmstepd's "DUE TO TIME LIMIT"
    line: the sweep says job-timeout with the fix, and nothing of the job is left."""
    import subprocess
    import sys
    import time

    from forensics.sweep.journal import Journal, unit_state

    path = tmp_path / "late.toml"
    path.write_text(
        "\n".join(
            [
                'name = "late"',
                "baseline = false",
                "[base]",
                'server = ["python3", "-m", "sglang.launch_server", "--model-path", "sim://m",',
                '          "--speculative-algorithm", "EAGLE3",',
                '          "--speculative-draft-model-path", "/d/4"]',
                "health_deadline_s = 240",
                "stop_grace_s = 5",
                "min_free_mb = 0",
                "[[configs]]",
                "speculative_num_steps = 3",
                "speculative_eagle_topk = 1",
                "[bench]",
                "num_prompts = 2",
                "[sim]",
                "speed = 60",
                "[[sim.inject]]",
                "when = { speculative_num_steps = 3 }",
                'flags = ["--sim-hang", "load"]',
                "[slurm]",
                f'partition = "{slurm_env.partition}"',
                'mem = "1G"',
                'time = "10"',
                "",
            ]
        )
    )
    cmd = [sys.executable, "-m", "forensics", "sweep", str(path), "--executor", "slurm"]
    p = subprocess.Popen(
        [*cmd, "--poll", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    store = Store.open()
    key = "sglang_eagle3_cg_3step_topk1_4dt#1"
    try:
        deadline = time.monotonic() + 60
        job = None
        while time.monotonic() < deadline and job is None:
            job = unit_state(Journal(store, "late").events()).get(key, {}).get("job")
            time.sleep(0.3)
        assert job, "the job was never submitted"
        while time.monotonic() < deadline:
            if "RUNNING" in slurm_env.run("squeue", "-h", "-j", job, "-o", "%T").stdout:
                break
            time.sleep(0.3)
        info = slurm_env.run("scontrol", "show", "job", "-o", job).stdout
        assert "TimeLimit=00:10:00" in info  # the sweep file's time went to sbatch
        now = time.strftime("%Y-%m-%dT%H:%M:%S")
        slurm_env.run("scontrol", "update", f"JobId={job}", f"EndTime={now}")
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-2000:] + err[-2000:] + slurm_env.logs()
    (c,) = json.loads(out[out.index("{") :])["configs"]
    assert (c["outcome"], c["phase"], c["cause_id"]) == ("failed", "job", "job-timeout"), c
    res = unit_state(Journal(store, "late").events())[key]["result"]
    assert (res["job_state"], c["job_id"]) == ("TIMEOUT", job)
    assert "Slurm cancelled the job at its time limit" in c["cause"]
    assert "raise [slurm] time" in c["cause"]
    assert no_group_left(store) == []
    assert slurm_env.run("squeue", "-h", "-o", "%i").stdout.strip() == ""
