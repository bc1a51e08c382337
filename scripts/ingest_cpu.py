"""Where the CPU of one `forensics ingest` goes, process by process: the main one and each
worker of a parallel ingest (``--jobs``).

    FORENSICS_HOME=$(mktemp -d) python scripts/ingest_cpu.py [INGEST OPTIONS] LOG...

runs ``python -m forensics ingest ...`` with a ``sitecustomize`` on PYTHONPATH (a worker
inherits it) that, as each process exits, records its CPU (user + system, its ended threads
included), the CPU it had spent when its first file began (a worker: the interpreter's start
and the parse's imports), each file's CPU, its minor page faults and context switches, and
the CPU of the threads alive at its end, by name (polars' ``polars-N``, ``async-executor-N``,
``tokio-rt-worker``, jemalloc's ``jemalloc_bg_thd``, the parse's own). Then prints one line
per process and the CPU of all of them (docs/performance.md, "A worker's CPU, thirteenth
stop"). A worker started ahead and never given a file is killed: it reports nothing (the
total of the children, from ``getrusage``, still counts it). A pool's zygote (forensics/
ingest/zygote.py) has a line of its own; a worker it forked counts its CPU from the fork, and
each worker says when it was ready (began to wait for its first file) since the start. Host entries come from the
store's config.toml, as for ``forensics ingest``; or

    python scripts/ingest_cpu.py --loopback 8 LOG [INGEST OPTIONS]

ingests LOG from N host entries of a loopback sshd (each its own connection, as
``bench_ingest.py --scaling`` does: its ``_Loopback``) into a fresh store, and prints the CPU
the sshd and its sessions (``zstd``) spent meanwhile apart.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUT_VAR = "FORENSICS_INGEST_CPU_OUT"  # the file each process appends its line to
T0_VAR = "FORENSICS_INGEST_CPU_T0"  # the ingest's start (time.time())


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _threads() -> dict[str, list[float]]:
    """The threads alive now, by name (digits folded): [count, CPU seconds]."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, list[float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = re.sub(r"\d+", "N", stat[stat.index("(") + 1 : stat.rindex(")")])
        fields = stat[stat.rindex(")") + 2 :].split()
        entry = out.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += (int(fields[11]) + int(fields[12])) / ticks
    return out


def hook() -> None:
    """In each process of the ingest (the sitecustomize's call): its line at exit."""
    import atexit
    import resource

    path = os.environ.get(OUT_VAR)
    if not path:
        return
    worker = sys.argv[:1] == ["-c"]  # a spawned worker's interpreter, or a pool's zygote's
    jobs: list[list[float]] = []
    ready: list[float] = []  # when it began to wait for its first file (since the start)
    forked: list[bool] = []  # a zygote: it forked workers (forensics/ingest/zygote.py)
    os.register_at_fork(after_in_parent=lambda: forked.append(True), after_in_child=forked.clear)
    if worker:
        import forensics.ingest.pool as pool  # no polars: the worker imports it itself

        run_job, worker_main = pool._run_job, pool._worker_main

        def main_noted(*args, **kwargs):
            ready.append(time.time() - float(os.environ.get(T0_VAR, "nan")))
            return worker_main(*args, **kwargs)

        pool._worker_main = main_noted

        def timed(*args, **kwargs):
            jobs.append([_cpu(), 0.0, time.monotonic()])
            try:
                return run_job(*args, **kwargs)
            finally:
                jobs[-1][1], jobs[-1][2] = _cpu(), time.monotonic() - jobs[-1][2]

        pool._run_job = timed

    def report() -> None:
        t, ru = os.times(), resource.getrusage(resource.RUSAGE_SELF)
        line = {
            "role": "zygote" if forked and worker else "worker" if worker else "main",
            "ready_s": ready[0] if ready else None,
            "pid": os.getpid(),
            "user": t.user,
            "sys": t.system,
            "before_first_file": jobs[0][0] if jobs else None,
            "files": [(round(b - a, 3), round(wall, 3)) for a, b, wall in jobs],
            "maxrss_mb": ru.ru_maxrss / 1024,
            "minflt": ru.ru_minflt,
            "vcsw": ru.ru_nvcsw,
            "ivcsw": ru.ru_nivcsw,
            "threads": _threads(),
        }
        with open(path, "a") as fh:
            fh.write(json.dumps(line) + "\n")

    atexit.register(report)


