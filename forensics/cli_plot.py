"""`forensics plot`, `forensics report`, `forensics advise`."""

from __future__ import annotations

import click

from forensics.cli_common import (
    OptionRule,
    echo,
    echo_json,
    echo_wrote,
    get_store,
    group_by_option,
    option_rules,
)

BASELINE_HELP = (
    "The baseline: a tok/s figure (90) or a run name/id. "
    "Default: the experiment's stored baseline (forensics baseline), else its best "
    "single-stream plain run."
)
EXPERIMENT_HELP = (
    "The experiment to draw (its name or a unique fragment, as `forensics runs` shows it); "
    "default: the one with the most runs."
)


def register(cli: click.Group) -> None:
    cli.add_command(plot_cmd)
    cli.add_command(report_cmd)
    cli.add_command(advise_cmd)
    cli.add_command(experiments_cmd)


def _kind_reads(option: str) -> OptionRule:
    """An option a plot kind does not read is refused (plots.KIND_OPTIONS)."""

    def refused(params: dict) -> bool:
        from forensics.plots import KIND_OPTIONS

        return option not in KIND_OPTIONS[params["kind"]]

    flag = "--" + option.replace("_", "-")
    return OptionRule(option, refused=refused, why=f"{flag} does not apply to this plot kind")


@click.command("plot")
@click.argument("kind", type=click.Choice(["trend", "accept", "startup", "decode"]))
@click.argument("match", required=False)
@click.option(
    "-o",
    "--out",
    default=None,
    help="Image file, .png or .svg (default: ./forensics-KIND.png); `-` or /dev/stdout "
    "writes a PNG to stdout (stderr then says 'KIND plot written to standard output').",
)
@click.option("--baseline", metavar="RUN|TOK_S", default=None, help=BASELINE_HELP)
@click.option("--experiment", metavar="EXP", default=None, help=EXPERIMENT_HELP)
@group_by_option()
@click.option("--json", "as_json", is_flag=True, help="Print {kind, path, match} as JSON.")
@option_rules(*(_kind_reads(o) for o in ("baseline", "experiment", "group_by")))
@click.pass_context
def plot_cmd(ctx, kind, match, out, baseline, experiment, group_by, as_json):
    """Draw a plot of the runs (MATCH: a run name fragment; for `decode`, the run).

    trend and accept draw one experiment (same model, layout, hardware and benchmark
    shape) against its own baseline.

    \b
    trend    tok/s of every run in launch order vs the baseline; failed runs at the bottom
    accept   accept length vs tok/s, with the break-even against the baseline
    startup  startup stages per run (load, KV pool, capture, warmup); where failed runs died
    decode   gen throughput, accept length and batch size over time for one run
    """
    from forensics.plots import make_plot

    store = get_store(ctx, create=False)
    fig, path = make_plot(
        store, kind, match, out=out, baseline=baseline, experiment=experiment, group_by=group_by
    )
    summary = {"kind": kind, "path": str(path), "match": match} if as_json else None
    echo_wrote(path, summary, what=f"{kind} plot")


@click.command("report")
@click.argument("match", required=False)
@click.option(
    "-o",
    "--out",
    default="report.html",
    show_default=True,
    help="The HTML file to write; `-` or /dev/stdout writes it to stdout (stderr then says "
    "'report written to standard output').",
)
@click.option("--baseline", metavar="RUN|TOK_S", default=None, help=BASELINE_HELP)
@group_by_option()
@click.option("--sweep", "sweep_name", help="Only the runs of this sweep, vs its own baseline.")
@click.option("--json", "as_json", is_flag=True, help="Print {path, match, bytes} as JSON.")
@click.pass_context
def report_cmd(ctx, match, out, baseline, group_by, sweep_name, as_json):
    """Write one self-contained HTML page: a contents list, then per experiment its verdict,
    plots, configurations, runs table and failed-run diagnoses.

    The page needs no network and no JavaScript; open it in any browser or attach it.
    """
    from forensics.report import write_report

    store = get_store(ctx, create=False)
    if sweep_name:
        from forensics.sweep.report import match_for

        if match:
            raise click.UsageError("give MATCH or --sweep, not both")
        match, base = match_for(store, sweep_name)
        if baseline is None and base is not None:
            baseline = f"{base:.3f}"
    path, size = write_report(store, out, match, baseline=baseline, group_by=group_by)
    echo_wrote(
        path, {"path": str(path), "match": match, "bytes": size} if as_json else None, what="report"
    )


@click.command("advise")
@click.argument("match", required=False)
@click.option("--baseline", metavar="RUN|TOK_S", default=None, help=BASELINE_HELP)
@group_by_option()
@click.option("--json", "as_json", is_flag=True, help="Print the estimates and verdict as JSON.")
@click.pass_context
def advise_cmd(ctx, match, baseline, group_by, as_json):
    """Is speculation worth it? Round cost per configuration and the accept length it needs.

    From runs with tok/s and accept length: round_ms = 1000 x accept_len / tok_s per
    configuration family; beating the baseline needs accept_len >= round_ms / baseline ms per
    token. Says how far the drafter is from that, and what to run next. Each experiment
    (same model, layout, hardware and benchmark shape) is judged against its own baseline.
    """
    from forensics.advise import advise, render_advice

    store = get_store(ctx, create=False)
    data = advise(store, match, baseline, group_by=group_by)
    if as_json:
        echo_json(data)
    else:
        echo(render_advice(data))


@click.command("experiments")
@click.option(
    "--label",
    "label",
    metavar="NAME",
    default=None,
    help="Put the runs MATCH names into experiment NAME (whatever their key says).",
)
@click.option("--unlabel", is_flag=True, help="Give the runs MATCH names back their key.")
@click.argument("match", required=False)
@group_by_option()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def experiments_cmd(ctx, label, unlabel, match, group_by, as_json):
    """The experiments: runs compared only with each other (model, layout, hardware and
    benchmark shape), with their runs, failures and baseline.

    With --label NAME MATCH (or --unlabel MATCH), choose the experiment of those runs.
    """
    from forensics import experiment

    if (label is not None or unlabel) and not match:
        raise click.UsageError("--label and --unlabel need MATCH: the runs to (un)label")
    if label is not None and unlabel:
        raise click.UsageError("give --label NAME or --unlabel, not both")
    if label is not None or unlabel:
        store = get_store(ctx)
        rows = experiment.set_label(store, match, None if unlabel else label)
        if as_json:
            echo_json(rows)
        else:
            for r in rows:
                echo(f"{r['name']}: experiment {r['experiment'] or '(its key)'}")
        return
    if match:
        raise click.UsageError("MATCH goes with --label NAME or --unlabel")
    store = get_store(ctx, create=False)
    rows = experiment.experiments_table(store, group_by)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo(f"No runs in {store.root} yet (try: forensics ingest /path/to/*.log)")
        return
    for r in rows:
        echo(
            f"{r['experiment']}: {r['runs']} runs ({r['failed']} failed, "
            f"{r['speculative']} speculative); baseline: {r['baseline'] or 'none'}"
        )
