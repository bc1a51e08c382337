"""Issue 14: `classify` / `diagnose --log` of text that is not an SGLang log at all (a README,
/proc and /etc files, CSV, JSON, Python sources, dmesg, a shell history) was "pre-exec (hung)".

Such a text gets the outcome "not an SGLang log" (no phase, signature ``not_sglang``,
undecided, exit 0; the ``plain_text`` row of signatures.NOT_SGLANG), while what a launch that
failed early leaves (an empty log, nohup, the shell's or python's error, CUDA_VISIBLE_DEVICES,
a signal), the GPU host's evidence pastes and other servers' logs keep their verdicts; ingest
stores such a file and names it in a warning.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from forensics import classifier
from forensics.cli import cli
from forensics.signatures.foreign import LAUNCH_TEXT
from tests.conftest import FIXTURES

NOT_SGLANG = FIXTURES / "not_sglang"
TEXTS = ["plain_text.log", "readme.md", "table.csv", "config.json", "module.py", "dmesg.txt"]
TEXTS += ["history.txt"]
OTHER_SERVERS = ["vllm.log", "tgi.log", "tensorrt_llm.log", "llama_cpp_server.log", "ollama.log"]
OTHER_SERVERS += ["pytest.log", "shell_session.log"]

# What a launch leaves when it fails before SGLang prints its first line: never "no log".
PRE_EXEC = {
    "empty": "",
    "nohup": "nohup: ignoring input\n",
    "no_script": "python3: can't open file '/srv/launch.py': [Errno 2] No such file or directory\n",
    "no_module": "/usr/bin/python3: No module named sglang\n",
    "no_python": "bash: python3: command not found\n",
    "redirect": "bash: /logs/run7/server.log: No such file or directory\n",
    "sh_redirect": "sh: 1: cannot create /logs/x.log: Directory nonexistent\n",
    "cuda_env": "RuntimeError: CUDA error: invalid device ordinal\n"
    "CUDA_VISIBLE_DEVICES=9 names no GPU of this host\n",
    "killed": "nohup: ignoring input\nKilled\n",
    "wrapper": "=== run 7 on gpu-3 ===\nmodel /models/llama\nstarting SGLang server\n",
    "bad_interpreter": "/opt/venv/bin/python: bad interpreter: No such file or directory\n"
    "exit 126\nretrying\n",
    "warning_then_segv": "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:61: "
    "UserWarning: CUDA initialization\nSegmentation fault (core dumped)\nexit 139\n",
    "two_lines": "starting\nwaiting\n",  # fewer than 3 lines: too little to say
}


@pytest.fixture(scope="module")
def model():
    return classifier.load_model(None)


@pytest.mark.parametrize("name", TEXTS)
def test_a_text_that_is_no_log_gets_no_phase(model, name):
    (v,) = classifier.classify_file(NOT_SGLANG / name, model)
    assert (v.phase, v.signature, v.decided, v.basis) == (None, "not_sglang", False, "not_sglang")
    assert v.explanation.startswith("not an SGLang server log: no line of SGLang's")
    assert not v.hung and v.evidence == []


@pytest.mark.parametrize("name", sorted(PRE_EXEC))
def test_what_an_early_failed_launch_leaves_keeps_its_verdict(model, name, tmp_path):
    log = tmp_path / f"{name}.log"
    log.write_text(PRE_EXEC[name])
    (v,) = classifier.classify_file(log, model)
    assert v.phase is not None and v.signature != "not_sglang", (name, v.explanation)


def test_evidence_pastes_and_other_servers_keep_their_verdicts(model):
    for p in sorted((FIXTURES / "evidence").glob("*.*")):
        if p.suffix in (".txt", ".csv"):
            for v in classifier.classify_file(p, model):
                assert v.signature != "not_sglang", p.name
    for name in OTHER_SERVERS:
        (v, *_) = classifier.classify_file(NOT_SGLANG / name, model)
        assert v.basis == "foreign" and v.phase is not None, name


def test_a_few_warnings_in_a_long_text_do_not_make_it_a_launch(model):
    """The share rule: a README with a WARNING line and a `command not found` in it is still
    no log; three of its lines being a launch's (of ten) make it one."""
    body = [f"line {i} of the manual: how to use the tool" for i in range(30)]
    text = "\n".join(["WARNING: old versions", *body, "bash: foo: command not found"])
    (v,) = classifier.classify_text(text + "\n", model)
    assert v.signature == "not_sglang"
    launchy = ["nohup: ignoring input", "Killed", "bash: x: command not found"]
    (v,) = classifier.classify_text("\n".join(launchy + body[:7]) + "\n", model)
    assert v.phase is not None


def test_every_launch_text_row_recognises_its_own_kind_of_line():
    from forensics.signatures.foreign import EVIDENCE_RX, LAUNCH_RX

    samples = {
        "nohup": "nohup: ignoring input",
        "shell": "/bin/bash: line 3: cd: /x: No such file or directory",
        "python": "python3.11: can't open file 'x.py'",
        "not_found": "exec: nvcc: command not found",
        "signal": "Aborted (core dumped)",
        "cuda_env": "export CUDA_VISIBLE_DEVICES=0,1",
        "python_error": "RuntimeError: boom",
        "torch_log": "[W1201 12:00:00.000000000 ProcessGroupNCCL.cpp:1000] Warning",
        "pip": "Successfully installed sglang-0.5.5",
        "sglang": "launching SGLang on port 30000",
        "nvidia_smi": "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04 |",
        "fuser": "/dev/nvidia0:         4151m",
        "ps": "    PID    PPID    PGID STAT ELAPSED COMMAND",
        "py_spy": "Process 4190: sglang::scheduler_TP0",
        "ss": "State  Recv-Q Send-Q Local Address:Port  Peer Address:PortProcess",
        "xid": "NVRM: Xid (PCI:0000:1a:00): 31, pid=507",
    }
    assert set(samples) == {i for i, _, _ in LAUNCH_TEXT}
    for rid, _, blocks in LAUNCH_TEXT:
        assert bool((EVIDENCE_RX if blocks else LAUNCH_RX).search(samples[rid])), rid


