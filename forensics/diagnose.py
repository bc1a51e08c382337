"""Diagnosis reports: in which phase a run died, why, the evidence, and what to try next.

``diagnose(store, match)`` finds runs by name fragment (newest first) and builds one report
each: the classifier's verdict (phase, hung, signature, evidence as file:line + text), the
startup timeline compared with the closest successful run of a similar configuration, what
differs in the configuration from runs that worked, the explanation and next steps.

A log that does not exist is itself evidence (``missing_log_report``): the launch never got
as far as the server writing its first line, so the phase is ``pre-exec`` or ``cleanup``; the
possible causes are ranked from the launch's own shell chain (``forensics.lint`` findings:
self-kill by ``pkill -f``, ``&&`` after a ``pkill`` that matched nothing, cleanup hang, log
folder missing, wrong python/model path) and the next step is a journaled relaunch.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import polars as pl

from forensics import classifier
from forensics import signatures as sigs
from forensics.errors import ForensicsError, RunNotFound
from forensics.runs import (
    COMPARED_COLUMNS,
    CONFIG_COLUMNS,
    find_runs,
    runs_table,
    stage_timeline,
)

# Config columns compared between a failed run and the runs that worked (declared once, in
# forensics.runs.CONFIG_COLUMNS, with their weights).
CONFIG_KEYS = COMPARED_COLUMNS
SIMILARITY = {c.name: c.similarity for c in CONFIG_COLUMNS if c.similarity is not None}

# Causes of a log that was never written, ranked: lint finding id -> (phase, cause text).
# Causes without a lint finding (always possible) follow with a lower weight.
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
        "cause": "the folder of the log file does not exist, so the shell could not open the "
        "redirection and never ran the server",
    },
    {
        "id": "cleanup-hang",
        "phase": "cleanup",
        "lint": "gpu-collateral",
        "weight": 0.5,
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


def _fmt_s(s: float | None) -> str:
    if s is None:
        return "?"
    s = float(s)
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec} s"
    h, m = divmod(m, 60)
    return f"{h} h {m} min"


def _cfg(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row.get(k) for k in CONFIG_KEYS if k in row}


def _similarity(a: dict[str, Any], b: dict[str, Any]) -> float:
    return sum(w for k, w in SIMILARITY.items() if a.get(k) is not None and a.get(k) == b.get(k))


def _worked(df: pl.DataFrame) -> pl.DataFrame:
    if df.is_empty() or "phase" not in df.columns:
        return df.clear()
    return df.filter(pl.col("phase") == "ok")


def compare(store, run: dict[str, Any], table: pl.DataFrame) -> dict[str, Any]:
    """The closest successful run of a similar configuration, and how the configs differ.

    Only runs of the same experiment (forensics.experiment) are compared; when none of them
    worked, the closest of another experiment is named with a warning (``warning``)."""
    ok = _worked(table).filter(pl.col("run_id") != run["run_id"])
    warning = None
    exp = run.get("experiment")
    if exp is not None and "experiment" in ok.columns and not ok.is_empty():
        same = ok.filter(pl.col("experiment") == exp)
        if same.is_empty():
            warning = (
                f"no run of this experiment ({exp}) worked: the closest run is from another "
                "experiment (model, layout, hardware or benchmark shape differ)"
            )
        else:
            ok = same
    if ok.is_empty():
        return {"closest": None, "differences": [], "text": "no successful run to compare with"}
    mine = _cfg(run)
    rows = ok.to_dicts()
    rows.sort(key=lambda r: (-_similarity(mine, _cfg(r)), str(r.get("started_at"))))
    best = rows[0]
    diffs = [
        {"key": k, "this": mine.get(k), "worked": best.get(k)}
        for k in CONFIG_KEYS
        if mine.get(k) != best.get(k) and not (mine.get(k) is None and best.get(k) is None)
    ]
    # values every successful run shares but this one does not
    common = []
    for k in CONFIG_KEYS:
        vals = {json.dumps(r.get(k), default=str) for r in rows}
        if len(vals) == 1 and mine.get(k) is not None and rows[0].get(k) != mine.get(k):
            common.append({"key": k, "this": mine.get(k), "all_worked": rows[0].get(k)})
    ready = best.get("ready_s")
    what = ", ".join(f"{d['key']}={d['worked']}" for d in diffs[:3]) or "the same config"
    text = f"{best['name']} ({what})"
    if ready is not None:
        text += f" reached ready in {_fmt_s(ready)}"
    else:
        text += " worked"
    if warning:
        text += f" (warning: {warning})"
    tl = stage_timeline(store, best["source_id"], int(best["run_index"]))
    return {
        "closest": {
            "name": best["name"],
            "run_id": best["run_id"],
            "ready_s": ready,
            "timeline": tl,
        },
        "differences": diffs,
        "differs_from_all_that_worked": common,
        "text": text,
        "warning": warning,
    }


def _timeline_text(tl: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    if not tl:
        return tl, "no startup stages with timestamps"
    done = [t for t in tl if t["ended"]]
    open_ = [t for t in tl if not t["ended"]]
    where = open_[0]["segment"] if open_ else (tl[-1]["segment"])
    text = f"{len(done)} stage(s) completed; " + (
        f"stopped in `{where}` after {_fmt_s(open_[0]['duration_s'])}"
        if open_
        else f"last: `{where}`"
    )
    return tl, text


def run_report(store, run: dict[str, Any], table: pl.DataFrame) -> dict[str, Any]:
    from forensics.verdicts import explained

    v = explained(store, run)  # the verdict stored at ingest (forensics.verdicts)
    path = run.get("path") or ""
    first = int(run.get("first_line") or 1)
    evidence = [
        {"file": path, "line": e["line"], "text": e["text"], "where": f"{path}:{e['line']}"}
        for e in v.evidence
    ]
    tl, tl_text = _timeline_text(stage_timeline(store, run["source_id"], int(run["run_index"])))
    cmp = (
        compare(store, run, table)
        if v.phase != "ok"
        else {"closest": None, "differences": [], "text": ""}
    )
    sig = sigs.BY_ID.get(v.signature or "")
    if sig is not None and not sig.config_matters and cmp.get("differences"):
        cmp = {
            **cmp,
            "differences": [],
            "text": f"{cmp.get('text', '')} (its configuration differences are left out: "
            f"{sig.id} comes from the host, not the configuration)",
        }
    steps = list(v.next_steps)
    if cmp.get("differences") and v.phase != "ok":
        d = ", ".join(f"{x['key']} {x['this']} → {x['worked']}" for x in cmp["differences"][:3])
        steps.append(f"the closest run that worked differs in: {d}")
    if v.phase != "ok":
        steps.append(
            f"to collect evidence on a fresh attempt: forensics diagnose {run['name']} --relaunch"
        )
    return {
        "name": run["name"],
        "run_id": run["run_id"],
        "path": path,
        "host": run.get("host"),
        "first_line": first,
        "started_at": run.get("started_at"),
        "config": _cfg(run),
        "phase": v.phase,
        "hung": v.hung,
        "signature": v.signature,
        "confidence": round(v.confidence, 3),
        "evidence": evidence,
        "timeline": tl,
        "timeline_text": tl_text,
        "comparison": cmp,
        "explanation": v.explanation,
        "next_steps": steps,
    }


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
    found: dict[str, Any] = {}
    if chain:
        try:
            from forensics.lint import lint

            for f in lint(chain):
                found.setdefault(f.id, f)
        except Exception:  # noqa: BLE001 - a chain lint cannot parse still leaves the causes
            pass
    ranked = []
    for c in MISSING_LOG_CAUSES:
        f = found.get(c["lint"]) if c["lint"] else None
        weight = c["weight"] if f is not None else c["weight"] * 0.25
        if c["id"] == "log-dir-missing" and f is None:
            parent = str(Path(log_path).parent)
            ex = _exists(parent, host_obj if host_obj is not None else host_name)
            if ex is not None:
                weight = 0.95 if ex is False else 0.02
                ranked.append(
                    {
                        "cause": c["id"],
                        "phase": c["phase"],
                        "score": weight,
                        "text": c["cause"],
                        "evidence": (f"{host_name}:{parent}: " if remote else f"{parent}: ")
                        + ("does not exist" if ex is False else "exists (checked)"),
                    }
                )
                continue
        ranked.append(
            {
                "cause": c["id"],
                "phase": c["phase"],
                "score": round(weight, 2),
                "text": c["cause"],
                "evidence": (
                    f"step {f.step}: {f.text}"
                    if f is not None and f.step
                    else (f.explanation if f is not None else "not checked: no evidence either way")
                ),
            }
        )
    ranked.sort(key=lambda r: -r["score"])
    top = ranked[0]
    journal_cause = (launch or {}).get("cause")
    where = f" (asked {host_name}: it answered, the file is not there)" if remote else ""
    explanation = (
        f"{shown} was never written{where}: the launch failed before the server process wrote "
        f"its first line, so it is not a load or capture failure. Most likely: {top['text']}."
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
        "hung": top["cause"] == "cleanup-hang",
        "signature": "log_never_written",
        "confidence": round(min(0.9, 0.4 + top["score"] / 2), 3),
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


def diagnose(
    store, match: str, *, log: str | None = None, host: str | None = None
) -> list[dict[str, Any]]:
    """One report per matching run (newest first); missing logs are diagnosed as such.

    ``log``: a local path, ``NAME:/path`` or ``ssh://user@host[:port]/path``; ``host`` a config
    name for a plain path (it and a prefix that name different hosts: UsageError).
    """
    if log is not None:
        h, path = log_location(log, host)
        if _absent(h, path):
            launch = next(iter(_find_launches(store, match)), None)
            chain = _chain_of(launch)
            return [missing_log_report(match, path, chain=chain, host=h, launch=launch, asked=True)]
        return _diagnose_on(h, path, match)
    launches = _find_launches(store, match)
    table = runs_table(store)
    try:
        hits = find_runs(store, match, table=table)
    except RunNotFound as exc:
        reports = [_launch_report(store, la) for la in launches]
        reports += [_recipe_report(r) for r in _find_recipes(match)] if not launches else []
        reports = [r for r in reports if r is not None]
        if reports:
            return reports
        names = []
        for la in _launches(store).to_dicts() if not _launches(store).is_empty() else []:
            names.append(la.get("name"))
        message = exc.message
        if names:
            message += f"; launches: {', '.join(sorted(set(n for n in names if n))[:12])}"
        guesses = guess_logs(table, match)
        if len(guesses) == 1:
            return _guessed_report(guesses[0], match, message)
        if guesses:
            shown = ", ".join(g["where"] for g in guesses[:12])
            raise RunNotFound(
                f"{message}; by the log-naming convention {match!r} could be any of: {shown}",
                hint=f"name one: forensics diagnose {match} --log "
                + shlex.quote(guesses[0]["where"]),
            ) from None
        if message != exc.message:
            raise RunNotFound(message, hint=exc.hint) from None
        raise
    reports = [run_report(store, r, table) for r in hits.to_dicts()]
    # recorded launches of that name whose log never appeared
    seen = {r["path"] for r in reports}
    for la in launches:
        if la.get("log_path") and la["log_path"] not in seen:
            rep = _launch_report(store, la)
            if rep is not None:
                reports.append(rep)
    return reports


def _same_host(name: str, text: str) -> bool:
    """Whether the remote location ``text`` (``NAME:/p``, ``ssh://addr/p``) is host ``name``."""
    from forensics.hosts import load_config, parse_address

    addr = text[len("ssh://") :].split("/", 1)[0] if text.startswith("ssh://") else None
    if addr is None:
        addr = text.split(":", 1)[0]
    if addr == name:
        return True
    hosts = load_config()["hosts"]

    def key(a: str) -> tuple[str, str, int] | None:
        if a in hosts:
            c = hosts[a]
            return (c.user, c.host, c.port)
        if a in ("local", "localhost-local"):
            return None
        try:
            return parse_address(a)
        except Exception:  # noqa: BLE001 - not an address: only its name can match
            return None

    mine, theirs = key(addr), key(name)
    return mine is not None and mine == theirs


def log_location(log: str, host: str | None = None) -> tuple[Any, str]:
    """``--log`` (and ``--host``) -> (Host, path), through forensics.hosts.

    An unknown host name is a ConfigError (exit 2) naming the configured hosts, an
    unreachable host the host's error (exit 5); ``--host`` and a prefix naming another host
    is a UsageError (exit 2).
    """
    from forensics.errors import UsageError
    from forensics.hosts import get_host, is_remote, resolve_location

    if not is_remote(log):
        if host in (None, ""):
            return get_host(None), os.path.expanduser(log)  # as given: Path drops a trailing /
        return get_host(host), log
    if host not in (None, "") and not _same_host(host, log):
        raise UsageError(
            f"--host {host} and --log {log} name different hosts",
            hint="leave out --host (the prefix of --log names the host), or drop the prefix",
        )
    return resolve_location(log)


def _absent(h: Any, path: str) -> bool:
    """True when the host answered and the file is not there; a directory is exit 2."""
    from forensics.errors import FileMissing, UsageError

    where = path if h.name == "local" else f"{h.name}:{path}"
    try:
        st = h.stat(path)
    except FileMissing:
        return True  # permission denied and the rest propagate: it may well exist
    if st.is_dir:
        raise UsageError(
            f"{where}: is a directory, not a log file", hint=f"--log {where.rstrip('/')}/NAME.log"
        )
    return False


# The most of a remote log that classify/diagnose read (its tail: where launches fail).
REMOTE_LOG_MAX = 32 << 20


def classify_remote(host: Any, path: str, model: Any = None, *, warn: Any = None) -> list[Any]:
    """Classify a log on a remote ``Host`` (its last 32 MiB over SFTP; a compressed one whole,
    as a stream) as ``classifier.classify_file`` does a local one (same log source, same parse,
    same file age for ``hung``).

    The verdicts' path is ``HOST:PATH``. A file that is not there is InputNotFound naming the
    host; an unreachable host is the host's own error (exit 5).
    """
    from forensics.errors import NotRegularFile, UsageError
    from forensics.logsource import open_log

    where = f"{host.name}:{path}"
    try:
        src = open_log(host, path, where=where)
    except NotRegularFile as exc:
        if not host.is_dir(path):
            raise
        raise UsageError(
            f"{where}: is a directory, not a log file",
            hint=f"forensics classify {shlex.quote(where + '/*.log')}",
        ) from exc
    return classifier.classify_source(src, model, tail=REMOTE_LOG_MAX, warn=warn)


def classify_location(text: str, model: Any = None, *, warn: Any = None) -> list[Any]:
    """``forensics classify`` of one LOG: a local path, ``NAME:/path`` or
    ``ssh://user@host[:port]/path`` (forensics.hosts: unknown NAME exit 2, unreachable 5).
    ``warn(message)`` hears of a damaged compressed log (what decoded is classified)."""
    from forensics.errors import FileMissing, InputNotFound
    from forensics.hosts import is_remote, resolve_location

    if not is_remote(text):
        return classifier.classify_file(os.path.expanduser(text), model, warn=warn)
    host, path = resolve_location(text)
    try:
        return classify_remote(host, path, model, warn=warn)
    except FileMissing:
        raise InputNotFound(
            f"{host.name}:{path}: no such file (asked {host.name})",
            hint=f"forensics diagnose {Path(path).stem} --log {shlex.quote(text)} to diagnose "
            "a log that was never written",
        ) from None


def _diagnose_on(h: Any, path: str, name: str) -> list[dict[str, Any]]:
    """Classify an existing log on this machine or on a remote host. A damaged compressed
    log is diagnosed from what decoded; its reports carry ``warnings`` saying so."""
    warnings: list[str] = []
    model = classifier.load_model(None)
    if h.name == "local":
        reports = _file_reports(
            classifier.classify_file(path, model, warn=warnings.append), path, name
        )
    else:
        where = f"{h.name}:{path}"
        verdicts = classify_remote(h, path, model, warn=warnings.append)
        reports = _file_reports(verdicts, where, name, host=h.name)
    for rep in reports if warnings else []:
        rep["warnings"] = warnings
    return reports


# --------------------------------------------------------------------------------------
# A log named by the convention that was never written (`diagnose 2step`, nothing ingested)
# --------------------------------------------------------------------------------------
_SEP = re.compile(r"([_\-.]+)")
_LOG_SUFFIXES = (".log", ".txt", ".out", ".err")


def _token_fields(token: str) -> dict[str, Any]:
    """The field one name token sets (parsers/names.py rules): ``2step`` -> num_steps=2."""
    from forensics_parsers.names import config_from_name

    conf = config_from_name(token)
    conf.pop("no_spec", None)
    return conf


def _split_name(file_name: str) -> tuple[str, str]:
    low = file_name.lower()
    for suffix in _LOG_SUFFIXES:
        if low.endswith(suffix):
            return file_name[: -len(suffix)], file_name[-len(suffix) :]
    return file_name, ""


def _conventional_name(stem: str, frag_tokens: list[tuple[str, dict[str, Any]]]) -> str | None:
    """``stem`` with each of its tokens that names a field of the fragment replaced by the
    fragment's value (``..._3step`` + ``2step`` -> ``..._2step``; the stem's own spelling of the
    token is kept: ``step3`` -> ``step2``). None when the stem has no token for a field."""
    parts = _SEP.split(stem)
    for ftok, fconf in frag_tokens:
        placed = False
        for i in range(0, len(parts), 2):
            conf = _token_fields(parts[i])
            if not conf or set(conf) != set(fconf):
                continue
            placed = True
            key = next(iter(fconf))
            old, new = conf[key], fconf[key]
            if type(old) is int and type(new) is int:
                parts[i] = re.sub(r"\d+", str(new), parts[i], count=1)
            else:
                parts[i] = ftok
        if not placed:
            return None
    return "".join(parts)


def guess_logs(table: pl.DataFrame, match: str) -> list[dict[str, Any]]:
    """Log paths the naming convention (parsers/names.py) gives ``match`` in the folders of
    the ingested runs that no ingested run has: ``2step`` beside ``sglang_eagle3_cg_3step.log``
    is ``sglang_eagle3_cg_2step.log``. One dict per (host, path), in the table's order."""
    if table.is_empty() or "path" not in table.columns:
        return []
    frag, _ = _split_name(Path(match.strip()).name)
    tokens = [t for t in _SEP.split(frag)[::2] if t]
    frag_tokens = [(t, c) for t in tokens if (c := _token_fields(t))]
    if not frag_tokens:
        return []
    plain = [t.lower() for t in tokens if not _token_fields(t)]
    want: dict[str, Any] = {}
    for _, c in frag_tokens:
        want.update(c)
    hosts = table["host"].to_list() if "host" in table.columns else [None] * table.height
    ingested = {(h or "local", p) for h, p in zip(hosts, table["path"].to_list(), strict=True)}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for h, path, name in zip(hosts, table["path"].to_list(), table["name"].to_list(), strict=True):
        if not path:
            continue
        host = h or "local"
        folder, file_name = os.path.split(path)
        stem, suffix = _split_name(file_name)
        new = _conventional_name(stem, frag_tokens)
        if not new or new == stem:
            continue
        conf = {k: v for k, v in _token_fields(new).items() if k in want}
        if conf != want or not all(t in new.lower() for t in plain):
            continue
        guess = os.path.join(folder, new + (suffix or ".log"))
        if (host, guess) in ingested:
            continue
        g = out.setdefault(
            (host, guess),
            {
                "name": new,
                "host": host,
                "path": guess,
                "where": guess if host == "local" else f"{host}:{guess}",
                "from": [],
            },
        )
        if name not in g["from"]:
            g["from"].append(name)
    return list(out.values())


def _guessed_report(g: dict[str, Any], match: str, message: str) -> list[dict[str, Any]]:
    """The one conventional log ``match`` names, when it is there but not ingested: its
    diagnosis. When it is not there, nothing says that log was ever expected (no launch, no
    recipe, no --log): RunNotFound (exit 3) with ``message`` (the names that exist) and the
    guess as the hint, never an invented failure."""
    from forensics.hosts import get_host

    remote = g["host"] != "local"
    basis = (
        f"guessed by the log-naming convention from {', '.join(g['from'][:4])} "
        f"in {os.path.dirname(g['path'])}" + (f" on {g['host']}" if remote else "")
    )
    try:
        h = get_host(g["host"] if remote else None)
        absent = _absent(h, g["path"])
    except ForensicsError as exc:  # unreachable (5), unknown (2), permission denied (3)
        exc.message = f"{exc.message} (checking {g['where']}, {basis})"
        exc.args = (exc.message,)
        raise
    if not absent:
        reps = _diagnose_on(h, g["path"], g["name"])
        for r in reps:
            r["guessed_from"] = g["from"]
            r["next_steps"] = [
                f"{g['where']} is not ingested yet ({basis}): forensics ingest "
                + shlex.quote(g["where"]),
                *r["next_steps"],
            ]
        return reps
    raise RunNotFound(
        f"{message}; no launch or recipe of that name is recorded, and {g['where']} ({basis}) "
        "does not exist",
        hint=f"if the launch should have written it: forensics diagnose {g['name']} --log "
        + shlex.quote(g["where"]),
    )


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


def _file_reports(
    verdicts: list[Any], path: str, name: str, *, host: str | None = None
) -> list[dict[str, Any]]:
    out = []
    for v in verdicts:
        out.append(
            {
                "name": name,
                "run_id": None,
                "path": path,
                "host": host,
                "phase": v.phase,
                "hung": v.hung,
                "signature": v.signature,
                "confidence": round(v.confidence, 3),
                "evidence": [
                    {
                        "file": path,
                        "line": e["line"],
                        "text": e["text"],
                        "where": f"{path}:{e['line']}",
                    }
                    for e in v.evidence
                ],
                "timeline": [],
                "timeline_text": "",
                "comparison": {"closest": None, "differences": [], "text": ""},
                "explanation": v.explanation,
                "next_steps": v.next_steps,
            }
        )
    return out


def relaunch(
    store,
    name: str,
    *,
    host: str | None = None,
    shell: str | None = None,
    safe_patterns: bool = False,
    sim: dict[str, Any] | None = None,
    deadline: float | None = None,
    step_deadline: float | None = None,
) -> dict[str, Any]:
    """Replay the launch under the journal (forensics.launcher) and return its diagnosis.

    ``shell``: the chain as typed (else the recorded launch, else ``[recipes.NAME]``).
    """
    try:
        from forensics import launcher
    except ImportError as exc:
        from forensics.errors import UsageError

        raise UsageError(
            f"{name}: --relaunch needs forensics.launcher, which is not available ({exc})",
            hint=f"forensics diagnose {name} without --relaunch",
        ) from exc
    recipe = None
    if shell is not None:
        from forensics.recipe import Recipe

        recipe = Recipe.from_shell(shell, name=None, host=host)
    return launcher.relaunch(
        store,
        name,
        host=host,
        recipe=recipe,
        safe_patterns=safe_patterns,
        sim=sim,
        deadline=deadline,
        step_deadline=step_deadline,
    )


def render_text(rep: dict[str, Any]) -> str:
    """A report for people."""
    out = []
    hung = " (hung)" if rep.get("hung") else ""
    out.append(
        f"{rep['name']}: phase {rep['phase']}{hung}, signature {rep.get('signature') or '—'}"
        f" (confidence {rep.get('confidence', 0):.2f})"
    )
    if rep.get("path"):
        host = rep.get("host")
        shown = rep["path"]
        if host not in (None, "", "local") and not shown.startswith(f"{host}:"):
            shown = f"{host}:{shown}"
        out.append(f"  log: {shown}")
    for w in rep.get("warnings") or []:
        out.append(f"  warning: {w}")
    out.append(f"  why: {rep['explanation']}")
    if rep.get("evidence"):
        out.append("  evidence:")
        for e in rep["evidence"]:
            out.append(f"    {e['where']}: {e['text']}")
    if rep.get("causes"):
        out.append("  possible causes, most likely first:")
        for i, c in enumerate(rep["causes"], 1):
            out.append(f"    {i}. [{c['phase']}] {c['text']} ({c['evidence']})")
    if rep.get("timeline"):
        out.append(f"  timeline: {rep['timeline_text']}")
        for t in rep["timeline"]:
            mark = "done" if t["ended"] else "STOPPED"
            out.append(
                f"    {t['segment']:<22} +{_fmt_s(t['start_s']):>10}  "
                f"{_fmt_s(t['duration_s']):>10}  {mark}"
            )
    cmp = rep.get("comparison") or {}
    if cmp.get("closest"):
        out.append(f"  closest run that worked: {cmp['text']}")
        for d in cmp.get("differences", [])[:6]:
            out.append(f"    {d['key']}: {d['this']} here, {d['worked']} there")
    if rep.get("next_steps"):
        out.append("  next steps:")
        for s in rep["next_steps"]:
            out.append(f"    - {s}")
    return "\n".join(out)


def signature_counts(store) -> pl.DataFrame:
    """Every signature seen in the store with how many runs hit it, newest example first.

    Catalog signatures carry their phase and explanation; unknown errors are grouped by their
    masked template (``unknown:<hash>``), so a failure that keeps coming back shows up as one
    new signature with its count and an example of its text.
    """
    from forensics import signatures as sigs

    df = runs_table(store)
    if df.is_empty() or "signature" not in df.columns:
        return pl.DataFrame(
            schema={
                "signature": pl.String,
                "runs": pl.UInt32,
                "phase": pl.String,
                "names": pl.String,
                "explanation": pl.String,
            }
        )
    hit = df.filter(pl.col("signature").is_not_null()).sort("started_at", descending=True)
    grouped = hit.group_by("signature", maintain_order=True).agg(
        pl.len().alias("runs"),
        pl.col("phase").first().alias("phase"),
        pl.col("name").head(3).str.join(", ").alias("names"),
        pl.col("error").drop_nulls().first().alias("example"),
    )

    def explain(sid: str, example: str | None) -> str:
        if sid in sigs.BY_ID:
            return sigs.BY_ID[sid].explanation.replace("{cause}", "cause inside: see diagnose")
        if sid.startswith("stalled_"):
            stage = sid.removeprefix("stalled_")
            return f"the log stops during {stage} without an error: hung, or killed without a trace"
        if sid.startswith("unknown:"):
            return "not in the catalog; example: " + (example or "—")[:160]
        return example or ""

    return (
        grouped.with_columns(
            pl.struct("signature", "example")
            .map_elements(lambda r: explain(r["signature"], r["example"]), return_dtype=pl.String)
            .alias("explanation")
        )
        .select("signature", "runs", "phase", "names", "explanation")
        .sort("runs", descending=True)
    )
