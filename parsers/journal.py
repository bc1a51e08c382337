"""Launch-journal JSON lines -> a frame (pure).

The journaled launcher (forensics/launcher/wrapper.py) appends one JSON object per line to
``<log>.journal.jsonl``. Events (``event`` key):

=========  ==================================================================================
begin      the replay started: ``chain`` (the user's chain), ``shell``, ``pid`` of the wrapper
start      a step is about to run: ``step`` (1-based), ``kind``, ``deadline_s``, ``cmd`` (what
           runs), ``orig`` (the user's text of that step)
pid        the step's process started: ``pid`` (its process group when run under timeout)
end        a step finished: ``rc`` (128+N = signal N; 124 = its deadline passed), ``tail``
           (last output), ``waiting_on`` (``ps`` lines of the step's group near its deadline)
server     the server step's monitor started: ``pid`` = ``pgid`` (own session)
exit       the wrapper shell ended: ``rc`` (137 = SIGKILL, 143 = SIGTERM)
=========  ==================================================================================

A line that is not a JSON object (for instance cut short when the writer was killed) becomes an
``unparsed`` row with its text in ``tail``: every line is accounted for.
"""

from __future__ import annotations

import json
from typing import Any

import polars as pl

SCHEMA: dict[str, Any] = {
    "launch_id": pl.String,
    "seq": pl.Int64,  # 1-based line number in the journal file
    "event": pl.String,
    "step": pl.Int64,
    "kind": pl.String,
    "t": pl.Float64,  # unix time (seconds)
    "pid": pl.Int64,
    "pgid": pl.Int64,
    "rc": pl.Int64,
    "signal": pl.Int64,
    "timed_out": pl.Boolean,
    "deadline_s": pl.Float64,
    "elapsed_s": pl.Float64,
    "cmd": pl.String,
    "orig": pl.String,
    "tail": pl.String,
    "waiting_on": pl.String,
    "extra": pl.String,  # JSON of any other keys
}
KNOWN = set(SCHEMA) - {"seq", "signal", "timed_out", "elapsed_s", "extra"}
TIMEOUT_RC = 124  # GNU timeout: the deadline passed and TERM ended the command


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and v != "" else None
    except (TypeError, ValueError):
        return None


def _float(v: Any) -> float | None:
    try:
        return float(v) if v is not None and v != "" else None
    except (TypeError, ValueError):
        return None


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def parse_journal(data: str | bytes, *, launch_id: str | None = None) -> pl.DataFrame:
    """Parse journal text. With ``launch_id``, keep only that launch's lines (and unparsed)."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes | bytearray) else str(data)
    rows: list[dict[str, Any]] = []
    starts: dict[tuple[str | None, int], float] = {}
    for seq, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            obj = None
        if not isinstance(obj, dict):
            rows.append({"seq": seq, "event": "unparsed", "tail": line[-4000:]})
            continue
        lid = _str(obj.get("launch_id"))
        if launch_id is not None and lid != launch_id:
            continue
        row: dict[str, Any] = {
            "launch_id": lid,
            "seq": seq,
            "event": _str(obj.get("event")) or "unknown",
            "step": _int(obj.get("step")),
            "kind": _str(obj.get("kind")),
            "t": _float(obj.get("t")),
            "pid": _int(obj.get("pid")),
            "pgid": _int(obj.get("pgid")),
            "rc": _int(obj.get("rc")),
            "deadline_s": _float(obj.get("deadline_s")),
            "cmd": _str(obj.get("cmd")),
            "orig": _str(obj.get("orig")),
            "tail": _str(obj.get("tail")),
            "waiting_on": _str(obj.get("waiting_on")) or None,
        }
        extra = {k: v for k, v in obj.items() if k not in KNOWN}
        row["extra"] = json.dumps(extra, ensure_ascii=False, default=str) if extra else None
        rc = row["rc"]
        row["signal"] = rc - 128 if rc is not None and 128 < rc <= 192 else None
        key = (lid, row["step"] if row["step"] is not None else -1)
        if row["event"] == "start" and row["t"] is not None:
            starts[key] = row["t"]
            row["_deadline"] = row["deadline_s"]
        if row["event"] == "end":
            t0 = starts.get(key)
            if t0 is not None and row["t"] is not None:
                row["elapsed_s"] = round(row["t"] - t0, 3)
        rows.append(row)
    # a step timed out when timeout said so (124) or it was killed at/after its deadline
    deadlines = {
        (r.get("launch_id"), r.get("step")): r.get("deadline_s")
        for r in rows
        if r.get("event") == "start"
    }
    for r in rows:
        r.pop("_deadline", None)
        if r.get("event") == "end":
            d = deadlines.get((r.get("launch_id"), r.get("step")))
            el = r.get("elapsed_s")
            r["timed_out"] = r.get("rc") == TIMEOUT_RC or (
                r.get("rc") in (128 + 9, 128 + 15) and d is not None and el is not None and el >= d
            )
    return pl.DataFrame(rows, schema=SCHEMA)
