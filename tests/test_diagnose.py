"""`forensics diagnose`: reports, comparison with runs that worked, missing logs, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics.cli import cli, main

CORPUS = Path(__file__).resolve().parent.parent / "forensics" / "data" / "corpus"

# the seed story: the capture failure of one config, two configs that served
RUNS = {
    "sglang_eagle3_cg_3step.log": "gen/capture_oom-059-0.log",
    "sglang_eagle3_cg_4step.log": "gen/ok_serve-059-0.log",
    "sglang_eagle3_nocg_5step.log": "gen/ok_serve-046-0.log",
}


@pytest.fixture
def store_with_runs(tmp_path):
    logs = tmp_path / "eagle3"
    logs.mkdir()
    for name, src in RUNS.items():
        (logs / name).write_bytes((CORPUS / src).read_bytes())
    res = CliRunner().invoke(cli, ["ingest", str(logs / "*.log")])
    assert res.exit_code == 0, res.output
    return logs


def test_diagnose_capture_failure_report(store_with_runs):
    res = CliRunner().invoke(cli, ["diagnose", "3step"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "phase capture, signature capture_failed" in out
    assert "out of GPU memory while capturing" in out
    # evidence as file:line and the text of that line
    assert f"{store_with_runs}/sglang_eagle3_cg_3step.log:62: Scheduler hit an exception" in out
    assert "stopped in `capture target`" in out
    assert "closest run that worked: sglang_eagle3_" in out and "reached ready in" in out
    assert "--mem-fraction-static" in out
    assert "forensics diagnose sglang_eagle3_cg_3step --relaunch" in out


def test_diagnose_json(store_with_runs):
    res = CliRunner().invoke(cli, ["diagnose", "3step", "--json"])
    (rep,) = json.loads(res.output)
    assert (rep["phase"], rep["hung"], rep["signature"]) == ("capture", False, "capture_failed")
    assert rep["evidence"][0]["where"].endswith("sglang_eagle3_cg_3step.log:62")
    assert any(t["segment"] == "capture target" and not t["ended"] for t in rep["timeline"])
    closest = rep["comparison"]["closest"]
    assert closest["name"].startswith("sglang_eagle3_") and closest["ready_s"] > 0
    assert {d["key"] for d in rep["comparison"]["differences"]}


def test_several_matches_one_report_each_newest_first(store_with_runs):
    res = CliRunner().invoke(cli, ["diagnose", "eagle3", "--json"])
    reps = json.loads(res.output)
    assert len(reps) == 3
    starts = [r["started_at"] for r in reps]
    assert starts == sorted(starts, reverse=True)
    assert sorted(r["phase"] for r in reps) == ["capture", "ok", "ok"]


def test_no_match_names_what_exists_exit_3(store_with_runs, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "7step"])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert "7step: no run matches" in err and "sglang_eagle3_cg_3step" in err


def test_missing_log_is_evidence(tmp_path):
    """S: the seed story's `tail: No such file or directory` (log dir exists)."""
    (tmp_path / "eagle3").mkdir()
    log = tmp_path / "eagle3" / "sglang_eagle3_cg_2step.log"
    res = CliRunner().invoke(cli, ["diagnose", "2step", "--log", str(log), "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert rep["phase"] in ("pre-exec", "cleanup")
    assert rep["signature"] == "log_never_written"
    causes = [c["cause"] for c in rep["causes"]]
    assert set(causes) >= {
        "cleanup-self-kill",
        "and-after-pkill",
        "cleanup-hang",
        "log-dir-missing",
        "wrong-path",
    }
    # the log's folder exists (checked), so that cause is ranked last
    assert causes[-1] == "log-dir-missing"
    assert any("--relaunch" in s for s in rep["next_steps"])


def test_missing_log_dir_ranked_first(tmp_path):
    log = tmp_path / "no-such-dir" / "sglang_eagle3_cg_2step.log"
    res = CliRunner().invoke(cli, ["diagnose", "2step", "--log", str(log), "--json"])
    (rep,) = json.loads(res.output)
    assert rep["causes"][0]["cause"] == "log-dir-missing"
    assert rep["phase"] == "pre-exec"
    assert "does not exist" in rep["causes"][0]["evidence"]


SEED_CHAIN = (
    'pkill -f "sglang.launch_server" && sleep 2 && pkill -9 -f python3; sleep 3 && '
    "fuser -k /dev/nvidia* 2>/dev/null; sleep 3 && "
    'nohup bash -c "python3 -m sglang.launch_server --model-path /m --speculative-num-steps 2" '
    "> {log} 2>&1 &"
)


def test_recorded_launch_whose_log_never_appeared(tmp_path):
    """`diagnose 2step` with no ingested run: the recorded launch's chain ranks the causes."""
    launcher = pytest.importorskip("forensics.launcher")
    import datetime as dt

    import polars as pl

    from forensics.recipe import Recipe
    from forensics.store import Store

    (tmp_path / "eagle3").mkdir()
    log = tmp_path / "eagle3" / "sglang_eagle3_cg_2step.log"
    chain = SEED_CHAIN.format(log=log)
    recipe = Recipe.from_shell(chain, name="sglang_eagle3_cg_2step")
    row = {k: None for k in launcher.LAUNCH_SCHEMA}
    now = dt.datetime.now()
    row.update(
        launch_id="l1",
        name="sglang_eagle3_cg_2step",
        host="local",
        mode="launch",
        log_path=str(log),
        recipe=recipe.to_json(),
        started_at=now,
        updated_at=now,
        status="failed",
    )
    store = Store.open(None)
    with store.transaction() as tx:
        tx.append("launches", pl.DataFrame([row], schema=launcher.LAUNCH_SCHEMA))
    res = CliRunner().invoke(cli, ["diagnose", "2step", "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert rep["signature"] == "log_never_written"
    assert rep["causes"][0]["cause"] == "cleanup-self-kill"
    assert rep["phase"] == "cleanup"
    assert "step" in rep["causes"][0]["evidence"]


def test_relaunch_of_unknown_name_is_a_clean_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "nothing-like-this", "--relaunch"])
    assert exc.value.code in (2, 3)
    assert capsys.readouterr().err.startswith("Error: ")


def test_diagnose_existing_log_path(tmp_path):
    log = tmp_path / "x.log"
    log.write_bytes((CORPUS / "hand" / "nccl_init_glog.log").read_bytes())
    res = CliRunner().invoke(cli, ["diagnose", "x", "--log", str(log), "--json"])
    (rep,) = json.loads(res.output)
    assert (rep["phase"], rep["signature"]) == ("load", "nccl_error")


def test_signatures_lists_counts_and_groups_unknown_errors(tmp_path):
    """Two runs failing with the same error unknown to the catalog: one signature, count 2."""
    import json

    from click.testing import CliRunner

    from forensics.cli import cli

    def failing_log(name: str, n: int) -> str:
        p = tmp_path / f"{name}.log"
        p.write_text(
            f"[2026-03-0{n} 10:00:00] server_args=ServerArgs(model_path='m', tp_size=1, port=3000{n})\n"
            f"[2026-03-0{n} 10:00:01] Load weight begin. avail mem=70.00 GB\n"
            f"[2026-03-0{n} 10:00:02] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/x/sglang/srt/model_executor/model_runner.py", line 12, in load_model\n'
            "    self.loader.load()\n"
            f"FrobnicatorError: widget {n}{n}7 at /opt/weights/shard-0000{n}.bin is frobnicated\n"
        )
        return str(p)

    runner = CliRunner()
    for n in (1, 2):
        assert runner.invoke(cli, ["ingest", failing_log(f"frob{n}", n)]).exit_code == 0
    r = runner.invoke(cli, ["signatures", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    unknown = [row for row in rows if row["signature"].startswith("unknown:")]
    assert len(unknown) == 1, rows
    assert unknown[0]["runs"] == 2
    assert "frobnicated" in unknown[0]["explanation"]


def test_S10_disk_full_during_capture_is_named_with_its_phase(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    src = Path(__file__).resolve().parent.parent / "fixtures" / "sglang_fail_capture_disk_full.log"
    (logs / "sglang_eagle3_cg_2step.log").write_bytes(src.read_bytes())
    assert CliRunner().invoke(cli, ["ingest", str(logs)]).exit_code == 0
    res = CliRunner().invoke(cli, ["diagnose", "2step", "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert (rep["phase"], rep["signature"]) == ("capture", "disk_full")
    assert any("[Errno 28] No space left on device" in e["text"] for e in rep["evidence"])
    assert any("TRITON_CACHE_DIR" in r for r in rep["next_steps"])


# ---------------------------------------------------------------- the naming-convention guess


def _ingest_logs(folder: Path, logs: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in logs.items():
        (folder / name).write_bytes((CORPUS / src).read_bytes())
    res = CliRunner().invoke(cli, ["ingest", str(folder / "*.log")])
    assert res.exit_code == 0, res.output


def test_convention_guess_of_a_missing_log_invents_no_failure(tmp_path, capsys):
    """Issue 14 (it replaces issue 4's guess): `diagnose 2step` when nothing says that log was
    expected (no launch, no recipe, no --log) exits 3 naming the runs that exist and giving the
    conventional path as the hint; `--log` with it (the user says it was expected) is the
    missing-log report."""
    logs = tmp_path / "eagle3"
    _ingest_logs(
        logs,
        {
            "sglang_eagle3_cg_3step.log": "gen/capture_oom-059-0.log",
            "sglang_eagle3_cg_4step.log": "gen/ok_serve-059-0.log",
        },
    )
    guess = str(logs / "sglang_eagle3_cg_2step.log")
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "2step"])
    out, err = capsys.readouterr()
    assert exc.value.code == 3 and "log_never_written" not in out
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: 2step: no run matches (runs: ")
    assert "sglang_eagle3_cg_3step" in line and f"{guess} (guessed" in line
    assert f"forensics diagnose sglang_eagle3_cg_2step --log {guess}" in line
    res = CliRunner().invoke(cli, ["diagnose", "sglang_eagle3_cg_2step", "--log", guess, "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert (rep["path"], rep["signature"]) == (guess, "log_never_written")
    assert rep["evidence"][0]["where"] == f"{guess}: no such file"


def test_a_name_never_launched_is_exit_3_with_the_names_that_exist(store_with_runs, capsys):
    """Issue 14: `diagnose 7step` (never launched) invented "cleanup, log_never_written"."""
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "cg_7step"])
    out, err = capsys.readouterr()
    assert exc.value.code == 3 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("Error: cg_7step: no run matches (runs: sglang_")


def test_convention_guess_ambiguous_lists_candidates_exit_3(store_with_runs, capsys):
    """cg_3step, cg_4step and nocg_5step ingested: `2step` may be cg_2step or nocg_2step."""
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "2step"])
    assert exc.value.code == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: 2step: no run matches")
    assert str(store_with_runs / "sglang_eagle3_cg_2step.log") in err
    assert str(store_with_runs / "sglang_eagle3_nocg_2step.log") in err
    # naming the graph mode too makes it one, offered as the --log to give (issue 14)
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "nocg_2step"])
    assert exc.value.code == 3
    err = capsys.readouterr().err
    assert f"--log {store_with_runs / 'sglang_eagle3_nocg_2step.log'}" in err


def test_convention_guess_of_a_log_not_ingested_diagnoses_it(tmp_path):
    """The conventional log exists but was never ingested: it is classified, not "missing"."""
    logs = tmp_path / "eagle3"
    _ingest_logs(logs, {"sglang_eagle3_cg_4step.log": "gen/ok_serve-059-0.log"})
    (logs / "sglang_eagle3_cg_3step.log").write_bytes(
        (CORPUS / "gen/capture_oom-059-0.log").read_bytes()
    )
    res = CliRunner().invoke(cli, ["diagnose", "3step", "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.output)
    assert (rep["phase"], rep["signature"]) == ("capture", "capture_failed")
    assert rep["next_steps"][0].startswith(f"{logs}/sglang_eagle3_cg_3step.log is not ingested")


def test_guess_keeps_the_folder_spelling_and_ignores_other_fields():
    """`2step` beside `run_step3_topk4.log` is `run_step2_topk4.log`; a fragment whose field
    no ingested name carries (tp2) guesses nothing."""
    import polars as pl

    from forensics.diagnose import guess_logs

    table = pl.DataFrame(
        {
            "name": ["run_step3_topk4", "sglang_baseline"],
            "path": ["/d/run_step3_topk4.log", "/d/sglang_baseline.log"],
            "host": ["gpu8", "local"],
        }
    )
    (g,) = guess_logs(table, "2step")
    assert (g["path"], g["host"], g["where"]) == (
        "/d/run_step2_topk4.log",
        "gpu8",
        "gpu8:/d/run_step2_topk4.log",
    )
    assert guess_logs(table, "tp2") == []
    assert guess_logs(table, "something") == []
    assert [g["path"] for g in guess_logs(table, "step3_topk8")] == ["/d/run_step3_topk8.log"]


def test_log_on_an_unknown_host_prefix_is_exit_2_not_a_missing_log(tmp_path, capsys):
    """Issue 5: `--log gpu8:/data/x.log` was read as a local path that does not exist and
    diagnosed, wrongly, as a log never written."""
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", "x", "--log", "gpu8:/data/eagle3/x.log"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert "log_never_written" not in out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: unknown host 'gpu8' (configured: ")
