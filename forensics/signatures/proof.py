"""Serving proof that is not a Decode line, a harness's end, the SIGQUIT chain (data)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Serving proof that is not a Decode line: what a benchmark or eval client prints only after
# the server answered it (id, tool that prints it, pattern, how many lines it takes: the
# warm-up request before "ready" is one generate call, so HTTP 200s prove serving from two;
# ``needs``: literals one of which every line the pattern matches holds, may_prove's sieve).
SERVING_PROOF: list[dict[str, Any]] = [
    {
        "id": "bench_result",
        "tool": "sglang.bench_serving, vllm bench serve",
        "pattern": r"^\s*Successful requests:\s+[1-9]\d*\s*$|"
        r"^\s*Output token throughput \(tok/s\):\s+\d|^\s*Mean TPOT \(ms\):\s+\d",
        "min": 1,
        "needs": ("Successful requests:", "Output token throughput (tok/s):", "Mean TPOT (ms):"),
    },
    {
        "id": "perf_table",
        "tool": "AIPerf, genai-perf",
        "pattern": r"NVIDIA (?:AIPerf|GenAI-Perf) \| LLM Metrics|"
        r"^\s*[│┃|]?\s*Output Token Throughput \(tokens/sec\)\s*[│┃|]\s*[\d,.]+",
        "min": 1,
        "needs": ("| LLM Metrics", "Output Token Throughput (tokens/sec)"),
    },
    {
        "id": "eval_accuracy",
        "tool": "sglang few-shot gsm8k/mmlu, lm-eval",
        "pattern": r"^\s*Accuracy:\s+[01]?\.\d+\s*$|^\|\s*\w[\w-]*\s*\|.*\|\s*exact_match\s*\|",
        "min": 1,
        "needs": ("Accuracy:", "exact_match"),
    },
    {
        "id": "http_200_generate",
        "tool": "uvicorn's access log",
        "pattern": r'"POST /(?:generate|v1/(?:chat/)?completions) HTTP/[\d.]+" 200\b',
        "min": 2,
        "needs": ('"POST /',),
    },
]


_PROOF = [(p["id"], re.compile(p["pattern"]), p["min"]) for p in SERVING_PROOF]


# A test harness's closing lines: what follows them (kubectl, a shell, cleanup) is not the
# server's and never decides.
HARNESS_END = re.compile(r"^Ran \d+ tests? in [\d.]+s$|^Finished test case \S")


# every row's literals, one list: a text holding none of them proves nothing
PROOF_SIEVE = sorted({lit for p in SERVING_PROOF for lit in p["needs"]})


def may_prove(text: Any) -> Any:
    """A polars expression over texts (``text``: an expression): False where
    ``serving_proof`` finds no proof in the text (it holds none of the rows' ``needs``),
    True where it may. The verdict step runs the patterns only on the lines it keeps."""
    return text.fill_null("").str.contains_any(PROOF_SIEVE)


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
