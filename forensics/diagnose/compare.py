"""The closest run that worked, of the same experiment, and how its configuration differs."""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics.runs import COMPARED_COLUMNS, CONFIG_COLUMNS, stage_timeline

# Config columns compared between a failed run and the runs that worked (declared once, in
# forensics.runs.CONFIG_COLUMNS, with their weights).
CONFIG_KEYS = COMPARED_COLUMNS
SIMILARITY = {c.name: c.similarity for c in CONFIG_COLUMNS if c.similarity is not None}


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = float(s)
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def _cfg(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in CONFIG_KEYS if k in row}


def _closest(ok: pl.DataFrame, mine: dict[str, Any]) -> dict[str, Any]:
    """The run of ``ok`` most similar to ``mine`` (SIMILARITY weights of the values they
    share), the earliest started among equals, computed as one polars sort."""
    shared = [
        pl.when(pl.col(k) == v).then(pl.lit(w)).otherwise(pl.lit(0.0))
        for k, w in SIMILARITY.items()
        if k in ok.columns and (v := mine.get(k)) is not None
    ]
    score = pl.sum_horizontal(shared) if shared else pl.lit(0.0)
    by = ["_similarity", *(["started_at"] if "started_at" in ok.columns else [])]
    ranked = ok.with_columns(score.alias("_similarity")).sort(
        by, descending=[True, False][: len(by)], nulls_last=True, maintain_order=True
    )
    return {k: v for k, v in ranked.row(0, named=True).items() if k != "_similarity"}


def _worked(df: pl.DataFrame) -> pl.DataFrame:
    if df.is_empty() or "phase" not in df.columns:
        return df.clear()
    return df.filter(pl.col("phase") == "ok")


def compare(
    store, run: dict[str, Any], table: pl.DataFrame, keys: list[str] | None = None
) -> dict[str, Any]:
    """The closest successful run of a similar configuration, and how the configs differ.

    Only runs of the same experiment (forensics.experiment) are compared; when none of them
    worked, the closest of another experiment is named with a warning (``warning``). ``keys``:
    the config columns whose differences are listed (those that can explain the failure,
    ``Signature.explaining``; None: every compared column); the closest run is chosen on all."""
    ok = _worked(table).filter(pl.col("run_id") != run["run_id"])
    warning = None
    exp = run.get("experiment")
    if exp is not None and "experiment" in ok.columns and not ok.is_empty():
        same = ok.filter(pl.col("experiment") == exp)
        if same.is_empty():
            warning = (
                f"no run of this experiment ({exp}) worked: the closest run is from another "
                "experiment (model, layout, hardware or benchmark shape differ)"
            )
        else:
            ok = same
    if ok.is_empty():
        return {"closest": None, "differences": [], "text": "no successful run to compare with"}
    mine = _cfg(run)
    best = _closest(ok, mine)
    listed = CONFIG_KEYS if keys is None else [k for k in CONFIG_KEYS if k in keys]
    diffs = [
        {"key": k, "this": mine.get(k), "worked": best.get(k)}
        for k in listed
        if mine.get(k) != best.get(k) and not (mine.get(k) is None and best.get(k) is None)
    ]
    # values every successful run shares but this one does not
    common = [
        {"key": k, "this": mine.get(k), "all_worked": best.get(k)}
        for k in listed
        if mine.get(k) is not None
        and best.get(k) != mine.get(k)
        and (k not in ok.columns or ok[k].n_unique() == 1)
    ]
    ready = best.get("ready_s")
    what = ", ".join(f"{d['key']}={d['worked']}" for d in diffs[:3]) or (
        "the same config" if keys is None else "no difference that can explain it"
    )
    text = f"{best['name']} ({what})"
    if ready is not None:
        text += f" reached ready in {_fmt_s(ready)}"
    else:
        text += " worked"
    if warning:
        text += f" (warning: {warning})"
    tl = stage_timeline(store, best["source_id"], int(best["run_index"]))
    return {
        "closest": {
            "name": best["name"],
            "run_id": best["run_id"],
            "ready_s": ready,
            "timeline": tl,
        },
        "differences": diffs,
        "differs_from_all_that_worked": common,
        "text": text,
        "warning": warning,
    }
