"""The combined rule matcher picks exactly the rule the table's order says."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from parsers import sglang as S


def naive(msg: str) -> str | None:
    for name, rx, _stage, _kind in S._RULES:
        if rx.search(msg):
            return name
    return None


def got(msg: str) -> str | None:
    r = S.match_rule(msg)
    return r[0] if r else None


FRAGMENTS = [p for _, p, _, _ in S.RULES] + [
    "Load weight end. ",
    "Capture cuda graph failed: ",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "INFO:     127.0.0.1:5 - \"GET /health HTTP/1.1\" 200 OK",
    "Scheduler hit an exception: ",
    "deprecated",
    "Warning: ",
    "ERROR:    x",
]


def test_every_fixture_line_matches_like_the_table():
    root = Path(__file__).resolve().parent.parent / "fixtures"
    n = 0
    for f in sorted(root.rglob("*.log")):
        text = f.read_bytes().decode("utf-8", errors="replace")
        for line in text.replace("\r", "\n").split("\n"):
            m = S.PREFIX_RX.match(line)
            msg = line[m.end() :] if m else line
            assert got(msg) == naive(msg), msg
            n += 1
    assert n > 1000


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=20), max_size=4))
def test_random_messages_match_like_the_table(parts):
    msg = "".join(parts)
    assert got(msg) == naive(msg)
