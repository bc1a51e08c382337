"""Runs, plots, report and advice on the real fixtures (fixtures/*.log, see fixtures/README.md).

The other plot/report tests use a generated story; these ingest the hand-written SGLang logs of
every version and edge case and check what a user would see: the default baseline is a
single-stream run (issues 6/7: not ``edge_crlf``, 8 requests in flight, 813.8 tok/s), no run
that reached ready shows an unfinished startup stage (issue 7/2: the ≥0.5.14 startup order
prints one ``Memory pool end`` for the target and draft KV pools), and every plot and the
report are drawn from that store.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from forensics.advise import advise, missing_baseline_note, resolve_baseline, run_points
from forensics.cli import cli
from forensics.ingest import ingest
from forensics.plots import make_plot, plot_startup, plot_trend
from forensics.report import build_report, write_report
from forensics.runs import runs_table, stage_timeline
from forensics.store import Store
from tests.test_plots import assert_not_blank

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOGS = sorted(str(p) for p in FIXTURES.glob("*.log"))
# single-stream plain runs of the fixtures (fixtures/README.md) and their median tok/s
SINGLE_STREAM_PLAIN = {"sglang_baseline": 90.0, "edge_container_prefix": 92.0}
BATCHED_PLAIN = {"edge_crlf", "edge_npu_pd", "edge_interleaved_ranks"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    st = Store.open(tmp_path_factory.mktemp("fixtures") / "store")
    summary = ingest(st, LOGS)
    assert summary is not None
    return st


@pytest.fixture(scope="module")
def table(store) -> pl.DataFrame:
    return runs_table(store, classify=False)


def _run(table: pl.DataFrame, name: str) -> dict:
    (row,) = table.filter(pl.col("name") == name).to_dicts()
    return row


def _timeline(store, table, name):
    r = _run(table, name)
    return stage_timeline(store, r["source_id"], int(r["run_index"]))


# --------------------------------------------------------------------------------------
# 1. the default baseline is single-stream
# --------------------------------------------------------------------------------------
def test_batched_plain_runs_are_flagged(store):
    pts = {r["name"]: r for r in run_points(store).iter_rows(named=True)}
    assert {n for n, r in pts.items() if not r["spec"] and r["batched"]} == BATCHED_PLAIN
    assert pts["edge_crlf"]["tok_s"] == pytest.approx(813.75)
    for name in SINGLE_STREAM_PLAIN:
        assert pts[name]["batched"] is False
    # no #running-req > 1 anywhere: not batched (the 2024 lines prove nothing either way)
    assert pts["edge_time_only_2024"]["batched"] is False


def test_default_baseline_is_the_best_single_stream_plain_run(store):
    """Issues 6/7: edge_crlf (8 in flight, 813.8 tok/s) must not be the baseline."""
    base = resolve_baseline(store)
    assert base is not None and base.source == "run" and not base.batched
    assert base.name == max(SINGLE_STREAM_PLAIN, key=SINGLE_STREAM_PLAIN.get)
    assert base.tok_s == pytest.approx(max(SINGLE_STREAM_PLAIN.values()))
    assert "best single-stream plain run" in base.describe()


def test_advise_on_fixtures_uses_the_single_stream_baseline(store):
    data = advise(store)
    assert data["baseline"]["name"] == "edge_container_prefix"
    assert data["baseline_note"] is None
    needed = {f["family"]: f["accept_needed"] for f in data["families"]}
    # a 92 tok/s baseline: every family needs a plausible accept length (was ≥ 21 with
    # edge_crlf), e.g. cg/16dt: 52.1 ms a round x 92 tok/s / 1000 = 4.79
    assert needed and max(needed.values()) < 6.0
    assert needed["cg/16dt/topk4/5step"] == pytest.approx(1000 * 3.9 / 74.9 * 92 / 1000, rel=2e-2)
    res = CliRunner().invoke(cli, ["--store", str(store.root), "advise"])
    assert res.exit_code == 0, res.output
    assert "Baseline: 92.0 tok/s (edge_container_prefix)" in res.output
    assert "813.8" not in res.output and "≥ 25" not in res.output


def test_explicit_batched_baseline_is_used_and_marked(store):
    base = resolve_baseline(store, "edge_crlf")
    assert base.name == "edge_crlf" and base.batched and base.source == "option"
    assert "several requests in flight" in base.describe()


def test_only_batched_plain_runs_give_no_baseline(tmp_path):
    """With only batched plain runs: no baseline, say why and how to set one."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("edge_crlf.log", "sglang_eagle3_cg_16dt.log"):
        shutil.copy(FIXTURES / name, logs / name)
    st = Store.open(tmp_path / "store")
    ingest(st, [str(p) for p in sorted(logs.iterdir())])
    assert resolve_baseline(st) is None
    note = missing_baseline_note(run_points(st))
    assert "No single-stream baseline" in note and "edge_crlf" in note
    assert "forensics baseline --tok-s X" in note
    data = advise(st)
    assert data["baseline"] is None and data["baseline_note"] == note
    assert data["verdict"]["rule"] == "no_baseline" and "edge_crlf" in data["verdict"]["text"]
    assert note in data["next_steps"]
    fam = data["families"][0]
    assert fam["accept_needed"] is None  # no made-up break-even
    # the trend plot draws no baseline line and says why
    ax = plot_trend(st).axes[0]
    assert not [a for a in ax.lines if a.get_gid() == "baseline"]
    (txt,) = [t for t in ax.texts if t.get_gid() == "no-baseline"]
    assert "No single-stream baseline" in txt.get_text()
    html = build_report(st)
    assert "Baseline: none." in html and 'id="no-baseline"' in html
    assert "No single-stream baseline" in html
    # once set by hand, everything compares with it
    runner = CliRunner()
    res = runner.invoke(cli, ["--store", str(st.root), "baseline", "--tok-s", "90"])
    assert res.exit_code == 0, res.output
    base = resolve_baseline(st)
    assert (base.tok_s, base.source) == (90.0, "meta")
    assert advise(st)["families"][0]["accept_needed"] == pytest.approx(
        1000 * 3.9 / 74.9 * 90 / 1000, rel=2e-2
    )


