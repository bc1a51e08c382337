"""tests/plugins/leaks.py: a process a test leaves running fails the run, named with its test."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, procs_with

LEAKY = """
import subprocess


def test_leaves_a_sleep():
    subprocess.Popen(["sleep", "{marker}"], start_new_session=True)  # its own group, as a server


def test_cleans_up():
    p = subprocess.Popen(["sleep", "{marker}1"])
    p.kill()
    p.wait()
"""


def test_a_process_left_running_fails_the_run_names_its_test_and_is_killed(tmp_path, sleep_marker):
    (tmp_path / "test_leaky.py").write_text(LEAKY.format(marker=sleep_marker))
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "tests.plugins.leaks", "test_leaky.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "2 passed" in p.stdout, p.stdout + p.stderr
    assert p.returncode == 1, p.stdout  # the tests passed, the run did not
    report = p.stdout[p.stdout.index("processes left running by tests") :]
    assert f"`sleep {sleep_marker}` started by test_leaky.py::test_leaves_a_sleep" in report
    assert "test_cleans_up" not in report
    assert procs_with(f"sleep {sleep_marker}") == []  # killed by the check, not by the fixture
