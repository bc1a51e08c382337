"""lint's rules that read the host (``log-dir-missing``, ``disk-full``, ``port-in-use``): each
check runs only when ``lint`` is given a host; its finding is placed on the server step."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from typing import TYPE_CHECKING

from forensics.finding import Finding
from forensics.hostprobe import free_space, port_listening

if TYPE_CHECKING:
    from forensics.lint import LintContext, Rule


def _at_server(ctx: LintContext, rule: Rule, where: str, explanation: str, alt: str) -> Finding:
    """A host check's finding, placed on the server step (``where`` when there is none)."""
    step = ctx.server
    return Finding(
        rule.id,
        rule.severity,
        step.index if step else None,
        step.text if step else where,
        explanation,
        alt,
    )


def check_log_dir(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    log = ctx.recipe.log_path
    if not log or ctx.host is None:
        return
    d = posixpath.dirname(log) or "."
    if ctx.host.is_dir(d):
        return
    yield _at_server(
        ctx,
        rule,
        log,
        f"{ctx.host.name}:{d} does not exist, so the shell cannot open {log} for the "
        "redirection: the server never starts and no log is written.",
        rule.alternative.replace("DIR", d),
    )


def check_disk(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    need = ctx.recipe.min_free_mb
    if not need or ctx.host is None:
        return
    paths = [posixpath.dirname(ctx.recipe.log_path) or "."] if ctx.recipe.log_path else []
    tmp = ctx.host.run("echo ${TMPDIR:-/tmp}", timeout=10, allow_timeout=True).text.strip()
    paths.append(tmp or "/tmp")
    for path, mount, free in free_space(ctx.host, paths):
        if free >= need:
            continue
        yield _at_server(
            ctx,
            rule,
            path,
            f"{ctx.host.name}:{mount} (holding {path}) has {free:,.0f} MiB free, less than the "
            f"{need:,.0f} MiB a launch needs: the log, Triton/CUDA-graph caches and core files "
            "fail mid-write with `No space left on device`.",
            rule.alternative.replace("MOUNT", mount),
        )


def check_port(ctx: LintContext, rule: Rule) -> Iterable[Finding]:
    port = ctx.recipe.port
    if port is None or ctx.host is None:
        return
    if not port_listening(ctx.host, port):
        return
    yield _at_server(
        ctx,
        rule,
        str(ctx.recipe.health_url),
        f"port {port} is already bound on {ctx.host.name}: the new server fails to bind "
        "(`address already in use`), or /health answers from the old server and the launch "
        "looks healthy when it is not.",
        rule.alternative,
    )
