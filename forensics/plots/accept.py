"""The accept plot: accept length vs tok/s per run of one experiment, against break-even.

Its baseline is the break-even (below it, speculation loses); each family's round cost is
drawn as the line tok/s = 1000 * accept_len / round_ms (forensics.advise).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.plots.layout import COLORS, _finish, _no_baseline_note, new_figure, safe_text
from forensics.plots.scope import _scope_note, scope

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

    from forensics.store import Store

# Readable at any number of runs: past these, the plot summarises rather than lists.
ACCEPT_POINT_LABELS = 30  # "#n" next to each point up to this many points
ACCEPT_FAMILIES = 10  # families drawn in colour (most runs first); the rest in grey
ACCEPT_AGGREGATE = 5  # a family with more runs is drawn as its median and p10-p90 spread
PALETTE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")


def plot_accept(
    store: Store,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
    out: str | Path | None = None,
    experiment: str | None = None,
    group_by: str | list[str] | None = None,
    points: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> Figure:
    """Accept length vs tok/s per run of one experiment; its baseline is the break-even (below
    it, speculation loses); each family's round cost drawn as a line
    tok/s = 1000 * accept_len / round_ms."""
    import polars as pl

    from forensics.advise import estimate_families

    sc = scope(
        store, match, baseline=baseline, experiment=experiment, group_by=group_by, points=points
    )
    pts, base = sc.points, sc.baseline
    spec = pts.filter(pl.col("spec") & pl.col("round_ms").is_not_null())
    fams = estimate_families(pts, base)
    fig = new_figure(13.5, 6.5)
    ax = fig.add_subplot()
    if spec.is_empty():
        ax.text(
            0.5,
            0.5,
            "no speculative run with both accept length and tok/s",
            transform=ax.transAxes,
            ha="center",
            gid="empty",
        )
    a_max = max([*spec["accept_len"].to_list(), *[f.accept_needed or 0 for f in fams], 2.0])
    t_max = max([*spec["tok_s"].to_list(), base.tok_s if base else 0.0, 1.0])
    x_hi, y_hi = a_max * 1.2, t_max * 1.25
    ax.set_xlim(1.0, x_hi)
    ax.set_ylim(0, y_hi)
    if base is None:
        _no_baseline_note(ax, sc.note)
    else:
        _break_even(ax, base, x_hi, y_hi)
    _draw_families(ax, spec, fams, base, x_hi)
    ax.set_xlabel("accept length (tokens per round, incl. the bonus token)")
    ax.set_ylabel("decode throughput (tok/s, single stream)")
    ax.set_title(
        "Accept length vs throughput: where each configuration breaks even\n"
        "(#n = run number in the trend plot; ● CUDA graphs on, ■ off)",
        fontsize=11,
    )
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    _scope_note(ax, sc)
    return _finish(fig, out)


def _break_even(ax: Any, base: Any, x_hi: float, y_hi: float) -> None:
    """The baseline as the line speculation must clear, the area below it shaded."""
    ax.axhspan(0, base.tok_s, color=COLORS["loses"], zorder=0)
    ax.axhspan(base.tok_s, y_hi, color=COLORS["wins"], zorder=0)
    ax.axhline(
        base.tok_s,
        color=COLORS["baseline"],
        linestyle="--",
        linewidth=1.6,
        label=f"break-even: baseline {base.tok_s:.1f} tok/s (below it, speculation loses)",
        gid="break-even",
    )
    ax.text(x_hi * 0.99, base.tok_s * 0.5, "speculation loses", ha="right", color="#b03030")
    ax.text(x_hi * 0.99, (base.tok_s + y_hi) / 2, "speculation wins", ha="right", color="#2a7a2a")


def _draw_families(ax: Any, spec: pl.DataFrame, fams: list, base: Any, x_hi: float) -> None:
    """The families with the most runs in colour (their round-cost line, the accept length
    they need), the rest as one grey group."""
    import polars as pl

    ranked = sorted(fams, key=lambda f: -f.n_runs)
    shown = {f.family for f in ranked[:ACCEPT_FAMILIES]}
    label_points = spec.height <= ACCEPT_POINT_LABELS
    rest = [f for f in fams if f.family not in shown]
    if rest:
        sub = spec.filter(pl.col("family").is_in([f.family for f in rest]))
        ax.scatter(
            sub["accept_len"].to_list(),
            sub["tok_s"].to_list(),
            color="#bbbbbb",
            s=18,
            zorder=2,
            label=f"{len(rest)} other configurations ({sub.height} runs)",
            gid="family:other",
        )
    for i, f in enumerate(f for f in fams if f.family in shown):
        color = PALETTE[i % len(PALETTE)]
        sub = spec.filter(pl.col("family") == f.family)
        _draw_family(ax, f, sub, color)
        _round_cost(ax, f, color, base, x_hi)
        for r in sub.iter_rows(named=True) if label_points else []:
            ax.annotate(
                f"#{r['order']}",
                (r["accept_len"], r["tok_s"]),
                textcoords="offset points",
                xytext=(6, -3),
                fontsize=7,
                gid="point-label",
            )
    if fams and base is not None:
        ax.plot(
            [],
            [],
            marker="^",
            markerfacecolor="white",
            markeredgecolor="black",
            linestyle="none",
            label="accept length needed to break even (dotted: family's round cost)",
        )


def _draw_family(ax: Any, f: Any, sub: pl.DataFrame, color: str) -> None:
    """One family's runs: each point, or (many repeats) the median run and its spread."""
    agg = sub.height > ACCEPT_AGGREGATE
    label = (
        f"{safe_text(f.family)}: {f.round_ms:.1f} ms/round ({f.n_runs} run"
        f"{'s' if f.n_runs != 1 else ''}{'; median and p10–p90' if agg else ''})"
    )
    marker = "o" if f.cuda_graph else "s"
    xa, yt = sub["accept_len"], sub["tok_s"]
    if not agg:
        ax.scatter(
            xa.to_list(),
            yt.to_list(),
            color=color,
            marker=marker,
            s=55,
            edgecolor="black",
            linewidth=0.5,
            zorder=3,
            label=label,
            gid=f"family:{f.family}",
        )
        return
    # many repeats: the median run and its spread, the runs themselves faint
    ax.scatter(xa.to_list(), yt.to_list(), color=color, s=10, alpha=0.25, zorder=2)
    mx, my = float(xa.median()), float(yt.median())
    ax.errorbar(
        [mx],
        [my],
        xerr=[[mx - float(xa.quantile(0.1))], [float(xa.quantile(0.9)) - mx]],
        yerr=[[my - float(yt.quantile(0.1))], [float(yt.quantile(0.9)) - my]],
        fmt=marker,
        color=color,
        markersize=8,
        markeredgecolor="black",
        capsize=3,
        zorder=3,
        label=label,
        gid=f"family:{f.family}",
    )


def _round_cost(ax: Any, f: Any, color: str, base: Any, x_hi: float) -> None:
    """The family's round cost as a dotted line, and the accept length it needs to win."""
    import numpy as np

    a = np.linspace(1.0, x_hi, 50)
    ax.plot(a, 1000.0 * a / f.round_ms, color=color, linestyle=":", linewidth=1, zorder=2)
    if f.accept_needed is not None and f.accept_needed < x_hi and base is not None:
        ax.plot(
            [f.accept_needed],
            [base.tok_s],
            marker="^",
            markersize=8,
            markerfacecolor="white",
            markeredgecolor=color,
            linestyle="none",
            zorder=4,
            gid=f"needed:{f.family}",
        )
