"""Plots of a tuning session: the throughput trend, accept length vs tok/s, startup, decode.

Every ``plot_*`` function returns a matplotlib :class:`~matplotlib.figure.Figure` (built
without pyplot, on the Agg canvas) and saves it when ``out`` is given; PNG or SVG by the
file's extension. matplotlib is imported inside the functions so ``forensics --help`` stays
fast. Artists that tests look for carry a ``gid`` (``baseline``, ``server``, ``bench``,
``failed``, ``break-even``, ``segment:<name>``, ...). See docs/plots.md.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import RunNotFound, UsageError
from forensics.output import check_out_path

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

    from forensics.store import Store

KINDS = ("trend", "accept", "startup", "decode")
FORMATS = {".png": "png", ".svg": "svg"}
LABEL_MAX = 40  # characters of a log-derived label shown on a plot
# Readable at any number of runs: past these, plots summarise rather than list.
TREND_LABELLED_RUNS = 40  # per-run tick labels and "died: ..." notes up to this many runs
TREND_MAX_WIDTH = 18.0  # inches; the x axis compresses beyond ~35 runs
ACCEPT_POINT_LABELS = 30  # "#n" next to each point up to this many points
ACCEPT_FAMILIES = 10  # families drawn in colour (most runs first); the rest in grey
ACCEPT_AGGREGATE = 5  # a family with more runs is drawn as its median and p10-p90 spread
STARTUP_RUNS = 40  # the latest runs drawn by the startup timeline

COLORS = {
    "server": "#1f77b4",
    "bench": "#ff7f0e",
    "baseline": "#2ca02c",
    "failed": "#d62728",
    "loses": "#fdecea",
    "wins": "#eaf6ea",
}
# Startup segments (runs.SEGMENTS names) -> (legend label, colour). Rules as data.
SEGMENT_STYLE = {
    "dist_init": ("dist init", "#c7c7c7"),
    "load target": ("load target", "#1f77b4"),
    "kv pool target": ("KV pool target", "#17becf"),
    "capture target": ("capture target", "#ff7f0e"),
    "load draft": ("load draft", "#9467bd"),
    "kv pool draft": ("KV pool draft", "#8c9fd1"),
    "capture draft": ("capture draft", "#e377c2"),
    "capture draft extend": ("capture draft extend", "#f7b6d2"),
    "warmup": ("warmup", "#2ca02c"),
}


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------
def safe_text(text: Any, limit: int = LABEL_MAX) -> str:
    """Log-derived text made inert for matplotlib (no mathtext) and short enough to place."""
    s = "" if text is None else str(text)
    s = "".join(ch if ch.isprintable() else "?" for ch in s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s.replace("$", r"\$")


def new_figure(width: float, height: float) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, out: str | Path) -> Path:
    """Save as PNG or SVG (by extension) through ``forensics.output.write_output``."""
    from forensics.output import write_output

    path = Path(out)
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"{path}: unknown image format {path.suffix or '(no extension)'}",
            hint="end --out with .png or .svg",
        )
    check_out_path(path)  # before rendering: a bad --out fails fast
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=110)
    write_output(path, buf.getvalue(), what="the image")
    return path


def figure_bytes(fig: Figure, fmt: str = "png") -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=100)
    return buf.getvalue()


def _finish(fig: Figure, out: str | Path | None) -> Figure:
    if out is not None:
        save_figure(fig, out)
    return fig


def _points(store: Store, match: str | None, *, group_by: str | list[str] | None = None):
    from forensics.advise import run_points

    pts = run_points(store, match, group_by=group_by)
    if pts.is_empty():
        raise RunNotFound(
            f"{match}: no run matches" if match else f"no runs in the store {store.root}",
            hint="forensics runs" if match else "forensics ingest /path/to/*.log",
        )
    return pts


@dataclass
class Scope:
    """The runs one comparison plot draws: one experiment's, and its baseline."""

    points: pl.DataFrame  # the experiment's runs (matching MATCH)
    experiment: str
    baseline: Any  # forensics.baseline.Baseline | None
    note: str | None  # no baseline: why, and how to set one
    others: list[str]  # the other experiments MATCH holds (not drawn)


