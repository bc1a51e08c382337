"""Running a chain under the journal, in named steps: prepare (lint, journal place, the launch
registered), write the scripts, spawn, follow the chain, watch the server until one of
SERVER_ENDS is reached, then diagnose, collect evidence and record the outcome.

``execute(store, plan, progress)`` is what ``launch`` and ``relaunch`` both call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import posixpath
import shlex
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import polars as pl

from forensics.errors import (
    DeadlineExceeded,
    ForensicsError,
    HostUnreachable,
    LaunchFailed,
    RemoteError,
    release_interrupted,
)
from forensics.launcher import records
from forensics.launcher.causes import CauseContext, diagnose_journal, launch_cause, match_log
from forensics.launcher.hostinfo import (
    file_size,
    host_for,
    log_tail,
    probe,
    proc_start,
    read_journal,
)
from forensics.launcher.readiness import HEALTH_POLL_S, health_status, ready_round
from forensics.launcher.scrub import SCRIPT_NAME, follow_command, follower_script
from forensics.launcher.stop import STOP_GRACE_S, kill_group
from forensics.launcher.wrapper import KILL_AFTER_S, TAIL_BYTES, build_supervisor, build_wrapper
from forensics.lint import Finding, lint
from forensics.recipe import Recipe, server_step
from forensics_parsers.secrets import redact, redact_data
from forensics_parsers.sglang import stage_of
from forensics_parsers.shell import Chain

if TYPE_CHECKING:
    from forensics.hosts import Host
    from forensics.store import Store

Progress = Callable[[dict[str, Any]], None]

POLL_S = 0.15  # between reads of the journal while the chain runs
# a lost connection during the wait: the outcome is unknown, never "failed" (S07)
CONNECTION_LOST = (HostUnreachable, RemoteError, DeadlineExceeded)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to run: the recipe, the chain run (``run_chain``) and the user's own (``orig_chain``,
    same steps, before safe-pattern/simulator substitution), and how to run it."""

    recipe: Recipe
    mode: str  # launch | replay
    host_name: str | None
    run_chain: Chain
    orig_chain: Chain
    token: str | None
    health_deadline: float
    step_deadline: float
    keep_running: bool
    make_log_dir: bool
    pid_path: str | None = None


@dataclasses.dataclass
class _Launch:
    """One launch in flight: where it runs, its fixed record fields, and what was seen."""

    store: Store
    plan: Plan
    host: Host
    tools: set[str]  # what the host has of timeout, setsid, bash, curl, wget
    base: dict[str, Any]  # the launches row's fixed fields
    findings: list[Finding]
    journal: str
    work: str
    progress: Progress | None
    frame: pl.DataFrame = dataclasses.field(default_factory=pl.DataFrame)
    log_start: int = 0  # the log may hold earlier launches (`>>LOG`): this one starts here
    sup_pid: int | None = None
    server_pid: int | None = None
    server_pgid: int | None = None
    status: str = "failed"
    health_code: int | None = None
    unverified: str | None = None  # H11: why a healthy-looking server was not trusted
    stages: list[str] = dataclasses.field(default_factory=list)
    followed: bool = False  # the secrets follower runs on the host (launcher.scrub)

    @property
    def launch_id(self) -> str:
        return self.base["launch_id"]

    def read(self) -> pl.DataFrame:
        self.frame = read_journal(self.host, self.journal, self.launch_id)
        return self.frame

    def record(self, status: str, **fields: Any) -> None:
        records.record(self.store, {**self.base, "status": status, **fields})

    def emit(self, **event: Any) -> None:
        _emit(self.progress, **event)

    def finding(self, fid: str) -> Finding | None:
        return next((f for f in self.findings if f.id == fid), None)


def _emit(progress: Progress | None, **event: Any) -> None:
    if progress is not None:
        with contextlib.suppress(Exception):
            progress(redact_data(event))  # what is shown: the chain's secrets redacted


