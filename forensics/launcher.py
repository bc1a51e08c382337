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
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import posixpath
import re
import secrets
import shlex
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.errors import (
    DeadlineExceeded,
    ForensicsError,
    HostUnreachable,
    LaunchFailed,
    RemoteError,
    RunNotFound,
    UsageError,
)
from forensics.lint import (
    lint,
    mass_kills,
    parse_kill,
    pattern_regex,
    self_kill_match,
    step_kills,
    syntax_finding,
)
from forensics.recipe import (
    Recipe,
    load_recipes,
    rewrite_steps,
    server_step,
    step_kind,
    valid_name,
    with_simulator,
)
from forensics.tables import LAUNCH_SCHEMA  # declared with every table of the store
from forensics_parsers.journal import parse_journal
from forensics_parsers.sglang import stage_of
from forensics_parsers.shell import Chain, Step, launching_command_line, parse_chain

if TYPE_CHECKING:
    from forensics.hosts import Host
    from forensics.store import Store

Progress = Callable[[dict[str, Any]], None]

KILL_AFTER_S = 2  # timeout -k: SIGKILL this long after the deadline's SIGTERM
POLL_S = 0.15
HEALTH_POLL_S = 0.5
# H06/H11: ready = this many 200s in a row from /health (each probe with its own timeout), then
# the server's process group alive and a 1-token /generate answered: /health alone is not trusted
HEALTH_OK_STREAK = 3
HEALTH_CONFIRM_S = 0.2  # between the probes of a streak
HEALTH_PROBE_TIMEOUT_S = 5.0
GENERATE_PROBE_TIMEOUT_S = 30.0
STOP_GRACE_S = 10.0
# Launch states whose process group may still run unrecorded (Ctrl-C during the health wait,
# a connection lost during it).
UNSETTLED = ("registered", "running", "interrupted", "unknown")
TAIL_BYTES = 2000
# lint findings that stop `forensics launch` before anything runs (a replay runs the chain as
# typed, so only disk-full stops it: the other findings are what it comes to observe)
BLOCKING = ("port-in-use", "disk-full")

# Programs run inline in the wrapper shell (they change the shell's own state).
INLINE_PROGRAMS = {"cd", "export", "set", "umask", "ulimit", "source", ".", "unset", "pushd"}


def _now() -> dt.datetime:
    return dt.datetime.now()


# --------------------------------------------------------------------------- the store


def launches_frame(store: Store) -> pl.DataFrame:
    """One row per launch (its latest status), oldest first."""
    df = store.table("launches")
    if df.is_empty():
        return pl.DataFrame(schema=LAUNCH_SCHEMA)
    return (
        df.sort("updated_at")
        .group_by("launch_id", maintain_order=True)
        .last()
        .sort("started_at")
        .select([c for c in LAUNCH_SCHEMA if c in df.columns])
    )


def _record(store: Store, row: dict[str, Any]) -> None:
    row = {**row, "updated_at": _now()}
    full = {k: row.get(k) for k in LAUNCH_SCHEMA}
    with store.transaction() as tx:
        tx.append("launches", pl.DataFrame([full], schema=LAUNCH_SCHEMA))


def _record_journal(store: Store, frame: pl.DataFrame) -> None:
    if frame.is_empty():
        return
    with store.transaction() as tx:
        tx.append("journal", frame)


def _match(names: list[str], query: str) -> list[str]:
    if query in names:
        return [query]
    found = [n for n in names if n.endswith("_" + query) or n.endswith("-" + query)]
    if not found:
        found = [n for n in names if query in n]
    return sorted(set(found))


def find_launch(store: Store, name: str) -> dict[str, Any] | None:
    """The latest launch whose name is, ends with ``_name``, or contains ``name``."""
    df = launches_frame(store)
    if df.is_empty():
        return None
    names = _match(df["name"].unique().to_list(), name)
    if len(names) > 1:
        raise UsageError(
            f"{name!r} matches several launches: {', '.join(names[:8])}",
            hint="give the full name",
        )
    if not names:
        return None
    return df.filter(pl.col("name") == names[0]).row(-1, named=True)


def resolve_recipe(store: Store, name: str) -> Recipe:
    """The recipe of NAME: the latest launch in the store, else ``[recipes.NAME]``."""
    row = find_launch(store, name)
    if row is not None and row.get("recipe"):
        return Recipe.from_json(row["recipe"])
    recipes = load_recipes()
    names = _match(list(recipes), name)
    if len(names) == 1:
        return recipes[names[0]]
    if len(names) > 1:
        raise UsageError(f"{name!r} matches recipes {', '.join(names)}", hint="give the full name")
    raise RunNotFound(
        f"no launch or recipe named {name!r}",
        hint="pass the chain you ran: forensics launch --shell '...' --replay, or add "
        f"[recipes.{name}] to forensics.toml",
    )


# --------------------------------------------------------------------------- safe patterns


def new_token() -> str:
    """A per-replay marker: nothing else on the host has it in its command line."""
    return "fxr" + secrets.token_hex(6)


def safe_chain(chain: Chain, token: str, marker: str, shell: str = "bash") -> str:
    """The chain with broad kill patterns replaced by the per-replay ``token``.

    A ``pkill -f``/``pgrep -f`` pattern that matches the launching shell's command line becomes
    ``token`` (which the replayed chain contains, so the self-kill is kept; the simulated server
    carries it too via ``--sim-tag``); one that does not becomes a pattern nothing matches.
    Name patterns (``killall python``, ``pkill python3``) become the token's first 15 chars (no
    process has that name). ``fuser -k /dev/nvidia*`` targets ``marker``, a per-replay file no
    process holds. Nothing outside the replay can be touched.
    """
    cmdline = launching_command_line(chain.text, shell)
    replacements: dict[int, str] = {}
    for step in chain.steps:
        text = step.text
        for spec in step_kills(step):
            if spec.full:
                new = token if self_kill_match(spec, cmdline) else f"^[f]xr-nomatch-{token}$"
            else:
                new = token[:15]
            text = _replace_word(text, spec.pattern, new)
        if re.search(r"\bfuser\b", text):
            text = re.sub(r"(?<![\w/])/dev/nvidia[^\s;&|)]*", shlex.quote(marker), text)
        if re.search(r"\bkillall_sglang\.sh\b", text) or mass_kills(step):
            text = ": skipped by --safe-patterns: " + shlex.quote(step.text)
        if text != step.text:
            replacements[step.index] = text
    return rewrite_steps(chain, replacements)


def _replace_word(text: str, pattern: str, new: str) -> str:
    """Replace the (possibly quoted) kill pattern in a step's text, keeping everything else."""
    for quoted in (f'"{pattern}"', f"'{pattern}'", shlex.quote(pattern), pattern):
        k = text.rfind(quoted)
        if k >= 0:
            return text[:k] + shlex.quote(new) + text[k + len(quoted) :]
    return text


# --------------------------------------------------------------------------- scripts

_ESC = r"""_esc() { [ -f "$1" ] || return 0; tail -c TAILB "$1" 2>/dev/null | tr -d '\000-\010\013-\037\177' | tr '\t' ' ' | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' | awk 'NR>1{printf "\\n"} {printf "%s", $0}'; }
_now() { date +%s.%N 2>/dev/null || date +%s; }
"""

