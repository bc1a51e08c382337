"""One unit of a sweep, start to end, on the sweep's host: the same code runs inside a Slurm job.

``run_unit`` does what the engineer of the seed session did by hand, with the safe parts:
``forensics.launcher.launch`` (registered, own process group, health wait) -> ``forensics.bench``
(single stream by default) -> ``launcher.stop`` (its process group only) -> confirm the server is
gone (group, port, GPU memory per ``nvidia-smi`` where present) -> ``forensics.ingest`` of its
log -> the benchmark stored against that run. Whatever fails, it returns a result (it never
raises for a failed config): outcome, phase, signature, cause (one line), tok_s, accept_len,
run, timings.
"""

from __future__ import annotations

import contextlib
import random
import secrets
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError, LaunchFailed
from forensics.sweep.plan import Sweep, Unit

if TYPE_CHECKING:
    from forensics.hosts import Host
    from forensics.recipe import Recipe
    from forensics.store import Store

Progress = Callable[[dict[str, Any]], None]
CAUSE_MAX = 240  # characters of the one-line cause


def log_dir(sweep: Sweep) -> str:
    """Where the sweep's logs go: [base] log_dir, else $FORENSICS_HOME/sweeps/NAME/logs."""
    if sweep.base.get("log_dir"):
        return str(sweep.base["log_dir"]).rstrip("/")
    from forensics.hosts import forensics_home

    if sweep.host in (None, "", "local"):
        return str((forensics_home() / "sweeps" / sweep.name / "logs").resolve())
    return f"/tmp/forensics-sweeps/{sweep.name}/logs"


def recipe_for(sweep: Sweep, unit: Unit, port: int | None = None, token: str = "TOKEN") -> Recipe:
    """The launch recipe of a unit (config form: the cleanup steps, then the server).

    ``{token}`` in a cleanup step becomes ``token`` (unique per launch), so a kill pattern
    can name this launch only.
    """
    from forensics.recipe import (
        DEFAULT_HEALTH_DEADLINE_S,
        DEFAULT_MIN_FREE_MB,
        DEFAULT_STEP_DEADLINE_S,
        Recipe,
        health_url_for,
    )

    argv = list(unit.argv) + [a for a in unit.inject.get("flags", [])]
    if port is not None:
        argv += ["--port", str(port)]
    steps = unit.config.get("cleanup", sweep.base.get("cleanup", []))
    cleanup = [str(c).replace("{token}", token) for c in steps]
    return Recipe(
        name=unit.run_name,
        server=argv,
        log_path=f"{log_dir(sweep)}/{unit.run_name}.log",
        health_url=health_url_for(argv),
        cleanup=cleanup,
        env={str(k): str(v) for k, v in sweep.base.get("env", {}).items()},
        host=sweep.host,
        step_deadline_s=float(sweep.base.get("step_deadline_s", DEFAULT_STEP_DEADLINE_S)),
        health_deadline_s=float(sweep.base.get("health_deadline_s", DEFAULT_HEALTH_DEADLINE_S)),
        min_free_mb=float(sweep.base.get("min_free_mb", DEFAULT_MIN_FREE_MB)),
        source=f"sweep:{sweep.name}",
    )


def sim_options(sweep: Sweep, unit: Unit) -> dict[str, Any] | None:
    if sweep.sim is None:
        return None
    return {
        "speed": float(sweep.sim.get("speed", 60)),
        "fail": unit.inject.get("fail"),
        "python": sweep.sim.get("python") or sys.executable,
    }


def free_port(host: Host | None) -> int:
    """A port nothing listens on, on the host that runs the server."""
    if host is None or host.name == "local":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    from forensics.hostprobe import port_listening

    for _ in range(20):
        p = random.randint(20000, 60000)
        if not port_listening(host, p):
            return p
    raise LaunchFailed(f"{host.name}: no free port found", hint="check the host's listeners")


def _host(sweep: Sweep) -> Host:
    from forensics.hosts import get_host

    return get_host(sweep.host or "local")


