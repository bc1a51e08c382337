"""Phase classifier: in which phase a run died (or ``ok``), whether it hung, and why.

Logic before statistics:

* **routine lines never decide**: the NOISE table of ``forensics.signatures`` (ignored import
  errors, deprecation and driver-version warnings, resource_tracker leak reports, Ascend TBE
  worker noise, Triton diagnostics, ...) and ``ROUTINE_CONTEXT`` here (text before the server's
  own output, after a shutdown request, a harness's or client's traceback, an error the server
  kept serving after);
* **an error decides only if fatal** (a traceback's exception, a fatal signature, an exit);
* **the failure is never earlier than what the log proves**: a decode/prefill line proves
  serving, a capture line that loading ended (``_floor``), per rank where ranks are tagged;
* **where on the stack** comes from ``forensics.frames`` (a table read from SGLang's own source,
  0.1.14 .. 0.5.23), and the signature catalog says what failed;
* every verdict says whether the text **decided** it; what placed it (``basis``) sets its
  confidence (``BASIS_CONFIDENCE``, measured on real logs).

Only when the text does not decide does a **scikit-learn** logistic regression (structural
tokens and character n-grams of the error text, trained on ``forensics/data/corpus`` plus the
user's ``forensics label``s) pick the likeliest phase no earlier than what the log proves; the
verdict is then ``decided: false`` with a low confidence and says what would settle it.

The model is kept as JSON (vocabularies, idf weights, coefficients, a calibration temperature):
it is retrained from the corpus in seconds when absent and cached in the store's ``models/``
folder; no pickle is ever loaded.
"""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import math
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

import forensics_parsers.sglang as sglang_parser
from forensics import frames as frames_table
from forensics import signatures as sigs
from forensics.errors import ForensicsError, InputNotFound, RunNotFound, StoreError, UsageError
from forensics.runs import CLASSIFIER_COLUMNS
from forensics.tables import LABEL_SCHEMA, VERDICT_SCHEMA  # declared with every table

PHASES = sigs.PHASES
MODEL_VERSION = 4  # 4: vectorizer settings in the JSON (numpy predictor)
CORPUS = (
    Path(__file__).resolve().parent / "data" / "corpus"
)  # package data: the labeled training set
LABELS_CSV = CORPUS / "labels.csv"
STALE_S = 300.0  # a log untouched this long while mid-stage counts as hung

# Where on the stack a traceback happened -> phase: the table of forensics/frames.py, read from
# SGLang's own source (every release wheel 0.1.14 .. 0.5.23).
FRAME_PHASES = frames_table.FRAMES

# Stage in force -> phase (the last stage line seen before the failure).
STAGE_PHASE: dict[str, str] = {
    "server_args": "load",
    "dist_init_begin": "load",
    "dist_init_end": "load",
    "load_begin": "load",
    "load_end": "load",
    "kv_pool": "load",
    "pool_end": "load",
    "capture_begin": "capture",
    "capture_progress": "capture",
    "capture_end": "capture",
    "capacity": "capture",
    "uvicorn_started": "capture",
    "warmup": "capture",
    "ready": "runtime",
    "serving": "runtime",
}
STAGE_ORDER = list(STAGE_PHASE)

# The server's life, in order: a failure is never earlier than the furthest stage the log
# proves was reached (a decode/prefill line proves serving, a capture line that loading ended).
LIFE = ("pre-exec", "load", "capture", "runtime")
# Stage reached -> the earliest phase a later failure can be in. The `server_args` line proves
# nothing more than pre-exec: some argument checks run after it is printed.
STAGE_FLOOR = {st: ph for st, ph in STAGE_PHASE.items() if st != "server_args"}
SHUTDOWN_STAGES = ("shutdown_begin", "shutdown_end")
# stages printed at the end of startup: metrics lines after them but before "ready" are the
# warm-up request's
WARMUP_AFTER = ("capture_end", "capacity", "uvicorn_started", "warmup")
CONSEQUENCE_KINDS = ("sigquit", "exit_code", "init_failed", "scheduler_dead", "subprocess_crash")
# frames of a test harness or an HTTP client, never of the server
HARNESS_FRAME = re.compile(
    r"(?:^|/)(?:unittest|_pytest|pytest|requests|urllib3|aiohttp|httpx|openai)/|/sglang/test/|"
    r"(?:^|/)test_\w*\.py$|(?:^|/)bench_serving\.py$"
)


def _later(a: str | None, b: str | None) -> str | None:
    """The later of two phases of the server's life (None counts as no constraint)."""
    if a not in LIFE:
        return b if b in LIFE else a
    if b not in LIFE:
        return a
    return a if LIFE.index(a) >= LIFE.index(b) else b


# Signature refinements by the phase the rules settled on: (signature, phase, new signature).
REFINE: list[tuple[str, str, str]] = [
    ("cuda_oom", "load", "weight_load_oom"),
    ("cuda_oom", "capture", "capture_failed"),
    ("illegal_memory_access", "capture", "capture_failed"),
    ("device_side_assert", "capture", "capture_failed"),
]
_KV_FRAMES = re.compile(r"init_memory_pool|profile_max_num_token|init_kv_cache|memory_pool")

NEXT_STEPS_OK = ["nothing failed; compare its tok/s with other runs: forensics runs"]
NEXT_STEPS_HUNG_STAGE = {
    "load": "the log stops during loading: check the host is still loading (nvidia-smi memory "
    "grows, disk reads) or stuck on the network/filesystem; check the GPUs are free",
    "capture": "the log stops during CUDA-graph capture: a stuck capture usually means a "
    "deadlock between ranks or a kernel that never returns; retry with --cuda-graph-max-bs 16 (--cuda-graph-max-bs-decode on SGLang >= 0.5.14) "
    "or --disable-cuda-graph to confirm",
    "runtime": "the server stopped making progress while serving",
    "pre-exec": "the server printed nothing after it was started",
}


# --------------------------------------------------------------------------------------
# One run's evidence
# --------------------------------------------------------------------------------------
@dataclass
class ErrorRec:
    line: int
    last_line: int
    kind: str
    component: str
    exc_type: str
    message: str
    text: str
    frames: list[tuple[str, str]]
    hits: list[sigs.Hit]
    noise: str | None
    ts: Any = None
    rank: str = ""
    routine: str | None = None  # why this line never decides (NOISE id or ROUTINE_CONTEXT id)


@dataclass
class Analysis:
    path: str
    run_index: int
    stages: list[tuple[str, str, int]]  # (stage, scope, line)
    ready_line: int | None
    served: bool
    decode_lines: int
    shutdown: bool
    errors: list[ErrorRec]
    lines: list[tuple[int, str, str]]  # (line, kind, text): the non-metrics lines
    last_line: int
    last_ts: Any
    mtime: float | None
    cause: ErrorRec | None = None
    hit: sigs.Hit | None = None
    frame_phase: str | None = None
    stage_phase: str | None = None
    rule_phase: str | None = None
    rule_hung: bool = False
    signature: str | None = None
    capture_cause: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    served_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, rank), sorted
    stage_ranks: dict[int, str] = field(default_factory=dict)  # stage line -> rank tag
    first_server_line: int | None = None  # the server's first own (tagged) line
    floor: str | None = None  # the furthest phase the log proves was reached before the cause
    decided: bool = False  # the text places the phase (else the phase is the likeliest guess)
    basis: str = ""  # what placed it (BASIS_CONFIDENCE key)
    ended: bool = False  # a line proves the process tree exited (not hung)
    proof_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, SERVING_PROOF id)
    harness_end: int | None = None  # a test harness's closing line (HARNESS_END)
    foreign: str | None = None  # a NOT_SGLANG id: the log is another server's
    host_findings: list[dict[str, Any]] = field(default_factory=list)  # cleanup evidence


def _frame_phase(frames: list[tuple[str, str]]) -> str | None:
    return frames_table.phase_of(frames)


def _view(frames_tables: dict[str, pl.DataFrame], run_index: int) -> dict[str, pl.DataFrame]:
    out = {}
    for name, df in frames_tables.items():
        if df is None or df.is_empty() or "run_index" not in df.columns:
            out[name] = pl.DataFrame()
            continue
        out[name] = df.filter(pl.col("run_index") == run_index)
    return out


