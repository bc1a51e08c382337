"""The sweep file and its plan: every configuration, how it is launched, or why it is not.

A sweep file (TOML; see docs/sweep.md and fixtures/sweeps/sim-mix.toml)::

    name = "eagle3-k2"                        # default: the file's stem
    [base]                                    # the recipe every config starts from
    host = "gpu8"                             # a [hosts.NAME]; omitted: this machine
    server = ["python3", "-m", "sglang.launch_server", "--model-path", "/models/k2",
              "--speculative-algorithm", "EAGLE3",
              "--speculative-draft-model-path", "/data/eagle3/output_10k_sglang/4"]
    log_dir = "/data/eagle3/sweeps"           # default: $FORENSICS_HOME/sweeps/NAME/logs
    cleanup = []                              # extra steps before each server
    env = {}
    health_deadline_s = 900
    [grid]                                    # every combination (the cartesian product)
    speculative_num_steps = [2, 3, 5]
    speculative_eagle_topk = [1, 4]
    cuda_graph = [true, false]
    [zip]                                     # walked together, crossed with the grid
    speculative_draft_model_path = ["/d/10k", "/d/50k"]
    [[configs]]                               # single configs, after the grid's
    speculative_num_steps = 4
    [baseline]                                # runs first: the base without speculation
    cuda_graph = true
    [bench]                                   # `forensics bench` options
    num_prompts = 10
    max_new_tokens = 256
    [run]
    repeats = 1
    budget_s = 14400                          # stop starting configs after this long
    prune = true                              # skip configs that cannot beat the baseline
    prune_after = 2                           # ... once this many configs ran
    [sim]                                     # the simulated server in place of SGLang
    speed = 60
    [[sim.inject]]                            # failures for configs that match
    when = { speculative_num_draft_tokens = 16 }
    fail = "capture-oom"
    [slurm]                                   # --executor slurm
    partition = "gpu"
    gpus = 8
    time = "00:30:00"
    mem = "200G"
    max_parallel = 4
    shared_dir = "/shared/forensics-sweeps"

Config keys are SGLang's server-argument names (underscores), rendered as ``--flag value``;
``true`` renders a switch, ``false`` leaves it out. A few keys have their own rendering
(``CONFIG_KEYS``: ``cuda_graph = false`` is ``--disable-cuda-graph``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from forensics.errors import ConfigError, InputNotFound, UsageError
from forensics.sweep.constraints import check
from forensics_parsers.names import name_from_flags

SPEC_PREFIX = "--speculative-"

# Config keys with their own rendering: key -> (flag, how). how: "value" (--flag V),
# "off-switch" (--flag when the value is false), "none" (not a server flag: sweep-only).
CONFIG_KEYS: dict[str, tuple[str | None, str]] = {
    "cuda_graph": ("--disable-cuda-graph", "off-switch"),
    "drafter": ("--speculative-draft-model-path", "value"),
    "drafter_topk1": (None, "none"),
    "cleanup": (None, "none"),  # this config's cleanup steps instead of [base] cleanup
    "slurm_mem": (None, "none"),  # this config's Slurm job --mem / --time (--executor slurm)
    "slurm_time": (None, "none"),
}

TOP_KEYS = {"name", "base", "grid", "zip", "configs", "baseline", "bench", "run", "sim", "slurm"}
BASE_KEYS = {
    "host",
    "server",
    "log_dir",
    "cleanup",
    "env",
    "health_deadline_s",
    "step_deadline_s",
    "min_free_mb",
    "stop_grace_s",
}
RUN_KEYS = {"repeats", "budget_s", "prune", "prune_after"}
# Bounds of a plan, checked before anything is expanded: the runs of a sweep (configs x
# repeats) and its time budget (30 days).
MAX_CONFIGS = 10_000
MAX_BUDGET_S = 30 * 86400
SIM_KEYS = {"speed", "inject", "python"}
INJECT_KEYS = {"when", "fail", "flags"}
SLURM_KEYS = {
    "partition",
    "gpus",
    "time",
    "mem",
    "cpus",
    "max_parallel",
    "shared_dir",
    "extra",
    "poll_s",
}
# `forensics bench` options a sweep may set (forensics.bench.BenchConfig fields)
BENCH_KEYS = {
    "api",
    "concurrency",
    "num_prompts",
    "rate",
    "duration",
    "warmup",
    "max_new_tokens",
    "ignore_eos",
    "temperature",
    "dataset",
    "random_input_len",
    "model",
    "flush_cache",
    "connect_timeout",
    "ttft_timeout",
    "idle_timeout",
    "request_timeout",
    "deadline",
    "max_failure_rate",
    "seed",
    "health_every",
}


@dataclasses.dataclass
class Unit:
    """One launch of the sweep: a config (and its repeat), or why it is not launched."""

    key: str  # "<config_id>#<repeat>": the journal's key
    config_id: str  # the run name by the seed's convention (unique within the sweep)
    repeat: int  # 1-based
    config: dict[str, Any]  # the keys that vary (as SGLang will run them)
    argv: list[str]  # the server command (without --port; the executor adds it)
    baseline: bool = False
    skip: str | None = None  # the constraint id that skips it
    skip_reason: str | None = None
    notes: list[str] = dataclasses.field(default_factory=list)  # adjustments, lint findings
    lint: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    inject: dict[str, Any] = dataclasses.field(default_factory=dict)  # sim failure injection

    @property
    def run_name(self) -> str:
        return self.config_id if self.repeat == 1 else f"{self.config_id}_r{self.repeat}"

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"run_name": self.run_name}


@dataclasses.dataclass
class Sweep:
    name: str
    path: str
    digest: str
    base: dict[str, Any]
    bench: dict[str, Any]
    run: dict[str, Any]
    sim: dict[str, Any] | None
    slurm: dict[str, Any]
    units: list[Unit]

    @property
    def host(self) -> str | None:
        return self.base.get("host")

    def unit(self, key: str) -> Unit:
        return next(u for u in self.units if u.key == key)


def _fail(path: str, what: str, fix: str) -> ConfigError:
    return ConfigError(f"{path}: {what}", hint=fix)


def _check_keys(path: str, where: str, table: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _fail(path, f"{where} must be a table", f"write [{where}] with key = value lines")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _fail(
            path,
            f"unknown key {unknown[0]!r} in [{where}]",
            f"use one of: {', '.join(sorted(allowed))}",
        )
    return table


def flags_for(config: dict[str, Any]) -> list[str]:
    """Server flags for a config's keys (see CONFIG_KEYS)."""
    out: list[str] = []
    for key, value in config.items():
        if value is None:
            continue
        flag, how = CONFIG_KEYS.get(key, ("--" + key.replace("_", "-"), "value"))
        if how == "none" or flag is None:
            continue
        if how == "off-switch":
            if value is False:
                out.append(flag)
            continue
        if value is True:
            out.append(flag)
        elif value is False:
            continue
        else:
            out += [flag, str(value)]
    return out


