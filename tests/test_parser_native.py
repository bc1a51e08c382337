"""The compiled line reader (parsers/sglang/_linescan.c through native.py, issue 15) gives the
rows, counts, stats and state of the pure path on inputs built to hit its edges: metrics lines
in and off SGLang's plain layout (every key table, unknown keys, padded, ragged, `[N]` tags,
odd numbers and dates), lines it must hand back (non-ASCII, CR, ANSI, U+FFFD, secrets, PEM
blocks, transport prefixes), every chunking. Without the module the pure path is taken.

tests/test_parser_golden.py runs the 682 golden files over both paths too.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics_parsers.secrets import redact
from forensics_parsers.sglang import Frames, native
from forensics_parsers.sglang.metrics import (
    DECODE_FIELDS,
    EXTRA_KEYS,
    GRAPH_DEVICES,
    PREFILL_FIELDS,
    RANK_TAGS,
)
from scripts.parser_digests import _canon
from tests.conftest import require_compiled
from tests.test_parser_bulk import HEAD, LINES, parse

KEYS = (
    [k for _, k, _ in DECODE_FIELDS + PREFILL_FIELDS]
    + [f"{d} graph" for d in GRAPH_DEVICES]
    + list(EXTRA_KEYS)
    + ["#unknown-key", "api_key", "token"]  # no table's: the pure path alone
)
GOOD_VALUES = ["0", "7", "12", "0.05", "0.94", "1234.56", "123456789", "1234567890123", "True"]
ODD_VALUES = ["False", "007", "-1", "87%", "nan", "1.", ".5", "3.5e3", " 5", "1,5"]
ODD_VALUES += ["12345678901234567", "0.1234567890123456789012345678901", "2147483648", "x"]
HEADS = [
    "[2026-02-25 10:00:0{s} TP{s}] ",
    "[2026-02-25 10:00:0{s}] ",
    "[2026-02-25 10:00:0{s} DP1 TP{s} EP3] ",
    "[2026-02-25 10:00:0{s} ATTN_CP1 MOE_DP{s}] ",
]
ODD_HEADS = [
    "[2026-02-3{s} 10:00:00 TP0] ",  # no such day (30, 31 of February)
    "[2026-1{s}-01 10:00:00 TP0] ",  # months 10-12 and no such month
    "[2026-02-25 2{s}:00:00 TP0] ",  # hours 24-29
    "[2024-02-29 10:00:6{s} TP0] ",  # a leap day; no such second
    "[2026-02-25 10:00:0{s}.25 TP0] ",
    "[10:00:0{s} TP0] ",
    "[2026-02-25 10:00:0{s} TP0 ] ",
    "[2026-02-25 10:00:0{s} XP1] ",
    "svc-1  | [2026-02-25 10:00:0{s} TP0] ",
    "\x1b[32m[2026-02-25 10:00:0{s} TP0] ",
]

field = st.tuples(
    st.sampled_from(KEYS), st.sampled_from(GOOD_VALUES * 3 + ODD_VALUES), st.integers(0, 30)
).map(lambda t: (t[0], t[1] if t[0].endswith("graph") or t[1] != "True" else str(t[2])))
# a field the reader takes: a key of its tables, a plain number (True/False for a graph key)
INT_KEYS = {k for _, k, typ in DECODE_FIELDS + PREFILL_FIELDS if typ is int}
INTS = ["0", "7", "12", "123456789"]


def _good(key: str, i: int) -> str:
    if key.endswith("graph"):
        return ("True", "False")[i % 2]
    return INTS[i % 4] if key in INT_KEYS else GOOD_VALUES[i % 8]


good_field = st.tuples(st.sampled_from(KEYS[:-3]), st.integers(0, 99)).map(
    lambda t: (t[0], _good(*t))
)


@st.composite
def metrics_line(draw, odd: bool = True) -> str:
    s = draw(st.integers(0, 9))
    head = draw(st.sampled_from(HEADS * 3 + ODD_HEADS if odd else HEADS)).format(s=s)
    kind = draw(st.sampled_from(["Decode batch", "Prefill batch"]))
    tag = draw(st.sampled_from(["", "", "", " [12]", " [0]"] + ([" [x]"] if odd else [])))
    sep = draw(st.sampled_from([", ", ", ", ". "] + ([": "] if odd else [])))
    layout = DECODE_FIELDS if kind.startswith("Decode") else PREFILL_FIELDS
    std = [(k, _good(k, draw(st.integers(0, 99)))) for _, k, _ in layout]
    some = st.lists(field if odd else good_field, min_size=0 if odd else 1, max_size=9)
    fields = draw(st.one_of(st.just(std), some))
    if not odd:  # each key once, the kind's own, one graph key
        seen: dict[str, str] = {}
        mine = {k for _, k, _ in layout} | set(EXTRA_KEYS)
        for k, v in fields:
            if k.endswith("graph"):
                if not any(x.endswith("graph") for x in seen):
                    seen[k] = v
            elif k in mine:
                seen.setdefault(k, v)
        fields = list(seen.items()) or std
    joiner = draw(st.sampled_from([", "] * 6 + ([",  ", " , ", ","] if odd else [])))
    end = draw(st.sampled_from(["", "", ", ", ",", " "] + (["\r", " \x1b[0m"] if odd else [])))
    return head + kind + tag + sep + joiner.join(f"{k}: {v}" for k, v in fields) + end


other = st.tuples(st.sampled_from(LINES), st.integers(0, 9)).map(lambda x: x[0].format(s=x[1]))
more = st.sampled_from(
    [
        "[2026-02-25 10:00:01 TP0] WARNING: \ufffd in the log itself",
        "[2026-02-25 10:00:01 TP0] api_key='hunter2' --api-key s3cret",
        "-----BEGIN PRIVATE KEY-----",
        "[2026-02-25 10:00:01 TP0] Decode batch, #running-req: 1, #token: 5",  # not a body line
        "-----END PRIVATE KEY-----",
        "progress 50%\r[2026-02-25 10:00:01 TP0] Prefill batch, #new-seq: 1, #new-token: 2",
        "\x1b]0;a title\x07[2026-02-25 10:00:01 TP0] WARNING: an OSC sequence",
    ]
)
clean = st.one_of(metrics_line(odd=False), metrics_line(odd=False), metrics_line(odd=False), other)
mixed = st.one_of(metrics_line(), metrics_line(odd=False), other, more)
logs = st.one_of(st.lists(clean, max_size=50), st.lists(mixed, max_size=50)).map(
    lambda ls: ("\n".join(HEAD + ls) + "\n").encode()
)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def same(a: Frames, b: Frames) -> None:
    """Equal frames, row by row in order; floats by their repr (NaN equal, -0.0 not 0.0)."""
    for name, df in a.tables().items():
        other = b.tables()[name]
        assert df.schema == other.schema, name
        assert [_canon(list(r)) for r in df.iter_rows()] == [
            _canon(list(r)) for r in other.iter_rows()
        ], name
    assert (a.counts, a.stats) == (b.counts, b.stats)


def _parsed(data: bytes, cut: int, compiled: bool) -> tuple[Frames, dict]:
    """``parse`` with the compiled reader on or off (as it was after)."""
    was = native.ENABLED
    try:
        native.ENABLED = compiled
        return parse(data, cut, True)
    finally:
        native.ENABLED = was


def same_rows(mine: pl.DataFrame, pure: pl.DataFrame) -> None:
    """The rows the compiled reader typed (``mine``) are the pure path's rows of those lines."""
    want = pure.select(mine.columns).join(mine.select("line"), on="line")
    assert [_canon(list(r)) for r in mine.iter_rows()] == [
        _canon(list(r)) for r in want.iter_rows()
    ]