_MONITOR = r"""n=$1; c=$2
printf '{"v":1,"launch_id":"%s","event":"server","step":%s,"pid":%s,"pgid":%s,"t":%s}\n' "$L" "$n" "$$" "$(ps -o pgid= -p $$ 2>/dev/null | tr -d ' ')" "$(_now)" >> "$J"
[ -n "$PF" ] && echo "$$" > "$PF"
"$SH" -c "$c" > "$D/out$n" 2>&1 < /dev/null
rc=$?
printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"%s"}\n' "$L" "$n" "$$" "$(_now)" "$rc" "$(_esc "$D/out$n")" >> "$J"
"""

_FUNCS = r"""_j() {
  rm -f "$D/done$1" "$D/ps$1"
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$4" >> "$J"
  TIMEOUT "$2" "$SH" -c "$5" > "$D/out$1" 2>&1 < /dev/null &
  _p=$!
  printf '{"v":1,"launch_id":"%s","event":"pid","step":%s,"pid":%s,"t":%s}\n' "$L" "$1" "$_p" "$(_now)" >> "$J"
  ( _i=0
    while [ "$_i" -lt "$3" ]; do [ -f "$D/done$1" ] && exit 0; kill -0 "$_p" $$ 2>/dev/null || exit 0; sleep 0.1; _i=$((_i+1)); done
    [ -f "$D/done$1" ] || ps -ww -e -o pid=,ppid=,pgid=,stat=,wchan:32=,etimes=,args= 2>/dev/null | awk -v g="$_p" '$3==g' > "$D/ps$1"
  ) > /dev/null 2>&1 < /dev/null &
  wait "$_p"; _rc=$?
  : > "$D/done$1"
  printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"%s","waiting_on":"%s"}\n' "$L" "$1" "$_p" "$(_now)" "$_rc" "$(_esc "$D/out$1")" "$(_esc "$D/ps$1")" >> "$J"
  return "$_rc"
}
_i1() {
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$2" >> "$J"
  eval "$3"; _rc=$?
  printf '{"v":1,"launch_id":"%s","event":"end","step":%s,"pid":%s,"t":%s,"rc":%s,"tail":"","waiting_on":""}\n' "$L" "$1" "$$" "$(_now)" "$_rc" >> "$J"
  return "$_rc"
}
_srv() {
  printf '{"v":1,"launch_id":"%s","event":"start","step":%s,"t":%s,"shell_pid":%s,%s}\n' "$L" "$1" "$(_now)" "$$" "$2" >> "$J"
  SETSID "$SH" -c "$MON" forensics-monitor "$1" "$3" > /dev/null 2>&1 < /dev/null &
  printf '{"v":1,"launch_id":"%s","event":"spawned","step":%s,"pid":%s,"t":%s}\n' "$L" "$1" "$!" "$(_now)" >> "$J"
  return 0
}
"""


def _fields(step: Step, kind: str, cmd: str, deadline: float | None) -> str:
    obj: dict[str, Any] = {"kind": kind, "cmd": cmd, "orig": step.text}
    if deadline is not None:
        obj["deadline_s"] = deadline
    return json.dumps(obj, ensure_ascii=True)[1:-1]


def build_wrapper(
    run: Chain,
    orig: Chain,
    *,
    journal: str,
    work_dir: str,
    launch_id: str,
    step_deadline: float,
    pid_path: str | None,
    has_timeout: bool = True,
    has_setsid: bool = True,
) -> str:
    """The POSIX-sh wrapper that runs ``run`` step by step, journaling each step.

    ``orig`` is the user's chain (same steps, before safe-pattern/simulator substitution);
    its step texts go into the journal as ``orig``.
    """
    srv = server_step(run)
    origs = {s.index: s for s in orig.steps}
    ticks = max(1, int(step_deadline * 10 * 0.8))
    head = [
        f"J={shlex.quote(journal)}",
        f"D={shlex.quote(work_dir)}",
        f"L={shlex.quote(launch_id)}",
        "SH=sh",
        f"PF={shlex.quote(pid_path or '')}",
        "export J D L SH PF",
        _ESC.replace("TAILB", str(TAIL_BYTES)),
    ]
    mon = _ESC.replace("TAILB", str(TAIL_BYTES)) + _MONITOR
    head.append(f"MON={shlex.quote(mon)}")
    funcs = _FUNCS.replace(
        "TIMEOUT", f"timeout -k {KILL_AFTER_S}" if has_timeout else "_nodeadline"
    ).replace("SETSID", "setsid" if has_setsid else "")
    head.append('_nodeadline() { shift; "$@"; }')
    head.append(funcs)
    body: list[str] = []
    for lst in run.and_or_lists():
        items: list[str] = []
        for s in lst:
            o = origs.get(s.index, s)
            kind = step_kind(o, srv)
            text = s.text
            if srv is not None and s.index == srv.index:
                text = _strip_setsid(s)
                item = f"_srv {s.index} {shlex.quote(_fields(o, 'server', text, None))} " + (
                    shlex.quote(text)
                )
            elif _inline(s):
                item = (
                    f"_i1 {s.index} {shlex.quote(_fields(o, kind, text, None))} {shlex.quote(text)}"
                )
            else:
                item = (
                    f"_j {s.index} {step_deadline:g} {ticks} "
                    f"{shlex.quote(_fields(o, kind, text, step_deadline))} {shlex.quote(text)}"
                )
            items.append(item)
            if s.connector in ("&&", "||"):
                items.append(s.connector)
        line = " ".join(items)
        if lst and lst[-1].background:
            line = "{ " + line + "; } &"
        body.append(line)
    body.append("wait")
    return "\n".join(head + body) + "\n"


def _inline(step: Step) -> bool:
    cmd = step.command
    if cmd is None or len(step.commands) != 1:
        return False
    if not cmd.argv and cmd.assignments:
        return True
    return bool(cmd.argv) and cmd.argv[0] in INLINE_PROGRAMS


def _strip_setsid(step: Step) -> str:
    """The server step's text without a leading ``setsid`` (the monitor gives it its own
    session, and a second setsid would move the server out of the recorded group)."""
    m = re.match(r"^(\s*(?:\w+=\S*\s+)*)setsid\s+(?:-[a-z]+\s+)*", step.text)
    return step.text if not m else m.group(1) + step.text[m.end() :]


def build_supervisor(
    *, journal: str, work_dir: str, launch_id: str, shell: str, begin: dict[str, Any]
) -> str:
    fields = json.dumps(begin, ensure_ascii=True)[1:-1]
    d = shlex.quote(work_dir)
    return (
        f"J={shlex.quote(journal)}\nL={shlex.quote(launch_id)}\n"
        'printf \'{"v":1,"launch_id":"%s","event":"begin","t":%s,"pid":%s,%s}\\n\' '
        f'"$L" "$(date +%s.%N)" "$$" {shlex.quote(fields)} >> "$J"\n'
        f'{shlex.quote(shell)} -c "$(cat {d}/wrapper.sh)" forensics-replay "$(cat {d}/chain.txt)"\n'
        "rc=$?\n"
        'printf \'{"v":1,"launch_id":"%s","event":"exit","t":%s,"rc":%s}\\n\' '
        '"$L" "$(date +%s.%N)" "$rc" >> "$J"\n'
    )


# --------------------------------------------------------------------------- diagnosis


