"""Frames of the server's teardown: signal handlers and process-tree kills (rows of
forensics.frames.FRAMES). A traceback raised there happened while the server was already
going down (after the real failure, or on a shutdown request): the classifier never takes it
as the cause (``ROUTINE_CONTEXT`` ``teardown``)."""

from __future__ import annotations

from typing import Any

TEARDOWN: list[dict[str, Any]] = [
    {
        "func": "kill_child_process",
        "phase": "teardown",
        "where": "utils: kill the server's children (older name of kill_process_tree)",
        "seen": "0.2.15 0.3.6",
    },
    {
        "func": "kill_parent_process",
        "phase": "teardown",
        "where": "utils: a failed child kills its parent (the whole server)",
        "seen": "0.1.24 0.2.15 0.3.6",
    },
    {
        "func": "kill_process_tree",
        "phase": "teardown",
        "where": "utils: kill a process and its children (SIGQUIT / shutdown paths)",
        "seen": "0.4.0 0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "kill_itself_when_parent_died",
        "phase": "teardown",
        "where": "utils: a child kills itself when its parent is gone",
        "seen": "0.4.6 0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "sigterm_handler",
        "phase": "teardown",
        "where": "SIGTERM handler (tokenizer manager's SignalHandler, engine launch)",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "running_phase_sigquit_handler",
        "phase": "teardown",
        "where": "SIGQUIT handler while serving (a child failed)",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
    {
        "func": "launch_phase_sigquit_handler",
        "phase": "teardown",
        "where": "SIGQUIT handler during launch (a child failed)",
        "seen": "0.5.2 0.5.9 0.5.23",
    },
]
