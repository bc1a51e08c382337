"""A parallel ingest of N host entries over a loopback sshd, one of them slow to connect: when
each log is fed to a worker and when the ingest ends, for one tree or several, alternated.

    python scripts/bench_slow_host.py LOG [--hosts 8] [--delay 1.0] [--slow first|last|none]
        [--jobs N] [--rounds 3] [--tree DIR ...]

The slow host is an entry whose connections a port in front of the sshd holds ``--delay``
seconds (``forensics.localsshd.SlowPort``). Each tree (default: this one) runs
``scripts/ingest_timeline.py`` with its own ``.venv/bin/python``, from its own folder, on
``bench{i}:LOG`` (one connection per entry: each has its own known_hosts file), in a fresh
store; one line per run, in seconds since the interpreter's start: the logs' openings (the
first, the 7th of 8, the last: the slow host's is the last), the end of the inputs' lookup
(``_files``), the feeds' start (``Pool.submit``) of the fast hosts, then the slow one's, the
exit, and the main process's CPU (docs/performance.md, "A slow host, twelfth stop", "A slow
host's parse, thirteenth stop"). A log too small for a worker is fed to none ("fed -")."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(tree: Path, inputs: list[str], toml: str, jobs: int | None) -> dict:
    store = Path(tempfile.mkdtemp(prefix="slow-host-"))
    (store / "config.toml").write_text(toml)
    env = {**os.environ, "FORENSICS_HOME": str(store), "T_SPAWN": f"{time.time():.6f}"}
    # this tree's timeline (it times the openings too), the tree's own code and venv
    cmd = [str(tree / ".venv/bin/python"), str(ROOT / "scripts/ingest_timeline.py"), "--json"]
    cmd += ["--jobs", str(jobs)] if jobs else []
    r = subprocess.run([*cmd, *inputs], cwd=tree, env=env, capture_output=True, text=True)
    shutil.rmtree(store, ignore_errors=True)
    if r.returncode:
        raise SystemExit(f"{tree}: exit {r.returncode}\n{r.stderr[-2000:]}")
    submits = [
        (float(m[1]), m[2])
        for m in re.finditer(r"^\s*([\d.]+) \S+\s+submit > (\S+)", r.stderr, re.M)
    ]
    opened = [float(m[1]) for m in re.finditer(r"^\s*([\d.]+) \S+\s+_log_source <", r.stderr, re.M)]
    listed = float(re.search(r"^\s*([\d.]+) \S+\s+_files <", r.stderr, re.M)[1])
    exit_s = float(re.search(r"^\s*([\d.]+) \S+\s+exit$", r.stderr, re.M)[1])
    cpu = float(re.search(r"process cpu ([\d.]+) s", r.stderr)[1])
    return {"submits": submits, "opened": opened, "listed": listed, "exit": exit_s, "cpu": cpu}


def _span(times: list[float]) -> str:
    """``first-last`` of some seconds, ``-`` for none (a log too small for a worker)."""
    return f"{min(times):.2f}-{max(times):.2f}" if times else "-"


def _line(r: dict, slow: int | None) -> str:
    """One run: the openings (all but the last, the last), the end of the listing, the feeds
    of the fast hosts' logs and of the slow host's (by host: a log is fed when it is ready,
    not in input order), the exit and the main process's CPU."""
    o, name = sorted(r["opened"]), f"bench{slow}"
    fast = [t for t, host in r["submits"] if host != name]
    late = [t for t, host in r["submits"] if host == name]
    opened = f"{_span(o[:-1])}, {o[-1]:.2f}" if o else "-"
    fed = _span(fast) + (f", slow {_span(late)}" if slow is not None else "")
    return (
        f"opened {opened}; listed {r['listed']:.2f}; fed {fed}; "
        f"exit {r['exit']:.2f} s, cpu {r['cpu']:.2f} s"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("log", type=Path, help="the log every host entry reads")
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--delay", type=float, default=1.0, help="seconds the slow host is held")
    ap.add_argument("--slow", choices=("first", "last", "none"), default="first")
    ap.add_argument("--jobs", type=int, default=None, help="--jobs of the ingest (default: its)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tree", type=Path, action="append", help="a checkout with a .venv")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from forensics.localsshd import SlowPort, local_sshd

    trees = args.tree or [ROOT]
    slow = {"first": 0, "last": args.hosts - 1, "none": None}[args.slow]
    d = Path(tempfile.mkdtemp(prefix="slow-host-sshd-"))
    sshd = local_sshd(d)
    port = SlowPort(sshd.port, lambda: time.sleep(args.delay))
    try:
        toml = sshd.entries(d, args.hosts, {slow: port.port} if slow is not None else None)
        inputs = [f"bench{i}:{args.log.resolve()}" for i in range(args.hosts)]
        for rnd in range(args.rounds):
            for tree in trees:
                tree = tree.resolve()
                r = one_run(tree, inputs, toml, args.jobs)
                print(f"round {rnd + 1} {tree.name}: {_line(r, slow)}", flush=True)
    finally:
        port.close()
        sshd.stop()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
