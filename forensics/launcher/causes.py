"""Why a launch failed, from what it left: the journal (JOURNAL_CAUSES: self-kill, hang, missing
log directory, ``&&`` after a pkill, killed from outside, a failed step) and, when the journal
shows none, what the launch saw (LAUNCH_CAUSES: port in use, the log's signature, health). Each
row carries its explanation and remedies."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from forensics.kills import self_kill_match, step_kills
from forensics.recipe import server_step
from forensics_parsers.journal import parse_journal
from forensics_parsers.shell import launching_command_line, parse_chain


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


def _find_self_kill(a: dict[str, Any]) -> dict[str, Any] | None:
    """The step whose kill pattern matches the launching shell, when the shell died of a
    signal during it."""
    ex = a["exit"]
    if ex is None or ex.get("rc") is None or ex["rc"] <= 128 or a["chain"] is None:
        return None
    cmdline = launching_command_line(a["chain"].text, a["shell"])
    for n, start in sorted(a["starts"].items()):
        if n in a["ends"] or start.get("kind") == "server":
            continue
        step = next((s for s in a["chain"].steps if s.index == n), None)
        for spec in step_kills(step) if step is not None else []:
            m = self_kill_match(spec, cmdline)
            if m:
                return {"step": n, "orig": start.get("orig"), "rc": ex["rc"],
                        "shown": m.group(0), "pattern": spec.pattern,
                        "server": _server_phrase(a)}  # fmt: skip
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


def _find_hang(a: dict[str, Any]) -> dict[str, Any] | None:
    """The first step killed at its deadline (not the server's)."""
    for n, end in sorted(a["ends"].items()):
        start = a["starts"].get(n, {})
        if not end.get("timed_out") or start.get("kind") == "server":
            continue
        phase = "cleanup" if start.get("kind") in ("cleanup", "wait", "other") else "pre-exec"
        return {"step": n, "phase": phase, "orig": start.get("orig"), "rc": end.get("rc"),
                "deadline": start.get("deadline_s") or 0,
                "waiting": (end.get("waiting_on") or "").strip()}  # fmt: skip
    return None


def _explain_hang(f: dict[str, Any]) -> str:
    waited = (
        f"; it was waiting on: {_waiting_text(f['waiting'])}"
        if f["waiting"]
        else "; no process of the step was left to show what it waited on"
    )
    return (
        f"step {f['step']} {_q(f['orig'])} was still running at its {f['deadline']:g} s "
        f"deadline and was killed ({_rc_text(f['rc'])}){waited}."
    )


def _find_and_after(a: dict[str, Any]) -> dict[str, Any] | None:
    """A kill step that failed before `&&`, so that the steps after it never started."""
    chain = a["chain"]
    if chain is None or a["server"] is not None:
        return None
    srv = server_step(chain)
    for step in chain.steps:
        end = a["ends"].get(step.index)
        if end is None or end.get("rc") in (0, None) or step.connector != "&&":
            continue
        skipped = [
            s.index
            for s in chain.steps
            if s.index > step.index
            and s.list_index == step.list_index
            and s.index not in a["starts"]
        ]
        if step_kills(step) and skipped:
            server_skipped = a["server_step"] in skipped or bool(srv and srv.index in skipped)
            return {"step": step.index, "text": step.text, "rc": end["rc"], "skipped": skipped,
                    "server_skipped": server_skipped}  # fmt: skip
    return None


def _explain_and_after(f: dict[str, Any]) -> str:
    after = (
        "the server step was among them, so no log was written."
        if f["server_skipped"]
        else "the chain went on without them."
    )
    return (
        f"step {f['step']} {_q(f['text'])} exited {f['rc']} (nothing matched), so `&&` skipped "
        f"step(s) {', '.join(map(str, f['skipped']))}; {after}"
    )


_NO_DIR = re.compile(r"No such file or directory|Directory nonexistent|cannot create|can't create")


def _find_log_dir(a: dict[str, Any]) -> dict[str, Any] | None:
    """The server step failed because the shell could not open its log."""
    n = a["server_step"]
    end = a["ends"].get(n) if n is not None else None
    if end is None or end.get("rc") in (0, None):
        return None
    tail = (end.get("tail") or "").strip()
    if not _NO_DIR.search(tail):
        return None
    said = tail.splitlines()[-1][:200] if tail else ""
    return {
        "step": n,
        "orig": a["starts"].get(n, {}).get("orig"),
        "rc": end.get("rc"),
        "said": said,
    }


def _find_killed(a: dict[str, Any]) -> dict[str, Any] | None:
    """The launching shell died of a signal that none of the chain's patterns explains."""
    ex = a["exit"]
    if ex is None or (ex.get("rc") or 0) <= 128:
        return None
    open_ = [
        n for n in a["starts"] if n not in a["ends"] and a["starts"][n].get("kind") != "server"
    ]
    n = open_[0] if open_ else None
    orig = a["starts"].get(n, {}).get("orig") if n is not None else None
    return {"step": n, "orig": orig, "rc": ex["rc"]}


def _explain_killed(f: dict[str, Any]) -> str:
    during = f" during step {f['step']} {_q(f['orig'])}" if f["step"] is not None else ""
    return (
        f"the launching shell died ({_rc_text(f['rc'])}){during}; nothing in the chain's own "
        "patterns matches it, so it was killed from outside (another cleanup, an OOM kill, or "
        "the SSH session closing)."
    )


def _find_failed_step(a: dict[str, Any]) -> dict[str, Any] | None:
    """The last failed step of a chain that ended before its server step started."""
    if a["exit"] is None or a["server"] is not None or a["chain"] is None:
        return None
    srv = server_step(a["chain"])
    if srv is None or srv.index in a["starts"]:
        return None
    failed = [(n, e) for n, e in sorted(a["ends"].items()) if e.get("rc") not in (0, None)]
    if not failed:
        return None
    n, end = failed[-1]
    said = ((end.get("tail") or "").strip().splitlines() or ["no output"])[-1][:200]
    orig = a["starts"].get(n, {}).get("orig")
    return {"step": n, "orig": orig, "rc": end.get("rc"), "server": srv.index, "said": said}


@dataclasses.dataclass(frozen=True)
class JournalCause:
    """A failure the journal shows (a JOURNAL_CAUSES row): how to find it in the journal's
    analysis (``find`` -> the facts, with the step, or None), what it means, what to try."""

    id: str
    phase: str  # unless the facts say otherwise ("phase")
    find: Callable[[dict[str, Any]], dict[str, Any] | None]
    explain: Callable[[dict[str, Any]], str]
    remedies: tuple[str, ...] = ()
    more: Callable[[dict[str, Any]], list[str]] = lambda f: []  # remedies naming the facts


# Most specific first; the first row that finds something is the diagnosis.
JOURNAL_CAUSES: tuple[JournalCause, ...] = (
    JournalCause(
        "cleanup-self-kill",
        "cleanup",
        _find_self_kill,
        explain=lambda f: (
            f"step {f['step']} {_q(f['orig'])} killed the launching shell ({_rc_text(f['rc'])}): "
            f"its command line contains `{f['shown']}`; {f['server']}."
        ),
        remedies=(
            "stop the previous server by its process group: forensics stop NAME",
            "or start runs with forensics launch (own process group, pid file)",
        ),
        more=lambda f: [
            f"if you keep a pattern, it must not match the chain: `{f['pattern']}` is in the "
            "chain's own text"
        ],
    ),
    JournalCause(
        "cleanup-hang",
        "cleanup",
        _find_hang,
        explain=_explain_hang,
        remedies=(
            "look for a process in uninterruptible GPU teardown (state D) with ps / "
            "nvidia-smi before starting the next server",
            "give cleanup a deadline (timeout -k 5 30 ...) and stop runs by process group",
        ),
    ),
    JournalCause(
        "log-dir-missing",
        "pre-exec",
        _find_log_dir,
        explain=lambda f: (
            f"step {f['step']} {_q(f['orig'])} failed before the server ran "
            f"({_rc_text(f['rc'])}): the shell could not open the log for the redirection: "
            f"{f['said']}"
        ),
        remedies=("create the log directory first (mkdir -p DIR); forensics launch does",),
    ),
    JournalCause(
        "and-after-pkill",
        "cleanup",
        _find_and_after,
        explain=_explain_and_after,
        remedies=("use `;` (or `|| true`) after cleanup steps, not `&&`",),
    ),
    JournalCause(
        "launcher-killed",
        "cleanup",
        _find_killed,
        explain=_explain_killed,
        remedies=("check dmesg for the OOM killer and who else runs cleanups on the host",),
    ),
    JournalCause(
        "step-failed",
        "cleanup",
        _find_failed_step,
        explain=lambda f: (
            f"step {f['step']} {_q(f['orig'])} failed ({_rc_text(f['rc'])}) and the chain never "
            f"reached the server step {f['server']}: {f['said']}"
        ),
        remedies=("fix that step, or separate it from the server start with `;`",),
    ),
)


def journal_cause(a: dict[str, Any]) -> dict[str, Any] | None:
    """The first JOURNAL_CAUSES row that finds something, as the diagnosis' fields."""
    for row in JOURNAL_CAUSES:
        facts = row.find(a)
        if facts is not None:
            return {
                "cause": row.id,
                "phase": facts.get("phase", row.phase),
                "step": facts["step"],
                "explanation": row.explain(facts),
                "next_steps": [*row.remedies, *row.more(facts)],
            }
    return None


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
    found = journal_cause(a)
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
        fitted = signatures.fit(remedies, signatures.settings_from_text(text, log_path="log"))
        return {
            "id": sig.id,
            "phase": sig.phase,
            "explanation": signatures.render(sig.explanation, **values),
            "fix": fitted[0] if fitted else None,
            "line": line,
        }
    return None


@dataclasses.dataclass
class CauseContext:
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
    applies: Callable[[CauseContext], bool]
    explain: Callable[[CauseContext], str]
    remedies: tuple[str, ...] = ()  # what to try; the row's fix() when it depends on the launch
    fix: Callable[[CauseContext], list[str]] | None = None
    phase: Callable[[CauseContext], str | None] = lambda c: c.phase


def _log_says(c: CauseContext) -> str:
    return f" The log says: {c.sig['line'].strip()[:200]}" if c.sig else ""


def _exit_text(c: CauseContext) -> str:
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


def launch_cause(ctx: CauseContext) -> dict[str, Any]:
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
