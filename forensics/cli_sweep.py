"""`forensics sweep FILE` (the tuning loop) and `forensics sweep status [SWEEP]`."""

from __future__ import annotations

import sys
from typing import Any

import click

from forensics.cli_common import POSITIVE, Number, echo, echo_json, get_store
from forensics.errors import EXIT_DEADLINE, EXIT_INTERRUPTED


def register(cli: click.Group) -> None:
    cli.add_command(sweep_group)


class SweepGroup(click.Group):
    """`sweep FILE ...` runs a sweep; `sweep status ...` is a subcommand."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "FILE [OPTIONS] | status [SWEEP]")


@click.group("sweep", cls=SweepGroup)
def sweep_group() -> None:
    """Run a grid of server configurations, one launch + benchmark each, and compare them.

    `forensics sweep FILE` plans the sweep file (docs/sweep.md), skips the combinations SGLang
    refuses, then runs the baseline and every config: safe launch, health, bench, stop, ingest.
    A config that fails is diagnosed and the sweep goes on. `--resume` continues after Ctrl-C, a
    crash or a kill -9 without re-running a finished config. `forensics sweep status` shows a
    sweep's progress and results.

    Exit codes: 0 the sweep ran every config (failed configs are results); 2 a bad sweep file
    or option; 3 no such file or sweep; 6 the time budget ended it with configs left (--resume
    runs them); 130 interrupted (the journal keeps what finished).
    """


@sweep_group.command("run")
@click.argument("file", type=click.Path(dir_okay=True))
@click.option(
    "--resume", is_flag=True, help="Continue the sweep's journal: finished configs are kept."
)
@click.option("--dry-run", is_flag=True, help="Print the plan (and what is skipped, why) and stop.")
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm"]),
    default="local",
    show_default=True,
    help="local: one config at a time on the recipe's host; slurm: each config as a Slurm job.",
)
@click.option(
    "--max-parallel",
    type=Number(1, 10_000, integer=True),
    help="Slurm jobs in flight at once (default: [slurm] max_parallel, else 2).",
)
@click.option(
    "--no-prune", is_flag=True, help="Run every config, even one that cannot beat the baseline."
)
@click.option("--name", help="The sweep's name (default: the file's `name`, else its stem).")
@click.option("--poll", type=POSITIVE, help="Seconds between Slurm state checks (default 2).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object at the end.")
@click.pass_context
def run_cmd(
    ctx: click.Context,
    file: str,
    resume: bool,
    dry_run: bool,
    executor: str,
    max_parallel: int | None,
    no_prune: bool,
    name: str | None,
    poll: float | None,
    as_json: bool,
) -> None:
    """Run (or --resume, or --dry-run) the sweep in FILE."""
    from forensics import sweep as sw
    from forensics.sweep import plan as plan_mod
    from forensics.sweep.executor_local import recipe_for

    s = sw.load(file, name=name)
    plan_mod.lint_units(s, lambda u: recipe_for(s, u))
    if dry_run:
        if as_json:
            echo_json({"sweep": s.name, "dry_run": True, "units": [u.as_dict() for u in s.units]})
        else:
            echo(plan_text(s))
        return
    if not as_json:
        echo(plan_text(s), err=True)
    store = get_store(ctx)
    kw: dict[str, Any] = {}
    if executor == "slurm":
        kw = {"max_parallel": max_parallel, "poll_s": poll}
    try:
        res = sw.run(
            store,
            s,
            executor=executor,
            resume=resume,
            prune=False if no_prune else None,
            progress=_progress(s, quiet=as_json),
            **kw,
        )
    except KeyboardInterrupt:
        echo(
            f"Interrupted: the journal keeps what finished; forensics sweep {file} --resume "
            "continues.",
            err=True,
        )
        ctx.exit(EXIT_INTERRUPTED)
    res["plots"] = _plots(store, s.name)
    if as_json:
        echo_json(res)
    else:
        echo(sw.render(res))
        if res["plots"]:
            echo("plots: " + ", ".join(res["plots"].values()))
            echo(f"report: forensics report --sweep {s.name}")
    if res["counts"]["pending"]:
        echo(
            f"Error: {s.name}: the time budget ended the sweep with {res['counts']['pending']} "
            f"configs left (try: forensics sweep {file} --resume)",
            err=True,
        )
        ctx.exit(EXIT_DEADLINE)


@sweep_group.command("status")
@click.argument("sweep", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status_cmd(ctx: click.Context, sweep: str | None, as_json: bool) -> None:
    """Progress and results of SWEEP (without SWEEP: every sweep in the store)."""
    from forensics import sweep as sw

    store = get_store(ctx, create=False)
    if sweep is None:
        rows = sw.sweeps(store)
        if as_json:
            echo_json({"sweeps": rows})
            return
        if not rows:
            echo("No sweeps in the store (forensics sweep FILE starts one).")
            return
        for r in rows:
            echo(
                f"{r['sweep']}: {r['finished']}/{r['units']} finished, {r['ok']} ok "
                f"({r['executor']}, last event {r['updated_at']:%Y-%m-%d %H:%M:%S})"
            )
        return
    res = sw.summary(store, sweep)
    if as_json:
        echo_json(res)
    else:
        echo(sw.render(res))


def _plots(store: Any, name: str) -> dict[str, str]:
    """The sweep's trend and accept plots beside its logs (none when no run has data)."""
    from forensics.errors import ForensicsError
    from forensics.hosts import forensics_home
    from forensics.sweep.report import plots

    try:
        return plots(store, name, forensics_home() / "sweeps" / name)
    except ForensicsError as exc:
        echo(f"Warning: {name}: no plots ({exc})", err=True)
        return {}


