"""Issue 14, "Bounded everything" (fifth round): memory and time bounded on pathological logs.

Small-scale versions of `scripts/gen_pathological.py`'s inputs; each asserts the bounded
structure (rows capped, counts right) that keeps the full-size input under ~300 MB. The
full-size figures are in docs/bad-inputs.md and docs/performance.md."""

from __future__ import annotations

import json

import polars as pl

import forensics.verdicts as verdicts
import forensics_parsers.sglang as S
from forensics.ingest import ingest
from forensics.store import Store, transaction
from forensics.store.manifest import Manifest
from forensics_parsers.sglang import metrics
from scripts.gen_pathological import generate
from tests.conftest import FIXTURES


def test_wide_decode_lines_take_the_general_path_with_the_same_rows(tmp_path, monkeypatch):
    """A Decode batch line of thousands of fields: the fast path built columns and
    expressions per field (~430 MB peak on 60 KB lines); past FAST_KEYS_MAX keys the general
    path parses it, to the same rows the fast path gives."""
    log = tmp_path / "wide.log"
    generate("wide-decode", log, mb=0.5, count=300)
    data = log.read_bytes()
    calls = []
    real = metrics._fields_general
    monkeypatch.setattr(
        metrics, "_fields_general", lambda sub, *a: calls.append(len(sub)) or real(sub, *a)
    )
    general = S.parse_bytes(data, "wide.log").decode
    assert sum(calls) == len(general)  # every wide line took the general path
    monkeypatch.setattr(metrics, "FAST_KEYS_MAX", 10_000)
    fast = S.parse_bytes(data, "wide.log").decode
    assert len(general) == data.count(b"\n") and general.equals(fast)
    extra = json.loads(general["extra"][0])
    assert len(extra) == 300 and extra["custom metric 0299"] == 149.5
    assert general["token"].to_list() == list(range(len(general)))


def _restarts(tmp_path, launches: int):
    log = tmp_path / "restarts.log"
    generate("restarts", log, mb=50, count=launches)
    return log


def test_verdicts_of_many_launches_never_read_the_runs_or_verdicts_table_whole(
    tmp_path, monkeypatch
):
    """A server restarted in a loop (56,000 launches): the verdict step read the runs table
    whole (every launch's server_args) and rewrote the verdicts table whole, and read the
    manifest three times per run: ~387 MB and minutes. Now run keys are two columns read
    part by part, the verdicts are rewritten a part at a time, the manifest read once."""
    monkeypatch.setattr(verdicts, "VERDICT_BATCH", 40)
    monkeypatch.setattr(verdicts, "VERDICT_FIRST", 40)  # manifest reads per batch, not per run
    store = Store.open(tmp_path / "st")
    assert ingest(store, [str(_restarts(tmp_path, 200))]).files[0].runs == 201
    before = store.table("verdicts").select("run_id", "phase", "signature").sort("run_id")
    whole = Store.table

    def guarded(self, name):
        assert name not in ("runs", "verdicts"), f"{name} read whole"
        return whole(self, name)

    reads = []
    load = Manifest.load
    monkeypatch.setattr(Store, "table", guarded)
    monkeypatch.setattr(Manifest, "load", staticmethod(lambda p: reads.append(p) or load(p)))
    assert verdicts.refresh(store) == 201
    monkeypatch.undo()
    assert len(reads) < 50  # was three per run
    after = store.table("verdicts").select("run_id", "phase", "signature").sort("run_id")
    assert after.equals(before) and after["run_id"].n_unique() == 201


def test_drop_rows_rewrites_the_parts_that_lose_rows_and_merges_small_ones(tmp_path, monkeypatch):
    store = Store.open(tmp_path / "st")
    rows = [{"run_id": f"s:{i}", "phase": "ok"} for i in range(30)]
    for i in range(3):  # three parts of ten verdicts
        with store.transaction() as tx:
            tx.append("verdicts", pl.DataFrame(rows[i * 10 : i * 10 + 10]))
    parts = lambda: store.manifest().tables["verdicts"]  # noqa: E731
    big = parts()[0]
    monkeypatch.setattr(transaction, "DROP_MERGE_BYTES", 1)  # every part is "big"
    with store.transaction() as tx:
        tx.drop_rows("verdicts", pl.col("run_id") != "s:25")
    assert big in parts() and len(parts()) == 3  # only the third part was rewritten
    monkeypatch.undo()
    with store.transaction() as tx:  # small parts are merged into one
        tx.drop_rows("verdicts", pl.col("run_id") != "s:3")
    assert len(parts()) == 1 and big not in parts()
    left = store.table("verdicts")["run_id"].to_list()
    assert sorted(left) == sorted(r["run_id"] for r in rows if r["run_id"] not in ("s:3", "s:25"))


