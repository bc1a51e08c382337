"""Journaled launch and relaunch: run a recipe step by step so that every step leaves evidence.

Public API (``forensics diagnose NAME --relaunch`` calls ``relaunch``)::

    relaunch(store, name, *, host=None, recipe=None, safe_patterns=False, deadline=None,
             step_deadline=None, sim=None, progress=None, keep_running=True) -> dict
        Replay the launch NAME (its recipe from ``recipe``, else the store's ``launches``, else
        ``[recipes.NAME]`` in the config) on its host, the way the user's chain runs (same
        operators), under a journaling wrapper; then diagnose it. ``host``: a config host name
        (default: the recipe's). ``safe_patterns``: replace broad kill patterns by a per-replay
        token (see ``safe_chain``). ``deadline``: seconds for /health (default: the recipe's).
        ``sim``: ``{"speed": 200, "fail": "capture-oom", "port": 31234, "python": ...}`` puts
        the simulated server in place of SGLang. ``progress(event: dict)`` gets live events
        (``{"event": "step"|"stage"|"health"|"status", ...}``).
        Returns the diagnosis dict below plus ``launch_id, name, host, status, log_path,
        journal_path, findings (lint), stages, evidence_collected, pgid, port, token``.

    diagnose_journal(frame_or_path) -> dict
        ``{"cause", "phase", "step", "explanation", "evidence" (journal rows), "next_steps"}``;
        ``cause`` is a lint id (cleanup-self-kill, cleanup-hang, and-after-pkill,
        log-dir-missing, ...) or None when the journal shows no failure.

    launch(store, recipe, *, host=None, deadline=None, progress=None, sim=None) -> dict
        The safe way to start a run: registered first, previous run of that name stopped by its
        process group, log directory created, own process group + pid file, health wait.

    stop(store, name, *, grace_s=10.0) -> dict
        TERM to the run's process group, grace, KILL; verifies the pid's start time first.

Tables written: ``launches`` (one row per status change; ``launches_frame`` keeps the latest per
launch_id) and ``journal`` (parsed journal lines, see parsers/journal.py).

Modules, one noun each: ``records`` (the store's launch rows, NAME -> launch or recipe),
``safe`` (safe patterns), ``wrapper`` (the journaling shell scripts), ``hostinfo`` (what is asked
of the host), ``readiness`` (health streak, verified ready), ``run`` (a plan run in named steps),
``causes`` (why it failed: the JOURNAL_CAUSES and LAUNCH_CAUSES tables), ``start`` (launch,
relaunch), ``stop`` (stop, recheck).
"""

from forensics.errors import LaunchFailed
from forensics.kills import parse_kill, pattern_regex
from forensics.launcher.causes import (
    JOURNAL_CAUSES,
    LAUNCH_CAUSES,
    CauseContext,
    LaunchCause,
    diagnose_journal,
    launch_cause,
    match_log,
)
from forensics.launcher.hostinfo import probe
from forensics.launcher.readiness import (
    GENERATE_PROBE_TIMEOUT_S,
    HEALTH_OK_STREAK,
    http_status,
    ready_round,
    verify_ready,
)
from forensics.launcher.records import (
    UNSETTLED,
    find_launch,
    find_launch_exact,
    launches_frame,
    record,
    record_journal,
    resolve_recipe,
)
from forensics.launcher.run import Plan, Progress, execute
from forensics.launcher.safe import new_token, safe_chain
from forensics.launcher.start import BLOCKING, launch, relaunch
from forensics.launcher.stop import STOP_GRACE_S, kill_group, recheck, stop, wait_stopped
from forensics.launcher.wrapper import build_supervisor, build_wrapper
from forensics.tables import LAUNCH_SCHEMA

__all__ = [
    "BLOCKING",
    "GENERATE_PROBE_TIMEOUT_S",
    "HEALTH_OK_STREAK",
    "JOURNAL_CAUSES",
    "LAUNCH_CAUSES",
    "LAUNCH_SCHEMA",
    "STOP_GRACE_S",
    "UNSETTLED",
    "CauseContext",
    "LaunchCause",
    "LaunchFailed",
    "Plan",
    "Progress",
    "build_supervisor",
    "build_wrapper",
    "diagnose_journal",
    "execute",
    "find_launch",
    "find_launch_exact",
    "http_status",
    "kill_group",
    "launch",
    "launch_cause",
    "launches_frame",
    "match_log",
    "new_token",
    "parse_kill",
    "pattern_regex",
    "probe",
    "ready_round",
    "recheck",
    "record",
    "record_journal",
    "relaunch",
    "resolve_recipe",
    "safe_chain",
    "stop",
    "verify_ready",
    "wait_stopped",
]