def _analysis(frame: pl.DataFrame) -> dict[str, Any]:
    rows = frame.to_dicts()
    begin = next((r for r in rows if r["event"] == "begin"), None)
    extra = json.loads(begin["extra"]) if begin and begin.get("extra") else {}
    starts = {r["step"]: r for r in rows if r["event"] == "start"}
    ends = {r["step"]: r for r in rows if r["event"] == "end"}
    server = next((r for r in rows if r["event"] in ("server", "spawned")), None)
    server_step_no = next(
        (r["step"] for r in rows if r["event"] == "start" and r.get("kind") == "server"), None
    )
    exit_ = next((r for r in rows if r["event"] == "exit"), None)
    chain_text = extra.get("chain") or ""
    return {
        "rows": rows,
        "begin": begin,
        "chain": parse_chain(chain_text) if chain_text else None,
        "shell": extra.get("shell", "bash"),
        "starts": starts,
        "ends": ends,
        "server": server,
        "server_step": server_step_no or extra.get("server_step"),
        "exit": exit_,
        "unparsed": [r for r in rows if r["event"] == "unparsed"],
    }


def _q(text: str | None) -> str:
    return "`" + " ".join((text or "").split())[:120] + "`"


def _rc_text(rc: int | None) -> str:
    if rc is None:
        return "no exit status"
    if rc > 128:
        names = {9: "SIGKILL", 15: "SIGTERM", 2: "SIGINT", 1: "SIGHUP"}
        return f"exit {rc}, {names.get(rc - 128, f'signal {rc - 128}')}"
    return f"exit {rc}"


def _server_phrase(a: dict[str, Any]) -> str:
    chain = a["chain"]
    srv = server_step(chain) if chain else None
    if srv is None:
        return "the server step never ran"
    what = "nohup" if srv.text.lstrip().startswith("nohup") else f"step {srv.index}"
    return f"{what} never ran, so no log was written"


def _cause_self_kill(a: dict[str, Any]) -> dict[str, Any] | None:
    ex = a["exit"]
    if ex is None or ex.get("rc") is None or ex["rc"] <= 128 or a["chain"] is None:
        return None
    cmdline = launching_command_line(a["chain"].text, a["shell"])
    for n, start in sorted(a["starts"].items()):
        if n in a["ends"] or start.get("kind") == "server":
            continue
        step = next((s for s in a["chain"].steps if s.index == n), None)
        if step is None:
            continue
        for spec in step_kills(step):
            m = self_kill_match(spec, cmdline)
            if m:
                shown = m.group(0) if m.group(0) == spec.pattern else f"{m.group(0)}"
                return {
                    "cause": "cleanup-self-kill",
                    "phase": "cleanup",
                    "step": n,
                    "explanation": (
                        f"step {n} {_q(start.get('orig'))} killed the launching shell "
                        f"({_rc_text(ex['rc'])}): its command line contains `{shown}`; "
                        f"{_server_phrase(a)}."
                    ),
                    "next_steps": [
                        "stop the previous server by its process group: forensics stop NAME",
                        "or start runs with forensics launch (own process group, pid file)",
                        f"if you keep a pattern, it must not match the chain: `{spec.pattern}` "
                        "is in the chain's own text",
                    ],
                }
    return None


def _waiting_text(ps_lines: str) -> str:
    """``ps`` lines of the step's group -> "pid 12 `sleep 1000` (state S, in hrtimer_nanosleep)";
    the timeout and ``sh -c`` wrappers are left out when something else is there."""
    procs = []
    for line in ps_lines.splitlines():
        parts = line.split(None, 6)
        if len(parts) < 7:
            continue
        pid, _ppid, _pgid, stat, wchan, _etimes, args = parts
        procs.append((pid, stat, wchan, args))
    inner = [p for p in procs if not re.match(r"^(timeout|sh -c|bash -c)\b", p[3])] or procs
    return "; ".join(
        f"pid {pid} `{args[:100]}` (state {stat}"
        + (f", in {wchan}" if wchan not in ("-", "0") else "")
        + ")"
        for pid, stat, wchan, args in inner[:3]
    )


def _cause_hang(a: dict[str, Any]) -> dict[str, Any] | None:
    for n, end in sorted(a["ends"].items()):
        start = a["starts"].get(n, {})
        if not end.get("timed_out") or start.get("kind") == "server":
            continue
        waiting = (end.get("waiting_on") or "").strip()
        phase = "cleanup" if start.get("kind") in ("cleanup", "wait", "other") else "pre-exec"
        return {
            "cause": "cleanup-hang",
            "phase": phase,
            "step": n,
            "explanation": (
                f"step {n} {_q(start.get('orig'))} was still running at its "
                f"{start.get('deadline_s') or 0:g} s deadline and was killed "
                f"({_rc_text(end.get('rc'))})"
                + (
                    f"; it was waiting on: {_waiting_text(waiting)}"
                    if waiting
                    else "; no process of the step was left to show what it waited on"
                )
                + "."
            ),
            "next_steps": [
                "look for a process in uninterruptible GPU teardown (state D) with ps / "
                "nvidia-smi before starting the next server",
                "give cleanup a deadline (timeout -k 5 30 ...) and stop runs by process group",
            ],
        }
    return None


def _cause_and_after(a: dict[str, Any]) -> dict[str, Any] | None:
    chain = a["chain"]
    if chain is None or a["server"] is not None:
        return None
    for step in chain.steps:
        end = a["ends"].get(step.index)
        if end is None or end.get("rc") in (0, None) or step.connector != "&&":
            continue
        if not step_kills(step):
            continue
        skipped = [
            s.index
            for s in chain.steps
            if s.index > step.index
            and s.list_index == step.list_index
            and s.index not in a["starts"]
        ]
        if not skipped:
            continue
        return {
            "cause": "and-after-pkill",
            "phase": "cleanup",
            "step": step.index,
            "explanation": (
                f"step {step.index} {_q(step.text)} exited {end['rc']} (nothing matched), so "
                f"`&&` skipped step(s) {', '.join(map(str, skipped))}; "
                + (
                    "the server step was among them, so no log was written."
                    if a["server_step"] in skipped
                    or (server_step(chain) and server_step(chain).index in skipped)
                    else "the chain went on without them."
                )
            ),
            "next_steps": ["use `;` (or `|| true`) after cleanup steps, not `&&`"],
        }
    return None


_NO_DIR = re.compile(r"No such file or directory|Directory nonexistent|cannot create|can't create")


def _cause_log_dir(a: dict[str, Any]) -> dict[str, Any] | None:
    n = a["server_step"]
    end = a["ends"].get(n) if n is not None else None
    if end is None or end.get("rc") in (0, None):
        return None
    tail = end.get("tail") or ""
    if not _NO_DIR.search(tail):
        return None
    start = a["starts"].get(n, {})
    return {
        "cause": "log-dir-missing",
        "phase": "pre-exec",
        "step": n,
        "explanation": (
            f"step {n} {_q(start.get('orig'))} failed before the server ran "
            f"({_rc_text(end.get('rc'))}): the shell could not open the log for the "
            f"redirection: {tail.strip().splitlines()[-1][:200] if tail.strip() else ''}"
        ),
        "next_steps": ["create the log directory first (mkdir -p DIR); forensics launch does"],
    }


