"""What a sweep found: one entry per config, the best config with its margin, the failures.

``summary(store, name)`` is the object of ``forensics sweep ... --json`` and
``forensics sweep status NAME --json``; ``render(summary)`` the text for people.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from forensics.errors import RunNotFound
from forensics.sweep.journal import events, last_plan, sweeps, unit_state

if TYPE_CHECKING:
    from forensics.store import Store
    from forensics.sweep.plan import Sweep

# The keys of each entry of `configs` (JSON), in order.
ENTRY_KEYS = (
    "key",
    "config_id",
    "repeat",
    "config",
    "baseline",
    "status",
    "outcome",
    "phase",
    "signature",
    "cause_id",
    "cause",
    "tok_s",
    "accept_len",
    "vs_baseline",
    "run",
    "launch",
    "job_id",
    "cleanup",
    "launch_s",
    "bench_s",
    "stop_s",
    "overhead_s",
)


def summary(store: Store, name: str, *, sweep: Sweep | None = None) -> dict[str, Any]:
    evs = events(store, name)
    if not evs:
        known = ", ".join(s["sweep"] for s in sweeps(store)[:10])
        raise RunNotFound(
            f"no sweep named {name!r} in {store.root}" + (f" (sweeps: {known})" if known else ""),
            hint="forensics sweep status lists them; forensics sweep FILE starts one",
        )
    plan = last_plan(evs) or {}
    state = unit_state(evs)
    units = [u.as_dict() for u in sweep.units] if sweep is not None else plan.get("units", [])
    stopped = [e for e in evs if e["event"] == "stop"]
    base = None
    base_runs = []
    for u in units:
        res = (state.get(u["key"]) or {}).get("result") or {}
        if u.get("baseline") and res.get("outcome") == "ok" and res.get("tok_s"):
            base_runs.append(res)
    if base_runs:  # the mean over the baseline's repeats
        base = {
            "run": base_runs[0].get("run"),
            "tok_s": statistics.fmean(float(r["tok_s"]) for r in base_runs),
            "repeats": len(base_runs),
            "config_id": base_runs[0].get("config_id"),
        }
    if base is None:  # no baseline config (baseline = false, or it failed): the experiment's
        base = _experiment_baseline(
            store, [((state.get(u["key"]) or {}).get("result") or {}).get("run_id") for u in units]
        )
    configs = []
    for u in units:
        s = state.get(u["key"]) or {"status": None}
        res = s.get("result") or {}
        status = {"finished": "finished", "started": "running", "submitted": "submitted"}.get(
            s["status"] or "", "pending"
        )
        entry = {k: res.get(k) for k in ENTRY_KEYS}
        entry.update(
            key=u["key"],
            config_id=u["config_id"],
            repeat=u["repeat"],
            config=u["config"],
            baseline=u.get("baseline", False),
            status=status,
            launch=res.get("launch") or u.get("run_name"),
            job_id=res.get("job_id") or s.get("job"),
            cleanup=(s.get("cleanup") or {}).get("problem") or res.get("cleanup"),
        )
        if base and entry.get("tok_s"):
            entry["vs_baseline"] = entry["tok_s"] / base["tok_s"]
        configs.append(entry)
    return {
        "sweep": name,
        "path": plan.get("path"),
        "executor": plan.get("executor"),
        "state": _state(configs, stopped),
        "baseline": base,
        "best": best(configs, base),
        "failures": [
            {k: c[k] for k in ("config_id", "repeat", "phase", "signature", "cause", "run")}
            for c in configs
            if c["outcome"] == "failed"
        ],
        "counts": {
            o: sum(1 for c in configs if c["outcome"] == o)
            for o in ("ok", "failed", "skipped", "pruned")
        }
        | {"pending": sum(1 for c in configs if c["outcome"] is None)},
        "configs": configs,
    }


def _experiment_baseline(store: Store, run_ids: list[str | None]) -> dict[str, Any] | None:
    """The baseline of the experiment the sweep's runs belong to (forensics.baseline's rule)."""
    from forensics.baseline import for_run

    for rid in run_ids:
        if not rid:
            continue
        b = for_run(store, rid)
        if b is not None:
            return {"run": b.name, "tok_s": b.tok_s, "repeats": 0, "source": b.source}
        return None
    return None


def _state(configs: list[dict[str, Any]], stopped: list[dict[str, Any]]) -> str:
    if all(c["outcome"] is not None for c in configs):
        return "done"
    if stopped and stopped[-1]["data"].get("reason") == "interrupted":
        return "interrupted"
    if any(c["status"] in ("running", "submitted") for c in configs):
        return "running (or killed: --resume picks it up)"
    return "incomplete (--resume runs the rest)"


def best(configs: list[dict[str, Any]], base: dict[str, Any] | None) -> dict[str, Any] | None:
    """The speculative config with the best mean tok/s, its spread over repeats and margin."""
    by: dict[str, list[float]] = {}
    for c in configs:
        if c["outcome"] == "ok" and c.get("tok_s") and not c["baseline"]:
            by.setdefault(c["config_id"], []).append(float(c["tok_s"]))
    if not by:
        return None
    cid, vals = max(by.items(), key=lambda kv: statistics.fmean(kv[1]))
    mean = statistics.fmean(vals)
    out = {
        "config_id": cid,
        "config": next(c["config"] for c in configs if c["config_id"] == cid),
        "tok_s": mean,
        "repeats": len(vals),
        "tok_s_min": min(vals),
        "tok_s_max": max(vals),
        "margin": None,
    }
    if base:
        out["margin"] = mean / base["tok_s"] - 1.0
    return out


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def config_text(cfg: dict[str, Any]) -> str:
    if cfg.get("baseline"):
        rest = {k: v for k, v in cfg.items() if k != "baseline"}
        return "baseline" + (" " + config_text(rest) if rest else "")
    short = {
        "speculative_num_steps": "steps",
        "speculative_eagle_topk": "topk",
        "speculative_num_draft_tokens": "ndt",
        "speculative_draft_model_path": "drafter",
    }
    order = sorted(cfg, key=lambda k: (list(short).index(k) if k in short else len(short), k))
    return " ".join(f"{short.get(k, k)}={cfg[k]}" for k in order) or "base"


def rows(s: dict[str, Any]) -> list[list[str]]:
    """The table: config, tok/s, accept length, vs baseline, outcome (and why)."""
    out = []
    for c in s["configs"]:
        rep = f" #{c['repeat']}" if c["repeat"] > 1 else ""
        outcome = c["outcome"] or c["status"]
        why = c["cause"] if c["outcome"] in ("failed", "skipped", "pruned") else ""
        if c["outcome"] == "failed" and c.get("phase"):
            outcome = f"failed ({c['phase']})"
        vs = f"{c['vs_baseline']:.2f}x" if c.get("vs_baseline") else "—"
        out.append(
            [
                config_text(c["config"]) + rep,
                _fmt(c.get("tok_s")),
                _fmt(c.get("accept_len"), 2),
                vs,
                outcome,
                why or "",
            ]
        )
    return out


def render(s: dict[str, Any]) -> str:
    """Plain text: the table, the best config, the failures with their causes."""
    headers = ["config", "tok/s", "accept", "vs base", "outcome", "cause"]
    table = [headers, *rows(s)]
    widths = [max(len(r[i]) for r in table) for i in range(5)]
    lines = [f"sweep {s['sweep']}: {s['state']} ({_counts(s)})"]
    for r in table:
        lines.append(
            "  ".join(r[i].ljust(widths[i]) for i in range(5)) + ("  " + r[5] if r[5] else "")
        )
    b, base = s["best"], s["baseline"]
    if base:
        where = "the sweep's baseline" if base.get("repeats") else "the experiment's baseline"
        lines.append(f"baseline: {base['tok_s']:.1f} tok/s ({base['run']}, {where})")
    if b:
        spread = (
            f", {b['tok_s_min']:.1f}–{b['tok_s_max']:.1f} over {b['repeats']} repeats"
            if b["repeats"] > 1
            else ""
        )
        margin = f", {b['margin'] * 100:+.1f} % vs baseline" if b["margin"] is not None else ""
        lines.append(f"best: {config_text(b['config'])}: {b['tok_s']:.1f} tok/s{spread}{margin}")
    else:
        lines.append("best: no speculative config finished ok")
    for c in s["configs"]:
        if c.get("cleanup"):
            lines.append(f"cleanup of {c['config_id']}: {c['cleanup']}")
    return "\n".join(lines)


def _counts(s: dict[str, Any]) -> str:
    return ", ".join(f"{n} {k}" for k, n in s["counts"].items() if n)


def match_for(store: Store, name: str) -> tuple[str, float | None]:
    """The runs of sweep NAME for `forensics report/plot --sweep`: (a path fragment that
    matches its logs, its baseline tok/s or None)."""
    s = summary(store, name)
    plan = last_plan(events(store, name)) or {}
    if not plan.get("log_dir"):
        raise RunNotFound(f"sweep {name!r}: its journal names no log folder", hint="rerun it")
    return plan["log_dir"].rstrip("/") + "/", (s["baseline"] or {}).get("tok_s")


def plots(store: Store, name: str, out_dir) -> dict[str, str]:  # noqa: ANN001 - a Path
    """The trend and accept plots of the sweep's runs (vs its baseline) under ``out_dir``."""
    from forensics.plots import make_plot

    match, base = match_for(store, name)
    out = {}
    for kind in ("trend", "accept"):
        _, path = make_plot(
            store,
            kind,
            match,
            out=out_dir / f"{kind}.png",
            baseline=None if base is None else f"{base:.3f}",
            own=True,  # under $FORENSICS_HOME/sweeps/NAME: forensics' own files
        )
        out[kind] = str(path)
    return out
