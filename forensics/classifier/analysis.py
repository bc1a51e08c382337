"""Rule evidence for one run, from the parser's frames or the store's rows."""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl

from forensics import signatures as sigs
from forensics.classifier.decide import _decide
from forensics.classifier.hostevidence import host_evidence
from forensics.classifier.phases import CITED_BY, HINT_KINDS, SHUTDOWN_STAGES, WARMUP_AFTER
from forensics.classifier.records import Analysis, ErrorRec
from forensics.classifier.routine import _routine
from forensics.runs import CLASSIFIER_COLUMNS


class RunRows(dict):
    """Tables holding one run's rows only (verdicts.refresh splits them by run): ``analyze``
    reads them without a filter per table (a few ms a run on a log of 50,000 launches)."""


def _view(frames_tables: dict[str, pl.DataFrame], run_index: int) -> dict[str, pl.DataFrame]:
    one_run = isinstance(frames_tables, RunRows)
    out = {}
    for name, df in frames_tables.items():
        if df is None or df.is_empty() or "run_index" not in df.columns:
            out[name] = pl.DataFrame()
            continue
        out[name] = df if one_run else df.filter(pl.col("run_index") == run_index)
    return out


def _stages(ev: pl.DataFrame) -> tuple[list[tuple[str, str, int]], dict[int, str]]:
    """(stage, scope, line) in line order, and each stage line's rank tag."""
    if ev.is_empty():
        return [], {}
    ev = ev.sort("line")
    ranks = ev["rank"].to_list() if "rank" in ev.columns else None
    stages = [(st, sc or "", li) for st, sc, li in ev.select("stage", "scope", "line").iter_rows()]
    tags = {li: ranks[i] or "" for i, (_, _, li) in enumerate(stages)} if ranks else {}
    return stages, tags


def _served_lines(*frames: pl.DataFrame) -> list[tuple[int, str]]:
    """(line, rank) of every decode/prefill row, sorted."""
    out: list[tuple[int, str]] = []
    for df in frames:
        if df is not None and not df.is_empty() and "line" in df.columns:
            ranks = df["rank"].to_list() if "rank" in df.columns else [""] * len(df)
            out += [(int(li), r or "") for li, r in zip(df["line"].to_list(), ranks, strict=True)]
    return sorted(out)


def _error_rec(r: dict[str, Any]) -> ErrorRec:
    """An errors-table row with its signature hits, frames and noise."""
    text = r.get("text") or ""
    msg = r.get("message") or ""
    exc = r.get("exc_type") or ""
    fr = sigs.frames_of(text)
    blob = " ".join(f"{f} {fn}" for f, fn in fr)
    full = text if (exc and exc in text) or not exc else f"{text}\n{exc}: {msg}"
    hits = sigs.match(full, line=r["line"], frames=blob)
    noise = sigs.noise_kind(msg or text)
    if hits and noise not in sigs.WHOLE_LINE:
        noise = None
    return ErrorRec(
        line=r["line"],
        last_line=r.get("last_line") or r["line"],
        kind=r.get("kind") or "",
        component=r.get("component") or "",
        exc_type=exc,
        message=msg,
        text=text,
        frames=fr,
        hits=hits,
        noise=noise,
        ts=r.get("ts"),
        rank=r.get("rank") or "",
    )


def _line_hits(
    lines: list[tuple[int, str, str]], errors: list[ErrorRec], may: list[bool]
) -> list[ErrorRec]:
    """Lines the parser kept as unknown or as a hint (a warning, a usage dump) that still
    carry a signature (e.g. bash errors), as error records. ``may``: per line, whether it may
    (``signatures.may_match``: the others hit none)."""
    kinds = {e.kind for e in errors}
    at = {e.line for e in errors}
    out = []
    for li, kind, text in itertools.compress(lines, may):  # only those that may
        if kind not in HINT_KINDS or CITED_BY.get(kind) in kinds:
            continue  # a usage dump before the parser's own error line: that one cites
        hits = sigs.match(text, line=li)
        if hits and li not in at:
            noise = sigs.noise_kind(text)
            noise = noise if noise in sigs.WHOLE_LINE else None
            out.append(ErrorRec(li, li, kind, "", "", text, text, [], hits, noise))
    return out


def _kept_lines(
    ln: pl.DataFrame,
) -> tuple[list[tuple[int, str, str]], list[bool], list[tuple[int, str]]]:
    """The run's ``lines`` rows as (line, kind, text) in line order, per row whether a
    signature may hit it (``signatures.may_match``), and the (line, text) of those that may
    prove serving (``signatures.may_prove``: the others prove nothing)."""
    if ln.is_empty():
        return [], [], []
    text = pl.col("text")
    rows = ln.sort("line").select(
        "line",
        "kind",
        text.fill_null(""),
        sigs.may_match(text).alias("_may"),
        sigs.may_prove(text).alias("_proof"),
    )
    may_prove = rows.filter("_proof").select("line", "text").rows()
    return rows.select("line", "kind", "text").rows(), rows["_may"].to_list(), may_prove


def _run_end(runs: pl.DataFrame, served_lines: list[tuple[int, str]]) -> tuple[int, Any]:
    last_line, last_ts = 0, None
    if not runs.is_empty():
        last_line = int(runs["last_line"].max() or 0)
        last_ts = runs["ended_at"].max()
    if served_lines:
        last_line = max(last_line, served_lines[-1][0])
    return last_line, last_ts


