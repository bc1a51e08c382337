"""GPU-host evidence: parsers on real H200 outputs (fixtures/evidence/) and collect() on real hosts.

collect() runs on this machine (no GPU, so nvidia-smi is missing and must be reported cleanly),
with an nvidia-smi shim on PATH that prints the real H200 outputs for a process the test
started, and over SSH against the test sshd.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import evidence
from forensics.hosts import LocalHost
from forensics_parsers import evidence as ev

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "evidence"


def _fx(name: str) -> str:
    return (FIX / name).read_text()


# -- parsers on the real outputs --------------------------------------------------------------


def test_nvidia_smi_table_busy_and_idle():
    gpus, procs = ev.parse_nvidia_smi(_fx("nvidia-smi.busy.txt"))
    assert gpus.to_dicts() == [
        {
            "gpu": 0,
            "name": "NVIDIA H200",
            "bus_id": "00000000:00:06.0",
            "temp_c": 38,
            "perf": "P0",
            "power_w": 117.0,
            "power_cap_w": 700.0,
            "memory_used_mib": 21007,
            "memory_total_mib": 143771,
            "util_pct": 0,
            "compute_mode": "Default",
        }
    ]
    assert procs.to_dicts() == [
        {"gpu": 0, "pid": 417, "type": "C", "process_name": "python3", "used_memory_mib": 20998}
    ]
    gpus, procs = ev.parse_nvidia_smi(_fx("nvidia-smi.idle.txt"))
    assert gpus["memory_used_mib"].to_list() == [0] and procs.height == 0
    assert procs.schema == pl.Schema(ev.GPU_PROC_SCHEMA)


def test_query_gpu_with_header_and_units():
    df = ev.parse_query_gpu(_fx("nvidia-smi.query-gpu.csv"))
    assert df.to_dicts() == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "memory_used": 0,
            "memory_total": 143771,
            "utilization_gpu": 0,
        }
    ]


@pytest.mark.parametrize(
    ("name", "fields", "expected"),
    [
        ("nvidia-smi.query-compute-apps.csv", None, [(417, "python3", 20998)]),
        (
            "nvidia-smi.query-compute-apps.noheader-nounits.csv",
            ["pid", "used_memory"],
            [(417, None, 20998)],
        ),
        ("nvidia-smi.query-compute-apps.after-kill.csv", None, []),
    ],
)
def test_query_compute_apps_variants(name, fields, expected):
    df = ev.parse_query_compute_apps(_fx(name), fields)
    assert df.schema == pl.Schema(ev.GPU_PROC_SCHEMA)
    got = [(r["pid"], r["process_name"], r["used_memory_mib"]) for r in df.to_dicts()]
    assert got == expected


def test_fuser_verbose_and_kill_outputs():
    v = ev.parse_fuser(_fx("fuser-v.txt"))
    assert v["path"].to_list() == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert set(v["pid"]) == {417} and set(v["command"]) == {"python3"}
    assert set(v["access"]) == {"F...m"} and set(v["user"]) == {"root"}
    k = ev.parse_fuser(_fx("fuser-k.txt"))
    assert k.select("path", "pid", "access").rows() == [
        ("/dev/nvidia0", 417, "m"),
        ("/dev/nvidiactl", 417, "m"),
        ("/dev/nvidia-uvm", 417, "m"),
    ]


def test_fuser_several_holders_per_file():
    text = (
        "                     USER        PID ACCESS COMMAND\n"
        "/dev/nvidia0:        root     kernel mount /dev/nvidia0\n"
        "                     alice       417 F...m python3\n"
        "                     bob         530 F.... train\n"
    )
    assert ev.parse_fuser(text).select("path", "user", "pid").rows() == [
        ("/dev/nvidia0", "alice", 417),
        ("/dev/nvidia0", "bob", 530),
    ]


def test_dmesg_xid_lines():
    df = ev.parse_dmesg_xid(_fx("dmesg.xid.txt"))
    assert df.select("line", "uptime_s", "xid", "pid", "name").rows() == [
        (6, 58.588704, 31, 507, "python3"),
        (7, 62.355315, 43, 529, "python3"),
    ]
    assert df["message"][0].startswith("channel 0x0000000a, intr 00000000. MMU Fault: ENGINE")
    assert "MMU fault" in df["meaning"][0] and df["device"][0] == "PCI:0000:00:06"


def test_dmesg_xid_other_forms():
    text = (
        "[Sun Nov 29 16:45:59 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
        "kernel: NVRM: Xid (PCI:0000:86:00): 48, An uncorrectable double bit error\n"
    )
    df = ev.parse_dmesg_xid(text)
    assert df.select("ts", "uptime_s", "xid", "pid", "name").rows() == [
        ("Sun Nov 29 16:45:59 2026", None, 79, None, None),
        (None, None, 48, None, None),
    ]
    assert df["message"].to_list() == [
        "GPU has fallen off the bus.",
        "An uncorrectable double bit error",
    ]


def test_ps_and_process_tree():
    ps = ev.parse_ps(_fx("ps.tree.txt"))
    assert ps.height == 10 and ps.schema == pl.Schema(ev.PS_SCHEMA)
    assert ps.filter(pl.col("pid") == 4151)["args"][0].startswith("python3 -m sglang")
    tree = ev.process_tree(ps, [4150])
    assert tree["pid"].to_list() == [4150, 4151, 4190, 4191, 5400]
    assert ev.process_tree(ps, [999999]).height == 0


def test_ss_listen_owners():
    df = ev.parse_ss_listen(_fx("ss-ltnp.txt"))
    assert df.select("local_address", "port", "process", "pid").rows() == [
        ("0.0.0.0", 30000, "python3", 4151),
        ("0.0.0.0", 22, "sshd", 812),
        ("127.0.0.1", 5000, "python3", 4190),
        ("127.0.0.1", 5000, "python3", 4191),
        ("127.0.0.1", 8080, None, None),
        ("[::]", 22, "sshd", 812),
    ]


def test_py_spy_dump():
    df = ev.parse_py_spy(_fx("py-spy.dump.txt"))
    top = ev.py_spy_top_frames(df)
    assert top.select("thread_name", "status", "function", "lineno").rows() == [
        ("MainThread", "idle", "synchronize", 985),
        ("Thread-1 (_watchdog)", "idle", "wait", 324),
        ("pin_memory", "active+gil", "_pin", 21),
    ]
    main = df.filter(pl.col("thread_name") == "MainThread")
    assert main["depth"].to_list() == [0, 1, 2, 3] and set(df["pid"]) == {4190}
    assert df.filter(pl.col("thread_id") == "4230")["function"].to_list() == ["wait", "wait"]


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=400))
def test_parsers_never_crash_on_any_text(text):
    for fn in (
        ev.parse_query_gpu,
        ev.parse_query_compute_apps,
        ev.parse_fuser,
        ev.parse_dmesg_xid,
        ev.parse_ps,
        ev.parse_ss_listen,
        ev.parse_py_spy,
    ):
        assert isinstance(fn(text), pl.DataFrame)
    gpus, procs = ev.parse_nvidia_smi(text)
    assert gpus.schema == pl.Schema(ev.GPU_SCHEMA)


# -- collect() on real hosts ------------------------------------------------------------------

SERVER = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(1); time.sleep(120)\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener(tmp_path):
    """A real process group of our own: a shell that starts a Python listener on a free port."""
    port = _free_port()
    script = tmp_path / "srv.py"
    script.write_text(SERVER)
    host = LocalHost()
    pgid = host.spawn(f"{sys.executable} {script} {port}; echo done")
    for _ in range(200):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    yield pgid, port
    host.run(f"kill -KILL -{pgid} 2>/dev/null; true", timeout=10)


def _ids(result: dict) -> list[str]:
    return [f["id"] for f in result["findings"]]


def test_collect_local_without_gpu_reports_missing_tools(listener, monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    pgid, port = listener
    res = evidence.collect(LocalHost(), pgid=pgid, port=port)
    json.dumps(res)  # JSON-friendly as returned
    assert res["commands"]["nvidia_smi"]["status"] == "missing"
    missing = [f for f in res["findings"] if f["id"] == "tool-missing"]
    assert "nvidia-smi: not installed on local" in [f["message"] for f in missing]
    owner = [f for f in res["findings"] if f["id"] == "port-owned-by-run"]
    assert len(owner) == 1 and owner[0]["port"] == port
    group = [f for f in res["findings"] if f["id"] == "run-processes"][0]
    assert pgid in group["pids"] and len(group["pids"]) == 2
    assert owner[0]["pid"] in group["pids"] and owner[0]["pid"] != pgid  # the python child
    assert "srv.py" in owner[0]["command"]
    assert {r["pid"] for r in res["tables"]["run_tree"]} >= set(group["pids"])


@pytest.fixture
def gpu_shim(tmp_path, monkeypatch):
    """nvidia-smi on PATH that prints the real H200 outputs with pid 417 replaced by $SHIM_PID."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "nvidia-smi"
    shim.write_text(
        "#!/bin/sh\n"
        f'[ -n "$SHIM_SLEEP" ] && sleep "$SHIM_SLEEP"\n'
        'case "$1" in\n'
        f"  --query-compute-apps*) f={FIX}/nvidia-smi.query-compute-apps.csv ;;\n"
        f"  --query-gpu*) f={FIX}/nvidia-smi.query-gpu.csv ;;\n"
        f"  *) f={FIX}/nvidia-smi.busy.txt ;;\n"
        "esac\n"
        'sed "s/ 417 / $SHIM_PID /; s/^417,/$SHIM_PID,/" "$f"\n'
    )
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return shim


