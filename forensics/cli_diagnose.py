"""`forensics classify`, `forensics diagnose`, `forensics label`: thin click layer."""

from __future__ import annotations

import click

from forensics.cli_common import (
    POSITIVE,
    Number,
    OptionRule,
    echo,
    echo_json,
    emit_frame,
    format_option,
    get_store,
    option_rules,
    print_launch_result,
)


class _FilesByDefault(click.Group):
    """`classify FILE...` runs the `files` subcommand; `classify train|eval` the others."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["files", *args]
        return super().parse_args(ctx, args)


def _expand_globs(paths: tuple[str, ...]) -> tuple[str, ...]:
    """A quoted glob (P21) is expanded here, local or remote (``NAME:/p/*.log``,
    ``ssh://user@host/p/*.log``: expanded on that host); one that matches nothing is exit 3."""
    import glob
    import os

    from forensics.errors import InputNotFound
    from forensics.hosts import is_remote, resolve_location

    out: list[str] = []
    for p in paths:
        if is_remote(p):
            if not glob.has_magic(p):
                out.append(p)
                continue
            host, pattern = resolve_location(p)
            prefix = p[: len(p) - len(pattern)]  # `NAME:` or `ssh://addr`
            hits = [prefix + hit for hit in host.glob(pattern) if not host.is_dir(hit)]
            if not hits:
                raise InputNotFound(
                    f"{p}: no files matched (only folders)", hint="check the pattern"
                )
            out += hits
            continue
        if os.path.exists(p) or not glob.has_magic(p):
            out.append(p)
            continue
        hits = sorted(h for h in glob.glob(p) if not os.path.isdir(h))
        if not hits:
            raise InputNotFound(
                f"{p}: no files matched", hint="check the pattern (quoted, forensics expands it)"
            )
        out += hits
    return tuple(out)


NO_PHASE = "not an SGLang log"  # shown for a verdict with no phase (docs/diagnose.md)


@click.group("classify", cls=_FilesByDefault)
def classify_group() -> None:
    """Classify logs without ingesting them: phase, hung, signature, evidence.

    \b
    forensics classify LOG...        one verdict per run found in each log
    forensics classify train         retrain (corpus + your `forensics label`s)
    forensics classify eval          cross-validated figures of the classifier
    """


@classify_group.command("files")
@click.argument("paths", nargs=-1, required=True)  # checked by the one reader (exit 2 or 3)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
@click.pass_context
def classify_files(ctx: click.Context, paths: tuple[str, ...], as_json: bool) -> None:
    """Classify LOG files (the default subcommand).

    A LOG may be remote: NAME:/path/x.log (a host of forensics.toml) or
    ssh://user@host[:port]/path/x.log; quoted globs are expanded on that host.
    `-` reads a paste from standard input (its first 32 MiB; the rest is not read).
    """
    from forensics import classifier
    from forensics.diagnose import classify_location
    from forensics.errors import InputNotFound, UsageError

    def warn(message: str) -> None:
        echo(f"Warning: {message}", err=True)

    if "-" in paths and len(paths) > 1:
        raise click.UsageError("`-` (a paste on standard input) goes alone: classify - < x.log")
    paths = paths if paths == ("-",) else _expand_globs(paths)
    store = get_store(ctx)
    model = classifier.load_model(store)
    out = []
    missing = []
    for p in paths:
        try:
            if p == "-":
                out += [v.as_dict() for v in _classify_stdin(model, warn)]
                continue
            out += [v.as_dict() for v in classify_location(p, model, warn=warn)]
        except (InputNotFound, UsageError) as exc:  # missing, not a file, not a log
            if len(paths) == 1:
                raise
            missing.append(str(exc))
    if as_json:
        echo_json(out)
    else:
        for v in out:
            hung = " (hung)" if v["hung"] else ""
            echo(
                f"{v['path']}#{v['run_index'] + 1}: {v['phase'] or NO_PHASE}{hung}  "  # 1-based
                f"{v['signature'] or '—'}  ({v['confidence']:.2f})"
            )
            echo(f"  {v['explanation']}")
            for e in v["evidence"][:4]:
                echo(f"    {v['path']}:{e['line']}: {e['text'][:160]}")
            for s in v["next_steps"][:3]:
                echo(f"  - {s}")
    for m in missing:
        echo(f"Error: {m}", err=True)
    if missing:
        ctx.exit(4)


def _classify_stdin(model, warn):
    import sys

    from forensics import classifier
    from forensics.errors import UsageError

    if sys.stdin is None:  # started with its standard input closed (`<&-`)
        raise UsageError("<stdin>: standard input is closed", hint="classify - < x.log")
    if sys.stdin.isatty():
        echo("paste the log, then Ctrl-D on a line of its own", err=True)
    data, cut = classifier.read_paste(sys.stdin.buffer)
    if cut:
        size = f"{classifier.PASTE_MAX / 2**20:g} MiB"
        echo(
            f"Warning: <stdin>: more than {size}; classified its first {size} "
            "(give the log's path to classify all of it)",
            err=True,
        )
    if not data.strip():
        raise UsageError("<stdin>: empty paste", hint="pipe or paste a log: classify - < x.log")
    return classifier.classify_bytes(data, model, path="<stdin>", warn=warn)


@classify_group.command("train")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def classify_train(ctx: click.Context, as_json: bool) -> None:
    """Retrain from the shipped corpus plus your labels; saved in the store (JSON)."""
    from forensics import classifier, verdicts

    store = get_store(ctx)
    m = verdicts.train(store)
    info = {
        k: m.data.get(k)
        for k in ("n_examples", "n_user_labels", "temperature", "trained_at", "digest")
    }
    info["path"] = str(classifier._model_path(store))
    if as_json:
        echo_json(info)
    else:
        echo(
            f"trained on {info['n_examples']} examples "
            f"({info['n_user_labels']} of them your labels); saved to {info['path']}"
        )


@classify_group.command("eval")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--folds",
    type=Number(2, integer=True),
    default=5,
    show_default=True,
    help="Cross-validation folds.",
)
@click.option(
    "--real",
    "real_dir",
    default=None,  # checked by real_eval (one stat, the one table of file kinds)
    metavar="DIRECTORY",
    help="Score a labelled folder of real logs (labels.csv + <id>.log, the format of "
    "shared/real-logs-dev) instead of the shipped corpus.",
)
def classify_eval(as_json: bool, folds: int, real_dir: str | None) -> None:
    """Held-out and grouped cross-validated precision, recall, macro-F1, confusion.

    With --real DIR: accuracy, macro-F1 over the six phases on the decidable excerpts,
    the share wrong with confidence >= 0.8, calibration (ECE, reliability) and, with
    --json, one row per file.
    """
    from forensics import classifier

    if real_dir is not None:
        from forensics import real_eval

        rr = real_eval.evaluate_real(real_dir)
        if as_json:
            echo_json(rr)
        else:
            for line in real_eval.render(rr):
                echo(line)
        return
    r = classifier.evaluate(folds=folds)
    if as_json:
        echo_json(r)
        return
    echo(
        f"{r['examples']} examples: train {r['train']}, held-out {r['test']}, "
        f"hand-written {r['hand_examples']}"
    )
    for key, title in (
        ("heldout", "held-out families"),
        ("hand", "hand-written"),
        ("cv", f"{folds}-fold grouped CV"),
    ):
        s = r.get(key)
        if not s:
            continue
        echo(f"\n{title}: n={s['n']} accuracy={s['accuracy']} macro-F1={s['macro_f1']}")
        echo(f"  {'phase':<9} {'prec':>6} {'recall':>6} {'f1':>6} {'n':>4}")
        for ph, m in s["per_phase"].items():
            echo(f"  {ph:<9} {m['precision']:>6} {m['recall']:>6} {m['f1']:>6} {m['support']:>4}")
        cols = list(classifier.PHASES)
        echo("  confusion (rows: label, columns: predicted)")
        echo("  " + " " * 9 + "".join(f"{c[:8]:>9}" for c in cols))
        for t, row in s["confusion"].items():
            echo(f"  {t:<9}" + "".join(f"{row.get(c, 0):>9}" for c in cols))


@click.command("diagnose")
@click.argument("match")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of reports.")
@click.option(
    "--relaunch",
    is_flag=True,
    help="Replay the launch step by step with a journal, then diagnose it.",
)
@click.option(
    "--log",
    "log_path",
    default=None,
    help="Diagnose this log: PATH, NAME:/PATH or ssh://user@host[:port]/PATH "
    "(a file the host says is not there is evidence too).",
)
@click.option(
    "--host", default=None, help="Host of a plain --log PATH / of the launch (a config name)."
)
@click.option(
    "--shell",
    "shell_text",
    default=None,
    help="With --relaunch: the exact chain you ran (else the recorded launch or recipe).",
)
@click.option(
    "--safe-patterns",
    is_flag=True,
    help="With --relaunch: replace broad kill patterns by a marker unique to the replay.",
)
@click.option(
    "--sim", is_flag=True, help="With --relaunch: the simulated server in place of SGLang."
)
@click.option("--sim-speed", type=POSITIVE, default=200.0, show_default=True, hidden=True)
@click.option("--deadline", type=POSITIVE, default=None, help="Seconds to wait for /health.")
@click.option("--step-deadline", type=POSITIVE, default=None, help="Seconds per chain step.")
@option_rules(
    *(
        OptionRule(o, needs=("relaunch",))
        for o in ("shell_text", "safe_patterns", "sim", "sim_speed", "deadline", "step_deadline")
    ),
    OptionRule(
        "log_path",
        excludes=("relaunch",),
        why="--log diagnoses an existing log; leave it out with --relaunch",
    ),
    OptionRule("host", needs=("log_path", "relaunch")),
)
@click.pass_context
def diagnose_cmd(
    ctx: click.Context,
    match: str,
    as_json: bool,
    relaunch: bool,
    log_path: str | None,
    host: str | None,
    shell_text: str | None,
    safe_patterns: bool,
    sim: bool,
    sim_speed: float,
    deadline: float | None,
    step_deadline: float | None,
) -> None:
    """Why did run MATCH fail: phase, signature, evidence, timeline, next steps.

    MATCH is a run name fragment (e.g. 2step); several matches give one report each,
    newest first. When nothing matches, the log MATCH names by the naming convention
    (sglang_eagle3_cg_2step.log beside the ingested _3step, _4step logs) is looked for
    on their host: one that was never written is the evidence.
    """
    from forensics import diagnose as dg

    store = get_store(ctx)
    if relaunch:
        res = dg.relaunch(
            store,
            match,
            host=host,
            shell=shell_text,
            safe_patterns=safe_patterns,
            sim={"speed": sim_speed} if sim else None,
            deadline=deadline,
            step_deadline=step_deadline,
        )
        print_launch_result(res, "json" if as_json else "table")
        return
    reports = dg.diagnose(store, match, log=log_path, host=host)
    if as_json:
        echo_json(reports)
        return
    for i, rep in enumerate(reports):
        if i:
            echo("")
        echo(dg.render_text(rep))


@click.command("signatures")
@format_option()
@click.pass_context
def signatures_cmd(ctx: click.Context, fmt: str) -> None:
    """Failure signatures seen in the store, with how many runs hit each.

    Errors not in the catalog are grouped by their masked text (numbers, paths and ids
    removed), so a new failure that keeps coming back shows up as one `unknown:<hash>`
    signature with its count.
    """
    from forensics.diagnose import signature_counts

    df = signature_counts(get_store(ctx))
    if fmt == "table" and df.is_empty():
        echo("No failure signatures in the store.")
        return
    emit_frame(df, fmt, title="failure signatures")


@click.command("label")
@click.argument("run")
@click.argument(
    "phase", type=click.Choice(["ok", "cleanup", "pre-exec", "load", "capture", "runtime"])
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def label_cmd(ctx: click.Context, run: str, phase: str, as_json: bool) -> None:
    """Record the right PHASE for RUN; `forensics classify train` learns from it."""
    from forensics import verdicts

    rows = verdicts.label(get_store(ctx), run, phase)
    if as_json:
        echo_json(rows)
    else:
        for r in rows:
            echo(f"{r['name']}: labeled {phase} (retrain: forensics classify train)")


def register(cli: click.Group) -> None:
    for command in (classify_group, diagnose_cmd, signatures_cmd, label_cmd):
        cli.add_command(command)