def analyze(
    tables: dict[str, pl.DataFrame], run_index: int, *, path: str = "", mtime: float | None = None
) -> Analysis:
    """Rule evidence for one run, from the parser's frames (or the store's rows of that run)."""
    v = _view(tables, run_index)
    ev, er, ln, dec, runs = v["events"], v["errors"], v["lines"], v["decode"], v["runs"]
    pre = v.get("prefill", pl.DataFrame())
    stages: list[tuple[str, str, int]] = []
    stage_ranks: dict[int, str] = {}
    if not ev.is_empty():
        rk = ev["rank"] if "rank" in ev.columns else None
        for i, (st, sc, li) in enumerate(
            ev.sort("line").select("stage", "scope", "line").iter_rows()
        ):
            stages.append((st, sc or "", li))
            if rk is not None:
                stage_ranks[li] = ev.sort("line")["rank"][i] or ""
    served_lines: list[tuple[int, str]] = []
    for df in (dec, pre):
        if df is not None and not df.is_empty() and "line" in df.columns:
            ranks = df["rank"].to_list() if "rank" in df.columns else [""] * len(df)
            served_lines += [
                (int(li), r or "") for li, r in zip(df["line"].to_list(), ranks, strict=True)
            ]
    served_lines.sort()
    ready = [li for st, _, li in stages if st == "ready"]
    # metrics rows may stand for several (``n``: classify keeps them as counts, iter_analyses)
    counted = [df for df in (dec, pre) if "n" in df.columns]
    ndec = sum(int(df["n"].sum()) for df in counted) if counted else len(served_lines)
    # the server's first own line: a stage or a metrics line (what comes before it in a log
    # that shows the server starting is a harness's, pip's or a shell's)
    owned = [li for _, _, li in stages[:1]] + [li for li, _ in served_lines[:1]]
    first_server_line = min(owned) if owned else None
    lines: list[tuple[int, str, str]] = []
    if not ln.is_empty():
        lines = [
            (li, k, t or "")
            for li, k, t in ln.sort("line").select("line", "kind", "text").iter_rows()
        ]
    # a client's result printed in the log proves serving (signatures.SERVING_PROOF)
    proof = sigs.serving_proof((li, t) for li, _, t in lines)
    if proof:
        served_lines = sorted(served_lines + [(li, "") for li, _ in proof])
        ndec += len(proof)
    harness_end = next((li for li, _, t in lines if sigs.HARNESS_END.search(t.strip())), None)
    shutdown = any(st in ("shutdown_begin", "shutdown_end") for st, _, _ in stages)
    errors: list[ErrorRec] = []
    if not er.is_empty():
        for r in er.sort("line").iter_rows(named=True):
            text = r.get("text") or ""
            msg = r.get("message") or ""
            exc = r.get("exc_type") or ""
            fr = sigs.frames_of(text)
            blob = " ".join(f"{f} {fn}" for f, fn in fr)
            full = text if (exc and exc in text) or not exc else f"{text}\n{exc}: {msg}"
            hits = sigs.match(full, line=r["line"], frames=blob)
            noise = sigs.noise_kind(msg or text)
            if hits and noise not in sigs.WHOLE_LINE:
                noise = None
            errors.append(
                ErrorRec(
                    line=r["line"],
                    last_line=r.get("last_line") or r["line"],
                    kind=r.get("kind") or "",
                    component=r.get("component") or "",
                    exc_type=exc,
                    message=msg,
                    text=text,
                    frames=fr,
                    hits=hits,
                    noise=noise,
                    ts=r.get("ts"),
                    rank=r.get("rank") or "",
                )
            )
    # lines the parser kept as unknown/warning may still carry a signature (e.g. bash errors)
    for li, kind, text in lines:
        if kind in (
            "unknown",
            "uvicorn_warning",
            "generic_warning",
            "port_wait",
            "usage",
            "argparse_usage",
        ):
            if kind == "argparse_usage" and any(e.kind == "argparse_error" for e in errors):
                continue  # the usage dump before argparse's own error line: that one cites
            hits = sigs.match(text, line=li)
            if hits and not any(e.line == li for e in errors):
                noise = sigs.noise_kind(text)
                noise = noise if noise in sigs.WHOLE_LINE else None
                errors.append(ErrorRec(li, li, kind, "", "", text, text, [], hits, noise))
    errors.sort(key=lambda e: e.line)
    last_line = 0
    last_ts = None
    if not runs.is_empty():
        last_line = int(runs["last_line"].max() or 0)
        last_ts = runs["ended_at"].max()
    if served_lines:
        last_line = max(last_line, served_lines[-1][0])
    config = {}
    if not runs.is_empty():
        row = runs.row(-1, named=True)
        # the configuration the explanations use, declared once (forensics.runs)
        config = {k: row.get(k) for k in CLASSIFIER_COLUMNS}
    ready_line = min(ready) if ready else None
    # before "ready" the server sends itself a warm-up request (http_server's
    # _execute_server_warmup / _wait_and_warmup: max_new_tokens 8, fewer than the decode log
    # interval, so it prints prefill lines only): prefill lines after the startup's end with
    # no ready line and no decode line are that request, not serving
    warmup_traffic = (
        not proof
        and ready_line is None
        and bool(served_lines)
        and (dec is None or dec.is_empty())
        and any(st in WARMUP_AFTER and li < served_lines[0][0] for st, _, li in stages)
    )
    if warmup_traffic:
        ndec = 0
    if ready_line is None and ndec:
        # no ready line in the log (a fragment, a lost or cut line), but it served: decode
        # and prefill lines come after ready
        ready_line = served_lines[0][0]
    a = Analysis(
        path=path,
        run_index=run_index,
        stages=stages,
        ready_line=ready_line,
        served=ndec > 0,
        decode_lines=ndec,
        shutdown=shutdown,
        errors=errors,
        lines=lines,
        last_line=last_line,
        last_ts=last_ts,
        mtime=mtime,
        config=config,
        served_lines=served_lines,
        stage_ranks=stage_ranks,
        first_server_line=first_server_line,
        proof_lines=proof,
        harness_end=harness_end,
        foreign=None
        if any(st == "server_args" for st, _, _ in stages)
        else sigs.foreign_log(t for _, _, t in lines),
    )
    for e in a.errors:
        e.routine = _routine(a, e)
    if not stages and not served_lines:
        a.host_findings = host_evidence(lines)
    _decide(a)
    return a


# --------------------------------------------------------------------------------------
# Cleanup evidence that is not a log: nvidia-smi / fuser / ps output pasted or collected
# --------------------------------------------------------------------------------------
# findings of forensics.evidence that say a GPU is held by a process (not this server's)
HOLDER_FINDINGS = (
    "orphan-gpu-process",
    "gpu-held-by-other",
    "gpu-holder-unknown-pid",
    "gpu-device-open",
)
# SGLang's own process titles and command lines (setproctitle "sglang::scheduler_TP0", ...)
SGLANG_PROCESS = re.compile(
    r"^sglang::\w+|^\S*python[\d.]*\s+(?:-\S+\s+)*-m\s+sglang\.launch_server|^\S*sglang serve\b"
)
HELD_MIB = 1024  # GPU memory in use with no process listed (another PID namespace, a zombie)
_EVIDENCE_HINT = re.compile(r"NVIDIA-SMI|^/dev/nvidia|\bPID\b|sglang::|used_gpu_memory", re.M)


