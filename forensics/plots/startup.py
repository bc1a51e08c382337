"""The startup plot: a per-run timeline of load, KV pool, CUDA-graph capture and warmup."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.plots.layout import COLORS, _finish, new_figure, safe_text
from forensics.plots.scope import _points

if TYPE_CHECKING:
    import polars as pl
    from matplotlib.figure import Figure

    from forensics.store import Store

STARTUP_RUNS = 40  # the latest runs drawn by the startup timeline

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
    total = pts.height
    rows = pts.tail(STARTUP_RUNS).to_dicts()  # the latest ones: a timeline per run stays readable
    n = len(rows)
    fig = new_figure(12.0, max(3.6, 0.42 * n + 2.6))
    ax = fig.add_subplot()
    timelines = [
        stage_timeline(store, r["source_id"], int(r["run_index"])) if r.get("source_id") else []
        for r in rows
    ]
    x_max = max(
        [1.0, *((s["start_s"] or 0) + (s["duration_s"] or 0) for tl in timelines for s in tl)]
    )
    used: set[str] = set()
    for y, (r, tl) in enumerate(zip(rows, timelines, strict=True)):
        if tl:
            _draw_timeline(ax, y, r, tl, x_max, used)
        else:
            _no_timeline(ax, y, r)
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


def _no_timeline(ax: Any, y: int, r: dict) -> None:
    if r["failed"]:
        ax.plot([0], [y], marker="X", markersize=10, color=COLORS["failed"], gid="failed")
    died = f": died in {safe_text(r['died_in'], 24)}" if r["failed"] else ""
    ax.text(
        0,
        y,
        f"    no startup lines (log empty or missing){died}",
        va="center",
        fontsize=8,
        color="#777777",
        gid="no-timeline",
    )


def _draw_timeline(ax: Any, y: int, r: dict, tl: list[dict], x_max: float, used: set[str]) -> None:
    """One run's segments as bars (unfinished ones hatched), then ready or where it died."""
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