def _cause_killed(a: dict[str, Any]) -> dict[str, Any] | None:
    ex = a["exit"]
    if ex is None or (ex.get("rc") or 0) <= 128:
        return None
    open_ = [
        n for n in a["starts"] if n not in a["ends"] and a["starts"][n].get("kind") != "server"
    ]
    n = open_[0] if open_ else None
    start = a["starts"].get(n, {}) if n is not None else {}
    return {
        "cause": "launcher-killed",
        "phase": "cleanup",
        "step": n,
        "explanation": (
            f"the launching shell died ({_rc_text(ex['rc'])})"
            + (f" during step {n} {_q(start.get('orig'))}" if n is not None else "")
            + "; nothing in the chain's own patterns matches it, so it was killed from outside "
            "(another cleanup, an OOM kill, or the SSH session closing)."
        ),
        "next_steps": ["check dmesg for the OOM killer and who else runs cleanups on the host"],
    }


def _cause_chain_stopped(a: dict[str, Any]) -> dict[str, Any] | None:
    if a["exit"] is None or a["server"] is not None or a["chain"] is None:
        return None
    srv = server_step(a["chain"])
    if srv is None or srv.index in a["starts"]:
        return None
    failed = [(n, e) for n, e in sorted(a["ends"].items()) if e.get("rc") not in (0, None)]
    if not failed:
        return None
    n, end = failed[-1]
    return {
        "cause": "step-failed",
        "phase": "cleanup",
        "step": n,
        "explanation": (
            f"step {n} {_q(a['starts'].get(n, {}).get('orig'))} failed ({_rc_text(end.get('rc'))}) "
            f"and the chain never reached the server step {srv.index}: "
            + ((end.get("tail") or "").strip().splitlines() or ["no output"])[-1][:200]
        ),
        "next_steps": ["fix that step, or separate it from the server start with `;`"],
    }


# Journal causes, most specific first: (id, detector). The first that fires is the diagnosis.
JOURNAL_CAUSES: tuple[tuple[str, Callable[[dict[str, Any]], dict[str, Any] | None]], ...] = (
    ("cleanup-self-kill", _cause_self_kill),
    ("cleanup-hang", _cause_hang),
    ("log-dir-missing", _cause_log_dir),
    ("and-after-pkill", _cause_and_after),
    ("launcher-killed", _cause_killed),
    ("step-failed", _cause_chain_stopped),
)


def _evidence_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    keep = ["seq", "event", "step", "kind", "t", "pid", "rc", "signal", "timed_out", "orig"]
    keep += ["tail", "waiting_on"]
    return frame.select([c for c in keep if c in frame.columns]).to_dicts()


def diagnose_journal(frame_or_path: pl.DataFrame | str | Path) -> dict[str, Any]:
    """The cause, step and explanation a journal shows (``cause`` None when it shows none)."""
    if isinstance(frame_or_path, pl.DataFrame):
        frame = frame_or_path
    else:
        frame = parse_journal(Path(frame_or_path).read_bytes())
        lids = [x for x in frame["launch_id"].to_list() if x]
        if lids:  # the latest launch in the file
            frame = frame.filter(
                (pl.col("launch_id") == lids[-1]) | (pl.col("event") == "unparsed")
            )
    a = _analysis(frame)
    for _cid, detect in JOURNAL_CAUSES:
        found = detect(a)
        if found:
            return {**found, "evidence": _evidence_rows(frame)}
    if a["begin"] is None and frame.is_empty():
        explanation = "the journal is empty: the wrapper never started (check the host and path)"
    elif a["server"] is not None:
        explanation = "the chain reached the server step; see the log for what happened next"
    else:
        explanation = "the journal shows no failing step"
    return {
        "cause": None,
        "phase": None,
        "step": a["server_step"] if a["server"] is not None else None,
        "explanation": explanation,
        "evidence": _evidence_rows(frame),
        "next_steps": [],
    }


def match_log(text: str) -> dict[str, Any] | None:
    """A failure signature in the log text, from the catalog (forensics.signatures)."""
    from forensics import signatures

    hit = signatures.best(signatures.match(text))
    if hit is not None:
        sig = hit.signature
        cause = getattr(hit, "cause", None) or {}
        line = ""
        for rx in sig.patterns:
            m = rx.search(text)
            if m:
                line = text[: m.start()].rsplit("\n", 1)[-1] + text[m.start() :].split("\n", 1)[0]
                break
        values = dict(hit.groups)
        remedies = list(sig.remedies)
        if isinstance(cause, dict) and cause.get("explanation"):
            values["cause"] = cause["explanation"]
            remedies = list(cause.get("remedies") or []) + remedies
        return {
            "id": sig.id,
            "phase": sig.phase,
            "explanation": signatures.render(sig.explanation, **values),
            "fix": signatures.render(remedies[0]) if remedies else None,
            "line": line,
        }
    return None


# --------------------------------------------------------------------------- execution


def _host_for(name: str | None) -> Host:
    from forensics.hosts import get_host

    return get_host(name)


def _is_local(host: Host) -> bool:
    from forensics.hosts import LocalHost

    return isinstance(host, LocalHost)


def _probe(host: Host) -> dict[str, Any]:
    res = host.run(
        "id -un; for p in timeout setsid bash curl wget; do command -v $p >/dev/null 2>&1 "
        "&& echo has:$p; done; echo tmp:${TMPDIR:-/tmp}",
        timeout=20,
    )
    lines = res.text.split()
    return {
        "user": lines[0] if lines else "user",
        "has": {x[4:] for x in lines if x.startswith("has:")},
        "tmp": next((x[4:] for x in lines if x.startswith("tmp:")), "/tmp"),
    }


HTTP_BODY_MAX = 64 << 10  # the most of a /health or probe answer read (curl discards it)


def _http(
    host: Host, url: str, tools: set[str], *, timeout: float, body: bytes | None = None
) -> int | None:
    """HTTP status of ``url`` as seen from the host (None when nothing answers in ``timeout``).

    GET, or POST of the JSON ``body``. Locally with urllib; on a remote host with curl (or
    wget), so the request comes from where the server runs.
    """
    if _is_local(host):
        import urllib.error
        import urllib.request

        req = urllib.request.Request(url, data=body)  # noqa: S310 - our URL
        if body is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                if len(resp.read(HTTP_BODY_MAX + 1)) > HTTP_BODY_MAX:
                    return None  # an answer without end is no answer (bounded memory)
                return resp.status
        except urllib.error.HTTPError as exc:
            return exc.code
        except (OSError, ValueError):
            return None
    q, t = shlex.quote(url), f"{timeout:g}"
    if "curl" in tools:
        post = (
            f"-X POST -H 'Content-Type: application/json' --data-binary {shlex.quote(body.decode())} "
            if body is not None
            else ""
        )
        script = f"curl -s -o /dev/null -m {t} {post}-w '%{{http_code}}' {q}"
    elif "wget" in tools:
        post = (
            f"--header='Content-Type: application/json' --post-data={shlex.quote(body.decode())} "
            if body is not None
            else ""
        )
        script = (
            f"wget -q -T {t} -t 1 -O /dev/null -S {post}{q} 2>&1 "
            "| awk '/HTTP\\//{c=$2} END{print c}'"
        )
    else:
        return None
    res = host.run(script, timeout=timeout + 10, allow_timeout=True)
    try:
        code = int(res.text.strip()[-3:])
    except ValueError:
        return None
    return code or None


