"""Issue 15, bounded memory: the verdict step reads its runs' rows a batch at a time, and a
batch is sized by what it reads, not by a fixed count of runs.

A run's analysis keeps up to KEEP_ROWS lines of up to KEEP_TEXT each; the verdict step read
2,000 runs at a time, so on a log of long lines (the real corpus concatenated 14 times: 364
runs, 736,000 lines of up to 230 KB) one batch was the whole log's, and the ingest's peak RSS
grew with the file (434 MB at 103 MB). Asserted by the size of what each batch reads, with
the budget made small: no batch, the first one too (VERDICT_FIRST runs, whatever their
lines), reads much more than it, and the verdicts are those of the default budget's batches."""

from __future__ import annotations

import forensics.verdicts as verdicts
from forensics.ingest import ingest
from forensics.store import Store
from tests.test_many_launches import LAUNCH, _launches

LONG = "[2025-10-24 16:20:05 TP0] " + "payload " * 500 + "\n"  # a 4 KB line no rule reads


def _log(tmp_path, runs: int):
    text = _launches(1).replace(LAUNCH, "") + (LAUNCH + LONG * 20) * runs
    log = tmp_path / "long.log"
    log.write_text(text)
    return log


def test_each_verdict_batch_reads_about_its_budget(tmp_path, monkeypatch):
    log = _log(tmp_path, 120)
    one = Store.open(tmp_path / "one")
    ingest(one, [str(log)])  # the default budget: few batches
    budget = 400_000  # about 5 runs of 80 KB
    monkeypatch.setattr(verdicts, "VERDICT_READ_BYTES", budget)
    reads: list[int] = []
    batch_rows = verdicts._batch_rows

    def recorded(*args):
        read = batch_rows(*args)
        reads.append(sum(df.estimated_size() for t in read.values() for df in t.values()))
        return read

    monkeypatch.setattr(verdicts, "_batch_rows", recorded)
    many = Store.open(tmp_path / "many")
    ingest(many, [str(log)])
    assert sum(reads) > 8 * budget and len(reads) > 8, reads
    assert max(reads) <= 1.5 * budget, reads  # the first batch too (was 32 runs: 2.6 MB)
    cols = ["run_id", "phase", "hung", "signature", "confidence", "verdict"]
    a = one.table("verdicts").select(cols).sort("run_id")
    b = many.table("verdicts").select(cols).sort("run_id")
    assert len(a) == 121 and a.equals(b)
