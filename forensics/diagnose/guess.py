"""The log a name fragment names by the naming convention, when nothing was ingested for it."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import polars as pl

from forensics.diagnose.location import _absent, _diagnose_on
from forensics.errors import ForensicsError, RunNotFound

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