def _health(host: Host, url: str, tools: set[str]) -> int | None:
    """HTTP status of the health URL as seen from the host (None when nothing answers)."""
    return _http(host, url, tools, timeout=HEALTH_PROBE_TIMEOUT_S)


def _ready_round(
    host: Host, health_url: str, pgid: int | None, tools: set[str], seen: int = 0
) -> tuple[int | None, bool, str | None, str | None]:
    """One readiness round (H06/H11): ``/health`` probed ``HEALTH_CONFIRM_S`` apart until
    ``HEALTH_OK_STREAK`` 200s in a row (``seen`` of them already), then ``_verify_ready``.

    Returns ``(last health code, streak reached, problem, note)``; ready is a reached streak
    with no problem. A non-200 ends the round at once (no streak).
    """
    code: int | None = 200
    while seen < HEALTH_OK_STREAK:
        if seen:
            time.sleep(HEALTH_CONFIRM_S)
        code = _health(host, health_url, tools)
        if code != 200:
            return code, False, None, None
        seen += 1
    problem, note = _verify_ready(host, health_url, pgid, tools)
    return code, True, problem, note


def _generate_url(health_url: str) -> str:
    """The server's /generate beside its health URL (same scheme, host and port)."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(health_url)
    return urlunsplit((u.scheme, u.netloc, "/generate", "", ""))


PROBE_BODY = json.dumps(
    {"text": "ping", "sampling_params": {"max_new_tokens": 1, "temperature": 0}}
).encode()


def _verify_ready(
    host: Host, health_url: str, pgid: int | None, tools: set[str]
) -> tuple[str | None, str | None]:
    """H11: after /health said 200, is the server really serving? ``(problem, note)``.

    ``problem`` (None when ready): the launched process group is gone (then something else
    answers the port), or a 1-token /generate failed or did not answer in time. ``note``: what
    could not be checked (no /generate on this server, no curl on the host).
    """
    if pgid:
        res = host.run(f"kill -0 -{int(pgid)} 2>/dev/null && echo alive", timeout=10)
        if res.text.strip() != "alive":
            return (
                f"/health answers 200 but the launched process group {pgid} is gone: "
                "another process serves that port",
                None,
            )
    url = _generate_url(health_url)
    if not _is_local(host) and not tools & {"curl", "wget"}:
        return None, f"{host.name} has neither curl nor wget: a 1-token {url} was not tried"
    code = _http(host, url, tools, timeout=GENERATE_PROBE_TIMEOUT_S, body=PROBE_BODY)
    if code == 200:
        return None, None
    if code in (404, 405):  # not an SGLang /generate: health and the group are all we have
        return None, f"{url} answered {code}: readiness rests on /health and the process group"
    seen = f"answered {code}" if code else f"did not answer within {GENERATE_PROBE_TIMEOUT_S:g} s"
    return f"/health answers 200 but a 1-token {url} {seen}", None


def _read_journal(host: Host, path: str, launch_id: str) -> pl.DataFrame:
    try:
        data = host.read(path)
    except ForensicsError:
        data = b""
    return parse_journal(data, launch_id=launch_id)


def _proc_start(host: Host, pid: int) -> int | None:
    res = host.run(f"cat /proc/{int(pid)}/stat 2>/dev/null", timeout=10, allow_timeout=True)
    text = res.text
    if ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    try:
        return int(fields[19])  # field 22 overall; 20th after "pid (comm)"
    except (IndexError, ValueError):
        return None


def _collect_evidence(
    host: Host, pgid: int | None, port: int | None, launch_id: str
) -> dict[str, Any]:
    try:
        from forensics import evidence  # type: ignore[attr-defined]
    except ImportError:
        return {"note": "forensics.evidence is not available"}
    try:
        from forensics.hosts import forensics_home

        spill = forensics_home() / "evidence" / launch_id  # S06: whole outputs over the cap
        out = evidence.collect(host, pgid=pgid, port=port, spill_dir=str(spill))
    except ForensicsError as exc:
        return {"error": str(exc)}
    except Exception as exc:  # noqa: BLE001 - evidence is best effort, the diagnosis goes on
        return {"error": f"{type(exc).__name__}: {exc}"}
    return out if isinstance(out, dict) else {"evidence": out}


def _emit(progress: Progress | None, **event: Any) -> None:
    if progress is not None:
        with contextlib.suppress(Exception):
            progress(event)


def _run(
    store: Store,
    recipe: Recipe,
    *,
    mode: str,
    host_name: str | None,
    run_chain: Chain,
    orig_chain: Chain,
    token: str | None,
    health_deadline: float,
    step_deadline: float,
    progress: Progress | None,
    keep_running: bool,
    make_log_dir: bool,
    pid_path: str | None = None,
    launch_id: str | None = None,
    started_at: dt.datetime | None = None,
) -> dict[str, Any]:
    host = _host_for(host_name)
    launch_id = launch_id or uuid.uuid4().hex[:12]
    started_at = started_at or _now()
    info = _probe(host)
    base = {
        "launch_id": launch_id,
        "name": recipe.name,
        "host": host.name,
        "mode": mode,
        "log_path": recipe.log_path,
        "recipe": recipe.to_json(),
        "started_at": started_at,
        "port": recipe.port,
        "health_url": recipe.health_url,
        "token": token,
    }
    findings = lint(recipe.replace(shell=orig_chain.text), host=host)
    full = next((f for f in findings if f.id == "disk-full"), None)
    if full is not None:  # S10: a replay on a full disk fails mid-write and fills it further
        raise LaunchFailed(f"{recipe.name}: {full.explanation}", hint=full.alternative)
    log_dir = posixpath.dirname(recipe.log_path) if recipe.log_path else None
    if make_log_dir and log_dir:
        host.makedirs(log_dir)
    if log_dir and host.is_dir(log_dir):
        journal = recipe.log_path + ".journal.jsonl"
        work = f"{recipe.log_path}.journal.d/{launch_id}"
    else:
        root = posixpath.join(info["tmp"], f"forensics-{info['user']}")
        journal = posixpath.join(root, f"{recipe.name}.journal.jsonl")
        work = posixpath.join(root, f"{recipe.name}.journal.d", launch_id)
    base["journal_path"] = journal
    base["pid_path"] = pid_path
    # registered before anything runs, so a run that dies at once still exists
    _record(store, {**base, "status": "registered"})
    host.makedirs(work)
    wrapper = build_wrapper(
        run_chain,
        orig_chain,
        journal=journal,
        work_dir=work,
        launch_id=launch_id,
        step_deadline=step_deadline,
        pid_path=pid_path,
        has_timeout="timeout" in info["has"],
        has_setsid="setsid" in info["has"],
    )
    shell = recipe.shell_program if recipe.shell_program in info["has"] else "sh"
    srv = server_step(run_chain)
    begin = {
        "chain": orig_chain.text,
        "shell": shell,
        "mode": mode,
        "server_step": srv.index if srv else None,
        "safe_patterns": token is not None,
    }
    host.write(f"{work}/wrapper.sh", wrapper.encode())
    host.write(f"{work}/chain.txt", run_chain.text.encode())
    sup = build_supervisor(
        journal=journal, work_dir=work, launch_id=launch_id, shell=shell, begin=begin
    )
    host.write(f"{work}/sup.sh", sup.encode())
    # the log may hold earlier launches (`>>LOG`): this one's lines start at its current size
    log_start = _size(host, recipe.log_path)
    server_pid = sup_pid = None
    try:
        # inside the try: a Ctrl-C right after the spawn (the server may already be up) must
        # still record the group, or `forensics stop` could not find it
        sup_pid = host.spawn(f"exec sh {shlex.quote(work + '/sup.sh')}")
        _record(store, {**base, "status": "running", "pid": sup_pid})
        _emit(progress, event="status", status="running", journal=journal)

        # 1. the chain: until the wrapper exits (every step has a deadline, so this ends)
        n_steps = len(run_chain.steps)
        chain_deadline = time.monotonic() + n_steps * (step_deadline + KILL_AFTER_S + 2) + 20
        seen: set[tuple[str, int]] = set()
        frame = _read_journal(host, journal, launch_id)
        while True:
            for r in frame.filter(pl.col("event").is_in(["start", "end"])).to_dicts():
                key = (r["event"], r["seq"])
                if key not in seen:
                    seen.add(key)
                    _emit(progress, event="step", **{k: r.get(k) for k in ("step", "rc", "orig")},
                          phase=r["event"])  # fmt: skip
            if "exit" in frame["event"].to_list():
                break
            if time.monotonic() > chain_deadline:
                break
            time.sleep(POLL_S)
            frame = _read_journal(host, journal, launch_id)
        wrapper_done = "exit" in frame["event"].to_list()

        # 2. the server: follow the log, poll health, until ready / exited / deadline
        stages: list[str] = []
        status, health_code, server_pid = "failed", None, None
        unverified: str | None = None  # H11: why a healthy-looking server was not trusted
        server_pgid = None
        # a port bound before the start answers for someone else: /health proves nothing then
        port_taken = any(f.id == "port-in-use" for f in findings)
        srows = frame.filter(pl.col("event") == "server")
        if not srows.is_empty() or not frame.filter(pl.col("event") == "spawned").is_empty():
            end_at = time.monotonic() + health_deadline
            offset = log_start
            while True:
                frame = _read_journal(host, journal, launch_id)
                srows = frame.filter(pl.col("event") == "server")
                if server_pid is None and not srows.is_empty():
                    server_pid = srows["pid"][0]
                    server_pgid = srows["pgid"][0] or server_pid
                    _emit(progress, event="server", pid=server_pid)
                if recipe.log_path:
                    offset = _follow(host, recipe.log_path, offset, stages, progress)
                if recipe.health_url and not port_taken:
                    health_code = _health(host, recipe.health_url, info["has"])
                    if health_code == 200:  # the start of a streak: see whether it holds
                        health_code, streak, problem, note = _ready_round(
                            host, recipe.health_url, server_pgid, info["has"], seen=1
                        )
                        if streak and problem is None:
                            status = "ready"
                            _emit(progress, event="health", code=200, note=note)
                            break
                        if streak:
                            unverified = problem
                            _emit(progress, event="unverified", problem=problem)
                srv_no = srv.index if srv else None
                ended = frame.filter((pl.col("event") == "end") & (pl.col("step") == srv_no))
                if not ended.is_empty():
                    status = "failed"
                    break
                if time.monotonic() > end_at:
                    status = "timeout"
                    break
                time.sleep(HEALTH_POLL_S)
            if recipe.log_path:
                _follow(host, recipe.log_path, offset, stages, progress)
        elif not wrapper_done:
            status = "timeout"
    except (HostUnreachable, RemoteError, DeadlineExceeded) as exc:
        # S07: the connection dropped while waiting. The server runs on in its own session
        # (nohup, setsid) or died: nobody knows which. Recorded as unknown, never as failed.
        _record(
            store,
            {
                **base,
                "status": "unknown",
                "pid": server_pid or sup_pid,
                "pgid": server_pid,
                "cause": "connection-lost",
            },
        )
        raise type(exc)(
            f"{recipe.name}: lost {host.name} during the launch, so its outcome is unknown "
            f"(the server may still run): {exc.message}",
            hint=f"once the host answers, `forensics launch --check {recipe.name}` re-checks it "
            "from its pid file and /health",
        ) from None
    except KeyboardInterrupt:
        # The same Ctrl-C may raise twice ("One Ctrl-C, two KeyboardInterrupts" in
        # forensics/errors.py): let a pending second one fire here, where it is absorbed,
        # not in the middle of the record below. (A `try` is set up before any check runs.)
        try:
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        # Ctrl-C stops the waiting, not the server (it runs in its own group): record the
        # group so `forensics stop NAME` can end it, then let the CLI exit 130
        with contextlib.suppress(Exception):
            if server_pid is None:
                srows = _read_journal(host, journal, launch_id).filter(pl.col("event") == "server")
                server_pid = None if srows.is_empty() else srows["pid"][-1]
            _record(
                store,
                {
                    **base,
                    "status": "interrupted",
                    "pid": server_pid or sup_pid,
                    "pgid": server_pid,
                    "cause": "interrupted",
                },
            )
        raise

    # 3. diagnosis
    frame = _read_journal(host, journal, launch_id)
    diag = diagnose_journal(frame)
    log_text = _log_tail(host, recipe.log_path, start=log_start)
    log_exists = recipe.log_path is not None and host.exists(recipe.log_path)
    if status != "ready" and diag["cause"] is None:
        ctx = _CauseContext(
            status=status,
            sig=match_log(log_text) if log_text else None,
            port_finding=next((f for f in findings if f.id == "port-in-use"), None),
            unverified=unverified,
            stages=stages,
            health_deadline=health_deadline,
            frame=frame,
        )
        diag.update(launch_cause(ctx))
    evidence = None
    pgid = server_pid
    if status != "ready":
        evidence = _collect_evidence(host, pgid, recipe.port, launch_id)
    pid_start = _proc_start(host, pgid) if pgid and status == "ready" else None
    if status == "ready" and not keep_running and pgid:
        _kill_group(host, pgid, pid_start, STOP_GRACE_S)
        status = "stopped"
    jrows = frame.with_columns(pl.lit(launch_id).alias("launch_id"))
    _record_journal(store, jrows)
    result = {
        **diag,
        "launch_id": launch_id,
        "name": recipe.name,
        "host": host.name,
        "mode": mode,
        "status": status,
        "log_path": recipe.log_path,
        "log_exists": log_exists,
        "log_tail": log_text[-TAIL_BYTES:] if log_text else "",
        "journal_path": journal,
        "findings": [f.to_dict() for f in findings],
        "stages": stages,
        "health": health_code,
        "pgid": pgid,
        "port": recipe.port,
        "token": token,
        "evidence_collected": evidence,
    }
    _record(
        store,
        {
            **base,
            "status": status,
            "pid": pgid or sup_pid,
            "pgid": pgid,
            "pid_start": pid_start,
            "cause": diag["cause"],
            "diagnosis": json.dumps(
                {k: result[k] for k in ("cause", "phase", "step", "explanation", "next_steps")},
                default=str,
            ),
        },
    )
    return result


@dataclasses.dataclass
class _CauseContext:
    """What the launch saw, for the LAUNCH_CAUSES rows."""

    status: str  # failed | timeout
    sig: dict[str, Any] | None  # the log's signature (match_log)
    port_finding: Any  # lint's port-in-use finding, or None
    unverified: str | None  # why a green /health was not trusted
    stages: list[str]
    health_deadline: float
    frame: pl.DataFrame  # the journal

    @property
    def phase(self) -> str:
        return _phase_of(self.stages)


@dataclasses.dataclass(frozen=True)
class LaunchCause:
    """Why a launch did not become ready, when the journal alone does not say (a row)."""

    id: str  # the cause recorded; "signature": the log signature's own id
    applies: Callable[[_CauseContext], bool]
    explain: Callable[[_CauseContext], str]
    remedies: tuple[str, ...] = ()  # what to try; the row's fix() when it depends on the launch
    fix: Callable[[_CauseContext], list[str]] | None = None
    phase: Callable[[_CauseContext], str | None] = lambda c: c.phase


def _log_says(c: _CauseContext) -> str:
    return f" The log says: {c.sig['line'].strip()[:200]}" if c.sig else ""


def _exit_text(c: _CauseContext) -> str:
    end = c.frame.filter((pl.col("event") == "end") & (pl.col("kind").is_null()))
    return f" ({_rc_text(end['rc'][-1])})" if not end.is_empty() else ""


# Most specific first; the first row that applies is the cause (after JOURNAL_CAUSES).
LAUNCH_CAUSES: tuple[LaunchCause, ...] = (
    LaunchCause(
        "port-in-use",
        applies=lambda c: c.port_finding is not None,
        phase=lambda c: "pre-exec",
        explain=lambda c: c.port_finding.explanation + _log_says(c),
        fix=lambda c: [c.port_finding.alternative],
    ),
    LaunchCause(
        "signature",
        applies=lambda c: c.sig is not None,
        phase=lambda c: c.sig.get("phase"),
        explain=lambda c: (
            f"the server failed: {c.sig.get('explanation')}: "
            f"{(c.sig.get('line') or '').strip()[:200]}"
        ),
        fix=lambda c: [c.sig["fix"]] if c.sig.get("fix") else [],
    ),
    LaunchCause(
        "health-unverified",
        applies=lambda c: c.status == "timeout" and bool(c.unverified),
        explain=lambda c: f"{c.unverified}; not ready within {c.health_deadline:g} s",
        remedies=(
            "py-spy dump the scheduler processes (a dead or stuck scheduler keeps /health "
            "green on some SGLang versions); check nvidia-smi and the log tail",
        ),
    ),
    LaunchCause(
        "health-timeout",
        applies=lambda c: c.status == "timeout",
        explain=lambda c: (
            f"/health did not answer 200 within {c.health_deadline:g} s; last "
            f"stage seen: {c.stages[-1] if c.stages else 'none'}"
        ),
        remedies=("py-spy dump the scheduler processes; check nvidia-smi",),
    ),
    LaunchCause(
        "server-exited",
        applies=lambda c: c.status == "failed",
        explain=lambda c: "the server process exited before /health answered" + _exit_text(c),
        remedies=("read the log tail below",),
    ),
)


def launch_cause(ctx: _CauseContext) -> dict[str, Any]:
    """The first LAUNCH_CAUSES row that applies, as the diagnosis' fields ({} for none)."""
    for row in LAUNCH_CAUSES:
        if row.applies(ctx):
            return {
                "cause": ctx.sig["id"] if row.id == "signature" else row.id,
                "phase": row.phase(ctx),
                "explanation": row.explain(ctx),
                "next_steps": row.fix(ctx) if row.fix else list(row.remedies),
            }
    return {}


