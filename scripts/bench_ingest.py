"""Ingest speed and memory, side by side with ripgrep and a plain Python loop (`make bench`).

Generates a decode-heavy SGLang log (default ~1 GB, `--mb N`), then times in one run:
  1. `forensics ingest` into a fresh store (wall time, peak RSS of the process);
  2. `rg` extracting one field (gen throughput) from the same file;
  3. a plain Python `re` loop extracting the Decode fields;
  4. re-ingest of the unchanged file;
  5. `forensics --help`.
Writes the figures to bench-out/ingest.json and prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench-out"

STARTUP = """[{d} 10:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, port=30000, speculative_algorithm='EAGLE3', speculative_draft_model_path='/data/eagle3/output_10k_sglang/4', speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=5, disable_cuda_graph=False, cuda_graph_max_bs=8)
[{d} 10:00:01 TP0] Init torch distributed begin.
[{d} 10:00:02 TP0] Init torch distributed ends. elapsed=1.10 s, mem usage=0.50 GB
[{d} 10:00:02 TP0] Load weight begin. avail mem=139.00 GB
[{d} 10:02:02 TP0] Load weight end. elapsed=120.00 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=79.00 GB.
[{d} 10:02:03 TP0] KV Cache is allocated. #tokens: 412305, KV size: 30.00 GB
[{d} 10:02:03 TP0] Memory pool end. avail mem=25.00 GB
[{d} 10:02:04 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=25.00 GB
[{d} 10:02:24 TP0] Capture cuda graph end. Time elapsed: 20.00 s. mem usage=0.50 GB. avail mem=24.50 GB.
[{d} 10:02:47 TP0] max_total_num_tokens=412305, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=22.00 GB
[{d} 10:02:48] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[{d} 10:02:50] The server is fired up and ready to roll!
"""


def generate(path: Path, mb: int, seed: int = 7) -> None:
    """A realistic mix: ~97% Decode batch lines, Prefill lines, uvicorn access lines."""
    rng = random.Random(seed)
    target = mb << 20
    with path.open("w") as f:
        f.write(STARTUP.format(d="2026-11-01"))
        size = 0
        t = 11 * 3600
        block: list[str] = []
        while size < target:
            block.clear()
            for _ in range(2000):
                t += 1
                hh, mm, ss = t // 3600 % 24, t // 60 % 60, t % 60
                ts = f"[2026-11-01 {hh:02d}:{mm:02d}:{ss:02d} TP0]"
                r = rng.random()
                if r < 0.02:
                    block.append(
                        f"{ts} Prefill batch, #new-seq: 1, #new-token: {rng.randint(10, 900)}, #cached-token: {rng.randint(0, 500)}, "
                        f"token usage: 0.{rng.randint(0, 99):02d}, #running-req: {rng.randint(0, 32)}, #queue-req: 0, "
                        f"#pending-token: 0, cuda graph: False, input throughput (token/s): {rng.uniform(100, 9000):.2f}\n"
                    )
                elif r < 0.03:
                    block.append(
                        f'[2026-11-01 {hh:02d}:{mm:02d}:{ss:02d}] INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK\n'
                    )
                else:
                    bs = rng.randint(1, 48)
                    al = rng.uniform(1.8, 3.4)
                    block.append(
                        f"{ts} Decode batch, #running-req: {bs}, #token: {rng.randint(100, 400000)}, token usage: 0.{rng.randint(0, 99):02d}, "
                        f"accept len: {al:.2f}, accept rate: {(al - 1) / 4:.2f}, cuda graph: True, "
                        f"gen throughput (token/s): {rng.uniform(60, 3000):.2f}, #queue-req: {rng.randint(0, 5)}\n"
                    )
            chunk = "".join(block)
            f.write(chunk)
            size += len(chunk)


def plain_loop(path: Path) -> tuple[float, int]:
    rx = re.compile(
        r"Decode batch[.,] #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), accept len: ([\d.]+), "
        r"accept rate: ([\d.]+), cuda graph: (\w+), gen throughput \(token/s\): ([\d.]+), #queue-req: (\d+)"
    )
    t0 = time.perf_counter()
    n = 0
    rows = []
    with path.open(errors="replace") as f:
        for line in f:
            m = rx.search(line)
            if m:
                rows.append(tuple(float(x) if x[0].isdigit() else x for x in m.groups()))
                n += 1
                if len(rows) > 100_000:
                    rows.clear()
    return time.perf_counter() - t0, n


def timed(cmd: list[str], **kw) -> tuple[float, int, str]:
    """Wall seconds, peak RSS (KiB) of the child, stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    dt = time.perf_counter() - t0
    if p.returncode not in (0,):
        raise SystemExit(f"{cmd}: exit {p.returncode}: {p.stderr[-2000:]}")
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return dt, max(rss, before), p.stdout


def rss_of(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """Run under /usr/bin/time -v when available for an exact per-process peak RSS."""
    gnu_time = shutil.which("time") or "/usr/bin/time"
    if os.path.exists(gnu_time):
        t0 = time.perf_counter()
        p = subprocess.run([gnu_time, "-v", *cmd], capture_output=True, text=True, env=env)
        dt = time.perf_counter() - t0
        if p.returncode != 0:
            raise SystemExit(f"{cmd}: exit {p.returncode}: {p.stderr[-2000:]}")
        m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
        return dt, int(m.group(1)) / 1024 if m else float("nan"), p.stdout
    # fresh interpreter: ru_maxrss of children is the max over the ones run so far
    dt, rss, out = timed(cmd, env=env)
    return dt, rss / 1024, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--keep", action="store_true", help="keep the generated log between runs")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    log = OUT / f"bench_{args.mb}mb.log"
    if not log.exists() or log.stat().st_size < (args.mb << 20):
        print(f"generating {log} ...", flush=True)
        generate(log, args.mb)
    size_mb = log.stat().st_size / (1 << 20)
    store = OUT / "store"
    shutil.rmtree(store, ignore_errors=True)
    env = {**os.environ, "FORENSICS_HOME": str(store)}
    fx = [sys.executable, "-m", "forensics"]
    # warm the page cache so every tool reads from memory
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)

    t_ingest, rss_ingest, out = rss_of([*fx, "ingest", str(log), "--json"], env)
    summary = json.loads(out)
    t_re, _, _ = rss_of([*fx, "ingest", str(log), "--json"], env)
    rg = shutil.which("rg")
    t_rg = float("nan")
    if rg:
        t_rg = _rg(rg, log)
    t_loop, n_loop = plain_loop(log)
    t_help = min(timed([*fx, "--help"], env=env)[0] for _ in range(5))

    res = {
        "file_mb": round(size_mb, 1),
        "lines": summary["lines_total"],
        "decode_lines": summary["decode_lines"],
        "ingest_s": round(t_ingest, 2),
        "ingest_mb_s": round(size_mb / t_ingest, 1),
        "ingest_peak_rss_mb": round(rss_ingest, 1),
        "reingest_unchanged_s": round(t_re, 3),
        "rg_s": round(t_rg, 2),
        "plain_loop_s": round(t_loop, 2),
        "plain_loop_decode_lines": n_loop,
        "help_s": round(t_help, 3),
        "ingest_vs_rg": round(t_rg / t_ingest, 2) if rg else None,
        "ingest_vs_plain_loop": round(t_loop / t_ingest, 2),
        "cores": os.cpu_count(),
    }
    (OUT / "ingest.json").write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    print()
    print("| measure | value |\n| --- | --- |")
    for k, v in res.items():
        print(f"| {k} | {v} |")
    if not args.keep:
        log.unlink()
    return 0


def _rg(rg: str, log: Path) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(
        [rg, "-o", "-r", "$1", r"gen throughput \(token/s\): ([\d.]+)", str(log)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if p.returncode != 0:
        raise SystemExit(f"rg failed: {p.stderr[-500:]}")
    return time.perf_counter() - t0


if __name__ == "__main__":
    sys.exit(main())