def both(data: bytes, cut: int) -> None:
    fast, fast_state = _parsed(data, cut, True)
    slow, slow_state = _parsed(data, cut, False)
    same(fast, slow)
    assert json.dumps(fast_state, sort_keys=True) == json.dumps(slow_state, sort_keys=True)


@SETTINGS
@given(logs, st.sampled_from([7, 300, 4096, 1 << 20]))
def test_the_compiled_reader_gives_the_rows_of_the_pure_path(data, cut):
    require_compiled()
    both(data, cut)


def test_it_reads_the_plain_layout_and_hands_back_the_rest():
    require_compiled()
    lines = [
        "[2026-02-25 10:00:01 TP3] Decode batch, #running-req: 2, #token: 90, token usage: 0.05,"
        " accept len: 2.75, accept rate: 0.69, cuda graph: True, gen throughput (token/s): 81.3,"
        " #queue-req: 0, ",
        "[2026-02-25 10:00:02] Prefill batch [4]. #new-seq: 1, #new-token: 5, #cached-token: 0, "
        "token usage: 0.10, #running-req: 0, #queue-req: 0, #pending-token: 3",
        "[2026-02-25 10:00:03 TP0] Decode batch, #running-req: 1, #weird: x",  # handed back
        "[2026-02-25 10:00:04 TP0] Load weight begin. avail mem=10.00 GB",
    ]
    got = native.scan(("\n".join(lines) + "\n").encode(), 10)
    assert got is not None and got.n == 4
    assert got.other["line"].to_list() == [12, 13]
    dec, pre = got.decode.row(0, named=True), got.prefill.row(0, named=True)
    assert (dec["line"], dec["rank"], dec["running_req"], dec["cuda_graph"]) == (10, "TP3", 2, True)
    assert str(dec["ts"]) == "2026-02-25 10:00:01" and dec["extra"] is None and dec["iter"] is None
    assert (pre["iter"], pre["rank"], pre["extra"]) == (4, "", '{"#pending-token": 3}')
    both(("\n".join(HEAD + lines) + "\n").encode(), 1 << 20)


