"""Each unit of a sweep as a Slurm job (``forensics sweep FILE --executor slurm``).

A job runs ``python -m forensics.sweep.job SPEC`` on its node: the same ``run_unit`` as the
local executor (launch, health, bench, stop, ingest into the sweep's store), then writes its
result next to its spec. The store and the job folders must be on a filesystem the node and
this machine share (``[slurm] shared_dir``, default ``$FORENSICS_HOME/sweeps/NAME/jobs``).

The controller submits up to ``max_parallel`` jobs, follows them with ``scontrol show job``
(``sacct`` needs slurmdbd, which many small clusters and the test cluster do not run; a job is
kept by slurmctld for ``MinJobAge`` after it ends), and when a job ends reads its result. A job
that ended without one is diagnosed from its state, its exit code and signal, and the lines
slurmstepd wrote into the job's own output file (``JOB_CAUSES``). A job that is pending says
why (its ``Reason``). Ctrl-C cancels the sweep's own jobs (``scancel`` by job id); ``--resume``
follows jobs still known to Slurm and collects the results of those that finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError, LaunchFailed, UsageError
from forensics.output import write_home_file
from forensics.sweep import executor_local
from forensics.sweep.plan import Sweep, Unit

if TYPE_CHECKING:
    from forensics.store import Store
    from forensics.sweep.runner import Controller

ACTIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
ADOPTED = "adopted"  # recover(): the job still runs; run() follows it
DEFAULT_PARALLEL = 2
DEFAULT_POLL_S = 2.0


@dataclasses.dataclass(frozen=True)
class JobCause:
    """How a job that ended without a result is explained: by its state or its output."""

    id: str
    states: tuple[str, ...]  # scontrol JobState values
    pattern: str | None  # a line slurmstepd writes into the job's output file
    explanation: str  # {state} {exit} {reason} {detail} {mem} {time}
    fix: str


JOB_CAUSES: tuple[JobCause, ...] = (
    JobCause(
        "job-oom",
        ("OUT_OF_MEMORY",),
        r"exceeded memory limit \((?P<used>\d+) > (?P<limit>\d+)\)|Exceeded job memory limit"
        r"|oom-kill event",
        "Slurm killed the job for exceeding its memory limit (--mem {mem}){detail}: state "
        "{state}, exit {exit}",
        "raise [slurm] mem (or this config's slurm_mem)",
    ),
    JobCause(
        "job-timeout",
        ("TIMEOUT",),
        r"DUE TO TIME LIMIT",
        "Slurm cancelled the job at its time limit (--time {time}): state {state}",
        "raise [slurm] time (or this config's slurm_time), or [base] health_deadline_s",
    ),
    JobCause(
        "node-fail",
        ("NODE_FAIL", "BOOT_FAIL"),
        r"DUE TO NODE FAILURE",
        "the job's node failed: state {state}, reason {reason}",
        "resume the sweep (the config runs again); check the node with sinfo -R",
    ),
    JobCause(
        "job-preempted",
        ("PREEMPTED",),
        r"DUE TO PREEMPTION",
        "the job was preempted: state {state}",
        "resume the sweep, or use a partition without preemption",
    ),
    JobCause(
        "job-never-started",
        ("CANCELLED",),
        None,
        "the job was cancelled before it started (it was pending: {reason})",
        "see squeue's reason; resume the sweep when the partition has room",
    ),
    JobCause(
        "job-cancelled",
        ("CANCELLED", "DEADLINE"),
        r"CANCELLED AT",
        "the job was cancelled (state {state}, exit {exit})",
        "resume the sweep to run it again",
    ),
    JobCause(
        "job-failed",
        ("FAILED", "COMPLETED"),
        None,
        "the job ended without a result: state {state}, exit {exit}, reason {reason}{detail}",
        "read the job's output file (below)",
    ),
)


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job -o`` -> {key: value} (values may hold spaces only at the end)."""
    out: dict[str, str] = {}
    for m in re.finditer(r"(\S+?)=(\S*)", text.strip()):
        out.setdefault(m.group(1), m.group(2))
    return out


