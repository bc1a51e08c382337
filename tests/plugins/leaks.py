"""Processes a test started and left running, found at the end of the session and reported.

Every pytest process (each xdist worker) puts a token of its own in its environment
(``FORENSICS_TEST_SESSION``) and, while a test runs, the test's id (``FORENSICS_TEST_NODE``):
whatever a test starts inherits both (a launch's server, a simulator, ``sleep`` under a killed
shell, Slurm's daemons). When the session ends, after every fixture's finalizer ran, a process
of this machine that still carries this process's token was left behind: it is listed with
the test that started it, killed, and the run fails (exit 1, the list in the summary). A child
started with an environment of its own (``env={...}`` without ``os.environ``) or by sshd
(which gives the commands it runs a fresh one) carries no token: this check cannot see those.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

SESSION_VAR = "FORENSICS_TEST_SESSION"
NODE_VAR = "FORENSICS_TEST_NODE"
GRACE_S = 5.0  # a process being stopped when the session ended may take a moment to go
_found: list[str] = []  # the report, gathered in the process that prints the summary


def pytest_configure(config: pytest.Config) -> None:
    os.environ[SESSION_VAR] = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    os.environ[NODE_VAR] = ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    os.environ[NODE_VAR] = item.nodeid
    try:
        yield
    finally:
        os.environ[NODE_VAR] = ""


def _environ(pid: int) -> dict[bytes, bytes]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, a zombie, or not ours to read
        return {}
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:160]


def left_behind(token: str) -> dict[int, str]:
    """pid -> the test that started it, for every live process carrying ``token``."""
    mine = {os.getpid()}
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in mine:
            continue
        env = _environ(int(d.name))
        if env.get(SESSION_VAR.encode()) == token.encode():
            out[int(d.name)] = env.get(NODE_VAR.encode(), b"").decode(errors="replace")
    return out


def pytest_sessionfinish(session: pytest.Session) -> None:
    token = os.environ.get(SESSION_VAR, "")
    if not token or not Path("/proc/self/environ").exists():
        return
    end = time.monotonic() + GRACE_S
    left = left_behind(token)
    while left and time.monotonic() < end:
        time.sleep(0.2)
        left = left_behind(token)
    lines = [
        f"pid {pid} `{_cmdline(pid)}` started by {node or 'no test'}" for pid, node in left.items()
    ]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports (pytest_testnodedown)
        workeroutput["leaked_processes"] = lines
    else:
        _found.extend(lines)
    if lines or _found:  # _found: what the workers reported (xdist's controller)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001 - xdist's WorkerController
    _found.extend(getattr(node, "workeroutput", {}).get("leaked_processes", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ANN001
    if not _found:
        return
    terminalreporter.section("processes left running by tests (killed)", red=True)
    for line in _found:
        terminalreporter.line(line)
