"""The combined rule matcher picks exactly the rule the table's order says."""

import re
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from forensics_parsers import sglang as S
from forensics_parsers.sglang import metrics as M
from forensics_parsers.sglang import rules as R

COMPILED = [(r.name, re.compile(r.pattern)) for r in S.RULES]


def naive(msg: str) -> str | None:
    for name, rx in COMPILED:
        if rx.search(msg):
            return name
    return None


def got(msg: str) -> str | None:
    r = S.match_rule(msg)
    return r[0] if r else None


FRAGMENTS = [r.pattern for r in S.RULES] + [
    "Load weight end. ",
    "Capture cuda graph failed: ",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    'INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 200 OK',
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


def _batch_parts(text: str) -> "list":
    import polars as pl

    lines = [ln for ln in text.splitlines() if "Decode batch" in ln or "Prefill batch" in ln]
    out = []
    for which, key in (("Decode", "Decode batch"), ("Prefill", "Prefill batch")):
        rows = [ln for ln in lines if key in ln]
        if not rows:
            continue
        rest = [
            ln[ln.find(key) + len(key) :].lstrip(" [0123456789]").lstrip(".,").lstrip()
            for ln in rows
        ]
        df = pl.DataFrame(
            {
                "rest": rest,
                "run_index": [0] * len(rows),
                "line": list(range(1, len(rows) + 1)),
                "ts": [None] * len(rows),
                "rank": [""] * len(rows),
                "iter": [None] * len(rows),
            },
            schema_overrides={"ts": pl.Datetime("us"), "iter": pl.Int64, "run_index": pl.Int32},
        )
        out.append((which, df))
    return out


def _norm(df):
    import json

    rows = df.to_dicts()
    for r in rows:
        r["extra"] = json.loads(r["extra"]) if r["extra"] else None
    return rows


def test_fast_metrics_path_equals_the_general_path_on_every_fixture():
    root = Path(__file__).resolve().parent.parent / "fixtures"
    checked = 0
    for f in sorted(root.glob("*.log")):
        text = f.read_bytes().decode("utf-8", errors="replace")
        for which, df in _batch_parts(text):
            fields, schema = (
                (S.DECODE_FIELDS, S.DECODE_SCHEMA)
                if which == "Decode"
                else (S.PREFILL_FIELDS, S.PREFILL_SCHEMA)
            )
            fast, rest = M._fields_fast(df, fields, schema)
            if fast is None or fast.is_empty():
                continue
            general = M._fields_general(
                df.filter(df["line"].is_in(fast["line"].implode())), fields, schema
            )
            assert _norm(fast) == _norm(general), f.name
            checked += len(fast)
    assert checked > 50


def test_stage_of_names_the_stages_the_parser_records():
    """Live log following (the launcher) and the parser read stages from one table."""
    text = (
        Path(__file__).resolve().parent.parent / "fixtures" / "sglang_eagle3_cg_16dt.log"
    ).read_text()
    frames = S.parse_text(text, "x.log")
    recorded = set(frames.events["stage"].to_list())
    seen = {S.stage_of(line) for line in text.replace("\r", "\n").splitlines()} - {None}
    assert {"load_begin", "load_end", "capture_begin", "capture_end", "ready"} <= seen
    assert seen <= recorded


def test_rule_rows_carry_their_behaviour():
    """What the parser does with a line is a field of its row, checked on real lines."""
    by = R.BY_NAME
    assert by["server_args"].starts_run and by["argparse_usage"].starts_run
    assert R.style_of(by["server_args"], "server_args={'tp_size': 1}") == ">=0.5.19"
    assert R.style_of(by["server_args"], "server_args=ServerArgs(tp_size=1)") is None
    cap = by["capture_edge"]
    assert R.style_of(cap, "Capture target verify CUDA graph begin. avail mem=1 GB") == ">=0.5.14"
    assert R.style_of(cap, "Capture CUDA graph begin. avail mem=1 GB") is None
    assert R.style_of(cap, "Capture draft cuda graph end. Time elapsed: 2 s") is None
    assert cap.line_stage("Capture cuda graph end. Time elapsed: 2 s") == "capture_end"
    assert S.stage_of("[2026-01-01 10:00:00 TP0] Capture cuda graph begin.") == "capture_begin"
    assert by["capture_progress"].marks_content and not by["bare_progress"].marks_content
    assert not by["uvicorn_access"].marks_content and by["generic_warning"].marks_content


def test_a_rule_pattern_is_compiled_when_a_message_first_needs_it():
    """All 56 patterns compiled took ~2 ms of every process that imports the parser, for the
    few a log's lines call for: none at import, then those find_rule tried."""
    from tests.conftest import assert_prints

    code = (
        "from forensics_parsers.sglang import rules as R\n"
        "before = sum(p.compiled for p in R._RX)\n"
        "R.find_rule('Load weight end. type=LlamaForCausalLM')\n"
        "print(before, 0 < sum(p.compiled for p in R._RX) < len(R._RX))\n"
    )
    assert_prints(code, ["0", "True"])