def host_evidence(lines: list[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """Who holds the GPUs, from nvidia-smi / fuser / ps output among ``lines`` (parsed by
    forensics.evidence, the collector's own parsers and findings): one finding per PID, with
    the line that shows it. SGLang processes re-parented to PID 1 are a previous server's."""
    text = "\n".join(t for _, _, t in lines)
    if not _EVIDENCE_HINT.search(text):
        return []
    from forensics import evidence as hostev

    fuser = "\n".join(t for _, _, t in lines if t.startswith("/dev/nvidia"))
    cmds = {
        "nvidia_smi": {"status": "ok", "stdout": text},
        "query_apps": {"status": "ok", "stdout": text if "used_gpu_memory" in text else ""},
        "fuser": {"status": "ok", "stdout": fuser},
        "ps": {"status": "ok", "stdout": text},
    }
    tables = hostev.tables_of(cmds)
    found = [f for f in hostev.findings_of("paste", cmds, tables) if f["id"] in HOLDER_FINDINGS]
    held = {f.get("pid") for f in found}
    ps = tables["ps"]
    for row in ps.to_dicts() if ps.height else []:
        args = row["args"] or ""
        if row["pid"] in held or not SGLANG_PROCESS.search(args):
            continue
        orphan = row["ppid"] == 1
        found.append(
            {
                "id": "orphan-sglang-process" if orphan else "sglang-process-left",
                "message": f"pid {row['pid']} is an SGLang process "
                + ("re-parented to PID 1 (its server is gone)" if orphan else "still running")
                + f": {args[:200]}",
                "pid": row["pid"],
            }
        )
        held.add(row["pid"])
    gpus = tables["gpus"]
    if not found and gpus.height and not tables["gpu_processes"].height:
        for row in gpus.to_dicts():
            if (row["memory_used_mib"] or 0) >= HELD_MIB:
                found.append(
                    {
                        "id": "gpu-memory-held",
                        "message": f"GPU {row['gpu']} has {row['memory_used_mib']} MiB in use "
                        "and no process is listed (a process of another PID namespace, or one "
                        "stuck in teardown)",
                        "pid": f"{row['memory_used_mib']}MiB",
                    }
                )
    out = []
    for f in found:
        rx = re.compile(rf"(?<![\w.]){f.get('pid')}(?![\w.])")
        li = next((li for li, _, t in lines if rx.search(t)), None)
        if li is not None:
            out.append({**f, "line": li, "text": next(t for x, _, t in lines if x == li)})
    return out


# --------------------------------------------------------------------------------------
# Lines that never decide, by where they are (the NOISE table says which texts never do)
# --------------------------------------------------------------------------------------
def _server_frames(e: ErrorRec) -> bool:
    return any(not HARNESS_FRAME.search(f) for f, _ in e.frames)


def _before_server(a: Analysis, e: ErrorRec) -> bool:
    return (
        a.first_server_line is not None
        and e.ts is None
        and e.last_line < a.first_server_line
        and not (e.frames and _server_frames(e))
    )


def _after_shutdown(a: Analysis, e: ErrorRec) -> bool:
    return any(st in SHUTDOWN_STAGES and li < e.line for st, _, li in a.stages)


def _harness(a: Analysis, e: ErrorRec) -> bool:
    return bool(e.frames) and not _server_frames(e)


def _client_after_serving(a: Analysis, e: ErrorRec) -> bool:
    return (
        bool(a.served_lines)
        and e.line > a.served_lines[0][0]
        and e.ts is None
        and not e.frames
        and not e.hits
        and e.kind not in CONSEQUENCE_KINDS
    )


def _after_harness(a: Analysis, e: ErrorRec) -> bool:
    return a.harness_end is not None and e.line > a.harness_end


def _harness_after_proof(a: Analysis, e: ErrorRec) -> bool:
    return (
        bool(a.proof_lines)
        and e.line > a.proof_lines[0][0]
        and any(HARNESS_FRAME.search(f) for f, _ in e.frames)
    )


def _kept_serving(a: Analysis, e: ErrorRec) -> bool:
    return any(li > e.last_line and (not e.rank or r == e.rank) for li, r in a.served_lines)


# Where an error-looking line never decides, whatever it says: (id, why, test), in order.
ROUTINE_CONTEXT: list[tuple[str, str, Any]] = [
    (
        "before_server",
        "printed before the server's own output (a harness, pip, a shell)",
        _before_server,
    ),
    ("after_shutdown", "printed after the server was asked to shut down", _after_shutdown),
    ("harness", "a test harness's or client's traceback (no frame of the server)", _harness),
    (
        "client_after_serving",
        "an untagged error after the server served: its client's or harness's",
        _client_after_serving,
    ),
    ("kept_serving", "the server went on serving after it (one request failed)", _kept_serving),
    ("after_harness", "printed after the test harness finished (kubectl, a shell)", _after_harness),
    (
        "harness_after_serving",
        "a traceback through a test harness after a client's results proved serving",
        _harness_after_proof,
    ),
]


def _routine(a: Analysis, e: ErrorRec) -> str | None:
    """Why ``e`` never decides the verdict (a NOISE id or a ROUTINE_CONTEXT id), else None."""
    if e.noise:
        return e.noise
    for rid, _, test in ROUTINE_CONTEXT:
        if test(a, e):
            return rid
    return None


def _is_fatal(a: Analysis, e: ErrorRec) -> bool:
    """An error decides only if fatal: a traceback's exception, a fatal signature, an exit."""
    if e.routine:
        return False
    if e.kind in CONSEQUENCE_KINDS:
        return False  # consequences: they say a child failed, not why
    if e.hits:
        return True
    if a.ready_line is not None and e.line > a.ready_line:
        # after ready, an error matters when the server stopped afterwards
        followed = any(
            x.line > e.line and x.kind in ("sigquit", "exit_code", "subprocess_crash")
            for x in a.errors
        )
        return followed or e.component != "" or e.line >= a.last_line - 40
    return (
        e.kind in ("traceback", "fatal_python", "argparse_error", "bind_error")
        or bool(e.exc_type)
        or e.kind == "generic_error"
    )


def _consequences(a: Analysis) -> list[ErrorRec]:
    return [e for e in a.errors if e.kind in CONSEQUENCE_KINDS and not e.routine]


def _stage_at(a: Analysis, line: int | None) -> str | None:
    last = None
    for st, _, li in a.stages:
        if line is not None and li > line:
            break
        if st in STAGE_PHASE:
            last = st
    if a.served and (line is None or a.ready_line is not None):
        if line is None or (a.ready_line is not None and line > a.ready_line):
            last = "serving"
    return last


def _floor(a: Analysis, line: int | None, rank: str = "") -> str | None:
    """The phase the log proves was reached before ``line`` (the whole log if None).

    A rank's failure is placed by that rank's own stages when the log has them (one rank can
    be capturing while another still loads)."""
    ranked = rank and any(a.stage_ranks.get(li) for _, _, li in a.stages)
    stages = [
        (st, li)
        for st, _, li in a.stages
        if (line is None or li < line) and (not ranked or a.stage_ranks.get(li, "") in ("", rank))
    ]
    # the stage in force (the last one), not the furthest: an EAGLE/MTP draft model loads
    # after the target's graphs were captured, and that is loading again
    placed = [STAGE_FLOOR[st] for st, _ in stages if st in STAGE_FLOOR]
    out = placed[-1] if placed else None
    served = [li for li, r in a.served_lines if a.served and (line is None or li < line)]
    if served or (a.ready_line is not None and (line is None or a.ready_line < line)):
        out = "runtime"
    return out


def _decide(a: Analysis) -> None:
    fatal = [e for e in a.errors if _is_fatal(a, e)]
    cause = None
    hit = None
    if fatal:
        hitters = [e for e in fatal if e.hits]
        if hitters:
            best = max(hitters, key=lambda e: (sigs.best(e.hits).signature.priority, -e.line))
            cause, hit = best, sigs.best(best.hits)
        else:
            tbs = [e for e in fatal if e.kind == "traceback" or e.exc_type]
            # the first that says what was raised (a piece of a broken-up traceback may not)
            tbs.sort(key=lambda e: (not e.exc_type, e.line))
            cause = tbs[0] if tbs else fatal[0]
    if cause is None:
        # a scheduler that died without a Python error: the consequences are the only evidence
        cons = [e for e in _consequences(a) if e.hits]
        if cons:
            cause = cons[0]
            hit = sigs.best(cons[0].hits)
    a.cause, a.hit = cause, hit
    sig = hit.signature if hit else None
    a.frame_phase = _frame_phase(cause.frames) if cause else None
    a.stage_phase = STAGE_PHASE.get(_stage_at(a, cause.line if cause else None) or "")
    a.floor = _floor(a, cause.line if cause else None, cause.rank if cause else "")
    a.ended = a.shutdown or any(
        e.noise == "resource_tracker" or e.kind in CONSEQUENCE_KINDS for e in a.errors
    )

    phase: str | None = None
    hung = False
    basis = ""
    if a.host_findings and (cause is None or sig is None or sig.id in EVIDENCE_SIGS):
        # a paste of nvidia-smi / fuser / ps: GPUs held by processes, not a server's log
        a.cause, a.hit, cause, sig = None, None, None, sigs.BY_ID["orphan_gpu_process"]
        phase, basis = "cleanup", "evidence"
    elif cause is None:
        if a.served:
            phase = "ok"
            basis = "served_end" if _served_to_the_end(a) else "served_open"
        elif a.ready_line is not None:
            phase, basis = "ok", "served_end" if _served_to_the_end(a) else "served_open"
        elif a.stages:
            last = _stage_at(a, None)
            phase = STAGE_PHASE.get(last or "", None)
            if last in ("capacity", "uvicorn_started", "warmup"):
                phase = "capture"
            phase = _later(phase, a.floor)
            hung = not a.shutdown and not a.ended and _stale(a)
            basis = "stage" if a.floor else "weak"
        else:
            phase = None
    else:
        after_ready = a.ready_line is not None and cause.line > a.ready_line
        fp = a.frame_phase
        if sig is not None and sig.phase == "cleanup":
            phase, basis = "cleanup", "signature"
        elif after_ready:
            phase, basis = "runtime", "served"
        elif sig is not None and sig.phase == "pre-exec":
            phase, basis = "pre-exec", "signature"
        elif (
            sig is not None
            and sig.phase in ("load", "capture")
            and sig.id not in ("illegal_memory_access", "device_side_assert")
        ):
            phase, basis = sig.phase, "signature"
        else:
            if sig is not None and sig.phase_from == "stage" and a.stages:
                fp = None
            if fp == "runtime" and _started(a) and a.ready_line is None:
                fp = "capture"  # the warm-up request ran the model before "ready"
            if fp == "forward":
                fp = "capture"  # a forward pass before serving: capture or warm-up
            phase = fp or a.stage_phase
            basis = "frames" if fp and a.frame_phase != "forward" else ""
            if a.frame_phase == "forward":
                basis = "forward"
            if phase is None and sig is not None and sig.phase:
                phase, basis = sig.phase, "signature_weak"
            if phase is None and a.stages and not a.ready_line:
                phase = "load"
            if not basis and a.stage_phase:
                basis = "stage"
        if phase in LIFE and a.floor and _later(phase, a.floor) != phase:
            phase, basis = a.floor, "stage"
        elif phase in LIFE and a.floor == phase and basis in ("forward", "signature_weak", ""):
            basis = "stage"
        hung = bool(sig and sig.hung)
        if sig and sig.id == "detokenizer_heartbeat" and a.cause and a.cause.kind == "traceback":
            hung = False
    a.rule_phase = phase
    a.rule_hung = hung
    a.basis = basis or "none"
    if a.foreign:
        a.basis = "foreign"  # another server's log: nothing in it places an SGLang phase
    if basis == "evidence":
        a.signature = "orphan_gpu_process"
        a.decided = True
        a.evidence = [
            {"line": f["line"], "text": f["text"].strip()[:300], "pid": f["pid"]}
            for f in a.host_findings[:6]
        ]
        return
    a.decided = a.basis in DECIDING

    # signature, refined by the phase
    sid = sig.id if sig else None
    if sid and phase:
        sid = _refine(a, sid, phase)
    if sid == "weight_load_oom" and cause is not None:
        if any(_KV_FRAMES.search(fn) for _, fn in cause.frames):
            sid = "kv_pool_oom"
    if sid == "capture_failed" and cause is not None:
        c = sigs.capture_cause(cause.text + "\n" + cause.message)
        a.capture_cause = c["id"] if c else "other"
    if sid is None and cause is not None and phase != "ok":
        sid = sigs.unknown_id(_unknown_text(cause))
    if sid is None and phase in ("load", "capture", "pre-exec") and hung:
        sid = f"stalled_{phase.replace('-', '_')}"
    a.signature = sid
    a.evidence = _evidence(a)


# What placed a verdict -> whether it is decided and how sure it is. The confidences are
# measured (docs/diagnose.md: the real corpus and our own sets), not fitted per file.
BASIS_CONFIDENCE: dict[str, float] = {
    "served_end": 0.96,  # served, then the log shows its end (shutdown, exit, the client's result)
    "served": 0.94,  # a fatal error after the server served
    "signature": 0.92,  # a catalog signature with a fixed phase
    "frames": 0.92,  # the traceback's frames place it (forensics/frames.py)
    "stage": 0.92,  # the stages the log proves were reached place it
    "evidence": 0.9,  # nvidia-smi / fuser / ps show the GPUs held by other processes
    "signature_weak": 0.7,  # a signature's usual phase (a watchdog: serving), no stage or frame
    "forward": 0.65,  # a forward pass with nothing above it: capture or later
    "served_open": 0.6,  # served and no error, but the log stops while serving
    "weak": 0.45,
    "none": 0.35,  # nothing places it: the likeliest phase
    "foreign": 0.3,  # not an SGLang server log (signatures.NOT_SGLANG)
}
DECIDING = ("served_end", "served", "signature", "frames", "stage", "evidence")
# errors a paste of GPU-holder evidence explains (memory or the device already taken)
EVIDENCE_SIGS = ("cuda_oom", "weight_load_oom", "kv_pool_oom", "orphan_gpu_process")


def _started(a: Analysis) -> bool:
    """The log shows the server's startup (a load or capture stage), not only its tail."""
    return any(STAGE_FLOOR.get(st) in ("load", "capture") for st, _, _ in a.stages)


def _served_to_the_end(a: Analysis) -> bool:
    """Served, and the log shows the run's end: a shutdown, an exit, or more of the log
    (its client's or harness's output) after the server's last metrics line."""
    if a.ended:
        return True
    last = a.served_lines[-1][0] if a.served_lines else (a.ready_line or 0)
    after = [li for li, k, _ in a.lines if li > last and k not in ("uvicorn_access",)]
    return len(after) >= 3


def _in_capture(a: Analysis) -> bool:
    """The failure happened inside a CUDA-graph capture (not the warm-up request)."""
    at = _stage_at(a, a.cause.line if a.cause else None)
    return a.frame_phase == "capture" or at in ("capture_begin", "capture_progress")


def _refine(a: Analysis, sid: str | None, phase: str) -> str | None:
    for s0, ph, s1 in REFINE:
        if sid == s0 and phase == ph and (s1 != "capture_failed" or _in_capture(a)):
            return s1
    return sid


def _unknown_text(e: ErrorRec) -> str:
    if e.exc_type:
        return f"{e.exc_type}: {e.message}"
    return e.message or e.text.splitlines()[0] if e.text else ""


def _stale(a: Analysis) -> bool:
    if a.mtime is None:
        return True
    return (time.time() - a.mtime) > STALE_S


def _text_lines(e: ErrorRec) -> list[tuple[int, str]]:
    """(file line, text) of each line of an error's text.

    A traceback's text is consecutive lines of the log ending at ``last_line``; the header line
    is in it or not, depending on how the traceback began. A text cut at the parser's size
    limit is counted from the line after the header.
    """
    tl = e.text.split("\n")
    span = e.last_line - e.line + 1
    if len(tl) == span:
        start = e.line
    elif len(tl) == span - 1:
        start = e.line + 1
    else:
        start = e.line + 1 if e.kind == "traceback" and e.last_line > e.line else e.line
    return [(start + i, t) for i, t in enumerate(tl)]


def _frame_cite(a: Analysis) -> dict[str, Any] | None:
    """The innermost frame of the cause that placed it in its phase (the stack is evidence)."""
    e = a.cause
    if e is None or not a.frame_phase or a.rule_phase != a.frame_phase:
        return None
    for li, t in reversed(_text_lines(e)):
        m = sigs.FRAME_RX.search(t)
        if m and _frame_phase([(m["file"], m["func"])]) == a.frame_phase:
            return {"line": li, "text": t.strip()[:300]}
    return None


def _evidence(a: Analysis) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if a.cause is not None:
        e = a.cause
        first = next((t for li, _, t in a.lines if li == e.line), None)
        tls = _text_lines(e)
        if first is None:
            first = next((t for li, t in tls if li == e.line), None) or (tls[0][1] if tls else "")
        out.append({"line": e.line, "text": first[:300]})
        # the line whose text the signature matched (else the exception line)
        pats = list(e.hits[0].signature.patterns + e.hits[0].signature.framed) if e.hits else []
        cite = None
        if a.hit is not None and a.hit in e.hits:
            pats = list(a.hit.signature.patterns + a.hit.signature.framed)
        if pats:
            cite = next(((li, t) for li, t in tls if any(rx.search(t) for rx in pats)), None)
        if cite is None and e.exc_type:
            cite = next(
                ((li, t) for li, t in reversed(tls) if t.startswith(e.exc_type)),
                None,
            )
        if cite is not None and cite[0] != e.line:
            out.append({"line": cite[0], "text": cite[1].strip()[:300]})
        fc = _frame_cite(a)
        if fc is not None and all(o["line"] != fc["line"] for o in out):
            out.append(fc)
        for c in _consequences(a):
            if c.line > e.line and len(out) < 5:
                out.append({"line": c.line, "text": c.text.splitlines()[0][:300]})
    elif a.stages:
        st, _, li = a.stages[-1]
        text = next((t for li2, _, t in a.lines if li2 == li), st)
        out.append({"line": li, "text": text[:300]})
    real_ready = any(st == "ready" and li == a.ready_line for st, _, li in a.stages)
    if real_ready and not any(o["line"] == a.ready_line for o in out):
        out.append({"line": a.ready_line, "text": "The server is fired up and ready to roll!"})
    return sorted(out, key=lambda o: o["line"])[:6]


# --------------------------------------------------------------------------------------
# Features for the model
# --------------------------------------------------------------------------------------
def _stem(path: str) -> str:
    return re.sub(r"\W", "_", path.rsplit("/", 1)[-1].rsplit(".", 1)[0])[:40]


def features(a: Analysis) -> tuple[str, str]:
    """(structural tokens, error text) of one run."""
    tok: list[str] = []
    seen = []
    for st, sc, _ in a.stages:
        t = f"stage_{st}" + (f"_{sc}" if sc else "")
        if t not in seen:
            seen.append(t)
    tok += seen
    if a.stages:
        tok.append(f"last_{a.stages[-1][0]}")
    else:
        tok.append("nostages")
    at = _stage_at(a, a.cause.line if a.cause else None)
    tok.append(f"at_{at}")
    tok += ["ready"] if a.ready_line is not None else ["notready"]
    tok += ["served"] if a.served else []
    tok += ["shutdown"] if a.shutdown else []
    tok.append(f"rule_{a.rule_phase}")
    tok.append(f"framephase_{a.frame_phase}")
    tok.append(f"stagephase_{a.stage_phase}")
    if a.rule_hung:
        tok.append("rulehung")
    if a.hit:
        tok.append(f"sig_{a.hit.signature.id}")
    if a.capture_cause:
        tok.append(f"cause_{a.capture_cause}")
    for e in a.errors:
        if e.noise:
            tok.append(f"noise_{e.noise}")
            continue
        if e.exc_type:
            tok.append("exc_" + e.exc_type.rsplit(".", 1)[-1])
        if e.component:
            tok.append(f"comp_{e.component}")
        tok.append(f"ekind_{e.kind}")
    if a.cause is not None:
        tok.append("cause_after_ready" if a.ready_line and a.cause.line > a.ready_line else "cause")
        for f, fn in a.cause.frames:
            tok.append(f"fn_{fn}")
            tok.append(f"file_{_stem(f)}")
    else:
        tok.append("nocause")
    for _, k, _ in a.lines[-8:]:
        tok.append(f"tail_{k}")
    text_parts = []
    if a.cause is not None:
        text_parts.append(f"{a.cause.exc_type}: {a.cause.message}")
        text_parts.append(a.cause.text[-1500:])
    tail = [t for _, k, t in a.lines[-6:] if k not in ("uvicorn_access",)]
    text_parts += tail
    return " ".join(tok), sigs.template("\n".join(text_parts))[:3000] if text_parts else ""


# --------------------------------------------------------------------------------------
# The model (JSON)
# --------------------------------------------------------------------------------------
@dataclass
class Model:
    """A trained model as JSON data. Predicting needs neither scikit-learn nor numpy (plain
    Python over the JSON's vocabularies, idf weights and coefficients); scikit-learn only
    trains (``_fit``)."""

    data: dict[str, Any]
    _checked: bool = False

    @property
    def classes(self) -> list[str]:
        return self.data["classes"]

    def features_of(self, doc: tuple[str, str]) -> dict[int, float]:
        """column -> value of one document: the TF-IDF row of every vectorizer side by side
        (what scikit-learn's ``TfidfVectorizer.transform`` of each, stacked, gives)."""
        if not self._checked:
            for spec in self.data["vectorizers"]:
                _check_spec(spec)
            self._checked = True
        row: dict[int, float] = {}
        offset = 0
        for spec, text in zip(self.data["vectorizers"], doc, strict=True):
            vocab, idf = spec["vocabulary"], spec["idf"]
            counts: dict[int, int] = {}
            for term in _terms(spec, text):
                j = vocab.get(term)
                if j is not None:
                    counts[j] = counts.get(j, 0) + 1
            sub = spec["sublinear_tf"]
            w = {j: ((1.0 + math.log(n)) if sub else float(n)) * idf[j] for j, n in counts.items()}
            norm = math.sqrt(sum(x * x for x in w.values()))  # norm "l2" (_check_spec)
            for j, x in w.items():
                row[offset + j] = x / norm if norm > 0 else x
            offset += len(idf)
        return row

    def logits(self, docs: list[tuple[str, str]]) -> list[list[float]]:
        coef, intercept = self.data["coef"], self.data["intercept"]
        out = []
        for doc in docs:
            row = self.features_of(doc)
            out.append(
                [
                    b + sum(c[j] * x for j, x in row.items())
                    for c, b in zip(coef, intercept, strict=True)
                ]
            )
        return out

    def proba(self, docs: list[tuple[str, str]]) -> list[list[float]]:
        """Class probabilities per document, in ``classes`` order (temperature-calibrated)."""
        t = float(self.data.get("temperature", 1.0))
        out = []
        for z in self.logits(docs):
            top = max(z)
            e = [math.exp((x - top) / t) for x in z]
            total = sum(e)
            out.append([x / total for x in e])
        return out


# The text analysis a vectorizer spec names (the settings _fit trains with, carried in the
# model's JSON): "word" splits by ``token_pattern``; "char_wb" takes character n-grams of each
# whitespace-separated word padded with one space, a word shorter than n counted once.
_WHITESPACE = re.compile(r"\s\s+")
SPEC_KEYS = ("analyzer", "token_pattern", "lowercase", "ngram_range", "sublinear_tf", "norm")


def _check_spec(spec: dict[str, Any]) -> None:
    missing = [k for k in SPEC_KEYS if k not in spec]
    if missing or spec["analyzer"] not in ("word", "char_wb") or spec["norm"] != "l2":
        raise ForensicsError(
            f"phase model: vectorizer {spec.get('kind')!r} has settings this predictor does not "
            f"implement ({missing or spec.get('analyzer')})",
            hint="retrain it: forensics classify train",
        )


def _terms(spec: dict[str, Any], text: str) -> list[str]:
    if spec["lowercase"]:
        text = text.lower()
    lo, hi = spec["ngram_range"]
    if spec["analyzer"] == "word":
        tokens = re.findall(spec["token_pattern"], text)
        if (lo, hi) == (1, 1):
            return tokens
        return [
            " ".join(tokens[i : i + n])
            for n in range(lo, hi + 1)
            for i in range(len(tokens) - n + 1)
        ]
    grams: list[str] = []
    for word in _WHITESPACE.sub(" ", text).split():
        w = f" {word} "
        for n in range(lo, hi + 1):
            if len(w) <= n:
                grams.append(w)
                break
            grams += [w[i : i + n] for i in range(len(w) - n + 1)]
    return grams


def _vec_params(kind: str) -> dict[str, Any]:
    if kind == "tokens":
        return {"token_pattern": r"\S+", "lowercase": False, "sublinear_tf": True}
    return {
        "analyzer": "char_wb",
        "ngram_range": (3, 5),
        "sublinear_tf": True,
        "lowercase": True,
        "max_features": 6000,
    }


def _spec(kind: str, v) -> dict[str, Any]:
    """What a fitted TfidfVectorizer's transform needs, as JSON (the predictor's input)."""
    params = v.get_params()
    return {
        "kind": kind,
        **{k: params[k] for k in SPEC_KEYS if k != "ngram_range"},
        "ngram_range": list(params["ngram_range"]),
        "vocabulary": {k: int(i) for k, i in v.vocabulary_.items()},
        "idf": [round(x, 5) for x in v.idf_],
    }


def _fit(docs: list[tuple[str, str]], y: list[str], *, C: float = 4.0) -> Model:
    import numpy as np
    from scipy.sparse import hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    v1 = TfidfVectorizer(**_vec_params("tokens"), min_df=1)
    v2 = TfidfVectorizer(**_vec_params("chars"), min_df=2)
    X1 = v1.fit_transform([d[0] for d in docs])
    texts = [d[1] or " " for d in docs]
    X2 = v2.fit_transform(texts)
    X = hstack([X1, X2]).tocsr()
    classes = sorted(set(y), key=PHASES.index)
    from threadpoolctl import threadpool_limits

    clf = LogisticRegression(C=C, max_iter=3000, class_weight="balanced")
    with threadpool_limits(1):  # many BLAS threads make this small fit 30x slower
        clf.fit(X, y)
    order = [list(clf.classes_).index(c) for c in classes]
    coef = clf.coef_[order] if len(classes) > 2 else np.vstack([-clf.coef_[0], clf.coef_[0]])
    inter = (
        clf.intercept_[order]
        if len(classes) > 2
        else np.array([-clf.intercept_[0], clf.intercept_[0]])
    )

    data = {
        "version": MODEL_VERSION,
        "classes": classes,
        "vectorizers": [_spec("tokens", v1), _spec("chars", v2)],
        "coef": [[round(float(x), 5) for x in row] for row in coef],
        "intercept": [round(float(x), 5) for x in inter],
        "temperature": 1.0,
    }
    return Model(data)


# --------------------------------------------------------------------------------------
# Combining rules and model
# --------------------------------------------------------------------------------------
@dataclass
class Verdict:
    path: str
    run_index: int
    phase: str
    hung: bool
    signature: str | None
    confidence: float
    evidence: list[dict[str, Any]]
    explanation: str
    next_steps: list[str]
    rule_phase: str | None = None
    model_phase: str | None = None
    capture_cause: str | None = None
    decided: bool = True  # the log's text places the phase; False: the likeliest guess
    basis: str = ""  # what placed it (a BASIS_CONFIDENCE key)
    settle: list[str] = field(default_factory=list)  # what evidence would settle an undecided one

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "run_index": self.run_index,
            "phase": self.phase,
            "hung": self.hung,
            "signature": self.signature,
            "confidence": round(self.confidence, 3),
            "decided": self.decided,
            "evidence": self.evidence,
            "explanation": self.explanation,
            "next_steps": self.next_steps,
        }


def explain(a: Analysis, phase: str, hung: bool) -> tuple[str, list[str]]:
    """One-line explanation and next steps, each about the evidence the verdict cites."""
    cfg = a.config or {}
    values = sigs.remedy_values(cfg)  # None: the remedy's setting is at its limit already
    sid = a.signature
    sig = sigs.BY_ID.get(sid or "")
    steps: list[str] = []
    if a.basis == "evidence" and phase == "cleanup" and sig is not None:
        pids = [str(f["pid"]) for f in a.host_findings if isinstance(f.get("pid"), int)]
        text = "cleanup: the GPUs are held: " + "; ".join(f["message"] for f in a.host_findings[:4])
        if pids:
            steps.append(f"kill {' '.join(pids)} (kill -9 if they stay), then check nvidia-smi")
        return text, steps + [sigs.render(r, **values) for r in sig.remedies]
    if phase == "ok":
        noise = sorted({e.noise for e in a.errors if e.noise})
        text = "the server reached ready" + (
            f" and served ({a.decode_lines} decode log lines)" if a.served else ""
        )
        if a.shutdown:
            text += ", then shut down on request"
        if noise:
            text += f"; the error-looking lines ({', '.join(noise)}) are not fatal"
        return text, list(NEXT_STEPS_OK)
    if sig is not None:
        killer = ""
        if sig.id == "scheduler_died" and a.cause is not None:
            m = re.search(r"exit code:? (-?\d+)|Exit code: (-?\d+)", _all_text(a))
            code = (m.group(1) or m.group(2)) if m else None
            if code == "-9":
                killer = " (exit code -9 = SIGKILL: usually the kernel's OOM killer, host RAM)"
                steps.append(
                    "host RAM ran out: load fewer shards in parallel, add swap, or "
                    "stop other processes on the host"
                )
            elif code:
                killer = f" (exit code {code})"
        cause_txt = "see the error"
        if sig.id == "capture_failed" or sid == "capture_failed":
            c = next((c for c in sigs.CAPTURE_CAUSES if c["id"] == a.capture_cause), None)
            cause_txt = c["explanation"] if c else "see the error"
            if c:
                steps += sigs.fitting(c["remedies"], values)
        known = {k: v for k, v in values.items() if v is not None}
        text = sigs.render(sig.explanation, cause=cause_txt, killer=killer, **known)
        if sig.id != "capture_failed":
            steps += sigs.fitting(sig.remedies, values)
    elif sid and sid.startswith("unknown:") and a.cause is not None:
        text = f"{phase}: an error no catalog entry knows: {_unknown_text(a.cause)[:160]}"
        steps.append(
            "read the traceback at the cited line; `forensics classify train` after "
            "`forensics label RUN PHASE` teaches the classifier this failure"
        )
    elif hung:
        last = a.stages[-1][0] if a.stages else "start"
        text = f"the log stops after `{last}` with no error: it hung (or was killed) during {phase}"
        steps.append(NEXT_STEPS_HUNG_STAGE.get(phase, ""))
    else:
        text = f"stopped during {phase} without an error in the log"
        steps.append("look at the host (dmesg, nvidia-smi) for what stopped it")
    if hung and sig is not None and sig.hung:
        text += " (hung: it stopped making progress without exiting on its own)"
    return text, [s for s in steps if s]


def _all_text(a: Analysis) -> str:
    return "\n".join(e.text for e in a.errors)


def verdicts(analyses: list[Analysis], model: Model | None) -> list[Verdict]:
    """Verdicts for many runs (one model call)."""
    if model is None or not analyses:
        return [verdict(a, model) for a in analyses]
    probs = model.proba([features(a) for a in analyses])
    return [verdict(a, model, p=list(p)) for a, p in zip(analyses, probs, strict=True)]


# What would settle an undecided verdict, by what the log lacks.
SETTLE = {
    "served_open": "the rest of the log (after its last line) says whether the run ended well",
    "forward": "the frames above the model's forward (the whole traceback) or the stage lines "
    "before it say whether it was capture, warm-up or serving",
    "foreign": "this is not an SGLang server log (signatures.NOT_SGLANG); forensics reads "
    "SGLang's logs: give the SGLang server's own log",
    "fragment": "the full log (its stage lines place the failure); or `forensics diagnose NAME "
    "--relaunch` to replay the launch with evidence collected",
}


def verdict(a: Analysis, model: Model | None, *, p: list[float] | None = None) -> Verdict:
    """The verdict of one run: the rules' phase when the text decides it (logic before
    statistics), else the likeliest phase no earlier than what the log proves, undecided."""
    mphase = None
    if a.decided and a.rule_phase in PHASES:
        phase, conf = a.rule_phase, BASIS_CONFIDENCE[a.basis]
    else:
        allowed = [c for c in PHASES if a.floor is None or c == "ok" or _later(c, a.floor) == c]
        if a.cause is not None:
            allowed = [c for c in allowed if c != "ok"] or allowed
        if model is not None:
            if p is None:
                p = list(model.proba([features(a)])[0])
            probs = dict(zip(model.classes, p, strict=False))
            mphase = max(probs, key=probs.get)
        else:
            probs = {}
        if a.rule_phase in allowed:
            phase = a.rule_phase
        else:
            phase = max(allowed, key=lambda c: probs.get(c, 0.0)) if probs else allowed[0]
        share = probs.get(phase, 0.5) / (sum(probs.get(c, 0.0) for c in allowed) or 1.0)
        conf = BASIS_CONFIDENCE.get(a.basis, 0.35) * (0.75 + 0.25 * share)
    hung = a.rule_hung if phase == a.rule_phase else (phase != "ok" and a.cause is None)
    if phase == "ok":
        hung = False
    # the signature must fit the phase that was decided
    if phase != a.rule_phase:
        if phase == "ok":
            a.signature = None
        else:
            a.signature = _refine(a, a.signature, phase)
    text, steps = explain(a, phase, hung)
    settle: list[str] = []
    if not a.decided:
        key = a.basis if a.basis in SETTLE else "fragment"
        settle.append(SETTLE[key])
        if key != "fragment":
            settle.append(SETTLE["fragment"])
        text = f"{text} (undecided: the text does not place it; {settle[0]})"
        if a.foreign:
            what = next(n["what"] for n in sigs.NOT_SGLANG if n["id"] == a.foreign)
            text = f"not an SGLang server log ({what}): {text}"
    return Verdict(
        path=a.path,
        run_index=a.run_index,
        phase=phase,
        hung=hung,
        signature=a.signature if phase != "ok" else None,
        confidence=float(conf),
        evidence=a.evidence,
        explanation=text,
        next_steps=steps + [s for s in settle[1:] if s not in steps],
        rule_phase=a.rule_phase,
        model_phase=mphase,
        capture_cause=a.capture_cause,
        decided=a.decided,
        basis=a.basis,
        settle=settle,
    )


# --------------------------------------------------------------------------------------
# Corpus, training, evaluation
# --------------------------------------------------------------------------------------
def corpus_rows(corpus: Path = CORPUS) -> list[dict[str, str]]:
    path = corpus / "labels.csv"
    if not path.exists():
        raise InputNotFound(
            f"{path}: the labeled corpus is missing", hint="python scripts/gen_corpus.py"
        )
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _source_files(module) -> list[Path]:
    """The source files of a module: the file, or every *.py of its package (sorted)."""
    path = Path(module.__file__)
    if path.name != "__init__.py":
        return [path]
    return sorted(path.parent.rglob("*.py"), key=lambda p: p.relative_to(path.parent).as_posix())


_CODE_DIGEST: list[bytes] = []


def _code_digest() -> bytes:
    """One hash of the code a model's features depend on (computed once per process)."""
    if not _CODE_DIGEST:
        h = hashlib.sha1()
        # the classifier (module or package), the catalog, the frames table, and the parser
        # whose frames the features come from
        for module in (sys.modules[__name__], sigs, frames_table, sglang_parser):
            top = Path(module.__file__).parent
            for f in _source_files(module):
                h.update(f.relative_to(top).as_posix().encode() + b"\0")
                h.update(f.read_bytes())
        _CODE_DIGEST.append(h.digest())
    return _CODE_DIGEST[0]


def corpus_digest(corpus: Path = CORPUS) -> str:
    h = hashlib.sha1()
    h.update(str(MODEL_VERSION).encode())
    h.update(_code_digest())
    h.update((corpus / "labels.csv").read_bytes())
    return h.hexdigest()[:16]


# What classify keeps of one run while it streams a log (docs/diagnose.md, "Bounded memory"):
# per table, the first and the last half of this many rows; a kept line's text is cut to
# KEEP_TEXT characters. Decode lines are kept as counts (all analysis reads of them).
KEEP_ROWS = {"lines": 10_000, "events": 10_000, "errors": 1_000}
KEEP_TEXT = 8 << 10


def _metrics_summary(*frames: pl.DataFrame) -> pl.DataFrame:
    """Decode (or prefill) rows -> per run and rank, its first and its last line (``n``: how
    many rows they stand for). All analysis reads of them: counts, first, last per rank."""
    cols = ["run_index", "line", "rank"]
    parts = [
        df.select(
            *cols, (pl.col("n") if "n" in df.columns else pl.lit(1)).cast(pl.Int64).alias("n")
        )
        for df in frames
        if not df.is_empty()
    ]
    if not parts:
        return pl.DataFrame(
            schema={"run_index": pl.Int64, "line": pl.Int64, "rank": pl.String, "n": pl.Int64}
        )
    g = (
        pl.concat(parts, how="vertical_relaxed")
        .group_by("run_index", "rank")
        .agg(
            pl.col("line").min().alias("first"),
            pl.col("line").max().alias("last"),
            pl.col("n").sum(),
        )
    )
    return pl.concat(
        [
            g.select("run_index", pl.col("first").alias("line"), "rank", "n"),
            g.select(
                "run_index", pl.col("last").alias("line"), "rank", pl.lit(0, pl.Int64).alias("n")
            ),
        ]
    ).sort("run_index", "line")


def _head_tail(df: pl.DataFrame, keep: int) -> pl.DataFrame:
    """The first and the last ``keep // 2`` rows of each run (all of a run with fewer)."""
    if df.is_empty() or len(df) <= keep:
        return df
    half = keep // 2
    pos = pl.int_range(pl.len()).over("run_index")
    size = pl.len().over("run_index")
    return df.filter((pos < half) | (pos >= size - half))


def iter_analyses(src, *, tail: int | None = None, warn=None):
    """Analyses of every run of a ``forensics.logsource.LogSource``, parsed as a stream.

    Memory is bounded by one run (KEEP_ROWS, KEEP_TEXT), not by the file: a run's rows are
    analysed and dropped once the next run begins. A damaged compressed stream keeps what
    decoded and says so through ``warn`` (nothing decoded: the error is raised).
    """
    from forensics.errors import StreamDamaged
    from forensics_parsers.sglang import Frames, LogParser

    parser = LogParser(src.where)
    mtime = src.stat.mtime or None
    held: list[Frames] = []
    rows = dict.fromkeys(KEEP_ROWS, 0)
    done = 0  # runs below this index were analysed

    def keep(f: Frames) -> None:
        f.decode, f.prefill = _metrics_summary(f.decode), _metrics_summary(f.prefill)
        if not f.lines.is_empty():
            f.lines = f.lines.with_columns(pl.col("text").str.slice(0, KEEP_TEXT))
        held.append(f)
        for t in KEEP_ROWS:
            rows[t] += len(getattr(f, t))
        if any(rows[t] > 2 * KEEP_ROWS[t] for t in KEEP_ROWS):
            compact(Frames.concat(held))

    def compact(fr: Frames, below: int | None = None) -> None:
        """Keep the rows of runs >= ``below`` (all), each table cut to its cap."""
        for t in (*KEEP_ROWS, "decode", "prefill", "runs"):
            df = getattr(fr, t)
            if below is not None and not df.is_empty():
                df = df.filter(pl.col("run_index") >= below)
            if t in KEEP_ROWS:
                df = _head_tail(df, KEEP_ROWS[t])
                rows[t] = len(df)
            elif t in ("decode", "prefill"):
                df = _metrics_summary(df)
            setattr(fr, t, df)
        fr.counts, fr.stats = {}, {}
        held[:] = [fr]

    def settle(below: int | None):
        """Analyse the runs below ``below`` (every run when None) and drop their rows."""
        nonlocal done
        fr = Frames.concat(held)
        tables = fr.tables()
        runs = tables["runs"]
        idx = sorted(set(runs["run_index"].to_list())) if not runs.is_empty() else []
        for i in idx:
            if i >= done and (below is None or i < below):
                yield analyze(tables, i, path=src.where, mtime=mtime)
        if below is None:
            if not idx and not done:
                yield analyze(tables, 0, path=src.where, mtime=mtime)
            return
        done = below
        compact(fr, below)

    try:
        for chunk in src.chunks(tail=tail):
            keep(parser.feed(chunk))
            if parser.run_index > done:
                yield from settle(parser.run_index)
    except StreamDamaged as exc:
        if warn is None or not exc.kept:
            raise  # nothing decoded: no log to classify (never a run "hung before exec")
        warn(str(exc))
    keep(parser.finish())
    yield from settle(None)


def parse_path(path: Path | str):
    """All frames of a log file (a whole parse, through forensics.logsource)."""
    from forensics.hosts import get_host
    from forensics.logsource import open_log
    from forensics_parsers.sglang import Frames, LogParser

    src = open_log(get_host(None), str(path))
    parser = LogParser(src.where)
    parts = [parser.feed(chunk) for chunk in src.chunks()]
    return Frames.concat([*parts, parser.finish()])


def _tables(frames) -> dict[str, pl.DataFrame]:
    return frames.tables()


def analyses_for(frames, path: str, mtime: float | None = None) -> list[Analysis]:
    tables = _tables(frames)
    runs = tables["runs"]
    idx = sorted(set(runs["run_index"].to_list())) if not runs.is_empty() else []
    if not idx:
        idx = [0]
    return [analyze(tables, i, path=path, mtime=mtime) for i in idx]


_CORPUS_CACHE: dict[str, list[tuple[dict[str, str], Analysis]]] = {}


def corpus_examples(corpus: Path = CORPUS) -> list[tuple[dict[str, str], Analysis]]:
    key = str(corpus) + ":" + corpus_digest(corpus)
    if key in _CORPUS_CACHE:
        return _CORPUS_CACHE[key]
    out = []
    for row in corpus_rows(corpus):
        frames = parse_path(corpus / row["file"])
        ans = analyses_for(frames, row["file"])
        ri = int(row.get("run_index") or 0)
        a = next((x for x in ans if x.run_index == ri), ans[-1])
        out.append((row, a))
    _CORPUS_CACHE[key] = out
    return out


def _temperature(p_logits, y_idx) -> float:
    """One temperature that minimises the log loss of held-out predictions (calibration)."""
    import numpy as np

    best_t, best_l = 1.0, float("inf")
    for t in np.linspace(0.3, 4.0, 38):
        z = p_logits / t
        z = z - z.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        loss = -lp[np.arange(len(y_idx)), y_idx].mean()
        if loss < best_l:
            best_t, best_l = float(t), loss
    return best_t


def train(
    store=None, *, corpus: Path = CORPUS, include_labels: bool = True, save: bool = True
) -> Model:
    """Fit the model on the corpus (+ the store's labels); calibrate; cache as JSON."""
    ex = corpus_examples(corpus)
    docs = [features(a) for _, a in ex]
    y = [r["phase"] for r, _ in ex]
    n_user = 0
    if store is not None and include_labels:
        for a, phase in _labeled_runs(store):
            docs.append(features(a))
            y.append(phase)
            n_user += 1
    model = _fit(docs, y)
    # calibration: a temperature fitted on grouped cross-validated logits
    fams = [r.get("family", r["file"]) for r, _ in ex] + [f"user{i}" for i in range(n_user)]
    logits, yi = _cv_logits(docs, y, fams, model.classes)
    if logits is not None:
        model.data["temperature"] = _temperature(logits, yi)
    model.data["digest"] = corpus_digest(corpus)
    model.data["n_examples"] = len(y)
    model.data["n_user_labels"] = n_user
    model.data["trained_at"] = dt.datetime.now().isoformat(timespec="seconds")
    if store is not None and save:
        save_model(store, model)
    _MODEL_CACHE[_cache_key(store)] = model
    return model


def _cv_logits(docs, y, groups, classes, k: int = 5):
    import numpy as np
    from sklearn.model_selection import GroupKFold

    uniq = sorted(set(groups))
    if len(uniq) < k:
        return None, None
    logits = np.zeros((len(y), len(classes)))
    for tr, te in GroupKFold(n_splits=k).split(docs, y, groups):
        m = _fit([docs[i] for i in tr], [y[i] for i in tr])
        if m.classes != classes:
            return None, None
        m.data["temperature"] = 1.0
        p = m.proba([docs[i] for i in te])
        logits[te] = np.log(np.clip(p, 1e-12, 1))
    yi = np.array([classes.index(c) for c in y])
    return logits, yi


def _model_path(store) -> Path:
    return Path(store.root) / "models" / "phase-model.json"


def save_model(store, model: Model) -> Path:
    p = _model_path(store)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(model.data, separators=(",", ":")))
        os.replace(tmp, p)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written model behind
        raise
    return p


