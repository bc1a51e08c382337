"""The plain-ASCII fast path of the line split (parsers/sglang/text.py ``plain_lines``: polars'
CSV reader instead of a Python decode and split, issue 15) gives exactly the plain path's
lines and rows."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from forensics_parsers.sglang import native
from forensics_parsers.sglang import text as text_mod
from scripts.parser_digests import GOLDEN, diff, digests, repo_logs

_ASCII = st.characters(min_codepoint=0, max_codepoint=127)


@given(st.lists(st.text(alphabet=_ASCII, max_size=12), max_size=30), st.booleans())
@settings(max_examples=300, deadline=None)
def test_plain_lines_are_the_lines_of_the_decoded_text(lines, newline_at_end):
    data = "\n".join(lines).encode() + (b"\n" if newline_at_end else b"")
    saved = text_mod.FAST_LINES_MIN
    text_mod.FAST_LINES_MIN = 1
    try:
        got = text_mod.plain_lines(data)
    finally:
        text_mod.FAST_LINES_MIN = saved
    if not data or any(b in data for b in (b"\x00", b"\x1b", b"\r", b"\x1f")):
        assert got is None
        return
    text = data.decode()
    want = (text[:-1] if text.endswith("\n") else text).split("\n")
    assert got is not None and got.to_list() == want


def test_every_fixture_parses_to_the_frozen_rows_through_the_fast_split(monkeypatch):
    """With the fast path taken for chunks of any size, the repository's logs still parse to
    the frozen digests (tests/test_parser_golden.py), so both paths give the same rows."""
    monkeypatch.setattr(text_mod, "FAST_LINES_MIN", 1)
    monkeypatch.setattr(native, "ENABLED", False)  # the chunks it reads skip this split
    calls = []
    real = text_mod.plain_lines

    def spy(data):
        got = real(data)
        calls.append(got is not None)
        return got

    monkeypatch.setattr(text_mod, "plain_lines", spy)
    want = json.loads(GOLDEN.read_text())["repo"]
    assert diff(want, digests(repo_logs())) == []
    assert sum(calls) > 250  # the fast path was taken, on most chunks


@given(
    st.lists(
        st.sampled_from(
            [
                "[2026-11-01 11:00:01] ",
                "[2026-11-01 11:00:01 TP3] ",
                "[2026-11-01 11:00:01 DP1 TP13 EP2] ",
                "[2026-11-01 11:00:01.123 TP3] ",
                "[2026-11-01 TP1] ",
                "[2026-11-01 11:00:01 TP3]  ",
                "[2026-11-01 11:00:01 TPx] ",
                "[11:00:01 TP3] ",
                "x [2026-11-01 11:00:01 ATTN_CP4 MOE_DP0 PP1] ",
                "[2026-11-01 11:00:01 TP\u0663] ",
            ]
        ),
        min_size=1,
        max_size=6,
    )
)
@settings(max_examples=200, deadline=None)
def test_rank_cut_by_position_is_the_regex_rank(prefixes):
    """extract_batch's rank: cut by position when every head is SGLang's plain one, else the
    regex; both give what the regex gives (issue 15)."""
    import polars as pl

    from forensics_parsers.sglang import metrics

    df = pl.DataFrame({"prefix": prefixes})
    got = df.select(metrics._rank(df))["prefix"].to_list()
    regex = pl.col("prefix").str.extract(metrics._RANK, 1).str.strip_chars().fill_null("")
    assert got == df.select(regex)["prefix"].to_list()
