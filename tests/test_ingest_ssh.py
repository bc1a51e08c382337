"""`forensics ingest NAME:/path/*.log` over a real sshd: same result as local, incremental."""

import json
import shutil

from click.testing import CliRunner

from forensics.cli import cli
from tests.conftest import FIXTURES


def _ingest(args):
    r = CliRunner().invoke(cli, ["ingest", *args, "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def _runs():
    r = CliRunner().invoke(cli, ["runs", "--json"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_remote_glob_ingest_matches_local_and_is_incremental(ssh_config, tmp_path, monkeypatch):
    logs = tmp_path / "remote eagle3"  # a space in the remote path
    logs.mkdir()
    for name in ("sglang_eagle3_cg_5dt.log", "sglang_baseline.log"):
        shutil.copy(FIXTURES / name, logs / name)

    first = _ingest([f"sshtest:{logs}/*.log"])
    assert first["files"] == 2
    assert first["files_by_status"] == {"new": 2}
    remote = {r["name"]: r for r in _runs()}
    assert set(remote) == {"sglang_eagle3_cg_5dt", "sglang_baseline"}
    assert {r["host"] for r in remote.values()} == {"sshtest"}

    # the same files ingested locally (another store) give the same figures
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "local-store"))
    _ingest([str(logs / "*.log")])
    local = {r["name"]: r for r in _runs()}
    for name in remote:
        for col in ("num_draft_tokens", "gen_throughput_median", "accept_len_mean", "decode_lines"):
            assert remote[name][col] == local[name][col], (name, col)
    monkeypatch.setenv("FORENSICS_HOME", str(tmp_path / "forensics-home"))

    # unchanged: nothing parsed; grown: only the new bytes
    again = _ingest([f"sshtest:{logs}/*.log"])
    assert again["files_by_status"] == {"unchanged": 2}
    assert again["bytes_parsed"] == 0
    extra = (
        "[2026-02-25 11:00:00] Decode batch, #running-req: 1, #token: 900, token usage: 0.00, "
        "accept len: 2.50, accept rate: 0.38, cuda graph: True, gen throughput (token/s): 81.00, "
        "#queue-req: 0\n"
    )
    with open(logs / "sglang_eagle3_cg_5dt.log", "a") as f:
        f.write(extra)
    grown = _ingest([f"sshtest:{logs}/*.log"])
    assert grown["files_by_status"] == {"grown": 1, "unchanged": 1}
    assert grown["bytes_parsed"] == len(extra)
    after = {r["name"]: r for r in _runs()}
    assert (
        after["sglang_eagle3_cg_5dt"]["decode_lines"]
        == remote["sglang_eagle3_cg_5dt"]["decode_lines"] + 1
    )


def test_remote_missing_file_is_one_line_exit_3(ssh_config, tmp_path):
    r = CliRunner().invoke(cli, ["ingest", f"sshtest:{tmp_path}/nope/*.log"])
    assert r.exit_code == 3
    assert "no files matched" in r.output
    assert "Traceback" not in r.output


def test_remote_results_files_attach_like_local_ones(ssh_config, tmp_path):
    """bench_serving's JSONL and AIPerf's JSON read over SSH, attached to the remote run."""
    remote = tmp_path / "remote bench"
    remote.mkdir()
    br = FIXTURES / "benchresults"
    shutil.copy(br / "sglang_eagle3_cg_5dt.log", remote)
    shutil.copy(br / "sglang_bench_serving.jsonl", remote)
    shutil.copy(br / "aiperf_c1" / "profile_export_aiperf.json", remote)
    got = _ingest([f"sshtest:{remote}/*.log", f"sshtest:{remote}/*.json*"])
    assert (got["files"], got["results"], got["results_attached"]) == (3, 3, 3)
    (run,) = _runs()
    assert run["host"] == "sshtest"
    assert round(run["bench_tok_s"], 2) == 76.43  # AIPerf's, the only result with a time
