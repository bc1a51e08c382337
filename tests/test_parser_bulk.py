"""The bulk path (parsers/sglang/bulk.py: common non-metrics lines read in polars) gives the
rows, counts, state and run extents of the pure-Python path (``LogParser(bulk=False)``), on
inputs built to hit where they meet: tracebacks interrupted by bulk lines of another rank,
transport prefixes learned mid-chunk, runs appended to one file, time-only and fractional
timestamps, out-of-order times, non-ASCII and tabbed lines, every chunking."""

from __future__ import annotations

import json

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers.sglang import Frames, LogParser
from forensics_parsers.sglang import bulk as B

LINES = [
    '[2026-02-25 10:00:0{s}] INFO:     127.0.0.1:5 - "POST /generate HTTP/1.1" 200 OK',
    "[2026-02-25 10:00:0{s} TP1] WARNING: Request 1 exceeds the context length",
    "[2026-02-25 10:00:0{s}.25 TP0] Some line no rule knows",
    "[2026-02-25 09:59:5{s} TP0] deprecated flag --x",
    "[10:00:0{s} DP1 TP1] Warning: time-only prefix",
    "[2026-02-25 10:00:0{s} TP0] Capture cuda graph failed: Warning: x",  # an earlier rule
    # the hot rule's pattern matches, an earlier rule's too
    '[2026-02-25 10:00:0{s}] INFO:     1.2.3.4:5 - "GET /a HTTP/1.1" 404 Capture cuda graph failed: x',
    "[2026-02-25 10:00:0{s} TP0] Load weight begin. avail mem=10.00 GB",
    "[2026-02-25 10:00:0{s} TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "x.py", line 1, in f',
    "RuntimeError: boom",
    "[2026-02-25 10:00:0{s} TP0] server_args=ServerArgs(model_path='m', tp_size=2)",
    "[2026-02-25 10:00:0{s} TP0] Decode batch, #running-req: 1, #token: 9, gen throughput (token/s): 8.00, ",
    "svc-1  | [2026-02-25 10:00:0{s} TP0] WARNING: behind a transport prefix",
    "svc-1  | plain text after a learned prefix",
    # learned twice, this prefix's shape then strips the head of every TP-tagged line
    "[2026-02-25 10:00:0{s} INFO:     a collector's own prefix",
    "[2026-02-25 10:00:0{s} TP0] caf\u00e9 warning: not ASCII",
    "[2026-02-25 10:00:0{s} TP0] WARNING:\ttabbed",
    "[2026-02-25 10:00:0{s} TP0] ",
    "[2026-02-25 10:00:6{s} TP0] WARNING: no such second",
    "[2026-02-3{s} 10:00:00 TP0] WARNING: no such day",
    "[2026-1{s}-01 10:00:00 TP0] WARNING: maybe no such month",
    "[2026-02-25 10:00:00,12345678{s} TP0] WARNING: a long fraction, comma",
    "",
]
line = st.tuples(st.sampled_from(LINES), st.integers(0, 9)).map(lambda x: x[0].format(s=x[1]))
# past the sniff window (the file's first 64 lines teach the prefix finder before any parse)
HEAD = [f"[2026-02-25 09:00:00 TP{i % 4}] WARNING: filler {i}" for i in range(70)]
logs = st.lists(line, max_size=60).map(lambda ls: ("\n".join(HEAD + ls) + "\n").encode())
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse(data: bytes, cut: int, bulk: bool) -> tuple[Frames, dict]:
    # bulk: every chunk through the bulk path, however few its lines (BULK_MIN_LINES)
    p = LogParser("x.log", date_hint="2026-02-25", bulk=bulk, bulk_min_lines=0)
    parts = [p.feed(data[i : i + cut]) for i in range(0, len(data), cut)]
    state = p.state()
    return Frames.concat([*parts, p.finish()]), state


def same(a: Frames, b: Frames) -> None:
    for name, df in a.tables().items():
        other = b.tables()[name]
        assert df.schema == other.schema, name
        assert df.to_dicts() == other.to_dicts(), name
    assert a.counts == b.counts
    assert a.stats == b.stats


