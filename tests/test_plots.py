"""Plots: content checked through the Figure objects, files checked for pixels (issue 7)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from click.testing import CliRunner

from forensics.cli import cli
from forensics.errors import RunNotFound, UsageError
from forensics.plots import make_plot, plot_accept, plot_decode, plot_startup, plot_trend
from tests.test_plots_story import STORY, many_runs, story_store


def _by_gid(ax, gid):
    return [a for a in itertools.chain(ax.lines, ax.collections, ax.patches, ax.texts)
            if a.get_gid() == gid]  # fmt: skip


def _texts(fig):
    return [t.get_text() for t in fig.findobj(lambda a: hasattr(a, "get_text"))]


def assert_not_blank(path):
    """Pixel check: the image is not a uniform canvas and has a fair share of drawn pixels."""
    import matplotlib.image as mpimg

    img = mpimg.imread(str(path))[..., :3]
    assert img.shape[0] > 200 and img.shape[1] > 300
    non_white = (img.min(axis=2) < 0.9).mean()
    assert non_white > 0.02, f"{path}: only {non_white:.1%} of pixels drawn"
    colourful = (img.max(axis=2) - img.min(axis=2) > 0.25).mean()
    assert colourful > 0.001, f"{path}: no coloured pixels (plot lines missing?)"


def _overlaps(boxes):
    return [(i, j) for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2)
            if a.overlaps(b)]  # fmt: skip


@pytest.fixture
def story(tmp_path):
    return story_store(tmp_path)


def test_trend_tells_the_story(story, tmp_path):
    out = tmp_path / "trend.png"
    fig = plot_trend(story, out=out)
    ax = fig.axes[0]
    assert "Decode throughput per run" in ax.get_title()
    assert "82.3 tok/s" in ax.get_title() and "below the baseline" in ax.get_title()
    assert "tok/s" in ax.get_ylabel() and "launch order" in ax.get_xlabel()
    # five runs that served, in launch order, as server points
    (server,) = _by_gid(ax, "server")
    xs, ys = server.get_data()
    assert list(xs) == [1, 2, 3, 4, 5]
    assert [round(y, 1) for y in ys] == [90.0, 53.2, 50.5, 74.9, 82.3]
    # the baseline line at 90 tok/s
    (base,) = _by_gid(ax, "baseline")
    assert base.get_ydata()[0] == pytest.approx(90.0)
    assert "baseline 90.0 tok/s" in base.get_label()
    # the failed 2step run at the bottom, with its phase
    (failed,) = _by_gid(ax, "failed")
    assert list(failed.get_xdata()) == [6]
    assert failed.get_ydata()[0] < 10
    assert ["died: capture"] == [t.get_text() for t in _by_gid(ax, "failed-label")]
    # every point labelled with its short config
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[4] == "#5 cg 5dt topk4 3step D1" and ticks[5].startswith("#6 cg 5dt topk4 2step")
    assert ticks[0] == "#1 baseline cg"
    assert {"90.0", "82.3", "74.9"} <= {t.get_text() for t in _by_gid(ax, "value")}
    assert any("D2 = /models/published" in t for t in _texts(fig))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("server" in t for t in legend) and any("failed" in t for t in legend)
    assert_not_blank(out)


def test_trend_30_runs_labels_do_not_overlap(tmp_path):
    store = story_store(tmp_path, runs=many_runs(30))
    out = tmp_path / "trend30.png"
    fig = plot_trend(store, out=out)
    ax = fig.axes[0]
    (server,) = _by_gid(ax, "server")
    (failed,) = _by_gid(ax, "failed")
    assert len(server.get_xdata()) + len(failed.get_xdata()) == 30
    renderer = fig.canvas.get_renderer()
    ticks = ax.get_xticklabels()
    assert len(ticks) == 30 and all(t.get_text() for t in ticks)
    assert _overlaps([t.get_window_extent(renderer) for t in ticks]) == []
    fails = _by_gid(ax, "failed-label")
    assert len(fails) == len(failed.get_xdata()) >= 3
    assert _overlaps([t.get_window_extent(renderer) for t in fails]) == []
    # tick labels stay inside the figure
    fig_box = fig.bbox
    assert all(fig_box.x0 - 1 <= t.get_window_extent(renderer).x0 for t in ticks)
    assert_not_blank(out)


def test_trend_baseline_option_and_svg(story, tmp_path):
    out = tmp_path / "trend.svg"
    fig = plot_trend(story, baseline="85", out=out)
    (base,) = _by_gid(fig.axes[0], "baseline")
    assert base.get_ydata()[0] == pytest.approx(85.0)
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert "cg 5dt topk4 3step" in text  # labels kept as text in the SVG


def test_accept_break_even(story, tmp_path):
    out = tmp_path / "accept.png"
    fig = plot_accept(story, out=out)
    ax = fig.axes[0]
    assert "accept length" in ax.get_xlabel() and "tok/s" in ax.get_ylabel()
    (be,) = _by_gid(ax, "break-even")
    assert be.get_ydata()[0] == pytest.approx(90.0)
    assert "below it, speculation loses" in be.get_label()
    fam = _by_gid(ax, "family:cg/5dt/topk4/3step")
    assert len(fam) == 1
    (x, y), = fam[0].get_offsets()  # fmt: skip
    assert (round(x, 2), round(y, 1)) == (2.38, 82.3)
    # the needed accept length for cg/5dt sits on the baseline at 2.60
    (need,) = _by_gid(ax, "needed:cg/5dt/topk4/3step")
    assert need.get_xdata()[0] == pytest.approx(2.603, abs=0.005)
    # four speculative points that served, each labelled with its run number
    assert sorted(t.get_text() for t in _by_gid(ax, "point-label")) == ["#2", "#3", "#4", "#5"]
    assert_not_blank(out)


def test_startup_bars_and_where_failed_runs_died(story, tmp_path):
    out = tmp_path / "startup.png"
    fig = plot_startup(story, out=out)
    ax = fig.axes[0]
    assert "Startup timeline" in ax.get_title() and "seconds" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_yticklabels()][-1].startswith("#6 cg 5dt topk4 2step")
    # the dead run's capture bar is unfinished (hatched) and ends where it died (17 s in)
    caps = _by_gid(ax, "segment:capture target")
    assert len(caps) == 4  # baseline, cg_16dt, cg_5dt, 2step (nocg runs capture nothing)
    dead = [p for p in caps if p.get_hatch()]
    assert len(dead) == 1 and dead[0].get_width() == pytest.approx(17.0)
    assert len(_by_gid(ax, "ready")) == 5
    assert any("died in capture after 140 s" in t for t in _texts(fig))
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"load target", "capture target", "capture draft", "warmup", "ready"} <= labels
    assert_not_blank(out)


def test_startup_30_runs_readable(tmp_path):
    store = story_store(tmp_path, runs=many_runs(30))
    fig = plot_startup(store)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    ticks = ax.get_yticklabels()
    assert len(ticks) == 30
    assert _overlaps([t.get_window_extent(renderer) for t in ticks]) == []


def test_decode_panels(story, tmp_path):
    out = tmp_path / "decode.png"
    fig = plot_decode(story, "cg_5dt", out=out)
    assert len(fig.axes) == 3
    thr, acc, bs = fig.axes
    (line,) = _by_gid(thr, "throughput")
    assert len(line.get_xdata()) == 12
    assert np.median(line.get_ydata()) == pytest.approx(82.3, abs=0.01)
    assert "tok/s" in thr.get_ylabel() and "accept" in acc.get_ylabel()
    assert "batch" in bs.get_ylabel() and "seconds" in bs.get_xlabel()
    assert np.allclose(_by_gid(acc, "accept")[0].get_ydata(), 2.38)
    assert "sglang_eagle3_cg_5dt" in fig._suptitle.get_text()
    assert_not_blank(out)
    # the baseline has no accept length: two panels
    assert len(plot_decode(story, "sglang_baseline").axes) == 2


def test_decode_of_a_run_that_never_decoded(story):
    with pytest.raises(RunNotFound, match="no Decode batch lines"):
        plot_decode(story, "2step")


def test_make_plot_rejects_unknown_format_and_kind(story, tmp_path):
    with pytest.raises(UsageError, match=r"\.pdf"):
        make_plot(story, "trend", out=tmp_path / "x.pdf")
    with pytest.raises(UsageError, match="unknown kind"):
        make_plot(story, "pie")


def test_log_text_cannot_inject_mathtext(tmp_path):
    """A hostile run name ($...$, control characters, 300 chars, C06) is drawn as plain text."""
    runs = [(name, kw) for name, kw in STORY[:2]]
    runs.append(("sglang_$\\frac{1}{0}$_" + "x" * 180, {"steps": 3, "tok": 70.0, "accept": 2.0}))
    store = story_store(tmp_path, runs=runs)
    fig = plot_startup(store, out=tmp_path / "s.png")
    fig = plot_trend(store, out=tmp_path / "t.png")
    assert_not_blank(tmp_path / "t.png")
    assert len(fig.axes[0].get_xticklabels()) == 3


def test_cli_plot_default_out_and_errors(story, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    store_arg = ["--store", str(story.root)]
    res = runner.invoke(cli, [*store_arg, "plot", "trend"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == "forensics-trend.png"
    assert_not_blank(tmp_path / "forensics-trend.png")
    res = runner.invoke(cli, [*store_arg, "plot", "accept", "--out", "a.svg", "--json"])
    assert res.exit_code == 0 and '"path": "a.svg"' in res.output
    res = runner.invoke(cli, [*store_arg, "plot", "decode", "cg_5dt", "-o", "d.png"])
    assert res.exit_code == 0 and (tmp_path / "d.png").stat().st_size > 10_000


def test_cli_plot_exit_codes(story, tmp_path):
    from forensics.cli import main

    def run(*args):
        with pytest.raises(SystemExit) as exc:
            main(["--store", str(story.root), *args])
        return exc.value.code

    assert run("plot", "trend", "-o", str(tmp_path / "x.pdf")) == 2
    assert run("plot", "decode", "nosuchrun", "-o", str(tmp_path / "d.png")) == 3
    assert run("plot", "trend", "nosuchrun", "-o", str(tmp_path / "t.png")) == 3
    assert run("plot", "pie") == 2
