"""Logs of other servers and tools: a log that is not SGLang's (data).

One row per kind of log a user may feed by mistake: ``id``, ``what`` (said in the verdict),
``pattern`` (a line of that log, searched on the lines the parser kept) and ``alone`` (the row
counts only when the log shows nothing of SGLang's: no stage, no metrics line, no catalog
signature; a CI job's pytest output or a shell session around a real SGLang log is the
harness's, not another server). Each row has a fixture, ``fixtures/not_sglang/<id>.log``,
written from that tool's documented or real output format.

The ``every`` row is the text that is no log at all (a README, /proc or /etc files, CSV, JSON,
Python sources, dmesg, a shell history): it holds when the log shows nothing of SGLang's (no
stage, metrics line, server_args or catalog signature), no raised Python exception and no
host evidence, and at least ``most`` of its lines are neither of a kind the parser knows (a
warning, an error line) nor a line a launch leaves before SGLang prints anything
(``LAUNCH_TEXT``: nohup, the shell's and python's own errors, a signal's name,
CUDA_VISIBLE_DEVICES, pip, a Python warning), over at least ``least`` lines (a shorter text
is too little to say it is not a launch's). Its ``basis`` says the verdict places no phase.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Logs of other servers: such a log is not SGLang's, and no verdict on it is decided.
NOT_SGLANG: list[dict[str, Any]] = [
    {
        "id": "vllm",
        "what": "vLLM's server log",
        "pattern": r"^\((?:APIServer|EngineCore\w*|(?:Vllm)?Worker(?:[ _]\w+)*) pid=\d+\) "
        r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d \[[\w.]+:\d+\]",
    },
    {
        "id": "tgi",
        "what": "Hugging Face text-generation-inference's log",
        "pattern": r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z\s+(?:TRACE|DEBUG|INFO|WARN|ERROR)\s+"
        r"(?:[\w-]+: )*text_generation_(?:launcher|router|server)\b",
    },
    {
        "id": "tensorrt_llm",
        "what": "TensorRT-LLM's log",
        "pattern": r"^\[TensorRT-LLM\](?:\[(?:INFO|WARNING|ERROR|DEBUG|VERBOSE)\])? |"
        r"^\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] \[TRT-LLM\] \[[IWEVD]\] ",
    },
    {
        "id": "llama_cpp_server",
        "what": "llama.cpp's llama-server log",
        "pattern": r"^(?:llama_model_loader|llm_load_print_meta|llm_load_tensors|"
        r"llama_new_context_with_model|llama_context|load_tensors|print_info): |"
        r"^(?:srv|slot) +\w+: |^main: (?:HTTP )?server is listening",
    },
    {
        "id": "ollama",
        "what": "Ollama's server log",
        "pattern": r"^time=\S+ level=(?:DEBUG|INFO|WARN|ERROR) source=[\w./-]+\.go:\d+ msg=|"
        r"^\[GIN\] \d{4}/\d\d/\d\d - \d\d:\d\d:\d\d \| \d{3} \|",
    },
    {
        "id": "pytest",
        "what": "pytest's output",
        "alone": True,
        "pattern": r"^=+ (?:test session starts|FAILURES|ERRORS|short test summary info|"
        r"warnings summary) =+$|^platform \w+ -- Python [\d.]+, pytest-[\d.]+|"
        r"^collected \d+ items?\b|^=+ \d+ (?:passed|failed|errors?|skipped)\b.* =+$",
    },
    {
        "id": "shell_session",
        "what": "a shell session (prompts and commands)",
        "alone": True,
        # a prompt (`user@host:~/dir$ `, `(venv) root@gpu:/data# `) or a `bash -x` trace line
        "pattern": r"^(?:\([\w.-]+\) )?[\w.-]+@[\w.-]+:[~/][^\s#$]*[#$](?: |$)|^\+{1,3} [\w./-]",
    },
]

# Lines a launch leaves before SGLang prints its first line (``blocks`` False: counted
# against the ``every`` row's share), and the GPU host's evidence a user pastes (``blocks``
# True: one such line and the text is evidence, classified as such, never "no log").
LAUNCH_TEXT: list[tuple[str, str, bool]] = [
    ("nohup", r"^nohup: ", False),
    ("shell", r"^(?:[\w./-]*/)?(?:ba|da|z|k|tc|c)?sh(?:: line \d+)?: ", False),
    ("python", r"^(?:[\w./-]*/)?python[\d.]*: ", False),
    (
        "not_found",
        r"\bcommand not found\b|\bNo such file or directory\b|\bPermission denied\b",
        False,
    ),
    (
        "signal",
        r"^(?:Killed|Terminated|Aborted|Hangup|Segmentation fault|Illegal instruction|"
        r"Bus error|Floating point exception)\b",
        False,
    ),
    ("cuda_env", r"CUDA_VISIBLE_DEVICES|\bCUDA (?:error|driver)\b|NCCL (?:INFO|WARN)", False),
    (
        "python_error",
        r"^\w*(?:Error|Exception)\b|^\s*File \"[^\"]+\", line \d+|\b\w+Warning: ",
        False,
    ),
    (
        "torch_log",
        r"^\[[WEI] ?\d{4}|^\[rank\d+\]|^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[: ]",
        False,
    ),
    (
        "pip",
        r"^(?:Requirement already satisfied|Collecting |Installing collected packages|"
        r"Successfully installed|Looking in indexes)",
        False,
    ),
    (
        "sglang",
        r"\b[Ss][Gg][Ll]ang\b|\bSGLANG\b",
        False,
    ),  # a wrapper's banner, the launch command echoed
    ("nvidia_smi", r"NVIDIA-SMI \d|No running processes found|^\s*(?:index|pid), ", True),
    ("fuser", r"^/dev/nvidia[\w-]*:", True),
    ("ps", r"^\s*(?:USER\s+)?PID\s+(?:PPID|TTY|USER|%CPU)\b", True),
    ("py_spy", r"^Process \d+: |^Thread (?:0x)?[\da-fA-F]+ \(", True),
    ("ss", r"^(?:Netid\s+)?State\s+Recv-Q\s+Send-Q", True),
    ("xid", r"NVRM: Xid", True),
]
LAUNCH_RX = re.compile("|".join(f"(?:{p})" for _, p, blocks in LAUNCH_TEXT if not blocks))
EVIDENCE_RX = re.compile("|".join(f"(?:{p})" for _, p, blocks in LAUNCH_TEXT if blocks))

NOT_SGLANG.append(
    {
        "id": "plain_text",
        "what": "no line of SGLang's (no startup stage, metrics line, server_args, warning, "
        "error or traceback) nor of a launch (nohup, the shell's or python's errors)",
        "every": True,  # judged on the whole log: nothing of SGLang's, hardly a launch's line
        "most": 0.9,  # the share of its lines neither the parser knows nor LAUNCH_TEXT has
        "alone": True,
        "basis": "not_sglang",  # the verdict places no phase
        "pattern": LAUNCH_RX.pattern,  # what it must NOT have
    }
)
_FOREIGN = [
    (n["id"], re.compile(n["pattern"]), bool(n.get("alone")))
    for n in NOT_SGLANG
    if not n.get("every")
]
_EVERY = [n for n in NOT_SGLANG if n.get("every")]
BASIS = {n["id"]: n.get("basis", "foreign") for n in NOT_SGLANG}


def other_program(text: str) -> str | None:
    """The NOT_SGLANG id of a line another program printed (a shell, pytest, another server),
    else None."""
    return next((fid for fid, rx, _ in _FOREIGN if rx.search(text)), None)


def foreign_log(
    texts: Iterable[str],
    *,
    least: int = 3,
    sglang: bool = False,
    blocked: bool = False,
    known: int = 0,
) -> str | None:
    """The NOT_SGLANG id whose lines the log has at least ``least`` of, else None. ``sglang``:
    the log shows something of SGLang's (then the ``alone`` rows do not count); ``blocked``:
    it shows a raised exception or host evidence, and ``known`` lines of it are of a kind the
    parser knows (both count against the ``every`` row)."""
    rows = [(fid, rx) for fid, rx, alone in _FOREIGN if not (alone and sglang)]
    seen: dict[str, int] = {}
    text_lines, launch = 0, known
    for t in texts:
        for fid, rx in rows:
            if rx.search(t):
                seen[fid] = seen.get(fid, 0) + 1
                if seen[fid] >= least:
                    return fid
        if t.strip():
            text_lines += 1
            launch += bool(LAUNCH_RX.search(t.strip()))
            blocked = blocked or bool(EVIDENCE_RX.search(t))
    if sglang or blocked or text_lines < least:
        return None
    return next((n["id"] for n in _EVERY if launch <= (1 - n["most"]) * text_lines), None)
