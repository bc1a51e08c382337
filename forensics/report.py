"""`forensics report`: one self-contained HTML page of a tuning session.

The page holds the advisor's verdict, the plots (inline base64 PNG), the runs table and the
diagnosis of every failed run. It needs no network and no JavaScript; CSS is inline. All
log-derived text (names, paths, errors, evidence lines) is untrusted and escaped.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import inspect
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
.sub { color: #666; margin-top: 0; }
.verdict { border-left: 6px solid #2ca02c; background: #f3faf3; padding: 10px 14px; }
.verdict.loses { border-color: #d62728; background: #fdf2f1; }
.verdict.unknown { border-color: #999; background: #f5f5f5; }
table.runs { border-collapse: collapse; font-size: 0.85em; width: 100%; }
table.runs th, table.runs td { border: 1px solid #ddd; padding: 3px 6px; text-align: left;
       vertical-align: top; }
table.runs th { background: #f0f0f0; }
table.runs td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #fdf2f1; }
.diag { border: 1px solid #e5b7b3; border-radius: 4px; padding: 8px 12px; margin: 10px 0; }
.diag h3 { margin: 0 0 6px 0; font-size: 1.05em; color: #b02020; }
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
def _as_dict(obj: Any) -> dict[str, Any] | None:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj
    for meth in ("as_dict", "to_dict"):
        fn = getattr(obj, meth, None)
        if callable(fn):
            out = fn()
            if isinstance(out, dict):
                return out
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    return None


def diagnose_row(store: Store, row: dict[str, Any]) -> dict[str, Any]:
    """A failed run's diagnosis: phase, signature, explanation, next_steps, evidence, source."""
    err = None
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
    try:
        import forensics.diagnose as dmod  # noqa: PLC0415 - optional, built by another module
    except ImportError:
        dmod = None
    if dmod is not None:
        for fname, arg in (("diagnose_run", row), ("diagnose", row["run_id"])):
            fn = getattr(dmod, fname, None)
            if not callable(fn):
                continue
            try:
                nparams = len(inspect.signature(fn).parameters)
                res = fn(store, arg) if nparams >= 2 else fn(arg)
            except Exception as exc:  # noqa: BLE001 - a report never dies on one diagnosis
                err = f"{type(exc).__name__}: {exc}"
                continue
            if isinstance(res, list) and res:
                res = res[0]
            d = _as_dict(res)
            if d:
                d = dict(d)
                d["source"] = "diagnose"
                return d
    return _fallback_diagnosis(store, row, err)


def _fallback_diagnosis(store: Store, row: dict[str, Any], err: str | None) -> dict[str, Any]:
    import polars as pl

    evidence: list[str] = []
    lines = store.table("lines")
    if not lines.is_empty():
        sub = lines.filter(
            (pl.col("source_id") == row["source_id"]) & (pl.col("run_index") == row["run_index"])
        ).sort("line")
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


