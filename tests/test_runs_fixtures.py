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
KIMI_TP8 = "Kimi-K2.5 · tp8 · local · c=1"  # the main experiment: the seed session's runs


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
    """Issues 6/7: edge_crlf (8 in flight, 813.8 tok/s) must not be the baseline; issue 13:
    nor a run of another model or layout (edge_container_prefix is Kimi tp2, 92 tok/s): the
    main experiment (Kimi tp8 single-stream) compares with its own plain run."""
    base = resolve_baseline(store)
    assert base is not None and base.source == "run" and not base.batched
    assert (base.name, base.tok_s) == ("sglang_baseline", pytest.approx(90.0))
    assert base.experiment == KIMI_TP8
    assert "best single-stream plain run" in base.describe()
    tp2 = resolve_baseline(store, experiment="Kimi-K2.5 · tp2 · local · c=1")
    assert (tp2.name, tp2.tok_s) == ("edge_container_prefix", pytest.approx(92.0))


def test_advise_on_fixtures_uses_the_single_stream_baseline(store):
    data = advise(store)
    by_exp = {s["experiment"]: s for s in data["experiments"]}
    kimi = by_exp[KIMI_TP8]
    assert kimi["baseline"]["name"] == "sglang_baseline" and kimi["baseline_note"] is None
    needed = {f["family"]: f["accept_needed"] for f in kimi["families"]}
    # a 90 tok/s baseline: every family needs a plausible accept length (was ≥ 21 with
    # edge_crlf), e.g. cg/16dt: 52.1 ms a round x 90 tok/s / 1000 = 4.69
    assert needed and max(needed.values()) < 6.0
    assert needed["cg/16dt/topk4/5step"] == pytest.approx(1000 * 3.9 / 74.9 * 90 / 1000, rel=2e-2)
    # the batched Llama run is its own experiment, with no single-stream baseline
    crlf = by_exp["Llama-3.1-8B-Instruct · tp1 · local · c=8"]
    assert crlf["baseline"] is None and "edge_crlf" in crlf["baseline_note"]
    res = CliRunner().invoke(cli, ["--store", str(store.root), "advise"])
    assert res.exit_code == 0, res.output
    assert "Baseline: 90.0 tok/s (sglang_baseline)" in res.output
    assert "813.8" not in res.output and "≥ 25" not in res.output


def test_explicit_batched_baseline_is_used_and_marked(store):
    base = resolve_baseline(store, "edge_crlf")
    assert base.name == "edge_crlf" and base.batched and base.source == "option"
    assert "several requests in flight" in base.describe()


