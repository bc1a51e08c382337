"""Reading commands on stores of 10, 100, 1,000 and 10,000 runs (`make bench`).

A store of N runs is made quickly without ingesting N logs: a few fixture logs are ingested
once into a template store, and their stored rows (runs, events, decode, prefill, errors, lines,
verdicts) and source records are copied N times through the store's own transaction API (one
part per table per 1,000 runs, as a compacted store holds them), each copy with its own source,
path, start time and configuration: three models, TP 8 and 4, single-stream and batched
decode lines, the fixtures' failures among them. Then each command runs as a user runs it (a
fresh `python -m forensics` process, output to /dev/null) and its wall time and CPU time
(user + system, all threads) are taken (best of ``--repeat``; the 1-minute load average is
recorded beside each size, since a shared machine inflates wall time):

    runs --json, diagnose NAME, advise, report --out FILE

Writes bench-out/store_scale.json and prints a Markdown table for docs/performance.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench-out"
FIXTURES = ROOT / "fixtures"
TEMPLATE_LOGS = [
    "sglang_baseline.log",
    "sglang_eagle3_cg_5dt.log",
    "sglang_eagle3_cg_16dt.log",
    "sglang_eagle3_nocg_16dt.log",
    "sglang_fail_capture.log",
    "sglang_fail_load_kv_oom.log",
    "sglang_fail_runtime_ima.log",
    "edge_crlf.log",
]
MODELS = ["/models/Kimi-K2.5", "/models/Llama-3.1-8B-Instruct", "/models/Qwen3-8B"]
TABLES = ("runs", "events", "decode", "prefill", "errors", "lines")
TS_COLUMNS = {"runs": ("started_at", "ended_at"), "events": ("ts",), "decode": ("ts",)}
TS_COLUMNS |= {"prefill": ("ts",), "errors": ("ts",), "lines": ("ts",)}
COMMANDS = {
    "runs --json": ["runs", "--json"],
    "diagnose NAME": ["diagnose", "{name}"],
    "advise": ["advise"],
    "report": ["report", "--out", "{out}"],
}
GOALS = {"runs --json": 1.0, "diagnose NAME": 1.0, "advise": 2.0, "report": 20.0}


def _template(tmp: Path, decode_copies: int = 1):
    """The fixtures' stored rows; ``decode_copies``: each decode line repeated, a second
    apart (long runs: the memory of the reading commands over a big decode table)."""
    import polars as pl

    from forensics.ingest import ingest
    from forensics.store import Store

    st = Store.open(tmp / "template")
    ingest(st, [str(FIXTURES / n) for n in TEMPLATE_LOGS])
    tables = {t: st.table(t) for t in (*TABLES, "verdicts")}
    dec = tables["decode"]
    shifted = [
        dec.with_columns(pl.col("ts") + pl.duration(seconds=i)) for i in range(decode_copies)
    ]
    tables["decode"] = pl.concat(shifted)
    return tables, st.sources()


def make_store(root: Path, n: int, template) -> str:
    """A store of ``n`` runs at ``root``; returns the name of a failed run to diagnose."""
    import polars as pl

    from forensics.store import Store

    tables, sources = template
    sids = list(sources)
    st = Store.open(root)
    fail_name = ""
    for lo in range(0, n, 1000):
        hi = min(n, lo + 1000)
        frames: dict[str, list[pl.DataFrame]] = {t: [] for t in (*TABLES, "verdicts")}
        new_sources = {}
        for i in range(lo, hi):
            tsid = sids[i % len(sids)]
            sid = hashlib.sha1(f"scale:{i}".encode()).hexdigest()[:12]
            name = f"run{i:05d}_{Path(sources[tsid]['path']).stem}"
            path = f"/data/scale/{name}.log"
            shift = pl.duration(minutes=30 * i)
            model = MODELS[(i // len(sids)) % len(MODELS)]
            tp = 8 if (i // (len(sids) * len(MODELS))) % 2 == 0 else 4
            for t in TABLES:
                df = tables[t]
                if df.is_empty():
                    continue
                df = df.filter(pl.col("source_id") == tsid)
                if df.is_empty():
                    continue
                cols = [pl.lit(sid).alias("source_id")]
                cols += [(pl.col(c) + shift).alias(c) for c in TS_COLUMNS[t] if c in df.columns]
                if t == "runs":
                    cols += [
                        pl.lit(path).alias("path"),
                        pl.lit(model).alias("model_path"),
                        pl.lit(tp, dtype=pl.Int32).alias("tp_size"),
                    ]
                frames[t].append(df.with_columns(cols))
            v = tables["verdicts"].filter(pl.col("run_id").str.starts_with(tsid + ":"))
            frames["verdicts"].append(
                v.with_columns(pl.col("run_id").str.replace(tsid, sid, literal=True))
            )
            if not fail_name and "fail_capture" in name:
                fail_name = name
            rec = dict(sources[tsid])
            rec["path"] = path
            new_sources[sid] = rec
        with st.transaction() as tx:
            for t, dfs in frames.items():
                if dfs:
                    tx.append(t, pl.concat(dfs, how="vertical_relaxed"))
            for sid, rec in new_sources.items():
                tx.set_source(sid, rec)
    return fail_name or "run00000"


def time_cmd(store: Path, args: list[str], repeat: int) -> tuple[float, float]:
    """(best wall seconds, CPU seconds of that run: user + system, all threads)."""
    import resource

    env = {**os.environ, "FORENSICS_HOME": str(store), "COLUMNS": "200"}
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        res = subprocess.run(
            [sys.executable, "-m", "forensics", "--store", str(store), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            check=False,
        )
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        if res.returncode != 0:
            raise SystemExit(f"forensics {' '.join(args)}: exit {res.returncode}\n{res.stderr}")
        best = min(best, (wall, cpu))
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1000,10000", help="runs per store")
    ap.add_argument("--repeat", type=int, default=2, help="best of N runs per command")
    ap.add_argument("--skip-report-over", type=int, default=10**9, help="no report above N")
    ap.add_argument("--decode-copies", type=int, default=1, help="each decode line N times")
    ap.add_argument("--keep", type=Path, help="make the largest store here and keep it")
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    OUT.mkdir(exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="forensics-scale-") as tmpd:
        tmp = Path(tmpd)
        template = _template(tmp, a.decode_copies)
        for n in sizes:
            root = a.keep if a.keep and n == max(sizes) else tmp / f"store{n}"
            t0 = time.perf_counter()
            fail = make_store(root, n, template)
            made = time.perf_counter() - t0
            row = {"runs": n, "generate_s": round(made, 2)}
            for label, args in COMMANDS.items():
                if label == "report" and n > a.skip_report_over:
                    continue
                args = [x.format(name=fail, out=tmp / f"report{n}.html") for x in args]
                wall, cpu = time_cmd(root, args, 1 if label == "report" else a.repeat)
                row[label], row[f"{label} cpu"] = round(wall, 3), round(cpu, 3)
                print(f"{n:>6} runs  {label:<14} {wall:.3f} s wall, {cpu:.3f} s CPU", flush=True)
            row["load_avg_1m"] = round(os.getloadavg()[0], 1)
            results.append(row)
    (OUT / "store_scale.json").write_text(json.dumps(results, indent=2))
    cols = list(COMMANDS)
    print("\n| runs | " + " | ".join(f"`{c}`" for c in cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    for r in results:
        cells = [f"{r[c]:.2f} s ({r[c + ' cpu']:.2f} CPU)" if c in r else "—" for c in cols]
        print(f"| {r['runs']:,} | " + " | ".join(cells) + f" | load {r['load_avg_1m']} |")
    print("| goal (10,000) | " + " | ".join(f"≤ {GOALS[c]:g} s" for c in cols) + " |")


if __name__ == "__main__":
    main()
