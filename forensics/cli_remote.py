"""Remote-host and launch commands: ``lint``, ``launch``, ``stop``, ``hosts list|check|trust``."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from forensics.cli_common import (
    NON_NEGATIVE,
    PORT,
    POSITIVE,
    OptionRule,
    echo,
    echo_json,
    emit_frame,
    get_store,
    option_rules,
    print_launch_result,
)


def _progress(event: dict) -> None:
    kind = event.get("event")
    if kind == "step":
        if event.get("phase") == "start":
            echo(f"  step {event.get('step')}: {event.get('orig')}", err=True)
        else:
            echo(f"  step {event.get('step')} ended (rc {event.get('rc')})", err=True)
    elif kind == "stage":
        echo(f"  stage {event.get('stage')}: {event.get('line')}", err=True)
    elif kind == "health":
        echo("  /health: 200 (ready)", err=True)
        if event.get("note"):
            echo(f"  note: {event['note']}", err=True)
    elif kind == "unverified":
        echo(f"  not ready yet: {event.get('problem')}", err=True)
    elif kind == "server":
        echo(f"  server started (pgid {event.get('pid')})", err=True)


def register(cli: click.Group) -> None:
    for command in (lint_cmd, launch_cmd, stop_cmd, hosts_group):
        cli.add_command(command)


@click.command("lint")
@click.argument("name", required=False)
@click.option("--shell", "shell_text", help="The exact chain you typed, in single quotes.")
@click.option("--host", default=None, help="Check the log dir, disk and port on this host too.")
@click.option("--rules", is_flag=True, help="List the lint rules instead.")
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too (not only on errors).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@option_rules(
    OptionRule(
        "rules",
        excludes=("name", "shell_text", "host", "strict"),
        why="--rules lists the rules: give it alone (with --json)",
    )
)
@click.pass_context
def lint_cmd(ctx, name, shell_text, host, rules, strict, as_json):
    """Check a launch chain or recipe; explain each finding with a safer alternative.

    Exits 1 when there is an error finding (with --strict: also a warning), so it can
    guard a launch script; 0 otherwise.

    \b
    forensics lint --shell 'pkill -f "sglang.launch_server" && ... &'
    forensics lint sglang_eagle3_cg_2step --host gpu8
    """
    from forensics.hosts import get_host
    from forensics.lint import failing, host_rule_ids, lint, rules_frame
    from forensics.recipe import Recipe

    if rules:
        emit_frame(rules_frame(), "json" if as_json else "table", title="lint rules")
        return
    if name and shell_text is not None:  # C01: which one to check?
        raise click.UsageError("give a recipe NAME or --shell '...', not both")
    if shell_text is not None:
        recipe = Recipe.from_shell(shell_text, host=host)
    elif name:
        from forensics.launcher import resolve_recipe

        recipe = resolve_recipe(get_store(ctx), name)
    else:
        raise click.UsageError("give a recipe NAME or --shell '...'")
    h = get_host(host or recipe.host) if (host or recipe.host) else None
    findings = lint(recipe, host=h)
    skipped = [] if h is not None else host_rule_ids()
    if as_json:
        where = h.name if h is not None else None
        findings_json = [f.to_dict() for f in findings]
        echo_json({"name": recipe.name, "host": where, "findings": findings_json,
                   "skipped": skipped})  # fmt: skip
    else:
        _print_findings(recipe.name, findings, skipped)
    ctx.exit(1 if failing(findings, strict=strict) else 0)


def _print_findings(name: str, findings: list, skipped: list[str]) -> None:
    if not findings:
        echo(f"{name}: no findings")
    for f in findings:
        where = f"step {f.step}" if f.step is not None else "chain"
        echo(f"{where} [{f.severity}] {f.id}: {f.text.strip()[:80]}")
        echo(f"    {f.explanation}")
        echo(f"    instead: {f.alternative}")
    if skipped:
        echo(
            f"note: not checked without a host: {', '.join(skipped)} "
            "(add --host NAME, or --host local for this machine)"
        )


_LAUNCHING = ("shell_text", "name_opt", "host", "log_path", "sim", "sim_fail", "port")
_WAITING = ("deadline", "step_deadline", "replay", "safe_patterns")
# Which launch options go together (a flag launch would ignore is exit 2).
LAUNCH_RULES = (
    OptionRule(
        "list_",
        excludes=("name", *_LAUNCHING, *_WAITING, "check"),
        why="--list lists the recorded launches: give it alone (with --json)",
    ),
    OptionRule("check", excludes=(*_LAUNCHING, *_WAITING)),
    OptionRule("sim_speed", needs=("sim",)),
    OptionRule("sim_fail", needs=("sim",)),
)


@click.command(
    "launch", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
@click.argument("name", required=False)
@click.argument("server_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--shell", "shell_text", help="Import the recipe from the chain you typed.")
@click.option("--name", "name_opt", help="Launch name (default: from the log path).")
@click.option("--host", default=None, help="A [hosts.NAME] (default: the recipe's).")
@click.option("--log", "log_path", default=None, help="Log path (default: by the name).")
@click.option("--sim", is_flag=True, help="Run the simulated server in place of SGLang.")
@click.option("--sim-speed", type=POSITIVE, default=100.0, show_default=True)
@click.option("--sim-fail", default=None, help="Failure the simulator injects.")
@click.option("--port", type=PORT, default=None, help="Server port (sets --port).")
@click.option("--deadline", type=POSITIVE, default=None, help="Seconds to wait for /health.")
@click.option("--step-deadline", type=POSITIVE, default=None, help="Seconds per chain step.")
@click.option("--replay", is_flag=True, help="Replay the chain as typed, journaled.")
@click.option("--safe-patterns", is_flag=True, help="Replay with per-replay kill patterns.")
@click.option("--list", "list_", is_flag=True, help="List recorded launches.")
@click.option(
    "--check",
    "check",
    is_flag=True,
    help="Re-check launch NAME on its host (pid file, /health) and record what is seen.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@option_rules(*LAUNCH_RULES)
@click.pass_context
def launch_cmd(ctx, **opts: Any):
    """Start a server safely: own process group, pid file, log by name, health wait.

    \b
    forensics launch sglang_eagle3_cg_2step            # a [recipes.NAME] of the config
    forensics launch --shell 'nohup python3 -m sglang.launch_server ... > x.log 2>&1 &'
    forensics launch --sim --name sglang_eagle3_cg_5dt -- --model-path sim://k2 ...
    forensics launch --shell '...' --replay --safe-patterns   # journaled replay
    forensics launch sglang_eagle3_cg_2step --check   # after a lost SSH connection

    The run is recorded before it starts; `forensics stop NAME` ends it.
    """
    from forensics import launcher

    store, as_json = get_store(ctx), opts["as_json"]
    if opts["list_"]:
        frame = launcher.launches_frame(store).drop(["recipe", "diagnosis"], strict=False)
        emit_frame(frame, "json" if as_json else "table", title="launches")
        return
    if opts["check"]:
        if not opts["name"]:
            raise click.UsageError("--check needs the launch NAME")
        _print_recheck(launcher.recheck(store, opts["name"]), as_json)
        return
    _check_sim_fail(opts["sim"], opts["sim_fail"])
    recipe, host = _launch_recipe(ctx, store, opts)
    simopts = None
    if opts["sim"]:
        simopts = {"speed": opts["sim_speed"], "fail": opts["sim_fail"], "port": opts["port"]}
    elif opts["port"]:
        from forensics.recipe import health_url_for

        recipe.server = [*recipe.server, "--port", str(opts["port"])]
        recipe.health_url = health_url_for(recipe.server)
    try:
        res = _launch_or_replay(launcher, store, recipe, host, opts, simopts)
    except KeyboardInterrupt:
        try:  # the same Ctrl-C's second KeyboardInterrupt, if pending (forensics.errors)
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        echo(
            f"Interrupted: {recipe.name} may still be starting in its own process group; "
            f"stop it with: forensics stop {recipe.name}",
            err=True,
        )
        ctx.exit(130)
    print_launch_result(res, "json" if as_json else "table")
    if res["status"] not in ("ready",):
        sys.exit(6 if res["status"] == "timeout" else 1)


def _print_recheck(res: dict, as_json: bool) -> None:
    if as_json:
        echo_json(res)
        return
    was = f" (was {res['previous']})" if res["previous"] != res["status"] else ""
    echo(f"{res['name']} on {res['host']}: {res['status']}{was}")
    if res["pgid"]:
        echo(f"  process group {res['pgid']} (from the {res['pgid_from']})")
    if res["cause"]:
        echo(f"  {res['cause']}")


def _check_sim_fail(sim: bool, sim_fail: str | None) -> None:
    if sim_fail is None:
        return
    from forensics.sim.args import FAIL_MODES

    if sim_fail not in FAIL_MODES:
        raise click.BadParameter(
            f"{sim_fail!r} is not a failure the simulator knows (one of: {', '.join(FAIL_MODES)})",
            param_hint="--sim-fail",
        )


def _launch_recipe(ctx: click.Context, store, opts: dict[str, Any]):
    """The recipe ``launch`` runs (from --shell, the server flags, or NAME), with --log
    applied; and the host it runs on."""
    from forensics import launcher
    from forensics.recipe import Recipe, load_recipes

    name, shell_text, host = opts["name"], opts["shell_text"], opts["host"]
    extra = list(opts["server_args"]) + list(ctx.args)
    if name and name.startswith("-"):  # `launch --sim --name N -- --model-path ...`
        extra, name = [name, *extra], None
    if shell_text is not None and extra:  # C01: the chain already has the server flags
        raise click.UsageError(
            f"--shell takes the whole chain; {' '.join(extra)[:60]!r} would be ignored "
            "(put the flags inside the chain)"
        )
    if shell_text is not None:
        recipe = Recipe.from_shell(shell_text, name=opts["name_opt"] or name, host=host)
    elif extra:
        recipe = _flags_recipe(extra, opts["name_opt"] or name, opts)
    elif name:
        recipes = load_recipes()
        recipe = recipes[name] if name in recipes else launcher.resolve_recipe(store, name)
    else:
        raise click.UsageError("give a recipe NAME, --shell '...', or --sim --name N -- FLAGS")
    if opts["log_path"]:
        host = _apply_log(recipe, opts["log_path"], host)
    return recipe, host


def _flags_recipe(extra: list[str], launch_name: str | None, opts: dict[str, Any]):
    """``launch [--name N] -- FLAGS``: an SGLang server with those flags."""
    from forensics.recipe import Recipe, health_url_for

    argv = ["python3", "-m", "sglang.launch_server", *extra]
    if not launch_name:  # the seed's convention, from the flags
        from forensics_parsers.names import name_from_flags

        launch_name = name_from_flags(extra)
        if not opts["as_json"]:
            echo(f"name: {launch_name} (from the flags; --name to choose)", err=True)
    recipe = Recipe(
        name=launch_name, server=argv, log_path=opts["log_path"], health_url=None, host=opts["host"]
    )
    recipe.health_url = health_url_for(argv)
    return recipe


def _apply_log(recipe, log_path: str, host: str | None) -> str | None:
    """``--log PATH`` or ``--log HOST:PATH`` (a [hosts.NAME]) onto the recipe; the host."""
    from forensics.hosts import is_remote, load_config

    if is_remote(log_path):  # `--log gpu8:/data/x.log`: the host and its path
        from forensics.diagnose import log_location

        h, path = log_location(log_path, host or recipe.host)
        if h.name not in load_config()["hosts"]:
            raise click.UsageError(
                f"--log {log_path}: a launch needs a [hosts.NAME] of forensics.toml "
                "(write one and use NAME:/path)"
            )
        recipe.host, log_path = h.name, path
        host = host or h.name
    recipe.log_path = log_path
    return host


def _launch_or_replay(launcher, store, recipe, host, opts: dict[str, Any], simopts):
    progress = None if opts["as_json"] else _progress
    deadline = opts["deadline"]
    if opts["replay"] or opts["safe_patterns"]:
        return launcher.relaunch(
            store,
            recipe.name,
            recipe=recipe,
            host=host,
            safe_patterns=opts["safe_patterns"],
            deadline=deadline,
            step_deadline=opts["step_deadline"],
            sim=simopts,
            progress=progress,
        )
    return launcher.launch(
        store, recipe, host=host, deadline=deadline, progress=progress, sim=simopts
    )


@click.command("stop")
@click.argument("name")
@click.option("--grace", type=NON_NEGATIVE, default=10.0, show_default=True, help="TERM -> KILL s.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def stop_cmd(ctx, name, grace, as_json):
    """Stop a launched run: TERM to its process group, grace, KILL (never by pattern)."""
    from forensics.launcher import stop

    res = stop(get_store(ctx), name, grace_s=grace)
    if as_json:
        echo_json(res)
    else:
        echo(f"{res['name']}: {res['outcome']} (process group {res['pgid']})")


@click.group("hosts")
def hosts_group():
    """Configured hosts ([hosts.NAME] in forensics.toml)."""


@hosts_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def hosts_list(as_json):
    """List the configured hosts."""
    import polars as pl

    from forensics.hosts import load_config

    schema = ["name", "address", "identity_file", "known_hosts", "jump", "source"]
    rows = [{k: getattr(c, k) for k in schema} for c in load_config()["hosts"].values()]
    df = pl.DataFrame(rows, schema={k: pl.String for k in schema})
    emit_frame(df, "json" if as_json else "table", title="hosts")


@hosts_group.command("check")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def hosts_check(name, as_json):
    """Connect to a host and report what the launcher needs there."""
    from forensics.hosts import get_host

    out = (
        get_host(name)
        .run(
            "uname -sr; id -un; for p in timeout setsid bash curl fuser nvidia-smi py-spy; "
            "do command -v $p >/dev/null 2>&1 && echo has:$p || echo missing:$p; done",
            timeout=20,
        )
        .text.split("\n")
    )
    res = {
        "name": name,
        "kernel": out[0] if out else "",
        "user": out[1] if len(out) > 1 else "",
        "tools": {x.split(":", 1)[1]: x.startswith("has:") for x in out if ":" in x},
    }
    if as_json:
        echo_json(res)
    else:
        for k, v in res.items():
            echo(f"{k}: {v}")


@hosts_group.command("trust")
@click.argument("name")
@click.option("--fingerprint", default=None, help="Expected SHA256:... fingerprint.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def hosts_trust(name, fingerprint, as_json):
    """Record a host's key after checking its fingerprint (first contact only)."""
    from forensics.hosts import trust_host

    res = trust_host(name, fingerprint=fingerprint)
    if as_json:
        echo_json(res)
    else:
        echo(str(res))
