"""Logs of other servers and tools: a log that is not SGLang's (data).

One row per kind of log a user may feed by mistake: ``id``, ``what`` (said in the verdict),
``pattern`` (a line of that log, searched on the lines the parser kept) and ``alone`` (the row
counts only when the log shows nothing of SGLang's: no stage, no metrics line, no catalog
signature; a CI job's pytest output or a shell session around a real SGLang log is the
harness's, not another server). Each row has a fixture, ``fixtures/not_sglang/<id>.log``,
written from that tool's documented or real output format.
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
_FOREIGN = [(n["id"], re.compile(n["pattern"]), bool(n.get("alone"))) for n in NOT_SGLANG]


def other_program(text: str) -> str | None:
    """The NOT_SGLANG id of a line another program printed (a shell, pytest, another server),
    else None."""
    return next((fid for fid, rx, _ in _FOREIGN if rx.search(text)), None)


def foreign_log(texts: Iterable[str], *, least: int = 3, sglang: bool = False) -> str | None:
    """The NOT_SGLANG id whose lines the log has at least ``least`` of, else None. ``sglang``:
    the log shows something of SGLang's (then the ``alone`` rows do not count)."""
    rows = [(fid, rx) for fid, rx, alone in _FOREIGN if not (alone and sglang)]
    seen: dict[str, int] = {}
    for t in texts:
        for fid, rx in rows:
            if rx.search(t):
                seen[fid] = seen.get(fid, 0) + 1
                if seen[fid] >= least:
                    return fid
    return None
