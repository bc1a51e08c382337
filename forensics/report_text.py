"""`forensics show`: one run as a readable report (data first, rendering second)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from forensics.runs import SHOWN_COLUMNS
from forensics.store import Store

CONFIG_KEYS = SHOWN_COLUMNS  # declared once: forensics.runs.CONFIG_COLUMNS
SUMMARY_KEYS = [
    "experiment",
    "phase_reached",
    "phase",
    "hung",
    "signature",
    "load_s",
    "capture_s",
    "ready_s",
    "decode_lines",
    "gen_throughput_median",
    "accept_len_mean",
    "accept_rate_mean",
    "accept_rate_norm",
    "bench_tok_s",
    "bench_accept_len",
]


def _rows(store: Store, table: str, row: dict) -> pl.DataFrame:
    """The run's rows of ``table`` as ``show`` uses them, read part by part (SHOW_READS):
    never the table whole (a run of 1.7 M warning lines peaked at 526 MB)."""
    where = pl.col("run_index") == row["run_index"]
    return store.source_rows(table, row["source_id"], reduce=SHOW_READS[table], where=where)


def _decode_fields(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.select("line", "gen_throughput", "accept_len", "accept_rate", "running_req")


def _first_errors(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.sort("line").head(20)


def _last_lines(lf: pl.LazyFrame) -> pl.LazyFrame:
    return lf.sort("line").tail(8)


# what `show` reads of each table: reduces that keep their answer when applied part by part
# and again over the union (Store.source_rows)
SHOW_READS = {"decode": _decode_fields, "errors": _first_errors, "lines": _last_lines}


def show_data(store: Store, row: dict[str, Any]) -> dict[str, Any]:
    from forensics.runs import stage_timeline
    from forensics.runs_bench import run_benchmarks

    dec = _rows(store, "decode", row)
    metrics: dict[str, Any] = {"decode_lines": len(dec)}
    if not dec.is_empty():
        for col in ("gen_throughput", "accept_len", "accept_rate", "running_req"):
            s = dec[col].cast(pl.Float64).drop_nulls()
            if len(s):
                metrics[col] = {
                    "min": s.min(),
                    "median": s.median(),
                    "mean": s.mean(),
                    "max": s.max(),
                }
    errs = _rows(store, "errors", row)
    errors = [
        {
            "line": e["line"],
            "last_line": e["last_line"],
            "rank": e["rank"],
            "kind": e["kind"],
            "exc_type": e["exc_type"],
            "message": e["message"],
        }
        for e in errs.head(20).iter_rows(named=True)
    ]
    lines = _rows(store, "lines", row)
    tail = [{"line": r["line"], "text": r["text"]} for r in lines.iter_rows(named=True)]
    return {
        "run_id": row["run_id"],
        "name": row["name"],
        "path": row["path"],
        "host": row["host"],
        "lines": [row.get("first_line"), row.get("last_line")],
        "started_at": row.get("started_at"),
        "ended_at": row.get("ended_at"),
        "config": {k: row.get(k) for k in CONFIG_KEYS},
        "summary": {k: row.get(k) for k in SUMMARY_KEYS},
        "timeline": stage_timeline(store, row["source_id"], row["run_index"]),
        "metrics": metrics,
        "benchmarks": run_benchmarks(store, row["run_id"]),
        "errors": errors,
        "last_lines": tail,
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.2f}"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def render_show(d: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    from forensics.terminal import console

    c = console()
    c.rule(Text(f"{d['name']}  ({d['run_id']})", style="bold"))
    c.print(
        f"{d['host']}:{d['path']}  lines {d['lines'][0]}–{d['lines'][1]}  started {_fmt(d['started_at'])}"
    )
    cfg = Table(title="configuration", show_header=False, box=None)
    for k, v in d["config"].items():
        cfg.add_row(k, _fmt(v))
    c.print(cfg)
    summ = Table(title="outcome", show_header=False, box=None)
    for k, v in d["summary"].items():
        summ.add_row(k, _fmt(v))
    c.print(summ)
    if d["timeline"]:
        tl = Table(title="startup timeline")
        for col in ("segment", "start (s)", "duration (s)", "ended"):
            tl.add_column(col)
        for s in d["timeline"]:
            ended = _fmt(s["ended"])
            if s.get("end") == "next stage":
                ended += " (next stage began)"  # SGLang prints no end line for it
            tl.add_row(s["segment"], _fmt(s["start_s"]), _fmt(s["duration_s"]), ended)
        c.print(tl)
    if d["metrics"].get("decode_lines"):
        mt = Table(title=f"decode metrics ({d['metrics']['decode_lines']} lines)")
        for col in ("metric", "min", "median", "mean", "max"):
            mt.add_column(col)
        for k, v in d["metrics"].items():
            if isinstance(v, dict):
                mt.add_row(k, *(_fmt(v[x]) for x in ("min", "median", "mean", "max")))
        c.print(mt)
    if d.get("benchmarks"):
        bt = Table(title=f"benchmarks ({len(d['benchmarks'])})")
        for col in ("started", "shape", "tok/s", "accept len"):
            bt.add_column(col)
        for b in d["benchmarks"]:
            bt.add_row(
                _fmt(b["started_at"]), b["shape"] or "—", _fmt(b["tok_s"]), _fmt(b["accept_len"])
            )
        c.print(bt)
    if d["errors"]:
        c.print("errors", style="bold")
        for e in d["errors"]:
            what = f"{e['exc_type']}: {e['message']}" if e["exc_type"] else e["message"]
            c.print(f"  line {e['line']}  {e['rank'] or 'main'}  {what}", highlight=False)
    if d["last_lines"]:
        c.print("last lines", style="bold")
        for ln in d["last_lines"]:
            c.print(f"  {ln['line']:>6}  {ln['text'][:160]}", highlight=False)


def dumps(d: dict[str, Any]) -> str:
    return json.dumps(d, default=str)