def test_collect_names_gpu_holders_in_and_outside_the_run(listener, gpu_shim, monkeypatch):
    pgid, port = listener
    monkeypatch.setenv("SHIM_PID", str(os.getpid()))  # this pytest process: not in the run
    res = evidence.collect(LocalHost(), pgid=pgid, port=port)
    other = [f for f in res["findings"] if f["id"] == "gpu-held-by-other"]
    assert len(other) == 1 and other[0]["pid"] == os.getpid()
    assert other[0]["used_memory_mib"] == 20998 and "on GPU 0" in other[0]["message"]
    assert res["tables"]["gpus"][0]["memory_used_mib"] == 21007

    server_pid = next(
        p
        for p in [f for f in res["findings"] if f["id"] == "run-processes"][0]["pids"]
        if p != pgid
    )
    monkeypatch.setenv("SHIM_PID", str(server_pid))
    res = evidence.collect(LocalHost(), pgid=pgid, port=port)
    held = [f for f in res["findings"] if f["id"] == "gpu-held-by-run"]
    assert [f["pid"] for f in held] == [server_pid]


def test_collect_overall_deadline_bounds_a_hung_tool(gpu_shim, monkeypatch):
    monkeypatch.setenv("SHIM_PID", "417")
    monkeypatch.setenv("SHIM_SLEEP", "60")
    res = evidence.collect(LocalHost(), deadline=3)  # the shim sleeps 60 s per call
    assert res["commands"]["nvidia_smi"]["status"] == "timeout"
    assert "tool-timeout" in _ids(res)
    assert res["commands"]["ps"]["status"] == "skipped"