_MODEL_CACHE: dict[str, Model] = {}


def _cache_key(store) -> str:
    return str(Path(store.root).resolve()) if store is not None else ""


# The model trained on the shipped corpus, packaged as JSON (scripts/train_packaged_model.py);
# used when its digest matches the corpus and code, so a fresh store needs no training.
PACKAGED_MODEL = Path(__file__).resolve().parent / "data" / "phase-model.json"


def packaged_model(digest: str | None) -> Model | None:
    """The packaged model, if it was trained on this corpus and code (any, if no corpus)."""
    try:
        data = json.loads(PACKAGED_MODEL.read_text())
    except (OSError, ValueError):
        return None
    if data.get("version") != MODEL_VERSION:
        return None
    if digest is not None and data.get("digest") != digest:
        return None
    return Model(data)


def load_model(store=None, *, corpus: Path = CORPUS) -> Model:
    """The store's model when it is current, else the packaged one, else one trained now."""
    if not (corpus / "labels.csv").exists():  # installed without the corpus
        m = packaged_model(None)
        if m is None:
            raise ForensicsError(
                f"{corpus}: no training corpus and no packaged model",
                hint="reinstall forensics (its wheel carries forensics/data/corpus and the packaged model)",
            )
        return m
    digest = corpus_digest(corpus)
    key = _cache_key(store)
    m = _MODEL_CACHE.get(key)
    if m is not None and m.data.get("digest") == digest:
        return m
    if store is not None:
        p = _model_path(store)
        if p.exists():
            try:
                data = json.loads(p.read_text())
            except (OSError, ValueError):
                data = {}
            if data.get("version") == MODEL_VERSION and data.get("digest") == digest:
                m = Model(data)
                _MODEL_CACHE[key] = m
                return m
    # a fresh model from the shipped corpus (shared in-process by stores without labels)
    base = _MODEL_CACHE.get("")
    if base is None or base.data.get("digest") != digest:
        base = packaged_model(digest) or train(None, corpus=corpus)
        _MODEL_CACHE[""] = base
    if store is not None and _has_labels(store):
        base = train(store, corpus=corpus, save=False)
    if store is not None:  # a cache: a read-only or full store serves without it
        try:
            save_model(store, base)
        except OSError:
            pass
    return base


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------
def classify_file(path: str | Path, model: Model | None = None, *, warn=None) -> list[Verdict]:
    """Classify a log on this machine (read through forensics.logsource: any format)."""
    from forensics.errors import FileMissing, NotRegularFile
    from forensics.hosts import get_host
    from forensics.logsource import open_log

    p = Path(path)
    try:
        src = open_log(get_host(None), os.fspath(path))  # as given: Path drops a trailing /
    except FileMissing:
        raise InputNotFound(
            f"{p}: no such file",
            hint=f"forensics diagnose {p.stem} --log {p} to diagnose a log that was never written",
        ) from None
    except NotRegularFile as exc:
        if not p.is_dir():
            raise
        raise UsageError(
            f"{p}: is a directory, not a log file", hint=f"forensics classify {p}/*.log"
        ) from exc
    return classify_source(src, model, warn=warn)


