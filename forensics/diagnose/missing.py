"""A log that was never written, as evidence: the causes ranked from the launch's own chain.

The launch never got as far as the server writing its first line, so the phase is ``pre-exec``
or ``cleanup``; the possible causes are ranked from the launch's own shell chain
(``forensics.lint`` findings: self-kill by ``pkill -f``, ``&&`` after a ``pkill`` that matched
nothing, cleanup hang, log folder missing, wrong python/model path) and the next step is a
journaled relaunch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl


def _launches(store) -> pl.DataFrame:
    try:
        from forensics.launcher import launches_frame

        return launches_frame(store)
    except ImportError:
        df = store.table("launches")
        return df


def _find_launches(store, match: str) -> list[dict[str, Any]]:
    df = _launches(store)
    if df.is_empty() or "name" not in df.columns:
        return []
    m = match.lower()
    hit = df.filter(
        pl.col("name").str.to_lowercase().str.contains(m, literal=True)
        | pl.col("log_path").fill_null("").str.to_lowercase().str.contains(m, literal=True)
    )
    if hit.is_empty():
        return []
    if "launch_id" in hit.columns:
        hit = hit.group_by("launch_id", maintain_order=True).last()
    if "started_at" in hit.columns:
        hit = hit.sort("started_at", descending=True, nulls_last=True)
    return hit.to_dicts()


def _exists(path: str, host: Any) -> bool | None:
    """Whether ``path`` exists on ``host`` (a config name or a ``Host``); None: not known."""
    if host in (None, "", "local"):
        return Path(path).expanduser().exists()
    try:
        from forensics.hosts import get_host

        h = host if hasattr(host, "stat") else get_host(host)
        return h.exists(path)
    except Exception:  # noqa: BLE001 - unreachable host: unknown, not "missing"
        return None


def _lint_findings(chain: str | None) -> dict[str, Any]:
    """The chain's lint findings by id (first of each); none when there is no chain."""
    found: dict[str, Any] = {}
    if chain:
        try:
            from forensics.lint import lint

            for f in lint(chain):
                found.setdefault(f.id, f)
        except Exception:  # noqa: BLE001 - a chain lint cannot parse still leaves the causes
            pass
    return found


def _check_log_dir(
    log_path: str, host: Any, host_name: Any, remote: bool
) -> tuple[float, str] | None:
    """Ask the host whether the log's folder exists: (weight, evidence); None: not known."""
    parent = str(Path(log_path).parent)
    ex = _exists(parent, host)
    if ex is None:
        return None
    where = f"{host_name}:{parent}: " if remote else f"{parent}: "
    return (0.95, where + "does not exist") if ex is False else (0.02, where + "exists (checked)")


# Causes of a log that was never written, ranked: lint finding id -> (phase, cause text).
# Causes without a lint finding (always possible) follow with a lower weight; ``check`` (the
# host is asked) decides a cause no finding speaks for; ``hung``: the chain stalled.
MISSING_LOG_CAUSES: list[dict[str, Any]] = [
    {
        "id": "cleanup-self-kill",
        "phase": "cleanup",
        "lint": "cleanup-self-kill",
        "weight": 0.9,
        "cause": "self-kill: a `pkill -f` pattern matches the command line of the shell that "
        "runs the chain, so the chain killed itself before `nohup` started the server",
    },
    {
        "id": "and-after-pkill",
        "phase": "cleanup",
        "lint": "and-after-pkill",
        "weight": 0.7,
        "cause": "`&&` after a `pkill` that matched nothing (exit 1) skipped every later step, "
        "including the server launch",
    },
    {
        "id": "log-dir-missing",
        "phase": "pre-exec",
        "lint": "log-dir-missing",
        "weight": 0.8,
        "check": _check_log_dir,  # asks the host when lint has no finding for it
        "cause": "the folder of the log file does not exist, so the shell could not open the "
        "redirection and never ran the server",
    },
    {
        "id": "cleanup-hang",
        "phase": "cleanup",
        "lint": "gpu-collateral",
        "weight": 0.5,
        "hung": True,
        "cause": "a cleanup step (`fuser -k /dev/nvidia*`, a process in GPU teardown) hung, so "
        "the chain never reached the launch",
    },
    {
        "id": "wrong-path",
        "phase": "pre-exec",
        "lint": None,
        "weight": 0.3,
        "cause": "the python binary or the model path is wrong, or the shell never got that far "
        "(the redirection target is created first, so a wrong python usually leaves a log with "
        "an error — no log at all points at the chain before it)",
    },
]