def _other_tail(ln: pl.DataFrame, stages, served_lines, errors: list[ErrorRec]) -> int:
    """Lines another program printed (a shell's prompt or trace, pytest, another server:
    ``signatures.other_program``) after the server's last own line. The server's own
    unprefixed output (Gloo, tqdm bars, Python warnings) is not counted: it is not recognised
    as another program's."""
    own = [li for _, _, li in stages[-1:]] + [li for li, _ in served_lines[-1:]]
    own += [e.last_line for e in errors if e.ts is not None]
    if not ln.is_empty() and "ts" in ln.columns:
        stamped = ln.filter(pl.col("ts").is_not_null())["line"]
        own += [int(stamped.max())] if len(stamped) else []
    if not own or ln.is_empty():
        return 0
    tail = ln.filter(pl.col("line") > max(own))["text"].to_list()
    return sum(1 for t in tail if sigs.other_program(t or ""))


def _warmup_traffic(stages, served_lines, dec: pl.DataFrame, proof, ready_line) -> bool:
    """Before "ready" the server sends itself a warm-up request (http_server's
    _execute_server_warmup / _wait_and_warmup: max_new_tokens 8, fewer than the decode log
    interval, so it prints prefill lines only): prefill lines after the startup's end with no
    ready line and no decode line are that request, not serving."""
    return (
        not proof
        and ready_line is None
        and bool(served_lines)
        and (dec is None or dec.is_empty())
        and any(st in WARMUP_AFTER and li < served_lines[0][0] for st, _, li in stages)
    )


def analyze(
    tables: dict[str, pl.DataFrame], run_index: int, *, path: str = "", mtime: float | None = None
) -> Analysis:
    """Rule evidence for one run, from the parser's frames (or the store's rows of that run:
    ``RunRows``, no filter)."""
    v = _view(tables, run_index)
    ev, er, ln, dec, runs = v["events"], v["errors"], v["lines"], v["decode"], v["runs"]
    pre = v.get("prefill", pl.DataFrame())
    stages, stage_ranks = _stages(ev)
    served_lines = _served_lines(dec, pre)
    # metrics rows may stand for several (``n``: classify keeps them as counts, iter_analyses)
    counted = [df for df in (dec, pre) if "n" in df.columns]
    ndec = sum(int(df["n"].sum()) for df in counted) if counted else len(served_lines)
    # the server's first own line: a stage or a metrics line (what comes before it in a log
    # that shows the server starting is a harness's, pip's or a shell's)
    owned = [li for _, _, li in stages[:1]] + [li for li, _ in served_lines[:1]]
    lines, may, may_prove = _kept_lines(ln)
    # a client's result printed in the log proves serving (signatures.SERVING_PROOF)
    proof = sigs.serving_proof(may_prove)
    if proof:
        served_lines = sorted(served_lines + [(li, "") for li, _ in proof])
        ndec += len(proof)
    errors = (
        [_error_rec(r) for r in er.sort("line").iter_rows(named=True)] if not er.is_empty() else []
    )
    errors = sorted(errors + _line_hits(lines, errors, may), key=lambda e: e.line)
    last_line, last_ts = _run_end(runs, served_lines)
    # the configuration the explanations use, declared once (forensics.runs)
    row = runs.row(-1, named=True) if not runs.is_empty() else {}
    ready = [li for st, _, li in stages if st == "ready"]
    ready_line = min(ready) if ready else None
    if _warmup_traffic(stages, served_lines, dec, proof, ready_line):
        ndec = 0
    if ready_line is None and ndec:
        # no ready line in the log (a fragment, a lost or cut line), but it served: decode
        # and prefill lines come after ready
        ready_line = served_lines[0][0]
    a = Analysis(
        path=path,
        run_index=run_index,
        stages=stages,
        ready_line=ready_line,
        served=ndec > 0,
        decode_lines=ndec,
        shutdown=any(st in SHUTDOWN_STAGES for st, _, _ in stages),
        errors=errors,
        lines=lines,
        last_line=last_line,
        last_ts=last_ts,
        mtime=mtime,
        config={k: row.get(k) for k in CLASSIFIER_COLUMNS} if row else {},
        settings=sigs.run_settings(row, row.get("server_args"), log_path=path),
        served_lines=served_lines,
        stage_ranks=stage_ranks,
        first_server_line=min(owned) if owned else None,
        proof_lines=proof,
        harness_end=sigs.harness_end(lines),
    )
    if not stages and not served_lines:
        a.host_findings = host_evidence(lines)
    if not any(st == "server_args" for st, _, _ in stages):
        a.foreign = sigs.foreign_log(
            (t for _, _, t in lines),
            sglang=bool(stages or served_lines or any(e.hits for e in errors)),
            blocked=bool(a.host_findings or any(e.exc_type for e in errors)),
            known=sum(k != "unknown" for _, k, _ in lines),  # lines of a kind the parser knows
        )
    a.other_tail = _other_tail(ln, stages, served_lines, errors)
    for e in a.errors:
        e.routine = _routine(a, e)
    _decide(a)
    return a
