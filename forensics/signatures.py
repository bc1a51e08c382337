"""The error-signature catalog (data) and its matcher.

Each entry names one way an SGLang launch fails: the patterns that recognise it (regexes on
log lines, exception text and traceback text), where on the stack it must have happened
(``frames``, optional), the phase it usually belongs to, a one-line explanation and remedies
in the user's terms (the flag to change and to what). A new failure is a new row here plus a
fixture, never new code.

``NOISE`` lists texts that look like errors but never explain a failure (Triton compiler
diagnostics, deprecation warnings, benign TokenizerManager warnings).

Errors no entry recognises are grouped by ``template()`` (numbers, hex, paths and ids masked)
so that a repeated unknown failure shows up as one new signature ``unknown:<hash>`` with a count.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

PHASES = ("ok", "cleanup", "pre-exec", "load", "capture", "runtime")

# --------------------------------------------------------------------------------------
# The catalog. Order matters only as a tie-break: the highest `priority` hit is the cause.
# --------------------------------------------------------------------------------------
CATALOG: list[dict[str, Any]] = [
    {
        "id": "arg_error",
        "patterns": [
            r"^usage: (?:launch_server|sglang|python[\d.]* -m sglang)",
            r"^[\w./ -]*(?:launch_server(?:\.py)?|sglang serve): error: ",
            r"error: (?:argument --[\w-]+|unrecognized arguments|the following arguments are required)",
        ],
        "phase": "pre-exec",
        "priority": 90,
        "explanation": "the launch command has a flag SGLang's argument parser rejects, so the "
        "server never started",
        "remedies": [
            "fix the flag named in the error (spelling, value, or a flag this SGLang version "
            "does not have: check `python3 -m sglang.launch_server --help`)",
        ],
    },
    {
        "id": "invalid_server_args",
        "patterns": [
            r"speculative_eagle_topk > 1 with page_size > 1",
            r"Unknown speculative algorithm name",
            r"only supports topk = 1",
            r"does not support dp attention",
            r"requires --speculative-(?:eagle-topk|draft-model-path)",
            r"requires setting --speculative-draft-model-path",
            r"is incompatible with --speculative",
            r"speculative_num_draft_tokens .*must",
        ],
        # a bare `assert` (or a ValueError) in the argument checks names no flag: only the
        # stack says it was the validation of the server arguments
        "framed_patterns": [r"^(?:AssertionError|ValueError)\b"],
        "frames": r"server_args\.py|__post_init__|check_server_args|prepare_server_args|"
        r"speculative_hook|_handle_speculative",
        "frames_optional": True,
        "phase": "pre-exec",
        "priority": 85,
        "explanation": "SGLang rejected the combination of server arguments while validating "
        "them (ServerArgs), before anything was loaded",
        "remedies": [
            "change the conflicting flags the message names (e.g. --speculative-eagle-topk 1, "
            "or --page-size 1, or another --attention-backend)",
        ],
    },
    {
        "id": "undefined_symbol",
        "patterns": [r"undefined symbol: "],
        "phase": "pre-exec",
        "priority": 88,
        "explanation": "a compiled extension (sgl_kernel, flashinfer, torch) was built against "
        "another torch/CUDA version than the one installed",
        "remedies": [
            "reinstall the kernel package matching your torch version "
            "(pip install --force-reinstall sgl-kernel / flashinfer for torch X.Y)",
        ],
    },
    {
        "id": "import_error",
        "patterns": [
            r"\bModuleNotFoundError: ",
            r"\bImportError: ",
            r"No module named '?[\w.]+",
            r"cannot import name '",
        ],
        "phase": "pre-exec",
        "priority": 80,
        "explanation": "a Python module the server needs could not be imported (missing or "
        "mismatched package in this environment)",
        "remedies": [
            "install the missing package in the python that runs the server, or use the "
            "python of the environment where SGLang is installed",
        ],
    },
    {
        "id": "missing_binary",
        "patterns": [
            r"(?:^|: )(?:python3?|nohup|bash|sglang)[\w.]*: (?:command )?not found",
            r"^(?:nohup|bash): .*: No such file or directory",
            r"can't open file '.*': \[Errno 2\] No such file or directory",
            r"No such file or directory: '[^']*python[^']*'",
        ],
        "phase": "pre-exec",
        "priority": 86,
        "explanation": "the shell could not start the server: the python binary, a script or "
        "the log's folder does not exist",
        "remedies": [
            "use the full path of the python that has sglang installed "
            "(e.g. /opt/venv/bin/python3) and create the log folder (mkdir -p) before launching",
        ],
    },
    {
        "id": "model_path_not_found",
        "patterns": [
            r"is not a local folder and is not a valid model identifier",
            r"Repository Not Found",
            r"RepositoryNotFoundError",
            r"HFValidationError",
            r"does not appear to have a file named config\.json",
            r"Can't load the configuration of '",
            r"Incorrect path_or_model_id",
            r"No such file or directory: '[^']*(?:config\.json|tokenizer|\.safetensors|/models?/)",
            r"(?:model|draft model) path .* does not exist",
        ],
        "phase": "pre-exec",
        "priority": 84,
        "explanation": "the model (or draft model) path given to the server does not exist or "
        "is not a model folder",
        "remedies": [
            "check --model-path / --speculative-draft-model-path: the folder must exist on the "
            "GPU host and contain config.json",
        ],
    },
    {
        "id": "port_in_use",
        "patterns": [
            r"error while attempting to bind on address .*address already in use",
            r"\[Errno 98\] (?:error while attempting to bind|Address already in use)",
            r"^port \d+ is in use\. Waiting",
            r"^Port is already in use\.",
            r"at \d+ is not available in \d+ seconds",
            r"(?:EADDRINUSE|address already in use)",
            r"The server socket has failed to (?:listen|bind)",
        ],
        "phase": "cleanup",
        "priority": 87,
        "config_matters": False,  # the host, not the configuration: no config diff
        "explanation": "a port the server needs is still held, usually by the previous server "
        "that the cleanup did not stop",
        "remedies": [
            "stop the old server first (fuser -k 30000/tcp, or kill the PID that "
            "`ss -ltnp | grep 30000` shows), or launch on another --port",
        ],
    },
    {
        "id": "orphan_gpu_process",
        "patterns": [
            # SGLang's own text; its head is enough (the rest may be wrapped or cut)
            r"The memory capacity is unbalanced",
            r"CUDA-capable device\(s\) is/are busy or unavailable",
            r"cudaErrorDevicesUnavailable",
            r"GPU \d+ .*(?:occupied|in use) by (?:another|other) process",
        ],
        "phase": "cleanup",
        "priority": 86,
        "config_matters": False,  # the host, not the configuration: no config diff
        "explanation": "GPU memory is held by another process (often the previous server that "
        "was not fully killed)",
        "remedies": [
            "free the GPUs before launching: `nvidia-smi --query-compute-apps=pid,used_memory "
            "--format=csv`, then kill those PIDs (or `fuser -k /dev/nvidia*`) and wait until "
            "memory.used is near 0",
        ],
    },
    {
        "id": "kv_pool_oom",
        "patterns": [
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            r"Memory pool size is too small",
            r"increase --mem-fraction-static",
        ],
        "phase": "load",
        "priority": 82,
        "explanation": "after loading the weights there was not enough GPU memory left for "
        "the KV cache pool (--mem-fraction-static too low for this model and tp size)",
        "remedies": [
            "raise --mem-fraction-static (e.g. {mem_up})",
            "spread the model over more GPUs (--tp-size), or lower --context-length",
        ],
    },
    {
        "id": "capture_failed",
        "patterns": [
            r"Capture (?:cuda|CUDA|CPU|cpu|prefill CUDA) graph failed: ?(?P<cause>.*)",
            r"cudaErrorStreamCapture\w+",
            r"operation not permitted when stream is capturing",
            r"operation failed due to a previous error during capture",
        ],
        "phase": "capture",
        "priority": 92,
        "explanation": "CUDA-graph capture failed ({cause})",
        "remedies": [
            "see the cause-specific remedies below",
        ],
    },
    {
        "id": "warmup_failed",
        "patterns": [r"Initialization failed\. warmup error", r"warmup (?:request )?failed"],
        "phase": "capture",
        "priority": 89,
        "explanation": "the server came up but its warm-up request failed, so it shut itself down",
        "remedies": [
            "read the warmup error above it; retry with --skip-server-warmup to see whether the "
            "first real request fails the same way",
        ],
    },
    {
        "id": "weight_load_oom",
        "patterns": [r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory"],
        "frames": r"load_model|load_weights|weight_loader|model_loader|_initialize_model|"
        r"get_model|create_weights|make_layers|DefaultModelLoader",
        "phase": "load",
        "priority": 81,
        "explanation": "the GPU ran out of memory while loading the model weights",
        "remedies": [
            "use more GPUs (--tp-size), a quantized checkpoint, or free GPU memory held by "
            "other processes; --mem-fraction-static does not help at this stage",
        ],
    },
    {
        "id": "nccl_timeout",
        "patterns": [
            r"Watchdog caught collective operation timeout",
            r"WorkNCCL\(.*\) ran for \d+ milliseconds before timing out",
            r"ProcessGroupNCCL.*(?:timeout|Timeout|timed out)",
            r"NCCL (?:communicator|collective).*timed? ?out",
        ],
        "phase": None,
        "hung": True,
        "priority": 78,
        "explanation": "a collective operation between GPUs did not finish in time: one rank "
        "stalled or died, and the others waited for it",
        "remedies": [
            "look for the rank that failed first (its own traceback above); for slow startups "
            "raise --dist-timeout (e.g. --dist-timeout 3600)",
        ],
    },
    {
        "id": "nccl_error",
        "patterns": [
            r"NCCL error",
            r"nccl(?:Unhandled|System|Internal|InvalidUsage|RemoteError)",
            r"DistBackendError",
            r"ncclCommInitRank failed",
        ],
        "phase": None,
        "priority": 77,
        "explanation": "NCCL (the GPU-to-GPU communication library) failed",
        "remedies": [
            "rerun with NCCL_DEBUG=INFO to see which rank and transport failed; check that no "
            "other job uses the GPUs, and try NCCL_P2P_DISABLE=1 or --disable-custom-all-reduce",
        ],
    },
    {
        "id": "illegal_memory_access",
        "patterns": [
            r"an illegal memory access was encountered",
            r"cudaErrorIllegalAddress",
            r"CUDA_ERROR_ILLEGAL_ADDRESS",
            r"illegal memory access",
        ],
        "phase": "runtime",
        "priority": 76,
        "explanation": "a GPU kernel read or wrote outside its memory (a kernel bug, often in "
        "the attention backend or a speculative-decoding path)",
        "remedies": [
            "try another --attention-backend (e.g. fa3 or triton), or smaller speculative "
            "settings (--speculative-eagle-topk 1); rerun with CUDA_LAUNCH_BLOCKING=1 to find "
            "the kernel",
        ],
    },
    {
        "id": "device_side_assert",
        "patterns": [
            r"device-side assert(?:ion)? triggered",
            r"cudaErrorAssert",
            r"Assertion `.*` failed\.",
        ],
        "phase": "runtime",
        "priority": 75,
        "explanation": "a GPU kernel's assertion failed (usually an out-of-range index, e.g. a "
        "token id outside the vocabulary or a draft/target vocabulary mismatch)",
        "remedies": [
            "check that the draft model matches the target (same vocabulary / hot-token map); "
            "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel",
        ],
    },
    {
        "id": "watchdog_timeout",
        "patterns": [r"(?:\w+ watchdog timeout|Watchdog timeout) \(self\.watchdog_timeout="],
        "phase": "runtime",
        "hung": True,
        "priority": 79,
        "explanation": "the scheduler stopped making progress on a running batch for "
        "--watchdog-timeout seconds, so the watchdog killed the server",
        "remedies": [
            "look at the stack dump before it for where it hung; if the step is only slow "
            "(huge batch, first compile), raise --watchdog-timeout (e.g. 600)",
        ],
    },
    {
        "id": "detokenizer_heartbeat",
        "patterns": [
            r"Health check failed\. Server couldn't get a response from detokenizer",
            r"^DetokenizerManager hit an exception",
            r"DetokenizerManager.*(?:exception|died|dead)",
        ],
        "phase": "runtime",
        "hung": True,
        "priority": 74,
        "explanation": "the server stopped answering: the detokenizer sent nothing back for the "
        "health-check interval (the scheduler is stuck or dead)",
        "remedies": [
            "look for a scheduler error or watchdog dump around this time; if the server is only "
            "overloaded, raise SGLANG_HEALTH_CHECK_TIMEOUT",
        ],
    },
    {
        "id": "segfault",
        "patterns": [r"^Fatal Python error: (?:Segmentation fault|Aborted|Bus error)"],
        "phase": None,
        "priority": 72,
        "explanation": "a native crash (segmentation fault/abort) inside a compiled extension",
        "remedies": [
            "check for mismatched torch/CUDA/kernel packages; the `Current thread` stack "
            "shows which library crashed",
        ],
    },
    {
        "id": "disk_full",
        "patterns": [
            r"No space left on device",
            r"\[Errno 28\]",
            r"\bENOSPC\b",
        ],
        "phase": None,
        "phase_from": "stage",
        "priority": 73,
        "config_matters": False,  # the host, not the configuration: no config diff
        "explanation": "a filesystem on the host is full (ENOSPC): a write of the log, a cache "
        "(Triton, torch.compile, CUDA graphs) or a download failed",
        "remedies": [
            "free space where the error points (`df -h`; `du -xsh ~/.cache/* /tmp/* | sort -h`), "
            "or move the caches (TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, HF_HOME) to a larger "
            "disk; forensics launch refuses to start below the recipe's min_free_mb",
        ],
    },
    {
        "id": "cuda_oom",
        "patterns": [r"CUDA out of memory", r"OutOfMemoryError", r"CUDA error: out of memory"],
        "phase": None,
        "priority": 70,
        "explanation": "the GPU ran out of memory",
        "remedies": [
            "lower --mem-fraction-static (e.g. {mem_down}) to leave room for activations, "
            "or lower --max-running-requests / --cuda-graph-max-bs (-decode on SGLang >= 0.5.14)",
        ],
    },
    {
        "id": "scheduler_died",
        "patterns": [
            r"Rank \d+ scheduler (?:is dead|died during initialization)",
            r"^Exit code: -?\d+",
            r"^Subprocess .+ \(pid=\d+\) crashed with exit code -?\d+",
            r"^Child process unexpectedly failed with",
        ],
        "phase": None,
        "phase_from": "stage",  # raised in the launcher's frames: the stage says where
        "priority": 40,
        "explanation": "a scheduler process died without logging a Python error{killer}",
        "remedies": [
            "check the kernel log on the GPU host: `dmesg -T | grep -iE 'oom|killed process|xid'`",
        ],
    },
]

# Causes inside a failed CUDA-graph capture (searched in the capture error's text).
CAPTURE_CAUSES: list[dict[str, Any]] = [
    {
        "id": "oom",
        "patterns": [r"out of memory", r"OutOfMemoryError"],
        "explanation": "out of GPU memory while capturing",
        "remedies": [
            "lower --mem-fraction-static (e.g. {mem_down}) to leave room for the graphs",
            "or lower --cuda-graph-max-bs (e.g. 16; --cuda-graph-max-bs-decode on SGLang >= 0.5.14)",
        ],
    },
    {
        "id": "stream_capture_invalidated",
        "patterns": [
            r"cudaErrorStreamCapture\w*",
            r"operation not permitted when stream is capturing",
            r"operation failed due to a previous error during capture",
            r"stream is capturing",
        ],
        "explanation": "an operation that is not allowed inside a CUDA graph (a host sync or "
        "allocation) ran during capture and invalidated it",
        "remedies": [
            "a kernel or model path does not support CUDA graphs with these settings; try "
            "another --attention-backend, or --disable-cuda-graph to confirm (slower)",
        ],
    },
    {
        "id": "illegal_address",
        "patterns": [r"illegal memory access", r"cudaErrorIllegalAddress", r"ILLEGAL_ADDRESS"],
        "explanation": "a kernel accessed invalid memory while capturing",
        "remedies": [
            "try another --attention-backend or smaller --cuda-graph-max-bs(-decode); rerun with "
            "CUDA_LAUNCH_BLOCKING=1",
        ],
    },
    {
        "id": "device_assert",
        "patterns": [r"device-side assert", r"cudaErrorAssert"],
        "explanation": "a kernel assertion failed while capturing",
        "remedies": ["check that the draft model matches the target model"],
    },
]

# Routine lines: error-looking texts SGLang and its environment print in healthy runs. They
# never explain a failure, wherever they appear ("why" says what they are). A `whole_line`
# entry is routine even when the line also holds a signature's words ("Ignore import error when
# loading x: No module named y" is not an import error of the server).
NOISE: list[dict[str, str]] = [
    {
        "id": "triton_diag",
        "pattern": r"^(?:[\w/.\-]+:\d+:\d+: )?error: .*(?:triton|tt\.|ttg\.|mlir|"
        r"operation scheduled before its operands|failed to legalize)",
        "why": "a Triton/MLIR compiler diagnostic; the exception that follows (if any) decides",
    },
    {
        "id": "triton_note",
        "pattern": r"^[\w/.\-]+\.py:\d+:\d+: (?:error|note|remark): ",
        "why": "a compiler note pointing into a kernel's source",
    },
    {
        "id": "deprecation",
        "pattern": r"(?i)\bdeprecat|FutureWarning|UserWarning",
        "why": "a deprecation or user warning",
    },
    {
        "id": "state_deleted",
        "pattern": r"but the state was deleted in TokenizerManager",
        "why": "a request finished after its client went away",
    },
    {
        "id": "request_error",
        "pattern": r"^\[http_server\] Error: |^Abort(?:ed)? request",
        "why": "one request failed or was aborted; the server went on",
    },
    {
        "id": "crash_dump_skip",
        "pattern": r"crash dump already performed, skipping",
        "why": "the crash dump of an earlier failure",
    },
    {
        "id": "ignored_import",
        "whole_line": True,
        "pattern": r"Ignore import error when loading ",
        "why": "SGLang imports every model file at start and logs those whose optional "
        "dependency is missing (ModelRegistry); the server goes on",
    },
    {
        "id": "driver_version",
        "whole_line": True,
        "pattern": r"Warning: Driver Version: ",
        "why": "torch_npu's driver-version warning on Ascend hosts",
    },
    {
        "id": "resource_tracker",
        "whole_line": True,
        "pattern": r"resource_tracker(?:\.py:\d+: UserWarning)?: There appear to be \d+ leaked|"
        r"resource_tracker: \S+: (?:FileNotFoundError|UserWarning)",
        "why": "multiprocessing's leak report when a process tree exits: it says the run "
        "ended, not why",
    },
    {
        "id": "tbe_subprocess",
        "whole_line": True,
        "pattern": r"TBE Subprocess\[\w+\] raise error",
        "why": "Ascend CANN's kernel-compiler workers reporting that their parent exited",
    },
    {
        "id": "http2_preface",
        "whole_line": True,
        "pattern": r'"PRI \* HTTP/2\.0" \d{3}',
        "why": "an HTTP/2 client probing the HTTP/1.1 server (404)",
    },
]

# Serving proof that is not a Decode line: what a benchmark or eval client prints only after
# the server answered it (id, tool that prints it, pattern, how many lines it takes: the
# warm-up request before "ready" is one generate call, so HTTP 200s prove serving from two).
SERVING_PROOF: list[dict[str, Any]] = [
    {
        "id": "bench_result",
        "tool": "sglang.bench_serving, vllm bench serve",
        "pattern": r"^\s*Successful requests:\s+[1-9]\d*\s*$|"
        r"^\s*Output token throughput \(tok/s\):\s+\d|^\s*Mean TPOT \(ms\):\s+\d",
        "min": 1,
    },
    {
        "id": "perf_table",
        "tool": "AIPerf, genai-perf",
        "pattern": r"NVIDIA (?:AIPerf|GenAI-Perf) \| LLM Metrics|"
        r"^\s*[│┃|]?\s*Output Token Throughput \(tokens/sec\)\s*[│┃|]\s*[\d,.]+",
        "min": 1,
    },
    {
        "id": "eval_accuracy",
        "tool": "sglang few-shot gsm8k/mmlu, lm-eval",
        "pattern": r"^\s*Accuracy:\s+[01]?\.\d+\s*$|^\|\s*\w[\w-]*\s*\|.*\|\s*exact_match\s*\|",
        "min": 1,
    },
    {
        "id": "http_200_generate",
        "tool": "uvicorn's access log",
        "pattern": r'"POST /(?:generate|v1/(?:chat/)?completions) HTTP/[\d.]+" 200\b',
        "min": 2,
    },
]
_PROOF = [(p["id"], re.compile(p["pattern"]), p["min"]) for p in SERVING_PROOF]

# Logs of other servers: such a log is not SGLang's, and no verdict on it is decided.
NOT_SGLANG: list[dict[str, str]] = [
    {
        "id": "vllm",
        "what": "vLLM's server log",
        "pattern": r"^\((?:APIServer|EngineCore\w*|Worker\w*|VllmWorker\w*) pid=\d+\) "
        r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\]",
    },
]
_FOREIGN = [(n["id"], re.compile(n["pattern"])) for n in NOT_SGLANG]


def foreign_log(texts: Iterable[str], *, least: int = 3) -> str | None:
    """The NOT_SGLANG id whose lines the log has at least ``least`` of, else None."""
    seen: dict[str, int] = {}
    for t in texts:
        for fid, rx in _FOREIGN:
            if rx.search(t):
                seen[fid] = seen.get(fid, 0) + 1
                if seen[fid] >= least:
                    return fid
    return None


# A test harness's closing lines: what follows them (kubectl, a shell, cleanup) is not the
# server's and never decides.
HARNESS_END = re.compile(r"^Ran \d+ tests? in [\d.]+s$|^Finished test case \S")


def serving_proof(lines: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """(line, SERVING_PROOF id) of the lines that prove the server answered requests."""
    found: dict[str, list[int]] = {}
    for li, text in lines:
        for pid, rx, _ in _PROOF:
            if rx.search(text):
                found.setdefault(pid, []).append(li)
                break
    need = {pid: n for pid, _, n in _PROOF}
    return sorted((li, pid) for pid, lis in found.items() if len(lis) >= need[pid] for li in lis)


# Lines that only follow a failure (the SIGQUIT chain): never the cause themselves.
CONSEQUENCES = re.compile(
    r"Received sigquit from a child|SIGQUIT received\.|It usually means (?:the|one) child failed|"
    r"^Initialization failed\. Please see the error messages above|Killed$"
)


@dataclass(frozen=True)
class Signature:
    id: str
    patterns: tuple[re.Pattern[str], ...]
    phase: str | None
    explanation: str
    remedies: tuple[str, ...]
    priority: int = 50
    hung: bool = False
    frames: re.Pattern[str] | None = None
    frames_optional: bool = False
    phase_from: str = "frames"  # "stage": the frames are the reporter's, not the failure's
    # patterns that count only when the traceback's frames match ``frames`` (optional or not)
    framed: tuple[re.Pattern[str], ...] = ()
    config_matters: bool = True  # False: configuration differences do not explain it


@dataclass
class Hit:
    signature: Signature
    text: str
    line: int | None
    groups: dict[str, str] = field(default_factory=dict)
    cause: dict[str, Any] | None = None  # capture_failed: the cause inside


def _compile() -> list[Signature]:
    out = []
    for e in CATALOG:
        out.append(
            Signature(
                id=e["id"],
                patterns=tuple(re.compile(p, re.M) for p in e["patterns"]),
                phase=e.get("phase"),
                explanation=e["explanation"],
                remedies=tuple(e["remedies"]),
                priority=e.get("priority", 50),
                hung=e.get("hung", False),
                frames=re.compile(e["frames"]) if e.get("frames") else None,
                frames_optional=e.get("frames_optional", False),
                phase_from=e.get("phase_from", "frames"),
                framed=tuple(re.compile(p, re.M) for p in e.get("framed_patterns", ())),
                config_matters=e.get("config_matters", True),
            )
        )
    return out


SIGNATURES: list[Signature] = _compile()
BY_ID: dict[str, Signature] = {s.id: s for s in SIGNATURES}
_NOISE = [(n["id"], re.compile(n["pattern"])) for n in NOISE]
_CAUSES = [(c, [re.compile(p) for p in c["patterns"]]) for c in CAPTURE_CAUSES]

# a traceback's frame, or a faulthandler dump's (`File "x.py", line 12 in f`, no comma)
FRAME_RX = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')


_FRAME_START = re.compile(r'^\s*File "')
_FRAME_END = re.compile(r'", line \d+,? in [\w<>.]+\s*$')
_WRAP_PIECE = re.compile(r'^[\w<>.,/" -]+$')
_EXC_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Warning)\b")


def unwrap_frames(text: str) -> str:
    """Rejoin frame lines a terminal or a mail client hard-wrapped at the screen width."""
    if "File " not in (text or ""):
        return text or ""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        j = i + 1
        if _FRAME_START.match(ln):
            # the pieces that follow it flush left (no exception line) belong to it
            while (
                j < len(lines)
                and j - i <= 3
                and _WRAP_PIECE.match(lines[j])
                and not _EXC_LINE.match(lines[j])
            ):
                ln += lines[j]
                j += 1
        out.append(ln)
        i = j
    return "\n".join(out)


def frames_of(text: str) -> list[tuple[str, str]]:
    """(file, function) of every frame in a traceback text, outermost first."""
    return [(m.group("file"), m.group("func")) for m in FRAME_RX.finditer(unwrap_frames(text))]


WHOLE_LINE = frozenset(n["id"] for n in NOISE if n.get("whole_line"))


def noise_kind(text: str) -> str | None:
    """The NOISE id of an error-looking text that never explains a failure, else None."""
    for nid, rx in _NOISE:
        if rx.search(text):
            return nid
    return None


def capture_cause(text: str) -> dict[str, Any] | None:
    for c, rxs in _CAUSES:
        for rx in rxs:
            if rx.search(text):
                return c
    return None


def match(text: str, *, line: int | None = None, frames: str = "") -> list[Hit]:
    """Every catalog entry whose patterns hit ``text`` (and whose frame condition holds)."""
    hits: list[Hit] = []
    if not text:
        return hits
    frame_blob = frames or " ".join(f"{f} {fn}" for f, fn in frames_of(text))
    for sig in SIGNATURES:
        for rx in sig.patterns + sig.framed:
            m = rx.search(text)
            if not m:
                continue
            if sig.frames is not None and (not sig.frames_optional or rx in sig.framed):
                if not sig.frames.search(frame_blob):
                    if rx in sig.framed:
                        continue
                    break
            hit = Hit(sig, text, line, {k: v for k, v in m.groupdict().items() if v})
            if sig.id == "capture_failed":
                hit.cause = capture_cause(text)
            hits.append(hit)
            break
    return hits


def best(hits: list[Hit]) -> Hit | None:
    if not hits:
        return None
    return max(hits, key=lambda h: h.signature.priority)


# --------------------------------------------------------------------------------------
# Unknown errors: one template per failure shape
# --------------------------------------------------------------------------------------
_MASKS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\x1b\[[0-9;]*m"), ""),
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I), "<ID>"),
    (re.compile(r"(?:[A-Za-z]:)?(?:/[\w.@+\-]+){2,}/?"), "<PATH>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<HEX>"),
    (re.compile(r"\b[0-9a-f]{12,}\b"), "<HEX>"),
    (re.compile(r"(?<=[=:])\s*'[^']*'|(?<=[=:])\s*\"[^\"]*\""), "<STR>"),
    (re.compile(r"\b(?:rid|pid|id|request_id|req)=\S+"), "<KV>"),
    (re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"), "<N>"),
    (re.compile(r"\s+"), " "),
]


def template(text: str) -> str:
    """Mask numbers, hex, paths, ids and quoted values so repeats of one failure compare equal."""
    t = (text or "").strip()
    for rx, rep in _MASKS:
        t = rx.sub(rep, t)
    return t[:300]


def unknown_id(text: str) -> str:
    return "unknown:" + hashlib.sha1(template(text).encode()).hexdigest()[:8]


# Remedy placeholders that move one setting of the log: placeholder -> (config key, flag,
# step, limit). A remedy whose setting is already at its limit in the log does not fit it
# ("raise --mem-fraction-static" at 0.95) and is left out; an unknown setting renders the
# generic phrase of ``render``.
REMEDY_SETTINGS: dict[str, tuple[str, str, float, float]] = {
    "mem_up": ("mem_fraction", "--mem-fraction-static", +0.05, 0.95),
    "mem_down": ("mem_fraction", "--mem-fraction-static", -0.05, 0.50),
}


def remedy_values(config: dict[str, Any]) -> dict[str, str | None]:
    """Placeholder -> the value to suggest from the log's ``config``, None when the setting
    is already at its limit (the remedy does not fit); settings the log lacks are absent."""
    out: dict[str, str | None] = {}
    for key, (field_, flag, step, limit) in REMEDY_SETTINGS.items():
        cur = config.get(field_)
        if not isinstance(cur, int | float) or isinstance(cur, bool):
            continue
        new = min(cur + step, limit) if step > 0 else max(cur + step, limit)
        moves = new > cur + 1e-9 if step > 0 else new < cur - 1e-9
        out[key] = f"{flag} {new:.2f}" if moves else None
    return out


def fitting(remedies: Iterable[str], values: dict[str, str | None]) -> list[str]:
    """The remedies that fit the log, rendered: one naming a placeholder whose value is None
    (its setting is at its limit) is left out."""
    unfit = {k for k, v in values.items() if v is None}
    known = {k: v for k, v in values.items() if v is not None}
    return [render(r, **known) for r in remedies if not unfit & _placeholders(r)]


def _placeholders(text: str) -> set[str]:
    try:
        return {name for _, name, _, _ in string.Formatter().parse(text) if name}
    except ValueError:  # a literal brace (`awk '{print}'`): no placeholders
        return set()


def render(text: str, **values: Any) -> str:
    """Fill ``{mem_up}``-style placeholders; unknown ones render as a generic phrase."""

    class _D(dict):
        def __missing__(self, key: str) -> str:
            return {
                "mem_up": "+0.05 over the current value",
                "mem_down": "-0.05 under the current value",
                "cause": "see the error",
                "killer": "",
            }.get(key, "")

    try:
        return text.format_map(_D(values))
    except (ValueError, IndexError):
        return text


def catalog_rows() -> list[dict[str, Any]]:
    """The catalog as plain rows (for docs and `--json`)."""
    return [
        {
            "id": e["id"],
            "phase": e.get("phase"),
            "hung": e.get("hung", False),
            "patterns": e["patterns"],
            "explanation": e["explanation"],
            "remedies": e["remedies"],
        }
        for e in CATALOG
    ]