def _ranked_causes(
    found: dict[str, Any], log_path: str, host: Any, host_name: Any, remote: bool
) -> list[dict[str, Any]]:
    """MISSING_LOG_CAUSES scored: a lint finding keeps the row's weight, a row's ``check``
    asks the host when no finding speaks for it, the rest count a quarter."""
    ranked = []
    for c in MISSING_LOG_CAUSES:
        f = found.get(c["lint"]) if c["lint"] else None
        checked = (
            c["check"](log_path, host, host_name, remote) if f is None and c.get("check") else None
        )
        if checked is not None:
            weight, evidence = checked
        else:
            weight = c["weight"] if f is not None else round(c["weight"] * 0.25, 2)
            evidence = (
                f"step {f.step}: {f.text}"
                if f is not None and f.step
                else (f.explanation if f is not None else "not checked: no evidence either way")
            )
        ranked.append(
            {
                "cause": c["id"],
                "phase": c["phase"],
                "score": weight,
                "text": c["cause"],
                "evidence": evidence,
            }
        )
    ranked.sort(key=lambda r: -r["score"])
    return ranked


def missing_log_report(
    name: str,
    log_path: str,
    *,
    chain: str | None = None,
    host: Any = None,
    launch: dict[str, Any] | None = None,
    asked: bool = False,
) -> dict[str, Any]:
    """A log that was never written: phase pre-exec or cleanup, the possible causes ranked.

    ``host``: a config name or a ``Host`` (None / ``local``: this machine). ``asked``: the
    caller checked the file on that host and it answered "no such file" (said in the report).
    """
    host_obj = host if hasattr(host, "stat") else None
    host_name = getattr(host, "name", host)
    remote = host_name not in (None, "", "local")
    shown = f"{host_name}:{log_path}" if remote else log_path
    ranked = _ranked_causes(
        _lint_findings(chain),
        log_path,
        host_obj if host_obj is not None else host_name,
        host_name,
        remote,
    )
    top = next(c for c in MISSING_LOG_CAUSES if c["id"] == ranked[0]["cause"])
    journal_cause = (launch or {}).get("cause")
    where = f" (asked {host_name}: it answered, the file is not there)" if remote else ""
    explanation = (
        f"{shown} was never written{where}: the launch failed before the server process wrote "
        f"its first line, so it is not a load or capture failure. Most likely: {top['cause']}."
    )
    if journal_cause:
        explanation += f" The launch journal recorded: {journal_cause}."
    return {
        "name": name,
        "run_id": None,
        "path": log_path,
        "host": host_name,
        "checked_on": (host_name if remote else "local") if asked else None,
        "phase": top["phase"],
        "hung": top.get("hung", False),
        "signature": "log_never_written",
        "confidence": round(min(0.9, 0.4 + ranked[0]["score"] / 2), 3),
        "evidence": [
            {
                "file": log_path,
                "line": None,
                "text": "No such file or directory"
                + (f" (asked {host_name} over SSH)" if remote and asked else ""),
                "where": f"{shown}: no such file",
            }
        ],
        "causes": ranked,
        "timeline": [],
        "timeline_text": "no log: the server never started",
        "comparison": {"closest": None, "differences": [], "text": ""},
        "explanation": explanation,
        "next_steps": [
            f"relaunch it with evidence collection: forensics diagnose {name} --relaunch"
            + (f" --host {host_name}" if remote and not launch else "")
            + " (each step of the chain is journaled, so the next failure explains itself)",
            "lint the chain: forensics lint (pkill -f patterns that match the launching shell, "
            "&& after pkill)",
        ],
    }


def _chain_of(launch: dict[str, Any] | None) -> str | None:
    if not launch:
        return None
    rec = launch.get("recipe")
    if not rec:
        return None
    try:
        from forensics.recipe import Recipe

        r = Recipe.from_json(rec)
        return r.shell or r.chain_text()
    except Exception:  # noqa: BLE001
        try:
            return json.loads(rec).get("shell")
        except (ValueError, AttributeError):
            return None


def _find_recipes(match: str) -> list[Any]:
    """Configured ``[recipes.NAME]`` whose name contains ``match`` (the chain the user runs)."""
    try:
        from forensics.recipe import load_recipes

        recipes = load_recipes()
    except ImportError:
        return []
    m = match.lower()
    return [r for name, r in sorted(recipes.items()) if m in name.lower()]


def _recipe_report(recipe: Any) -> dict[str, Any] | None:
    """A configured recipe whose log does not exist: the launch died before writing it."""
    log_path = getattr(recipe, "log_path", None)
    if not log_path or _exists(log_path, recipe.host) is not False:
        return None
    chain = getattr(recipe, "shell", None) or recipe.chain_text()
    return missing_log_report(recipe.name, log_path, chain=chain, host=recipe.host)


def _launch_report(store, la: dict[str, Any]) -> dict[str, Any] | None:
    log_path = la.get("log_path")
    if not log_path:
        return None
    host = la.get("host")
    ex = _exists(log_path, host)
    if ex is False:
        return missing_log_report(
            la.get("name") or log_path, log_path, chain=_chain_of(la), host=host, launch=la
        )
    return None
