"""Shared test setup. Fixture plugins live in tests/plugins/ (sshd, simulator, ...)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
# ../shared beside the checkout (CI), or FORENSICS_SHARED (a git worktree elsewhere)
SHARED = Path(os.environ.get("FORENSICS_SHARED") or ROOT.parent / "shared")

# Each plugin module is optional while the suite is being built; all of them are loaded.
pytest_plugins = [
    name
    for name in (
        "tests.plugins.sshd",
        "tests.plugins.sim",
        "tests.plugins.faultserver",
        "tests.plugins.slurm",
        "tests.plugins.leaks",
        "tests.plugins.order",
    )
    if importlib.util.find_spec(name) is not None
]


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own FORENSICS_HOME; nothing touches the user's store."""
    home = tmp_path / "forensics-home"
    monkeypatch.setenv("FORENSICS_HOME", str(home))
    monkeypatch.delenv("FORENSICS_DEBUG", raising=False)
    # pytest-xdist's workers set COLUMNS=80 (LINES=24): the output of a pipe would be wrapped
    # as a terminal's (forensics.terminal.prose_width); a test that means a width sets it
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    monkeypatch.chdir(tmp_path)
    yield


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.exists():
        pytest.fail(f"{SHARED} is missing: the suite needs ../shared beside the checkout")
    return SHARED


def procs_with(text: str) -> list[int]:
    """The pids of the live processes whose command line (its arguments joined by spaces)
    holds ``text``. The arguments are NUL-separated in /proc: matched as they were, ``sleep
    1000.N`` found only a shell running it, never the sleep itself."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if text.encode() in cmd:  # the arguments joined by spaces, as `ps` shows them
            found.append(int(entry))
    return found


@pytest.fixture
def sleep_marker() -> str:
    """A unique argument for the ``sleep`` a test starts (``1000.NNNNNN``: ~17 minutes) and
    checks is gone; whatever still sleeps with it when the test ends is killed, also when the
    test failed (a sleep started over SSH has a fresh environment: tests/plugins/leaks.py
    cannot see it)."""
    marker = f"1000.{uuid.uuid4().int % 10**6:06d}"
    yield marker
    for pid in procs_with(f"sleep {marker}"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def closing_port(*, banner: bool, reset: bool):
    """A listening socket on 127.0.0.1 that takes every connection, sends an SSH banner (or
    nothing) and closes it: plainly, or with a reset (SO_LINGER 0). Close it to stop."""
    import socket
    import struct
    import threading

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            if banner:
                conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")
            if reset:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def assert_prints(code: str, words: list[str]) -> None:
    """``code`` run by a fresh interpreter (what a process imports at its start, measured
    alone) prints ``words``, and exits 0."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == words, out.stdout + out.stderr


def require_compiled() -> None:
    """Skip where the parser's compiled line reader was not built (no C compiler at install);
    CI sets FORENSICS_REQUIRE_NATIVE=1, so there its absence fails."""
    from forensics_parsers.sglang import native

    if native._linescan is None:
        if env_flag("FORENSICS_REQUIRE_NATIVE"):
            pytest.fail("the compiled line reader (forensics_parsers.sglang._linescan) is absent")
        pytest.skip("the compiled line reader is not built")


@pytest.fixture(params=["compiled", "pure"])
def reader(request):
    """The line reader a parse takes: the compiled one (parsers/sglang/native.py; skipped where
    it is not built) or the pure one. A module runs every test over both with
    ``pytestmark = pytest.mark.usefixtures("reader")``. A plain set and restore, not
    monkeypatch: hypothesis runs many examples per call of a function-scoped fixture."""
    from forensics_parsers.sglang import native

    if request.param == "compiled":
        require_compiled()
    was = native.ENABLED
    native.ENABLED = request.param == "compiled"
    yield request.param
    native.ENABLED = was


def as_bound_by_permissions() -> list[str]:
    """The command prefix under which file modes bind (root bypasses them): none for a user,
    root without CAP_DAC_OVERRIDE through setpriv (the tests of read-only homes and stores)."""
    import shutil

    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv: a read-only folder does not bind root")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]
