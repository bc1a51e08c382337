"""One diagnosis report of a stored run or of a log file, and its text for people."""

from __future__ import annotations

from typing import Any

import polars as pl

from forensics import signatures as sigs
from forensics.diagnose.compare import CONFIG_KEYS, _cfg, _fmt_s, compare
from forensics.runs import stage_timeline


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


def _server_args(store, run: dict[str, Any]) -> str | None:
    """The run's stored server_args line (JSON), which runs_table leaves out."""
    runs = store.table("runs")
    if runs.is_empty() or "server_args" not in runs.columns:
        return None
    hit = runs.filter(
        (pl.col("source_id") == run["source_id"]) & (pl.col("run_index") == run["run_index"])
    )
    return hit["server_args"][-1] if not hit.is_empty() else None


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
    sig = sigs.BY_ID.get(v.signature or "")
    keys = sig.explaining(CONFIG_KEYS) if sig is not None else None
    failed = v.phase not in ("ok", None)  # None: no SGLang log, nothing to compare or relaunch
    cmp = (
        compare(store, run, table, keys)
        if failed
        else {"closest": None, "differences": [], "text": ""}
    )
    if sig is not None and not sig.config_matters and cmp.get("closest"):
        cmp["text"] += (
            f" (its configuration differences are left out: {sig.id} comes from the host, not "
            "the configuration)"
        )
    # a verdict stored by an older version is fitted again (fit is idempotent)
    settings = sigs.run_settings(run, _server_args(store, run), log_path=path or None)
    steps = sigs.fit(v.next_steps, settings)
    if cmp.get("differences") and failed:
        d = ", ".join(f"{x['key']} {x['this']} → {x['worked']}" for x in cmp["differences"][:3])
        steps.append(f"the closest run that worked differs in: {d}")
    if failed:
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


def render_text(rep: dict[str, Any]) -> str:
    """A report for people."""
    out = []
    hung = " (hung)" if rep.get("hung") else ""
    out.append(
        f"{rep['name']}: phase {rep['phase'] or '— (not an SGLang log)'}{hung}, "
        f"signature {rep.get('signature') or '—'}"
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