def test_collect_over_ssh(ssh_host, listener):
    pgid, port = listener
    res = evidence.collect(ssh_host, pgid=pgid, port=port, deadline=60)
    assert res["host"] == "sshtest"
    # the test sshd runs on this machine: same processes, no GPU
    assert res["commands"]["ps"]["status"] == "ok"
    assert res["commands"]["nvidia_smi"]["status"] in ("missing", "ok")
    owner = [f for f in res["findings"] if f["id"] == "port-owned-by-run"]
    assert len(owner) == 1 and owner[0]["port"] == port
    assert pgid in [f for f in res["findings"] if f["id"] == "run-processes"][0]["pids"]


def test_S06_an_output_over_its_cap_is_kept_whole_in_the_spill_dir(tmp_path, monkeypatch):
    big = evidence.Command("dmesg_big", "seq", "seq 1 200000", 20, 4096)
    monkeypatch.setattr(evidence, "COMMANDS", [big])
    spill = tmp_path / "evidence" / "launch1"
    res = evidence.collect(LocalHost(), spill_dir=str(spill), py_spy=False)
    rec = res["commands"]["dmesg_big"]
    full = "".join(f"{i}\n" for i in range(1, 200001))
    assert rec["status"] == "ok" and len(rec["stdout"]) == 4096  # the tail, in memory
    assert full.endswith(rec["stdout"])
    path = rec["stdout_spill"]
    assert path.startswith(str(spill)) and open(path).read() == full  # whole, on disk
    assert "stderr_spill" not in rec and "spill_error" not in rec
    # without a spill dir: only the tail, nothing written
    res = evidence.collect(LocalHost(), py_spy=False)
    assert "stdout_spill" not in res["commands"]["dmesg_big"]


