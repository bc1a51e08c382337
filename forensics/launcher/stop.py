"""Ending a run and looking at it again: TERM/KILL to its process group only (never a
pattern), after checking that the pid still belongs to it; re-checking a launch whose outcome
was not seen (S07)."""

from __future__ import annotations

import contextlib
import shlex
import time
from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.errors import DeadlineExceeded, ForensicsError, RunNotFound, UsageError
from forensics.launcher import records
from forensics.launcher.hostinfo import group_args, host_for, probe, proc_start, read_journal
from forensics.launcher.readiness import ready_round

if TYPE_CHECKING:
    from forensics.hosts import Host
    from forensics.store import Store

STOP_GRACE_S = 10.0


def kill_group(host: Host, pgid: int, pid_start: int | None, grace_s: float) -> str:
    """TERM the group, wait up to ``grace_s``, KILL what is left. Returns what happened."""
    g = int(pgid)
    if g <= 1:
        raise UsageError(f"refusing to signal process group {g}", hint="check the launch record")
    if pid_start is not None:
        now = proc_start(host, g)
        if now is not None and now != pid_start:
            return "pid-reused"  # S16: the pid now belongs to another process; touch nothing
    alive = f"kill -0 -{g} 2>/dev/null"
    res = host.run(f"kill -TERM -{g} 2>/dev/null && echo sent", timeout=15)
    if "sent" not in res.text:
        return "not-running"
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        if host.run(f"{alive} && echo alive", timeout=10).text.strip() != "alive":
            return "terminated"
        time.sleep(0.2)
    host.run(f"kill -KILL -{g} 2>/dev/null; true", timeout=10)
    return "killed"


def stop(store: Store, name: str, *, grace_s: float = STOP_GRACE_S) -> dict[str, Any]:
    """End a run started by ``launch``/``relaunch``: its process group only (never a pattern)."""
    row = records.find_launch(store, name)
    if row is None:
        raise RunNotFound(f"no launch named {name!r}", hint="see forensics launch --list")
    pgid = row.get("pgid")
    if not pgid and row.get("status") in records.UNSETTLED and row.get("journal_path"):
        # the launch was interrupted (Ctrl-C, a killed CLI) before it recorded the group:
        # the journal the server's monitor wrote names it
        pgid = _pgid_from_journal(row)
    if not pgid:
        outcome = "no-process-group"
    else:
        h = host_for(None if row["host"] == "local" else row["host"])
        outcome = kill_group(h, int(pgid), row.get("pid_start"), grace_s)
        with contextlib.suppress(ForensicsError):
            if row.get("pid_path"):
                h.run(f"rm -f {shlex.quote(row['pid_path'])}", timeout=10)
    status = "stopped" if outcome in ("terminated", "killed", "not-running") else row["status"]
    records.record(store, {**row, "status": status})
    return {
        "launch_id": row["launch_id"],
        "name": row["name"],
        "host": row["host"],
        "pgid": pgid,
        "outcome": outcome,
        "status": status,
    }


def recheck(store: Store, name: str) -> dict[str, Any]:
    """Look again at a launch whose outcome was not seen (S07: the connection dropped).

    The process group comes from the record, else the pid file the supervisor wrote on the
    host, else the journal; it counts only while it still runs a process naming the launch's
    log (S16). Alive and verified ready (H06/H11, one round) -> ``ready``; alive otherwise ->
    ``running``; gone -> ``exited``. The new status is recorded. Returns what was seen.
    """
    row = records.find_launch(store, name)
    if row is None:
        raise RunNotFound(f"no launch named {name!r}", hint="see forensics launch --list")
    h = host_for(None if row["host"] == "local" else row["host"])
    info = probe(h)
    pgid, source = row.get("pgid"), "record"
    if not pgid and row.get("pid_path"):
        res = h.run(f"cat {shlex.quote(row['pid_path'])} 2>/dev/null", timeout=10)
        text = res.text.strip()
        pgid, source = (int(text), "pid file") if text.isdigit() else (None, source)
    if not pgid and row.get("journal_path"):
        pgid, source = _pgid_from_journal(row), "journal"
    alive = False
    if pgid and int(pgid) > 1:
        text, marks = group_args(h, int(pgid)), _launch_marks(row)
        alive = bool(text.strip()) and (not marks or any(m in text for m in marks))
    health = problem = None
    if alive and row.get("health_url"):
        health, streak, problem, _ = ready_round(h, row["health_url"], int(pgid), info["has"])
        if not streak:
            problem = f"/health answered {health}" if health else "/health did not answer"
    status = ("ready" if problem is None and health == 200 else "running") if alive else "exited"
    cause = None if status == "ready" else (problem if alive else "the process group is gone")
    records.record(
        store,
        {**row, "status": status, "pgid": pgid if alive else row.get("pgid"), "cause": cause},
    )
    return {
        "launch_id": row["launch_id"],
        "name": row["name"],
        "host": row["host"],
        "previous": row["status"],
        "status": status,
        "pgid": pgid,
        "pgid_from": source if pgid else None,
        "health": health,
        "cause": cause,
    }


def _pgid_from_journal(row: dict[str, Any]) -> int | None:
    """The server's process group from the launch journal, if that group still runs our chain.

    The group must still hold a process whose command line names the launch's log (or its
    token): a pgid reused by someone else's process is never signalled.
    """
    h = host_for(None if row["host"] == "local" else row["host"])
    frame = read_journal(h, row["journal_path"], row["launch_id"])
    srows = frame.filter(pl.col("event") == "server")
    if srows.is_empty():
        return None
    g = srows["pgid"][-1] or srows["pid"][-1]
    if not g or int(g) <= 1:
        return None
    text = group_args(h, int(g), allow_timeout=True)
    if not any(m in text for m in _launch_marks(row)):
        return None
    return int(g)


def _launch_marks(row: dict[str, Any]) -> list[str]:
    """What a process of the launch has on its command line: its log path, its token (S16)."""
    return [m for m in (row.get("log_path"), row.get("token")) if m]


def wait_stopped(host: Host, pgid: int, timeout: float = 10.0) -> bool:
    """Whether the group is gone within ``timeout`` seconds (tests and callers)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        res = host.run(f"kill -0 -{int(pgid)} 2>/dev/null && echo alive", timeout=10)
        if res.text.strip() != "alive":
            return True
        time.sleep(0.1)
    raise DeadlineExceeded(f"process group {pgid} still alive after {timeout} s", hint="stop it")