def build_report(
    store: Store, match: str | None = None, *, baseline: str | float | None = None
) -> str:
    """The report's HTML text."""
    from forensics import plots
    from forensics.advise import advise, run_points

    pts = run_points(store, match)
    if pts.is_empty():
        raise RunNotFound(
            f"{match}: no run matches" if match else f"no runs in the store {store.root}",
            hint="forensics runs" if match else "forensics ingest /path/to/*.log",
        )
    advice = advise(store, match, baseline)
    rows = pts.to_dicts()
    failed = [r for r in rows if r["failed"]]
    crashed = [r for r in rows if r["crashed"]]
    parts: list[str] = []
    title = "forensics report" + (f": {match}" if match else "")
    parts.append(f"<h1>{esc(title)}</h1>")
    base = advice["baseline"]
    parts.append(
        f'<p class="sub">{len(rows)} runs ({len(failed)} failed), store {esc(store.root)}, '
        f"generated {dt.datetime.now().strftime('%Y-%m-%d %H:%M')}. Baseline: "
        f"{esc(base['text']) if base else 'none'}.</p>"
        + (
            f'<p class="note" id="no-baseline">{esc(advice["baseline_note"])}</p>'
            if not base and advice.get("baseline_note")
            else ""
        )
    )

    # Verdict
    rule = advice["verdict"]["rule"]
    cls = {"speculation_wins": ""}.get(rule, "loses")
    if rule in ("no_baseline", "no_data"):
        cls = "unknown"
    parts.append('<h2 id="verdict">Verdict</h2>')
    parts.append(f'<div class="verdict {cls}"><p><b>{esc(advice["verdict"]["text"])}</b></p>')
    if advice["families"]:
        parts.append("<ul>")
        for f in advice["families"]:
            parts.append(f"<li>{esc(f['text'])} <i>(confidence: {esc(f['confidence'])})</i></li>")
        parts.append("</ul>")
    if advice["next_steps"]:
        parts.append("<p>Next:</p><ul>")
        parts.extend(f"<li>{esc(s)}</li>" for s in advice["next_steps"])
        parts.append("</ul>")
    parts.append("</div>")

    # Plots
    parts.append('<h2 id="trend">Throughput trend</h2>')
    parts.append(
        _img(
            lambda: plots.plot_trend(store, match, baseline=baseline),
            "tok/s of every run in launch order against the baseline; failed runs at the bottom",
            "throughput trend",
        )
    )
    parts.append('<h2 id="accept">Accept length vs throughput</h2>')
    parts.append(
        _img(
            lambda: plots.plot_accept(store, match, baseline=baseline),
            "below the dashed baseline, speculation loses; triangles: accept length needed",
            "accept length vs throughput",
        )
    )

    # Runs table
    parts.append('<h2 id="runs">Runs</h2>')
    parts.append('<table class="runs"><thead><tr>')
    parts.extend(f"<th>{esc(h)}</th>" for h, _, _ in TABLE_COLUMNS)
    parts.append("</tr></thead><tbody>")
    for r in rows:
        r = dict(r)
        r["_outcome"] = (
            f"died in {r['died_in']}" if r["failed"] else (r.get("phase_reached") or "—")
        )
        parts.append(f'<tr class="{"failed" if r["failed"] else "ok"}">')
        for _, key, fmt in TABLE_COLUMNS:
            text, numeric = _cell(r.get(key), fmt)
            parts.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        parts.append("</tr>")
    parts.append("</tbody></table>")

    # Diagnoses
    parts.append('<h2 id="failed">Failed runs</h2>')
    if not crashed:
        parts.append('<p class="note">No run failed.</p>')
    for r in crashed:
        d = diagnose_row(store, r)
        parts.append('<div class="diag">')
        parts.append(
            f"<h3>#{r['order']} {esc(r['name'])}: died in {esc(d.get('phase') or r['died_in'])}"
            + (f" ({esc(d['signature'])})" if d.get("signature") else "")
            + "</h3>"
        )
        parts.append(f"<p>{esc(d.get('explanation') or d.get('summary') or '')}</p>")
        if d.get("note"):
            parts.append(f'<p class="note">{esc(d["note"])}</p>')
        evidence = _steps_list(d.get("evidence"))
        if evidence:
            parts.append("<p>Evidence:</p><pre>" + esc("\n".join(evidence[:12])) + "</pre>")
        steps = _steps_list(d.get("next_steps"))
        if steps:
            parts.append("<p>What to try next:</p><ul>")
            parts.extend(f"<li>{esc(s)}</li>" for s in steps)
            parts.append("</ul>")
        parts.append("</div>")

    parts.append('<h2 id="startup">Startup</h2>')
    parts.append(
        _img(
            lambda: plots.plot_startup(store, match),
            "startup stages per run; hatched bars never finished",
            "startup timeline",
        )
    )
    decoded = [r for r in rows if r["spec"] and r["tok_s"] is not None and r["decode_n"]]
    if decoded:
        best = max(decoded, key=lambda r: r["tok_s"])
        parts.append('<h2 id="decode">Decode of the best speculative run</h2>')
        parts.append(
            _img(
                lambda: plots.plot_decode(store, best["run_id"]),
                f"{best['name']}: gen throughput, accept length and batch size over time",
                "decode over time",
            )
        )
    body = "\n".join(parts)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title>"
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "img-src data:; style-src 'unsafe-inline'\">"
        f"<style>{CSS}</style></head><body>\n{body}\n</body></html>\n"
    )


def write_report(
    store: Store,
    out: str | Path,
    match: str | None = None,
    *,
    baseline: str | float | None = None,
) -> Path:
    from forensics.output import check_out_path, write_output

    path = Path(out)
    if path.is_dir():
        raise UsageError(f"{path}: is a folder", hint=f"--out {path / 'report.html'}")
    check_out_path(path)  # before building: a bad --out fails fast
    text = build_report(store, match, baseline=baseline)
    write_output(path, text, what="the report")
    return path
