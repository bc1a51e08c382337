"""The exit-code contract of docs/exit-codes.md, code by code, through the real CLI process.

Each case also checks the one-line `Error: ...` form (no traceback).
"""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import FIXTURES


def fx(*args, timeout=120, **kw):
    return subprocess.run(
        [sys.executable, "-m", "forensics", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        **kw,
    )


def one_line_error(p):
    err = p.stderr.strip().splitlines()
    assert err and err[-1].startswith("Error: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout


def test_0_ok():
    p = fx("ingest", str(FIXTURES / "sglang_baseline.log"))
    assert p.returncode == 0, p.stderr
    assert fx("runs", "--json").returncode == 0


def test_2_usage_error():
    p = fx("ingest", "--no-such-flag", "x.log")
    assert p.returncode == 2
    assert "No such option" in p.stderr
    p = fx("ingest", str(FIXTURES / "sglang_baseline.log"), "--name-pattern", "(unclosed")
    assert p.returncode == 2
    one_line_error(p)


def test_3_input_not_found():
    p = fx("ingest", "/nonexistent/sglang_eagle3_cg_2step.log")
    assert p.returncode == 3
    one_line_error(p)
    assert "no such file" in p.stderr and "--relaunch" in p.stderr
    p = fx("show", "nothing-matches-this")
    assert p.returncode == 3
    one_line_error(p)


def test_4_partial_bench_failures(faultserver):
    p = fx("bench", faultserver.url("h01_500"), "--num-prompts", "3", "--warmup", "0", "--no-store")
    assert p.returncode == 4, p.stdout + p.stderr


def test_5_remote_unreachable():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = fx("ingest", f"ssh://root@127.0.0.1:{port}/var/log/x.log")
    assert p.returncode == 5
    one_line_error(p)
    assert f"127.0.0.1:{port}" in p.stderr


def test_6_deadline_health_wait(tmp_path):
    """A server that hangs in load never answers /health: the launch gives up at its deadline."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = fx(
        "launch", "--sim", "--name", "sglang_hang_load", "--log", str(tmp_path / "hang.log"),
        "--port", str(port), "--deadline", "3", "--",
        "--model-path", "sim://m", "--sim-hang", "load",
    )  # fmt: skip
    assert p.returncode == 6, p.stdout + p.stderr
    stop = fx("stop", "sglang_hang_load", "--grace", "2")
    assert stop.returncode == 0, stop.stderr


def test_7_store_locked(tmp_path):
    import fcntl

    from forensics.store import Store

    store = Store.open(os.environ["FORENSICS_HOME"])
    fd = os.open(store.root / "store.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        p = fx("ingest", str(FIXTURES / "sglang_baseline.log"), "--lock-timeout", "0.5")
    finally:
        os.close(fd)
    assert p.returncode == 7
    one_line_error(p)


@pytest.mark.parametrize("sig", [signal.SIGINT])
def test_130_interrupted(faultserver, sig):
    proc = subprocess.Popen(
        [sys.executable, "-m", "forensics", "bench", faultserver.url("slow"), "--num-prompts", "50",
         "--warmup", "0", "--no-store"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    time.sleep(2.0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err