def explain(info: dict[str, str], output: str, slurm: dict[str, Any]) -> tuple[str, str, str]:
    """(cause id, one-line explanation, fix) for a job that ended without a result."""
    state = info.get("JobState", "UNKNOWN")
    never_started = info.get("StartTime") in (None, "", "Unknown", "None") or (
        info.get("RunTime") == "00:00:00" and state == "CANCELLED"
    )
    for cause in JOB_CAUSES:
        m = re.search(cause.pattern, output) if cause.pattern else None
        if cause.id == "job-never-started" and not (state in cause.states and never_started):
            continue
        if not (m or state in cause.states):
            continue
        detail = ""
        if m and m.groupdict().get("used"):
            detail = f" ({int(m['used']) >> 20} MiB used > {int(m['limit']) >> 20} MiB)"
        elif cause.id == "job-failed":
            tail = [ln for ln in output.strip().splitlines() if ln.strip()][-1:]
            detail = f"; its output ends: {tail[0][:160]}" if tail else ""
        text = cause.explanation.format(
            state=state,
            exit=info.get("ExitCode", "?"),
            reason=info.get("Reason", "?"),
            detail=detail,
            mem=info.get("MinMemoryNode") or slurm.get("mem", "?"),
            time=info.get("TimeLimit") or slurm.get("time", "?"),
        )
        return cause.id, text, cause.fix
    return "job-failed", f"the job ended without a result (state {state})", "read its output"