def test_runs_and_show_read_the_lines_and_errors_of_a_run_not_the_tables(tmp_path, monkeypatch):
    """A log of millions of tiny warnings (1.7 M rows in `lines` at 60 MB): `runs` read the
    lines table whole for the GPU name and the errors table whole for the first error, `show`
    the lines, errors and decode tables whole for the last 8 lines (526 MB). Now each reads
    what it shows through a reduce, part by part (Store.reduced / source_rows)."""
    from forensics.report_text import show_data
    from forensics.runs import find_run, runs_table

    log = tmp_path / "warnings.log"
    generate("tiny-warnings", log, mb=0.3)
    moe = (
        "[2025-10-24 16:20:05 TP0] Using MoE kernel config from /sgl/configs/E=384,N=256,"
        "device_name=NVIDIA_H200,dtype=fp8_w8a8.json.\n"
    )
    log.write_text(moe + log.read_text())
    store = Store.open(tmp_path / "st")
    logs = [log, FIXTURES / "sglang_fail_capture.log", FIXTURES / "edge_interleaved_ranks.log"]
    ingest(store, [str(p) for p in logs])
    full = {t: store.table(t) for t in ("lines", "errors")}
    whole = Store.table

    def guarded(self, name):
        assert name not in ("lines", "errors"), f"{name} read whole"
        return whole(self, name)

    monkeypatch.setattr(Store, "table", guarded)
    runs = runs_table(store).sort("name")
    shown = show_data(store, find_run(store, "warnings"))
    failed = show_data(store, find_run(store, "sglang_fail_capture"))
    monkeypatch.undo()
    n = log.read_bytes().count(b"\n")
    assert [r["line"] for r in shown["last_lines"]] == list(range(n - 7, n + 1))
    assert (
        runs["gpu_model"].drop_nulls().to_list() == ["H200"]
        and runs["error"].drop_nulls().len() >= 1
    )
    errs = full["errors"].filter(
        pl.col("source_id") == find_run(store, "fail_capture")["source_id"]
    )
    assert [e["line"] for e in failed["errors"]] == sorted(errs["line"].to_list())[:20]
    assert len(full["lines"]) > n - 10  # the warnings are stored, one row each


def test_runs_of_many_launches_table_capped_json_in_slices(tmp_path, monkeypatch):
    """`runs` of a log of 56,000 launches: rich laid out every row (1 GB, 50 s CPU) and
    `--json` held every row as a dict (443 MB). The table shows TABLE_ROWS_MAX rows and says
    how many it left out; --json renders slices, to the same bytes."""
    from click.testing import CliRunner

    from forensics import cli_common
    from forensics.cli import cli

    monkeypatch.setattr(cli_common, "TABLE_ROWS_MAX", 50)
    store = ["--store", str(tmp_path / "st")]
    runner = CliRunner(env={"COLUMNS": "200"})
    assert runner.invoke(cli, [*store, "ingest", str(_restarts(tmp_path, 120))]).exit_code == 0
    table = runner.invoke(cli, [*store, "runs"])
    assert table.exit_code == 0 and "71 more row(s) not shown" in table.output
    assert table.output.count("restarts#") == 50
    monkeypatch.setattr(cli_common, "JSON_SLICE_ROWS", 7)
    sliced = runner.invoke(cli, [*store, "runs", "--json"]).output
    monkeypatch.setattr(cli_common, "JSON_SLICE_ROWS", 10_000)
    whole = runner.invoke(cli, [*store, "runs", "--json"]).output
    assert sliced == whole and len(json.loads(sliced)) == 121


def test_the_python_paths_rows_become_frames_every_spill_rows(tmp_path, monkeypatch):
    """A 4 MB chunk of a restarted server is ~100,000 event and line rows through the Python
    path, held as dicts until the chunk ended (~50 MB of the parse's peak). They become a
    frame every SPILL_ROWS rows: the same frames."""
    from forensics_parsers.sglang import chunk

    data = _restarts(tmp_path, 700).read_bytes()
    whole = S.parse_bytes(data, "restarts.log")
    spills = []
    real = pl.DataFrame
    monkeypatch.setattr(chunk, "SPILL_ROWS", 97)
    monkeypatch.setattr(chunk.pl, "DataFrame", lambda *a, **k: spills.append(1) or real(*a, **k))
    spilled = S.parse_bytes(data, "restarts.log")
    monkeypatch.undo()
    assert len(spills) >= 2 * 2_103 // 97  # events and lines, each spilled many times
    for name in ("runs", "events", "lines", "errors"):
        assert getattr(spilled, name).equals(getattr(whole, name)), name
    assert len(whole.events) == 3 * 701 and len(whole.runs) == 701