def _phase_of(stages: list[str]) -> str:
    """The phase a launch was in when it stopped: that of the last startup stage seen."""
    from forensics.runs import STAGE_RANK

    rank = {stage: r for stage, _, r in STAGE_RANK}
    seen = [rank[s] for s in stages if s in rank]
    return {3: "capture", 4: "runtime"}.get(seen[-1] if seen else 0, "load")


def _size(host: Host, path: str | None) -> int:
    """The size of the file at ``path`` on the host; 0 when there is none."""
    if not path:
        return 0
    try:
        return host.stat(path).size
    except ForensicsError:
        return 0


def _log_tail(host: Host, path: str | None, nbytes: int = 64 << 10, start: int = 0) -> str:
    """The last ``nbytes`` of the log written since ``start`` (all of it if it was truncated)."""
    if not path:
        return ""
    try:
        size = host.stat(path).size
        if size < start:  # truncated (`>LOG`) or replaced: all of it is this launch's
            start = 0
        return host.read(path, max(start, size - nbytes)).decode("utf-8", "replace")
    except ForensicsError:
        return ""


def _follow(
    host: Host, path: str, offset: int, stages: list[str], progress: Progress | None
) -> int:
    """Read new log bytes from ``offset`` and report the startup stages that passed.

    A log that became shorter than ``offset`` was truncated (the chain's own `>LOG`): it is
    read again from its start.
    """
    try:
        data = host.read(path, offset)
        if not data and offset and _size(host, path) < offset:
            offset = 0
            data = host.read(path, 0)
    except ForensicsError:
        return offset
    if not data:
        return offset
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return offset
    for line in data[:cut].decode("utf-8", "replace").splitlines():
        stage = stage_of(line)
        if stage is not None and (stage not in stages or stage == "load_end"):
            stages.append(stage)
            _emit(progress, event="stage", stage=stage, line=line.strip()[:200])
    return offset + cut


