"""Property tests for the streaming parser: any bytes in, no crash, every line accounted for,
streaming == batch, and resuming from ``state()`` == one pass; each over both line readers
(the compiled one of parsers/sglang/native.py, where built, and the pure one)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers.sglang import Frames, LogParser, parse_bytes
from forensics_parsers.wrappers import cr_to_lf, lone_cr, sniff_window
from tests import rewrap

FIX = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLES = [
    (FIX / n).read_bytes()
    for n in (
        "sglang_eagle3_cg_5dt.log",
        "sglang_fail_capture.log",
        "edge_interleaved_ranks.log",
        "edge_ansi_tqdm.log",
        "edge_crlf.log",
        "sglang_two_launches.log",
    )
]
# Pieces of real lines, so random inputs hit the interesting paths (prefixes, batch lines,
# tracebacks, \r bars), not only garbage.
PIECES = [
    b"[2026-02-25 10:00:00 TP0] ",
    b"[04:40:55 DP1 TP1] ",
    b"svc-1  | ",
    b"2026-06-07 10:59:31,659 [INFO] sglang: ",
    b"Decode batch, #running-req: 1, #token: 9, accept len: 2.50, gen throughput (token/s): 80.00, ",
    b"Prefill batch [3], #new-seq: 1, #new-token: 7, ",
    b"server_args=ServerArgs(model_path='m', tp_size=2)",
    b"Scheduler hit an exception: Traceback (most recent call last):",
    b'  File "x.py", line 1, in f',
    b"RuntimeError: boom",
    b"Capturing batches (bs=4 avail_mem=1.00 GB):  50%|##| 1/2",
    b"The server is fired up and ready to roll!",
    b"\r",
    b"\n",
    b"\r\n",
    b"\x1b[32m",
    b"\x00",
    b"\xff\xfe",
    b"Load weight end. elapsed=1.00 s, type=X, avail mem=1.00 GB",
]
FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

any_bytes = st.one_of(
    st.binary(max_size=600),
    st.lists(st.sampled_from(PIECES), max_size=30).map(b"".join),
    st.sampled_from(SAMPLES),
)


pytestmark = pytest.mark.usefixtures("reader")  # both line readers (tests/conftest.py)


def physical_lines(data: bytes) -> int:
    if lone_cr(sniff_window(data, final=True)):  # a file whose lines end with a lone \r
        data = cr_to_lf(data)
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def canon(f: Frames) -> dict:
    return rewrap.canon(f, zero_counts=False)


def stream(data: bytes, cuts: list[int]) -> Frames:
    p = LogParser("x.log", date_hint="2026-01-01")
    parts, prev = [], 0
    for c in sorted(set(cuts)):
        parts.append(p.feed(data[prev:c]))
        prev = c
    parts.append(p.feed(data[prev:]))
    parts.append(p.finish())
    return Frames.concat(parts)


@FAST
@given(any_bytes)
def test_any_bytes_no_crash_and_every_line_accounted_for(data):
    f = parse_bytes(data, "fuzz.log")
    assert sum(f.counts.values()) == physical_lines(data)
    assert f.stats.get("lines_total", 0) == physical_lines(data)
    for df in (f.events, f.decode, f.prefill, f.lines):
        if not df.is_empty():
            assert df["line"].min() >= 1 and df["line"].max() <= max(1, physical_lines(data))
    for extra in f.decode["extra"].drop_nulls():
        json.loads(extra)


@FAST
@given(st.data())
def test_streaming_in_random_chunks_equals_one_pass(data):
    blob = data.draw(any_bytes)
    cuts = data.draw(st.lists(st.integers(0, max(0, len(blob))), max_size=12))
    whole = LogParser("x.log", date_hint="2026-01-01")
    one = Frames.concat([whole.feed(blob), whole.finish()])
    assert canon(stream(blob, cuts)) == canon(one)


@FAST
@given(st.data())
def test_resume_from_state_equals_one_pass(data):
    blob = data.draw(st.one_of(st.sampled_from(SAMPLES), any_bytes))
    cut = data.draw(st.integers(0, len(blob)))
    p1 = LogParser("x.log", date_hint="2026-01-01")
    first = p1.feed(blob[:cut])
    # what an ingest stores: the state after the complete lines, and where they end
    state = json.loads(json.dumps(p1.state()))
    offset = cut - p1.pending_bytes
    p2 = LogParser("x.log", state=state, date_hint="2026-01-01")
    rest = Frames.concat([p2.feed(blob[offset:]), p2.finish()])
    resumed = Frames.concat([first, rest])
    whole = LogParser("x.log", date_hint="2026-01-01")
    one = Frames.concat([whole.feed(blob), whole.finish()])
    assert canon(resumed) == canon(one)


def test_streaming_each_fixture_in_chunks_of_61_bytes():
    for blob in SAMPLES:
        cuts = list(range(0, len(blob), 61))
        assert canon(stream(blob, cuts)) == canon(parse_bytes(blob, "x.log"))


def test_huge_line_is_cut_and_counted_P11():
    from forensics_parsers.sglang import MAX_LINE

    data = (
        b"[2026-01-01 00:00:00] start\n"
        + b"a" * (MAX_LINE * 2 + 5)
        + b"\nThe server is fired up and ready to roll!\n"
    )
    f = stream(data, [100, MAX_LINE, MAX_LINE + 300_000])
    assert f.stats["long_lines_truncated"] == 1
    assert sum(f.counts.values()) == 3
    assert f.events.filter(pl.col("stage") == "ready")["line"].to_list() == [3]