def classify_source(
    src, model: Model | None = None, *, tail: int | None = None, warn=None
) -> list[Verdict]:
    """Verdicts for every run of an opened ``LogSource`` (the file's age decides ``hung``)."""
    return [verdict(a, model) for a in iter_analyses(src, tail=tail, warn=warn)]


def classify_text(text: str, model: Model | None = None, *, path: str = "<text>") -> list[Verdict]:
    from forensics_parsers.sglang import parse_text

    frames = parse_text(text, path)
    return [verdict(a, model) for a in analyses_for(frames, path)]


# The most of a paste that `forensics classify -` reads (a paste is an excerpt; a whole log is
# better given by its path, which is read in full).
PASTE_MAX = 32 << 20


def read_paste(stream, limit: int | None = None) -> tuple[bytes, bool]:
    """At most ``limit`` (``PASTE_MAX``) bytes of a binary stream, cut at the last newline
    past the limit; True when there was more (the rest is not read: an endless stream cannot
    hang us)."""
    limit = PASTE_MAX if limit is None else limit
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        b = stream.read(min(1 << 20, limit + 1 - size))
        if not b:
            break
        chunks.append(b)
        size += len(b)
    data = b"".join(chunks)
    if len(data) <= limit:
        return data, False
    data = data[:limit]
    nl = data.rfind(b"\n")
    return (data[: nl + 1] if nl > 0 else data), True


