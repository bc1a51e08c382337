"""Issue 14, bounded memory: a log of many launches (server restarts) in one file.

The parser held every run of the file (and its resumable state saved them all, and each chunk
re-emitted the whole runs frame): a 20 MB log of 56,000 launches peaked at 842 MB and its
verdict step, one analysis per run over the whole log's rows, took minutes per MB (a 3 MB log:
292 s CPU, now 16 s). Now a run's row leaves the parser when the next launch begins, is stored
with the log's rows, and the verdicts are computed a batch of runs at a time."""

from __future__ import annotations

import json

import polars as pl

import forensics.verdicts as verdicts
import forensics_parsers.sglang as S
from forensics.ingest import ingest
from forensics.store import Store
from tests.conftest import FIXTURES

LAUNCH = (
    "[2025-10-24 16:20:00] server_args=ServerArgs(model_path='/models/m', tp_size=8, "
    "port=30000, mem_fraction_static=0.85)\n"
    "[2025-10-24 16:20:02 TP0] Init torch distributed begin.\n"
    "[2025-10-24 16:20:04 TP0] Load weight begin. avail mem=138.44 GB\n"
)


def _launches(n: int) -> str:
    head = (FIXTURES / "sglang_eagle3_cg_5dt.log").read_text().splitlines(keepends=True)[:25]
    return "".join(head) + LAUNCH * n


def test_the_parser_holds_the_open_run_only(tmp_path):
    text = _launches(3_000).encode()
    p = S.LogParser("many.log")
    frames, states = [], []
    for i in range(0, len(text), 64 << 10):
        frames.append(p.feed(text[i : i + (64 << 10)]))
        states.append(len(json.dumps(p.state(), default=str)))
    frames.append(p.finish())
    assert len(p.runs) == 1 and max(states) < 20_000, (len(p.runs), max(states))
    runs = S.Frames.concat(frames).runs
    whole = S.parse_bytes(text, "many.log").runs
    assert runs.equals(whole) and whole["run_index"].to_list() == list(range(3_001))


def test_a_grown_log_of_many_launches_keeps_every_run_once(tmp_path, monkeypatch):
    """Runs that ended before an ingest stay stored; the open one is replaced when the log
    grows: the same runs (and verdicts, computed in batches) as one ingest of the whole."""
    monkeypatch.setattr(verdicts, "VERDICT_BATCH", 97)  # several batches, ranges mid-log
    log, whole = tmp_path / "many.log", tmp_path / "whole.log"
    full = _launches(400)
    cut = full.index(LAUNCH) + len(LAUNCH) * 150 + 40  # mid-line, mid-launch
    log.write_text(full[:cut])
    whole.write_text(full)
    grown = Store.open(tmp_path / "a")
    assert ingest(grown, [str(log)]).files[0].runs == 151
    with log.open("a") as f:
        f.write(full[cut:])
    assert ingest(grown, [str(log)]).files[0].runs == 401
    one = Store.open(tmp_path / "b")
    ingest(one, [str(whole)])
    cols = ["run_index", "first_line", "last_line", "started_at", "server_args"]
    a = grown.table("runs").sort("run_index").select(cols)
    b = one.table("runs").sort("run_index").select(cols)
    assert a.equals(b) and a["run_index"].to_list() == list(range(401))
    va = grown.table("verdicts").select("run_id", "phase", "signature").sort("run_id")
    vb = one.table("verdicts").select("run_id", "phase", "signature").sort("run_id")
    assert len(va) == 401 and va.drop("run_id").equals(vb.drop("run_id"))
    assert va["run_id"].n_unique() == 401 and pl.Series(va["run_id"]).str.len_chars().min() > 0
