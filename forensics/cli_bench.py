"""`forensics bench` (the built-in benchmark) and `forensics baseline`."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from forensics.cli_common import (
    PORT,
    OptionRule,
    echo,
    echo_json,
    fmt_cell,
    get_store,
    option_rules,
)
from forensics.errors import (
    EXIT_INTERRUPTED,
    DeadlineExceeded,
    ForensicsError,
    HostUnreachable,
    PartialFailure,
)
from forensics.urls import redact_url


def register(cli: click.Group) -> None:
    cli.add_command(bench_cmd)
    cli.add_command(baseline_cmd)


def _progress_line(p: Any) -> str:
    total = f"/{p.total}" if p.total else ""
    tok = f"{p.tok_s:.1f} tok/s" if p.tok_s else "— tok/s"
    if p.phase == "warmup":
        return "warming up…"
    return (
        f"{p.done}{total} done · {p.failed} failed · {p.in_flight} in flight · "
        f"{tok} · {p.elapsed_s:.0f}s"
    )


@click.command("bench")
@click.argument("target")
@click.option(
    "--run", "run_name", help="Attach the result to this run (default: the run on that port)."
)
@click.option(
    "--port", type=PORT, help="Port when TARGET is a host (default: the run's, else 30000)."
)
@click.option(
    "--api",
    type=click.Choice(["native", "openai", "openai-completions"]),
    default="native",
    show_default=True,
    help="native = /generate; openai = /v1/chat/completions; openai-completions = /v1/completions.",
)
@click.option("--concurrency", type=int, default=1, show_default=True, help="Requests in flight.")
@click.option("--num-prompts", type=int, help="Measured requests (default 10, or 4 x concurrency).")
@click.option("--rate", type=float, help="Poisson arrivals at R requests/s (with --duration).")
@click.option("--duration", type=float, help="Seconds of arrivals in --rate mode.")
@click.option(
    "--warmup", type=int, default=1, show_default=True, help="Unmeasured warmup requests."
)
@click.option("--max-new-tokens", type=int, default=256, show_default=True)
@click.option("--ignore-eos/--no-ignore-eos", default=True, show_default=True)
@click.option("--temperature", type=float, default=0.0, show_default=True)
@click.option("--dataset", help='Prompts: JSONL with "prompt"/"text", or ShareGPT JSON.')
@click.option("--random-input-len", type=int, help="Random prompts of about N tokens.")
@click.option("--model", help="OpenAI `model` (default: the first of /v1/models).")
@click.option("--no-flush", is_flag=True, help="Do not POST /flush_cache before measuring.")
@click.option("--connect-timeout", type=float, default=10.0, show_default=True)
@click.option("--ttft-timeout", type=float, default=300.0, show_default=True)
@click.option("--idle-timeout", type=float, default=60.0, show_default=True)
@click.option("--request-timeout", type=float, default=900.0, show_default=True)
@click.option("--deadline", type=float, default=3600.0, show_default=True, help="Whole benchmark.")
@click.option(
    "--max-failure-rate",
    type=float,
    default=0.05,
    show_default=True,
    help="Exit 4 above this fraction of failed requests.",
)
@click.option(
    "--health-every",
    type=float,
    default=2.0,
    show_default=True,
    metavar="SECONDS",
    help="Sample /health this often while measuring (each probe: 5 s deadline); 0: off.",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--direct",
    is_flag=True,
    help="Connect to a configured host's address itself, not through SSH to its 127.0.0.1.",
)
@click.option("--no-store", is_flag=True, help="Do not store the result.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@option_rules(
    OptionRule(
        "port",
        refused=lambda p: "://" in p["target"],
        why="--port is for a host TARGET; a URL carries its own port (http://HOST:PORT)",
    ),
    OptionRule(
        "direct",
        refused=lambda p: "://" in p["target"],
        why="--direct is for a configured host TARGET; a URL is always reached directly",
    ),
    OptionRule(
        "run_name",
        refused=lambda p: p["no_store"] and "://" in p["target"],
        why="--run attaches the stored result to a run, and --no-store stores nothing",
    ),
    OptionRule(
        "model",
        refused=lambda p: p["api"] == "native",
        why="--model is the OpenAI `model` field; --api native (/generate) sends none "
        "(add --api openai)",
    ),
)
@click.pass_context
def bench_cmd(ctx: click.Context, target: str, run_name: str | None, port: int | None, **kw: Any):
    """Benchmark an SGLang server: single stream (default), --concurrency N, or --rate R.

    TARGET is a URL (http://127.0.0.1:30000), HOST[:PORT], a host name from the config
    (reached through SSH at its 127.0.0.1, where SGLang listens by default; --direct to
    connect to its address instead), or the name of a launch (its host and port).
    Tokens are the server's counts (meta_info / usage), never stream chunks; accept length
    comes from each request's final chunk and from /server_info after a /flush_cache.

    Exit codes: 0 ok; 4 failures above --max-failure-rate or the server died; 5 the server
    never answered (nothing listens there: nothing is stored); 6 --deadline
    passed; 130 interrupted (partial results are stored, marked interrupted). A benchmark in
    which no request completed (a dead port) stores nothing.
    """
    from forensics import bench

    bench.BenchConfig(url="http://127.0.0.1:1", **_config_options(kw)).validate()  # before lookups
    as_json = kw.pop("as_json")
    no_store = kw.pop("no_store")
    direct = kw.pop("direct")
    kw["flush_cache"] = not kw.pop("no_flush")
    store = None if no_store else get_store(ctx)
    run_id = run_label = None
    if run_name:
        if store is None:
            store = get_store(ctx)
        run_id, run_label = bench.resolve_run(store, run_name)
        if port is None and "://" not in target:
            port = bench.run_port(store, run_id)
    lookup = get_store(ctx, create=False) if _has_store(ctx) else None
    tgt = bench.resolve_bench_target(target, port, lookup, direct=direct)
    rep, cfg = _measure(bench, tgt, kw, quiet=as_json)
    nothing_measured = not rep.summary["completed"] and not rep.interrupted
    if nothing_measured and not rep.deadline_hit:
        _refuse_unreachable(bench, rep, tgt.url)
    if nothing_measured:  # a dead port: nothing to store
        store = None
    baseline = None
    if store is not None:
        baseline = _store_result(bench, store, rep, (run_id, run_label), tgt.url)
    if as_json:
        out = rep.as_dict()
        out["stored"] = store is not None
        out["baseline"] = baseline
        out["vs_baseline"] = (
            rep.summary["output_tok_s"] / baseline["tok_s"]
            if baseline and rep.summary["output_tok_s"]
            else None
        )
        echo_json(out)
    else:
        _render(bench, rep, baseline, stored=store is not None)
        if nothing_measured:
            echo("not stored: no request completed", err=True)
        for w in rep.warnings:
            echo(f"Warning: {w}", err=True)
        warning = _health_warning(bench, rep)
        if warning:
            echo(warning, err=True)
    _exit_for(ctx, bench, rep, cfg, stored=store is not None)


def _refuse_unreachable(bench: Any, rep: Any, url: str) -> None:
    """A server that never answered (every request a connection error: nothing listens, the
    name does not resolve) is exit 5, a remote failure, before any table: nothing was
    measured and nothing is stored (issue 14 seventh round: it was exit 4 "stopped answering
    mid-benchmark" under an empty table)."""
    failures = list(bench.iter_failures(rep))
    if not failures or any(reason != "conn_error" for reason, _, _ in failures):
        return
    raise HostUnreachable(
        f"{url}: the server never answered ({failures[0][2]}); nothing measured, nothing stored",
        hint=f"check that it is up (curl {url}/health), or start one: forensics launch",
    )


def _config_options(kw: dict[str, Any]) -> dict[str, Any]:
    drop = ("as_json", "no_store", "direct", "no_flush")
    return {k: v for k, v in kw.items() if k not in drop}


def _measure(bench: Any, tgt: Any, kw: dict[str, Any], *, quiet: bool) -> tuple[Any, Any]:
    """Run the benchmark against ``tgt`` (through an SSH tunnel when it says so); the report
    names the target as the user gave it, never with its password."""
    with contextlib.ExitStack() as stack:
        url = tgt.url
        if tgt.ssh_host:  # the server listens on the host's loopback: tunnel to it
            from forensics.hosts import get_host

            fw = stack.enter_context(get_host(tgt.ssh_host).forward(tgt.remote_port))
            url = f"http://127.0.0.1:{fw.port}"
        cfg = bench.BenchConfig(url=url, **kw)
        cfg.validate()
        shown = redact_url(tgt.url)  # a password in the URL is never shown or stored
        label = f"{shown} (via ssh {tgt.ssh_host})" if tgt.ssh_host else shown
        rep = _run_with_progress(bench, cfg, quiet=quiet, label=label)
    rep.config.url = shown
    rep.via = f"ssh {tgt.ssh_host}" if tgt.ssh_host else None
    return rep, cfg


def _store_result(
    bench: Any, store: Any, rep: Any, run: tuple[str | None, str | None], url: str
) -> dict | None:
    """Attach the report to its run (given, else the run on that port), add the accept
    length of its window from the run's log, store it; the baseline it compares with."""
    run_id, run_label = run
    if run_id is None:
        found = bench.find_run_for_url(store, url)
        if found:
            run_id, run_label = found
    rep.run_id, rep.run_name = run_id, run_label
    try:
        bench.accept_len_from_log(store, rep)
    except ForensicsError as exc:  # the log may be on a host that is gone: keep the rest
        echo(f"Warning: accept length from the run's log: {exc}", err=True)
    bench.save_bench(store, rep)
    return bench.get_baseline(store, rep.run_id)


def _run_with_progress(bench: Any, cfg: Any, *, quiet: bool, label: str | None = None) -> Any:
    if quiet or not sys.stderr.isatty():
        return bench.run_bench(cfg, handle_signals=True)
    from rich.live import Live
    from rich.text import Text

    from forensics.terminal import console as make_console

    console = make_console(stderr=True)
    with Live(Text("starting…"), console=console, transient=True, refresh_per_second=4) as live:

        def cb(p: Any) -> None:
            live.update(Text(f"bench {label or cfg.url}  " + _progress_line(p)))

        return bench.run_bench(cfg, progress=cb, handle_signals=True)


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v * 1000:.1f}"


def _render(bench: Any, rep: Any, baseline: dict | None, *, stored: bool) -> None:
    from rich.table import Table
    from rich.text import Text

    from forensics.terminal import console as make_console

    s = rep.summary
    console = make_console()
    head = bench.baseline_text(s["output_tok_s"], baseline)
    where = f" · run {rep.run_name}" if rep.run_name else ""
    mode = rep.config.mode + (
        f" x{rep.config.concurrency}" if rep.config.mode == "concurrency" else ""
    )
    if rep.config.mode == "rate":
        mode += f" {rep.config.rate:g} req/s"
    via = f" via {rep.via}" if rep.via else ""
    console.print(
        Text.assemble((head, "bold"), f"  ({rep.config.url}{via}, {rep.config.api}, {mode}{where})")
    )
    t = Table(show_header=True, header_style="bold")
    for col in ("figure", "mean", "p50", "p90", "p99"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for key, label in (
        ("ttft_s", "TTFT (ms)"),
        ("itl_s", "inter-token latency (ms)"),
        ("tpot_s", "TPOT (ms)"),
        ("e2e_s", "end-to-end latency (ms)"),
    ):
        t.add_row(label, *(_ms(s[f"{key}_{st}"]) for st in ("mean", "p50", "p90", "p99")))
    console.print(t)
    rows = [
        ("requests", f"{s['completed']} completed, {s['failed']} failed"),
        (
            "per-request tok/s",
            f"median {fmt_cell(s['req_tok_s_median'])} "
            f"(p10 {fmt_cell(s['req_tok_s_p10'])}, p90 {fmt_cell(s['req_tok_s_p90'])})",
        ),
        ("decode tok/s (1/TPOT)", fmt_cell(s["decode_tok_s_median"])),
        ("output tokens", f"{s['output_tokens']} in {rep.duration_s:.2f}s"),
        ("accept length (requests)", fmt_cell(s["accept_len_client"])),
        (
            "accept length (server)",
            fmt_cell(rep.accept_len_server)
            + (f" ({rep.accept_len_server_scope})" if rep.accept_len_server_scope else ""),
        ),
        (
            "accept length (log)",
            f"{fmt_cell(rep.accept_len_log)} ({rep.accept_len_log_lines} Decode batch lines "
            "in the window)"
            if rep.accept_len_log is not None
            else "—",
        ),
        ("flush_cache", rep.flush),
        ("/health samples", _health_line(rep)),
    ]
    if s["tokens_estimated"]:
        rows.append(
            (
                "tokens estimated",
                f"{s['tokens_estimated']} requests had no usage: counted from chunks "
                "(a lower bound)",
            )
        )
    for reason, count, detail in bench.iter_failures(rep):
        rows.append((f"failed: {reason}", f"{count} — {detail}"))
    for status, bodies in s["failures"]["bodies"].items():
        if bodies:
            rows.append((f"HTTP {status} body", bodies[0][:200].replace("\n", " ")))
    if rep.server_dead:
        rows.append(("server died", rep.death or ""))
    if rep.interrupted:
        rows.append(("interrupted", "yes: partial results"))
    rows.append(("bench id", rep.bench_id + ("" if stored else " (not stored)")))
    for label, value in rows:
        console.print(f"  {label:<26} {value}")


def _has_store(ctx: click.Context) -> bool:
    from forensics.errors import ForensicsError

    try:
        get_store(ctx, create=False)
    except ForensicsError:
        return False
    return True


def _health_line(rep: Any) -> str:
    h = rep.health
    if not h.get("every_s"):
        return "not sampled (--health-every 0)"
    if not h["count"]:
        return "no sample completed (the benchmark ended first)"
    lat = (
        "no answer"
        if h["latency_ms_p50"] is None
        else f"p50 {h['latency_ms_p50']:.1f} / max {h['latency_ms_max']:.1f} ms"
    )
    return f"{h['count']} every {h['every_s']:g}s, {h['non_200']} not 200, {lat}"


def _health_warning(bench: Any, rep: Any) -> str | None:
    """H06: one line when /health was not 200 at some point during the benchmark."""
    h = rep.health
    if not h.get("non_200"):
        return None
    seen = ", ".join(
        f"{k} ×{n}" + (f" (no answer within {h['probe_timeout_s']:g}s)" if k == "timeout" else "")
        for k, n in bench.health_breakdown(rep.health_samples).items()
        if k != "200"
    )
    return (
        f"Warning: {rep.config.url}/health was not 200 in {h['non_200']} of {h['count']} "
        f"samples during the benchmark ({seen}; longest stretch "
        f"{h['longest_non_200_s']:.1f}s): the figures may span a restart or an overload"
    )


def _exit_for(ctx: click.Context, bench: Any, rep: Any, cfg: Any, *, stored: bool) -> None:
    if rep.interrupted:
        saved = (
            f"stored as {rep.bench_id}"
            if stored
            else "not stored (--no-store, or no request completed)"
        )
        echo(
            f"Interrupted: {rep.summary['completed']} requests measured; partial results {saved}.",
            err=True,
        )
        ctx.exit(EXIT_INTERRUPTED)
    if rep.deadline_hit:
        raise DeadlineExceeded(
            f"{cfg.url}: the benchmark passed --deadline {cfg.deadline:g}s; partial results kept",
            hint="raise --deadline or lower --num-prompts",
        )
    if rep.server_dead:
        raise PartialFailure(
            f"{cfg.url}: the server stopped answering mid-benchmark: {rep.death}; "
            f"{rep.summary['completed']} requests measured and kept",
            hint="forensics diagnose <run> to see why it died",
        )
    if rep.failure_rate > cfg.max_failure_rate:
        reasons = ", ".join(f"{r} {c}" for r, c, _ in bench.iter_failures(rep))
        raise PartialFailure(
            f"{cfg.url}: {rep.summary['failed']} of "
            f"{rep.summary['failed'] + rep.summary['completed']} requests failed ({reasons})",
            hint="see the failures above; --max-failure-rate sets the threshold",
        )


@click.command("baseline")
@click.argument("run", required=False)
@click.option("--tok-s", type=float, help="A baseline figure instead of a run.")
@click.option(
    "--experiment",
    metavar="EXP",
    default=None,
    help="The experiment a --tok-s figure is for (needed when the store holds several).",
)
@click.option("--clear", is_flag=True, help="Forget the baseline (of --experiment, else all).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@option_rules(
    OptionRule(  # with RUN the experiment is the run's own: --experiment was dropped in silence
        "experiment",
        needs=("tok_s", "clear"),
        why="--experiment names the experiment of a --tok-s figure or of --clear; a RUN's "
        "experiment is its own (leave --experiment out)",
    )
)
@click.pass_context
def baseline_cmd(
    ctx: click.Context,
    run: str | None,
    tok_s: float | None,
    experiment: str | None,
    clear: bool,
    as_json: bool,
) -> None:
    """Mark the baseline of an experiment ("82.3 tok/s, 0.91x baseline").

    RUN takes the tok/s the advisor uses for that run (its latest single-stream benchmark,
    else its single-stream decode lines) for the run's experiment; --tok-s X sets a figure.
    Without arguments, list the stored baselines. Unset, an experiment's baseline is its best
    single-stream plain run.
    """
    from forensics import baseline

    if clear and (run is not None or tok_s is not None):
        raise click.UsageError("--clear forgets the baseline: give it without RUN or --tok-s")
    store = get_store(ctx)
    if clear:
        baseline.clear(store, experiment)
        value = None
    elif run is None and tok_s is None:
        values = baseline.stored(store)
        if as_json:
            echo_json(values)
            return
        if not values:
            echo("No baseline set (forensics baseline RUN, or --tok-s X).")
        for v in values:
            who = f"run {v['name']}" if v.get("name") else "a fixed figure"
            exp = f" for {v['experiment']}" if v.get("experiment") else ""
            echo(f"Baseline: {v['tok_s']:.1f} tok/s ({who}){exp}.")
        return
    else:
        value = baseline.set_baseline(store, run=run, tok_s=tok_s, experiment=experiment)
    if as_json:
        echo_json(value)
    elif value is None:
        echo("No baseline set (forensics baseline RUN, or --tok-s X).")
    else:
        who = f"run {value['name']}" if value.get("name") else "a fixed figure"
        exp = f" for {value['experiment']}" if value.get("experiment") else ""
        echo(f"Baseline: {value['tok_s']:.1f} tok/s ({who}){exp}.")
