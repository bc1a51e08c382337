"""`forensics report`: one self-contained HTML page of a tuning session.

The page holds the advisor's verdict, the plots (inline base64 PNG), the runs table and the
diagnosis of every failed run. It needs no network and no JavaScript; CSS is inline. All
log-derived text (names, paths, errors, evidence lines) is untrusted and escaped.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import RunNotFound, UsageError

if TYPE_CHECKING:
    from forensics.store import Store

CSS = """
body { font-family: -apple-system, 'Segoe UI', 'DejaVu Sans', sans-serif; margin: 24px auto;
       max-width: 1320px; color: #222; background: #fff; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 1.6em; }
h3 { font-size: 1.08em; margin-top: 1.2em; }
nav.toc { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 6px 14px; }
nav.toc ol { margin: 4px 0; padding-left: 3em; max-height: 24em; overflow-y: auto; }
section.experiment { border-top: 3px solid #e3e3e3; margin-top: 1.4em; }
.scroll { max-width: 100%; overflow-x: auto; max-height: 40em; overflow-y: auto; }
.sub { color: #666; margin-top: 0; }
.verdict { border-left: 6px solid #2ca02c; background: #f3faf3; padding: 10px 14px; }
.verdict.loses { border-color: #d62728; background: #fdf2f1; }
.verdict.unknown { border-color: #999; background: #f5f5f5; }
table.runs { border-collapse: collapse; font-size: 0.85em; width: 100%; }
table.runs th, table.runs td { border: 1px solid #ddd; padding: 3px 6px; text-align: left;
       vertical-align: top; overflow-wrap: anywhere; max-width: 28em; }
table.runs th { background: #f0f0f0; overflow-wrap: normal; position: sticky; top: 0; }
table.runs td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fdf2f1; }
.diag { border: 1px solid #e5b7b3; border-radius: 4px; padding: 8px 12px; margin: 10px 0; }
.diag h4 { margin: 0 0 6px 0; font-size: 1.05em; color: #b02020; }
pre { background: #f7f7f7; padding: 6px 8px; overflow-x: auto; font-size: 0.85em;
      white-space: pre-wrap; word-break: break-all; }
figure { margin: 12px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.note { color: #777; font-style: italic; }
"""

# The runs table: (header, key or callable, numeric format or None). Rules as data.
TABLE_COLUMNS: list[tuple[str, str, str | None]] = [
    ("#", "order", "{:d}"),
    ("run", "name", None),
    ("config", "label", None),
    ("outcome", "_outcome", None),
    ("server tok/s", "tok_s_server", "{:.1f}"),
    ("bench tok/s", "tok_s_bench", "{:.1f}"),
    ("accept len", "accept_len", "{:.2f}"),
    ("accept rate", "accept_rate_norm", "{:.2f}"),
    ("round ms", "round_ms", "{:.1f}"),
    ("load s", "load_s", "{:.0f}"),
    ("capture s", "capture_s", "{:.0f}"),
    ("ready s", "ready_s", "{:.0f}"),
    ("started", "started_at", None),
    ("error", "error", None),
]


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _cell(value: Any, fmt: str | None) -> tuple[str, bool]:
    if value is None:
        return "—", False
    if fmt:
        try:
            return fmt.format(value), True
        except (ValueError, TypeError):
            return esc(value), False
    if isinstance(value, dt.datetime):
        return value.strftime("%Y-%m-%d %H:%M"), False
    return esc(value), False


# --------------------------------------------------------------------------------------
# Diagnoses (forensics.diagnose when present; else what the runs table knows)
# --------------------------------------------------------------------------------------
def diagnose_row(store: Store, row: dict[str, Any], table=None) -> dict[str, Any]:
    """A failed run's diagnosis: phase, signature, explanation, next_steps, evidence, source.

    ``table``: the runs the closest-run comparison looks among (built when not given)."""
    if row.get("launch_diagnosis"):
        import json

        d = json.loads(row["launch_diagnosis"])
        if isinstance(d, dict):
            return {**d, "source": "launch journal"}
    if not row.get("source_id"):
        return {
            "phase": row.get("died_in"),
            "explanation": f"The launch failed before it wrote a log ({row.get('error') or 'no cause recorded'}).",
            "next_steps": [f"forensics diagnose {row['name']} --relaunch"],
            "evidence": [],
            "source": "launches",
        }
    from forensics.diagnose import run_report

    if table is None:
        from forensics.runs import runs_table

        table = runs_table(store)
    try:
        return {**run_report(store, row, table), "source": "diagnose"}
    except Exception as exc:  # noqa: BLE001 - a report never dies on one diagnosis
        return _fallback_diagnosis(store, row, f"{type(exc).__name__}: {exc}")


def _fallback_diagnosis(store: Store, row: dict[str, Any], err: str | None) -> dict[str, Any]:
    import polars as pl

    evidence: list[str] = []
    where = pl.col("run_index") == row["run_index"]  # this run's lines only, part by part
    lines = store.source_rows("lines", row["source_id"], where=where)
    if not lines.is_empty():
        sub = lines.sort("line")
        for r in sub.tail(6).iter_rows(named=True):
            evidence.append(f"line {r['line']}: {r['text']}")
    phase = row.get("died_in") or "unknown"
    explanation = (
        f"The run died in {phase}: {row['error']}"
        if row.get("error")
        else f"The log ends during {phase}, with no error line."
    )
    out = {
        "phase": phase,
        "signature": row.get("signature"),
        "explanation": explanation,
        "next_steps": [f"forensics diagnose {row['name']}"],
        "evidence": evidence,
        "source": "runs table",
    }
    if err:
        out["note"] = f"forensics.diagnose failed on this run ({err}); showing what the log says"
    return out


def _steps_list(v: Any) -> list[str]:
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list | tuple):
        return [s if isinstance(s, str) else _evidence_text(s) for s in v]
    return [str(v)]


def _evidence_text(e: Any) -> str:
    if isinstance(e, dict):
        loc = e.get("line") or e.get("where") or e.get("source") or ""
        txt = e.get("text") or e.get("detail") or e.get("message") or ""
        if txt:
            return f"{'line ' + str(loc) + ': ' if loc else ''}{txt}"
        return ", ".join(f"{k}={v}" for k, v in e.items())
    return str(e)


# --------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------
def _img(fig_fn, caption: str, alt: str) -> str:
    from forensics.plots import figure_bytes

    try:
        fig = fig_fn()
    except Exception as exc:  # noqa: BLE001 - one missing plot must not lose the report
        reason = exc.message if hasattr(exc, "message") else f"{type(exc).__name__}: {exc}"
        return f'<p class="note">{esc(caption)}: not drawn ({esc(reason)})</p>'
    data = base64.b64encode(figure_bytes(fig, "png")).decode("ascii")
    return (
        f'<figure><img alt="{esc(alt)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


# Past these, a section summarises instead of listing (readable at 5,000 runs).
MAX_TABLE_ROWS = 200  # runs listed per experiment (the configurations table covers all)
MAX_DIAGNOSES = 8  # kinds of failure diagnosed in full per experiment (the rest: a count table)
MAX_PLOTTED_EXPERIMENTS = 6  # experiments drawn with plots (biggest first)
# What the summaries (configurations, failure counts) read of every run: run_points columns.
SUMMARY_COLUMNS = ("label", "tok_s", "accept_len", "failed", "died_in", "signature")


def counts(points) -> dict[str, int]:
    """The report's figures, from the one source (run_points: failed = the classifier's
    verdict): runs (those of ``forensics runs``), failed among them, and launches that never
    wrote a log (the launcher's records, not runs of the table)."""
    import polars as pl

    if points.is_empty():
        return {"runs": 0, "failed": 0, "launches_without_log": 0}
    logless = points["run_id"].str.starts_with("launch:")
    runs = points.filter(~logless)
    return {
        "runs": len(runs),
        "failed": int(runs.filter(pl.col("failed")).height),
        "launches_without_log": int(logless.sum()),
    }


def _count_text(c: dict[str, int]) -> str:
    text = (
        f'<span class="count" data-k="runs">{c["runs"]}</span> runs '
        f'(<span class="count" data-k="failed">{c["failed"]}</span> failed)'
    )
    if c["launches_without_log"]:
        text += (
            f', <span class="count" data-k="launches">{c["launches_without_log"]}</span> '
            "launch(es) that never wrote a log"
        )
    return text


def build_report(
    store: Store,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
    group_by: str | list[str] | None = None,
) -> str:
    """The report's HTML text: a contents list, then one section per experiment."""
    import polars as pl

    from forensics.advise import advise, run_points

    pts = run_points(store, match, group_by=group_by)
    if pts.is_empty():
        raise RunNotFound(
            f"{match}: no run matches" if match else f"no runs in the store {store.root}",
            hint="forensics runs" if match else "forensics ingest /path/to/*.log",
        )
    both = (pts, run_points(store, group_by=group_by) if match else pts)
    advice = advise(store, match, baseline, group_by=group_by, points=both)
    sections = advice["experiments"]
    single = len(sections) == 1
    title = "forensics report" + (f": {match}" if match else "")
    parts = [f"<h1>{esc(title)}</h1>", _summary(store, pts, advice)]
    parts += _contents(pts, sections)
    for i, sec in enumerate(sections, 1):
        mine = pts.filter(pl.col("experiment") == sec["experiment"])
        parts.append(
            _experiment_section(
                store,
                sec,
                mine,
                prefix="" if single else f"e{i}-",
                draw=i <= MAX_PLOTTED_EXPERIMENTS,
                match=match,
                baseline=baseline,
                group_by=group_by,
                single=single,
                points=both,
            )
        )
    parts += _startup_and_decode(store, pts, match, group_by)
    return _page(title, "\n".join(parts))


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def _summary(store: Store, pts, advice: dict[str, Any]) -> str:
    """The line under the title: the counts (one source: ``counts``), the store, the baseline."""
    sections = advice["experiments"]
    single = len(sections) == 1
    base0 = sections[0]["baseline"] if single else None
    text = (
        f'<p class="sub">{_count_text(counts(pts))} in '
        f'<span class="count" data-k="experiments">{len(sections)}</span> '
        f"experiment{'s' if len(sections) != 1 else ''}, store {esc(store.root)}, generated "
        f"{dt.datetime.now().strftime('%Y-%m-%d %H:%M')}."
        + (f" Baseline: {esc(base0['text']) if base0 else 'none'}." if single else "")
        + "</p>"
    )
    if not single:
        text += f'\n<p class="note">{esc(advice["verdict"]["text"])}</p>'
    return text


def _contents(pts, sections: list[dict[str, Any]]) -> list[str]:
    """The contents list: one entry per experiment with its counts and verdict."""
    import polars as pl

    single = len(sections) == 1
    parts = ['<nav class="toc"><b>Contents</b><ol>']
    for i, sec in enumerate(sections, 1):
        pre = "" if single else f"e{i}-"
        c = counts(pts.filter(pl.col("experiment") == sec["experiment"]))
        parts.append(
            f'<li><a href="#{pre}experiment">{esc(sec["experiment"])}</a>: {c["runs"]} runs, '
            f"{c['failed']} failed — {esc(sec['verdict']['rule'].replace('_', ' '))}</li>"
        )
    parts.append('<li><a href="#startup">Startup</a></li></ol></nav>')
    return parts


def _startup_and_decode(store: Store, pts, match: str | None, group_by: Any) -> list[str]:
    """The startup timeline of every run, and the decode plot of the best speculative run."""
    import polars as pl

    from forensics import plots

    parts = ['<h2 id="startup">Startup</h2>']
    parts.append(
        _img(
            lambda: plots.plot_startup(store, match, group_by=group_by, points=pts),
            "startup stages per run; hatched bars never finished",
            "startup timeline",
        )
    )
    decoded = pts.filter(pl.col("spec") & pl.col("tok_s").is_not_null() & (pl.col("decode_n") > 0))
    if not decoded.is_empty():
        best = decoded.sort("tok_s", descending=True, maintain_order=True).row(0, named=True)
        parts.append('<h2 id="decode">Decode of the best speculative run</h2>')
        parts.append(
            _img(
                lambda: plots.plot_decode(store, best["run_id"], row=best),
                f"{best['name']}: gen throughput, accept length and batch size over time",
                "decode over time",
            )
        )
    return parts


def _experiment_section(
    store: Store,
    sec: dict[str, Any],
    pts,
    *,
    prefix: str,
    draw: bool,
    match: str | None,
    baseline: str | float | None,
    group_by: str | list[str] | None,
    single: bool,
    points,
) -> str:
    from forensics import plots

    exp = sec["experiment"]
    parts: list[str] = [f'<section class="experiment" id="{prefix}experiment">']
    parts.append(f"<h2>{'Experiment: ' if single else ''}{esc(exp)}</h2>")
    base = sec["baseline"]
    parts.append(
        f'<p class="sub" data-experiment="{esc(exp)}">{_count_text(counts(pts))}. Baseline: '
        f"{esc(base['text']) if base else 'none'}.</p>"
    )
    if not base and sec.get("baseline_note"):
        parts.append(
            f'<p class="note no-baseline" id="{prefix}no-baseline">{esc(sec["baseline_note"])}</p>'
        )
    rule = sec["verdict"]["rule"]
    cls = {"speculation_wins": ""}.get(rule, "loses")
    if rule in ("no_baseline", "no_data"):
        cls = "unknown"
    parts.append(f'<h3 id="{prefix}verdict">Verdict</h3>')
    parts.append(f'<div class="verdict {cls}"><p><b>{esc(sec["verdict"]["text"])}</b></p>')
    if sec["families"]:
        parts.append("<ul>")
        for f in sec["families"]:
            parts.append(f"<li>{esc(f['text'])} <i>(confidence: {esc(f['confidence'])})</i></li>")
        parts.append("</ul>")
    if sec["next_steps"]:
        parts.append("<p>Next:</p><ul>")
        parts.extend(f"<li>{esc(s)}</li>" for s in sec["next_steps"])
        parts.append("</ul>")
    parts.append("</div>")
    opts = {"baseline": baseline, "experiment": exp, "group_by": group_by, "points": points}
    if draw:
        parts.append(f'<h3 id="{prefix}trend">Throughput trend</h3>')
        parts.append(
            _img(
                lambda: plots.plot_trend(store, match, **opts),
                "tok/s of every run in launch order against the baseline; failed runs at the "
                "bottom",
                "throughput trend",
            )
        )
        parts.append(f'<h3 id="{prefix}accept">Accept length vs throughput</h3>')
        parts.append(
            _img(
                lambda: plots.plot_accept(store, match, **opts),
                "below the dashed baseline, speculation loses; triangles: accept length needed",
                "accept length vs throughput",
            )
        )
    else:
        parts.append(
            '<p class="note">Plots: drawn for the '
            f"{MAX_PLOTTED_EXPERIMENTS} biggest experiments; for this one: forensics plot "
            f"trend --experiment '{esc(exp)}'</p>"
        )
    parts.append(_configs_table(_summary_rows(pts), prefix))
    parts.append(_runs_table(pts, prefix))
    parts.append(_failed_section(store, pts, prefix, points[1]))
    parts.append("</section>")
    return "\n".join(parts)


def _summary_rows(pts) -> list[dict[str, Any]]:
    return pts.select([c for c in SUMMARY_COLUMNS if c in pts.columns]).to_dicts()


def _configs_table(rows: list[dict[str, Any]], prefix: str) -> str:
    """Repeated configurations aggregated: runs, failed, median tok/s and its spread."""
    import statistics

    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(r["label"], []).append(r)
    out = [
        f'<h3 id="{prefix}configs">Configurations</h3>',
        '<div class="scroll"><table class="runs configs"><thead><tr>',
        *(
            f"<th>{h}</th>"
            for h in ("config", "runs", "failed", "median tok/s", "spread", "accept len")
        ),
        "</tr></thead><tbody>",
    ]
    for label, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        toks = [r["tok_s"] for r in rs if r["tok_s"] is not None and not r["failed"]]
        acc = [r["accept_len"] for r in rs if r["accept_len"] is not None and not r["failed"]]
        med = f"{statistics.median(toks):.1f}" if toks else "—"
        spread = f"{min(toks):.1f}–{max(toks):.1f}" if len(toks) > 1 else "—"
        accept = f"{statistics.median(acc):.2f}" if acc else "—"
        nfail = sum(1 for r in rs if r["failed"])
        out.append(
            f'<tr><td>{esc(label)}</td><td class="num">{len(rs)}</td>'
            f'<td class="num">{nfail}</td><td class="num">{med}</td>'
            f'<td class="num">{spread}</td><td class="num">{accept}</td></tr>'
        )
    out.append("</tbody></table></div>")
    return "".join(out)


def _runs_table(pts, prefix: str) -> str:
    shown = pts.tail(MAX_TABLE_ROWS).to_dicts()
    out = [f'<h3 id="{prefix}runs">Runs</h3>']
    if pts.height > len(shown):
        out.append(
            f'<p class="note">The latest {len(shown)} of {pts.height} runs (all of them: '
            "forensics runs --json).</p>"
        )
    out.append('<div class="scroll"><table class="runs"><thead><tr>')
    out.extend(f"<th>{esc(h)}</th>" for h, _, _ in TABLE_COLUMNS)
    out.append("</tr></thead><tbody>")
    for r in shown:
        r = dict(r)
        r["_outcome"] = f"died in {r['died_in']}" if r["failed"] else "ok"
        out.append(f'<tr class="{"failed" if r["failed"] else "ok"}">')
        for _, key, fmt in TABLE_COLUMNS:
            text, numeric = _cell(r.get(key), fmt)
            out.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def _failure_kind(r: dict[str, Any]) -> str:
    return f"{r['died_in']}" + (f" ({r['signature']})" if r.get("signature") else "")


def _failed_section(store: Store, pts, prefix: str, table) -> str:
    import polars as pl

    failed_runs = pts.filter(pl.col("failed"))
    out = [f'<h3 id="{prefix}failed">Failed runs</h3>']
    if failed_runs.is_empty():
        out.append('<p class="note">No run failed.</p>')
        return "".join(out)
    failed = _summary_rows(failed_runs)
    # one diagnosis per kind of failure (its latest run), not the same one eight times
    by: dict[str, int] = {}
    latest: dict[str, int] = {}
    for i, r in enumerate(failed):
        key = _failure_kind(r)
        by[key] = by.get(key, 0) + 1
        latest[key] = i
    full = [failed_runs.row(i, named=True) for i in sorted(latest.values())[-MAX_DIAGNOSES:]]
    if len(failed) > len(full):
        shown = "each kind" if len(full) == len(by) else f"the {len(full)} latest kinds"
        out.append(
            f'<p class="note">{len(failed)} failed runs, {len(by)} kind'
            f"{'s' if len(by) != 1 else ''} of failure; the latest run of {shown} is diagnosed "
            "below (any other: forensics diagnose RUN).</p>"
        )
        out.append('<div class="scroll"><table class="runs"><thead><tr><th>died in</th>')
        out.append("<th>runs</th></tr></thead><tbody>")
        for key, n in sorted(by.items(), key=lambda kv: -kv[1]):
            out.append(f'<tr><td>{esc(key)}</td><td class="num">{n}</td></tr>')
        out.append("</tbody></table></div>")
    for r in full:
        d = diagnose_row(store, r, table)
        out.append('<div class="diag">')
        out.append(
            f"<h4>#{r['order']} {esc(r['name'])}: died in {esc(d.get('phase') or r['died_in'])}"
            + (f" ({esc(d['signature'])})" if d.get("signature") else "")
            + "</h4>"
        )
        out.append(f"<p>{esc(d.get('explanation') or d.get('summary') or '')}</p>")
        if d.get("note"):
            out.append(f'<p class="note">{esc(d["note"])}</p>')
        evidence = _steps_list(d.get("evidence"))
        if evidence:
            out.append("<p>Evidence:</p><pre>" + esc("\n".join(evidence[:12])) + "</pre>")
        steps = _steps_list(d.get("next_steps"))
        if steps:
            out.append("<p>What to try next:</p><ul>")
            out.extend(f"<li>{esc(s)}</li>" for s in steps)
            out.append("</ul>")
        out.append("</div>")
    return "".join(out)


def write_report(
    store: Store,
    out: str | Path,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
    group_by: str | list[str] | None = None,
) -> tuple[Path, int]:
    """Build the page and write it to ``out`` (forensics.output): (the path, its bytes)."""
    from forensics.output import check_out_path, out_path, write_output

    path = out_path(out)  # as typed (a trailing slash is no file)
    if path.is_dir():
        raise UsageError(f"{path}: is a folder", hint=f"--out {path / 'report.html'}")
    check_out_path(path)  # before building: a bad --out fails fast
    text = build_report(store, match, baseline=baseline, group_by=group_by)
    data = text.encode("utf-8")
    write_output(path, data, what="the report")
    return path, len(data)