# --------------------------------------------------------------------------- public API


def _with_sim(recipe: Recipe, sim: dict[str, Any] | None, token: str) -> Recipe:
    if not sim:
        return recipe
    return with_simulator(
        recipe,
        python=sim.get("python") or sys.executable,
        tag=token,
        speed=float(sim.get("speed", 50.0)),
        fail=sim.get("fail"),
        port=sim.get("port"),
    )


def relaunch(
    store: Store,
    name: str,
    *,
    host: str | None = None,
    recipe: Recipe | None = None,
    safe_patterns: bool = False,
    deadline: float | None = None,
    step_deadline: float | None = None,
    sim: dict[str, Any] | None = None,
    progress: Progress | None = None,
    keep_running: bool = True,
) -> dict[str, Any]:
    """Replay a launch faithfully under the journal and diagnose it (see the module doc)."""
    base = recipe if recipe is not None else resolve_recipe(store, name)
    if recipe is not None and name and not base.name:
        base = base.replace(name=valid_name(name))
    if base.shell is None:
        base = base.replace(shell=base.chain_text())
    _refuse_replay(base, safe_patterns)
    token = new_token()
    orig = parse_chain(base.shell or "")
    r = _with_sim(base, sim, token)
    if host is not None:
        r = r.replace(host=host)
    run_text = r.shell or ""
    marker = None
    if safe_patterns:
        chain = parse_chain(run_text)
        marker = f"/tmp/{token}.gpu"
        run_text = safe_chain(chain, token, marker, r.shell_program)
    run_chain = parse_chain(run_text)
    if len(run_chain.steps) != len(orig.steps):
        raise LaunchFailed(
            f"{r.name}: the replayed chain has {len(run_chain.steps)} steps, the original "
            f"{len(orig.steps)}",
            hint="report this chain as a bug; replay without --safe-patterns/--sim",
        )
    if marker is not None:
        _host_for(r.host).write(marker, b"")
    try:
        return _run(
            store,
            r,
            mode="replay",
            host_name=r.host,
            run_chain=run_chain,
            orig_chain=orig,
            token=token if (safe_patterns or sim) else None,
            health_deadline=deadline or r.health_deadline_s,
            step_deadline=step_deadline or r.step_deadline_s,
            progress=progress,
            keep_running=keep_running,
            make_log_dir=False,
        )
    finally:
        if marker is not None:
            with contextlib.suppress(ForensicsError):
                _host_for(r.host).run(f"rm -f {shlex.quote(marker)}", timeout=10)


