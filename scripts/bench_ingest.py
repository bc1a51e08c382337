"""Ingest speed and memory beside the tools that extract less (`make bench`).

Generates SGLang logs (``MIXES``: the busy-server mix is the headline, decode-only a second
row; ``--mb`` sets the size, default 100 MB), warms the page cache, then runs every tool of
``TOOLS`` on the same file in the same run, each in its own process under ``/usr/bin/time -v``
(wall time, MB/s, peak RSS). Then: re-ingest of the unchanged file, ``forensics --help``, and
(unless ``--no-remote``) ingest over a loopback sshd this script starts (forensics.localsshd):
``ssh cat`` of the file, ingest of it as ``bench0:/path``, and of 8 copies on 8 host entries
of the same sshd in one call.

The machine may be shared: the load average is printed beside the figures, and the ratios
between tools measured in the same run are what compares. ``--write-docs`` replaces the
generated section of docs/performance.md; the JSON goes to bench-out/ingest.json.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench-out"
DOCS = ROOT / "docs" / "performance.md"
BEGIN, END = "<!-- bench_ingest:begin -->", "<!-- bench_ingest:end -->"
RANKS = 8

STARTUP = """[{d} 10:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, port=30000, speculative_algorithm='EAGLE3', speculative_draft_model_path='/data/eagle3/output_10k_sglang/4', speculative_num_steps=3, speculative_eagle_topk=4, speculative_num_draft_tokens=5, disable_cuda_graph=False, cuda_graph_max_bs=8)
{ranks}[{d} 10:02:47 TP0] max_total_num_tokens=412305, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=22.00 GB
[{d} 10:02:48] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[{d} 10:02:50] The server is fired up and ready to roll!
"""
RANK_STARTUP = """[{d} 10:00:01 TP{r}] Init torch distributed begin.
[{d} 10:00:02 TP{r}] Init torch distributed ends. elapsed=1.10 s, mem usage=0.50 GB
[{d} 10:00:02 TP{r}] Load weight begin. avail mem=139.00 GB
[{d} 10:02:02 TP{r}] Load weight end. elapsed=120.00 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=60.00 GB, mem usage=79.00 GB.
[{d} 10:02:03 TP{r}] KV Cache is allocated. #tokens: 412305, KV size: 30.00 GB
[{d} 10:02:03 TP{r}] Memory pool end. avail mem=25.00 GB
[{d} 10:02:04 TP{r}] Capture cuda graph begin. This can take up to several minutes. avail mem=25.00 GB
[{d} 10:02:24 TP{r}] Capture cuda graph end. Time elapsed: 20.00 s. mem usage=0.50 GB. avail mem=24.50 GB.
"""


def _decode(rng: random.Random, ts: str) -> str:
    bs, al = rng.randint(1, 48), rng.uniform(1.8, 3.4)
    return (
        f"{ts} Decode batch, #running-req: {bs}, #token: {rng.randint(100, 400000)}, "
        f"token usage: 0.{rng.randint(0, 99):02d}, accept len: {al:.2f}, "
        f"accept rate: {(al - 1) / 4:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {rng.uniform(60, 3000):.2f}, #queue-req: {rng.randint(0, 5)}\n"
    )


def _prefill(rng: random.Random, ts: str) -> str:
    return (
        f"{ts} Prefill batch, #new-seq: 1, #new-token: {rng.randint(10, 900)}, "
        f"#cached-token: {rng.randint(0, 500)}, token usage: 0.{rng.randint(0, 99):02d}, "
        f"#running-req: {rng.randint(0, 32)}, #queue-req: 0, #pending-token: 0, "
        f"cuda graph: False, input throughput (token/s): {rng.uniform(100, 9000):.2f}\n"
    )


def _warning(rng: random.Random, ts: str) -> str:
    return (
        f"{ts} WARNING: Request {rng.getrandbits(64):016x} exceeds the context length; "
        "its input is truncated to 131072 tokens\n"
    )


def _access(rng: random.Random, ts: str) -> str:
    plain = ts.split(" TP")[0] + "]"  # uvicorn's lines carry no rank
    return f'{plain} INFO:     127.0.0.1:{rng.randint(30000, 60000)} - "POST /generate HTTP/1.1" 200 OK\n'


# NCCL_DEBUG=INFO output of an 8-rank server: no SGLang prefix (`host:pid:tid [cuda dev] NCCL
# INFO ...`), one process per rank; the rank is the prefix's `TPn`
_NCCL_INFO = (
    "Channel {c:02d}/24 :    0   1   2   3   4   5   6   7",
    "Channel {c:02d}/0 : {r}[{r}] -> {n}[{n}] via P2P/CUMEM/read",
    "Connected all rings",
    "Connected all trees",
    "comm 0x{h:x} rank {r} nRanks 8 nNodes 1 localRanks 8 localRank {r} MNNVL 0",
    "Trees [0] {n}/-1/-1->{r}->-1 [1] {n}/-1/-1->{r}->-1",
    "threadThresholds 8/8/64 | 64/8/64 | 512 | 512",
    "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer",
    "ncclCommInitRank comm 0x{h:x} rank {r} nranks 8 cudaDev {r} nvmlDev {r} busId {r}8000 "
    "commId 0x{h:x} - Init COMPLETE",
    "Using network Socket",
    "NCCL_P2P_LEVEL set by environment to NVL",
    "P2P Chunksize set to 524288",
    "CC Off, Multi-GPU CC Off, workFifoBytes 1048576",
    "AllReduce: opCount {c:x} sendbuff 0x{h:x} recvbuff 0x{h:x} count 4096 datatype 9 op 0 "
    "root 0 comm 0x{h:x} [nranks=8] stream 0x{h:x}",
)


def _nccl(rng: random.Random, ts: str) -> str:
    r = int(ts.rsplit("TP", 1)[1].rstrip("]")) if " TP" in ts else 0
    text = rng.choice(_NCCL_INFO).format(
        c=rng.randint(0, 23), r=r, n=(r + 1) % RANKS, h=rng.getrandbits(44)
    )
    return f"node01:{4100 + r}:{4300 + r} [{r}] NCCL INFO {text}\n"


# the unprefixed lines of an NCCL_DEBUG=INFO startup besides NCCL's own: the version banner,
# Python warnings, tqdm bars, plain prints
NCCL_STARTUP_EXTRA = """NCCL version 2.21.5+cuda12.4
/usr/lib/python3/dist-packages/torch/cuda/__init__.py:129: UserWarning: CUDA initialization: The NVIDIA driver on your system is too old
  warnings.warn(
Loading safetensors checkpoint shards:  45% Completed | 45/100 [00:31<00:38,  1.42it/s]
INFO hello from rank setup
"""
NCCL_STARTUP_LINES = 4000  # NCCL INFO lines of the startup (`nccl` mix)


def _nccl_startup(rng: random.Random, d: str) -> str:
    lines = [NCCL_STARTUP_EXTRA]
    for i in range(NCCL_STARTUP_LINES):
        lines.append(_nccl(rng, f"[{d} 10:00:02 TP{i % RANKS}]"))
    return "".join(lines)


LineMaker = Callable[[random.Random, str], str]
# name -> (what it is, [(line kind, share, maker)]). Shares add up to 1.
MIXES: dict[str, tuple[str, list[tuple[str, float, LineMaker]]]] = {
    "busy": (
        "one startup (8 TP ranks), then 80 % Decode batch, 10 % Prefill batch, "
        "9 % uvicorn access, 1 % WARNING lines, rank tags TP0-TP7",
        [("decode", 0.80, _decode), ("prefill", 0.10, _prefill), ("access", 0.09, _access)]
        + [("warning", 0.01, _warning)],
    ),
    "decode-only": (
        "one startup (8 TP ranks), then 100 % Decode batch",
        [("decode", 1.0, _decode)],
    ),
    "nccl": (
        f"an NCCL_DEBUG=INFO server: the startup of the busy mix with {NCCL_STARTUP_LINES:,} "
        "unprefixed NCCL INFO lines (and a version banner, a Python warning, a tqdm bar), then "
        "the busy mix with 2 % NCCL INFO lines",
        [("decode", 0.78, _decode), ("prefill", 0.10, _prefill), ("access", 0.09, _access)]
        + [("warning", 0.01, _warning), ("nccl", 0.02, _nccl)],
    ),
    "nccl-half": (
        "the worst case: the startup of the `nccl` mix, then 50 % NCCL INFO lines, 50 % "
        "Decode batch",
        [("decode", 0.5, _decode), ("nccl", 0.5, _nccl)],
    ),
}
# the mixes whose startup prints NCCL_DEBUG=INFO output
NCCL_MIXES = ("nccl", "nccl-half")


def generate(path: Path, mb: int, mix: str = "busy", seed: int = 7) -> None:
    rng = random.Random(seed)
    kinds = MIXES[mix][1]
    makers = [m for _, _, m in kinds]
    weights = [w for _, w, _ in kinds]
    target = mb << 20
    d = "2026-11-01"
    with path.open("w") as f:
        ranks = "".join(RANK_STARTUP.format(d=d, r=r) for r in range(RANKS))
        if mix in NCCL_MIXES:
            ranks += _nccl_startup(rng, d)
        f.write(STARTUP.format(d=d, ranks=ranks))
        size, t = 0, 11 * 3600
        while size < target:
            block = []
            for maker in rng.choices(makers, weights, k=4000):
                t += 1
                hh, mm, ss = t // 3600 % 24, t // 60 % 60, t % 60
                block.append(maker(rng, f"[{d} {hh:02d}:{mm:02d}:{ss:02d} TP{t % RANKS}]"))
            chunk = "".join(block)
            f.write(chunk)
            size += len(chunk)


# ---------------------------------------------------------------------------------------
# The tools, each run in a child process (``--tool NAME FILE``) so its peak RSS is its own
# ---------------------------------------------------------------------------------------
FIVE = (
    r"Decode batch, #running-req: (\d+), #token: (\d+), token usage: ([\d.]+), "
    r"accept len: ([\d.]+), accept rate: ([\d.]+)"
)
GEN = r"gen throughput \(token/s\): ([0-9.]+)"


def tool_duckdb(path: str) -> int:
    import duckdb

    q = f"""SELECT count(*) FROM (SELECT TRY_CAST(regexp_extract(line, '{GEN}', 1) AS DOUBLE) AS g
           FROM read_csv('{path}', columns={{'line': 'VARCHAR'}}, header=false, delim='\\x01',
                         quote='', escape='', auto_detect=false)
           WHERE contains(line, 'Decode batch')) WHERE g IS NOT NULL"""
    return duckdb.sql(q).fetchall()[0][0]


def tool_polars(path: str) -> int:
    import polars as pl

    df = (
        pl.scan_csv(
            path,
            has_header=False,
            separator="\x01",
            quote_char=None,
            new_columns=["line"],
            schema_overrides={"line": pl.String},
        )
        .filter(pl.col("line").str.contains("Decode batch", literal=True))
        .select(pl.col("line").str.extract_groups(FIVE))
        .collect()
    )
    return len(df)


def tool_pyre(path: str) -> int:
    rx = re.compile(FIVE)
    n = 0
    rows: list[tuple[float, ...]] = []
    with open(path, errors="replace") as f:
        for line in f:
            m = rx.search(line)
            if m:
                rows.append(tuple(map(float, m.groups())))
                n += 1
                if len(rows) > 100_000:
                    rows.clear()
    return n


def _drain(location: str, how: str) -> int:
    from forensics.hosts import resolve_location
    from forensics.logsource import open_log

    host, path = resolve_location(location)
    if how == "stream":  # what ingest reads: the log source's stream (forensics.logsource)
        return sum(map(len, open_log(host, path).chunks()))
    return sum(map(len, host.iter_chunks(path)))  # SFTP reads, chunk after chunk


IN_PROCESS = {
    "duckdb": tool_duckdb,
    "polars": tool_polars,
    "pyre": tool_pyre,
    "stream": lambda loc: _drain(loc, "stream"),
    "sftp": lambda loc: _drain(loc, "sftp"),
}


def _self(tool: str) -> Callable[[Path], list[str]]:
    return lambda p: [sys.executable, __file__, "--tool", tool, str(p)]


# name -> (what it does, command for a file)
TOOLS: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    (
        "rg",
        "`rg -o 'gen throughput \\(token/s\\): [0-9.]+'` (one field)",
        lambda p: ["rg", "-o", r"gen throughput \(token/s\): [0-9.]+", str(p)],
    ),
    (
        "duckdb",
        "DuckDB `read_csv` one column + `regexp_extract` of one field of the decode lines",
        _self("duckdb"),
    ),
    (
        "polars",
        "polars `scan_csv` + one `str.extract_groups` (five fields) over the decode lines",
        _self("polars"),
    ),
    ("pyre", "a plain Python `re` loop over the decode lines, five fields", _self("pyre")),
    (
        "ingest",
        "**`forensics ingest`** (every field, every line kind, parquet)",
        lambda p: [sys.executable, "-m", "forensics", "ingest", str(p), "--json"],
    ),
]


def measure_cpu(cmd: list[str], env: dict[str, str], *, discard: bool = False) -> dict:
    """Wall seconds, CPU seconds (user + sys), peak RSS MB and stdout of one child under GNU
    time (CPU time is what a loaded machine does not inflate); ``discard``: stdout goes to
    /dev/null (out is empty)."""
    t0 = time.perf_counter()
    out = subprocess.DEVNULL if discard else subprocess.PIPE
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=out, stderr=subprocess.PIPE, env=env)
    dt = time.perf_counter() - t0
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {p.returncode}: {err[-2000:]}")

    def field(name: str) -> float:
        m = re.search(rf"{name}: ([0-9.]+)", err)
        return float(m.group(1)) if m else float("nan")

    return {
        "s": dt,
        "cpu_s": field(r"User time \(seconds\)") + field(r"System time \(seconds\)"),
        "rss_mb": field(r"Maximum resident set size \(kbytes\)") / 1024,
        "out": (p.stdout or b"").decode(errors="replace"),
    }


def measure(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MB, stdout) of one child under GNU time."""
    m = measure_cpu(cmd, env)
    return m["s"], m["rss_mb"], m["out"]


def fresh_env(store: Path) -> dict[str, str]:
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    return {**os.environ, "FORENSICS_HOME": str(store)}


# the mixes measured with these tools only (the busy and decode-only rows run every tool)
NCCL_TOOLS = ("rg", "ingest")
SIZES_TOOLS = ("rg", "duckdb", "ingest")  # --sizes: how each one's cost grows
HEAD_LINES = 1000  # the fixed costs' ingest: the busy mix's first lines

# what no work on the file removes, measured in the busy mix's rounds: name -> (what, command
# for the round's small file, the first HEAD_LINES lines of the log)
FLOORS: list[tuple[str, str, Callable[[Path], list[str]]]] = [
    (
        "py_duckdb",
        "Python's start and `import duckdb` (DuckDB's floor)",
        lambda p: [sys.executable, "-c", "import duckdb"],
    ),
    (
        "py_polars",
        "Python's start and `import polars`",
        lambda p: [sys.executable, "-c", "import polars"],
    ),
    (
        "ingest_head",
        f"`forensics ingest` of the log's first {HEAD_LINES:,} lines (ingest's floor: start, "
        "imports, store, verdicts, commit)",
        lambda p: [sys.executable, "-m", "forensics", "ingest", str(p)],
    ),
]


def bench_file(log: Path, env_store: Path, repeat: int = 3, only: tuple[str, ...] = ()) -> dict:
    """Every tool on ``log`` (``only``: those tools), ``repeat`` rounds (each round runs every
    tool once, so a spell of load touches all of them alike); each tool's figure is the median
    of its rounds, its peak RSS the highest."""
    size_mb = log.stat().st_size / (1 << 20)
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm cache
    row: dict = {"file_mb": round(size_mb, 1), "tools": {}, "rounds": repeat}
    tools = [t for t in TOOLS if not only or t[0] in only]
    head = None
    if not only:  # the fixed costs beside the tools (the full table's rows)
        head = env_store.parent / f"{log.stem}_head.log"
        with log.open("rb") as f, head.open("wb") as out:
            out.writelines(f.readline() for _ in range(HEAD_LINES))
        tools += [(name, what, lambda _p, c=cmd: c(head)) for name, what, cmd in FLOORS]
    times: dict[str, list[float]] = {name: [] for name, _, _ in tools}
    rss: dict[str, float] = {}
    again_s: list[float] = []
    for _ in range(repeat):
        for name, _, cmd in tools:
            env = fresh_env(env_store)
            dt, mb, out = measure(cmd(log), env)
            times[name].append(dt)
            rss[name] = max(rss.get(name, 0.0), mb)
            if name == "ingest":
                s = json.loads(out)
                row["lines"], row["decode_lines"] = s["lines_total"], s["decode_lines"]
                row["prefill_lines"] = s["prefill_lines"]
                row["unprefixed_lines"] = s["lines_by_kind"].get("unknown_bare", 0)
                t_re, _, again = measure(cmd(log), env)
                assert json.loads(again)["files_by_status"] == {"unchanged": 1}
                again_s.append(t_re)
    for name, ts in times.items():
        dt = statistics.median(ts)
        row["tools"][name] = {
            "s": round(dt, 3),
            "mb_s": round(size_mb / dt, 1),
            "rss_mb": round(rss[name]),
            "runs_s": [round(t, 3) for t in ts],
        }
    row["reingest_unchanged_s"] = round(statistics.median(again_s), 3)
    if head is not None:
        head.unlink()
        row["floors"] = {name: row["tools"].pop(name) for name, _, _ in FLOORS}
    rg = row["tools"]["rg"]["s"]
    for t in row["tools"].values():
        t["x_rg"] = round(rg / t["s"], 2)
    return row


class _Loopback:
    """A loopback sshd (forensics.localsshd) with ``hosts`` host entries, and N copies of a
    log: as hard links (one per host entry: N sources in the store) and as real local files
    (local hard links would be one file, ingested once). Each entry has a known_hosts file
    of its own, so each is a connection of its own, as N real hosts are (entries that differ
    only by name share one connection: until the eleventh stop the N "hosts" were N streams
    of one connection, one SFTP session and one transport thread)."""

    def __init__(self, log: Path, store: Path, hosts: int):
        from forensics.localsshd import local_sshd

        self.log, self.store, self.hosts = log, store, hosts
        d = OUT / "sshd"
        shutil.rmtree(d, ignore_errors=True)
        self.sshd = local_sshd(d)
        self.toml = self.sshd.entries(d, hosts)
        self.copies: list[Path] = []
        self.plain: list[Path] = []

    def ssh(self) -> list[str]:
        s = self.sshd
        cmd = ["ssh", "-p", str(s.port), "-i", s.identity_file, "-o", "BatchMode=yes"]
        return [*cmd, "-o", f"UserKnownHostsFile={s.known_hosts}", f"{s.user}@{s.host}"]

    def env(self) -> dict[str, str]:
        env = fresh_env(self.store)
        (self.store / "config.toml").write_text(self.toml)
        return env

    def make_copies(self) -> None:
        for i in range(self.hosts):
            c = OUT / f"host{i}-{self.log.name}"
            c.unlink(missing_ok=True)
            os.link(self.log, c)
            self.copies.append(c)
            self.plain.append(OUT / f"local{i}-{self.log.name}")
            shutil.copyfile(self.log, self.plain[-1])

    def names(self, where: str, n: int) -> list[str]:
        if where == "hosts":
            return [f"bench{i}:{c}" for i, c in enumerate(self.copies[:n])]
        return [str(c) for c in self.plain[:n]]

    def host_cpu(self) -> float:
        """CPU seconds the sshd spent (its own and its sessions' once they ended: sshd, the
        shells, ``head``, ``zstd``): what the host side of an ingest costs, on the same cores
        here. Read when it stops moving (a session is reaped a moment after its client)."""
        assert self.sshd.proc is not None
        stat = Path(f"/proc/{self.sshd.proc.pid}/stat")
        ticks = os.sysconf("SC_CLK_TCK")
        last, deadline = -1.0, time.monotonic() + 3
        while time.monotonic() < deadline:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            now = sum(int(x) for x in fields[11:15]) / ticks  # utime stime cutime cstime
            if now == last:
                break
            last = now
            time.sleep(0.15)
        return last

    def ingest(self, names: list[str], jobs: int | None) -> dict:
        """One ingest of ``names`` in a fresh store (``jobs``: --jobs, None: the default);
        ``host_cpu_s``: the sshd's CPU meanwhile."""
        cmd = [sys.executable, "-m", "forensics", "ingest", "--json"]
        cmd += ["--jobs", str(jobs)] if jobs else []
        env = self.env()
        before = self.host_cpu()
        m = measure_cpu([*cmd, *names], env)
        summary = json.loads(m["out"])["files_by_status"]
        assert summary == {"new": len(names)}, summary
        return {
            "s": round(m["s"], 3),
            "cpu_s": m["cpu_s"],
            "host_cpu_s": round(self.host_cpu() - before, 2),
            "rss_mb": round(m["rss_mb"]),
        }

    def close(self) -> None:
        for c in self.copies + self.plain:
            c.unlink(missing_ok=True)
        self.sshd.stop()


def bench_remote(log: Path, store: Path, hosts: int, repeat: int = 3) -> dict:
    """Ingest over a loopback sshd started here; ``ssh cat`` of the same file beside it, and
    the same N copies ingested as local paths (what N files cost without the network), each
    N-file ingest serial (``--jobs 1``) and parallel (``--jobs`` default: the cores)."""
    res: dict = {"hosts": hosts, "cores": os.cpu_count(), "rounds": repeat}
    lb = _Loopback(log, store, hosts)
    try:
        env = lb.env()
        for how in ("sftp", "stream"):  # the transfer alone, no parse
            m = measure_cpu(_self(how)(f"bench0:{log}"), env)
            assert int(m["out"]) == log.stat().st_size, m["out"]
            res[f"{how}_read_s"] = round(m["s"], 3)
        # one host against what it is compared with: ``repeat`` rounds, each runs the three
        # once (a spell of load touches all alike); each figure the median of its rounds
        rounds: dict[str, list[dict]] = {"ssh_cat": [], "local": [], "remote": []}
        for _ in range(repeat):
            before = lb.host_cpu()
            cat = measure_cpu([*lb.ssh(), "cat", str(log)], os.environ.copy(), discard=True)
            rounds["ssh_cat"].append({**cat, "host_cpu_s": lb.host_cpu() - before})
            rounds["local"].append(lb.ingest([str(log)], None))
            rounds["remote"].append(lb.ingest([f"bench0:{log}"], None))
        for key, runs in rounds.items():
            key = key if key == "ssh_cat" else f"{key}_ingest"
            for field in ("s", "cpu_s", "host_cpu_s", "rss_mb"):
                res[f"{key}_{field}"] = round(statistics.median(r[field] for r in runs), 3)
            res[f"{key}_runs_s"] = [round(r["s"], 3) for r in runs]
        lb.make_copies()
        for key in ("hosts", "local_copies"):
            for jobs, tag in ((1, "_serial"), (None, "")):
                m = lb.ingest(lb.names(key, hosts), jobs)
                for field in ("s", "cpu_s", "host_cpu_s", "rss_mb"):
                    res[f"{key}{tag}_ingest_{field}"] = m[field]
    finally:
        lb.close()
    return res


def bench_scaling(log: Path, store: Path, counts: list[int]) -> list[dict]:
    """Ingest of 1, 2, 4, 8 ... copies of ``log``, local and over the loopback sshd, serial
    (``--jobs 1``) and parallel (default ``--jobs``), each in a fresh store."""
    lb = _Loopback(log, store, max(counts))
    rows = []
    try:
        lb.make_copies()
        for n in counts:
            row: dict = {"files": n}
            for where in ("local_copies", "hosts"):
                for jobs, tag in ((1, "serial"), (None, "parallel")):
                    row[f"{where}_{tag}"] = lb.ingest(lb.names(where, n), jobs)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        lb.close()
    return rows


def render_scaling(rows: list[dict], mb: int) -> list[str]:
    one = rows[0]
    lines = [
        f"| files ({mb} MB each) | local, `--jobs 1` | local, parallel | over the loopback sshd, "
        "`--jobs 1` | over the sshd, parallel |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        cells = []
        for key in (
            "local_copies_serial",
            "local_copies_parallel",
            "hosts_serial",
            "hosts_parallel",
        ):
            m, base = r[key], one[key]
            cells.append(
                f"{m['s']:.2f} s wall ({m['s'] / base['s']:.1f}× 1 file), {m['cpu_s']:.2f} s CPU, "
                f"{m['rss_mb']} MB"
            )
        lines.append(f"| {r['files']} | " + " | ".join(cells) + " |")
    return lines


def render(res: dict) -> str:
    busy, dec = res["rows"]["busy"], res["rows"]["decode-only"]
    lines = [
        f"Command: `{res['command']}` — {res['cores']} cores, load average "
        f"{res['load_before']} before and {res['load_after']} after (1/5/15 min; the machine is "
        "shared: compare the ratios, measured in the same run on the same file). Each local figure "
        f"is the median of {busy['rounds']} rounds, every tool run once per round.",
        "",
        f"Realistic mix (`busy`): {MIXES['busy'][0]}. {busy['file_mb']} MB, {busy['lines']:,} lines, "
        f"{busy['decode_lines']:,} decode, {busy['prefill_lines']:,} prefill. Decode-only: "
        f"{dec['file_mb']} MB, {dec['lines']:,} lines.",
        "",
        "| tool, same file | busy mix: time | MB/s | × rg | peak RSS | decode-only: time | MB/s | × rg | peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, what, _ in TOOLS:
        a, b = busy["tools"][name], dec["tools"][name]
        lines.append(
            f"| {what} | {a['s']:.2f} s | {a['mb_s']:.0f} | {a['x_rg']:.2f} | {a['rss_mb']} MB "
            f"| {b['s']:.2f} s | {b['mb_s']:.0f} | {b['x_rg']:.2f} | {b['rss_mb']} MB |"
        )
    lines += ["", *render_floors(busy)]
    lines += [
        "",
        f"Re-ingest of the unchanged file: {busy['reingest_unchanged_s']:.3f} s (busy), "
        f"{dec['reingest_unchanged_s']:.3f} s (decode-only). `forensics --help`: "
        f"{res['help_s']:.3f} s (best of 5).",
    ]
    lines += ["", *render_nccl(res["rows"])]
    r = res.get("remote")
    if r:
        lines += ["", *render_remote(r)]
    return "\n".join(lines)


def render_floors(busy: dict) -> list[str]:
    """The fixed costs measured in the busy mix's rounds, and each tool's time beyond its own."""
    tools, floors = busy["tools"], busy.get("floors")
    if not floors:
        return []
    ing, duck = tools["ingest"]["s"], tools["duckdb"]["s"]
    out = [
        "What no work on the file removes, in the same rounds (medians):",
        "",
        "| fixed cost | time | peak RSS |",
        "| --- | --- | --- |",
    ]
    out += [
        f"| {what} | {floors[name]['s']:.2f} s | {floors[name]['rss_mb']} MB |"
        for name, what, _ in FLOORS
    ]
    out += [
        "",
        f"Ingest runs at {duck / ing:.2f}× DuckDB's speed; beyond each one's floor, ingest "
        f"{ing - floors['ingest_head']['s']:.2f} s and DuckDB "
        f"{duck - floors['py_duckdb']['s']:.2f} s for the {busy['file_mb']:.0f} MB.",
    ]
    return out


def render_nccl(rows: dict) -> list[str]:
    """The NCCL_DEBUG=INFO mixes: ripgrep and ingest, same run."""
    out = [
        "Logs with NCCL_DEBUG=INFO output (lines without SGLang's prefix), same run, "
        + " and ".join(f"`{m}`: {MIXES[m][0]}" for m in NCCL_MIXES)
        + ".",
        "",
        "| mix | size | lines | unprefixed, no rule | rg | ingest | MB/s | × rg | ingest peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mix in NCCL_MIXES:
        r = rows[mix]
        rg, ing = r["tools"]["rg"], r["tools"]["ingest"]
        out.append(
            f"| `{mix}` | {r['file_mb']} MB | {r['lines']:,} | {r['unprefixed_lines']:,} | "
            f"{rg['s']:.2f} s | {ing['s']:.2f} s | {ing['mb_s']:.0f} | {ing['x_rg']:.2f} | "
            f"{ing['rss_mb']} MB |"
        )
    return out


def render_remote(r: dict) -> list[str]:
    local = r["local_ingest_s"]
    bound = max(local, r["ssh_cat_s"])
    n, cores = r["hosts"], r["cores"]

    def row(what: str, key: str, extra: str = "") -> str:
        s, cpu, host = r[f"{key}_ingest_s"], r[f"{key}_ingest_cpu_s"], r[f"{key}_ingest_host_cpu_s"]
        floor = (cpu + host) / cores
        return (
            f"| {what} | {s:.2f} s | {cpu:.2f} s | {host:.2f} s | {floor:.2f} s "
            f"({s / floor:.2f}×) | {s / bound:.2f}{extra} | {r[f'{key}_ingest_rss_mb']:.0f} MB |"
        )

    runs = ", ".join(
        f"{what} {' / '.join(f'{x:.2f}' for x in r[f'{key}_runs_s'])} s"
        for what, key in (
            ("ssh cat", "ssh_cat"),
            ("local ingest", "local_ingest"),
            ("remote ingest", "remote_ingest"),
        )
    )
    return [
        f"Remote, busy mix, over a loopback sshd started by the benchmark (its sessions, "
        f"`zstd` and the shells run on the same {cores} cores as the ingest). The transfer "
        f"alone (no parse): `ssh HOST cat FILE >/dev/null` {r['ssh_cat_s']:.2f} s; "
        f"forensics' log source (the stream ingest reads, forensics/logsource.py) "
        f"{r['stream_read_s']:.2f} s; SFTP reads chunk after chunk {r['sftp_read_s']:.2f} s. "
        f"Local ingest of the same file: {local:.2f} s ({r['local_ingest_cpu_s']:.2f} s CPU). "
        f"`ssh cat`, local and remote ingest of one file are the median of {r['rounds']} rounds "
        f"(each round runs the three once; {runs}); the {n}-file rows are one run each.",
        "",
        "| ingest | wall | CPU here (user + sys) | CPU on the host (sshd, its shells, "
        f"`zstd`) | floor: all that CPU ÷ {cores} cores (wall ÷ floor) "
        "| wall × max(local ingest, ssh cat) | peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        row("`forensics ingest bench0:FILE`", "remote"),
        row("`forensics ingest FILE` (local)", "local"),
        *(
            row(
                f"`forensics ingest{flag}` of {n} hosts (host entries of one sshd, each its own "
                f"connection, one copy each), {how}",
                f"hosts{tag}",
                f" ({r[f'hosts{tag}_ingest_s'] / r['remote_ingest_s']:.2f} × one host)",
            )
            for tag, flag, how in PARALLEL
        ),
        *(
            row(
                f"`forensics ingest{flag}` of the same {n} copies as local files, {how}",
                f"local_copies{tag}",
                f" ({r[f'local_copies{tag}_ingest_s'] / local:.2f} × one file)",
            )
            for tag, flag, how in PARALLEL
        ),
    ]


# (key suffix, flag shown, what) of the serial and parallel N-file rows
PARALLEL = (("_serial", " --jobs 1", "serial"), ("", "", "parallel (--jobs: the cores)"))


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    if BEGIN not in doc:
        raise SystemExit(f"{DOCS}: no {BEGIN} marker")
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    DOCS.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def warm_bytecode() -> None:
    """Compile the package's modules, as the page cache is warmed: an installed package has
    its .pyc files (pip writes them), while a checkout run with PYTHONDONTWRITEBYTECODE=1
    compiles every module it imports from source in each measured process (~0.15 s CPU per
    ingest on the development machine)."""
    for package in ("forensics", "parsers"):
        compileall.compile_dir(ROOT / package, quiet=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=100, help="size of each generated log (MB)")
    ap.add_argument("--keep", action="store_true", help="keep the generated logs")
    ap.add_argument("--no-remote", action="store_true", help="skip the loopback sshd rows")
    ap.add_argument("--hosts", type=int, default=8, help="host entries for the N-host figure")
    ap.add_argument(
        "--only-remote",
        action="store_true",
        help="only the loopback sshd rows (with the local ingest they compare to); prints them",
    )
    ap.add_argument(
        "--scaling",
        type=int,
        nargs="+",
        metavar="N",
        help="only ingest of N copies (e.g. 1 2 4 8), local and over the loopback sshd, "
        "serial (--jobs 1) and parallel; prints the table",
    )
    ap.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="MB",
        help="only rg, DuckDB and ingest of the busy mix at each size (e.g. 10 100 1000); prints the table",
    )
    ap.add_argument(
        "--repeat", type=int, default=3, help="rounds of the local tools (each figure: the median)"
    )
    ap.add_argument("--write-docs", action="store_true", help="update docs/performance.md")
    ap.add_argument("--tool", nargs=2, metavar=("NAME", "FILE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tool:
        print(IN_PROCESS[args.tool[0]](args.tool[1]))
        return 0
    # a kill runs the `finally`s: the loopback sshd never outlives the benchmark
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not shutil.which("rg"):
        raise SystemExit("rg: not found (install ripgrep: apt-get install ripgrep)")
    OUT.mkdir(exist_ok=True)
    warm_bytecode()
    store = OUT / "store"
    cmd = "python scripts/bench_ingest.py" + (f" --mb {args.mb}" if args.mb != 100 else "")
    cmd += f" --repeat {args.repeat}" if args.repeat != 3 else ""
    res: dict = {
        "command": cmd + (" --no-remote" if args.no_remote else ""),
        "cores": os.cpu_count(),
        "load_before": " / ".join(f"{x:.1f}" for x in os.getloadavg()),
        "rows": {},
    }
    if args.scaling:
        return _main_scaling(args, cmd, res)
    if args.sizes:
        return _main_sizes(args, cmd, res)
    if args.only_remote:
        log = OUT / f"bench_busy_{args.mb}mb.log"
        if not log.exists() or log.stat().st_size < (args.mb << 20):
            generate(log, args.mb, "busy")
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm cache
        load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        r = bench_remote(log, store, args.hosts, args.repeat)
        (OUT / "ingest-remote.json").write_text(json.dumps(r, indent=2))
        after = " / ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"`{cmd} --only-remote`: {res['cores']} cores, load {load} before, {after} after")
        print("\n".join(render_remote(r)))
        if not args.keep:
            log.unlink()
        shutil.rmtree(store, ignore_errors=True)
        return 0
    logs = {}
    for mix in MIXES:
        log = OUT / f"bench_{mix}_{args.mb}mb.log"
        if not log.exists() or log.stat().st_size < (args.mb << 20):
            print(f"generating {log} ...", file=sys.stderr, flush=True)
            generate(log, args.mb, mix)
        logs[mix] = log
        only = NCCL_TOOLS if mix in NCCL_MIXES else ()
        res["rows"][mix] = bench_file(log, store, args.repeat, only)
    fx = [sys.executable, "-m", "forensics", "--help"]
    res["help_s"] = round(min(measure(fx, os.environ.copy())[0] for _ in range(5)), 3)
    if not args.no_remote:
        res["remote"] = bench_remote(logs["busy"], store, args.hosts, args.repeat)
    res["load_after"] = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    (OUT / "ingest.json").write_text(json.dumps(res, indent=2))
    text = render(res)
    print(text)
    if args.write_docs:
        write_docs(text)
    if not args.keep:
        for log in logs.values():
            log.unlink()
    shutil.rmtree(store, ignore_errors=True)
    return 0


def _headline(cmd: str, flag: str, values: list[int], res: dict) -> str:
    """The command of a ``--scaling``/``--sizes`` run, the cores and the load before and now."""
    after = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    given = " ".join(map(str, values))
    return (
        f"`{cmd} {flag} {given}`: {res['cores']} cores, load {res['load_before']} before, "
        f"{after} after"
    )


def _main_scaling(args: argparse.Namespace, cmd: str, res: dict) -> int:
    log = OUT / f"bench_busy_{args.mb}mb.log"
    if not log.exists() or log.stat().st_size < (args.mb << 20):
        generate(log, args.mb, "busy")
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm cache
    store = OUT / "store"
    rows = bench_scaling(log, store, args.scaling)
    (OUT / "ingest-scaling.json").write_text(json.dumps(rows, indent=2))
    print(_headline(cmd, "--scaling", args.scaling, res))
    print("\n".join(render_scaling(rows, args.mb)))
    if not args.keep:
        log.unlink()
    shutil.rmtree(store, ignore_errors=True)
    return 0


def _main_sizes(args: argparse.Namespace, cmd: str, res: dict) -> int:
    """How ingest's cost grows with the log's size: the busy mix at each of ``args.sizes`` MB,
    rg, DuckDB and ingest in the same rounds (``bench_file``), one table."""
    lines = [
        "| busy mix | lines | rg | DuckDB | ingest | MB/s | × rg | × DuckDB | ingest per MB "
        "| ingest peak RSS |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mb in args.sizes:
        log = OUT / f"bench_busy_{mb}mb.log"
        if not log.exists() or log.stat().st_size < (mb << 20):
            print(f"generating {log} ...", file=sys.stderr, flush=True)
            generate(log, mb, "busy")
        r = bench_file(log, OUT / "store", args.repeat, SIZES_TOOLS)
        res["rows"][f"busy_{mb}"] = r
        rg, duck, ing = (r["tools"][t] for t in SIZES_TOOLS)
        lines.append(
            f"| {r['file_mb']:.0f} MB | {r['lines']:,} | {rg['s']:.2f} s | {duck['s']:.2f} s | "
            f"{ing['s']:.2f} s | {ing['mb_s']:.0f} | {ing['x_rg']:.2f} | "
            f"{duck['s'] / ing['s']:.2f} | {1000 * ing['s'] / r['file_mb']:.1f} ms | "
            f"{ing['rss_mb']} MB |"
        )
        if not args.keep:
            log.unlink()
    (OUT / "ingest-sizes.json").write_text(json.dumps(res, indent=2))
    print(_headline(cmd, "--sizes", args.sizes, res) + f"; each the median of {args.repeat} rounds")
    print("\n".join(lines))
    shutil.rmtree(OUT / "store", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