def execute(store: Store, plan: Plan, progress: Progress | None = None) -> dict[str, Any]:
    """Run ``plan`` on its host under the journal and return its diagnosis (see the package
    doc for the keys)."""
    run = _prepare(store, plan, progress)
    run.record("registered")  # before anything runs, so a run that dies at once still exists
    _write_scripts(run)
    try:
        # inside the try: a Ctrl-C right after the spawn (the server may already be up) must
        # still record the group, or `forensics stop` could not find it
        run.sup_pid = run.host.spawn(f"exec sh {shlex.quote(run.work + '/sup.sh')}")
        run.record("running", pid=run.sup_pid)
        run.emit(event="status", status="running", journal=run.journal)
        wrapper_done = _follow_chain(run)
        _watch_server(run, wrapper_done)
    except CONNECTION_LOST as exc:
        raise _lost(run, exc) from None
    except KeyboardInterrupt as exc:
        # The same Ctrl-C may raise twice ("One Ctrl-C, two KeyboardInterrupts" in
        # forensics/errors.py): let a pending second one fire here, where it is absorbed, not
        # in the record below. (A `try` is set up before any check runs: no call before it.)
        try:
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        release_interrupted(exc)  # a store lock it stopped half-way: the record below needs it
        _interrupted(run)
        with contextlib.suppress(Exception):  # what it left so far holds no secret either
            _scrub(run)
        raise
    # the result is printed (--json) and kept by sweeps: the journal rows quote the chain
    # (`--api-key X`), the log tail and the evidence the server's output; one redaction here
    return redact_data(_conclude(run))


def _prepare(store: Store, plan: Plan, progress: Progress | None) -> _Launch:
    """Lint the chain (a full disk stops here: S10), place the journal, fix the record."""
    recipe, host = plan.recipe, host_for(plan.host_name)
    info = probe(host)
    findings = lint(recipe.replace(shell=plan.orig_chain.text), host=host)
    full = next((f for f in findings if f.id == "disk-full"), None)
    if full is not None:  # a replay on a full disk fails mid-write and fills it further
        raise LaunchFailed(f"{recipe.name}: {full.explanation}", hint=full.alternative)
    launch_id = uuid.uuid4().hex[:12]
    log_dir = posixpath.dirname(recipe.log_path) if recipe.log_path else None
    if plan.make_log_dir and log_dir:
        host.makedirs(log_dir)
    if log_dir and host.is_dir(log_dir):
        journal = recipe.log_path + ".journal.jsonl"
        work = f"{recipe.log_path}.journal.d/{launch_id}"
    else:
        root = posixpath.join(info["tmp"], f"forensics-{info['user']}")
        journal = posixpath.join(root, f"{recipe.name}.journal.jsonl")
        work = posixpath.join(root, f"{recipe.name}.journal.d", launch_id)
    base = {
        "launch_id": launch_id,
        "name": recipe.name,
        "host": host.name,
        "mode": plan.mode,
        "log_path": recipe.log_path,
        "recipe": recipe.to_json(),
        "started_at": records.now(),
        "port": recipe.port,
        "health_url": recipe.health_url,
        "token": plan.token,
        "journal_path": journal,
        "pid_path": plan.pid_path,
    }
    return _Launch(store, plan, host, info["has"], base, findings, journal, work, progress)


def _write_scripts(run: _Launch) -> None:
    """The wrapper, the chain and the supervisor into the launch's work dir on the host."""
    plan, host = run.plan, run.host
    wrapper = build_wrapper(
        plan.run_chain,
        plan.orig_chain,
        journal=run.journal,
        work_dir=run.work,
        launch_id=run.launch_id,
        step_deadline=plan.step_deadline,
        pid_path=plan.pid_path,
        has_timeout="timeout" in run.tools,
        has_setsid="setsid" in run.tools,
    )
    shell = plan.recipe.shell_program if plan.recipe.shell_program in run.tools else "sh"
    srv = server_step(plan.run_chain)
    begin = {
        "chain": plan.orig_chain.text,
        "shell": shell,
        "mode": plan.mode,
        "server_step": srv.index if srv else None,
        "safe_patterns": plan.token is not None,
    }
    host.makedirs(run.work)
    host.write(f"{run.work}/wrapper.sh", wrapper.encode())
    host.write(f"{run.work}/chain.txt", plan.run_chain.text.encode())
    sup = build_supervisor(
        journal=run.journal, work_dir=run.work, launch_id=run.launch_id, shell=shell, begin=begin
    )
    host.write(f"{run.work}/sup.sh", sup.encode())
    host.write(f"{run.work}/{SCRIPT_NAME}", follower_script().encode())
    run.log_start = file_size(host, plan.recipe.log_path)


def _follow_chain(run: _Launch) -> bool:
    """Report the steps until the wrapper exits (every step has a deadline, so this ends);
    whether it did."""
    plan = run.plan
    n_steps = len(plan.run_chain.steps)
    chain_deadline = time.monotonic() + n_steps * (plan.step_deadline + KILL_AFTER_S + 2) + 20
    seen: set[tuple[str, int]] = set()
    while True:
        frame = run.read()
        for r in frame.filter(pl.col("event").is_in(["start", "end"])).to_dicts():
            if (r["event"], r["seq"]) not in seen:
                seen.add((r["event"], r["seq"]))
                run.emit(event="step", step=r.get("step"), rc=r.get("rc"), orig=r.get("orig"),
                         phase=r["event"])  # fmt: skip
        if "exit" in frame["event"].to_list():
            return True
        if time.monotonic() > chain_deadline:
            return False
        time.sleep(POLL_S)