def _drop_flags(argv: list[str], flags: set[str], prefix: str | None = None) -> list[str]:
    """argv without the given flags (and their values); ``prefix`` drops a whole family."""
    out: list[str] = []
    skip = False
    for k, a in enumerate(argv):
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        hit = name in flags or (prefix is not None and name.startswith(prefix))
        if hit:
            nxt = argv[k + 1] if k + 1 < len(argv) else None
            skip = "=" not in a and nxt is not None and not nxt.startswith("--")
            continue
        out.append(a)
    return out


def _base_values(argv: list[str]) -> dict[str, Any]:
    """The config keys the base server command already sets (``--a-b V`` -> a_b: V)."""
    out: dict[str, Any] = {}
    for k, a in enumerate(argv):
        if not a.startswith("--"):
            continue
        name, eq, val = a[2:].partition("=")
        key = name.replace("-", "_")
        nxt = argv[k + 1] if k + 1 < len(argv) else None
        if eq:
            out[key] = val
        elif nxt is not None and not nxt.startswith("--"):
            out[key] = nxt
        else:
            out[key] = True
    if out.pop("disable_cuda_graph", None):
        out["cuda_graph"] = False
    return {k: _number(v) for k, v in out.items()}


def _number(v: Any) -> Any:
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
        return int(v)
    return v


