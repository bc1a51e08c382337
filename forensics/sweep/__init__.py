"""`forensics sweep`: the tuning loop of the seed session as one command (docs/sweep.md).

Public API::

    load(path, *, name=None) -> Sweep            the sweep file and its plan (plan.py)
    run(store, sweep, *, executor="local", resume=False, prune=None, progress=None) -> dict
                                                 run or resume it to its end (runner.py)
    summary(store, name) -> dict                 configs, best, failures (report.py)
    sweeps(store) -> list[dict]                  every sweep in the store (journal.py)

Modules: plan (the file, the grid, SGLang's constraints from constraints.py, lint),
journal (the sweep's state in the store), runner (the loop: order, prune, budget, resume),
executor_local (one unit: launch, bench, stop, ingest), executor_slurm (units as Slurm jobs),
job (what a Slurm job runs), report (the summary and its text).
"""

from forensics.sweep.journal import sweeps
from forensics.sweep.plan import Sweep, Unit, load
from forensics.sweep.report import render, summary
from forensics.sweep.runner import run

__all__ = ["Sweep", "Unit", "load", "render", "run", "summary", "sweeps"]
