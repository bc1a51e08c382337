"""Issue 15, logs as they really are: lines without SGLang's prefix (NCCL_DEBUG=INFO output,
plain prints, Python warnings' code lines, tqdm bars) read in bulk (parsers/sglang/bulk.py
``_bare_kinds``) give the rows, counts, state and run extents of the per-line Python path
(``LogParser(bulk=False)``), on mixes built to hit where the two meet: a traceback open when
unprefixed lines come (an exception's message swallows every unprefixed line after it),
orphan frames, tracebacks closed by a prefixed line of another rank, rule lines among the
unprefixed ones (errors, NCCL WARN, warnings, progress bars), transport prefixes learned
mid-chunk, blank, tabbed, non-ASCII and progress-frame lines, every chunking."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers.sglang import LogParser
from forensics_parsers.sglang import bulk as B
from tests.test_parser_bulk import HEAD, parse, same

NCCL = "node01:41{s}:43{s} [{s}] NCCL INFO Channel 0{s}/24 :    0   1   2   3"
LINES = [
    NCCL,
    "node01:41{s}:43{s} [{s}] NCCL INFO comm 0x7f{s} rank {s} nRanks 8 nNodes 1 localRanks 8",
    "node01:41{s}:43{s} [{s}] NCCL INFO Connected all rings",
    "node01:41{s}:43{s} [{s}] NCCL WARN Cuda failure 'out of memory'",
    "node01:41{s}:43{s} [{s}] NCCL INFO NCCL error: unhandled cuda error",  # an error rule
    "NCCL version 2.21.{s}+cuda12.4",
    "INFO hello {s}",
    "  warnings.warn(",
    "/usr/lib/python3/torch/cuda/__init__.py:1{s}: UserWarning: driver too old",
    "Loading safetensors checkpoint shards:  4{s}% Completed | 4{s}/100 [00:31<00:38,  1.42it/s]",
    " 1{s}%|#         | 1/10 [00:01<00:09]",
    "this is deprecated {s}",  # an inert rule (noise)
    "NCCL_P2P_LEVEL=NVL CUDA_VISIBLE_DEVICES=0,1,2,{s}",
    "Traceback (most recent call last):",
    '  File "/x/y.py", line 1{s}, in f',
    "    foo()",
    "RuntimeError: boom {s}",
    "During handling of the above exception, another exception occurred:",
    "",
    "   ",
    "\tkey = value {s}",
    "caf\u00e9 {s}",
    "bar 1{s}%\rbar 2{s}%\rdone",
    "ERROR: something {s}",
    "svc-1  | [2026-02-25 10:00:0{s} TP0] WARNING: behind a transport prefix",
    "[2026-02-25 10:00:0{s} TP1] Scheduler hit an exception: Traceback (most recent call last):",
    "[2026-02-25 10:00:0{s} TP0] WARNING: Request 1 exceeds the context length",
    '[2026-02-25 10:00:0{s}] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-02-25 10:00:0{s} TP{s}] Some line no rule knows",
    "[2026-02-25 10:00:0{s} TP0] Load weight begin. avail mem=10.00 GB",
    "[2026-02-25 10:00:0{s} TP0] server_args=ServerArgs(model_path='m', tp_size=2)",
    "[2026-02-25 10:00:0{s} TP0] Decode batch, #running-req: 1, #token: 9, gen throughput (token/s): 8.00, ",
]
line = st.tuples(st.sampled_from(LINES), st.integers(0, 9)).map(lambda x: x[0].format(s=x[1]))
# runs of NCCL lines (a startup prints thousands in a row), so gaps hold many bulk lines
block = st.one_of(line, st.integers(1, 40).map(lambda n: [NCCL.format(s=i % 8) for i in range(n)]))


def _join(parts: list) -> bytes:
    out = list(HEAD)
    for p in parts:
        out += p if isinstance(p, list) else [p]
    return ("\n".join(out) + "\n").encode()


logs = st.lists(block, max_size=50).map(_join)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(data: bytes, cut: int) -> None:
    fast, fast_state = parse(data, cut, True)
    slow, slow_state = parse(data, cut, False)
    same(fast, slow)
    assert json.dumps(fast_state, sort_keys=True) == json.dumps(slow_state, sort_keys=True)


@SETTINGS
@given(logs, st.sampled_from([7, 300, 4096, 1 << 20]))
def test_unprefixed_lines_in_bulk_equal_the_python_path(data, cut):
    _check(data, cut)


@SETTINGS
@given(logs, st.sampled_from([300, 1 << 20]))
def test_unprefixed_rule_lines_classified_in_polars_equal_the_python_path(data, cut):
    """``_first_rules``' polars branch (past PYTHON_MAX lines) over the unprefixed ones."""
    old = B.PYTHON_MAX
    B.PYTHON_MAX = 0
    try:
        _check(data, cut)
    finally:
        B.PYTHON_MAX = old


def test_unprefixed_ordinary_lines_are_bulk_and_the_rest_is_left():
    text = [
        "node01:4100:4300 [0] NCCL INFO Connected all rings",
        "INFO hello",
        "Loading safetensors checkpoint shards:  45% Completed | 45/100",
        "node01:4100:4300 [0] NCCL INFO NCCL error: unhandled cuda error",
        '  File "/x/y.py", line 1, in f',
        "RuntimeError: boom",
        "INFO server_args.py:1565: behind a shape the prefix finder knows",
        "caf\u00e9",
        "   ",
    ]
    df = pl.DataFrame({"line": list(range(1, len(text) + 1)), "text": text})
    quick, rest = B.split(df, "2026-02-25", 1 << 20)
    assert quick.rows() == [
        (1, "unknown", None, "", text[0]),
        (2, "unknown", None, "", text[1]),
        (3, "shard_progress", None, "", text[2]),
    ]
    assert rest["line"].to_list() == [4, 5, 6, 7, 8, 9]
    assert B.counts(quick) == {"unknown_bare": 2, "shard_progress": 1}


def test_unprefixed_lines_after_an_exception_stay_in_its_traceback(monkeypatch):
    """An exception line's message takes every unprefixed line after it: the bulk lines of
    that gap go through Python (``_gap``) until a prefixed line closes it."""
    nccl = [f"node01:4100:4300 [0] NCCL INFO Channel 0{i}/24 : 0 1" for i in range(5)]
    lines = [
        *HEAD,
        "Traceback (most recent call last):",
        '  File "/x/y.py", line 1, in f',
        "RuntimeError: boom",
        *nccl,
        "[2026-02-25 10:00:01 TP1] WARNING: closes it",
        *nccl,
    ]
    data = ("\n".join(lines) + "\n").encode()
    taken = []
    real = LogParser._gap
    monkeypatch.setattr(
        LogParser,
        "_gap",
        lambda self, *a: real(self, *a) or taken.append(list(a[-1])),
    )
    fast, _ = parse(data, 1 << 20, True)
    slow, _ = parse(data, 1 << 20, False)
    same(fast, slow)
    assert taken and taken[-1] == list(range(74, 79))  # the first five NCCL lines only
    assert fast.errors["last_line"].to_list() == [78]
    assert fast.counts["unknown_bare"] == 5