def _row(p: dict) -> str:
    first = p["before_first_file"]
    files = ", ".join(f"{cpu:.2f} s CPU in {wall:.2f} s" for cpu, wall in p["files"])
    threads = ", ".join(
        f"{name} ×{int(n)} {cpu:.2f}"
        for name, (n, cpu) in sorted(p["threads"].items(), key=lambda kv: -kv[1][1])
    )
    return (
        f"{p['role']:6s} {p['pid']:>7d}  {p['user'] + p['sys']:5.2f} s "
        f"({p['user']:.2f} user + {p['sys']:.2f} sys)"
        + (f", {first:.2f} s before its first file" if first is not None else "")
        + (f", ready {p['ready_s']:.2f} s after the start" if p.get("ready_s") else "")
        + (f"; files: {files}" if files else "")
        + f"; peak RSS {p['maxrss_mb']:.0f} MB, {p['minflt']} page faults, "
        + f"{p['vcsw']}+{p['ivcsw']} context switches"
        + f"\n         threads alive at its end (CPU s): {threads}"
    )


def _run(args: list[str], env: dict[str, str]) -> tuple[int, float, list[dict]]:
    """``forensics ingest ARGS`` with the hook in each process: (exit, wall, their lines)."""
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="ingest-cpu-") as tmp:
        Path(tmp, "sitecustomize.py").write_text("from ingest_cpu import hook\n\nhook()\n")
        out = Path(tmp, "processes.jsonl")
        env = dict(env, **{OUT_VAR: str(out)})
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (tmp, str(here), str(here.parent), env.get("PYTHONPATH")) if p
        )
        t0 = time.monotonic()
        env[T0_VAR] = repr(time.time())
        cmd = [sys.executable, "-m", "forensics", "ingest", *args]
        rc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL).returncode
        wall = time.monotonic() - t0
        procs = [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
    return rc, wall, procs


def main() -> int:
    args = sys.argv[1:]
    host_cpu = None
    if args[:1] == ["--loopback"]:
        from bench_ingest import _Loopback  # scripts/ is this script's sys.path[0]

        with tempfile.TemporaryDirectory(prefix="ingest-cpu-store-") as store:
            lb = _Loopback(Path(args[2]).resolve(), Path(store), int(args[1]))
            try:
                lb.make_copies()
                env, before = lb.env(), lb.host_cpu()
                rc, wall, procs = _run([*args[3:], *lb.names("hosts", lb.hosts)], env)
                host_cpu = lb.host_cpu() - before
            finally:
                lb.close()
    else:
        rc, wall, procs = _run(args, dict(os.environ))
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    procs.sort(key=lambda p: (["main", "zygote", "worker"].index(p["role"]), p["pid"]))
    for p in procs:
        print(_row(p))
    workers = [p for p in procs if p["role"] == "worker"]
    cpu = sum(p["user"] + p["sys"] for p in procs)
    everything = children.ru_utime + children.ru_stime - (host_cpu or 0.0)
    print(
        f"exit {rc}, {wall:.2f} s wall; CPU {everything:.2f} s in all (its processes), "
        f"{cpu:.2f} s in the {len(procs)} that reported"
        + (
            f"; per worker {sum(p['user'] + p['sys'] for p in workers) / len(workers):.2f} s"
            if workers
            else ""
        )
        + (f"; the loopback sshd and its sessions {host_cpu:.2f} s" if host_cpu is not None else "")
    )
    return rc


if __name__ == "__main__":
    sys.exit(main())