def _scalar(path: str, where: str, key: str, v: Any) -> Any:
    if isinstance(v, bool | int | float | str):
        return v
    raise _fail(path, f"[{where}] {key}: {v!r} is not a number, string or boolean", "fix the value")


def _grid(path: str, grid: dict[str, Any], zipped: dict[str, Any]) -> list[dict[str, Any]]:
    for where, table in (("grid", grid), ("zip", zipped)):
        for key, vals in table.items():
            if not isinstance(vals, list) or not vals:
                raise _fail(
                    path, f"[{where}] {key} must be a non-empty list", f"{key} = [value, ...]"
                )
            for v in vals:
                _scalar(path, where, key, v)
    lens = {len(v) for v in zipped.values()}
    if len(lens) > 1:
        raise _fail(
            path,
            "the [zip] lists have different lengths "
            + ", ".join(f"{k}: {len(v)}" for k, v in zipped.items()),
            "give every [zip] list the same length (or move one to [grid])",
        )
    count = math.prod(len(v) for v in grid.values()) * (lens.copy().pop() if lens else 1)
    if count > MAX_CONFIGS:  # counted before anything is expanded (12 keys x 40 values: 40^12)
        raise _fail(
            path,
            f"the [grid] and [zip] make {count:,} configs, more than {MAX_CONFIGS:,}",
            "split the sweep, or narrow the grid to what can run",
        )
    keys = list(grid)
    combos = [dict(zip(keys, vals, strict=True)) for vals in itertools.product(*grid.values())]
    if zipped:
        n = lens.pop()
        rows = [{k: v[i] for k, v in zipped.items()} for i in range(n)]
        combos = [{**c, **r} for c in combos for r in rows] if grid else rows
    return combos if (grid or zipped) else []


def _config_id(argv: list[str], config: dict[str, Any], taken: dict[str, str]) -> str:
    """The seed's naming (sglang_eagle3_cg_3step_topk4_5dt), made unique within the sweep."""
    base = name_from_flags(argv)
    ident = json.dumps(config, sort_keys=True, default=str)
    if base not in taken or taken[base] == ident:
        taken[base] = ident
        return base
    name = f"{base}_{hashlib.sha1(ident.encode()).hexdigest()[:6]}"
    taken[name] = ident
    return name


def _inject_for(sim: dict[str, Any] | None, config: dict[str, Any]) -> dict[str, Any]:
    """The simulator failure the sweep file asks for this config (first matching rule)."""
    for rule in (sim or {}).get("inject", []):
        when = rule.get("when", {})
        if all(config.get(k) == v for k, v in when.items()):
            return {"fail": rule.get("fail"), "flags": list(rule.get("flags", []))}
    return {}


def load(path: str | Path, *, name: str | None = None) -> Sweep:
    """Read and check a sweep file, then expand it into its plan (nothing is run)."""
    p = Path(path)
    shown = str(path)
    raw, data = _read(p, shown)
    s = _sections(shown, data)
    units = _plan(s, int(s["run"]["repeats"]))
    sweep_name = name or data.get("name") or p.stem
    from forensics.recipe import valid_name

    try:
        valid_name(str(sweep_name))
    except UsageError as exc:  # the option's error or the file's; one (try: …), the rule's
        if name:
            raise UsageError(f"--name {name!r}: not a valid sweep name", hint=exc.hint) from None
        raise _fail(shown, f"name {sweep_name!r} is not a valid name", exc.hint or "") from None
    return Sweep(
        name=str(sweep_name),
        path=str(p.resolve()),
        digest=hashlib.sha1(raw).hexdigest()[:12],
        base=s["base"],
        bench=s["bench"],
        run=s["run"],
        sim=s["sim"],
        slurm=s["slurm"],
        units=units,
    )


