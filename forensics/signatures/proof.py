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


# (id, compiled pattern, min lines, needs): a pattern is searched only in a line holding one
# of its ``needs`` (a substring test: the regex searches 9 lines in 10 of a busy log for none)
_PROOF = [(p["id"], re.compile(p["pattern"]), p["min"], p["needs"]) for p in SERVING_PROOF]


# A test harness's closing lines: what follows them (kubectl, a shell, cleanup) is not the
# server's and never decides.
HARNESS_END = re.compile(r"^Ran \d+ tests? in [\d.]+s$|^Finished test case \S")
# literals one of which every line HARNESS_END matches holds (harness_end's sieve)
HARNESS_END_NEEDS = ("Ran ", "Finished test case ")


def harness_end(lines: Iterable[tuple[int, str, str]]) -> int | None:
    """The first of ``lines`` ((line, kind, text)) that is a harness's closing line."""
    a, b = HARNESS_END_NEEDS
    return next(
        (li for li, _, t in lines if (a in t or b in t) and HARNESS_END.search(t.strip())), None
    )


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
        pid = _proves(text)
        if pid is not None:
            found.setdefault(pid, []).append(li)
    need = {pid: n for pid, _, n, _ in _PROOF}
    return sorted((li, pid) for pid, lis in found.items() if len(lis) >= need[pid] for li in lis)


def _proves(text: str) -> str | None:
    """The id of the first SERVING_PROOF row whose pattern matches ``text`` (searched only
    where the text holds one of the row's ``needs``), else None."""
    for pid, rx, _, needs in _PROOF:
        for lit in needs:  # loops, not any(): a generator per line and row costs more
            if lit in text:
                if rx.search(text):
                    return pid
                break
    return None


# Lines that only follow a failure (the SIGQUIT chain): never the cause themselves.
CONSEQUENCES = re.compile(
    r"Received sigquit from a child|SIGQUIT received\.|It usually means (?:the|one) child failed|"
    r"^Initialization failed\. Please see the error messages above|Killed$"
)