def _one_line(text: str | None) -> str:
    t = " ".join(str(text or "").split())
    return t if len(t) <= CAUSE_MAX else t[: CAUSE_MAX - 1] + "…"


def base_result(unit: Unit) -> dict[str, Any]:
    return {
        "key": unit.key,
        "config_id": unit.config_id,
        "repeat": unit.repeat,
        "config": unit.config,
        "baseline": unit.baseline,
        "outcome": None,
        "phase": None,
        "signature": None,
        "cause_id": None,
        "cause": None,
        "tok_s": None,
        "accept_len": None,
        "run": None,
        "run_id": None,
        "launch": unit.run_name,
        "log": None,
        "port": None,
        "cleanup": None,
        "launch_s": 0.0,
        "bench_s": 0.0,
        "stop_s": 0.0,
        "total_s": 0.0,
        "overhead_s": 0.0,
    }


def run_unit(
    store: Store, sweep: Sweep, unit: Unit, *, progress: Progress | None = None
) -> dict[str, Any]:
    """Launch, benchmark, stop and ingest one unit; the result (never raises for the config)."""
    from forensics import launcher

    t0 = time.monotonic()
    emit = progress or (lambda _e: None)
    result = base_result(unit)
    host = _host(sweep)
    port = free_port(host)
    recipe = recipe_for(sweep, unit, port, token="fxsweep" + secrets.token_hex(4))
    result.update(log=recipe.log_path, port=port)
    emit({"event": "launch", "key": unit.key, "run": unit.run_name, "port": port})
    try:
        res = launcher.launch(
            store,
            recipe,
            sim=sim_options(sweep, unit),
            progress=lambda e: emit({**e, "key": unit.key}),
        )
    except LaunchFailed as exc:
        result.update(
            outcome="failed", phase="pre-exec", cause_id="launch-refused", cause=_one_line(exc)
        )
        result["launch_s"] = result["total_s"] = time.monotonic() - t0
        return result
    t_launch = time.monotonic()
    result["launch_s"] = t_launch - t0
    pgid = res.get("pgid")
    rep = None
    if res["status"] == "ready":
        emit({"event": "ready", "key": unit.key, "seconds": result["launch_s"]})
        rep = _bench(store, sweep, unit)
        result["bench_s"] = time.monotonic() - t_launch
    else:
        result.update(
            outcome="failed",
            phase=res.get("phase"),
            cause_id=res.get("cause"),
            cause=_one_line(f"{res.get('cause')}: {res.get('explanation') or ''}"),
        )
    pids = _group_pids(host, pgid)
    t_stop = time.monotonic()
    with contextlib.suppress(ForensicsError):
        launcher.stop(store, unit.run_name, grace_s=float(sweep.base.get("stop_grace_s", 10)))
    result["stop_s"] = time.monotonic() - t_stop
    result["cleanup"] = confirm_gone(host, pgid, port, pids)
    _ingest_and_attach(store, sweep, recipe, rep, result)
    if rep is not None:
        _bench_outcome(rep, result)
    result["total_s"] = time.monotonic() - t0
    result["overhead_s"] = max(0.0, result["total_s"] - result["launch_s"] - result["bench_s"])
    return result


def _bench(store: Store, sweep: Sweep, unit: Unit) -> Any:
    from forensics import bench
    from forensics.hosts import get_host

    tgt = bench.resolve_bench_target(unit.run_name, store=store)
    with contextlib.ExitStack() as stack:
        url = tgt.url
        if tgt.ssh_host:
            fw = stack.enter_context(get_host(tgt.ssh_host).forward(tgt.remote_port))
            url = f"http://127.0.0.1:{fw.port}"
        opts = {"warmup": 1, "max_new_tokens": 256, **sweep.bench}
        cfg = bench.BenchConfig(url=url, **opts)
        rep = bench.run_bench(cfg)
    rep.config.url = tgt.url
    rep.via = f"ssh {tgt.ssh_host}" if tgt.ssh_host else None
    return rep


