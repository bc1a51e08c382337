"""Evaluation set for the phase classifier, from a generator the corpus never saw.

``forensics/data/corpus`` is built from templates by ``scripts/gen_corpus.py``; this script runs the
simulated SGLang server (``forensics.sim``) instead, which prints the real log layouts of styles
0.4.6 / 0.5.9 / 0.5.23 while it really starts, serves, fails and hangs. Every failure mode x
style x tp in {1, 4}, the healthy runs (served then SIGTERM, served then the log simply ends) and
bad command lines go to ``fixtures/eval_sim/`` with ``labels.csv`` (path, phase, hung,
signature). Timestamps are shifted to a fixed base so reruns differ only in measured timings.

``--eval`` measures the classifier (trained only on ``forensics/data/corpus``) on these logs, on
messy variants derived from them in memory (``messy_variants``: fragments, traceback-only
excerpts, fork/container prefixes, ANSI, CRLF, cut lines, interleaved ranks), on the top-level
hand-written fixtures and on the real H200 error texts wrapped as scheduler tracebacks.

    .venv/bin/python scripts/gen_eval_sim.py            # regenerate fixtures/eval_sim/
    .venv/bin/python scripts/gen_eval_sim.py --eval     # the figures in docs/diagnose.md
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "fixtures" / "eval_sim"
STYLES = ("0.4.6", "0.5.9", "0.5.23")
TPS = (1, 4)
SPEED = "3000"
READY = "The server is fired up and ready to roll!"
BASE = dt.datetime(2026, 3, 2, 9, 0, 0)

# name -> (sim flags, action, phase, hung, signature)
#   action: exit (wait until it exits), serve_term (serve, then SIGTERM), serve_cut (serve, then
#   the log just ends: SIGKILL), request (send traffic until it dies), stall (kill it once the log
#   has been quiet a while: the log ends mid-stage)
SCENARIOS: dict[str, tuple[list[str], str, str, bool, str]] = {
    "ok_term": ([], "serve_term", "ok", False, ""),
    "ok_cut": ([], "serve_cut", "ok", False, ""),
    "load_oom": (["--sim-fail", "load-oom"], "exit", "load", False, "weight_load_oom"),
    "kv_oom": (["--sim-fail", "kv-oom"], "exit", "load", False, "kv_pool_oom"),
    "capture_oom": (["--sim-fail", "capture-oom"], "exit", "capture", False, "capture_failed"),
    "capture_error": (["--sim-fail", "capture-error"], "exit", "capture", False, "capture_failed"),
    "runtime_ima": (
        ["--sim-fail", "runtime-ima", "--sim-fail-after", "3"],
        "request",
        "runtime",
        False,
        "illegal_memory_access",
    ),
    "runtime_nccl": (
        ["--sim-fail", "runtime-nccl-timeout", "--sim-fail-after", "3"],
        "request",
        "runtime",
        True,
        "nccl_timeout|watchdog_timeout",
    ),
    "port_in_use": (["--sim-fail", "port-in-use"], "exit", "cleanup", False, "port_in_use"),
    "hang_load": (["--sim-hang", "load"], "stall", "load", True, "stalled_load"),
    "hang_capture": (["--sim-hang", "capture"], "stall", "capture", True, "stalled_capture"),
    "hang_runtime": (
        ["--sim-hang", "runtime", "--sim-fail-after", "3"],
        "request",
        "runtime",
        True,
        "watchdog_timeout",
    ),
    "bad_flag": (["--no-such-flag", "1"], "exit", "pre-exec", False, "arg_error"),
    "topk_no_steps": (
        ["--speculative-algorithm", "EAGLE3", "--speculative-eagle-topk", "4"],
        "exit",
        "pre-exec",
        False,
        "invalid_server_args",
    ),
}
SPEC = [
    "--speculative-algorithm",
    "EAGLE3",
    "--speculative-draft-model-path",
    "/data/eagle3/draft",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _wait_for(path: Path, proc: subprocess.Popen, text: str, deadline: float) -> bool:
    while time.monotonic() < deadline:
        if text in _read(path):
            return True
        if proc.poll() is not None:
            return text in _read(path)
        time.sleep(0.02)
    return False


def _generate(port: int, n_tokens: int = 48) -> None:
    body = json.dumps(
        {"text": "The capital of France is", "sampling_params": {"max_new_tokens": n_tokens}}
    ).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/generate",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()
    except OSError:
        pass


def _stop(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _quiet(path: Path, proc: subprocess.Popen, quiet_s: float, deadline: float) -> None:
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline and proc.poll() is None:
        size = path.stat().st_size if path.exists() else 0
        if size != last:
            last, since = size, time.monotonic()
        elif time.monotonic() - since > quiet_s:
            return
        time.sleep(0.05)


def run_one(name: str, style: str, tp: int, tmp: Path) -> tuple[Path, int]:
    flags, action, *_ = SCENARIOS[name]
    port = _free_port()
    spec = SPEC if name not in ("bad_flag", "topk_no_steps") else []
    model = "sim://llama-3.1-8b" if tp == 1 else "sim://qwen3-235b-a22b"
    cmd = [
        sys.executable,
        "-m",
        "forensics.sim",
        "--model-path",
        model,
        "--tp",
        str(tp),
        "--port",
        str(port),
        "--sim-style",
        style,
        "--sim-speed",
        SPEED,
        "--sim-seed",
        "7",
        "--sim-base-tok-s",
        "3000",
        "--decode-log-interval",
        "8",
        "--watchdog-timeout",
        "300",
        *spec,
        *flags,
    ]
    log = tmp / f"{name}-{style.replace('.', '')}-tp{tp}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
    deadline = time.monotonic() + 60
    try:
        if action == "exit":
            proc.wait(timeout=60)
        elif action == "stall":
            _quiet(log, proc, 1.0, deadline)
            _stop(proc, signal.SIGKILL)
        elif action in ("serve_term", "serve_cut"):
            if _wait_for(log, proc, READY, deadline):
                for n in (40, 24, 64):
                    _generate(port, n)
                time.sleep(0.3)
            _stop(proc, signal.SIGTERM if action == "serve_term" else signal.SIGKILL)
        elif action == "request":
            if _wait_for(log, proc, READY, deadline):
                while proc.poll() is None and time.monotonic() < deadline:
                    _generate(port, 16)
            proc.wait(timeout=30)
    finally:
        _stop(proc, signal.SIGKILL)
    return log, port


_TS = re.compile(r"\b(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
_GLOG_TS = re.compile(r"\[E\d{4} \d\d:\d\d:\d\d\.\d+ ")
_VOLATILE = [  # run-specific numbers that would make every regeneration differ
    (re.compile(r"(process \[)\d+(\])"), r"\g<1>4242\2"),
    (re.compile(r"(127\.0\.0\.1:)\d{4,5}( - )"), r"\g<1>51610\2"),
    (re.compile(r"(rid=|rid': ')[0-9a-f]{32}"), r"\g<1>4a23d5962217beaddbc496cb8e81973e"),
]


def normalise(text: str, base: dt.datetime) -> str:
    """Shift every timestamp so the first one is ``base`` (reruns then differ only in timings)."""
    m = _TS.search(text)
    if not m:
        return text
    first = dt.datetime.fromisoformat(m.group(1).replace("T", " "))
    delta = base - first

    def sub(mm: re.Match[str]) -> str:
        t = dt.datetime.fromisoformat(mm.group(1).replace("T", " ")) + delta
        sep = "T" if "T" in mm.group(1) else " "
        return t.strftime(f"%Y-%m-%d{sep}%H:%M:%S")

    text = _TS.sub(sub, text)
    text = _GLOG_TS.sub(base.strftime("[E%m%d %H:%M:%S.000000000 "), text)
    for rx, rep in _VOLATILE:
        text = rx.sub(rep, text)
    return text


def generate(out: Path = OUT, *, jobs: int = 8) -> list[dict[str, str]]:
    import tempfile

    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.log"):
        old.unlink()
    todo = [(n, s, tp) for n in SCENARIOS for s in STYLES for tp in TPS]
    rows = []
    with tempfile.TemporaryDirectory() as td, ThreadPoolExecutor(jobs) as ex:
        logs = list(ex.map(lambda t: run_one(*t, Path(td)), todo))
        for i, ((name, style, tp), (log, port)) in enumerate(zip(todo, logs, strict=True)):
            text = re.sub(rf"\b{port}\b", "30000", _read(log))
            text = normalise(text, BASE + dt.timedelta(hours=i))
            (out / log.name).write_text(text)
            _, _, phase, hung, sig = SCENARIOS[name]
            rows.append(
                {
                    "path": log.name,
                    "phase": phase,
                    "hung": "true" if hung else "false",
                    "signature": sig,
                    "scenario": name,
                    "style": style,
                    "tp": str(tp),
                }
            )
    with open(out / "labels.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


# --------------------------------------------------------------------------------------
# Messy variants (derived in memory, never stored)
# --------------------------------------------------------------------------------------
_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)?(?: (?P<tag>[^\]]+))?\] (?P<msg>.*)$"
)
_TB_HEAD = re.compile(r"Traceback \(most recent call last\)")
_LOGGERS = [  # (message start, logger name, source file) for the fork prefixes
    ("Load weight", "sglang.srt.model_executor.model_runner", "model_runner.py"),
    ("Init torch", "sglang.srt.model_executor.model_runner", "model_runner.py"),
    ("Capture", "sglang.srt.model_executor.cuda_graph_runner", "cuda_graph_runner.py"),
    ("Scheduler hit", "sglang.srt.managers.scheduler", "scheduler.py"),
    ("Decode batch", "sglang.srt.managers.scheduler", "scheduler_metrics_mixin.py"),
    ("Prefill batch", "sglang.srt.managers.scheduler", "scheduler_metrics_mixin.py"),
    ("INFO:", "uvicorn.error", "server.py"),
    ("", "sglang.srt.entrypoints.http_server", "http_server.py"),
]


def _logger(msg: str) -> tuple[str, str]:
    for start, name, src in _LOGGERS:
        if msg.startswith(start):
            return name, src
    return _LOGGERS[-1][1], _LOGGERS[-1][2]


def _level(msg: str) -> str:
    if msg.startswith(("Scheduler hit", "ERROR")) or "Error" in msg[:40]:
        return "ERROR"
    if msg.startswith("WARNING") or "watchdog" in msg.lower():
        return "WARNING"
    return "INFO"


def _reprefix(lines: list[str], style: str, rng) -> list[str]:
    out = []
    for i, ln in enumerate(lines):
        m = _PREFIX.match(ln)
        if not m:
            out.append(ln)
            continue
        ts, msg = m.group("ts"), m.group("msg")
        name, src = _logger(msg)
        if style == "pylog":
            out.append(f"{ts},{(i * 37) % 1000:03d} [{_level(msg)}] {name}: {msg}")
        elif style == "glog":
            pid = 4242 + (int(m.group("tag")[-1]) if (m.group("tag") or "")[-1:].isdigit() else 0)
            out.append(f"{ts} {_level(msg)} {pid} [{src}:{100 + rng.randrange(2000)}] {msg}")
        else:  # bare: the prefix stripped
            out.append(msg)
    return out


def _traceback_only(lines: list[str]) -> list[str] | None:
    start = next((i for i, ln in enumerate(lines) if _TB_HEAD.search(ln)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines):
        ln = lines[end]
        if _PREFIX.match(ln) or not ln.strip():
            # a chained traceback continues after a blank line
            nxt = next((x for x in lines[end + 1 : end + 4] if x.strip()), "")
            if not ln.strip() and (nxt.startswith("During handling") or _TB_HEAD.match(nxt)):
                end += 1
                continue
            break
        end += 1
    block = lines[start:end]
    m = _PREFIX.match(block[0])
    if m:  # keep the rank's header text, drop the startup before it
        block[0] = m.group("msg")
    return block


def _tb_blocks(lines: list[str]) -> list[tuple[int, int]]:
    out = []
    i = 0
    while i < len(lines):
        if _TB_HEAD.search(lines[i]) and _PREFIX.match(lines[i]):
            j = i + 1
            while j < len(lines) and lines[j].strip() and not _PREFIX.match(lines[j]):
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    return out


def _interleave(lines: list[str]) -> list[str] | None:
    blocks = _tb_blocks(lines)
    if len(blocks) < 2:
        return None
    (a0, a1), (b0, b1) = blocks[0], blocks[1]
    a, b = lines[a0:a1], lines[b0:b1]
    mixed = []
    for k in range(max(len(a), len(b))):
        mixed += ([a[k]] if k < len(a) else []) + ([b[k]] if k < len(b) else [])
    return lines[:a0] + mixed + lines[a1:b0] + lines[b1:]


def _cut(lines: list[str], rng) -> list[str]:
    out = []
    for ln in lines:
        if len(ln) > 30 and rng.random() < 0.05:
            ln = ln[: rng.randrange(len(ln) // 2, len(ln))]
        out.append(ln)
    if out and len(out[-1]) > 10:
        out[-1] = out[-1][: len(out[-1]) * 2 // 3]
    return out


def _ansi(lines: list[str]) -> list[str]:
    out = []
    for ln in lines:
        m = _PREFIX.match(ln)
        if m:
            ln = f"\x1b[2m[{ln[1 : m.start('msg') - 2]}]\x1b[0m {m.group('msg')}"
        if "Error" in ln or "error" in ln:
            ln = f"\x1b[31m{ln}\x1b[0m"
        out.append(ln.replace("INFO:", "\x1b[32mINFO\x1b[0m:"))
    return out


def _container(lines: list[str]) -> list[str]:
    return [f"sglang-svc-1  | {ln}" for ln in lines]


def _k8s(lines: list[str], rng) -> list[str]:
    """`kubectl logs --timestamps`: an RFC 3339 stamp before every line."""
    return [
        f"2026-03-02T09:00:{i % 60:02d}.{rng.randrange(10**9):09d}Z {ln}"
        for i, ln in enumerate(lines)
    ]


def _journald(lines: list[str]) -> list[str]:
    """`journalctl -u sglang`: syslog time, host and unit[pid] before every line."""
    return [f"Mar 02 09:00:00 gpu-node-3 python3[4242]: {ln}" for ln in lines]


def _torchrun(lines: list[str]) -> list[str]:
    """torchrun --tee: `[default0]:` before every line of the worker's output."""
    return [f"[default0]:{ln}" for ln in lines]


