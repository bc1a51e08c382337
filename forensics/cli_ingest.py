"""`forensics ingest`, `forensics runs`, `forensics show`."""

from __future__ import annotations

import contextlib
import sys

import click

from forensics.cli_common import (
    NON_NEGATIVE,
    Number,
    OptionRule,
    chosen_format,
    echo,
    echo_json,
    emit_frame,
    format_option,
    get_store,
    group_by_option,
    option_rules,
)

# The columns `forensics runs` prints as a table (JSON/CSV carry all RUN_COLUMNS).
# what a narrow terminal keeps longest (the rest is left out first, with a note)
KEEP_COLUMNS = ("name", "phase_reached", "gen_throughput_median", "bench_tok_s", "phase")
TABLE_COLUMNS = [
    "name",
    "experiment",
    "spec_algorithm",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "cuda_graph",
    "phase_reached",
    "load_s",
    "capture_s",
    "ready_s",
    "gen_throughput_median",
    "accept_len_mean",
    "bench_tok_s",
    "bench_results",
    "phase",
    "signature",
]


def register(cli: click.Group) -> None:
    cli.add_command(ingest_cmd)
    cli.add_command(runs_cmd)
    cli.add_command(show_cmd)


@click.command("ingest")
@click.argument("inputs", nargs=-1, required=True)
@click.option("-r", "--recursive", is_flag=True, help="Descend into sub-folders of folders.")
@click.option(
    "--name-pattern",
    metavar="REGEX",
    help="Regex with named groups (num_steps, topk, num_draft_tokens, cuda_graph, ...) "
    "to read the configuration from file names.",
)
@click.option(
    "--lock-timeout", type=NON_NEGATIVE, default=None, help="Seconds to wait for the store lock."
)
@click.option(
    "--trust-new-host",
    is_flag=True,
    help="First contact with an SSH host: record its key (a changed key is still refused).",
)
@click.option(
    "--run",
    metavar="NAME",
    help="Attach the benchmark results files among INPUTS to this run "
    "(default: by time window, else by the server they name).",
)
@click.option(
    "-j",
    "--jobs",
    type=Number(1, 1024, integer=True),
    default=None,
    metavar="N",
    help="Files parsed at once, each by a worker process that forensics feeds (default: the "
    "number of cores; 1: one after another, no worker). Only files of 16 MiB or more to parse "
    "go to a worker; smaller ones are parsed by forensics itself.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@click.pass_context
def ingest_cmd(
    ctx, inputs, recursive, name_pattern, lock_timeout, trust_new_host, run, jobs, as_json
):
    """Parse SGLang server logs and benchmark results into the store.

    INPUTS are files, folders, globs (quoted, expanded by forensics), ssh://user@host/path/*.log
    or NAME:/path/*.log for a host named in forensics.toml. Idempotent and incremental:
    unchanged files are skipped, grown files are read from where the last ingest stopped.

    *.json / *.jsonl inputs are benchmark results: SGLang bench_serving --output-file,
    vllm bench serve --save-result, AIPerf's profile_export_aiperf.json; each result
    joins the run it measured (docs/bench.md, "Importing results").
    """
    from forensics import output
    from forensics.ingest import exit_code_for, ingest

    ctx.obj[output.EXIT_AT_ONCE] = True  # no thread outlives ingest, its files are closed
    store = get_store(ctx)
    bar, progress = _progress_bar() if not as_json and sys.stderr.isatty() else (None, None)
    with bar if bar is not None else contextlib.nullcontext():
        summary = ingest(
            store,
            list(inputs),
            recursive=recursive,
            name_pattern=name_pattern,
            progress=progress,
            lock_timeout=lock_timeout,
            trust_new_host=trust_new_host,
            run=run,
            jobs=jobs,
        )
    data = summary.as_dict()
    if as_json:
        echo_json(data)
    else:
        for w in summary.warnings:
            echo(f"Warning: {w}", err=True)
        st = data["files_by_status"]
        parts = ", ".join(f"{v} {k}" for k, v in sorted(st.items()))
        echo(
            f"Ingested {data['files']} file(s) ({parts}) into {store.root}: "
            f"{data['runs']} run(s), {data['lines_total']} lines, {data['decode_lines']} decode lines, "
            f"{data['lines_unparsed']} unrecognised, in {data['seconds']:.2f} s"
        )
        if data["results"]:
            echo(
                f"Benchmark results: {data['results']}, {data['results_attached']} attached to a run"
            )
        skipped = data["files_skipped"]
        if skipped:
            echo("Skipped: " + ", ".join(f"{k}: {v}" for k, v in skipped.items()))
    if summary.interrupted:
        done = [f.path for f in summary.files if f.committed]
        echo(
            f"Interrupted: {len(done)} file(s) committed before Ctrl-C; the files being read "
            "were not (the store holds nothing of them). Run the same command again to resume.",
            err=True,
        )
        ctx.exit(130)
    ctx.exit(exit_code_for(summary))


def _progress_bar():
    """A bar per file being read (several at once with --jobs), on a terminal."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    from forensics.terminal import console

    bar = Progress(
        TextColumn("{task.fields[n]} {task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        transient=True,
        console=console(stderr=True),
    )
    tasks: dict[str, int] = {}

    def progress(path: str, i: int, n: int, done: int, total: int) -> None:
        if path not in tasks:
            tasks[path] = bar.add_task(path[-60:], total=None, n=f"[{i + 1}/{n}]")
        bar.update(tasks[path], completed=done, total=total or None)

    return bar, progress


@click.command("runs")
@click.argument("match", required=False)
@format_option()
@click.option("--all-columns", is_flag=True, help="Show every column in the table view.")
@group_by_option()
@option_rules(
    OptionRule(
        "all_columns",
        refused=lambda p: chosen_format(p) != "table",
        why="--all-columns is for the table: --json and --csv always carry every column",
    )
)
@click.pass_context
def runs_cmd(ctx, match, fmt, all_columns, group_by):
    """One table of every run (filter by a name fragment), with its experiment."""
    from forensics.runs import RUN_COLUMNS, find_runs, runs_table

    store = get_store(ctx)
    df = runs_table(store, match, group_by=group_by)
    if match and df.is_empty():
        find_runs(store, match)  # raises RunNotFound naming the runs that exist
    if fmt in ("json", "csv"):
        emit_frame(df.select([c for c in RUN_COLUMNS if c in df.columns]), fmt)
        return
    if df.is_empty():
        echo(f"No runs in {store.root} yet (try: forensics ingest /path/to/*.log)")
        return
    cols = RUN_COLUMNS if all_columns else [c for c in TABLE_COLUMNS if c in df.columns]
    emit_frame(df.select(cols), "table", title=f"{len(df)} run(s)", keep=KEEP_COLUMNS)


@click.command("show")
@click.argument("run")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.pass_context
def show_cmd(ctx, run, as_json):
    """A readable report of one run: config, stage timeline, metrics, errors.

    RUN is a run name, a fragment of one, or a run id; one that matches several runs exits 2
    listing them."""
    from forensics.report_text import render_show, show_data
    from forensics.runs import find_run

    store = get_store(ctx)
    data = show_data(store, find_run(store, run))
    if as_json:
        echo_json(data)
        return
    render_show(data)
