"""The sweep's own state: an append-only journal in the store (table ``sweep_journal``).

Every event is one store transaction (a new parquet part, then an atomic manifest swap), so
a kill -9 of forensics at any moment leaves either the whole event or none of it. What a
``--resume`` does follows from the events alone:

| a unit's last events | resume |
| --- | --- |
| ``finish`` | never run again; its result is kept |
| ``start`` (or ``submit``) without ``finish`` | interrupted: its launch is stopped by its process group (a Slurm job: followed if still known, else re-run), then run again from the start |
| none | run |

Columns: sweep, seq (ns clock, orders the events), at, event, key (the unit: ``<config>#<repeat>``),
data (JSON). Events: ``plan`` (the units, the file's digest, the executor), ``start``
(run name, log, launch name), ``submit`` (a Slurm job id), ``finish`` (the result: outcome,
phase, signature, cause, tok_s, accept_len, run, ...), ``cleanup`` (the server of that unit
was still there when the next one was due), ``stop`` (interrupted, budget spent, or done).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.tables import SWEEP_JOURNAL_SCHEMA

if TYPE_CHECKING:
    from forensics.store import Store

TABLE = "sweep_journal"
SCHEMA = SWEEP_JOURNAL_SCHEMA  # declared with every table of the store
EVENTS = ("plan", "start", "submit", "finish", "cleanup", "stop")

# Called around every write: hook(event, "before" | "after"). Tests use it to die exactly at a
# journal-write boundary; nothing in the library sets it.
WriteHook = Callable[[str, str], None]


class Journal:
    def __init__(self, store: Store, sweep: str, *, hook: WriteHook | None = None):
        self.store = store
        self.sweep = sweep
        self.hook = hook
        self._last = 0

    def write(self, event: str, unit_key: str = "", **data: Any) -> None:
        if event not in EVENTS:
            raise ValueError(f"unknown journal event {event!r}")
        if self.hook:
            self.hook(event, "before")
        seq = max(time.time_ns(), self._last + 1)
        self._last = seq
        row = pl.DataFrame(
            [
                {
                    "sweep": self.sweep,
                    "seq": seq,
                    "at": dt.datetime.now(),
                    "event": event,
                    "key": unit_key,
                    "data": json.dumps(data, default=str, sort_keys=True),
                }
            ],
            schema=SCHEMA,
        )
        with self.store.transaction() as tx:
            tx.append(TABLE, row)
        if self.hook:
            self.hook(event, "after")

    def events(self) -> list[dict[str, Any]]:
        return events(self.store, self.sweep)

    def state(self) -> dict[str, dict[str, Any]]:
        return unit_state(self.events())


def frame(store: Store) -> pl.DataFrame:
    df = store.table(TABLE)
    if df.is_empty():
        return pl.DataFrame(schema=SCHEMA)
    return df.sort("seq")


def events(store: Store, sweep: str) -> list[dict[str, Any]]:
    df = frame(store)
    if df.is_empty():
        return []
    out = []
    for row in df.filter(pl.col("sweep") == sweep).iter_rows(named=True):
        out.append({**row, "data": json.loads(row["data"] or "{}")})
    return out


def unit_state(evs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per unit key: ``{"status": started|submitted|finished, "start": data, "result": data,
    "job": id, "cleanup": data}`` from the events (later events win)."""
    state: dict[str, dict[str, Any]] = {}
    for e in evs:
        key = e["key"]
        if not key:
            continue
        s = state.setdefault(key, {"status": None})
        if e["event"] == "start":
            s.update(status="started", start=e["data"], result=None)
        elif e["event"] == "submit":
            s.update(status="submitted", job=e["data"].get("job_id"), start=e["data"])
        elif e["event"] == "finish":
            s.update(status="finished", result=e["data"])
        elif e["event"] == "cleanup":
            s["cleanup"] = e["data"]
    return state


def last_plan(evs: list[dict[str, Any]]) -> dict[str, Any] | None:
    plans = [e for e in evs if e["event"] == "plan"]
    return plans[-1]["data"] if plans else None


def sweeps(store: Store) -> list[dict[str, Any]]:
    """Every sweep in the store: name, first and last event, units planned, finished."""
    df = frame(store)
    if df.is_empty():
        return []
    out = []
    for name in df["sweep"].unique(maintain_order=True).to_list():
        evs = events(store, name)
        plan = last_plan(evs) or {}
        st = unit_state(evs)
        done = [s for s in st.values() if s["status"] == "finished"]
        out.append(
            {
                "sweep": name,
                "started_at": evs[0]["at"],
                "updated_at": evs[-1]["at"],
                "units": len(plan.get("units", [])),
                "finished": len(done),
                "ok": sum(1 for s in done if (s["result"] or {}).get("outcome") == "ok"),
                "path": plan.get("path"),
                "executor": plan.get("executor"),
            }
        )
    return out


def run_tags(store: Store) -> pl.DataFrame:
    """Per run launched by a sweep: run_id, sweep, sweep_config (``<config>#<repeat>``); the
    runs table joins it (forensics.runs)."""
    schema = {"run_id": pl.String, "sweep": pl.String, "sweep_config": pl.String}
    df = frame(store)
    if df.is_empty():
        return pl.DataFrame(schema=schema)
    rows = {}
    for row in df.filter(pl.col("event") == "finish").iter_rows(named=True):
        rid = json.loads(row["data"] or "{}").get("run_id")
        if rid:
            rows[rid] = {"run_id": rid, "sweep": row["sweep"], "sweep_config": row["key"]}
    return pl.DataFrame(list(rows.values()), schema=schema)
