"""Shared test setup. Fixture plugins live in tests/plugins/ (sshd, simulator, ...)."""

from __future__ import annotations

import importlib.util
import os
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


def env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")
