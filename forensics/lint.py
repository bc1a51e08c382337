"""Lint a launch recipe: rules as data, each finding explained with a safer alternative.

``lint(recipe, host=None)`` returns ``Finding``s. Rules in ``RULES`` (id, severity, what it
detects, why it matters, the safer alternative, the check). Checks that need the host
(``log-dir-missing``, ``disk-full``, ``port-in-use``) run only when a host is given.

The self-kill check is concrete: it computes the command line of the shell that will run the
chain (over SSH: ``bash -c '<the whole chain>'``) and regex-matches each ``pkill -f`` /
``pgrep -f`` pattern against it, the way pkill does (bad-inputs S14).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import polars as pl

from forensics import hazards
from forensics.finding import Finding
from forensics.kills import (
    BROAD_PATTERN,
    gpu_kills,
    mass_kills,
    self_kill_match,
    signal_name,
    step_kills,
)
from forensics.lint_host import check_disk, check_log_dir, check_port
from forensics.recipe import Recipe, server_step, step_kind
from forensics_parsers.secrets import redact
from forensics_parsers.shell import (
    Chain,
    Command,
    Step,
    launching_command_line,
    parse_chain,
    shell_script,
)

if TYPE_CHECKING:
    from forensics.hosts import Host

SEVERITIES = ("error", "warning", "info")


@dataclasses.dataclass
class LintContext:
    recipe: Recipe
    chain: Chain
    server: Step | None
    cmdline: str  # the launching shell's command line
    host: Host | None


@dataclasses.dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    detects: str
    why: str
    alternative: str
    check: Callable[[LintContext, Rule], Iterable[Finding]]
    needs_host: bool = False
    # what a replay (diagnose --relaunch, launch --replay) does with a chain that has this
    # finding: None runs it (the replay is how the failure is seen), "refuse" runs nothing,
    # "safe-patterns" runs nothing unless --safe-patterns skips the step
    replay: str | None = None


# --------------------------------------------------------------------------- helpers


def _excerpt(text: str, m: re.Match[str] | None, width: int = 24) -> str:
    if m is None:  # it matched only inside a secret: nothing of it is shown
        return "«redacted»"
    a, b = max(0, m.start() - width), min(len(text), m.end() + width)
    body = text[a:b].replace("\n", " ")
    return ("…" if a else "") + body + ("…" if b < len(text) else "")


def _later(chain: Chain, step: Step) -> list[Step]:
    return [s for s in chain.steps if s.index > step.index]


def _skipped_by_and(chain: Chain, step: Step) -> list[Step]:
    """Steps an ``&&`` after ``step`` skips when it fails (up to the end of its and-or list)."""
    out = []
    for s in _later(chain, step):
        if s.list_index != step.list_index:
            break
        out.append(s)
        if s.connector == "||":
            break
    return out


def _steps_list(steps: list[Step]) -> str:
    return ", ".join(f"{s.index} `{s.text.strip()[:40]}`" for s in steps) or "none"


# --------------------------------------------------------------------------- checks


def _check_self_kill(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        for spec in step_kills(step):
            if not self_kill_match(spec, ctx.cmdline):
                continue
            # the excerpt is cut from the redacted command line: a window of the raw one can
            # hold a secret without the words that mark it (`…-pS3cret -e x; pkill…`)
            shown = redact(ctx.cmdline)
            m = self_kill_match(spec, shown)
            later = _later(ctx.chain, step)
            tail = ""
            if ctx.server is not None and ctx.server.index > step.index:
                tail = (
                    f"; the server step {ctx.server.index} never runs, so no log is written"
                    if ctx.recipe.log_path
                    else f"; the server step {ctx.server.index} never runs"
                )
            yield Finding(
                rule.id,
                rule.severity,
                step.index,
                step.text,
                f"`{spec.pattern}` matches the command line of the shell that runs the chain "
                f"({_excerpt(shown, m)!r} in `{ctx.cmdline.split(' ', 1)[0]} -c "
                f"'<the chain>'`), so step {step.index} kills that shell with "
                f"{signal_name(spec.signal)} (exit {128 + spec.signal}) and the "
                f"{len(later)} step(s) after it never run{tail}.",
                rule.alternative,
            )


def _check_broad(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        for spec in step_kills(step):
            if spec.kills and BROAD_PATTERN.match(spec.pattern):
                what = "command line" if spec.full else "process name"
                yield Finding(
                    rule.id,
                    rule.severity,
                    step.index,
                    step.text,
                    f"`{spec.program}` kills every process of this user whose {what} matches "
                    f"`{spec.pattern}`: other users' jobs, notebooks, monitoring agents and "
                    "tools running on the host, not just the previous server.",
                    rule.alternative,
                )


def _check_mass_kill(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        for name, what in mass_kills(step):
            yield Finding(
                rule.id,
                rule.severity,
                step.index,
                step.text,
                f"`{name}` stops {what}; nothing after it is sure to run.",
                rule.alternative,
            )


def _steps(find: Callable[[LintContext], Iterable[tuple[Step, str]]]):
    """A check from a function of the chain that yields ``(step, explanation)`` pairs."""

    def check(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
        for step, why in find(ctx):
            yield Finding(rule.id, rule.severity, step.index, step.text, why, rule.alternative)

    return check


def _check_gpu_collateral(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        if gpu_kills(step):
            yield Finding(
                rule.id,
                rule.severity,
                step.index,
                step.text,
                "kills every process that has a GPU device open, whoever owns it: other "
                "users' training or serving jobs on the same host (and inside a container the "
                "PIDs may be the host's).",
                rule.alternative,
            )


def _check_and_after_pkill(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        if step.connector != "&&":
            continue
        specs = step_kills(step)
        if not specs:
            continue
        skipped = _skipped_by_and(ctx.chain, step)
        yield Finding(
            rule.id,
            rule.severity,
            step.index,
            step.text,
            f"`{specs[0].program}` exits 1 when nothing matched (e.g. no server is running), "
            f"and `&&` then silently skips step(s) {_steps_list(skipped)}.",
            rule.alternative,
        )


def _server_commands(step: Step) -> list[tuple[Command, list[str]]]:
    """(command, wrappers) of the server step, including inside ``bash -c``."""
    out = []
    for cmd in step.commands:
        inner, wrappers = cmd.unwrapped()
        out.append((cmd, wrappers))
        script = shell_script(cmd.argv)
        if script:
            for s in parse_chain(script).steps:
                for c in s.commands:
                    out.append((c, [*wrappers, *c.unwrapped()[1]]))
    return out


def _check_process_group(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    step = ctx.server
    if step is None:
        return
    if any("setsid" in w for _, w in _server_commands(step)):
        return
    yield Finding(
        rule.id,
        rule.severity,
        step.index,
        step.text,
        "the server shares the process group of the shell that launched it, so it can only be "
        "stopped later by a pattern (pkill -f ...), which is how chains kill themselves and "
        "leave orphaned schedulers holding the port and the GPUs.",
        rule.alternative,
    )


def _check_stdin(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        for cmd, wrappers in (
            _server_commands(step)
            if step is ctx.server
            else [(c, c.unwrapped()[1]) for c in step.commands]
        ):
            if "nohup" in wrappers and cmd.stdin_target() is None:
                if step.command and step.command.stdin_target() is not None:
                    continue
                yield Finding(
                    rule.id,
                    rule.severity,
                    step.index,
                    step.text,
                    "nohup leaves stdin attached to the SSH channel: ssh may not return until "
                    "the server exits, and a server that reads stdin blocks.",
                    rule.alternative,
                )
                break


def _check_sleep(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    for step in ctx.chain.steps:
        if step_kind(step) != "wait" or not step.command or step.command.argv[:1] != ["sleep"]:
            continue
        prev = [s for s in ctx.chain.steps if s.index == step.index - 1]
        if (
            prev
            and step_kills(prev[0])
            or (prev and re.search(r"\bfuser\b|\bkill\b", prev[0].text))
        ):
            yield Finding(
                rule.id,
                rule.severity,
                step.index,
                step.text,
                "a fixed sleep guesses how long the killed processes take to exit; a server in "
                "GPU teardown can take longer, and the next step then races it for the port and "
                "the GPU memory.",
                rule.alternative,
            )


def _check_syntax(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    # the shell stops at the first one: the rest would only repeat it
    for w in ctx.chain.errors[:1]:
        yield Finding(
            rule.id,
            rule.severity,
            None,
            ctx.chain.text[:200],
            f"{w}: the shell stops with a syntax error before any step runs, or runs "
            "something other than what you typed",
            rule.alternative,
        )


def syntax_finding(recipe: Recipe | str) -> Finding | None:
    """The shell-syntax finding of a chain (what ``lint`` reports), or None."""
    return next((f for f in lint(recipe) if f.id == "shell-syntax"), None)


def replay_blockers(recipe: Recipe | str, *, safe_patterns: bool = False) -> list[Finding]:
    """The findings that stop a replay of the chain (the rules' ``replay`` column)."""
    stops = ("refuse",) if safe_patterns else ("refuse", "safe-patterns")
    return [f for f in lint(recipe) if RULES_BY_ID[f.id].replay in stops]


RULES: tuple[Rule, ...] = (
    Rule(
        "shell-syntax",
        "error",
        "an unterminated quote or `$(`, an unclosed `(`/`{`, an operator where a command "
        "must be (`|| b`, `a && && b`, `)))`, `;;` outside case), or a chain ending in "
        "`&&`/`||`/`|`",
        "`bash -c` refuses the whole chain (`unexpected EOF while looking for matching`), so "
        "nothing starts and no log is written",
        "close every quote and group; wrap the chain in single quotes on your side and use "
        "double quotes inside it",
        _check_syntax,
        replay="refuse",
    ),
    Rule(
        "cleanup-self-kill",
        "error",
        "a pkill -f / pgrep -f pattern that matches the command line of the shell running the "
        "chain",
        "pkill -f matches full command lines, and the launching shell's command line is the "
        "whole chain, so the cleanup kills the chain before the server starts",
        "stop the previous run by its process group: `forensics stop NAME` (or "
        "`kill -TERM -- -PGID` from the pid file); if a pattern is unavoidable, make it one that "
        "cannot match the chain, e.g. `pkill -f '[s]glang.launch_server'` when the chain itself "
        "does not start sglang, and run it as its own ssh command",
        _check_self_kill,
    ),
    Rule(
        "mass-kill",
        "error",
        "a kill of everything rather than of one server: `kill -9 -1`, `kill -- -1`, "
        "`kill 0`, `kill $PPID`, `killall5`, `pkill -u root`, `pkill -P 1`; or a stop of the "
        "host, a service or a GPU: `reboot`, `shutdown`, `init 0`, `systemctl stop/restart`, "
        "`nvidia-smi --gpu-reset`; also inside `bash -c`, `eval`, `ssh HOST '…'`, `$(…)` or "
        "backticks",
        "it stops far more than the old server: the SSH session, the launching shell, the "
        "host's services and other users' work go with it",
        "stop the previous server by its process group: `forensics stop NAME` (or "
        "`kill -TERM -- -PGID` with the pgid from its pid file)",
        _check_mass_kill,
        replay="safe-patterns",
    ),
    Rule(
        "removes-launch-input",
        "error",
        "`rm -rf` (or rmdir, unlink, shred) of the log's folder, the model, the draft model or "
        "the tokenizer, or of a folder above them",
        "the launch needs them: with the log's folder gone nothing starts and no log is "
        "written; with the model gone the load fails (and a replay would delete it again)",
        "remove only what you mean to (the old log file itself, a cache folder), or create "
        "the folder again right before the server step (`mkdir -p DIR`)",
        _steps(lambda ctx: hazards.removed_inputs(ctx.chain, ctx.recipe)),
        replay="refuse",
    ),
    Rule(
        "removes-shared-data",
        "error",
        "`rm -rf` (or find -delete, shred…) of data shared beyond this launch: `/`, a home, "
        "`~/.cache/huggingface` or `$HF_HOME`, a `models` or `checkpoints` folder, weights "
        "(`*.safetensors`)",
        "other runs and users load from it: their models vanish mid-load, and each one is "
        "hours of download or training to bring back",
        "remove only what this launch made (its log, its own temp folder); to free a model "
        "from the cache use `huggingface-cli delete-cache` (it asks per revision)",
        _steps(lambda ctx: hazards.removed_shared(ctx.chain)),
        replay="refuse",
    ),
    Rule(
        "runs-fetched-script",
        "error",
        "a shell or interpreter that runs downloaded code: `curl -s URL | bash`, "
        '`. <(curl …)`, `python -c "$(curl …)"`, `eval "$(wget -qO- URL)"`, or a file '
        "a download saved (`curl -o x URL; bash x`, `wget URL/i.sh; chmod +x i.sh; ./i.sh`)",
        "what it runs is not in the chain: no rule can see its kills or removals, and a "
        "replay runs whatever the URL serves at that moment",
        "download it once, read it, and put its steps in the chain (or keep the script "
        "beside the recipe under a name of its own, not written by the chain's download)",
        _steps(lambda ctx: hazards.fetched_runs(ctx.chain)),
        replay="refuse",
    ),
    Rule(
        "exec-replaces-shell",
        "error",
        "`exec CMD` with steps after it",
        "exec replaces the shell that runs the chain, so the steps after it never run",
        "drop `exec`, or make the exec'd server the chain's last step",
        _steps(lambda ctx: hazards.exec_ends_chain(ctx.chain)),
    ),
    Rule(
        "trap-ignores-signals",
        "warning",
        "`trap '' TERM` (an empty action) before the server starts",
        "ignored signals are inherited across exec: the server ignores TERM and INT",
        "leave the signals alone (no `trap ''`); to survive the SSH session use `setsid nohup`",
        _steps(lambda ctx: hazards.ignored_signals(ctx.chain)),
    ),
    Rule(
        "broad-kill",
        "error",
        "pkill/killall of an interpreter or other generic name (`pkill -9 -f python3`, "
        "`killall python`)",
        "kills unrelated work of the same user on a shared host",
        "kill exactly the previous server's process group (`forensics stop NAME`); list what "
        "would match first with `pgrep -af PATTERN`",
        _check_broad,
    ),
    Rule(
        "gpu-collateral-kill",
        "error",
        "`fuser -k /dev/nvidia*` or GPU-holder lists piped to kill",
        "kills every GPU user on the host, not just your server",
        "list GPU holders without killing (`fuser -v /dev/nvidia*`, `nvidia-smi "
        "--query-compute-apps=pid,process_name --format=csv`) and stop only your own process "
        "group",
        _check_gpu_collateral,
    ),
    Rule(
        "and-after-pkill",
        "warning",
        "`&&` after pkill/pgrep/killall",
        "pkill exits 1 when nothing matched, so `&&` skips the rest of the list without a word",
        "use `;` after a cleanup step (or `pkill ... || true`), and check the result with "
        "`pgrep` if it matters",
        _check_and_after_pkill,
    ),
    Rule(
        "no-process-group",
        "warning",
        "the server is started without setsid (no process group of its own)",
        "without its own group the run can only be stopped by pattern, and orphaned children "
        "survive",
        "start it with `setsid nohup CMD </dev/null >>LOG 2>&1 &` and keep `$!` as the pgid "
        "(what `forensics launch` does)",
        _check_process_group,
    ),
    Rule(
        "no-redirect-stdin",
        "warning",
        "nohup without `</dev/null`",
        "stdin stays attached to the SSH channel",
        "redirect all three streams: `nohup CMD </dev/null >>LOG 2>&1 &`",
        _check_stdin,
    ),
    Rule(
        "sleep-as-sync",
        "info",
        "`sleep N` after a kill, used to wait for processes to exit",
        "a guess: too short races the old server for port and GPU, too long wastes time",
        "wait for the group to be gone with a deadline: `forensics stop NAME` (TERM, grace, "
        "KILL, then verify), or `timeout 60 sh -c 'while kill -0 -- -PGID; do sleep 0.5; done'`",
        _check_sleep,
    ),
    Rule(
        "log-dir-missing",
        "error",
        "the log's directory does not exist on the host",
        "the redirection fails before the server runs: no process, no log (pre-exec)",
        "create it first: `mkdir -p DIR` (forensics launch does)",
        check_log_dir,
        needs_host=True,
    ),
    Rule(
        "disk-full",
        "error",
        "the log's filesystem or $TMPDIR has less free space than the recipe's min_free_mb",
        "the server dies mid-write (ENOSPC) or writes a truncated log",
        "free space on MOUNT (`du -xh -d1 MOUNT | sort -h | tail`) or put the log elsewhere "
        "(min_free_mb in the recipe sets the threshold, 0 turns the check off)",
        check_disk,
        needs_host=True,
    ),
    Rule(
        "port-in-use",
        "error",
        "the health port is already bound on the host",
        "the server cannot bind, or /health answers for the old server",
        "stop the old server (`forensics stop NAME`), or find its owner with `ss -ltnp` / "
        "`fuser -v PORT/tcp` and pick another --port",
        check_port,
        needs_host=True,
    ),
)
RULES_BY_ID = {r.id: r for r in RULES}


def host_rule_ids() -> list[str]:
    """The rules that run only when a host is given."""
    return [r.id for r in RULES if r.needs_host]


def lint(recipe: Recipe | str, *, host: Host | None = None) -> list[Finding]:
    """Check a recipe (or a chain's text); host checks run only when ``host`` is given."""
    if isinstance(recipe, str):
        recipe = Recipe.from_shell(recipe)
    chain = recipe.chain()
    ctx = LintContext(
        recipe=recipe,
        chain=chain,
        server=server_step(chain),
        cmdline=launching_command_line(chain.text, recipe.shell_program),
        host=host,
    )
    findings: list[Finding] = []
    for rule in RULES:
        if rule.needs_host and host is None:
            continue
        findings.extend(rule.check(ctx, rule))
    order = {s: i for i, s in enumerate(SEVERITIES)}
    findings.sort(key=lambda f: (f.step if f.step is not None else 10**6, order[f.severity]))
    return [f.redacted() for f in findings]


# Which severities make ``forensics lint`` exit 1 (docs/exit-codes.md).
FAILING = {False: ("error",), True: ("error", "warning")}


def failing(findings: list[Finding], *, strict: bool = False) -> list[Finding]:
    """The findings that fail the check: errors, and with ``strict`` warnings too."""
    return [f for f in findings if f.severity in FAILING[strict]]


def rules_frame() -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "id": r.id,
                "severity": r.severity,
                "detects": r.detects,
                "why": r.why,
                "alternative": r.alternative,
                "needs_host": r.needs_host,
            }
            for r in RULES
        ]
    )