def classify_bytes(
    data: bytes, model: Model | None = None, *, path: str = "<stdin>"
) -> list[Verdict]:
    """Verdicts of a log given as bytes (a paste): no file age, so a stop mid-stage is hung."""
    from forensics_parsers.sglang import parse_bytes

    if data[:2] == b"\x1f\x8b":
        import gzip

        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise UsageError(
                f"{path}: not a readable gzip stream ({exc})", hint="paste the log's text"
            ) from None
    frames = parse_bytes(data, path)
    return [verdict(a, model) for a in analyses_for(frames, path)]


def _store_tables(store, source_id: str) -> dict[str, pl.DataFrame]:
    out = {}
    for name in ("runs", "events", "errors", "lines", "decode", "prefill"):
        out[name] = store.source_rows(name, source_id)  # the store splits each table once
    return _bounded(out)


def _bounded(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """What the analysis sees of a stored run: what classify keeps of a streamed one (metrics
    as counts, KEEP_ROWS per table, KEEP_TEXT per line), so a big run costs no more to
    classify at ingest than a small one, and ``classify FILE`` and the store agree."""
    out = dict(tables)
    for name in ("decode", "prefill"):
        df = out[name]
        if not df.is_empty() and "rank" not in df.columns:
            df = df.with_columns(pl.lit("").alias("rank"))
        out[name] = _metrics_summary(df)
    for name, keep in KEEP_ROWS.items():
        out[name] = _head_tail(out[name], keep)
    if not out["lines"].is_empty():
        out["lines"] = out["lines"].with_columns(pl.col("text").str.slice(0, KEEP_TEXT))
    return out


def analyze_stored(store, source_id: str, run_index: int) -> Analysis:
    tables = _store_tables(store, source_id)
    src = store.sources().get(source_id, {})
    mtime = src.get("mtime")
    return analyze(tables, run_index, path=src.get("path", source_id), mtime=mtime)


def _state_key(store, source_id: str, model: Model | None) -> str:
    src = store.sources().get(source_id, {})
    label = _labels_for(store).get(source_id, {})
    return "|".join(
        str(x)
        for x in (
            src.get("size"),
            src.get("mtime"),
            src.get("offset"),
            src.get("content_hash"),  # a log rewritten with the same size and mtime
            MODEL_VERSION,
            corpus_digest(),
            json.dumps(label, sort_keys=True),
            int(time.time() // STALE_S)
            if src.get("mtime") and time.time() - src["mtime"] < 2 * STALE_S
            else 0,
        )
    )


def _labels_for(store) -> dict[str, dict[int, str]]:
    df = store.table("labels")
    out: dict[str, dict[int, str]] = {}
    if df.is_empty():
        return out
    for sid, ri, ph in df.select("source_id", "run_index", "phase").iter_rows():
        out.setdefault(sid, {})[int(ri)] = ph
    return out


def _has_labels(store) -> bool:
    return not store.table("labels").is_empty()


def classify_stored(store, source_id: str, run_index: int, model: Model | None = None) -> Verdict:
    a = analyze_stored(store, source_id, run_index)
    v = verdict(a, model if model is not None else load_model(store))
    label = _labels_for(store).get(source_id, {}).get(run_index)
    if label:
        v.phase, v.confidence, v.decided = label, 1.0, True
        v.explanation = f"labeled {label} by you (forensics label); " + v.explanation
    return v


def classify_runs(store, runs_df: pl.DataFrame) -> pl.DataFrame:
    """Verdicts for the runs table: run_id, phase, hung, signature, confidence (cached)."""
    if runs_df is None or runs_df.is_empty():
        return pl.DataFrame(schema={"run_id": pl.String})
    cached = store.table("verdicts")
    cache: dict[str, tuple[str, dict]] = {}
    if not cached.is_empty():
        for rid, key, vj in cached.select("run_id", "key", "verdict").iter_rows():
            cache[rid] = (key, json.loads(vj))
    rows = []
    new_rows = []
    model = None
    keys: dict[str, str] = {}
    for rid, sid, ri in runs_df.select("run_id", "source_id", "run_index").iter_rows():
        if sid not in keys:
            keys[sid] = _state_key(store, sid, None)
        key = keys[sid]
        hit = cache.get(rid)
        if hit and hit[0] == key:
            d = hit[1]
        else:
            if model is None:
                model = load_model(store)
            v = classify_stored(store, sid, int(ri), model)
            d = {
                "phase": v.phase,
                "hung": v.hung,
                "signature": v.signature,
                "confidence": round(v.confidence, 3),
            }
            new_rows.append({"run_id": rid, "key": key, **d, "verdict": json.dumps(d)})
        rows.append({"run_id": rid, **d})
    if new_rows:
        try:
            with store.transaction(lock_timeout=2.0) as tx:
                done = {r["run_id"] for r in new_rows}
                if not cached.is_empty():
                    tx.drop_rows("verdicts", ~pl.col("run_id").is_in(list(done)))
                tx.append("verdicts", pl.DataFrame(new_rows, schema=VERDICT_SCHEMA))
        except StoreError:
            pass  # the cache is an optimisation; a locked store just recomputes next time
    return pl.DataFrame(
        rows,
        schema={
            "run_id": pl.String,
            "phase": pl.String,
            "hung": pl.Boolean,
            "signature": pl.String,
            "confidence": pl.Float64,
        },
    )


# --------------------------------------------------------------------------------------
# User labels
# --------------------------------------------------------------------------------------


def label(store, match: str, phase: str) -> list[dict[str, Any]]:
    """Record the user's phase for the run(s) matching ``match``; used by the next train."""
    from forensics.runs import find_runs

    if phase not in PHASES:
        raise UsageError(f"{phase}: not a phase", hint="one of " + ", ".join(PHASES))
    hits = find_runs(store, match, classify=False)
    if len(hits) > 1:
        exact = hits.filter(pl.col("name") == match)
        if len(exact) != 1:
            names = ", ".join(hits["name"].to_list()[:8])
            raise UsageError(
                f"{match}: matches {len(hits)} runs ({names})",
                hint="give the exact run name or run id",
            )
        hits = exact
    now = dt.datetime.now()
    rows = [
        {
            "run_id": r["run_id"],
            "source_id": r["source_id"],
            "run_index": r["run_index"],
            "name": r["name"],
            "phase": phase,
            "labeled_at": now,
        }
        for r in hits.iter_rows(named=True)
    ]
    ids = [r["run_id"] for r in rows]
    with store.transaction() as tx:
        tx.drop_rows("labels", ~pl.col("run_id").is_in(ids))
        tx.append("labels", pl.DataFrame(rows, schema=LABEL_SCHEMA))
    _MODEL_CACHE.pop(_cache_key(store), None)
    return rows


def _labeled_runs(store) -> list[tuple[Analysis, str]]:
    df = store.table("labels")
    if df.is_empty():
        return []
    out = []
    for sid, ri, ph in df.select("source_id", "run_index", "phase").iter_rows():
        if sid not in store.sources():
            continue
        out.append((analyze_stored(store, sid, int(ri)), ph))
    return out


__all__ = [
    "PHASES",
    "Analysis",
    "Verdict",
    "analyze",
    "classify_file",
    "classify_source",
    "classify_text",
    "classify_runs",
    "classify_stored",
    "load_model",
    "train",
    "label",
    "RunNotFound",
]


# --------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------
def per_phase(y_true: list[str], y_pred: list[str]) -> dict[str, dict[str, Any]]:
    """Precision, recall, F1 and support of every phase seen in ``y_true`` or ``y_pred``."""
    per = {}
    labels = [p for p in PHASES if p in set(y_true) | set(y_pred)]
    for c in labels:
        tp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == c and p == c)
        fp = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t != c and p == c)
        fn = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == c and p != c)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        per[c] = {
            "precision": round(prec, 3),
            "recall": round(rec, 3),
            "f1": round(f1, 3),
            "support": tp + fn,
        }
    return per


