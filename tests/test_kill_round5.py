"""Fifth round of the hidden-suite rehearsal (issue 14), class "kill at any moment": a SIGTERM
that lands while a command imports a module in a class body (`store repair` at 0.3 s: Python
3.11 wraps the KeyboardInterrupt raised in `__set_name__` into a RuntimeError) is the one line
`Interrupted.` and exit 130, never a traceback or an internal error."""

from __future__ import annotations

import subprocess
import sys

import pytest

from forensics.errors import interrupt_inside


def _wrapped() -> RuntimeError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise RuntimeError("Error calling __set_name__ on 'cached_property'") from ki
    except RuntimeError as exc:
        return exc


def test_interrupt_inside_follows_the_chain():
    assert interrupt_inside(_wrapped())
    assert interrupt_inside(KeyboardInterrupt())
    assert not interrupt_inside(RuntimeError("x"))
    assert not interrupt_inside(None)


def test_the_cli_says_interrupted_for_a_wrapped_interrupt(monkeypatch, capsys):
    import forensics.cli as cli_mod

    def boom(*a, **k):
        raise _wrapped()

    monkeypatch.setattr(cli_mod.cli, "main", boom)
    with pytest.raises(SystemExit) as exc:
        cli_mod.main(["runs"])
    assert exc.value.code == 130
    err = capsys.readouterr().err
    assert err.strip() == "Interrupted." and "internal error" not in err


def test_the_entry_point_says_interrupted_before_the_cli_handles_it(tmp_path):
    """A real process: the wrapped interrupt comes out of what cli.main does before its own
    handling (its streams' set-up, before its try)."""
    code = (
        "import forensics.entry as e, forensics.cli as c\n"
        "def g(*a):\n"
        "    try:\n"
        "        raise KeyboardInterrupt\n"
        "    except KeyboardInterrupt as ki:\n"
        "        raise RuntimeError('Error calling __set_name__') from ki\n"
        "c._tolerant_streams = g\n"
        "e.main(['runs'])\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True, text=True, env={"FORENSICS_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert p.returncode == 130, p.stderr
    assert p.stderr.strip() == "Interrupted."