def _wrap(lines: list[str], width: int = 100) -> list[str]:
    """A terminal copy: long lines hard-wrapped at the screen width."""
    out = []
    for ln in lines:
        while len(ln) > width:
            out.append(ln[:width])
            ln = ln[width:]
        out.append(ln)
    return out


# name -> function(lines, rng) -> lines or None (not applicable to this log)
TRANSFORMS: dict = {
    "tail15": lambda ls, r: ls[-15:] if len(ls) > 15 else None,
    "tail40": lambda ls, r: ls[-40:] if len(ls) > 40 else None,
    "tbonly": lambda ls, r: _traceback_only(ls),
    "pylog": lambda ls, r: _reprefix(ls, "pylog", r),
    "glog": lambda ls, r: _reprefix(ls, "glog", r),
    "bare": lambda ls, r: _reprefix(ls, "bare", r),
    "container": lambda ls, r: _container(ls),
    "ansi": lambda ls, r: _ansi(ls),
    "cut": _cut,
    "interleave": lambda ls, r: _interleave(ls),
    "k8s": _k8s,
    "journald": lambda ls, r: _journald(ls),
    "torchrun": lambda ls, r: _torchrun(ls),
    "wrap": lambda ls, r: _wrap(ls),
}
# variants: chains of transforms (CRLF is applied when the text is joined)
VARIANTS: list[tuple[str, ...]] = [
    ("tail15",),
    ("tail40",),
    ("tbonly",),
    ("pylog",),
    ("glog",),
    ("bare",),
    ("container",),
    ("ansi",),
    ("crlf",),
    ("cut",),
    ("interleave",),
    ("tail40", "container"),
    ("tbonly", "pylog"),
    ("interleave", "glog", "cut"),
    ("tail15", "bare", "crlf"),
    ("k8s",),
    ("journald",),
    ("torchrun",),
    ("wrap",),
    ("tail40", "wrap"),
    ("tbonly", "k8s"),
]


