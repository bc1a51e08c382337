"""The parser on real users' SGLang logs (../shared/real-logs-dev): every figure of
fields.csv, and every `Decode batch` line with a `gen throughput` field counted with the
values its text holds, whatever its layout (cpu/npu graph, `#full token / #swa token`,
PD-decode pre-allocated fields, time-only, DP/PP/EP tags, transport prefixes).

The corpus is found at $FORENSICS_REAL_LOGS, $FORENSICS_SHARED/real-logs-dev or
<repo>/../shared/real-logs-dev; without it these tests fail (FORENSICS_NO_REAL_LOGS=1 skips).
"""

from __future__ import annotations

import re

import polars as pl
import pytest

from forensics_parsers.sglang import parse_bytes
from scripts.real_fields import COLUMNS, compare, require_corpus


def test_every_field_of_fields_csv_agrees():
    root = require_corpus()
    agree, wrong, n = compare(root)
    assert n == 68
    assert wrong == [], "\n".join(f"{i} {c}: expected {e!r}, parsed {g!r}" for i, c, e, g in wrong)
    assert agree == dict.fromkeys(COLUMNS, n)


# An independent reading of the text: the plain regexes a person would grep with.
_GEN = re.compile(r"gen throughput \(token/s\): (-?[\d.]+|nan|inf)")
_ACC = re.compile(r"accept len: (-?[\d.]+)")
_RUN = re.compile(r"#running-req: (\d+)")


def test_every_decode_line_with_a_throughput_is_counted_with_its_values():
    root = require_corpus()
    checked = 0
    for path in sorted(root.glob("*.log")):
        data = path.read_bytes()
        expect = {}
        for no, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            line = line.split("\r")[-1]  # (SGLang's own lines never hold a bare \r)
            if "Decode batch" in line and (g := _GEN.search(line)):
                a, r = _ACC.search(line), _RUN.search(line)
                expect[no] = (
                    float(g.group(1)),
                    float(a.group(1)) if a else None,
                    int(r.group(1)) if r else None,
                )
        f = parse_bytes(data, path.name)
        dec = f.decode.filter(pl.col("gen_throughput").is_not_null()).sort("line")
        got = {
            row["line"]: (row["gen_throughput"], row["accept_len"], row["running_req"])
            for row in dec.iter_rows(named=True)
        }
        assert sorted(got) == sorted(expect), path.name
        for no, (g, a, r) in expect.items():
            pg, pa, pr = got[no]
            assert pg == pytest.approx(g, rel=1e-6), (path.name, no)
            assert (pa is None) == (a is None) and (a is None or pa == pytest.approx(a)), (
                path.name,
                no,
            )
            assert pr == r, (path.name, no)
        checked += len(expect)
    assert checked > 1000  # the corpus holds thousands of them