def plan_text(s: Any) -> str:
    from forensics.sweep.report import config_text

    lines = [f"sweep {s.name}: {len(s.units)} launches planned ({s.path})"]
    for i, u in enumerate(s.units, 1):
        what = "skip: " + (u.skip_reason or "") if u.skip else "run"
        rep = f" #{u.repeat}" if u.repeat > 1 else ""
        lines.append(f"  {i:>2}. {u.config_id}{rep} [{config_text(u.config)}] {what}")
        for n in u.notes:
            lines.append(f"      note: {n}")
    return "\n".join(lines)


def _progress(s: Any, *, quiet: bool):
    total = len(s.units)
    index = {u.key: i for i, u in enumerate(s.units, 1)}

    def cb(e: dict[str, Any]) -> None:
        if quiet:
            return
        ev = e.get("event")
        tag = f"[{index.get(e.get('key'), '?')}/{total}] {e.get('key', '')}"
        if ev == "start":
            msg = f"{tag}: launching"
        elif ev == "submit":
            msg = f"{tag}: submitted as Slurm job {e['job_id']}"
        elif ev == "job":
            msg = f"{tag}: job {e.get('job_id')} {e.get('state')}" + (
                f" ({e['reason']})" if e.get("reason") else ""
            )
        elif ev == "ready":
            msg = f"{tag}: ready in {e['seconds']:.1f} s, benchmarking"
        elif ev == "finish":
            r = e["result"]
            tok = f" {r['tok_s']:.1f} tok/s" if r.get("tok_s") else ""
            why = f": {r['cause']}" if r.get("outcome") != "ok" and r.get("cause") else ""
            msg = f"{tag}: {r['outcome']}{tok}{why}"
        elif ev == "recover":
            how = e.get("how")
            msg = f"{tag}: interrupted earlier; " + (
                "its Slurm job still runs: following it"
                if how == "adopted"
                else "its job ended: result collected"
                if how is not None
                else "stopping what it left and running it again"
            )
        elif ev == "budget":
            msg = f"{tag}: not started: {e['why']}"
        elif ev == "note":
            msg = e["text"]
        else:
            return
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    return cb
