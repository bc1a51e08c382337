"""The CLI reference in docs/ is generated from --help and must match the code."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_cli_reference_matches_help():
    from scripts.gen_cli_docs import render

    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == render(), "docs/cli.md drifted from the CLI: run `make docs`"


def test_help_is_fast_to_import_and_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "forensics", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for cmd in ("ingest", "runs", "show"):
        assert cmd in out
    # heavy libraries are imported inside the functions that need them
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, forensics.cli; "
            "print(sorted(m for m in ('sklearn','matplotlib','paramiko','aiohttp') if m in sys.modules))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert probe == "[]", probe


def test_a_command_imports_its_group_module_alone_and_listing_imports_all(monkeypatch):
    """forensics.cli.COMMAND_MODULES: a command's module is imported when it is looked up
    (its commands guarded against empty values as before); listing them imports every module,
    in the table's order; a module that registers other commands than the table says fails."""
    import click

    from forensics import cli as cli_mod

    probe = (
        "import sys; from forensics.cli import COMMAND_MODULES, cli; c = cli.commands['ingest']; "
        "print(sorted(m for m in COMMAND_MODULES if m in sys.modules), c.callback.refuses_empty)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["['forensics.cli_ingest']", "True"]
    group = click.Group()
    commands = cli_mod._Commands(group)
    group.commands = commands
    table = [name for names in cli_mod.COMMAND_MODULES.values() for name in names]
    assert list(commands) == table
    leaves = [commands[n] for n in table if not isinstance(commands[n], click.Group)]
    assert leaves and all(c.callback.refuses_empty for c in leaves)
    monkeypatch.setitem(cli_mod.COMMAND_MODULES, "forensics.cli_sim", ("sim", "simulate"))
    group = click.Group()
    group.commands = cli_mod._Commands(group)
    with pytest.raises(RuntimeError, match="forensics.cli_sim registers"):
        group.commands["simulate"]
