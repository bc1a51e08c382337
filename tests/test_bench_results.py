"""`forensics ingest RESULTS.json[l]`: results of bench_serving, vllm bench serve and AIPerf join
the run they measured (real files, the real CLI and store; attach rules as pure logic)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from forensics.bench_results import attach
from forensics.cli import main
from forensics.store import Store

FIX = Path(__file__).resolve().parent.parent / "fixtures"
BR = FIX / "benchresults"
LOG = BR / "sglang_eagle3_cg_5dt.log"  # the simulated server all the samples measured
RESULTS = [
    BR / "sglang_bench_serving.jsonl",
    BR / "sglang_bench_serving_details.jsonl",
    BR / "vllm_bench_serve.json",
    BR / "aiperf_c1" / "profile_export_aiperf.json",
    BR / "aiperf_c4" / "profile_export_aiperf.json",
]


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def bench(store: str | Path = "st") -> list[dict]:
    df = Store.open(str(store)).table("bench")
    return df.sort("bench_id").to_dicts() if not df.is_empty() else []


def one_line_error(err: str, *needles: str) -> None:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and "Traceback" not in err, err
    assert lines[-1].startswith("Error: ") and "internal error" not in lines[-1], err
    for n in needles:
        assert n in lines[-1], (n, lines[-1])


def test_log_and_results_in_one_call_attach_every_result(capsys):
    # the results come first on the command line: the log is ingested before them anyway
    code, out, err = run(capsys, "ingest", *map(str, RESULTS), str(LOG))
    assert code == 0 and err == ""
    assert "Benchmark results: 6, 6 attached to a run" in out
    rows = bench()
    run_id = {r["run_id"] for r in rows}
    assert len(run_id) == 1 and None not in run_id
    got = sorted((r["tool"], r["attached_by"], r["mode"], r["concurrency"]) for r in rows)
    assert got == [
        ("aiperf", "window", "concurrency", 4),
        ("aiperf", "window", "single", 1),
        ("sglang.bench_serving", "server", "concurrency", 2),
        ("sglang.bench_serving", "server", "concurrency", 4),
        ("sglang.bench_serving", "server", "single", 1),
        ("vllm.bench_serve", "window", "concurrency", 4),
    ]
    # a timed result gets the run's own accept length inside its window, from the log
    c1 = next(r for r in rows if r["tool"] == "aiperf" and r["concurrency"] == 1)
    assert (round(c1["accept_len_log"], 3), c1["accept_len_log_lines"]) == (2.494, 5)
    reqs = Store.open("st").table("bench_requests")
    assert reqs.height == 4  # the --output-details file's requests
    # the runs table reads the latest benchmark of the run
    code, out, _ = run(capsys, "runs", "--json")
    (r,) = json.loads(out)
    assert r["bench_tok_s"] == 320.0  # vllm's, the latest in time


def test_ingesting_twice_stores_once(capsys):
    run(capsys, "ingest", str(LOG), *map(str, RESULTS))
    before = bench()
    code, out, _ = run(capsys, "ingest", "--json", str(LOG), *map(str, RESULTS))
    data = json.loads(out)
    assert code == 0 and data["files_by_status"] == {"unchanged": 6}
    assert (data["results"], data["results_attached"]) == (6, 6)
    assert bench() == before


def test_results_before_their_log_attach_on_the_next_ingest(capsys, tmp_path):
    aip = tmp_path / "profile_export_aiperf.json"
    shutil.copy(BR / "aiperf_c1" / "profile_export_aiperf.json", aip)
    code, out, err = run(capsys, "ingest", str(aip))
    assert code == 0
    assert "Benchmark results: 1, 0 attached to a run" in out
    assert f"Warning: {aip}: result 0 (aiperf): not attached: no run in the store fits" in err
    assert [r["run_id"] for r in bench()] == [None]
    run(capsys, "ingest", str(LOG))
    code, out, _ = run(capsys, "ingest", str(aip))  # unchanged, but not attached yet: redone
    assert code == 0 and "1 rewritten" in out and "1 attached" in out
    (row,) = bench()
    assert row["run_id"] is not None and row["attached_by"] == "window"


def test_run_option_attaches_to_the_named_run(capsys):
    run(capsys, "ingest", str(LOG), str(FIX / "sglang_baseline.log"))
    code, out, _ = run(capsys, "ingest", "--run", "sglang_baseline", str(RESULTS[2]))
    assert code == 0
    (row,) = bench()
    runs = {r["name"]: r["run_id"] for r in json.loads(run(capsys, "runs", "--json")[1])}
    assert (row["run_id"], row["attached_by"]) == (runs["sglang_baseline"], "run")
    # the same file without --run is redone (another choice of run) and attached by time
    code, out, _ = run(capsys, "ingest", str(RESULTS[2]))
    (row,) = bench()
    assert (row["run_id"], row["attached_by"]) == (runs["sglang_eagle3_cg_5dt"], "window")


def test_run_option_errors(capsys):
    run(capsys, "ingest", str(LOG))
    code, _, err = run(capsys, "ingest", "--run", "sglang_eagle3", str(LOG))
    assert code == 2
    one_line_error(err, "--run sglang_eagle3: no benchmark results file among the inputs", "try:")
    code, _, err = run(capsys, "ingest", "--run", "nosuchrun", str(RESULTS[2]))
    assert code == 3
    one_line_error(err, "nosuchrun: no run matches", "try:")


def test_bad_json_alone_is_a_one_line_error(capsys, tmp_path):
    bad = tmp_path / "result.json"
    bad.write_text('{"model": "llama", "tok_s": 91.0}')
    code, _, err = run(capsys, "ingest", str(bad))
    assert code == 2
    one_line_error(err, f"{bad}: keys (model, tok_s) match no known tool", "try: give")
    cut = tmp_path / "cut.json"
    cut.write_bytes((BR / "vllm_bench_serve.json").read_bytes()[:200])
    code, _, err = run(capsys, "ingest", str(cut))
    assert code == 2
    one_line_error(err, f"{cut}: not JSON (neither one document nor JSON lines)")
    assert not (tmp_path / "st" / "tables" / "bench").exists()


def test_bad_json_beside_good_inputs_is_a_partial_success(capsys, tmp_path):
    bad = tmp_path / "notes.jsonl"
    bad.write_text("[1, 2, 3]\n")
    code, out, err = run(capsys, "ingest", str(LOG), str(bad), str(RESULTS[0]))
    assert code == 4
    assert f"Warning: {bad}: a JSON list, not an object (try: give" in err
    assert "Benchmark results: 2, 2 attached" in out


def test_a_results_file_too_large_is_refused_before_it_is_read(capsys, tmp_path, monkeypatch):
    import forensics_parsers.benchresults as br

    monkeypatch.setattr(br, "MAX_BYTES", 1000)
    code, _, err = run(capsys, "ingest", str(RESULTS[0]))
    assert code == 2
    one_line_error(err, "MiB a results file may hold", "try: split it")


# ---------------------------------------------------------------------------------------
# The attach rules (pure logic over a runs frame)
# ---------------------------------------------------------------------------------------
T0 = dt.datetime(2026, 12, 1, 10, 0, 0)


def runs_frame(*rows: dict) -> pl.DataFrame:
    base = {
        "run_id": None,
        "name": None,
        "started_at": T0,
        "ended_at": T0 + dt.timedelta(hours=1),
        "port": 30000,
        "model_path": "/models/Kimi-K2.5",
        "tp_size": 8,
        "spec_algorithm": "EAGLE3",
        "num_steps": 3,
        "topk": 1,
        "num_draft_tokens": 4,
    }
    return pl.DataFrame([{**base, **r} for r in rows])


def result(**kw) -> pl.DataFrame:
    base = {
        "record": 0,
        "tool": "aiperf",
        "url": "http://127.0.0.1:30000",
        "model": "moonshotai/Kimi-K2.5",
        "server": None,
        "started_at": T0 + dt.timedelta(minutes=10),
        "duration_s": 30.0,
    }
    return pl.DataFrame([{**base, **kw}], schema_overrides={"server": pl.String})


def attached(runs, res, **kw):
    df, warnings = attach(runs, res, **kw)
    return df.select("run_id", "attached_by").row(0), warnings


def test_window_port_decides_between_overlapping_runs():
    runs = runs_frame({"run_id": "a:0", "port": 30000}, {"run_id": "b:0", "port": 30001})
    assert attached(runs, result()) == (("a:0", "window"), [])
    assert attached(runs, result(url="http://10.0.0.5:30001")) == (("b:0", "window"), [])


def test_window_model_breaks_a_tie_and_a_true_tie_is_left_alone():
    runs = runs_frame(
        {"run_id": "a:0", "name": "kimi", "model_path": "/data/Kimi-K2.5"},
        {"run_id": "b:0", "name": "llama", "model_path": "/data/Llama-3.1-8B"},
    )
    assert attached(runs, result()) == (("a:0", "window"), [])
    (ids, warnings) = attached(runs, result(model="served-alias", url=None))
    assert ids == (None, None)
    assert warnings == ["result 0 (aiperf): not attached: 2 runs fit by window (kimi, llama)"]


def test_a_result_outside_every_window_falls_back_to_the_server_it_names():
    runs = runs_frame(
        {"run_id": "a:0", "started_at": T0, "ended_at": T0 + dt.timedelta(minutes=5)},
        {"run_id": "a:1", "started_at": T0 + dt.timedelta(minutes=6),
         "ended_at": T0 + dt.timedelta(minutes=8)},
        {"run_id": "c:0", "started_at": T0 + dt.timedelta(hours=2), "ended_at": None},
    )  # fmt: skip
    # 10:10 is after a:0 and a:1 ended (their logs were ingested earlier): the latest relaunch
    # that started before the benchmark ended served it
    assert attached(runs, result()) == (("a:1", "server"), [])


def test_sglang_server_info_settings_must_agree():
    server = json.dumps(
        {"port": 30000, "model_path": "/models/Kimi-K2.5", "tp_size": 8,
         "speculative_algorithm": "EAGLE3", "speculative_num_steps": 2}
    )  # fmt: skip
    runs = runs_frame(
        {"run_id": "s3:0", "num_steps": 3, "started_at": T0 + dt.timedelta(minutes=1)},
        {"run_id": "s2:0", "num_steps": 2},
    )
    res = result(tool="sglang.bench_serving", started_at=None, server=server, url=None)
    assert attached(runs, res) == (("s2:0", "server"), [])
    # a bound from the file's mtime: runs that started after it did not serve it
    (ids, warnings) = attached(runs, res, not_after=T0 - dt.timedelta(minutes=1))
    assert ids == (None, None) and "no run in the store fits" in warnings[0]


def test_the_named_run_wins():
    runs = runs_frame({"run_id": "a:0"})
    assert attached(runs, result(), run=("z:9", "other")) == (("z:9", "run"), [])


def test_remote_copies_keep_their_times(tmp_path, capsys):
    """A results file copied without its mtime (here: touched now) still attaches: the
    mtime only bounds when a result without its own time may have ended."""
    dst = tmp_path / "bench.jsonl"
    shutil.copy(RESULTS[0], dst)
    os.utime(dst, None)
    run(capsys, "ingest", str(LOG), str(dst))
    assert [r["attached_by"] for r in bench()] == ["server", "server"]


def test_many_results_files_read_the_runs_once(capsys, tmp_path, monkeypatch):
    import forensics.runs as runs_mod

    calls = []
    real = runs_mod.runs_table
    monkeypatch.setattr(runs_mod, "runs_table", lambda *a, **k: calls.append(1) or real(*a, **k))
    copies = []
    for i in range(5):
        copies.append(tmp_path / f"r{i}.json")
        shutil.copy(RESULTS[2], copies[-1])
    code, out, _ = run(capsys, "ingest", str(LOG), *map(str, copies))
    assert code == 0 and "Benchmark results: 5, 5 attached" in out
    assert len(calls) == 1


def test_a_launch_journal_beside_the_logs_is_not_a_results_file():
    from forensics.bench_results import is_results_file

    assert is_results_file("/data/eagle3/bench.JSONL") and is_results_file("r/x.json")
    assert not is_results_file("/data/eagle3/sglang_eagle3_cg_2step.log.journal.jsonl")
    assert not is_results_file("/data/eagle3/sglang_eagle3_cg_2step.log")
