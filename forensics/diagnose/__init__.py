"""Diagnosis reports: in which phase a run died, why, the evidence, and what to try next.

``diagnose(store, match)`` finds runs by name fragment (newest first) and builds one report
each (``report``): the classifier's verdict (phase, hung, signature, evidence as file:line +
text), the startup timeline compared with the closest successful run of a similar
configuration of the same experiment (``compare``), what differs in the configuration from
runs that worked, the explanation and next steps.

A log that does not exist is itself evidence (``missing``): the launch never got as far as the
server writing its first line. A log named by ``--log`` is read where it lives (``location``);
a fragment nothing was ingested for names a log by the naming convention (``guess``).
``relaunch`` replays a launch under the journal; ``counts`` backs ``forensics signatures``.
"""

from __future__ import annotations

import shlex
from typing import Any

from forensics.diagnose.compare import CONFIG_KEYS, SIMILARITY, compare
from forensics.diagnose.counts import signature_counts
from forensics.diagnose.guess import _guessed_report, guess_logs
from forensics.diagnose.location import (
    REMOTE_LOG_MAX,
    _absent,
    _diagnose_on,
    classify_location,
    classify_remote,
    log_location,
)
from forensics.diagnose.missing import (
    MISSING_LOG_CAUSES,
    _chain_of,
    _find_launches,
    _find_recipes,
    _launch_report,
    _launches,
    _recipe_report,
    missing_log_report,
)
from forensics.diagnose.relaunch import relaunch
from forensics.diagnose.report import render_text, run_report
from forensics.errors import RunNotFound
from forensics.runs import find_runs, runs_table

__all__ = [
    "CONFIG_KEYS",
    "MISSING_LOG_CAUSES",
    "REMOTE_LOG_MAX",
    "SIMILARITY",
    "classify_location",
    "classify_remote",
    "compare",
    "diagnose",
    "guess_logs",
    "log_location",
    "missing_log_report",
    "relaunch",
    "render_text",
    "run_report",
    "signature_counts",
]


def diagnose(
    store, match: str, *, log: str | None = None, host: str | None = None
) -> list[dict[str, Any]]:
    """One report per matching run (newest first); missing logs are diagnosed as such.

    ``log``: a local path, ``NAME:/path`` or ``ssh://user@host[:port]/path``; ``host`` a config
    name for a plain path (it and a prefix that name different hosts: UsageError).
    """
    if log is not None:
        h, path = log_location(log, host)
        if _absent(h, path):
            launch = next(iter(_find_launches(store, match)), None)
            chain = _chain_of(launch)
            return [missing_log_report(match, path, chain=chain, host=h, launch=launch, asked=True)]
        return _diagnose_on(h, path, match)
    launches = _find_launches(store, match)
    table = runs_table(store)
    try:
        hits = find_runs(store, match, table=table)
    except RunNotFound as exc:
        reports = [_launch_report(store, la) for la in launches]
        reports += [_recipe_report(r) for r in _find_recipes(match)] if not launches else []
        reports = [r for r in reports if r is not None]
        if reports:
            return reports
        names = []
        for la in _launches(store).to_dicts() if not _launches(store).is_empty() else []:
            names.append(la.get("name"))
        message = exc.message
        if names:
            message += f"; launches: {', '.join(sorted(set(n for n in names if n))[:12])}"
        guesses = guess_logs(table, match)
        if len(guesses) == 1:
            return _guessed_report(guesses[0], match, message)
        if guesses:
            shown = ", ".join(g["where"] for g in guesses[:12])
            raise RunNotFound(
                f"{message}; by the log-naming convention {match!r} could be any of: {shown}",
                hint=f"name one: forensics diagnose {match} --log "
                + shlex.quote(guesses[0]["where"]),
            ) from None
        if message != exc.message:
            raise RunNotFound(message, hint=exc.hint) from None
        raise
    reports = [run_report(store, r, table) for r in hits.to_dicts()]
    # recorded launches of that name whose log never appeared
    seen = {r["path"] for r in reports}
    for la in launches:
        if la.get("log_path") and la["log_path"] not in seen:
            rep = _launch_report(store, la)
            if rep is not None:
                reports.append(rep)
    return reports
