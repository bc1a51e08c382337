"""Collect evidence from a GPU host after a failed or hung launch.

``collect(host, pgid=..., port=...)`` runs the commands in ``COMMANDS`` on the host (each with
its own deadline inside one overall deadline; a missing tool, a denied ``dmesg`` or a hung
``nvidia-smi`` is a finding, never a crash), parses their outputs with ``parsers.evidence`` and
derives short findings from them (``FINDERS``): who holds GPU memory and whether it belongs to
the run, orphans of the run, the owner of the health port, kernel Xid errors, where the
server's threads are stuck (py-spy).

The result is JSON-friendly:

    {"host", "collected_at", "pgid", "port",
     "commands": {name: {"command", "status", "rc", "elapsed_s", "stdout", "stderr"}},
     "tables": {name: [row dicts]}      # polars frames with as_frames=True
     "findings": [{"id", "severity", "message", ...}]}

``status`` is one of ``ok``, ``missing`` (tool not installed), ``failed`` (non-zero exit),
``denied`` (permission), ``timeout``, ``error`` (connection), ``skipped`` (overall deadline).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forensics.errors import DeadlineExceeded, ForensicsError
from forensics_parsers.secrets import redact

if TYPE_CHECKING:
    import polars as pl

    from forensics.hosts import Host

PS_ARGS = "pid,ppid,pgid,stat,etimes,args"
QUERY_GPU = "index,name,memory.used,memory.total,utilization.gpu"
QUERY_APPS = "pid,process_name,used_memory"
MAX_PY_SPY = 4  # py-spy dumps per collection (the run's Python processes, largest group first)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    tool: str  # checked with `command -v` first: absent -> status "missing"
    script: str
    timeout: float
    max_output: int = 1 << 20


# The commands, as data. Scripts are constants (no user input is interpolated here).
COMMANDS: list[Command] = [
    Command("nvidia_smi", "nvidia-smi", "nvidia-smi", 20),
    Command("query_gpu", "nvidia-smi", f"nvidia-smi --query-gpu={QUERY_GPU} --format=csv", 20),
    Command(
        "query_apps", "nvidia-smi", f"nvidia-smi --query-compute-apps={QUERY_APPS} --format=csv", 20
    ),
    Command(
        "fuser",
        "fuser",
        # fuser -v writes its table to stderr; no device files -> say so and stop
        'set -- /dev/nvidia*; [ -e "$1" ] || { echo "no /dev/nvidia* device files"; exit 0; }\n'
        'fuser -v "$@" 2>&1; rc=$?; [ "$rc" -le 1 ] || exit "$rc"',
        20,
    ),
    Command(
        "dmesg_xid",
        "dmesg",
        "out=$(dmesg 2>&1); rc=$?\n"
        'if [ "$rc" -ne 0 ]; then printf "%s\\n" "$out" >&2; exit "$rc"; fi\n'
        'printf "%s\\n" "$out" | grep -a "NVRM: Xid" | tail -n 200; exit 0',
        20,
    ),
    # -ww: full command lines (else cut at the terminal width, 80 without a tty)
    Command("ps", "ps", f"ps -ww -eo {PS_ARGS} 2>/dev/null || ps -eo {PS_ARGS}", 15, 8 << 20),
    Command("ss", "ss", "ss -ltnp", 15),
    Command("clock", "cat", "cat /proc/uptime; date +%s", 10),
]

_DENIED = ("Operation not permitted", "Permission denied", "permission denied")


def _wrap(cmd: Command) -> str:
    return (
        f"command -v {cmd.tool} >/dev/null 2>&1 || "
        f'{{ echo "{cmd.tool}: not installed" >&2; exit 127; }}\n{cmd.script}'
    )


def _run(
    host: Host,
    name: str,
    tool: str,
    script: str,
    timeout: float,
    cap: int,
    spill_dir: str | None = None,
) -> dict:
    rec: dict[str, Any] = {"command": script, "tool": tool}
    start = time.monotonic()
    try:
        res = host.run(
            script,
            timeout=timeout,
            max_output=cap,
            allow_timeout=True,
            spill_dir=spill_dir,
            spill_name=name,
        )
    except DeadlineExceeded as exc:
        rec.update(status="timeout", rc=None, stdout="", stderr=str(exc))
    except ForensicsError as exc:
        rec.update(status="error", rc=None, stdout="", stderr=str(exc))
    else:
        out, err = res.text, res.err
        if res.timed_out:
            status = "timeout"
        elif res.rc == 127 and f"{tool}: not installed" in err:
            status = "missing"
        elif res.rc != 0 and any(d in err or d in out for d in _DENIED):
            status = "denied"
        elif res.rc != 0:
            status = "failed"
        else:
            status = "ok"
        # the record is what is printed (--json) and kept: the parser's one redaction first
        # (`ps` shows a server's `--api-key X`, an environment dump its HF_TOKEN)
        rec.update(status=status, rc=res.rc, stdout=redact(out), stderr=redact(err))
        # S06: an output over the cap keeps its tail here and whole in a local file
        for key in ("stdout_spill", "stderr_spill", "spill_error"):
            if getattr(res, key, None):
                rec[key] = str(getattr(res, key))
    rec["elapsed_s"] = round(time.monotonic() - start, 3)
    return rec


def collect(
    host: Host,
    *,
    pgid: int | None = None,
    port: int | None = None,
    pids: list[int] | None = None,
    deadline: float = 90.0,
    py_spy: bool = True,
    as_frames: bool = False,
    spill_dir: str | None = None,
) -> dict[str, Any]:
    """Run the evidence commands on ``host`` and return raw texts, tables and findings.

    ``pgid``: the run's process group (its tree, orphans and py-spy targets); ``port``: the
    health port (its owner); ``pids``: extra processes of interest. Never raises for a missing
    or failing tool; the overall ``deadline`` bounds the whole collection. ``spill_dir``: a
    folder on this machine where an output over its command's cap is kept whole (S06; the
    record then names the file in ``stdout_spill``/``stderr_spill``).
    """
    from forensics_parsers import evidence as ev

    end = time.monotonic() + deadline
    commands: dict[str, dict] = {}
    for cmd in COMMANDS:
        left = end - time.monotonic()
        if left <= 1:
            commands[cmd.name] = {"command": cmd.script, "tool": cmd.tool, "status": "skipped"}
            continue
        commands[cmd.name] = _run(
            host,
            cmd.name,
            cmd.tool,
            _wrap(cmd),
            min(cmd.timeout, left),
            cmd.max_output,
            spill_dir,
        )

    tables = tables_of(commands, pgid=pgid, pids=pids)

    if py_spy and pgid is not None:
        targets = _py_spy_targets(tables["run_tree"], pids or [])
        frames = []
        for pid in targets:
            left = end - time.monotonic()
            name = f"py_spy_{pid}"
            if left <= 1:
                commands[name] = {"command": "py-spy dump", "tool": "py-spy", "status": "skipped"}
                continue
            script = f"command -v py-spy >/dev/null 2>&1 || {{ echo 'py-spy: not installed' >&2; exit 127; }}\npy-spy dump --pid {int(pid)}"
            commands[name] = _run(host, name, "py-spy", script, min(30.0, left), 1 << 20, spill_dir)
            if commands[name]["status"] == "ok":
                frames.append(ev.parse_py_spy(commands[name]["stdout"]))
            elif commands[name]["status"] == "missing":
                break  # one note is enough
        import polars as pl

        tables["py_spy"] = pl.concat(frames) if frames else pl.DataFrame(schema=ev.PYSPY_SCHEMA)

    findings = findings_of(host.name, commands, tables, pgid=pgid, port=port)
    return {
        "host": host.name,
        "collected_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "pgid": pgid,
        "port": port,
        "commands": commands,
        "tables": tables if as_frames else {k: v.to_dicts() for k, v in tables.items()},
        "findings": findings,
    }


def tables_of(
    commands: dict[str, dict], *, pgid: int | None = None, pids: list[int] | None = None
) -> dict[str, pl.DataFrame]:
    """The tables parsed from the command records of ``collect`` (pure: text in, frames out).

    Records whose status is not ``ok`` give empty tables. ``run_tree`` is the process tree of
    the group ``pgid`` (and of ``pids``).
    """
    from forensics_parsers import evidence as ev

    def text(name: str) -> str:
        c = commands.get(name, {})
        return c.get("stdout", "") if c.get("status") == "ok" else ""

    gpus, gpu_procs = ev.parse_nvidia_smi(text("nvidia_smi"))
    apps = ev.parse_query_compute_apps(text("query_apps"))
    tables: dict[str, pl.DataFrame] = {
        "gpus": gpus,
        "gpu_processes": gpu_procs if gpu_procs.height else apps,
        "query_gpu": ev.parse_query_gpu(text("query_gpu")),
        "fuser": ev.parse_fuser(text("fuser")),
        "xid": ev.parse_dmesg_xid(text("dmesg_xid")),
        "ps": ev.parse_ps(text("ps")),
        "listen": ev.parse_ss_listen(text("ss")),
    }
    if apps.height and gpu_procs.height:
        tables["gpu_processes"] = gpu_procs  # the table view carries the GPU index
    ps = tables["ps"]
    roots = [int(p) for p in (pids or [])]
    if pgid is not None and ps.height:
        roots += ps.filter(ps["pgid"] == pgid)["pid"].to_list()
    tables["run_tree"] = ev.process_tree(ps, roots) if ps.height else ps
    return tables


def findings_of(
    host_name: str,
    commands: dict[str, dict],
    tables: dict[str, pl.DataFrame],
    *,
    pgid: int | None = None,
    port: int | None = None,
) -> list[dict]:
    """The findings (``FINDERS``) from command records and their tables (pure)."""
    ctx = _Context(host_name, pgid, port, commands, tables)
    findings: list[dict] = []
    for _name, finder in FINDERS:
        findings.extend(finder(ctx))
    return findings


def _py_spy_targets(tree: pl.DataFrame, pids: list[int]) -> list[int]:
    out = [int(p) for p in pids]
    if tree.height:
        for row in tree.to_dicts():
            args = row["args"] or ""
            if "python" in args.split(" ", 1)[0] and row["pid"] not in out:
                out.append(row["pid"])
    return out[:MAX_PY_SPY]


# --------------------------------------------------------------------------------------------
# Findings: (id, function) pairs; each function returns a list of finding dicts.


@dataclasses.dataclass
class _Context:
    host: str
    pgid: int | None
    port: int | None
    commands: dict[str, dict]
    tables: dict[str, pl.DataFrame]

    def ps_row(self, pid: int | None) -> dict | None:
        ps = self.tables["ps"]
        if pid is None or not ps.height:
            return None
        rows = ps.filter(ps["pid"] == pid).to_dicts()
        return rows[0] if rows else None


def _f(fid: str, severity: str, message: str, **extra: Any) -> dict:
    return {"id": fid, "severity": severity, "message": message, **extra}


def _tools(ctx: _Context) -> list[dict]:
    out = []
    reported: set[str] = set()
    for name, c in ctx.commands.items():
        tool, status = c.get("tool", name), c.get("status")
        if status == "missing" and tool not in reported:
            reported.add(tool)
            out.append(
                _f("tool-missing", "info", f"{tool}: not installed on {ctx.host}", tool=tool)
            )
        elif status in ("failed", "denied", "timeout", "error"):
            first = (c.get("stderr") or c.get("stdout") or "").strip().splitlines()
            why = first[0][:200] if first else f"exit {c.get('rc')}"
            out.append(
                _f(f"tool-{status}", "warning", f"{name}: {status}: {why}", tool=tool, command=name)
            )
    return out


def _gpu_holders(ctx: _Context) -> list[dict]:
    out = []
    procs = ctx.tables["gpu_processes"]
    for row in procs.to_dicts() if procs.height else []:
        pid, mib = row["pid"], row["used_memory_mib"]
        ps = ctx.ps_row(pid)
        mem = f"{mib} MiB" if mib is not None else "GPU memory"
        gpu = f"GPU {row['gpu']}" if row.get("gpu") is not None else "the GPU"
        if ps is None:
            out.append(
                _f(
                    "gpu-holder-unknown-pid",
                    "warning",
                    f"pid {pid} ({row['process_name']}) holds {mem} on {gpu} but is not in the "
                    "process list (another PID namespace, e.g. a container)",
                    pid=pid,
                    used_memory_mib=mib,
                )
            )
            continue
        cmd = (ps["args"] or "")[:300]
        in_run = ctx.pgid is not None and ps["pgid"] == ctx.pgid
        leader_alive = ctx.pgid is not None and ctx.ps_row(ctx.pgid) is not None
        if in_run and not leader_alive:
            fid, sev, what = "orphan-gpu-process", "error", "an orphan of the run (leader gone)"
        elif in_run:
            fid, sev, what = "gpu-held-by-run", "info", "part of the run"
        elif ps["ppid"] == 1:
            fid, sev, what = "orphan-gpu-process", "warning", "an orphan (parent is init)"
        else:
            fid, sev, what = "gpu-held-by-other", "warning", "not part of this run"
        out.append(
            _f(
                fid,
                sev,
                f"pid {pid} holds {mem} on {gpu}, {what}: {cmd}",
                pid=pid,
                pgid=ps["pgid"],
                used_memory_mib=mib,
                command=cmd,
            )
        )
    return out


def _device_holders(ctx: _Context) -> list[dict]:
    """Processes with /dev/nvidia* open that nvidia-smi did not list (no memory yet, or hidden)."""
    fuser, procs = ctx.tables["fuser"], ctx.tables["gpu_processes"]
    if not fuser.height:
        return []
    listed = set(procs["pid"].to_list()) if procs.height else set()
    out = []
    for pid in sorted(set(fuser["pid"].drop_nulls().to_list()) - listed):
        ps = ctx.ps_row(pid)
        cmd = (ps["args"] if ps else None) or fuser.filter(fuser["pid"] == pid)["command"][0] or ""
        out.append(
            _f(
                "gpu-device-open",
                "info",
                f"pid {pid} has /dev/nvidia* open: {cmd[:300]}",
                pid=pid,
                command=cmd[:300],
            )
        )
    return out


def _port(ctx: _Context) -> list[dict]:
    if ctx.port is None or ctx.commands.get("ss", {}).get("status") != "ok":
        return []
    listen = ctx.tables["listen"]
    rows = listen.filter(listen["port"] == ctx.port).to_dicts() if listen.height else []
    if not rows:
        return [_f("port-free", "info", f"port {ctx.port}: nothing listens", port=ctx.port)]
    out = []
    for row in rows:
        pid = row["pid"]
        if pid is None:
            out.append(
                _f(
                    "port-owner-hidden",
                    "warning",
                    f"port {ctx.port} is bound on {row['local_address']}, owner not visible "
                    "(run as the owner or root to see it)",
                    port=ctx.port,
                )
            )
            continue
        ps = ctx.ps_row(pid)
        cmd = (ps["args"] if ps else row["process"]) or ""
        in_run = ctx.pgid is not None and ps is not None and ps["pgid"] == ctx.pgid
        out.append(
            _f(
                "port-owned-by-run" if in_run else "port-in-use",
                "info" if in_run else "warning",
                f"port {ctx.port} is owned by pid {pid} ({row['process']}): {cmd[:300]}",
                port=ctx.port,
                pid=pid,
                command=cmd[:300],
            )
        )
    return out


def _boot_time(ctx: _Context) -> float | None:
    c = ctx.commands.get("clock", {})
    if c.get("status") != "ok":
        return None
    try:
        lines = c["stdout"].split("\n")
        return float(lines[1].strip()) - float(lines[0].split()[0])
    except (IndexError, ValueError):
        return None


def _xid(ctx: _Context) -> list[dict]:
    xid = ctx.tables["xid"]
    if not xid.height:
        return []
    boot = _boot_time(ctx)
    out = []
    for row in xid.to_dicts():
        when = row["ts"] or "?"
        at = None
        if boot is not None and row["uptime_s"] is not None:
            at = dt.datetime.fromtimestamp(boot + row["uptime_s"], dt.UTC)
            when = at.isoformat(timespec="seconds")
        who = f" pid {row['pid']} ({row['name']})" if row["pid"] is not None else ""
        meaning = f" {row['meaning']}" if row["meaning"] else ""
        out.append(
            _f(
                "gpu-xid",
                "error",
                f"Xid {row['xid']}{meaning} on {row['device']}{who} at {when}: "
                f"{row['message'][:300]}",
                xid=row["xid"],
                pid=row["pid"],
                at=when,
                device=row["device"],
            )
        )
    return out


def _run_group(ctx: _Context) -> list[dict]:
    if ctx.pgid is None or ctx.commands.get("ps", {}).get("status") != "ok":
        return []
    tree = ctx.tables["run_tree"]
    members = tree.filter(tree["pgid"] == ctx.pgid) if tree.height else tree
    if not members.height:
        return [_f("run-gone", "info", f"no process of group {ctx.pgid} is alive", pgid=ctx.pgid)]
    zombies = members.filter(members["stat"].str.starts_with("Z"))["pid"].to_list()
    listed = ", ".join(f"{r['pid']} {r['args'][:60]}" for r in members.head(5).to_dicts())
    extra = f"; zombies: {zombies}" if zombies else ""
    return [
        _f(
            "run-processes",
            "info",
            f"group {ctx.pgid} has {members.height} process(es): {listed}{extra}",
            pgid=ctx.pgid,
            pids=members["pid"].to_list(),
        )
    ]


def _py_spy(ctx: _Context) -> list[dict]:
    frames = ctx.tables.get("py_spy")
    if frames is None or not frames.height:
        return []
    out = []
    for (pid,), group in frames.group_by(["pid"], maintain_order=True):
        top = group.filter(group["depth"] == 0).to_dicts()
        where = "; ".join(
            f"{t['thread_name'] or t['thread_id']}: {t['function']} ({t['file']}:{t['lineno']})"
            for t in top[:4]
        )
        out.append(_f("py-spy-stack", "info", f"pid {pid} threads: {where}", pid=pid))
    return out


FINDERS: list[tuple[str, Callable[[_Context], list[dict]]]] = [
    ("tools", _tools),
    ("gpu-holders", _gpu_holders),
    ("device-holders", _device_holders),
    ("port", _port),
    ("xid", _xid),
    ("run-group", _run_group),
    ("py-spy", _py_spy),
]


def summary(evidence: dict[str, Any]) -> list[str]:
    """One line per finding, for people."""
    return [f"[{f['severity']}] {f['message']}" for f in evidence.get("findings", [])]