def _scores(y_true: list[str], y_pred: list[str]) -> dict[str, Any]:
    per = per_phase(y_true, y_pred)
    present = [c for c, m in per.items() if m["support"]]
    macro = sum(per[c]["f1"] for c in present) / len(present) if present else 0.0
    confusion = {
        t: {
            p: sum(1 for a, b in zip(y_true, y_pred, strict=True) if a == t and b == p)
            for p in PHASES
        }
        for t in PHASES
        if t in set(y_true)
    }
    acc = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == p) / max(1, len(y_true))
    return {
        "n": len(y_true),
        "accuracy": round(acc, 3),
        "macro_f1": round(macro, 3),
        "per_phase": per,
        "confusion": confusion,
    }


def _predict(model: Model, items: list[tuple[dict[str, str], Analysis]]) -> list[Verdict]:
    return verdicts([a for _, a in items], model)


def _ece(conf: list[float], correct: list[bool], bins: int = 10) -> float:
    tot = len(conf)
    if not tot:
        return 0.0
    err = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(conf) if lo < c <= hi or (b == 0 and c == 0)]
        if not idx:
            continue
        acc = sum(correct[i] for i in idx) / len(idx)
        avg = sum(conf[i] for i in idx) / len(idx)
        err += len(idx) / tot * abs(acc - avg)
    return round(err, 3)