def test_only_batched_plain_runs_give_no_baseline(tmp_path):
    """With only batched plain runs: no baseline, say why and how to set one. edge_crlf
    (Llama, 8 in flight) and cg_16dt (Kimi, single stream) are two experiments (issue 13):
    neither has a single-stream plain run of its own."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("edge_crlf.log", "sglang_eagle3_cg_16dt.log"):
        shutil.copy(FIXTURES / name, logs / name)
    st = Store.open(tmp_path / "store")
    ingest(st, [str(p) for p in sorted(logs.iterdir())])
    llama = "Llama-3.1-8B-Instruct · tp1 · local · c=8"
    assert resolve_baseline(st) is None
    note = missing_baseline_note(run_points(st), llama)
    assert note.startswith(f"No single-stream baseline in {llama}") and "edge_crlf" in note
    assert "forensics baseline --tok-s X" in note
    data = advise(st)
    by_exp = {s["experiment"]: s for s in data["experiments"]}
    assert set(by_exp) == {KIMI_TP8, llama}
    sec = by_exp[llama]
    assert sec["baseline"] is None and sec["baseline_note"] == note
    assert sec["verdict"]["rule"] == "no_baseline" and "edge_crlf" in sec["verdict"]["text"]
    assert note in sec["next_steps"]
    kimi = by_exp[KIMI_TP8]
    assert kimi["verdict"]["rule"] == "no_baseline"
    assert kimi["families"][0]["accept_needed"] is None  # no made-up break-even
    # the trend plot draws no baseline line and says why
    ax = plot_trend(st, experiment="c=8").axes[0]
    assert not [a for a in ax.lines if a.get_gid() == "baseline"]
    (txt,) = [t for t in ax.texts if t.get_gid() == "no-baseline"]
    assert "No single-stream baseline" in txt.get_text()
    html = build_report(st)
    assert "Baseline: none." in html and 'class="note no-baseline"' in html
    assert "No single-stream baseline" in html
    # once set by hand, the experiment compares with it; a bare figure needs its experiment
    runner = CliRunner()
    res = runner.invoke(cli, ["--store", str(st.root), "baseline", "--tok-s", "90"])
    assert res.exit_code == 2 and "2 experiments" in res.output
    args = ["--store", str(st.root), "baseline", "--tok-s", "90", "--experiment", KIMI_TP8]
    res = runner.invoke(cli, args)
    assert res.exit_code == 0, res.output
    base = resolve_baseline(st, experiment=KIMI_TP8)
    assert (base.tok_s, base.source) == (90.0, "meta")
    assert resolve_baseline(st, experiment=llama) is None
    kimi = {s["experiment"]: s for s in advise(st)["experiments"]}[KIMI_TP8]
    assert kimi["families"][0]["accept_needed"] == pytest.approx(
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
        # the main experiment (Kimi tp8, single stream) against its own plain run; batched
        # runs are other experiments, named under the axis, not drawn (issue 13)
        (line,) = [a for a in ax.lines if a.get_gid() == "baseline"]
        assert line.get_ydata()[0] == pytest.approx(90.0)
        assert "sglang_baseline" in line.get_label()
        assert not [a for a in ax.lines if a.get_gid() == "batched"]
        assert f"experiment: {KIMI_TP8}" in ax.get_xlabel()
        assert "other experiments not drawn" in ax.get_xlabel()
        # a batched experiment drawn on its own: its run is ringed
        fig = make_plot(store, kind, experiment="c=8", out=out)[0]
        (ring,) = [a for a in fig.axes[0].lines if a.get_gid() == "batched"]
        by_order = {r["order"]: r["name"] for r in run_points(store).iter_rows(named=True)}
        assert {by_order[int(x)] for x in ring.get_xdata()} == {"edge_crlf"}
    elif kind == "accept":
        (line,) = [a for a in ax.lines if a.get_gid() == "break-even"]
        assert line.get_ydata()[0] == pytest.approx(90.0)
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
    path, _ = write_report(store, tmp_path / "report.html")
    html = path.read_text()
    assert "Baseline: 90.0 tok/s (sglang_baseline) from best single-stream plain run" in html
    assert "813.8 tok/s (edge_crlf)" not in html and "≥ 25" not in html
    for name in table["name"].to_list():
        assert name in html, name
    # every plot drawn (none replaced by a "not drawn" note): trend, accept, startup, decode
    assert "not drawn" not in html
    # (per experiment: trend and accept for the biggest ones, issue 13)
    from forensics.report import MAX_PLOTTED_EXPERIMENTS

    n_exp = table["experiment"].n_unique()
    drawn = 2 * min(n_exp, MAX_PLOTTED_EXPERIMENTS) + 2
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', html)) == drawn
    spec = run_points(store).filter(pl.col("spec") & (pl.col("decode_n") > 0))
    best = spec.sort("tok_s", descending=True)["name"][0]
    assert f"{best}: gen throughput, accept length and batch size" in html
    # failed runs get their section, the successful 0.5.14 run does not
    assert "sglang_fail_capture: died in" in html
    assert "sglang_eagle3_cg_16dt: died" not in html


def test_a_run_with_several_benchmarks_counts_them_and_show_lists_each(tmp_path):
    """A bench_serving file of two shapes attached to one run (fixtures/stores/v3): `runs`
    counts them beside the latest one's tok/s, `show` lists each with its shape."""
    home = tmp_path / "st"
    shutil.copytree(Path(__file__).resolve().parents[1] / "fixtures" / "stores" / "v3", home)
    home.chmod(0o700)
    r = CliRunner().invoke(cli, ["--store", str(home), "runs", "--json"])
    assert r.exit_code == 0, r.output
    runs = {x["name"]: x for x in json.loads(r.output)}
    assert runs["sglang_grows"]["bench_results"] == 2
    assert runs["sglang_grows"]["bench_tok_s"] == pytest.approx(215.7, abs=0.05)  # the latest
    assert runs["sglang_fail_capture"]["bench_results"] == 0
    r = CliRunner().invoke(cli, ["--store", str(home), "show", "grows", "--json"])
    assert r.exit_code == 0, r.output
    shown = [(b["shape"], round(b["tok_s"], 1)) for b in json.loads(r.output)["benchmarks"]]
    assert shown == [("c=1 in=256 out=128", 79.3), ("c=4 in=512 out=64", 215.7)]
    r = CliRunner().invoke(cli, ["--store", str(home), "show", "grows"], env={"COLUMNS": "100"})
    assert "benchmarks (2)" in r.output and "c=4 in=512 out=64" in r.output
