"""Issue 14, "The CLI contract a new user hits": terminal tables follow the terminal's width
(no 240-column table on a 120 terminal) and never split a header mid-word."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from forensics.cli import cli
from forensics.cli_table import header_parts, layout, wrap_header
from tests.conftest import FIXTURES

HEADERS = ["name", "spec_algorithm", "num_draft_tokens", "gen_throughput_median", "signature"]


def test_headers_break_only_after_underscores():
    assert header_parts("gen_throughput_median") == ["gen_", "throughput_", "median"]
    assert wrap_header("started_at", 8) == "started_\nat"
    assert wrap_header("num_draft_tokens", 11) == "num_draft_\ntokens"
    assert wrap_header("signature", 4) == "signature"  # too narrow: still one word


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_layout_fits_the_width_and_names_what_it_left_out(width):
    cells = [["sglang_eagle3_cg_2step#2", "EAGLE3", "5", "81.20", "cuda_oom"]] * 3
    plan = layout(HEADERS, cells, width, keep=("signature",))
    used = sum(plan.widths.values()) + 3 * len(plan.shown) + 1
    assert used <= width
    assert plan.shown[0] == 0
    assert sorted(plan.hidden) == sorted(h for k, h in enumerate(HEADERS) if k not in plan.shown)
    for k in plan.shown:
        lines = plan.headers[k].split("\n")
        assert "".join(lines) == HEADERS[k]
        assert all(len(line) <= plan.widths[k] for line in lines)
    if plan.hidden and len(plan.shown) > 1:  # a kept column goes after the others
        assert "signature" not in plan.hidden


@pytest.mark.parametrize("columns", ["80", "120", "200"])
def test_runs_table_is_no_wider_than_the_terminal(tmp_path, columns):
    runner = CliRunner(env={"COLUMNS": columns})
    store = ["--store", str(tmp_path)]
    logs = [str(p) for p in sorted(FIXTURES.glob("sglang_*.log"))[:6]]
    assert runner.invoke(cli, [*store, "ingest", *logs]).exit_code == 0
    res = runner.invoke(cli, [*store, "runs"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert max(len(line) for line in lines) <= int(columns)
    header = "\n".join(line for line in lines if line.startswith("┃"))
    assert "starte" not in header.replace("started_", "")  # never "starte/d_at"
    if columns == "80":
        assert "left out to fit 80 columns" in res.output