def _refuse_replay(recipe: Recipe, safe_patterns: bool) -> None:
    """A chain the shell would refuse is not replayed (lint's shell-syntax finding), nor one
    that signals every process (lint's mass-kill) unless --safe-patterns defuses it."""
    bad = syntax_finding(recipe)
    if bad is not None:
        raise UsageError(
            f"{recipe.name}: not replayed: {bad.explanation}",
            hint="fix the chain (forensics lint --shell '...' shows where)",
        )
    if safe_patterns:
        return
    for step in recipe.chain().steps:
        for name, what in mass_kills(step):
            raise UsageError(
                f"{recipe.name}: not replayed: step {step.index} `{name}` would signal {what}",
                hint="replay it with --safe-patterns (the step is skipped), or fix the chain",
            )


def launch(
    store: Store,
    recipe: Recipe,
    *,
    host: str | None = None,
    deadline: float | None = None,
    progress: Progress | None = None,
    sim: dict[str, Any] | None = None,
    keep_running: bool = True,
) -> dict[str, Any]:
    """Start a run safely (see the module doc). Raises LaunchFailed on a blocking finding."""
    valid_name(recipe.name)
    token = new_token()
    r = _with_sim(recipe, sim, token)
    if host is not None:
        r = r.replace(host=host)
    if not r.server:
        syntax = parse_chain(recipe.shell).warnings if recipe.shell else []
        if syntax:  # e.g. an unterminated quote swallowed the server command
            raise UsageError(
                f"{r.name}: no server command found in the chain ({syntax[0]})",
                hint="fix the chain; forensics lint --shell '...' shows where",
            )
        raise UsageError(f"{r.name}: the recipe has no server command", hint="check the recipe")
    if not r.log_path:
        r = r.replace(log_path=_default_log(r))
    # the previous run of this name: stopped by its process group, never by pattern
    prev = find_launch_exact(store, r.name)
    if prev is not None and prev.get("status") in ("ready", *UNSETTLED) and prev.get("pgid"):
        stop(store, r.name)
    h = _host_for(r.host)
    blocking = [f for f in lint(r.replace(shell=None), host=h) if f.id in BLOCKING]
    if blocking:
        raise LaunchFailed(
            f"{r.name}: {blocking[0].explanation}", hint=blocking[0].alternative.split(";")[0]
        )
    # the safe chain: the recipe's own extra cleanup (config form only), then the server
    safe = r.replace(shell=None, cleanup=r.cleanup if recipe.shell is None else [])
    server_text = safe.chain_text().replace("setsid nohup ", "nohup ", 1)
    chain = parse_chain(server_text)
    return _run(
        store,
        safe.replace(shell=server_text),
        mode="launch",
        host_name=r.host,
        run_chain=chain,
        orig_chain=chain,
        token=token if sim else None,
        health_deadline=deadline or r.health_deadline_s,
        step_deadline=r.step_deadline_s,
        progress=progress,
        keep_running=keep_running,
        make_log_dir=True,
        pid_path=r.log_path + ".pid",
    )


def _default_log(recipe: Recipe) -> str:
    from forensics.hosts import forensics_home

    if recipe.host in (None, "", "local"):
        return str((forensics_home() / "logs" / f"{recipe.name}.log").resolve())
    return f"/tmp/forensics-logs/{recipe.name}.log"


def find_launch_exact(store: Store, name: str) -> dict[str, Any] | None:
    df = launches_frame(store)
    if df.is_empty():
        return None
    df = df.filter(pl.col("name") == name)
    return None if df.is_empty() else df.row(-1, named=True)


def _kill_group(host: Host, pgid: int, pid_start: int | None, grace_s: float) -> str:
    """TERM the group, wait up to ``grace_s``, KILL what is left. Returns what happened."""
    g = int(pgid)
    if g <= 1:
        raise UsageError(f"refusing to signal process group {g}", hint="check the launch record")
    if pid_start is not None:
        now = _proc_start(host, g)
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
    row = find_launch(store, name)
    if row is None:
        raise RunNotFound(f"no launch named {name!r}", hint="see forensics launch --list")
    pgid = row.get("pgid")
    if not pgid and row.get("status") in UNSETTLED and row.get("journal_path"):
        # the launch was interrupted (Ctrl-C, a killed CLI) before it recorded the group:
        # the journal the server's monitor wrote names it
        pgid = _pgid_from_journal(row)
    if not pgid:
        outcome = "no-process-group"
    else:
        h = _host_for(None if row["host"] == "local" else row["host"])
        outcome = _kill_group(h, int(pgid), row.get("pid_start"), grace_s)
        with contextlib.suppress(ForensicsError):
            if row.get("pid_path"):
                h.run(f"rm -f {shlex.quote(row['pid_path'])}", timeout=10)
    status = "stopped" if outcome in ("terminated", "killed", "not-running") else row["status"]
    _record(store, {**row, "status": status})
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
    row = find_launch(store, name)
    if row is None:
        raise RunNotFound(f"no launch named {name!r}", hint="see forensics launch --list")
    h = _host_for(None if row["host"] == "local" else row["host"])
    info = _probe(h)
    pgid, source = row.get("pgid"), "record"
    if not pgid and row.get("pid_path"):
        res = h.run(f"cat {shlex.quote(row['pid_path'])} 2>/dev/null", timeout=10)
        text = res.text.strip()
        pgid, source = (int(text), "pid file") if text.isdigit() else (None, source)
    if not pgid and row.get("journal_path"):
        pgid, source = _pgid_from_journal(row), "journal"
    alive = False
    if pgid and int(pgid) > 1:
        text, marks = _group_args(h, int(pgid)), _launch_marks(row)
        alive = bool(text.strip()) and (not marks or any(m in text for m in marks))
    health = problem = None
    if alive and row.get("health_url"):
        health, streak, problem, _ = _ready_round(h, row["health_url"], int(pgid), info["has"])
        if not streak:
            problem = f"/health answered {health}" if health else "/health did not answer"
    status = ("ready" if problem is None and health == 200 else "running") if alive else "exited"
    cause = None if status == "ready" else (problem if alive else "the process group is gone")
    _record(
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
    h = _host_for(None if row["host"] == "local" else row["host"])
    frame = _read_journal(h, row["journal_path"], row["launch_id"])
    srows = frame.filter(pl.col("event") == "server")
    if srows.is_empty():
        return None
    g = srows["pgid"][-1] or srows["pid"][-1]
    if not g or int(g) <= 1:
        return None
    text = _group_args(h, int(g), allow_timeout=True)
    if not any(m in text for m in _launch_marks(row)):
        return None
    return int(g)


def _group_args(h: Host, pgid: int, **kw: Any) -> str:
    """The command lines of the processes in group ``pgid`` on the host (``pgid args`` lines)."""
    return h.run(f"ps -ww -e -o pgid=,args= 2>/dev/null | awk '$1=={pgid}'", timeout=15, **kw).text


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


__all__ = [
    "diagnose_journal",
    "recheck",
    "launch",
    "launches_frame",
    "parse_kill",
    "pattern_regex",
    "relaunch",
    "safe_chain",
    "stop",
]