# -- a live capture: forensics' own commands run on an H200 (scripts/gen_gpu_capture.py) ------

LIVE = FIX / "live"


def _live_commands() -> dict[str, dict]:
    """The command records as collect() makes them, from the captured stdout/stderr/rc."""
    rcs = dict(line.split(" rc=") for line in (LIVE / "rc.txt").read_text().split("\n") if line)
    out = {}
    for cmd in evidence.COMMANDS:
        rc = int(rcs[cmd.name])
        stdout = (LIVE / f"{cmd.name}.stdout").read_text()
        stderr = (LIVE / f"{cmd.name}.stderr").read_text()
        missing = rc == 127 and f"{cmd.tool}: not installed" in stderr
        status = "ok" if rc == 0 else ("missing" if missing else "failed")
        out[cmd.name] = {"command": cmd.script, "tool": cmd.tool, "status": status, "rc": rc,
                         "stdout": stdout, "stderr": stderr}  # fmt: skip
    return out


def test_live_h200_capture_names_the_runs_gpu_memory_and_the_other_holder():
    """On a real H200 (driver 580, CUDA 13.0), a process group of ours held 8 GiB and another
    process 4 GiB while forensics' exact evidence commands ran. The pure half of collect()
    (tables_of + findings_of) must tell them apart from those outputs alone."""
    pids = dict(kv.split("=") for kv in (LIVE / "pids.txt").read_text().split())
    run, other = int(pids["run_pgid"]), int(pids["other_pid"])
    commands = _live_commands()
    assert commands["nvidia_smi"]["status"] == "ok" and commands["ss"]["status"] == "missing"
    tables = evidence.tables_of(commands, pgid=run)
    gpus = tables["gpus"].to_dicts()
    assert len(gpus) == 1 and gpus[0]["memory_used_mib"] == 13523
    assert tables["query_gpu"]["memory_total"].to_list() == [143771]
    # this driver names the column `used_gpu_memory [MiB]` for the field asked as used_memory
    apps = ev.parse_query_compute_apps(commands["query_apps"]["stdout"]).to_dicts()
    assert [(a["pid"], a["used_memory_mib"]) for a in apps] == [(run, 8802), (other, 4706)]
    held = {r["pid"]: r["used_memory_mib"] for r in tables["gpu_processes"].to_dicts()}
    assert held == {run: 8802, other: 4706}
    assert set(tables["fuser"]["pid"].to_list()) == {run, other}
    assert run in tables["run_tree"]["pid"].to_list()
    assert other not in tables["run_tree"]["pid"].to_list()  # same parent, another group
    findings = evidence.findings_of("h200", commands, tables, pgid=run)
    by_id = {}
    for f in findings:
        by_id.setdefault(f["id"], []).append(f)
    assert [f["pid"] for f in by_id["gpu-held-by-run"]] == [run]
    assert [f["pid"] for f in by_id["gpu-held-by-other"]] == [other]
    assert by_id["gpu-held-by-other"][0]["used_memory_mib"] == 4706
    assert "ss: not installed on h200" in [f["message"] for f in by_id["tool-missing"]]
    assert "xid" not in by_id  # dmesg readable, no Xid lines on this host
