"""The one way forensics writes rich output for people: a console that never reads markup.

Run names, paths, log lines and kill patterns are data, and data holds brackets
(``[s]glang``, a log named ``[bold]x[s].log``); rich would take them for markup and swallow
them. Every console is made here with ``markup=False``; styles go through ``style=`` or
``rich.text.Text``, never through ``[bold]…[/bold]`` in a string (tests/test_cli_output.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def console(**kwargs: Any) -> Console:
    """A rich Console for people's output, markup off (``stderr=True``, ``width=`` as rich).
    A reader that went away (``| head -1``) ends the command as for every other output
    (forensics.cli.main: exit 0), not with rich's own ``SystemExit(1)``."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return _Console(markup=False, **kwargs)
