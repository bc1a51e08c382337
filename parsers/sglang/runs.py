"""The run records a parser keeps (one per launch in the file, part of its resumable state) and
the ``runs`` frame made of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from forensics_parsers.names import config_from_name
from forensics_parsers.sglang.frames import RUN_SCHEMA, empty
from forensics_parsers.sglang.text import to_dt

_TS_FMT = "%Y-%m-%d %H:%M:%S"


def new_run(first_line: int) -> dict[str, Any]:
    return {
        "first_line": first_line,
        "last_line": first_line,
        "started_at": None,
        "ended_at": None,
        "has_args": False,
        "has_content": False,
        "stages": [],
        "loads": 0,
        "kv_pools": 0,
        "plain_captures": 0,
        "style": [],
        "config": {},
        "config_source": None,
        "server_args": None,
    }


def per_run(df: pl.DataFrame, agg: Callable[[pl.DataFrame], tuple]) -> list[tuple]:
    """(``run_index``, *``agg(rows)``) per run of ``df``'s rows. ``agg`` reads its rows by
    Series calls (~3 us each, where a ``select`` of the same aggregates costs ~0.1 ms): a
    chunk's rows are usually of one run; else one ``partition_by``."""
    of = df.get_column("run_index")
    if of.min() == of.max():
        return [(of[0], *agg(df))]
    parts = df.partition_by("run_index", as_dict=True)
    return [(ri, *agg(part)) for (ri,), part in parts.items()]


def _extent(df: pl.DataFrame) -> tuple:
    """Metrics lines -> (their last line, their first and last timestamp)."""
    ts = df.get_column("ts")
    return df.get_column("line").max(), ts.min(), ts.max()


def touch_lines(runs: dict[int, dict[str, Any]], df: pl.DataFrame, kind: str) -> None:
    """Metrics lines (``run_index``, ``line``, ``ts``) extend their runs."""
    for ri, last, t0, t1 in per_run(df, _extent):
        run = runs.get(ri)
        if run is None:
            continue
        run["last_line"] = max(run["last_line"], last)
        run["has_content"] = True
        if kind == "decode" and "serving" not in run["stages"]:
            run["stages"].append("serving")
        if t0 is not None:
            s0 = t0.strftime(_TS_FMT + ".%f")
            if run["started_at"] is None or s0 < run["started_at"]:
                run["started_at"] = s0
        if t1 is not None:
            s = t1.strftime(_TS_FMT + ".%f")
            if run["ended_at"] is None or s > run["ended_at"]:
                run["ended_at"] = s


def runs_frame(
    runs: dict[int, dict[str, Any]], path: str, name_pattern: str | None
) -> pl.DataFrame:
    """The ``runs`` frame: every run with content, its configuration filled from the file
    name where the log does not say."""
    named = config_from_name(path, name_pattern) if path else {}
    rows = []
    for ri, run in sorted(runs.items()):
        if not run["has_content"]:
            continue
        cfg = dict(run["config"])
        source = run["config_source"]
        filled = False
        for k, v in named.items():
            if k in RUN_SCHEMA and v is not None and cfg.get(k) is None:
                cfg[k] = v
                filled = True
        if named.get("no_spec") and source is None:
            cfg["spec_algorithm"] = None
        if filled:
            source = f"{source}+filename" if source else "filename"
        rows.append(
            {
                "run_index": ri,
                "first_line": run["first_line"],
                "last_line": run["last_line"],
                "started_at": to_dt(run["started_at"]),
                "ended_at": to_dt(run["ended_at"]),
                "style": ",".join(run["style"]) or None,
                "config_source": source,
                "server_args": run["server_args"],
                **{k: cfg.get(k) for k in RUN_SCHEMA if k in cfg},
            }
        )
    if not rows:
        return empty("runs")
    return pl.DataFrame(rows, schema=RUN_SCHEMA, strict=False)