@SETTINGS
@given(logs, st.sampled_from([7, 300, 4096, 1 << 20]))
def test_bulk_path_equals_the_python_path(data, cut):
    fast, fast_state = parse(data, cut, True)
    slow, slow_state = parse(data, cut, False)
    same(fast, slow)
    assert json.dumps(fast_state, sort_keys=True) == json.dumps(slow_state, sort_keys=True)


@SETTINGS
@given(logs, st.sampled_from([300, 1 << 20]))
def test_many_lines_left_by_the_hot_rule_are_classified_in_polars_alike(data, cut):
    """``_first_rules`` past PYTHON_MAX lines (its polars branch) gives the Python path's rows."""
    old = B.PYTHON_MAX
    B.PYTHON_MAX = 0
    try:
        fast, fast_state = parse(data, cut, True)
    finally:
        B.PYTHON_MAX = old
    slow, slow_state = parse(data, cut, False)
    same(fast, slow)
    assert json.dumps(fast_state, sort_keys=True) == json.dumps(slow_state, sort_keys=True)


def test_bulk_lines_are_read_in_polars_and_the_rest_is_left():
    text = [
        '[2026-02-25 10:00:00] INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',
        "[2026-02-25 10:00:01.5 TP3] WARNING: Request 7 exceeds the context length",
        "[2026-02-25 10:00:02 TP0] Load weight begin. avail mem=10.00 GB",
        "[2026-02-25 10:00:03 TP0] Capture cuda graph failed: Warning: x",
        "[2026-02-25 10:00:04 TP0] an unknown line",
    ]
    df = pl.DataFrame({"line": [1, 2, 3, 4, 5], "text": text})
    quick, rest = B.split(df, "2026-02-25", 1 << 20)
    assert quick.rows() == [
        (1, "uvicorn_access", "2026-02-25 10:00:00", "", text[0].split("] ", 1)[1]),
        (2, "uvicorn_warning", "2026-02-25 10:00:01.5", "TP3", text[1].split("] ", 1)[1]),
        (5, "unknown", "2026-02-25 10:00:04", "TP0", "an unknown line"),
    ]
    assert rest["line"].to_list() == [3, 4]  # a stage line; an error rule comes first


def test_a_long_access_heavy_chunk_keeps_access_lines_up_to_the_cap(monkeypatch):
    monkeypatch.setattr(B, "MAX_ACCESS_LINES", 5)
    lines = [f"[2026-02-25 10:00:0{i}] WARNING: w{i}" for i in range(3)]
    lines += [
        f'[2026-02-25 10:00:1{i}] INFO:     127.0.0.1:5 - "GET / HTTP/1.1" 200 OK' for i in range(6)
    ]
    lines += ["[2026-02-25 10:00:30] WARNING: after"]
    data = ("\n".join(lines) + "\n").encode()
    fast, _ = parse(data, 1 << 20, True)
    slow, _ = parse(data, 1 << 20, False)
    same(fast, slow)
    assert fast.lines["kind"].to_list() == ["uvicorn_warning"] * 3 + ["uvicorn_access"] * 2 + [
        "uvicorn_warning"
    ]
    assert fast.counts["uvicorn_access"] == 6


def test_a_prefix_learned_mid_chunk_sends_the_lines_after_it_through_python(monkeypatch):
    odd = "[2026-02-25 10:00:0{} INFO:     a collector's own prefix"
    tagged = "[2026-02-25 10:00:1{} TP0] WARNING: w"
    lines = [
        *HEAD,
        tagged.format(0),
        odd.format(1),
        odd.format(2),
        tagged.format(3),
        tagged.format(4),
    ]
    data = ("\n".join(lines) + "\n").encode()
    fell = []
    real = LogParser._fall_back
    monkeypatch.setattr(
        LogParser, "_fall_back", lambda self, *a: fell.append(a[4]) or real(self, *a)
    )
    fast, _ = parse(data, 1 << 20, True)
    assert fell == [73]  # after the second odd line, the shape strips `[.. 10:00:13 `
    slow, _ = parse(data, 1 << 20, False)
    same(fast, slow)
    assert fast.lines["text"].to_list()[-1] == "TP0] WARNING: w"