class SlurmExecutor:
    name = "slurm"

    def __init__(
        self,
        store: Store,
        sweep: Sweep,
        progress,  # noqa: ANN001 - runner.Progress
        *,
        max_parallel: int | None = None,
        poll_s: float | None = None,
    ):
        self.store, self.sweep, self.progress = store, sweep, progress
        cfg = sweep.slurm
        self.max_parallel = int(max_parallel or cfg.get("max_parallel") or DEFAULT_PARALLEL)
        self.poll_s = float(poll_s or cfg.get("poll_s") or DEFAULT_POLL_S)
        self.inflight: dict[str, Unit] = {}
        self.seen: dict[str, tuple[str, str]] = {}
        self.adopted: dict[str, Unit] = {}
        for tool in ("sbatch", "scontrol", "scancel"):
            if not _which(tool):
                raise UsageError(
                    f"--executor slurm: {tool} not found on this machine",
                    hint="run the sweep on a Slurm login node, or --executor local",
                )
        if sweep.host not in (None, "", "local"):
            raise UsageError(
                f"--executor slurm: [base] host = {sweep.host!r}: Slurm picks the node",
                hint="remove host from [base]; the jobs run where Slurm places them",
            )

    # -- folders ---------------------------------------------------------------------
    def jobs_dir(self) -> Path:
        shared = self.sweep.slurm.get("shared_dir")
        if shared:
            return Path(shared).expanduser() / self.sweep.name
        from forensics.hosts import forensics_home

        return (forensics_home() / "sweeps" / self.sweep.name / "jobs").resolve()

    def unit_dir(self, unit: Unit) -> Path:
        return self.jobs_dir() / unit.run_name

    # -- submit / follow -------------------------------------------------------------
    def submit(self, unit: Unit) -> str:
        d = self.unit_dir(unit)
        d.mkdir(parents=True, exist_ok=True)
        for stale in ("result.json", "result.json.tmp"):
            with contextlib.suppress(FileNotFoundError):
                (d / stale).unlink()
        spec = {
            "sweep_file": self.sweep.path,
            "sweep_name": self.sweep.name,
            "key": unit.key,
            "store": str(self.store.root.resolve()),
            "result": str(d / "result.json"),
        }
        write_home_file(d / "spec.json", json.dumps(spec, indent=1), what="the job spec")
        cfg = self.sweep.slurm
        opts = [
            f"--job-name=fx-{self.sweep.name}-{unit.run_name}"[:120],
            f"--output={d}/slurm-%j.out",
            "--ntasks=1",
            f"--cpus-per-task={int(cfg.get('cpus', 1))}",
        ]
        if cfg.get("partition"):
            opts.append(f"--partition={cfg['partition']}")
        if cfg.get("gpus"):
            opts.append(f"--gpus={int(cfg['gpus'])}")
        mem = unit.config.get("slurm_mem") or cfg.get("mem")
        if mem:
            opts.append(f"--mem={mem}")
        tlimit = unit.config.get("slurm_time") or cfg.get("time")
        if tlimit:
            opts.append(f"--time={tlimit}")
        opts += [str(x) for x in cfg.get("extra", [])]
        script = "\n".join(
            [
                "#!/bin/bash",
                *(f"#SBATCH {o}" for o in opts),
                f"export FORENSICS_HOME={shlex.quote(spec['store'])}",
                f"cd {shlex.quote(str(d))}",
                f"exec {shlex.quote(sys.executable)} -m forensics.sweep.job spec.json",
                "",
            ]
        )
        write_home_file(d / "job.sh", script, what="the job script", mode=0o644)
        r = _slurm(["sbatch", "--parsable", str(d / "job.sh")])
        if r.returncode != 0:
            raise LaunchFailed(
                f"{unit.run_name}: sbatch refused the job: {r.stderr.strip()[:300]}",
                hint="check [slurm] partition, gpus, mem and time against sinfo",
            )
        return r.stdout.strip().split(";")[0]

    def job_info(self, job_id: str) -> dict[str, str] | None:
        r = _slurm(["scontrol", "show", "job", "-o", job_id])
        if r.returncode != 0 or "JobState=" not in r.stdout:
            return None  # unknown to slurmctld (aged out after MinJobAge, or never existed)
        return parse_scontrol(r.stdout)

    def collect(self, unit: Unit, job_id: str, info: dict[str, str] | None) -> dict[str, Any]:
        d = self.unit_dir(unit)
        result_path = d / "result.json"
        state = (info or {}).get("JobState", "UNKNOWN")
        job = {
            "job_id": job_id,
            "job_state": state,
            "job_exit": (info or {}).get("ExitCode"),
            "job_node": (info or {}).get("NodeList"),
        }
        if result_path.exists():
            with contextlib.suppress(ValueError, OSError):
                return {**json.loads(result_path.read_text()), **job}
        output = ""
        with contextlib.suppress(OSError):
            output = (d / f"slurm-{job_id}.out").read_text(errors="replace")[-20000:]
        if info is None:
            info = {"JobState": "UNKNOWN", "Reason": "unknown to slurmctld"}
        cid, text, fix = explain(info, output, self.sweep.slurm)
        res = executor_local.base_result(unit) | job
        res.update(
            outcome="failed",
            phase="job",
            cause_id=cid,
            cause=executor_local._one_line(f"{cid}: {text}; try: {fix}"),
        )
        # what the job had started is stopped (its server's own process group), and whatever
        # log it wrote is ingested: the runs table gets the run, the diagnosis its phase
        from forensics import launcher

        with contextlib.suppress(ForensicsError):
            launcher.stop(self.store, unit.run_name, grace_s=5.0)
        recipe = executor_local.recipe_for(self.sweep, unit)
        if recipe.log_path and Path(recipe.log_path).exists():
            executor_local._ingest_and_attach(self.store, self.sweep, recipe, None, res)
        return res

    # -- the executor interface ------------------------------------------------------
    def recover(self, unit: Unit, state: dict[str, Any]) -> Any:
        job_id = state.get("job")
        if not job_id:
            return executor_local_recover(self.store, unit)
        info = self.job_info(str(job_id))
        if info is not None and info.get("JobState") in ACTIVE:
            self.adopted[str(job_id)] = unit
            return ADOPTED
        if info is not None or (self.unit_dir(unit) / "result.json").exists():
            return self.collect(unit, str(job_id), info)
        return executor_local_recover(self.store, unit)

    def cancel(self) -> None:
        ids = list(self.inflight)
        if ids:
            _slurm(["scancel", *ids])

    def run(self, units: list[Unit], ctl: Controller) -> None:
        queue = list(units)
        self.inflight.update(self.adopted)
        while queue or self.inflight:
            while queue and len(self.inflight) < self.max_parallel:
                unit = queue.pop(0)
                verdict = ctl.decision(unit)
                if verdict is not None:
                    from forensics.sweep.runner import _not_run

                    _not_run(ctl, unit, verdict)
                    continue
                try:
                    job_id = self.submit(unit)
                except LaunchFailed as exc:
                    res = executor_local.base_result(unit) | {
                        "outcome": "failed",
                        "phase": "job",
                        "cause_id": "sbatch-refused",
                        "cause": executor_local._one_line(exc),
                    }
                    ctl.finished(unit, res)
                    continue
                ctl.submitted(unit, job_id, job_dir=str(self.unit_dir(unit)))
                self.inflight[job_id] = unit
            if not self.inflight:
                continue
            time.sleep(self.poll_s)
            for job_id, unit in list(self.inflight.items()):
                info = self.job_info(job_id)
                state = (info or {}).get("JobState", "UNKNOWN")
                if info is not None and state in ACTIVE:
                    reason = info.get("Reason", "")
                    if self.seen.get(job_id) != (state, reason):
                        self.seen[job_id] = (state, reason)
                        self.progress(
                            {
                                "event": "job",
                                "key": unit.key,
                                "job_id": job_id,
                                "state": state,
                                "reason": reason if state == "PENDING" else "",
                            }
                        )
                    continue
                del self.inflight[job_id]
                ctl.finished(unit, self.collect(unit, job_id, info))


def executor_local_recover(store: Store, unit: Unit) -> None:
    from forensics import launcher

    with contextlib.suppress(ForensicsError):
        launcher.stop(store, unit.run_name, grace_s=5.0)
    return None


def _which(tool: str) -> str | None:
    import shutil

    return shutil.which(tool)


def _slurm(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=os.environ)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: no answer within 60 s")
