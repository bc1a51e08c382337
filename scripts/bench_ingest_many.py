"""Ingest of many small files: the curve 10 -> 100 -> 1k -> 10k files (docs/performance.md).

Each size: N copies of a small two-launch log (fixtures/sglang_two_launches.log, a different
port in each) in a fresh folder, then in a fresh store, timed as separate processes (wall
time, and CPU time: user + system of the process and its threads; the 1-minute load average
is printed beside each size, since a shared machine inflates wall time):
  1. `forensics ingest DIR` (files/min, the manifest's size and the parts after);
  2. the same command again (every file unchanged: each is read once to hash it);
  3. a reference over the same files in the same run: `rg -c "Decode batch"` (or `grep -c`
     where rg is missing) and `cat`.

    .venv/bin/python scripts/bench_ingest_many.py                 # 10 100 1000 10000
    .venv/bin/python scripts/bench_ingest_many.py --sizes 10 100  # a quick look

Writes bench-out/ingest_many.json and prints a Markdown table. With --code DIR the forensics of
another checkout is measured (e.g. a `git worktree` of the release before batching).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench-out"


def _timed(cmd: list[str], env: dict[str, str] | None = None, **kw) -> tuple[float, float, str]:
    """(wall s, CPU s: user + system of the child, its threads included, stdout)."""
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600, **kw)
    dt = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode not in (0, 1):  # grep/rg exit 1 when a file has no match
        sys.exit(f"{' '.join(cmd[:6])}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return dt, cpu, p.stdout


def measure(n: int, code: Path, work: Path) -> dict:
    logs = work / f"logs{n}"
    logs.mkdir()
    body = (ROOT / "fixtures" / "sglang_two_launches.log").read_text()
    for i in range(n):
        (logs / f"sglang_run_{i:05d}.log").write_text(body.replace("30000", str(20000 + i)))
    store = work / f"store{n}"
    env = {**os.environ, "PYTHONPATH": str(code)}
    base = [sys.executable, "-m", "forensics", "--store", str(store)]
    first, first_cpu, _ = _timed([*base, "ingest", str(logs)], env)
    again, again_cpu, _ = _timed([*base, "ingest", str(logs)], env)
    man = json.loads((store / "manifest.json").read_text())
    assert len(man["sources"]) == n, f"{len(man['sources'])} sources for {n} files"
    files = sorted(str(p) for p in logs.iterdir())
    search = ["rg", "-c", "Decode batch"] if shutil.which("rg") else ["grep", "-c", "Decode batch"]
    ref, ref_cpu, _ = _timed(["xargs", *search], input="\n".join(files))
    cat, cat_cpu, _ = _timed(["sh", "-c", f"cat {logs}/* > /dev/null"])
    return {
        "files": n,
        "ingest_s": round(first, 2),
        "ingest_cpu_s": round(first_cpu, 2),
        "files_per_min": round(n / first * 60),
        "reingest_unchanged_s": round(again, 2),
        "reingest_unchanged_cpu_s": round(again_cpu, 2),
        "reference": search[0],
        "reference_s": round(ref, 2),
        "reference_cpu_s": round(ref_cpu, 2),
        "cat_s": round(cat, 2),
        "manifest_mb": round((store / "manifest.json").stat().st_size / 1e6, 2),
        "parts": sum(len(v) for v in man["tables"].values()),
        "load_avg_1m": round(os.getloadavg()[0], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    ap.add_argument("--code", type=Path, default=ROOT, help="checkout whose forensics to time")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-bench-store-"))
    work.chmod(0o700)
    rows = []
    try:
        for n in args.sizes:
            rows.append(measure(n, args.code.resolve(), work))
            print(json.dumps(rows[-1]), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(exist_ok=True)
    (OUT / "ingest_many.json").write_text(json.dumps(rows, indent=1))
    print(
        "| files | ingest | files/min | re-ingest (unchanged) | reference (same files) "
        "| manifest | parts | load |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['files']:,} | {r['ingest_s']:.2f} s ({r['ingest_cpu_s']:.2f} CPU) "
            f"| {r['files_per_min']:,} "
            f"| {r['reingest_unchanged_s']:.2f} s ({r['reingest_unchanged_cpu_s']:.2f} CPU) "
            f"| {r['reference']} {r['reference_s']:.2f} s ({r['reference_cpu_s']:.2f} CPU), "
            f"cat {r['cat_s']:.2f} s | {r['manifest_mb']} MB | {r['parts']} | {r['load_avg_1m']} |"
        )


if __name__ == "__main__":
    main()