def messy_variants(name: str, text: str) -> list[tuple[str, str]]:
    """(variant name, text) for every variant that applies to this log (deterministic)."""
    import random
    import zlib

    base = text.replace("\r\n", "\n").split("\n")
    while base and not base[-1]:
        base.pop()
    out = []
    for chain in VARIANTS:
        rng = random.Random(zlib.crc32(f"{name}/{'+'.join(chain)}".encode()))
        lines: list[str] | None = list(base)
        for step in chain:
            if step == "crlf" or lines is None:
                continue
            lines = TRANSFORMS[step](lines, rng)
        if lines is None or not lines:
            continue
        sep = "\r\n" if "crlf" in chain else "\n"
        out.append(("+".join(chain), sep.join(lines) + sep))
    return out


# --------------------------------------------------------------------------------------
# The other sets: hand-written fixtures, real H200 texts
# --------------------------------------------------------------------------------------
FIXTURES = ROOT / "fixtures"
# top-level fixtures -> (phase, hung, signature) of the run the log ends with
FIXTURE_LABELS: dict[str, tuple[str, bool, str]] = {
    "sglang_baseline.log": ("ok", False, ""),
    "sglang_baseline_rotated.log.gz": ("ok", False, ""),
    "sglang_eagle3_nocg_16dt.log": ("ok", False, ""),
    "sglang_eagle3_nocg_16dt_other.log": ("ok", False, ""),
    "sglang_eagle3_cg_16dt.log": ("ok", False, ""),
    "sglang_eagle3_cg_5dt.log": ("ok", False, ""),
    "sglang_eagle3_cg_3step.log": ("ok", False, ""),
    "sglang_two_launches.log": ("ok", False, ""),
    "sglang_fail_load_kv_oom.log": ("load", False, "kv_pool_oom"),
    "sglang_fail_capture.log": ("capture", False, "capture_failed"),
    "sglang_fail_runtime_ima.log": ("runtime", False, "illegal_memory_access"),
    "edge_ansi_tqdm.log": ("ok", False, ""),
    "edge_crlf.log": ("ok", False, ""),
    "edge_interleaved_ranks.log": ("runtime", False, "nccl_error"),
    "edge_container_prefix.log": ("ok", False, ""),
    "edge_pylogging_fork.log": ("ok", False, ""),
    "edge_time_only_2024.log": ("ok", False, ""),
    "edge_npu_pd.log": ("ok", False, ""),
}
EVIDENCE = Path(os.environ.get("FORENSICS_H200_EVIDENCE", ROOT / "fixtures" / "evidence"))
_SCHED = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
# where a real error text is raised: (phase, frames (file, function)) of a scheduler traceback
_WRAP_FRAMES: dict[str, list[tuple[str, str]]] = {
    "load": [
        ("managers/scheduler.py", "__init__"),
        ("managers/tp_worker.py", "__init__"),
        ("model_executor/model_runner.py", "load_model"),
        ("model_loader/loader.py", "load_weights_and_postprocess"),
    ],
    "capture": [
        ("managers/tp_worker.py", "__init__"),
        ("model_executor/model_runner.py", "init_device_graphs"),
        ("model_executor/cuda_graph_runner.py", "capture"),
        ("model_executor/cuda_graph_runner.py", "capture_one_batch_size"),
    ],
    "runtime": [
        ("managers/scheduler.py", "event_loop_normal"),
        ("managers/scheduler.py", "run_batch"),
        ("speculative/eagle_worker.py", "forward_batch_speculative_generation"),
        ("speculative/eagle_worker.py", "verify"),
    ],
}
# real text, the phase whose frames it is wrapped in (None: pasted as is), expected phase and
# signature
H200_CASES: list[tuple[str, str | None, str, str]] = [
    ("torch.cuda-oom.txt", "load", "load", "weight_load_oom"),
    ("torch.cuda-oom.txt", "capture", "capture", "capture_failed"),
    ("torch.capture-invalidated.txt", "capture", "capture", "capture_failed"),
    ("torch.capture-invalidated.txt", None, "capture", "capture_failed"),
    ("torch.device-assert.txt", "runtime", "runtime", "device_side_assert"),
    ("cupy.illegal-address.txt", "runtime", "runtime", "illegal_memory_access"),
    ("cupy.illegal-address.txt", "capture", "capture", "capture_failed"),
]


