"""Serving proof that is not a Decode line, a harness's end, the SIGQUIT chain (data)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

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