# --------------------------------------------------------------------------------------
# 2. startup timeline: no unfinished stage in a run that reached ready
# --------------------------------------------------------------------------------------
def test_no_unfinished_segment_before_ready(store, table):
    checked = 0
    for r in table.iter_rows(named=True):
        tl = stage_timeline(store, r["source_id"], int(r["run_index"]))
        ready = [s["start_s"] for s in tl if s["segment"] == "ready"]
        if not ready:
            continue
        checked += 1
        open_ = [s["segment"] for s in tl if not s["ended"] and s["start_s"] <= ready[0]]
        assert not open_, f"{r['name']}: {open_} never finished, yet the run reached ready"
    assert checked >= 15


@pytest.mark.parametrize("name", ["sglang_eagle3_cg_16dt", "edge_ansi_tqdm"])
def test_0514_draft_kv_pool_ends_at_the_shared_memory_pool_end(store, table, name):
    """≥0.5.14: target KV, draft KV, one `Memory pool end`: the draft pool ends there."""
    segs = {s["segment"]: s for s in _timeline(store, table, name)}
    draft = segs["kv pool draft"]
    assert draft["ended"] and draft["end"] == "next stage"
    assert draft["duration_s"] <= 1.0  # was ~95 s (cg_16dt), running past ready
    assert draft["start_s"] + draft["duration_s"] <= segs["capture target"]["start_s"]
    assert segs["kv pool target"]["end"] == "line"


def test_0514_timeline_in_start_order(store, table):
    order = [s["segment"] for s in _timeline(store, table, "sglang_eagle3_cg_16dt")]
    assert order == [
        "dist_init",
        "load target",
        "load draft",  # ≥0.5.14: draft weights before the KV pools
        "kv pool target",
        "kv pool draft",
        "capture target",
        "capture draft",
        "capture draft extend",
        "warmup",
        "ready",
    ]
    segs = {s["segment"]: s for s in _timeline(store, table, "sglang_eagle3_cg_16dt")}
    assert segs["load target"]["duration_s"] == 171.0 and segs["ready"]["start_s"] == 226.0


def test_0513_draft_kv_pool_keeps_its_own_end_line(store, table):
    segs = {s["segment"]: s for s in _timeline(store, table, "sglang_eagle3_cg_5dt")}
    assert segs["kv pool draft"]["end"] == "line" and segs["kv pool target"]["end"] == "line"


@pytest.mark.parametrize("name", ["sglang_fail_capture", "sglang_fail_capture_disk_full"])
def test_a_stage_the_run_died_in_stays_unfinished(store, table, name):
    segs = {s["segment"]: s for s in _timeline(store, table, name)}
    assert "ready" not in segs
    cap = segs["capture target"]
    assert not cap["ended"] and cap["end"] is None
    assert all(s["ended"] for n, s in segs.items() if n != "capture target")


