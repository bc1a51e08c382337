"""Ingest of many small files: the curve 10 -> 100 -> 1k -> 10k files (docs/performance.md).

Each size: N copies of a small two-launch log (fixtures/sglang_two_launches.log, a different
port in each) in a fresh folder, then in a fresh store, timed as separate processes:
  1. `forensics ingest DIR` (wall time, files/min, the manifest's size after);
  2. the same command again (every file unchanged: each is read once to hash it).

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


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return dt, p.stdout


def measure(n: int, code: Path, work: Path) -> dict:
    logs = work / f"logs{n}"
    logs.mkdir()
    body = (ROOT / "fixtures" / "sglang_two_launches.log").read_text()
    for i in range(n):
        (logs / f"sglang_run_{i:05d}.log").write_text(body.replace("30000", str(20000 + i)))
    store = work / f"store{n}"
    env = {**os.environ, "PYTHONPATH": str(code)}
    base = [sys.executable, "-m", "forensics", "--store", str(store)]
    first, _ = _timed([*base, "ingest", str(logs)], env)
    again, _ = _timed([*base, "ingest", str(logs)], env)
    sources = json.loads((store / "manifest.json").read_text())["sources"]
    assert len(sources) == n, f"{len(sources)} sources for {n} files"
    return {
        "files": n,
        "ingest_s": round(first, 2),
        "files_per_min": round(n / first * 60),
        "reingest_unchanged_s": round(again, 2),
        "manifest_mb": round((store / "manifest.json").stat().st_size / 1e6, 2),
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
    print("| files | ingest | files/min | re-ingest (unchanged) | manifest |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['files']:,} | {r['ingest_s']:.2f} s | {r['files_per_min']:,} | "
            f"{r['reingest_unchanged_s']:.2f} s | {r['manifest_mb']} MB |"
        )


if __name__ == "__main__":
    main()