def evaluate(*, corpus: Path = CORPUS, folds: int = 5) -> dict[str, Any]:
    """Held-out figures (split by generator family) and grouped cross-validation."""
    from sklearn.model_selection import GroupKFold

    t0 = time.monotonic()
    if folds < 2:
        raise UsageError(
            f"--folds {folds}: cross-validation needs at least 2 folds", hint="--folds 5"
        )
    ex = corpus_examples(corpus)
    families = {r["family"] for r, _ in ex if r["split"] != "hand"}
    if folds > len(families):
        raise UsageError(
            f"--folds {folds}: the corpus has only {len(families)} generator families to split",
            hint=f"--folds 2..{len(families)}",
        )
    train_ex = [x for x in ex if x[0]["split"] == "train"]
    test_ex = [x for x in ex if x[0]["split"] == "test"]
    hand_ex = [x for x in ex if x[0]["split"] == "hand"]
    fit_t0 = time.monotonic()
    model = _fit([features(a) for _, a in train_ex], [r["phase"] for r, _ in train_ex])
    fit_s = time.monotonic() - fit_t0
    logits, yi = _cv_logits(
        [features(a) for _, a in train_ex],
        [r["phase"] for r, _ in train_ex],
        [r["family"] for r, _ in train_ex],
        model.classes,
    )
    if logits is not None:
        model.data["temperature"] = _temperature(logits, yi)
    report: dict[str, Any] = {
        "examples": len(ex),
        "train": len(train_ex),
        "test": len(test_ex),
        "hand_examples": len(hand_ex),
        "fit_seconds": round(fit_s, 2),
    }

    def block(items):
        vs = _predict(model, items)
        y = [r["phase"] for r, _ in items]
        pred = [v.phase for v in vs]
        s = _scores(y, pred)
        s["rules_only_macro_f1"] = _scores(y, [a.rule_phase or "pre-exec" for _, a in items])[
            "macro_f1"
        ]
        hung_ok = sum(
            1 for (r, _), v in zip(items, vs, strict=True) if (r["hung"] == "true") == v.hung
        )
        s["hung_accuracy"] = round(hung_ok / max(1, len(items)), 3)
        sig_items = [(r, v) for (r, _), v in zip(items, vs, strict=True) if r.get("signature")]
        sig_ok = sum(1 for r, v in sig_items if _sig_ok(r["signature"], v.signature))
        s["signature_accuracy"] = round(sig_ok / max(1, len(sig_items)), 3)
        s["ece"] = _ece(
            [v.confidence for v in vs], [v.phase == t for v, t in zip(vs, y, strict=True)]
        )
        s["errors"] = [
            {
                "file": r["file"],
                "label": r["phase"],
                "pred": v.phase,
                "signature": v.signature,
                "expected_signature": r.get("signature"),
            }
            for (r, _), v in zip(items, vs, strict=True)
            if v.phase != r["phase"]
            or (r.get("signature") and not _sig_ok(r["signature"], v.signature))
        ][:30]
        return s

    report["heldout"] = block(test_ex)
    if hand_ex:
        report["hand"] = block(hand_ex)
    # grouped cross-validation over all generated examples (folds never share a family)
    gen = [x for x in ex if x[0]["split"] != "hand"]
    docs = [features(a) for _, a in gen]
    y = [r["phase"] for r, _ in gen]
    groups = [r["family"] for r, _ in gen]
    pred = [""] * len(gen)
    for tr, te in GroupKFold(n_splits=folds).split(docs, y, groups):
        m = _fit([docs[i] for i in tr], [y[i] for i in tr])
        m.data["temperature"] = model.data["temperature"]
        for i, v in zip(te, verdicts([gen[i][1] for i in te], m), strict=True):
            pred[i] = v.phase
    report["cv"] = _scores(y, pred)
    report["cv"]["folds"] = folds
    report["seconds"] = round(time.monotonic() - t0, 1)
    return report


def _sig_ok(expected: str, got: str | None) -> bool:
    if "|" in expected:
        return (got or "") in expected.split("|")
    if expected == "unknown":
        return bool(got and got.startswith("unknown:"))
    return expected == (got or "")
