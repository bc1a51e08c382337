"""The sweep loop: plan -> journal -> each unit through an executor -> the summary.

The loop owns every decision (what runs next, what is skipped, pruned, or left for the time
budget) and the journal; executors only run units (``LocalExecutor`` here, one after another
on the sweep's host; ``forensics.sweep.executor_slurm.SlurmExecutor`` as Slurm jobs).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError, UsageError, release_interrupted
from forensics.sweep import executor_local
from forensics.sweep.journal import Journal, WriteHook, last_plan
from forensics.sweep.plan import Sweep, Unit, _base_values, lint_units

if TYPE_CHECKING:
    from forensics.store import Store

Progress = Callable[[dict[str, Any]], None]


class Controller:
    """What executors call back into: the decision before a unit, and its start and finish."""

    def __init__(self, store: Store, sweep: Sweep, journal: Journal, progress: Progress):
        self.store = store
        self.sweep = sweep
        self.journal = journal
        self.progress = progress
        self.t0 = time.monotonic()
        self.results: dict[str, dict[str, Any]] = {}

    # -- decisions ---------------------------------------------------------------------
    def decision(self, unit: Unit) -> tuple[str, str] | None:
        """None: run it. ("pruned", why): never run (final). ("budget", why): not now."""
        budget = self.sweep.run.get("budget_s")
        if budget is not None and time.monotonic() - self.t0 > float(budget):
            return "budget", f"the sweep's time budget ({float(budget):g} s) is spent"
        why = prune_reason(self.store, self.sweep, unit, list(self.results.values()))
        return ("pruned", why) if why else None

    # -- journal -----------------------------------------------------------------------
    def started(self, unit: Unit, **data: Any) -> None:
        self.journal.write("start", unit.key, run_name=unit.run_name, **data)
        self.progress({"event": "start", "key": unit.key, "unit": unit})

    def submitted(self, unit: Unit, job_id: str, **data: Any) -> None:
        self.journal.write("submit", unit.key, job_id=job_id, run_name=unit.run_name, **data)
        self.progress({"event": "submit", "key": unit.key, "unit": unit, "job_id": job_id})

    def finished(self, unit: Unit, result: dict[str, Any]) -> None:
        self.journal.write("finish", unit.key, **result)
        self.results[unit.key] = result
        if result.get("cleanup"):
            self.journal.write("cleanup", unit.key, problem=result["cleanup"])
        self.progress({"event": "finish", "key": unit.key, "unit": unit, "result": result})


def prune_reason(store: Store, sweep: Sweep, unit: Unit, done: list[dict[str, Any]]) -> str | None:
    """Why a config cannot beat the baseline, from the advisor's measured round costs.

    A measured family F bounds a config C from below when C has at least F's steps, topk and
    draft tokens and no better CUDA-graph setting: C's round costs at least F's. Even if every
    draft token were accepted, C's accept length is at most 1 + min(steps, ndt - 1); when
    that is below what F's round cost needs to beat the baseline, C cannot win.
    """
    if not sweep.run.get("prune", True) or unit.baseline:
        return None
    ok = [r for r in done if r.get("outcome") == "ok"]
    base = next((r for r in ok if r.get("baseline") and r.get("tok_s")), None)
    spec_ok = [r for r in ok if not r.get("baseline")]
    if base is None or len(spec_ok) < int(sweep.run.get("prune_after", 2)):
        return None
    from forensics import advise
    from forensics.baseline import Baseline

    cfg = _base_values(unit.argv)
    steps = cfg.get("speculative_num_steps")
    topk = cfg.get("speculative_eagle_topk")
    ndt = cfg.get("speculative_num_draft_tokens")
    if not all(isinstance(v, int) for v in (steps, topk, ndt)):
        return None
    cg = cfg.get("cuda_graph", True) is not False
    baseline = Baseline(float(base["tok_s"]), "run", base.get("run"))
    points = advise.run_points(store, executor_local.log_dir(sweep))
    for fam in advise.estimate_families(points, baseline):
        if None in (fam.num_steps, fam.topk, fam.num_draft_tokens) or fam.accept_needed is None:
            continue
        dominated = (
            steps >= fam.num_steps
            and topk >= fam.topk
            and ndt >= fam.num_draft_tokens
            and (not cg or fam.cuda_graph is not False)
        )
        best_accept = 1 + min(steps, ndt - 1)
        if dominated and best_accept < fam.accept_needed:
            return (
                f"a round costs at least {fam.round_ms:.1f} ms (measured for {fam.family}, which "
                f"it cannot undercut), so beating {baseline.tok_s:.1f} tok/s needs accept len ≥ "
                f"{fam.accept_needed:.2f}; even accepting every draft token gives {best_accept}"
            )
    return None


class LocalExecutor:
    """One unit after another on the sweep's host (the seed session's loop)."""

    name = "local"

    def __init__(self, store: Store, sweep: Sweep, progress: Progress):
        self.store, self.sweep, self.progress = store, sweep, progress
        self.current: Unit | None = None

    def cancel(self) -> None:
        """Ctrl-C: stop the server of the unit in progress (its process group only)."""
        from forensics import launcher

        if self.current is not None:
            with contextlib.suppress(ForensicsError):
                launcher.stop(self.store, self.current.run_name, grace_s=5.0)

    def recover(self, unit: Unit, state: dict[str, Any]) -> dict[str, Any] | None:
        """An interrupted unit: stop what it left running (its process group); run it again."""
        from forensics import launcher

        with contextlib.suppress(ForensicsError):
            launcher.stop(self.store, unit.run_name, grace_s=5.0)
        return None

    def run(self, units: list[Unit], ctl: Controller) -> None:
        for unit in units:
            verdict = ctl.decision(unit)
            if verdict is not None:
                _not_run(ctl, unit, verdict)
                continue
            ctl.started(unit, log=executor_local.recipe_for(self.sweep, unit).log_path)
            self.current = unit
            result = executor_local.run_unit(self.store, self.sweep, unit, progress=self.progress)
            self.current = None
            ctl.finished(unit, result)


def _not_run(ctl: Controller, unit: Unit, verdict: tuple[str, str]) -> None:
    kind, why = verdict
    if kind == "pruned":
        result = executor_local.base_result(unit) | {
            "outcome": "pruned",
            "cause_id": "pruned",
            "cause": why,
        }
        ctl.finished(unit, result)
    else:  # budget: not final, --resume runs it
        ctl.progress({"event": "budget", "key": unit.key, "unit": unit, "why": why})


EXECUTORS = ("local", "slurm")


def make_executor(kind: str, store: Store, sweep: Sweep, progress: Progress, **kw: Any) -> Any:
    if kind == "local":
        return LocalExecutor(store, sweep, progress)
    if kind == "slurm":
        from forensics.sweep.executor_slurm import SlurmExecutor

        return SlurmExecutor(store, sweep, progress, **kw)
    raise UsageError(f"--executor {kind}: unknown executor", hint="use local or slurm")


def run(
    store: Store,
    sweep: Sweep,
    *,
    executor: str = "local",
    resume: bool = False,
    prune: bool | None = None,
    progress: Progress | None = None,
    hook: WriteHook | None = None,
    executor_obj: Any = None,
    **executor_kw: Any,
) -> dict[str, Any]:
    """Run (or resume) a sweep to its end; the summary (``forensics.sweep.report.summary``)."""
    from forensics.sweep import report

    emit = progress or (lambda _e: None)
    if prune is not None:
        sweep.run["prune"] = prune
    journal = Journal(store, sweep.name, hook=hook)
    evs = journal.events()
    state = journal.state()
    if evs and not resume:
        done = sum(1 for s in state.values() if s["status"] == "finished")
        raise UsageError(
            f"sweep {sweep.name!r} already has a journal in {store.root} ({done} of "
            f"{len(sweep.units)} configs finished)",
            hint="--resume continues it; --name NEW starts a new sweep from the same file",
        )
    prev = last_plan(evs)
    if prev is not None and prev.get("executor") and prev["executor"] != executor:
        emit(
            {
                "event": "note",
                "text": f"resumed with --executor {executor} (was {prev['executor']})",
            }
        )
    lint_units(sweep, lambda u: executor_local.recipe_for(sweep, u))
    ex = executor_obj or make_executor(executor, store, sweep, emit, **executor_kw)
    journal.write(
        "plan",
        path=sweep.path,
        digest=sweep.digest,
        executor=executor,
        log_dir=executor_local.log_dir(sweep),
        units=[u.as_dict() for u in sweep.units],
    )
    ctl = Controller(store, sweep, journal, emit)
    for key, s in state.items():
        if s["status"] == "finished":
            ctl.results[key] = s["result"]
    try:
        ex.run(_pending(sweep, state, ctl, ex, emit), ctl)
    except KeyboardInterrupt as exc:
        try:  # the same Ctrl-C may raise twice (forensics/errors.py): absorb the second here
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        release_interrupted(exc)  # a store lock it stopped half-way: the journal needs it
        with contextlib.suppress(Exception):
            getattr(ex, "cancel", lambda: None)()
        with contextlib.suppress(Exception):
            journal.write("stop", reason="interrupted")
        raise
    journal.write("stop", reason="done")
    return report.summary(store, sweep.name, sweep=sweep)


def _pending(
    sweep: Sweep, state: dict[str, Any], ctl: Controller, ex: Any, emit: Progress
) -> list[Unit]:
    """The units still to run, the baseline first. Skipped units are finished here; a unit
    the journal left started (or submitted) is recovered by the executor when it can be."""
    pending: list[Unit] = []
    for u in sweep.units:
        s = state.get(u.key, {"status": None})
        if s["status"] == "finished":
            continue
        if u.skip:
            ctl.finished(
                u,
                executor_local.base_result(u)
                | {"outcome": "skipped", "cause_id": u.skip, "cause": u.skip_reason},
            )
            continue
        if s["status"] in ("started", "submitted"):
            recovered = ex.recover(u, s)
            emit({"event": "recover", "key": u.key, "unit": u, "how": recovered})
            if recovered == "adopted":  # a Slurm job that still runs: the executor follows it
                continue
            if recovered is not None:
                ctl.finished(u, recovered)
                continue
        pending.append(u)
    pending.sort(key=lambda u: not u.baseline)  # the baseline first
    return pending