def _bench_outcome(rep: Any, result: dict[str, Any]) -> None:
    s = rep.summary
    failed = rep.server_dead or rep.deadline_hit or rep.failure_rate > rep.config.max_failure_rate
    result["tok_s"] = s.get("output_tok_s") if s.get("completed") else None
    if result["accept_len"] is None:
        result["accept_len"] = (
            rep.accept_len_server or rep.accept_len_log or s.get("accept_len_client") or None
        )
    if not failed:
        result.update(outcome="ok", phase="ok")
        return
    what = (
        f"the server died mid-benchmark ({rep.death})"
        if rep.server_dead
        else "the benchmark passed its deadline"
        if rep.deadline_hit
        else f"{s['failed']} of {s['failed'] + s['completed']} requests failed"
    )
    sig = result.get("signature")
    result.update(
        outcome="failed",
        phase=result.get("phase") if result.get("phase") not in (None, "ok") else "runtime",
        cause_id=sig or "bench-failed",
        cause=_one_line(f"{what}" + (f"; the log shows {sig}" if sig else "")),
    )


def _ingest_and_attach(
    store: Store, sweep: Sweep, recipe: Recipe, rep: Any, result: dict[str, Any]
) -> None:
    """Ingest the unit's log, find its run, store the benchmark against it."""
    import polars as pl

    from forensics import bench
    from forensics.ingest import ingest
    from forensics.runs import runs_table

    log = recipe.log_path or ""
    where = f"{sweep.host}:{log}" if sweep.host not in (None, "", "local") else log
    try:
        ingest(store, [where])
    except ForensicsError as exc:  # no log at all (a launch that died before its server)
        result["log_missing"] = _one_line(exc)
        if rep is not None:
            bench.save_bench(store, rep)
        return
    real = str(Path(log).resolve()) if sweep.host in (None, "", "local") else log
    table = runs_table(store)
    rows = table.filter(pl.col("path") == real).sort("run_index")
    if rows.is_empty():
        return
    row = rows.row(-1, named=True)
    result.update(run=row["name"], run_id=row["run_id"])
    if row.get("signature"):
        result["signature"] = row["signature"]
    if result.get("phase") is None and row.get("phase") not in (None, "ok"):
        result["phase"] = row["phase"]
    if rep is not None:
        rep.run_id, rep.run_name = row["run_id"], row["name"]
        with contextlib.suppress(ForensicsError):
            bench.accept_len_from_log(store, rep)
        bench.save_bench(store, rep)
        result["accept_len"] = rep.accept_len_log or rep.accept_len_server
    if result["accept_len"] is None and row.get("accept_len_mean") is not None:
        result["accept_len"] = row["accept_len_mean"]


def _group_pids(host: Host, pgid: int | None) -> list[int]:
    if not pgid:
        return []
    with contextlib.suppress(ForensicsError):
        res = host.run(f"ps -o pid= -g {int(pgid)} 2>/dev/null", timeout=10)
        return [int(x) for x in res.text.split() if x.isdigit()]
    return []


def confirm_gone(host: Host, pgid: int | None, port: int | None, pids: list[int]) -> str | None:
    """None when the unit's server is gone (group, port, GPU memory); else what is left."""
    from forensics.hostprobe import port_listening
    from forensics.launcher import wait_stopped

    problems = []
    if pgid:
        try:
            wait_stopped(host, int(pgid), timeout=10.0)
        except ForensicsError:
            problems.append(f"process group {pgid} still alive after stop")
    if port:
        with contextlib.suppress(ForensicsError):
            end = time.monotonic() + 5.0
            while port_listening(host, port):
                if time.monotonic() > end:
                    problems.append(f"port {port} still bound")
                    break
                time.sleep(0.2)
    if pids:
        q = (
            "command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi "
            "--query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null"
        )
        with contextlib.suppress(ForensicsError):
            res = host.run(q, timeout=30)
            held = []
            for line in res.text.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if parts and parts[0].isdigit() and int(parts[0]) in pids:
                    held.append(f"pid {parts[0]} holds {parts[1] if len(parts) > 1 else '?'} MiB")
            if held:
                problems.append("GPU memory not released: " + ", ".join(held))
    return "; ".join(problems) or None