def test_show_marks_a_stage_ended_by_the_next(store):
    runner = CliRunner()
    res = runner.invoke(cli, ["--store", str(store.root), "show", "sglang_eagle3_cg_16dt"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if "kv pool draft" in ln)
    assert "yes (next stage began)" in line and " no " not in line
    res = runner.invoke(
        cli, ["--store", str(store.root), "show", "sglang_eagle3_cg_16dt", "--json"]
    )
    assert res.exit_code == 0, res.output
    tl = {s["segment"]: s for s in json.loads(res.output)["timeline"]}
    assert tl["kv pool draft"]["ended"] is True


def test_startup_plot_hatches_only_where_a_run_died(store, table):
    fig = plot_startup(store)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == len(table)
    pts = run_points(store)
    names = pts["name"].to_list()
    hatched_rows = {
        names[round(p.get_y() + p.get_height() / 2)]
        for p in ax.patches
        if (p.get_gid() or "").startswith("segment:") and p.get_hatch()
    }
    assert {"sglang_fail_capture", "sglang_fail_capture_disk_full"} <= hatched_rows
    assert not hatched_rows & {"sglang_eagle3_cg_16dt", "edge_ansi_tqdm", "sglang_baseline"}
    for name in hatched_rows:  # the rest: a stage that began after ready (edge_cut_line's cut)
        tl = _timeline(store, table, name)
        ready = [s["start_s"] for s in tl if s["segment"] == "ready"]
        assert not ready or all(s["start_s"] > ready[0] for s in tl if not s["ended"]), name


# --------------------------------------------------------------------------------------
# 3. every plot and the report, from the fixtures store
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["trend", "accept", "startup", "decode"])
def test_every_plot_is_written(store, tmp_path, kind):
    out = tmp_path / f"{kind}.png"
    match = "sglang_eagle3_cg_16dt" if kind == "decode" else None
    fig, path = make_plot(store, kind, match, out=out)
    assert path == out and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert_not_blank(out)
    ax = fig.axes[0]
    if kind == "trend":
        (line,) = [a for a in ax.lines if a.get_gid() == "baseline"]
        assert line.get_ydata()[0] == pytest.approx(92.0)
        assert "edge_container_prefix" in line.get_label()
        # batched runs are ringed: their tok/s is not what one user sees
        (ring,) = [a for a in ax.lines if a.get_gid() == "batched"]
        by_order = {r["order"]: r["name"] for r in run_points(store).iter_rows(named=True)}
        assert {by_order[int(x)] for x in ring.get_xdata()} == BATCHED_PLAIN
    elif kind == "accept":
        (line,) = [a for a in ax.lines if a.get_gid() == "break-even"]
        assert line.get_ydata()[0] == pytest.approx(92.0)
    elif kind == "startup":
        assert "Startup timeline" in ax.get_title()
    else:
        (tok,) = [ln for ln in ax.lines if len(ln.get_xdata()) == 15][:1]
        assert max(tok.get_ydata()) == pytest.approx(76.4, abs=0.05)


def test_cli_plot_and_report_on_fixtures(store, tmp_path):
    runner = CliRunner()
    for kind in ("trend", "accept", "startup"):
        out = tmp_path / f"{kind}.svg"
        res = runner.invoke(cli, ["--store", str(store.root), "plot", kind, "--out", str(out)])
        assert res.exit_code == 0, res.output
        assert "<svg" in out.read_text()[:2000]
    out = tmp_path / "r.html"
    res = runner.invoke(cli, ["--store", str(store.root), "report", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_report_on_fixtures_names_runs_and_baseline(store, table, tmp_path):
    path = write_report(store, tmp_path / "report.html")
    html = path.read_text()
    assert "Baseline: 92.0 tok/s (edge_container_prefix) from best single-stream plain run" in html
    assert "813.8 tok/s (edge_crlf)" not in html and "≥ 25" not in html
    for name in table["name"].to_list():
        assert name in html, name
    # every plot drawn (none replaced by a "not drawn" note): trend, accept, startup, decode
    assert "not drawn" not in html
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)) == 4
    spec = run_points(store).filter(pl.col("spec") & (pl.col("decode_n") > 0))
    best = spec.sort("tok_s", descending=True)["name"][0]
    assert f"{best}: gen throughput, accept length and batch size" in html
    # failed runs get their section, the successful 0.5.14 run does not
    assert "sglang_fail_capture: died in" in html
    assert "sglang_eagle3_cg_16dt: died" not in html
