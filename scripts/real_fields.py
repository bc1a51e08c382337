"""Parse every log of a real-log corpus and compare what the parser reads with ``fields.csv``.

    python scripts/real_fields.py [DIR]        # default: <repo>/../shared/real-logs-dev

Prints, per column of fields.csv, how many of the excerpts agree, and lists each mismatch.
The same comparison is the test tests/test_real_corpus_fields.py.
"""

from __future__ import annotations

import csv
import math
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
COLUMNS = (
    "n_decode_lines",
    "last_accept_len",
    "last_gen_throughput",
    "n_prefill_lines",
    "capture_seconds",
    "load_weight_mem_gb",
    "tp_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)


def corpus_dir() -> Path | None:
    """$FORENSICS_REAL_LOGS, else $FORENSICS_SHARED/real-logs-dev, else
    <repo>/../shared/real-logs-dev (CI lays shared/ beside the clone)."""
    cands = []
    if os.environ.get("FORENSICS_REAL_LOGS"):
        cands.append(Path(os.environ["FORENSICS_REAL_LOGS"]))
    if os.environ.get("FORENSICS_SHARED"):
        cands.append(Path(os.environ["FORENSICS_SHARED"]) / "real-logs-dev")
    cands.append(ROOT.parent / "shared" / "real-logs-dev")
    for cand in cands:
        if (cand / "fields.csv").is_file():
            return cand
    return None


def require_corpus() -> Path:
    """For tests: the corpus, or a test failure that says how to provide it (a skip only
    with FORENSICS_NO_REAL_LOGS=1)."""
    import pytest

    root = corpus_dir()
    if root is not None:
        return root
    if os.environ.get("FORENSICS_NO_REAL_LOGS", "") not in ("", "0"):
        pytest.skip("FORENSICS_NO_REAL_LOGS=1: the real-log corpus is not checked")
    pytest.fail(
        f"real-log corpus not found: {ROOT.parent / 'shared' / 'real-logs-dev'} is missing "
        "(put shared/ beside the checkout, or set FORENSICS_REAL_LOGS=DIR or FORENSICS_SHARED=DIR; "
        "FORENSICS_NO_REAL_LOGS=1 skips these tests)"
    )


def read_fields(path: Path) -> dict[str, Any]:
    import polars as pl

    from forensics_parsers.sglang import parse_bytes

    f = parse_bytes(path.read_bytes(), str(path))
    out: dict[str, Any] = {}
    dec = f.decode.filter(f.decode["gen_throughput"].is_not_null()).sort("line")
    out["n_decode_lines"] = len(dec)
    if len(dec):
        last = dec.row(-1, named=True)
        out["last_accept_len"] = last["accept_len"]
        out["last_gen_throughput"] = last["gen_throughput"]
    out["n_prefill_lines"] = len(f.prefill)
    ev = f.events.sort("line")
    # the first `Capture cuda graph end. Time elapsed: X s` (other capture layouts are not this column)
    plain = f.lines.filter(
        pl.col("text").str.contains(r"^Capture cuda graph end\. Time elapsed: ")
    )["line"]
    cap = ev.filter(pl.col("stage").eq("capture_end") & pl.col("line").is_in(plain.implode()))
    if len(cap):
        out["capture_seconds"] = cap["elapsed_s"][0]
    load = ev.filter(pl.col("stage") == "load_end")
    if len(load):
        out["load_weight_mem_gb"] = load["mem_usage_gb"][0]
    runs = f.runs.filter(pl.col("config_source").str.contains("server_args").fill_null(False))
    if len(runs):
        r = runs.sort("run_index").row(0, named=True)
        out["tp_size"] = r["tp_size"]
        out["speculative_algorithm"] = r["spec_algorithm"]
        out["speculative_num_steps"] = r["num_steps"]
        out["speculative_eagle_topk"] = r["topk"]
        out["speculative_num_draft_tokens"] = r["num_draft_tokens"]
    return out


def same(expected: str, got: Any) -> bool:
    if expected == "":
        return got is None or (isinstance(got, float) and math.isnan(got))
    if got is None:
        return False
    try:
        return math.isclose(float(expected), float(got), rel_tol=1e-4, abs_tol=1e-6)
    except ValueError:
        return str(got) == expected


def compare(root: Path) -> tuple[dict[str, int], list[tuple[str, str, str, Any]], int]:
    """-> (agreeing excerpts per column, mismatches (id, column, expected, got), excerpts)."""
    rows = list(csv.DictReader((root / "fields.csv").open(newline="")))
    agree = dict.fromkeys(COLUMNS, 0)
    wrong = []
    for row in rows:
        got = read_fields(root / f"{row['id']}.log")
        for col in COLUMNS:
            if same(row[col], got.get(col)):
                agree[col] += 1
            else:
                wrong.append((row["id"], col, row[col], got.get(col)))
    return agree, wrong, len(rows)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else corpus_dir()
    if root is None or not (root / "fields.csv").is_file():
        print(
            "Error: no real-log corpus (set FORENSICS_REAL_LOGS or FORENSICS_SHARED, or pass DIR)",
            file=sys.stderr,
        )
        return 2
    agree, wrong, n = compare(root)
    print(f"| column | agree (of {n}) |\n| --- | --- |")
    for col in COLUMNS:
        print(f"| {col} | {agree[col]} |")
    for w in wrong:
        print("mismatch", *w)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
