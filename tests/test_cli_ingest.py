"""`forensics ingest|runs|show`: output, JSON keys, exit codes one by one (P01-P21, C01)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.ingest import DIR_PATTERNS

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
SEED = [
    "sglang_baseline.log",
    "sglang_eagle3_nocg_16dt.log",
    "sglang_eagle3_nocg_16dt_other.log",
    "sglang_eagle3_cg_16dt.log",
    "sglang_eagle3_cg_5dt.log",
]
RUN_KEYS = [
    "run_id", "name", "path", "host", "started_at", "model_path", "draft_model_path",
    "spec_algorithm", "num_steps", "topk", "num_draft_tokens", "cuda_graph", "tp_size",
    "phase_reached", "load_s", "capture_s", "ready_s", "decode_lines", "gen_throughput_median",
    "accept_len_mean", "accept_rate_mean", "error",
]  # fmt: skip


def run(capsys, *args: str, store: str | Path = "st") -> tuple[int, str, str]:
    """The real entry point (main), exit code and captured output."""
    with pytest.raises(SystemExit) as exc:
        main(["--store", str(store), *args])
    out, err = capsys.readouterr()
    return exc.value.code, out, err


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """One store with the seed runs and the failures, shared by the read-only tests."""
    base = tmp_path_factory.mktemp("ingested")
    d = base / "logs"
    d.mkdir()
    for name in [*SEED, "sglang_fail_load_kv_oom.log", "sglang_fail_capture.log",
                 "sglang_fail_runtime_ima.log", "sglang_two_launches.log"]:  # fmt: skip
        shutil.copy(FIX / name, d / name)
    from forensics.ingest import ingest
    from forensics.store import Store

    ingest(Store.open(base / "st"), [str(d)])
    return base / "st"


@pytest.fixture
def logs(tmp_path) -> Path:
    d = tmp_path / "logs"
    d.mkdir()
    for name in [*SEED, "sglang_fail_load_kv_oom.log", "sglang_fail_capture.log",
                 "sglang_fail_runtime_ima.log", "sglang_two_launches.log"]:  # fmt: skip
        shutil.copy(FIX / name, d / name)
    return d


def test_ingest_summary_text_and_idempotent_rerun(capsys, logs):
    code, out, err = run(capsys, "ingest", str(logs / "*.log"))
    assert code == 0 and err == ""
    assert out.startswith("Ingested 9 file(s) (9 new) into st: 10 run(s), ")
    assert ": 10 run(s), 910 lines, 94 decode lines, 0 unrecognised, in " in out
    code, out, _ = run(capsys, "ingest", str(logs))
    assert code == 0 and "(9 unchanged)" in out and ": 0 run(s), 0 lines," in out


def test_ingest_json_summary_keys(capsys, logs):
    code, out, _ = run(capsys, "ingest", "--json", str(logs / "sglang_eagle3_cg_5dt.log"))
    data = json.loads(out)
    assert code == 0
    for key in ("files", "runs", "lines_total", "records", "lines_unparsed", "decode_lines",
                "decode_errors", "nul_bytes", "long_lines_truncated", "progress_frames_collapsed",
                "ansi_stripped", "ts_out_of_order", "segments_detected", "files_skipped",
                "compressed_truncated", "seconds", "bytes_parsed", "warnings"):  # fmt: skip
        assert key in data, key
    assert (data["files"], data["runs"], data["lines_total"], data["decode_lines"]) == (
        1,
        1,
        172,
        15,
    )
    assert data["records"] == 172 and data["lines_unparsed"] == 0
    assert data["progress_frames_collapsed"] == 30
    assert data["bytes_parsed"] == (FIX / "sglang_eagle3_cg_5dt.log").stat().st_size


def test_runs_json_has_the_issue_columns_and_seed_values(capsys, ingested):
    code, out, _ = run(capsys, "runs", "--json", store=ingested)
    rows = json.loads(out)
    assert code == 0 and len(rows) == 10
    for r in rows:
        assert list(r)[: len(RUN_KEYS) - 1] == RUN_KEYS[:-1] and "error" in r
    by = {r["name"]: r for r in rows}
    tok = {
        n.removesuffix(".log"): round(by[n.removesuffix(".log")]["gen_throughput_median"], 1)
        for n in SEED
    }
    assert tok == {
        "sglang_baseline": 90.0,
        "sglang_eagle3_nocg_16dt": 53.2,
        "sglang_eagle3_nocg_16dt_other": 50.5,
        "sglang_eagle3_cg_16dt": 74.9,
        "sglang_eagle3_cg_5dt": 82.3,
    }
    cg5 = by["sglang_eagle3_cg_5dt"]
    assert (cg5["num_steps"], cg5["topk"], cg5["num_draft_tokens"], cg5["cuda_graph"]) == (
        4,
        1,
        5,
        True,
    )
    assert cg5["accept_len_mean"] == pytest.approx(2.55, abs=1e-3)
    assert cg5["accept_rate_norm"] == pytest.approx(1.55 / 4, abs=1e-3)
    assert (cg5["load_s"], cg5["capture_s"], cg5["ready_s"]) == pytest.approx((184.0, 27.12, 228.0))
    assert cg5["phase_reached"] == "serving" and cg5["error"] is None
    assert cg5["run_id"].endswith(":0") and cg5["host"] == "local"
    base = by["sglang_baseline"]
    assert base["spec_algorithm"] is None and base["accept_len_mean"] is None
    assert by["sglang_fail_load_kv_oom"]["phase_reached"] == "load"
    assert by["sglang_fail_load_kv_oom"]["error"].startswith("RuntimeError: Not enough memory.")
    cap = by["sglang_fail_capture"]
    assert cap["phase_reached"] == "capture" and cap["capture_s"] is None
    assert cap["error"].startswith("Exception: Capture cuda graph failed: CUDA error")
    ima = by["sglang_fail_runtime_ima"]
    assert ima["phase_reached"] == "serving" and "illegal memory access" in ima["error"]
    assert {"sglang_two_launches#1", "sglang_two_launches#2"} <= set(by)


def test_runs_filter_csv_and_table(capsys, ingested):
    code, out, _ = run(capsys, "runs", "16dt", "--csv", store=ingested)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert code == 0
    assert sorted(r["name"] for r in rows) == [
        "sglang_eagle3_cg_16dt", "sglang_eagle3_nocg_16dt", "sglang_eagle3_nocg_16dt_other",
    ]  # fmt: skip
    assert list(rows[0])[: len(RUN_KEYS) - 1] == RUN_KEYS[:-1]
    code, out, _ = run(capsys, "runs", store=ingested)
    assert code == 0 and "10 run(s)" in out and "sglang_eagle3_cg_5dt" in out


def test_runs_no_match_exits_3(capsys, ingested):
    code, out, err = run(capsys, "runs", "nosuchrun", store=ingested)
    assert code == 3 and out == ""
    assert err.startswith("Error: nosuchrun: no run matches (runs: ")


def test_show_one_run_text_and_json(capsys, ingested):
    code, out, _ = run(capsys, "show", "sglang_fail_capture", store=ingested)
    assert code == 0
    assert "sglang_fail_capture" in out and "capture target" in out
    assert "Exception: Capture cuda graph failed" in out
    code, out, _ = run(capsys, "show", "sglang_eagle3_cg_5dt", "--json", store=ingested)
    d = json.loads(out)
    assert d["config"]["num_draft_tokens"] == 5 and d["summary"]["decode_lines"] == 15
    segs = {s["segment"]: s for s in d["timeline"]}
    assert segs["load target"]["duration_s"] == 184.0 and segs["capture draft extend"]["ended"]
    assert d["metrics"]["gen_throughput"]["median"] == pytest.approx(82.3, abs=1e-3)
    code, _, err = run(capsys, "show", "zzz", store=ingested)
    assert code == 3 and err.startswith("Error: zzz: no run")


def test_missing_file_exits_3_one_line_P02(capsys, tmp_path):
    code, out, err = run(capsys, "ingest", str(tmp_path / "sglang_eagle3_cg_2step.log"))
    assert code == 3 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"Error: {tmp_path}/sglang_eagle3_cg_2step.log: no such file")
    assert "forensics diagnose sglang_eagle3_cg_2step --relaunch" in lines[0]
    assert not (tmp_path / "st" / "manifest.json").exists()


def test_glob_matching_nothing_exits_3_P21(capsys, tmp_path):
    code, _, err = run(capsys, "ingest", str(tmp_path / "*.nolog"))
    assert code == 3
    assert err.strip() == (
        f"Error: {tmp_path}/*.nolog: no files matched "
        "(try: check the pattern; quote it so your shell does not expand it)"
    )


def test_missing_input_next_to_good_ones_is_a_warning(capsys, logs, tmp_path):
    code, out, err = run(
        capsys, "ingest", str(logs / "sglang_baseline.log"), str(tmp_path / "gone.log")
    )
    assert code == 0 and "1 run(s)" in out
    assert err.startswith(f"Warning: {tmp_path}/gone.log: no such file")


def test_directory_without_logs_warns(capsys, tmp_path):
    empty = tmp_path / "nologs"
    empty.mkdir()
    (empty / "notes.md").write_text("x")
    # beside other inputs: a warning, and the others are ingested
    log = tmp_path / "sglang_baseline.log"
    log.write_bytes((FIX / "sglang_baseline.log").read_bytes())
    code, out, err = run(capsys, "ingest", str(empty), str(log))
    assert code == 0 and out.startswith("Ingested 1 file(s)")
    assert err.strip() == (
        f"Warning: {empty}: directory holds no *.log, *.log.gz, *.log.zst, *.log.xz, "
        "*.log.bz2, *.log.lz4, *.out, *.err files (sub-folders not searched)"
    )
    # alone: nothing to ingest is an error (exit 3), one line
    code, out, err = run(capsys, "ingest", str(empty))
    assert code == 3
    assert err.strip().startswith(f"Error: {empty}: directory holds no *.log, *.log.gz")


def test_binary_empty_and_gzip_files_P01_P12(capsys, tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    for n in (
        "binary.log",
        "empty.log",
        "sglang_baseline_rotated.log.gz",
        "sglang_eagle3_cg_3step.log",
    ):
        shutil.copy(FIX / n, d / n)
    code, out, err = run(capsys, "ingest", "--json", str(d))
    data = json.loads(out)
    assert code == 0 and "Traceback" not in err
    status = {Path(f["path"]).name: (f["status"], f["reason"]) for f in data["file_details"]}
    assert status["binary.log"] == ("skipped", "binary")
    assert status["empty.log"] == ("new", "")
    assert data["files_skipped"] == {"binary": 1}
    assert f"{d}/binary.log: an ELF executable, not a log (skipped)" in data["warnings"]
    assert f"{d}/empty.log: empty file (0 bytes)" in data["warnings"]
    code, out, _ = run(capsys, "runs", "--json")
    by = {r["name"]: r for r in json.loads(out)}
    assert set(by) == {"sglang_baseline_rotated", "sglang_eagle3_cg_3step"}
    assert by["sglang_baseline_rotated"]["decode_lines"] == 21  # gzip inflated (P12)
    assert by["sglang_eagle3_cg_3step"]["num_steps"] == 3  # from the file name


def test_unreadable_file_P19(tmp_path):
    """chmod 000 does not stop root, so when the suite runs as root the CLI runs under
    `setpriv` with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped: a real EACCES."""
    good = tmp_path / "sglang_baseline.log"
    bad = tmp_path / "secret.log"
    shutil.copy(FIX / "sglang_baseline.log", good)
    shutil.copy(FIX / "sglang_eagle3_cg_5dt.log", bad)
    os.chmod(bad, 0o000)
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root needs util-linux `setpriv` to drop CAP_DAC_OVERRIDE")
        caps = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--"]
    code = "import sys; from forensics.cli import main; main(sys.argv[1:])"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(*args):
        return subprocess.run(
            [*prefix, sys.executable, "-c", code, "--store", str(tmp_path / "st"), "ingest", *args],
            cwd=tmp_path, env=env, capture_output=True, text=True,
        )  # fmt: skip

    # a member of a glob: skipped with a warning, the other file still ingested
    r = cli(str(tmp_path / "*.log"))
    assert r.returncode == 0, r.stderr
    assert f"Warning: {bad}: permission denied (skipped)" in r.stderr
    assert "1 run(s)" in r.stdout and "Skipped: permission: 1" in r.stdout
    assert "Traceback" not in r.stderr
    # named alone: one line, exit 3
    r = cli(str(bad))
    assert r.returncode == 3, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith(f"Error: {bad}: permission denied")


def test_bad_flag_is_usage_exit_2_C01(capsys):
    code, _, err = run(capsys, "ingest", "--no-such-flag", "x.log")
    assert code == 2 and "No such option" in err
    code, _, err = run(capsys, "ingest", "--name-pattern", "(", "x.log")
    assert code == 2 and err.startswith("Error: --name-pattern '(': not a regular expression")


def _tree(root, files):
    for rel in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes((FIX / "sglang_baseline.log").read_bytes())


@pytest.mark.parametrize(
    "files",
    [
        ["a.log", "b.log"],  # flat: -r used to say "holds no *.log files"
        ["a.log", "d1/b.log", "d1/d2/c.log", "d1/d2/d3/d4/e.log"],  # every depth
        ["d1/d2/only.log.gz"],
    ],
)
def test_ingest_r_reads_every_depth_issue14(capsys, tmp_path, files):
    """Issue 14, "The CLI contract a new user hits": `ingest -r DIR` recurses every depth."""
    import gzip

    root = tmp_path / "logs"
    _tree(root, [f for f in files if not f.endswith(".gz")])
    for f in (f for f in files if f.endswith(".gz")):
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_bytes(gzip.compress((FIX / "sglang_baseline.log").read_bytes()))
    code, out, err = run(
        capsys, "--store", str(tmp_path / "st"), "ingest", "-r", str(root), "--json"
    )
    assert code == 0, err
    assert json.loads(out)["files"] == len(files)


def test_ingest_r_is_not_blinded_by_odd_entries_beside_the_logs_issue14(capsys, tmp_path):
    """A symlink loop, a FIFO or a socket in a folder must not hide the logs beside them
    (one unreadable entry used to make the whole folder read as empty: exit 3)."""
    import os
    import socket

    root = tmp_path / "logs"
    _tree(root, ["a.log", "sub/b.log"])
    (root / "loop1").symlink_to(root / "loop2")
    (root / "loop2").symlink_to(root / "loop1")
    (root / "sub" / "loop").symlink_to(root / "sub" / "loop")
    os.mkfifo(root / "pipe.log")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "sub" / "s.log"))
        code, out, err = run(
            capsys, "--store", str(tmp_path / "st"), "ingest", "-r", str(root), "--json"
        )
    finally:
        sock.close()
    assert code in (0, 4), err
    summary = json.loads(out)
    assert summary["files_by_status"]["new"] == 2, (out, err)  # a.log and sub/b.log
    assert summary["files_skipped"] == {"not-regular": 2}  # the FIFO and the socket, named


def test_ingest_r_skips_evidence_dumps_and_names_its_patterns_issue14(capsys, tmp_path):
    root = tmp_path / "logs"
    _tree(root, ["run.log", "evidence/L1/nvidia-smi.log", "notes.txt", "sub/evidence.txt"])
    store = ["--store", str(tmp_path / "st")]
    code, out, err = run(capsys, *store, "ingest", "-r", str(root), "--json")
    assert code == 0, err
    assert json.loads(out)["files"] == 1  # run.log: no evidence/, no *.txt
    # a .txt named by the user is read as given
    code, out, err = run(capsys, *store, "ingest", str(root / "notes.txt"), "--json")
    assert code == 0 and json.loads(out)["files"] == 1, err
    empty = tmp_path / "empty"
    (empty / "deep" / "er").mkdir(parents=True)
    code, out, err = run(capsys, *store, "ingest", "-r", str(empty))
    assert code == 3
    assert f"holds no {', '.join(DIR_PATTERNS)} files at any depth" in err
    assert "*.log.zst, *.log.xz, *.log.bz2, *.log.lz4" in err


def test_ingest_dir_picks_up_every_compressed_log_of_the_log_source_issue14(capsys, tmp_path):
    """A folder of compressed logs: every suffix of the log source's FORMATS is picked up
    (gzip, zstd, xz, bzip2 and lz4 all read)."""
    import bz2
    import gzip
    import lzma

    import lz4.frame
    import zstandard

    body = (FIX / "sglang_two_launches.log").read_bytes()
    root = tmp_path / "logs"
    root.mkdir()
    packers = {
        ".gz": gzip.compress,
        ".zst": zstandard.ZstdCompressor().compress,
        ".xz": lzma.compress,
        ".bz2": bz2.compress,
        ".lz4": lz4.frame.compress,
    }
    for suffix, pack in packers.items():
        (root / f"run{suffix.replace('.', '_')}.log{suffix}").write_bytes(pack(body))
    code, out, err = run(capsys, "--store", str(tmp_path / "st"), "ingest", str(root), "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["files"] == 5 and summary["files_by_status"]["new"] == 5
    assert summary["runs"] == 10  # two launches in each of the five
    assert not summary.get("files_skipped")
    code, out, _ = run(capsys, "--store", str(tmp_path / "st"), "runs", "--json")
    names = sorted({r["name"].split("#")[0] for r in json.loads(out)})
    assert names == ["run_bz2", "run_gz", "run_lz4", "run_xz", "run_zst"]  # no ".log" left
