"""The trend plot: tok/s of every run of one experiment in launch order, against its baseline."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.plots.layout import COLORS, _finish, _no_baseline_note, new_figure, safe_text
from forensics.plots.scope import _drafter_note, _scope_note, scope

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

    from forensics.store import Store

# Readable at any number of runs: past these, the plot summarises rather than lists.
TREND_LABELLED_RUNS = 40  # per-run tick labels and "died: ..." notes up to this many runs
TREND_VALUE_LABELS = 20  # the tok/s figure above each point up to this many runs
TREND_ROTATED_TICKS = 12  # up to this many runs the tick labels are slanted, then vertical
TREND_CROWDED_MARKERS = 0.45  # marker size factor past TREND_LABELLED_RUNS (crosses stay apart)
TREND_MAX_WIDTH = 13.5  # inches (the accept plot's width); the x axis compresses beyond ~25 runs

# The series drawn per run: (row key, legend label, gid, matplotlib style). Rules as data.
TREND_SERIES = (
    (
        "tok_s_server",
        "server: median gen throughput (Decode batch lines)",
        "server",
        {"marker": "o", "markersize": 6, "linestyle": ":", "color": COLORS["server"]},
    ),
    (
        "tok_s_bench",
        "benchmark: client output tok/s",
        "bench",
        {"marker": "D", "linestyle": "none", "markersize": 7, "color": COLORS["bench"]},
    ),
)
_CONFIG_AXIS = "run, in launch order (short config: cg = CUDA graphs, dt = draft tokens)"


def plot_trend(
    store: Store,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
    out: str | Path | None = None,
    experiment: str | None = None,
    group_by: str | list[str] | None = None,
    points: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> Figure:
    """tok/s of every run of one experiment in launch order, against its baseline; failed
    runs at the bottom."""
    sc = scope(
        store, match, baseline=baseline, experiment=experiment, group_by=group_by, points=points
    )
    pts, base = sc.points, sc.baseline
    rows = pts.to_dicts()
    n = len(rows)
    fig = new_figure(min(TREND_MAX_WIDTH, max(9.0, 0.42 * n + 3.5)), 6.2)
    ax = fig.add_subplot()
    xs = [r["order"] for r in rows]
    values = [v for r in rows for v in (r["tok_s_server"], r["tok_s_bench"]) if v is not None]
    # room for the legend (and for the note on why there is no baseline)
    top = max([*values, base.tok_s if base else 0.0, 1.0]) * (1.32 if base else 1.6)
    ax.set_ylim(0, top)
    # run numbers are the launch order of every run: an experiment's need not start at 1
    ax.set_xlim(min(xs, default=1) - 0.6, max(xs, default=1) + 0.6)
    scale = 1.0 if n <= TREND_LABELLED_RUNS else TREND_CROWDED_MARKERS
    _draw_series(ax, rows, scale)
    if base is not None:
        ax.axhline(
            base.tok_s,
            color=COLORS["baseline"],
            linestyle="--",
            linewidth=1.6,
            label=f"baseline {base.tok_s:.1f} tok/s"
            + (f" ({safe_text(base.name, 30)})" if base.name else ""),
            gid="baseline",
        )
    else:
        _no_baseline_note(ax, sc.note, width=60)
    if n <= TREND_VALUE_LABELS:
        _label_values(ax, rows)
    _draw_failed(ax, rows, top * 0.035, labelled=n <= TREND_LABELLED_RUNS, scale=scale)
    _run_axis(ax, rows)
    ax.set_ylabel("decode throughput (tok/s, single stream)")
    ax.set_title(_trend_title(rows, base), fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    _drafter_note(ax, pts)
    _scope_note(ax, sc)
    return _finish(fig, out)


def _draw_series(ax: Any, rows: list[dict], scale: float) -> None:
    """The server's and the benchmark's figure per run, and a ring on batched runs."""
    for key, label, gid, style in TREND_SERIES:
        xy = [(r["order"], r[key]) for r in rows if r[key] is not None]
        if xy:
            style = {**style, "markersize": style["markersize"] * scale}
            ax.plot(*zip(*xy), label=label, gid=gid, **style)
    batched = [
        (r["order"], r["tok_s"]) for r in rows if r.get("batched") and r["tok_s"] is not None
    ]
    if batched:
        # not a single-stream figure: ringed, and never the default baseline
        ax.plot(
            *zip(*batched),
            marker="o",
            markersize=13 * scale,
            markerfacecolor="none",
            markeredgecolor="#555555",
            linestyle="none",
            label="several requests in flight (not single-stream)",
            gid="batched",
        )


def _label_values(ax: Any, rows: list[dict]) -> None:
    for r in rows:
        v = r["tok_s_bench"] if r["tok_s_bench"] is not None else r["tok_s_server"]
        if v is not None:
            ax.annotate(
                f"{v:.1f}",
                (r["order"], v),
                textcoords="offset points",
                xytext=(0, 8),
                ha="center",
                fontsize=8,
                gid="value",
            )


def _draw_failed(
    ax: Any, rows: list[dict], y: float, *, labelled: bool, scale: float = 1.0
) -> None:
    """Failed launches as crosses at the bottom, each with the phase it died in."""
    failed = [r for r in rows if r["failed"]]
    if not failed:
        return
    ax.plot(
        [r["order"] for r in failed],
        [y] * len(failed),
        marker="X",
        markersize=10 * scale,
        linestyle="none",
        color=COLORS["failed"],
        label=f"failed launch ({len(failed)}; "
        + ("the phase it died in above each)" if labelled else "each one's phase: forensics runs)"),
        gid="failed",
    )
    for r in failed if labelled else []:
        ax.annotate(
            f"died: {safe_text(r['died_in'], 18)}",
            (r["order"], y),
            textcoords="offset points",
            xytext=(0, 9),
            rotation=90,
            ha="center",
            va="bottom",
            fontsize=8,
            color=COLORS["failed"],
            gid="failed-label",
        )


def _run_axis(ax: Any, rows: list[dict]) -> None:
    """Name each run under the axis while they fit; past that, the run number only."""
    n, xs = len(rows), [r["order"] for r in rows]
    labels = [f"#{r['order']} {safe_text(r['label'], 30)}" for r in rows]
    if n <= TREND_ROTATED_TICKS:
        ax.set_xticks(xs, labels, rotation=35, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_xlabel(_CONFIG_AXIS)
    elif n <= TREND_LABELLED_RUNS:
        ax.set_xticks(xs, labels, rotation=90, ha="center", fontsize=8)
        ax.set_xlabel(_CONFIG_AXIS)
    else:
        # too many runs to name each: the run number (the # of `forensics runs` order) only
        ax.set_xlabel(f"run number, in launch order ({n} runs; names: forensics runs)")


def _trend_title(rows: list[dict], base) -> str:
    title = "Decode throughput per run, in launch order"
    ok = [r for r in rows if r["spec"] and r["tok_s"] is not None]
    if ok:
        best = max(ok, key=lambda r: r["tok_s"])
        sub = f"best speculative: {best['tok_s']:.1f} tok/s ({safe_text(best['label'], 30)})"
        if base is not None:
            rel = best["tok_s"] / base.tok_s - 1
            sub += f", {abs(rel) * 100:.1f} % {'above' if rel >= 0 else 'below'} the baseline"
        title += "\n" + sub
    return title