def pick_experiment(exps: list[str], wanted: str | None) -> str:
    """``wanted`` (exact, else a unique case-insensitive fragment) among ``exps``; default
    the first (the experiment with the most runs)."""
    if not wanted:
        return exps[0]
    if wanted in exps:
        return wanted
    hits = [e for e in exps if wanted.lower() in e.lower()]
    if len(hits) == 1:
        return hits[0]
    raise UsageError(
        f"--experiment {wanted}: "
        + (f"matches {len(hits)} experiments" if hits else "no such experiment"),
        hint="one of: " + "; ".join((hits or exps)[:8]),
    )


def scope(
    store: Store,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
    experiment: str | None = None,
    group_by: str | list[str] | None = None,
    points: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> Scope:
    """One experiment of the runs MATCH names and its baseline (forensics.baseline).

    ``points``: (the runs MATCH names, every run) when the caller has them (the report)."""
    import polars as pl

    from forensics.advise import run_points
    from forensics.baseline import missing_note, resolve
    from forensics.experiment import order

    if points is not None:
        pts, all_pts = points
    else:
        pts = _points(store, match, group_by=group_by)
        all_pts = run_points(store, group_by=group_by) if match else pts
    exps = order(pts)
    exp = pick_experiment(exps, experiment)
    n_all = len(order(all_pts))
    base = resolve(store, all_pts, exp, baseline, n_experiments=n_all)
    note = None if base else missing_note(all_pts, exp if n_all > 1 else None)
    mine = pts.filter(pl.col("experiment") == exp)
    return Scope(mine, exp, base, note, [e for e in exps if e != exp])


def _scope_note(ax, sc: Scope) -> None:
    """Name the experiment drawn, and the ones left out, under the axes."""
    text = f"experiment: {safe_text(sc.experiment, 90)}"
    if sc.others:
        text += (
            f" ({len(sc.others)} other experiment{'s' if len(sc.others) > 1 else ''} not "
            "drawn: --experiment EXP)"
        )
    ax.set_xlabel(f"{ax.get_xlabel()}\n{text}")


def _drafter_note(ax, pts) -> None:
    """Name the draft models behind D1, D2, ... under the x axis (out of the data's way)."""
    seen: dict[str, str] = {}
    for r in pts.iter_rows(named=True):
        if r["drafter"] and r["drafter"] not in seen:
            seen[r["drafter"]] = safe_text(r.get("draft_model_path"), 60)
    if seen:
        note = "drafters: " + "; ".join(f"{k} = {v}" for k, v in seen.items())
        ax.set_xlabel(f"{ax.get_xlabel()}\n{note}")


# --------------------------------------------------------------------------------------
# trend
# --------------------------------------------------------------------------------------
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

    srv = [(r["order"], r["tok_s_server"]) for r in rows if r["tok_s_server"] is not None]
    if srv:
        ax.plot(
            *zip(*srv),
            marker="o",
            linestyle=":",
            color=COLORS["server"],
            label="server: median gen throughput (Decode batch lines)",
            gid="server",
        )
    bench = [(r["order"], r["tok_s_bench"]) for r in rows if r["tok_s_bench"] is not None]
    if bench:
        ax.plot(
            *zip(*bench),
            marker="D",
            linestyle="none",
            markersize=7,
            color=COLORS["bench"],
            label="benchmark: client output tok/s",
            gid="bench",
        )
    batched = [
        (r["order"], r["tok_s"]) for r in rows if r.get("batched") and r["tok_s"] is not None
    ]
    if batched:
        # not a single-stream figure: ringed, and never the default baseline
        ax.plot(
            *zip(*batched),
            marker="o",
            markersize=13,
            markerfacecolor="none",
            markeredgecolor="#555555",
            linestyle="none",
            label="several requests in flight (not single-stream)",
            gid="batched",
        )
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
    if n <= 20:
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
    failed = [r for r in rows if r["failed"]]
    if failed:
        y = top * 0.035
        ax.plot(
            [r["order"] for r in failed],
            [y] * len(failed),
            marker="X",
            markersize=10,
            linestyle="none",
            color=COLORS["failed"],
            label="failed launch (phase it died in)",
            gid="failed",
        )
        for r in failed if n <= TREND_LABELLED_RUNS else []:
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
    labels = [f"#{r['order']} {safe_text(r['label'], 30)}" for r in rows]
    if n <= 12:
        ax.set_xticks(xs, labels, rotation=35, ha="right", rotation_mode="anchor", fontsize=8)
        ax.set_xlabel("run, in launch order (short config: cg = CUDA graphs, dt = draft tokens)")
    elif n <= TREND_LABELLED_RUNS:
        ax.set_xticks(xs, labels, rotation=90, ha="center", fontsize=8)
        ax.set_xlabel("run, in launch order (short config: cg = CUDA graphs, dt = draft tokens)")
    else:
        # too many runs to name each: the run number (the # of `forensics runs` order) only
        ax.set_xlabel(f"run number, in launch order ({n} runs; names: forensics runs)")
    ax.set_ylabel("decode throughput (tok/s, single stream)")
    ax.set_title(_trend_title(rows, base), fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    _drafter_note(ax, pts)
    _scope_note(ax, sc)
    return _finish(fig, out)


def _no_baseline_note(ax, note: str | None, width: int = 90) -> None:
    """Say on the plot why no baseline is drawn (e.g. only batched plain runs) and how to set
    one, rather than draw a misleading one."""
    import textwrap

    ax.text(
        0.01,
        0.98,
        textwrap.fill(safe_text(note or "No baseline.", 400), width),
        transform=ax.transAxes,
        va="top",
        ha="left",
        fontsize=8,
        color="#555555",
        bbox={"facecolor": "white", "edgecolor": "#cccccc", "alpha": 0.9},
        gid="no-baseline",
    )


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


# --------------------------------------------------------------------------------------
# accept
# --------------------------------------------------------------------------------------
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
        ax.text(
            x_hi * 0.99, (base.tok_s + y_hi) / 2, "speculation wins", ha="right", color="#2a7a2a"
        )
    palette = [
        "#1f77b4",
        "#ff7f0e",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#17becf",
        "#bcbd22",
        "#7f7f7f",
    ]
    import numpy as np

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
        color = palette[i % len(palette)]
        sub = spec.filter(pl.col("family") == f.family)
        agg = sub.height > ACCEPT_AGGREGATE
        label = (
            f"{safe_text(f.family)}: {f.round_ms:.1f} ms/round ({f.n_runs} run"
            f"{'s' if f.n_runs != 1 else ''}{'; median and p10–p90' if agg else ''})"
        )
        if agg:
            # many repeats: the median run and its spread, the runs themselves faint
            ax.scatter(
                sub["accept_len"].to_list(),
                sub["tok_s"].to_list(),
                color=color,
                s=10,
                alpha=0.25,
                zorder=2,
            )
            xa, yt = sub["accept_len"], sub["tok_s"]
            mx, my = float(xa.median()), float(yt.median())
            ax.errorbar(
                [mx],
                [my],
                xerr=[[mx - float(xa.quantile(0.1))], [float(xa.quantile(0.9)) - mx]],
                yerr=[[my - float(yt.quantile(0.1))], [float(yt.quantile(0.9)) - my]],
                fmt="o" if f.cuda_graph else "s",
                color=color,
                markersize=8,
                markeredgecolor="black",
                capsize=3,
                zorder=3,
                label=label,
                gid=f"family:{f.family}",
            )
        else:
            ax.scatter(
                sub["accept_len"].to_list(),
                sub["tok_s"].to_list(),
                color=color,
                marker="o" if f.cuda_graph else "s",
                s=55,
                edgecolor="black",
                linewidth=0.5,
                zorder=3,
                label=label,
                gid=f"family:{f.family}",
            )
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


# --------------------------------------------------------------------------------------
# startup
# --------------------------------------------------------------------------------------
def plot_startup(
    store: Store,
    match: str | None = None,
    *,
    out: str | Path | None = None,
    group_by: str | list[str] | None = None,
    points: pl.DataFrame | None = None,
) -> Figure:
    """Per-run startup timeline as horizontal bars; failed runs end where they died."""
    from forensics.runs import stage_timeline

    pts = _points(store, match, group_by=group_by) if points is None else points
    rows = pts.to_dicts()
    total = len(rows)
    rows = rows[-STARTUP_RUNS:]  # the latest ones: a timeline per run stays readable
    n = len(rows)
    fig = new_figure(12.0, max(3.6, 0.42 * n + 2.6))
    ax = fig.add_subplot()
    used: set[str] = set()
    x_max = 1.0
    timelines = []
    for r in rows:
        tl = (
            stage_timeline(store, r["source_id"], int(r["run_index"])) if r.get("source_id") else []
        )
        timelines.append(tl)
        for seg in tl:
            x_max = max(x_max, (seg["start_s"] or 0) + (seg["duration_s"] or 0))
    for y, (r, tl) in enumerate(zip(rows, timelines)):
        if not tl:
            if r["failed"]:
                ax.plot([0], [y], marker="X", markersize=10, color=COLORS["failed"], gid="failed")
            ax.text(
                0,
                y,
                f"    no startup lines (log empty or missing){': died in ' + safe_text(r['died_in'], 24) if r['failed'] else ''}",
                va="center",
                fontsize=8,
                color="#777777",
                gid="no-timeline",
            )
            continue
        end = 0.0
        for seg in tl:
            name = seg["segment"]
            start, dur = seg["start_s"] or 0.0, seg["duration_s"] or 0.0
            end = max(end, start + dur)
            if name == "ready":
                continue
            label, color = SEGMENT_STYLE.get(name, (name, "#aaaaaa"))
            ax.barh(
                y,
                max(dur, x_max * 0.002),
                left=start,
                height=0.62,
                color=color,
                edgecolor=COLORS["failed"] if not seg["ended"] else "none",
                hatch="///" if not seg["ended"] else None,
                label=label if label not in used else None,
                gid=f"segment:{name}",
            )
            used.add(label)
        ready = [s for s in tl if s["segment"] == "ready"]
        if ready:
            t = ready[0]["start_s"]
            ax.plot([t], [y], marker="|", markersize=14, color="black", gid="ready")
            ax.annotate(
                f"ready {t:.0f} s", (t, y), xytext=(5, -3), textcoords="offset points", fontsize=8
            )
        elif r["failed"]:
            ax.plot([end], [y], marker="X", markersize=10, color=COLORS["failed"], gid="failed")
            ax.annotate(
                f"died in {safe_text(r['died_in'], 18)} after {end:.0f} s",
                (end, y),
                xytext=(7, -3),
                textcoords="offset points",
                fontsize=8,
                color=COLORS["failed"],
            )
    ax.plot([], [], marker="|", markersize=12, color="black", linestyle="none", label="ready")
    ax.plot(
        [],
        [],
        marker="X",
        color=COLORS["failed"],
        linestyle="none",
        label="died (hatched: unfinished)",
    )
    ax.set_yticks(
        range(n), [f"#{r['order']} {safe_text(r['label'], 30)}" for r in rows], fontsize=8
    )
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlim(0, x_max * 1.25)
    ax.set_xlabel("seconds since the run's first startup line")
    ax.set_title(
        "Startup timeline per run (load, KV pool, CUDA-graph capture, warmup)"
        + (f"\nthe latest {n} of {total} runs" if total > n else ""),
        fontsize=11,
    )
    ax.grid(axis="x", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=8, ncols=6, frameon=False)
    return _finish(fig, out)


# --------------------------------------------------------------------------------------
# decode
# --------------------------------------------------------------------------------------
def plot_decode(store: Store, run: str, *, out: str | Path | None = None) -> Figure:
    """Gen throughput, accept length and batch size over time for one run."""
    import polars as pl

    from forensics.advise import short_config
    from forensics.runs import find_run

    if not run:
        raise UsageError("plot decode needs a run", hint="forensics plot decode RUN")
    row = find_run(store, run, classify=False)
    dec = store.table("decode")
    if not dec.is_empty():
        dec = dec.filter(
            (pl.col("source_id") == row["source_id"]) & (pl.col("run_index") == row["run_index"])
        )
    if dec.is_empty() or dec["ts"].null_count() == len(dec):
        raise RunNotFound(
            f"{row['name']}: no Decode batch lines (the server never decoded, or the log has "
            "no timestamps)",
            hint=f"forensics plot startup {row['name']}",
        )
    if "rank" in dec.columns and dec["rank"].n_unique() > 1:
        first_rank = dec.sort("line")["rank"][0]
        dec = dec.filter(pl.col("rank").eq_missing(first_rank))
    dec = dec.filter(pl.col("ts").is_not_null()).sort("ts")
    t0 = dec["ts"][0]
    t = [(ts - t0).total_seconds() for ts in dec["ts"].to_list()]
    has_accept = dec["accept_len"].null_count() < len(dec)
    panels = 3 if has_accept else 2
    fig = new_figure(11.0, 2.0 * panels + 1.0)
    axes = fig.subplots(panels, 1, sharex=True)
    thr = dec["gen_throughput"].cast(pl.Float64).to_list()
    ax = axes[0]
    ax.plot(t, thr, marker=".", color=COLORS["server"], label="gen throughput", gid="throughput")
    med = dec["gen_throughput"].cast(pl.Float64).median()
    if med is not None:
        ax.axhline(med, color="#555555", linestyle="--", linewidth=1, label=f"median {med:.1f}")
    ax.set_ylabel("gen throughput\n(tok/s)")
    ax.set_ylim(0, max([v for v in thr if v is not None] or [1.0]) * 1.15)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    i = 1
    if has_accept:
        ax = axes[1]
        acc = dec["accept_len"].cast(pl.Float64).to_list()
        ax.plot(t, acc, marker=".", color="#9467bd", label="accept len", gid="accept")
        mean = dec["accept_len"].cast(pl.Float64).mean()
        ax.axhline(mean, color="#555555", linestyle="--", linewidth=1, label=f"mean {mean:.2f}")
        ax.set_ylabel("accept len\n(tokens/round)")
        ax.set_ylim(bottom=1.0 if min(a for a in acc if a is not None) >= 1 else 0)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
        i = 2
    ax = axes[i]
    bs = dec["running_req"].cast(pl.Float64).to_list()
    ax.step(t, bs, where="post", color="#8c564b", label="running requests", gid="batch")
    ax.set_ylabel("batch size\n(running req)")
    ax.set_ylim(0, max([v for v in bs if v is not None] or [1.0]) + 1)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("seconds since the first Decode batch line")
    ax.grid(alpha=0.3)
    fig.suptitle(
        f"Decode of {safe_text(row['name'], 50)} ({safe_text(short_config(row), 30)}): "
        f"{len(dec)} Decode batch lines",
        fontsize=11,
    )
    return _finish(fig, out)


# --------------------------------------------------------------------------------------
# entry point for the CLI
# --------------------------------------------------------------------------------------
def default_out(kind: str) -> Path:
    return Path(f"forensics-{kind}.png")


def make_plot(
    store: Store,
    kind: str,
    match: str | None = None,
    *,
    out: str | Path | None = None,
    baseline: str | float | None = None,
    experiment: str | None = None,
    group_by: str | list[str] | None = None,
) -> tuple[Figure, Path]:
    """Draw one kind of plot and save it (default ./forensics-<kind>.png)."""
    if kind not in KINDS:
        raise UsageError(f"plot {kind}: unknown kind", hint=f"one of {', '.join(KINDS)}")
    path = Path(out) if out else default_out(kind)
    if path.suffix.lower() not in FORMATS:
        raise UsageError(
            f"{path}: unknown image format {path.suffix or '(no extension)'}",
            hint="end --out with .png or .svg",
        )
    opts = {"baseline": baseline, "experiment": experiment, "group_by": group_by}
    if kind == "trend":
        fig = plot_trend(store, match, **opts)
    elif kind == "accept":
        fig = plot_accept(store, match, **opts)
    elif kind == "startup":
        fig = plot_startup(store, match, group_by=group_by)
    else:
        fig = plot_decode(store, match or "")
    save_figure(fig, path)
    return fig, path
