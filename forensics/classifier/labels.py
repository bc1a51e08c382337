"""The user's labels (forensics label)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from forensics.classifier.modelstore import _MODEL_CACHE, _cache_key
from forensics.classifier.phases import PHASES
from forensics.errors import UsageError
from forensics.tables import LABEL_SCHEMA


def _labels_for(store) -> dict[str, dict[int, str]]:
    df = store.table("labels")
    out: dict[str, dict[int, str]] = {}
    if df.is_empty():
        return out
    for sid, ri, ph in df.select("source_id", "run_index", "phase").iter_rows():
        out.setdefault(sid, {})[int(ri)] = ph
    return out


def _has_labels(store) -> bool:
    return not store.table("labels").is_empty()


def label(store, match: str, phase: str) -> list[dict[str, Any]]:
    """Record the user's phase for the run(s) matching ``match``; used by the next train."""
    from forensics.runs import find_run

    if phase not in PHASES:
        raise UsageError(f"{phase}: not a phase", hint="one of " + ", ".join(PHASES))
    hits = pl.DataFrame([find_run(store, match, classify=False)])
    now = dt.datetime.now()
    rows = [
        {
            "run_id": r["run_id"],
            "source_id": r["source_id"],
            "run_index": r["run_index"],
            "name": r["name"],
            "phase": phase,
            "labeled_at": now,
        }
        for r in hits.iter_rows(named=True)
    ]
    ids = [r["run_id"] for r in rows]
    with store.transaction() as tx:
        tx.drop_rows("labels", ~pl.col("run_id").is_in(ids))
        tx.append("labels", pl.DataFrame(rows, schema=LABEL_SCHEMA))
    _MODEL_CACHE.pop(_cache_key(store), None)
    return rows
