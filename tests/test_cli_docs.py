"""The CLI reference in docs/ is generated from --help and must match the code."""

import subprocess
import sys

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