def wrap_real(text: str, phase: str, *, rank: str = "TP0") -> str:
    """A real torch/CuPy error text as SGLang's scheduler prints it from inside ``phase``.

    ``Scheduler hit an exception: `` + the formatted traceback: the scheduler's frames go on top
    of the stack of the traceback that propagated (the last of a chained group); the real text
    keeps its own frames, exception lines and anything printed after it.
    """
    lines = text.rstrip("\n").split("\n")
    heads = [i for i, ln in enumerate(lines) if _TB_HEAD.match(ln)]
    if not heads:
        heads = [0]
        lines.insert(0, "Traceback (most recent call last):")
    # the chain: tracebacks joined by "During handling..." / "The above exception was..."
    chain_end = heads[0]
    for h in heads[1:]:
        between = "\n".join(lines[chain_end:h])
        if "During handling of the above" in between or "The above exception was" in between:
            chain_end = h
        else:
            break
    frames = [f'  File "{_SCHED}/managers/scheduler.py", line 2988, in run_scheduler_process']
    for i, (f, fn) in enumerate(_WRAP_FRAMES[phase]):
        frames.append(f'  File "{_SCHED}/{f}", line {120 + 37 * i}, in {fn}')
        frames.append("    ...")
    lines[chain_end + 1 : chain_end + 1] = frames
    lines[0] = f"[2026-03-05 11:02:03 {rank}] Scheduler hit an exception: {lines[0]}"
    tail = [
        "",
        "[2026-03-05 11:02:04] Received sigquit from a child process. It usually means the "
        "child failed.",
    ]
    return "\n".join(lines + tail) + "\n"


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------
def load_labels(out: Path = OUT) -> list[dict[str, str]]:
    with open(out / "labels.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def examples(out: Path = OUT, *, messy: bool = True) -> list[dict]:
    """Every evaluation example: dict(set, name, text, phase, hung, signature)."""
    ex = []
    for r in load_labels(out):
        text = (out / r["path"]).read_text(errors="replace")
        lab = {"phase": r["phase"], "hung": r["hung"] == "true", "signature": r["signature"]}
        ex.append({"set": "sim-clean", "name": r["path"], "text": text, **lab})
        if messy:
            for v, t in messy_variants(r["path"], text):
                ex.append({"set": "sim-messy", "name": f"{r['path']}~{v}", "text": t, **lab})
    return ex


def other_examples() -> list[dict]:
    ex = []
    for name, (phase, hung, sig) in FIXTURE_LABELS.items():
        p = FIXTURES / name
        if p.exists():
            ex.append(
                {
                    "set": "fixtures",
                    "name": name,
                    "path": str(p),
                    "phase": phase,
                    "hung": hung,
                    "signature": sig,
                }
            )
    for fname, wrap, phase, sig in H200_CASES:
        p = EVIDENCE / fname
        if not p.exists():
            continue
        text = p.read_text(errors="replace")
        if wrap:
            text = wrap_real(text, wrap)
        ex.append(
            {
                "set": "h200",
                "name": f"{fname}@{wrap or 'bare'}",
                "text": text,
                "phase": phase,
                "hung": False,
                "signature": sig,
            }
        )
    return ex


def _sig_ok(expected: str, got: str | None) -> bool:
    if not expected:
        return not got
    return (got or "") in expected.split("|")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def evidence_ok(v, text: str | None = None) -> bool | None:
    """The verdict's evidence is right: every cited line is that line of the input (file:line and
    text agree) and one cited line holds the text its signature matches. None: nothing to check
    (``ok`` verdicts, no catalog signature: hangs without an error, unknown errors)."""
    from forensics import signatures as sigs

    if v is None:
        return None
    if text is not None:
        src = text.replace("\r\n", "\n").split("\n")
        for ev in v.evidence:
            line = src[ev["line"] - 1] if 0 < ev["line"] <= len(src) else ""
            want = ev["text"].strip()[:60]
            if want and want not in _ANSI.sub("", line):
                return False
    sig = sigs.BY_ID.get(v.signature or "")
    if v.phase == "ok" or sig is None:
        return None if text is None else True
    texts = [e["text"] for e in v.evidence]
    pats = list(sig.patterns + sig.framed)
    if v.signature == "capture_failed":
        pats += [re.compile(p) for c in sigs.CAPTURE_CAUSES for p in c["patterns"]]
    return any(rx.search(t) for rx in pats for t in texts)


def classify_examples(ex: list[dict], model) -> list:
    from forensics import classifier as clf

    out = []
    for e in ex:
        if "path" in e:
            vs = clf.classify_file(e["path"], model)
        else:
            vs = clf.classify_text(e["text"], model, path=e["name"])
        out.append(vs[-1] if vs else None)
    return out


def score(ex: list[dict], vs: list) -> dict:
    from forensics import classifier as clf

    y = [e["phase"] for e in ex]
    pred = [v.phase if v else "none" for v in vs]
    s = clf._scores(y, pred)
    s["hung_accuracy"] = round(
        sum((v.hung if v else False) == e["hung"] for e, v in zip(ex, vs, strict=True))
        / max(1, len(ex)),
        3,
    )
    s["signature_accuracy"] = round(
        sum(
            _sig_ok(e["signature"], v.signature if v else None) for e, v in zip(ex, vs, strict=True)
        )
        / max(1, len(ex)),
        3,
    )
    ev = [evidence_ok(v, e.get("text")) for e, v in zip(ex, vs, strict=True)]
    checked = [x for x in ev if x is not None]
    s["evidence_ok"] = round(sum(checked) / max(1, len(checked)), 3)
    s["evidence_wrong"] = [
        {"name": e["name"], "signature": v.signature, "evidence": v.evidence}
        for e, v, ok in zip(ex, vs, ev, strict=True)
        if ok is False
    ][:20]
    s["errors"] = [
        {
            "name": e["name"],
            "label": f"{e['phase']}{'/hung' if e['hung'] else ''} {e['signature']}",
            "got": f"{v.phase}{'/hung' if v.hung else ''} {v.signature}" if v else "no run",
        }
        for e, v in zip(ex, vs, strict=True)
        if not v
        or v.phase != e["phase"]
        or v.hung != e["hung"]
        or not _sig_ok(e["signature"], v.signature)
    ]
    return s


def evaluate(out: Path = OUT, *, messy: bool = True) -> dict:
    from forensics import classifier as clf

    t0 = time.monotonic()
    model = clf.train(None, include_labels=False)  # forensics/data/corpus only: nothing from here
    ex = examples(out, messy=messy) + other_examples()
    vs = classify_examples(ex, model)
    rep: dict = {"model": "trained on forensics/data/corpus only", "sets": {}}
    for name in ("sim-clean", "sim-messy", "fixtures", "h200"):
        idx = [i for i, e in enumerate(ex) if e["set"] == name]
        if idx:
            rep["sets"][name] = score([ex[i] for i in idx], [vs[i] for i in idx])
    sim = [i for i, e in enumerate(ex) if e["set"].startswith("sim")]
    rep["sets"]["sim-all"] = score([ex[i] for i in sim], [vs[i] for i in sim])
    rep["seconds"] = round(time.monotonic() - t0, 1)
    return rep


def render(rep: dict) -> str:
    from forensics.classifier import PHASES

    lines = [f"model: {rep['model']} ({rep['seconds']} s)", ""]
    lines.append(
        "| set | n | accuracy | macro-F1 | hung acc. | signature acc. | evidence cites match |"
    )
    lines.append("| --- | --- | --- | --- | --- | --- | --- |")
    for name, s in rep["sets"].items():
        lines.append(
            f"| {name} | {s['n']} | {s['accuracy']:.3f} | {s['macro_f1']:.3f} | "
            f"{s['hung_accuracy']:.3f} | {s['signature_accuracy']:.3f} | {s['evidence_ok']:.3f} |"
        )
    s = rep["sets"]["sim-all"]
    lines += [
        "",
        "per phase (sim clean + messy):",
        "",
        "| phase | precision | recall | F1 | support |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c, p in s["per_phase"].items():
        lines.append(
            f"| {c} | {p['precision']:.3f} | {p['recall']:.3f} | {p['f1']:.3f} | {p['support']} |"
        )
    lines += [
        "",
        "confusion (rows: label, columns: predicted):",
        "",
        "| | " + " | ".join(PHASES) + " |",
        "| --- |" + " --- |" * len(PHASES),
    ]
    for t, row in s["confusion"].items():
        lines.append(f"| {t} | " + " | ".join(str(row.get(p, 0)) for p in PHASES) + " |")
    for name, s in rep["sets"].items():
        if name == "sim-all" or not s["errors"]:
            continue
        lines += ["", f"{name}: {len(s['errors'])} wrong (phase, hung or signature):"]
        lines += [f"  {e['name']}: want {e['label']}, got {e['got']}" for e in s["errors"][:40]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", action="store_true", help="measure the classifier on the set")
    ap.add_argument("--json", action="store_true", help="with --eval: print all figures as JSON")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.eval:
        rep = evaluate(args.out)
        print(json.dumps(rep, indent=1) if args.json else render(rep))
        return 0
    t0 = time.monotonic()
    rows = generate(args.out)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{len(rows)} logs, {size / 1e6:.2f} MB in {args.out} ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
