"""The runs one plot draws: the experiment MATCH names (forensics.experiment) and its baseline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.errors import RunNotFound, UsageError
from forensics.plots.layout import safe_text

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store


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