@pytest.mark.parametrize("data", [b"a\xff\n", b"a\x00b\n", b"\xed\xa0\x80\n", b""])
def test_chunks_the_decoding_changes_go_to_the_pure_path_whole(data):
    require_compiled()
    assert native.scan(data, 1) is None


@given(st.lists(st.tuples(st.sampled_from(KEYS[:-3]), st.sampled_from(GOOD_VALUES)), max_size=12))
def test_a_line_the_reader_takes_holds_no_secret(fields):
    """The lines it types skip the secrets step: made of its tables' keys and numbers, they
    are lines that step leaves as they are."""
    tags = " ".join(f"{t}12" for t in RANK_TAGS)
    line = f"[2026-02-25 10:00:01 {tags}] Decode batch, " + ", ".join(
        f"{k}: {v}" for k, v in fields
    )
    assert redact(line) == line


@pytest.mark.parametrize(
    "setup",
    [
        "import sys; sys.modules['forensics_parsers.sglang._linescan'] = None",  # not built
        "import os; os.environ['FORENSICS_PURE_PARSER'] = '1'",
    ],
)
def test_without_the_module_the_pure_path_is_taken(setup, tmp_path):
    code = (
        f"{setup}\n"
        "from forensics_parsers.sglang import native, parse_bytes\n"
        "assert not native.ENABLED and native.scan(b'x\\n', 1) is None\n"
        "line = b'[2026-02-25 10:00:01 TP0] Decode batch, #running-req: 1, #token: 5\\n'\n"
        "f = parse_bytes(line * 3)\n"
        "print(len(f.decode), f.decode['token'].to_list())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FORENSICS_PURE_PARSER"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3 [5, 5, 5]"


number = st.from_regex(r"\A[0-9]{1,24}(\.[0-9]{1,24})?\Z").map(
    lambda v: v if len(v) < 30 or "." not in v else v[:30]  # the reader's bound: 30 characters
)


@SETTINGS
@given(st.lists(st.tuples(number, number, st.integers(0, 9)), min_size=1, max_size=40))
def test_a_float_the_reader_reads_is_the_pure_paths_float(values):
    """Floats of every length around the reader's bounds (15 significant digits: one division;
    more, or more than 22 after the dot: strtod; 30 characters: handed back) are the pure
    path's, and some of them are typed."""
    require_compiled()
    lines = [
        f"[2026-02-25 10:00:0{s} TP0] Decode batch, #running-req: 3, token usage: {a}, "
        f"gen throughput (token/s): {b}"
        for a, b, s in values
    ]
    data = ("\n".join(HEAD + lines) + "\n").encode()
    both(data, 1 << 20)
    got = native.scan(data, 1)
    assert got is None or len(got.decode) + len(got.other) + len(got.bulk) == len(HEAD) + len(lines)


GOOD_TS = "[2026-02-25 10:00:01"
# floats about the one-pass reader's bound (15 digits in all, the dot not counted)
FLOATS = [
    "123456789012345",
    "1234567890123456",
    "12345678901234.5",
    "1234567890123.45",
    "12345678901234.56",
    "0.12345678901234",
    "0.123456789012345",
    "00000000000000.1",
    "000000000000000.1",
    "0.00000000000001234",
    "9007199254740993",
    "0.1",
    "1.",
    "1..5",
    "1.5.",
    "999999999999999.9",
    "0.30000000000000004",
    "123456789012345678901234567890",
]


def _ts_variants() -> list[str]:
    """The timestamp with one byte changed, at each of its 20 places: to the bytes next to a
    digit (`/`, `:`), a digit where a separator goes, a space, a letter, a byte with a high
    nibble of 3 that is no digit (`;`, `?`) or a digit's low nibble under another high one."""
    out = []
    for i in range(len(GOOD_TS)):
        for c in "/:0 a;?\x19\x7fP\x10":
            if c != GOOD_TS[i]:
                out.append(GOOD_TS[:i] + c + GOOD_TS[i + 1 :])
    return out


def test_the_word_checks_take_the_lines_the_byte_checks_took():
    """The timestamp's shape (checked eight bytes at a time), the key the previous line had
    at a place (checked in place, without looking for its `:`), integers read in one pass: a
    line the reader types has the pure path's row, and it types the good ones. (Compared row
    by row: the parser hands a chunk with an odd metrics line to the pure path whole.)"""
    require_compiled()
    tail = "] Decode batch, #running-req: 2, #token: 90, token usage: 0.05"
    lines = [GOOD_TS + " TP0" + tail] * 2 + [t + " TP0" + tail for t in _ts_variants()]
    keys = ["#token", "#token2", "#tokens", "x#token", "#toke", "#token ", "#token:", "#tokenn"]
    for key in keys:  # after a line with `#token` at the same place
        for value in [": 90", ":90", ": ", ":", ": 1234567890", ": 12345678901234567890123"]:
            for first in ("#running-req: 2, #token: 90", "#running-req: 2, token usage: 0.5"):
                lines.append(f"{GOOD_TS} TP0] Decode batch, {first}")
                lines.append(f"{GOOD_TS} TP0] Decode batch, #running-req: 2, {key}{value}")
    for v in ["2147483647", "2147483648", "99999999999999999999", "18446744073709551617"]:
        lines.append(f"{GOOD_TS} TP0] Decode batch, #running-req: {v}, #token: {v}")
    for a, b in zip(FLOATS, FLOATS[1:] + FLOATS[:1]):
        lines.append(
            f"{GOOD_TS} TP0] Decode batch, token usage: {a}, gen throughput (token/s): {b}"
        )
    data = ("\n".join(HEAD + lines) + "\n").encode()
    got = native.scan(data, 1)
    pure, _ = _parsed(data, 1 << 20, False)
    assert got is not None and len(got.decode) > 2 + 2 * 6 * len(keys)
    same_rows(got.decode, pure.decode)
    variants = range(1 + len(HEAD) + 2, 1 + len(HEAD) + 2 + len(_ts_variants()))
    typed = got.decode.filter(pl.col("line").is_between(variants[0], variants[-1]))
    assert len(typed) == sum(map(_real_ts, _ts_variants()))


def _real_ts(ts: str) -> bool:
    if not re.fullmatch(r"\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}", ts):
        return False
    try:
        return datetime.strptime(ts[1:], "%Y-%m-%d %H:%M:%S").year >= 1000
    except ValueError:
        return False


@SETTINGS
@given(st.lists(metrics_line(odd=False), min_size=1, max_size=40))
def test_the_reader_types_the_plain_layouts_lines_as_the_pure_path_does(lines):
    """The comparison of whole parses above may be of the pure path with itself: the parser
    hands a chunk holding a metrics line the reader leaves to the pure path whole. Here the
    reader's own rows are compared, row by row: every metrics line of the plain layout is
    typed by it (none left), and its row is the pure path's."""
    require_compiled()
    data = ("\n".join(HEAD + lines) + "\n").encode()
    got = native.scan(data, 1)
    pure, _ = _parsed(data, 1 << 20, False)
    assert got is not None
    assert len(got.decode) + len(got.prefill) == len(lines)
    same_rows(got.decode, pure.decode)
    same_rows(got.prefill, pure.prefill)
