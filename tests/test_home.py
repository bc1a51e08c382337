"""Issue 12, "one home that honours --store for all state": `--store DIR` puts every file
forensics writes under DIR (store, models, known_hosts, evidence, launch logs); the config is
still read where docs/hosts.md says."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from click.testing import CliRunner

from forensics.cli import cli
from forensics.home import default_home, home, using
from forensics.hosts import config_paths, forensics_home, project_known_hosts
from forensics.store import default_root


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_every_state_path_follows_the_home(tmp_path):
    default = Path(os.environ["FORENSICS_HOME"])  # conftest: a fresh folder per test
    assert home() == default_home() == default
    with using(tmp_path / "B"):
        assert home() == forensics_home() == default_root() == tmp_path / "B"
        assert project_known_hosts() == tmp_path / "B" / "known_hosts"
        assert config_paths() == [Path("forensics.toml"), default / "config.toml"]  # read only
    assert home() == default  # the override ends with the block


def test_store_dir_holds_everything_a_launch_and_a_retrain_write(tmp_path):
    default = Path(os.environ["FORENSICS_HOME"])
    other = tmp_path / "B"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    runner = CliRunner()
    res = runner.invoke(
        cli,
        ["--store", str(other), "launch", "--sim", "--name", "homecheck", "--port", str(port),
         "--sim-speed", "200", "--deadline", "30", "--json", "--",
         "--model-path", "sim://kimi-k2.5"],
    )  # fmt: skip
    try:
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["log_path"] == str(other / "logs" / "homecheck.log")
    finally:
        stop = runner.invoke(cli, ["--store", str(other), "stop", "homecheck"])
    assert stop.exit_code == 0, stop.output
    res = runner.invoke(cli, ["--store", str(other), "classify", "train", "--json"])
    assert res.exit_code == 0, res.output
    written = _files(other)
    assert "logs/homecheck.log" in written and "manifest.json" in written
    assert "models/phase-model.json" in written
    assert not default.exists() or _files(default) == []  # nothing went to the default home