@dataclasses.dataclass
class _Watch:
    """The wait for the server: until when, which step is the server, whether /health counts."""

    end_at: float
    server_step: int | None
    check_health: bool  # not when the port was taken before the start: someone else answers


def _healthy(run: _Launch, w: _Watch) -> bool:
    """/health answered a streak of 200s and the server passed verify_ready (H06/H11)."""
    url = run.plan.recipe.health_url
    if not (w.check_health and url):
        return False
    run.health_code = health_status(run.host, url, run.tools)
    if run.health_code != 200:
        return False
    run.health_code, streak, problem, note = ready_round(
        run.host, url, run.server_pgid, run.tools, seen=1
    )
    if streak and problem is None:
        run.emit(event="health", code=200, note=note)
        return True
    if streak:
        run.unverified = problem
        run.emit(event="unverified", problem=problem)
    return False


def _server_ended(run: _Launch, w: _Watch) -> bool:
    f = run.frame
    return not f.filter((pl.col("event") == "end") & (pl.col("step") == w.server_step)).is_empty()


# How the wait for the server ends, checked in order each round: (status, reached).
SERVER_ENDS: tuple[tuple[str, Callable[[_Launch, _Watch], bool]], ...] = (
    ("ready", _healthy),
    ("failed", _server_ended),
    ("timeout", lambda run, w: time.monotonic() > w.end_at),
)


def _watch_server(run: _Launch, wrapper_done: bool) -> None:
    """Follow the log and poll health until one of SERVER_ENDS; sets ``run.status``."""
    events = run.frame["event"].to_list() if "event" in run.frame.columns else []
    if "server" not in events and "spawned" not in events:
        run.status = "failed" if wrapper_done else "timeout"
        return
    srv = server_step(run.plan.run_chain)
    watch = _Watch(
        end_at=time.monotonic() + run.plan.health_deadline,
        server_step=srv.index if srv else None,
        check_health=run.finding("port-in-use") is None,
    )
    log, offset = run.plan.recipe.log_path, run.log_start
    while True:
        srows = run.read().filter(pl.col("event") == "server")
        if run.server_pid is None and not srows.is_empty():
            run.server_pid = srows["pid"][0]
            run.server_pgid = srows["pgid"][0] or run.server_pid
            run.emit(event="server", pid=run.server_pid)
        if log:
            offset = _follow(run, log, offset)
        status = next((s for s, reached in SERVER_ENDS if reached(run, watch)), None)
        if status is not None:
            run.status = status
            break
        time.sleep(HEALTH_POLL_S)
    if log:
        _follow(run, log, offset)


def _follow(run: _Launch, path: str, offset: int) -> int:
    """Read new log bytes from ``offset`` and report the startup stages that passed.

    A log that became shorter than ``offset`` was truncated (the chain's own `>LOG`): it is
    read again from its start.
    """
    host = run.host
    try:
        data = host.read(path, offset)
        if not data and offset and file_size(host, path) < offset:
            offset = 0
            data = host.read(path, 0)
    except ForensicsError:
        return offset
    cut = data.rfind(b"\n") + 1
    if cut == 0:
        return offset
    for line in data[:cut].decode("utf-8", "replace").splitlines():
        stage = stage_of(line)
        if stage is not None and (stage not in run.stages or stage == "load_end"):
            run.stages.append(stage)
            run.emit(event="stage", stage=stage, line=line.strip()[:200])
    return offset + cut


def _lost(run: _Launch, exc: ForensicsError) -> ForensicsError:
    """S07: the connection dropped while waiting. The server runs on in its own session
    (nohup, setsid) or died: nobody knows which. Recorded as unknown, never as failed."""
    pid = run.server_pid or run.sup_pid
    run.record("unknown", pid=pid, pgid=run.server_pid, cause="connection-lost")
    name, host = run.plan.recipe.name, run.host.name
    return type(exc)(
        f"{name}: lost {host} during the launch, so its outcome is unknown "
        f"(the server may still run): {exc.message}",
        hint=f"once the host answers, `forensics launch --check {name}` re-checks it "
        "from its pid file and /health",
    )