def _read(p: Path, shown: str) -> tuple[bytes, dict[str, Any]]:
    """The sweep file's bytes and its TOML."""
    from forensics.errors import FileMissing, NotRegularFile
    from forensics.userfile import read_user_file

    try:  # a FIFO, device or oversized file is refused before a read (issue 14)
        raw = read_user_file(shown, "sweep file")  # as typed: `x.toml/` is no file
    except FileMissing:
        raise InputNotFound(f"{shown}: no such sweep file", hint="check the path") from None
    except NotRegularFile as exc:
        if p.is_dir():
            raise _fail(shown, "is a directory, not a sweep file", "pass a .toml file") from None
        raise exc
    except OSError as exc:
        raise InputNotFound(
            f"{shown}: cannot read ({exc.strerror})", hint="check its mode"
        ) from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise _fail(shown, f"not valid TOML ({exc})", "fix the file (see docs/sweep.md)") from None
    _check_keys(shown, "the sweep file", data, TOP_KEYS)
    return raw, data


def _server(shown: str, base: dict[str, Any]) -> list[str]:
    server = base.get("server")
    if not isinstance(server, list) or not server or not all(isinstance(a, str) for a in server):
        raise _fail(
            shown,
            "[base] server must be the server command as a list of strings",
            'server = ["python3", "-m", "sglang.launch_server", "--model-path", "..."]',
        )
    if "--port" in server or any(a.startswith("--port=") for a in server):
        raise _fail(
            shown,
            "[base] server sets --port",
            "leave --port out: each config gets a free port (configs may run in parallel)",
        )
    return server


def _run_table(shown: str, data: dict[str, Any]) -> dict[str, Any]:
    run = dict(_check_keys(shown, "run", data.get("run", {}), RUN_KEYS))
    run.setdefault("repeats", 1)
    run.setdefault("prune", True)
    run.setdefault("prune_after", 2)
    run.setdefault("budget_s", None)
    for key, low in (("repeats", 1), ("prune_after", 0)):
        if not isinstance(run[key], int) or isinstance(run[key], bool) or run[key] < low:
            raise _fail(shown, f"[run] {key} must be an integer ≥ {low}", f"{key} = {max(low, 1)}")
    if run["budget_s"] is not None and not (
        isinstance(run["budget_s"], int | float) and 0 < run["budget_s"] <= MAX_BUDGET_S
    ):
        raise _fail(
            shown,
            f"[run] budget_s must be a number of seconds, more than 0 and at most {MAX_BUDGET_S:,}",
            "budget_s = 3600",
        )
    return run


def _sections(shown: str, data: dict[str, Any]) -> dict[str, Any]:
    """Every table of the file, checked: base, server, bench, run, sim, slurm, the configs
    (grid, zip, then [[configs]]) and the baseline (a table, or False)."""
    base = dict(_check_keys(shown, "base", data.get("base", {}), BASE_KEYS))
    server = _server(shown, base)
    grid = _check_keys(shown, "grid", data.get("grid", {}), set(data.get("grid", {})))
    zipped = _check_keys(shown, "zip", data.get("zip", {}), set(data.get("zip", {})))
    bench = dict(_check_keys(shown, "bench", data.get("bench", {}), BENCH_KEYS))
    run = _run_table(shown, data)
    sim = data.get("sim")
    if sim is not None:
        sim = dict(_check_keys(shown, "sim", sim, SIM_KEYS))
        for rule in sim.get("inject", []):
            _check_keys(shown, "sim.inject", rule, INJECT_KEYS)
    slurm = dict(_check_keys(shown, "slurm", data.get("slurm", {}), SLURM_KEYS))
    explicit = data.get("configs", [])
    if not isinstance(explicit, list) or not all(isinstance(c, dict) for c in explicit):
        raise _fail(shown, "configs must be an array of tables", "write [[configs]] blocks")
    if len(explicit) > MAX_CONFIGS:
        raise _fail(
            shown, f"{len(explicit):,} [[configs]], more than {MAX_CONFIGS:,}", "split the sweep"
        )
    combos = _grid(shown, grid, zipped) + [dict(c) for c in explicit]
    if len(combos) * run["repeats"] > MAX_CONFIGS:
        raise _fail(
            shown,
            f"{len(combos):,} configs x {run['repeats']} repeats is more than {MAX_CONFIGS:,} runs",
            "split the sweep, or run fewer repeats",
        )
    baseline = data.get("baseline", {})
    if baseline is not False and not isinstance(baseline, dict):
        raise _fail(shown, "baseline must be a table or false", "[baseline] or baseline = false")
    if not combos and baseline is False:
        raise _fail(shown, "no configs: [grid], [zip] and [[configs]] are empty", "add a [grid]")
    return {
        "base": base,
        "server": server,
        "bench": bench,
        "run": run,
        "sim": sim,
        "slurm": slurm,
        "combos": combos,
        "baseline": baseline,
    }


