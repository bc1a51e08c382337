"""A throwaway single-node Slurm cluster on 127.0.0.1 (tests, and trying --executor slurm).

``local_slurm(DIR)`` generates a munge key and a slurm.conf under DIR, starts ``munged``,
``slurmctld -D`` and ``slurmd -D`` (as root, Debian's ``slurm-wlm`` and ``munge``), waits until
the node is idle and returns a ``LocalSlurm`` whose ``env`` points Slurm's commands at it
(``SLURM_CONF``); ``stop()`` cancels its jobs and stops the daemons. The configuration:

- ``proctrack/linuxproc``, ``task/none`` (no cgroups needed), ``select/cons_tres`` with
  ``CR_Core_Memory``: jobs ask for cores and memory;
- ``jobacct_gather/linux`` every second with ``OverMemoryKill``: a job above its ``--mem`` is
  killed and ends ``OUT_OF_MEMORY``;
- no slurmdbd (``accounting_storage/none``): ``sacct`` has nothing, so job states come from
  ``scontrol show job`` (kept for ``MinJobAge`` = 1 h) and ``jobcomp/filetxt`` (one line per
  finished job, in DIR/jobcomp.txt).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from forensics.localsshd import die_with_starter

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "squeue", "scancel", "sinfo")
START_TIMEOUT_S = 30.0


class SlurmUnavailable(Exception):
    """Why a local cluster cannot start here (missing binaries, not root, a daemon died)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _which(name: str) -> str | None:
    return shutil.which(name) or next(
        (p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.access(p, os.X_OK)), None
    )


@dataclasses.dataclass
class LocalSlurm:
    root: Path
    conf: Path
    partition: str
    node: str
    procs: list[subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def jobcomp(self) -> Path:
        return self.root / "jobcomp.txt"

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(argv),
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=check,
        )

    def logs(self) -> str:
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            p = self.root / name
            if p.exists():
                out.append(f"--- {name}\n" + p.read_text(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.run("scancel", "--partition", self.partition, check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)


# The fixed part of slurm.conf (the module doc says why each); _slurm_conf adds the per-cluster
# paths, ports, host and node lines.
SLURM_SETTINGS = (
    "ClusterName=fxlocal",
    "SlurmUser=root",
    "AuthType=auth/munge",
    "CredType=cred/munge",
    "ProctrackType=proctrack/linuxproc",
    "TaskPlugin=task/none",
    "SelectType=select/cons_tres",
    "SelectTypeParameters=CR_Core_Memory",
    "SchedulerType=sched/builtin",
    "MpiDefault=none",
    "ReturnToService=2",
    "JobAcctGatherType=jobacct_gather/linux",
    "JobAcctGatherFrequency=1",
    "JobAcctGatherParams=OverMemoryKill",
    "AccountingStorageType=accounting_storage/none",
    "JobCompType=jobcomp/filetxt",
    "MinJobAge=3600",
    "KillWait=3",
    "InactiveLimit=0",
    "SlurmctldTimeout=30",
    "SlurmdTimeout=30",
    "SchedulerParameters=sched_interval=1",
)


def local_slurm(root: Path, *, partition: str = "fxpart", node: str = "fxnode") -> LocalSlurm:
    missing = [n for n in (*DAEMONS, *CLIENTS, "mungekey") if _which(n) is None]
    if missing:
        raise SlurmUnavailable(
            f"missing {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        raise SlurmUnavailable("slurmd must run as root to start jobs (run the tests as root)")
    root = Path(root).resolve()
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    key = _munge_key(root)
    sock = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, sock, partition, node))
    cluster = LocalSlurm(root, conf, partition, node, [])
    try:
        _start_daemons(cluster, key, sock)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _munge_key(root: Path) -> Path:
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    subprocess.run(
        [_which("mungekey"), "--create", f"--keyfile={key}", "--force"],
        check=True,
        capture_output=True,
    )
    os.chmod(key, 0o400)
    return key


def _slurm_conf(root: Path, sock: Path, partition: str, node: str) -> str:
    cpus = os.cpu_count() or 1
    mem_mb = max(512, int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20) // 2)
    host = socket.gethostname()
    lines = [
        *SLURM_SETTINGS,
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        f"AuthInfo=socket={sock}",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool'}",
        f"SlurmctldPidFile={root / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'slurmd.pid'}",
        f"SlurmctldLogFile={root / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'slurmd.log'}",
        f"JobCompLoc={root / 'jobcomp.txt'}",
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} "
        f"RealMemory={mem_mb} State=UNKNOWN",
        f"PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE "
        "State=UP OverSubscribe=NO",
    ]
    return "\n".join(lines) + "\n"


def _start_daemons(cluster: LocalSlurm, key: Path, sock: Path) -> None:
    """munged, then slurmctld and slurmd; back when the node is idle."""
    root, procs, node = cluster.root, cluster.procs, cluster.node
    env = {**os.environ, **cluster.env}

    def start(argv: list[str], log: str) -> None:
        fh = open(root / log, "ab")  # noqa: SIM115 - the daemon's stdout, closed with it
        procs.append(
            subprocess.Popen(
                die_with_starter(argv),
                env=env,
                stdout=fh,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        fh.close()

    munge = root / "munge"
    start(
        [_which("munged"), "-F", "-f", f"--socket={sock}", f"--key-file={key}",
         f"--pid-file={munge / 'munged.pid'}", f"--log-file={root / 'munged.log'}",
         f"--seed-file={munge / 'munged.seed'}"],
        "munged.out",
    )  # fmt: skip
    _wait(lambda: sock.exists(), "munged never opened its socket", procs, cluster)
    start([_which("slurmctld"), "-D", "-i", "-f", str(cluster.conf)], "slurmctld.out")
    start([_which("slurmd"), "-D", "-f", str(cluster.conf), "-N", node], "slurmd.out")

    def idle() -> bool:
        r = cluster.run("sinfo", "-h", "-n", node, "-o", "%T", check=False)
        return r.returncode == 0 and r.stdout.strip().rstrip("*") in ("idle", "mixed")

    _wait(idle, f"node {node} never became idle", procs, cluster)


def _daemon(p: subprocess.Popen) -> str:
    """The daemon's name (its argv follows setpriv's ``--``: die_with_starter)."""
    args = [str(a) for a in p.args]
    return Path(args[args.index("--") + 1] if "--" in args else args[0]).name


def _wait(ok, what: str, procs: list[subprocess.Popen], cluster: LocalSlurm) -> None:  # noqa: ANN001
    end = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < end:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise SlurmUnavailable(
                f"{_daemon(dead[0])} exited {dead[0].returncode}: " + cluster.logs()[-1500:]
            )
        if ok():
            return
        time.sleep(0.2)
    raise SlurmUnavailable(f"{what} within {START_TIMEOUT_S:g} s: " + cluster.logs()[-1500:])