def _interrupted(run: _Launch) -> None:
    """Ctrl-C stops the waiting, not the server (it runs in its own group): record the group
    so `forensics stop NAME` can end it; the CLI then exits 130. A late second interrupt of the
    same Ctrl-C inside the record gets another try."""
    for _ in range(3):
        try:
            if run.server_pid is None:
                srows = run.read().filter(pl.col("event") == "server")
                run.server_pid = None if srows.is_empty() else srows["pid"][-1]
            pid = run.server_pid or run.sup_pid
            run.record("interrupted", pid=pid, pgid=run.server_pid, cause="interrupted")
            return
        except KeyboardInterrupt:
            continue
        except Exception:  # noqa: BLE001 - the record is best effort; the CLI still exits 130
            return


def _diagnose(run: _Launch, log_text: str) -> dict[str, Any]:
    """The journal's cause, else (the launch not ready) the first LAUNCH_CAUSES row."""
    diag = diagnose_journal(run.frame)
    if run.status != "ready" and diag["cause"] is None:
        ctx = CauseContext(
            status=run.status,
            sig=match_log(log_text) if log_text else None,
            port_finding=run.finding("port-in-use"),
            unverified=run.unverified,
            stages=run.stages,
            health_deadline=run.plan.health_deadline,
            frame=run.frame,
        )
        diag.update(launch_cause(ctx))
    return diag


def _conclude(run: _Launch) -> dict[str, Any]:
    """Diagnose, collect evidence of a failure, stop a ready server not kept, record it all."""
    plan, host, recipe = run.plan, run.host, run.plan.recipe
    run.read()
    log_text = log_tail(host, recipe.log_path, start=run.log_start)
    _scrub(run)
    diag = _diagnose(run, log_text)
    pgid = run.server_pid
    evidence = None
    if run.status != "ready":
        evidence = _collect_evidence(host, pgid, recipe.port, run.launch_id)
    pid_start = proc_start(host, pgid) if pgid and run.status == "ready" else None
    if run.status == "ready" and not plan.keep_running and pgid:
        kill_group(host, pgid, pid_start, STOP_GRACE_S)
        run.status = "stopped"
    records.record_journal(
        run.store, run.frame.with_columns(pl.lit(run.launch_id).alias("launch_id"))
    )
    result = {
        **diag,
        "launch_id": run.launch_id,
        "name": recipe.name,
        "host": host.name,
        "mode": plan.mode,
        "status": run.status,
        "log_path": recipe.log_path,
        "log_exists": recipe.log_path is not None and host.exists(recipe.log_path),
        "log_tail": redact(log_text[-TAIL_BYTES:]) if log_text else "",
        "journal_path": run.journal,
        "findings": [f.to_dict() for f in run.findings],
        "stages": run.stages,
        "health": run.health_code,
        "pgid": pgid,
        "port": recipe.port,
        "token": plan.token,
        "evidence_collected": evidence,
    }
    summary = {k: result[k] for k in ("cause", "phase", "step", "explanation", "next_steps")}
    run.record(run.status, pid=pgid or run.sup_pid, pgid=pgid, pid_start=pid_start,
               cause=diag["cause"], diagnosis=json.dumps(summary, default=str))  # fmt: skip
    return result


def _scrub(run: _Launch) -> None:
    """The secrets of the files this launch left on its host, masked in place (the log,
    forensics' or the user's, the journal, every work folder of the journal's launches: one
    a kill -9 cut short is masked now), then followed as the server writes on
    (``launcher.scrub``). At the launch's end, and when it is interrupted."""
    import sys

    from forensics.launcher.scrub import scrub_launch

    folder, script = posixpath.dirname(run.work), f"{run.work}/{SCRIPT_NAME}"
    srv = server_step(run.plan.run_chain)
    target = srv.command.stdout_target() if srv and srv.command else None
    # the log: the recipe's, and the file the chain's server step itself writes
    logs = sorted({p for p in (run.plan.recipe.log_path, target) if p and p.startswith("/")})
    if run.host.name == "local":
        scrub_launch([run.journal, *logs], folder)
        python = sys.executable
    elif "python3" in run.tools:
        python = "python3"
        once = [python, script, "once", run.journal, folder, *logs]
        run.host.run(shlex.join(once), timeout=120, allow_timeout=True)
    else:  # no python3 there: masked from here, once (launcher/scrub_remote.py)
        from forensics.launcher.scrub_remote import scrub_over

        scrub_over(run.host, [run.journal, *logs], folder)
        return
    if not run.followed:
        follow = follow_command(python, run.journal, folder, run.launch_id, run.sup_pid or 0, logs)
        run.host.spawn(follow, cwd=run.work)
        run.followed = True


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