def _plan(s: dict[str, Any], repeats: int) -> list[Unit]:
    """The units of the checked sections: the baseline first, then every config (and its
    repeats); a config SGLang refuses, or runs exactly as an earlier one, is one skipped unit."""
    server = s["server"]
    todo: list[tuple[dict[str, Any], bool]] = []
    if s["baseline"] is not False:
        todo.append((dict(s["baseline"]), True))
    todo += [(c, False) for c in s["combos"]]
    base_vals = _base_values(server)
    taken: dict[str, str] = {}
    seen: dict[str, str] = {}  # the config SGLang runs -> the config_id that runs it
    units: list[Unit] = []
    for varying, is_base in todo:
        if is_base:
            argv0 = _drop_flags(server, set(), prefix=SPEC_PREFIX)
            full = {**_base_values(argv0), **varying}
        else:
            argv0 = server
            full = {**base_vals, **varying}
        resolved, fired = check(full)
        shown_cfg = {k: resolved.get(k) for k in varying}
        notes = [f"{r.id}: {why}" for r, why in fired if r.action == "adjust"]
        skip = next(((r.id, why) for r, why in fired if r.action == "skip"), None)
        # what changed relative to the base command: the varying keys, plus adjusted ones
        changed = {k: resolved[k] for k in resolved if k in varying or full.get(k) != resolved[k]}
        drop = {CONFIG_KEYS.get(k, ("--" + k.replace("_", "-"), ""))[0] for k in changed}
        argv = _drop_flags(argv0, {d for d in drop if d}) + flags_for(changed)
        cid = _config_id(argv, {"baseline": is_base, **varying}, taken)
        ident = json.dumps(
            {k: v for k, v in resolved.items() if v is not None}, sort_keys=True, default=str
        )
        if skip is None and ident in seen:
            skip = ("duplicate", f"SGLang runs it exactly as {seen[ident]} (after its adjustments)")
        if skip is None:
            seen.setdefault(ident, cid)
        inject = _inject_for(s["sim"], resolved)
        units += [
            Unit(
                key=f"{cid}#{rep}",
                config_id=cid,
                repeat=rep,
                config=shown_cfg if not is_base else {"baseline": True, **shown_cfg},
                argv=argv,
                baseline=is_base,
                skip=skip[0] if skip else None,
                skip_reason=skip[1] if skip else None,
                notes=list(notes),
                inject=inject,
            )
            for rep in range(1, (1 if skip else repeats) + 1)
        ]
    return units


def lint_units(sweep: Sweep, recipe_for) -> None:  # noqa: ANN001 - (Unit) -> Recipe
    """Lint every config's launch recipe (without touching a host); findings go on the unit."""
    from forensics.lint import lint

    if getattr(sweep, "_linted", False):
        return
    sweep._linted = True  # type: ignore[attr-defined]
    for u in sweep.units:
        if u.skip:
            continue
        for f in lint(recipe_for(u)):
            if f.severity in ("error", "warning"):
                u.lint.append(f.to_dict())
                u.notes.append(f"lint {f.id} ({f.severity}): {f.explanation}")