def test_cli_classify_and_diagnose_say_not_an_sglang_log():
    r = CliRunner()
    res = r.invoke(cli, ["classify", str(NOT_SGLANG / "readme.md")])
    assert res.exit_code == 0, res.output
    assert "readme.md#1: not an SGLang log  not_sglang" in res.output
    assert "pre-exec" not in res.output and "hung" not in res.output
    res = r.invoke(cli, ["classify", "--json", str(NOT_SGLANG / "table.csv")])
    (v,) = json.loads(res.output)
    assert v["phase"] is None and v["signature"] == "not_sglang" and v["decided"] is False
    res = r.invoke(cli, ["diagnose", "x", "--log", str(NOT_SGLANG / "config.json")])
    assert res.exit_code == 0, res.output
    assert "phase — (not an SGLang log), signature not_sglang" in res.output


def test_ingest_stores_it_and_names_it_in_a_warning(tmp_path):
    shutil.copy(NOT_SGLANG / "dmesg.txt", tmp_path / "dmesg.log")
    shutil.copy(FIXTURES / "sglang_baseline.log", tmp_path / "sglang_baseline.log")
    store = tmp_path / "store"
    r = CliRunner()
    res = r.invoke(
        cli,
        [
            "--store",
            str(store),
            "ingest",
            str(tmp_path / "dmesg.log"),
            str(tmp_path / "sglang_baseline.log"),
        ],
    )
    assert res.exit_code == 0, res.output
    warned = [w for w in res.output.splitlines() if "dmesg.log" in w]
    assert warned and "stored as an unrecognised run" in warned[0], res.output
    assert not any(
        "sglang_baseline.log" in w and "unrecognised run" in w for w in res.output.splitlines()
    )
    rows = json.loads(r.invoke(cli, ["--store", str(store), "runs", "--json"]).output)
    by_name = {x["name"]: x for x in rows}
    assert by_name["dmesg"]["phase"] is None and by_name["dmesg"]["signature"] == "not_sglang"
    assert by_name["sglang_baseline"]["phase"] == "ok"
    res = r.invoke(cli, ["--store", str(store), "diagnose", "dmesg", "--json"])
    (rep,) = json.loads(res.output)
    assert rep["phase"] is None and rep["comparison"]["closest"] is None
    assert not any("--relaunch" in s for s in rep["next_steps"])


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="no procfs here")
def test_a_kernel_pseudo_file_is_refused_not_read_as_an_empty_log(tmp_path):
    """/proc/self/status stats as 0 bytes: it was read as an empty log ("pre-exec (hung)")."""
    import os

    from forensics.hosts.local import _pseudo_fs

    assert _pseudo_fs(os.stat("/proc/self/status").st_dev)
    (tmp_path / "x.log").write_text("")
    assert not _pseudo_fs(os.stat(tmp_path / "x.log").st_dev)
    for args in (["classify", "/proc/self/status"], ["diagnose", "x", "--log", "/proc/cpuinfo"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert "a file the kernel makes when it is read" in res.output
        assert "pre-exec" not in res.output


@pytest.mark.skipif(not Path("/proc/self/mountinfo").exists(), reason="no procfs here")
def test_pseudo_files_the_filesystem_table_missed_are_refused(tmp_path):
    """Issue 14, fourth round. A /sys attribute stats as 4096 bytes whatever it holds: it was
    'file shrank or vanished while reading' (exit 4); /proc/self/mem (EIO at offset 0) and
    every ingest / classify / diagnose --log of them: exit 2, 'made when it is read'."""
    sysfs = next(
        (p for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/profiling",
                     "/sys/power/state") if os.access(p, os.R_OK) and os.path.getsize(p) > 0),
        None,
    )  # fmt: skip
    paths = ["/proc/self/mem", *([sysfs] if sysfs else [])]
    env = {**os.environ, "FORENSICS_HOME": str(tmp_path / "home")}
    for path in paths:
        for args in (["ingest", path], ["classify", path], ["diagnose", "x", "--log", path]):
            p = subprocess.run(
                [sys.executable, "-m", "forensics", *args], capture_output=True, text=True,
                env=env, timeout=120,
            )  # fmt: skip
            assert p.returncode == 2, (args, p.stdout, p.stderr)
            assert "a file the kernel makes when it is read" in p.stderr, (args, p.stderr)
    assert not (tmp_path / "home" / "tables").exists()  # nothing stored


def test_a_size_0_file_that_has_bytes_is_refused_on_any_filesystem(ssh_config, tmp_path):
    """A remote /proc/self/status (SFTP has no device to look up in a table of filesystems)
    stats as 0 bytes: it was read as an empty log. hosts.base.made_when_read: a size-0 file
    whose first byte reads is made when read; a really empty log still reads as one."""
    (tmp_path / "empty.log").write_text("")
    runner = CliRunner()
    for path in ("/proc/self/status", "/proc/cpuinfo"):
        for args in (["classify", f"sshtest:{path}"], ["ingest", f"sshtest:{path}"]):
            res = runner.invoke(cli, args)
            assert res.exit_code == 2, (args, res.output)
            assert "a file the kernel makes when it is read" in res.output, res.output
    res = runner.invoke(cli, ["classify", f"sshtest:{tmp_path / 'empty.log'}"])
    assert res.exit_code == 0, res.output
