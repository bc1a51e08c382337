"""Starting a run: ``launch`` (the safe way: registered first, the previous run of that name
stopped by its process group, log directory created, own process group and pid file, health
wait) and ``relaunch`` (the user's chain replayed as typed, under the journal)."""

from __future__ import annotations

import contextlib
import shlex
import sys
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError, LaunchFailed, UsageError
from forensics.launcher import records
from forensics.launcher.hostinfo import host_for
from forensics.launcher.run import Plan, Progress, execute
from forensics.launcher.safe import new_token, safe_chain
from forensics.launcher.stop import stop
from forensics.lint import RULES_BY_ID, lint, replay_blockers
from forensics.recipe import Recipe, valid_name, with_simulator
from forensics_parsers.shell import parse_chain

if TYPE_CHECKING:
    from forensics.store import Store

# lint findings that stop `forensics launch` before anything runs (a replay runs the chain as
# typed, so only disk-full stops it: the other findings are what it comes to observe)
BLOCKING = ("port-in-use", "disk-full")


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
    """Replay a launch faithfully under the journal and diagnose it (see the package doc)."""
    base = recipe if recipe is not None else records.resolve_recipe(store, name)
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
        host_for(r.host).write(marker, b"")
    try:
        plan = Plan(
            r,
            mode="replay",
            host_name=r.host,
            run_chain=run_chain,
            orig_chain=orig,
            token=token if (safe_patterns or sim) else None,
            health_deadline=deadline or r.health_deadline_s,
            step_deadline=step_deadline or r.step_deadline_s,
            keep_running=keep_running,
            make_log_dir=False,
        )
        return execute(store, plan, progress)
    finally:
        if marker is not None:
            with contextlib.suppress(ForensicsError):
                host_for(r.host).run(f"rm -f {shlex.quote(marker)}", timeout=10)


def _refuse_replay(recipe: Recipe, safe_patterns: bool) -> None:
    """A chain with a finding whose rule says so (lint's ``replay`` column: shell-syntax,
    removes-launch-input; mass-kill unless --safe-patterns skips the step) is not replayed."""
    for f in replay_blockers(recipe, safe_patterns=safe_patterns):
        where = f"step {f.step} " if f.step is not None else ""
        fix = (
            "replay it with --safe-patterns (the step is skipped), or fix the chain"
            if RULES_BY_ID[f.id].replay == "safe-patterns"
            else "fix the chain (forensics lint --shell '...' shows where)"
        )
        raise UsageError(f"{recipe.name}: not replayed: {where}{f.id}: {f.explanation}", hint=fix)


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
    """Start a run safely (see the package doc). Raises LaunchFailed on a blocking finding."""
    valid_name(recipe.name)
    store.require_writable("cannot record the launch")  # a read-only home: exit 7, nothing run
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
    prev = records.find_launch_exact(store, r.name) or {}
    if prev.get("status") in ("ready", *records.UNSETTLED) and prev.get("pgid"):
        stop(store, r.name)
    h = host_for(r.host)
    _check_log_target(h, r.log_path)
    blocking = [f for f in lint(r.replace(shell=None), host=h) if f.id in BLOCKING]
    if blocking:
        raise LaunchFailed(
            f"{r.name}: {blocking[0].explanation}", hint=blocking[0].alternative.split(";")[0]
        )
    # the safe chain: the recipe's own extra cleanup (config form only), then the server
    safe = r.replace(shell=None, cleanup=r.cleanup if recipe.shell is None else [])
    server_text = safe.chain_text().replace("setsid nohup ", "nohup ", 1)
    chain = parse_chain(server_text)
    plan = Plan(
        safe.replace(shell=server_text),
        mode="launch",
        host_name=r.host,
        run_chain=chain,
        orig_chain=chain,
        token=token if sim else None,
        health_deadline=deadline or r.health_deadline_s,
        step_deadline=r.step_deadline_s,
        keep_running=keep_running,
        make_log_dir=True,
        pid_path=r.log_path + ".pid",
    )
    return execute(store, plan, progress)


def _check_log_target(host: Any, path: str) -> None:
    """The launch's log is where the server appends and what forensics reads back while it
    waits: a regular file, or nothing yet (its folder is made). Anything else is refused
    before the chain runs (exit 2, issue 14 sixth round: a socket or a folder was an internal
    error once the server had started; a device or a FIFO gave a launch nothing could read)."""
    from forensics.errors import BadPath, FileMissing
    from forensics.hosts.base import require_regular

    if path.endswith("/"):
        raise BadPath(
            f"{path}: ends with '/', the name of a folder, not of a log file",
            hint=f"--log {path.rstrip('/') or '/'}/NAME.log, or drop the trailing /",
        )
    try:
        st = host.stat(path)
    except FileMissing:
        return  # nothing yet: the server creates it
    require_regular(st, path, "launch log")


def _default_log(recipe: Recipe) -> str:
    from forensics.hosts import forensics_home

    if recipe.host in (None, "", "local"):
        return str((forensics_home() / "logs" / f"{recipe.name}.log").resolve())
    return f"/tmp/forensics-logs/{recipe.name}.log"
