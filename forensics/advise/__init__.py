"""The speculation break-even advisor: does a configuration beat the plain server, and why not.

The model (docs/plots.md): a speculative server decodes in *rounds*. One round drafts, verifies,
and yields ``accept_len`` tokens on average (bonus token included), so

    tok/s = 1000 * accept_len / round_ms      =>      round_ms = 1000 * accept_len / tok/s

The plain (baseline) server spends ``base_ms = 1000 / baseline_tok_s`` per token. A
configuration beats the baseline when one round yields more tokens than the baseline makes in
the same time:

    accept_len_needed = round_ms / base_ms

Round cost is a property of the configuration *family* (CUDA graphs on/off, draft tokens,
steps, topk); accept length is mostly a property of the drafter. Each family's round cost is
estimated from every run of it (median, with its spread); the advice says how far the
drafter's accept length is from the one needed, and what to run next when data is missing.

Data first (:func:`advise` returns a dict), rendering second (:func:`render_advice`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from forensics.advise.points import (
    drafter_legend,
    family_of,
    is_spec,
    run_points,
    short_config,
    verdict_outcome,
)
from forensics.baseline import SET_BASELINE_HINT, Baseline, missing_note, resolve
from forensics.errors import RunNotFound

__all__ = [
    "CLOSE_GAP",
    "FamilyEstimate",
    "advise",
    "drafter_legend",
    "estimate_families",
    "family_of",
    "family_sentence",
    "is_spec",
    "missing_baseline_note",
    "render_advice",
    "resolve_baseline",
    "run_points",
    "short_config",
    "verdict_outcome",
]

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store

# Below this shortfall (relative, in accept length) a family counts as "close".
CLOSE_GAP = 0.05


# --------------------------------------------------------------------------------------
# The baseline: one rule, in forensics.baseline (these names stay for older callers)
# --------------------------------------------------------------------------------------
def resolve_baseline(
    store: Store,
    baseline: str | float | None = None,
    points: pl.DataFrame | None = None,
    experiment: str | None = None,
) -> Baseline | None:
    """The baseline of ``experiment`` (default: the main one of ``points``, the experiment
    with the most runs): :func:`forensics.baseline.resolve`."""
    from forensics.experiment import order

    if points is None:
        points = run_points(store)
    exps = order(points)
    if experiment is None:
        experiment = exps[0] if exps else ""
    return resolve(store, points, experiment, baseline, n_experiments=len(exps))


def missing_baseline_note(points: pl.DataFrame, experiment: str | None = None) -> str:
    from forensics.experiment import order

    if experiment is None:
        exps = order(points)
        experiment = exps[0] if len(exps) > 1 else None
    return missing_note(points, experiment)


# --------------------------------------------------------------------------------------
# Families and the verdict
# --------------------------------------------------------------------------------------
@dataclass
class FamilyEstimate:
    family: str
    cuda_graph: bool | None
    num_draft_tokens: int | None
    num_steps: int | None
    topk: int | None
    runs: list[str]
    n_runs: int
    decode_lines: int
    round_ms: float  # median over runs
    round_lo: float  # spread: min..max over runs, or p10..p90 over lines for one run
    round_hi: float
    spread_source: str  # "runs" or "lines"
    tok_s_best: float
    accept_len: float  # the current drafter's mean accept length in this family
    drafter: str | None
    accept_needed: float | None = None
    gap: float | None = None  # accept_len / accept_needed - 1 (negative: short)
    round_needed_ms: float | None = None  # round cost at which the drafter would break even
    beats: bool | None = None
    confidence: str = "low"
    text: str = ""


def estimate_families(points: pl.DataFrame, baseline: Baseline | None) -> list[FamilyEstimate]:
    import polars as pl

    if points.is_empty():
        return []
    usable = points.filter(pl.col("spec") & pl.col("round_ms").is_not_null())
    fams: list[FamilyEstimate] = []
    for fam in usable["family"].unique(maintain_order=True).to_list():
        sub = usable.filter(pl.col("family") == fam).sort("order")
        rows = sub.to_dicts()
        last = rows[-1]
        drafter = last.get("draft_model_path")
        same = [r for r in rows if r.get("draft_model_path") == drafter] or rows
        rounds = [float(r["round_ms"]) for r in rows]
        if len(rounds) >= 2:
            lo, hi, src = min(rounds), max(rounds), "runs"
        else:
            lo = rows[0]["round_lo"] if rows[0]["round_lo"] is not None else rounds[0]
            hi = rows[0]["round_hi"] if rows[0]["round_hi"] is not None else rounds[0]
            src = "lines"
        est = FamilyEstimate(
            family=fam,
            cuda_graph=last.get("cuda_graph"),
            num_draft_tokens=last.get("num_draft_tokens"),
            num_steps=last.get("num_steps"),
            topk=last.get("topk"),
            runs=[r["name"] for r in rows],
            n_runs=len(rows),
            decode_lines=sum(int(r["decode_n"] or 0) for r in rows),
            round_ms=statistics.median(rounds),
            round_lo=float(min(lo, hi)),
            round_hi=float(max(lo, hi)),
            spread_source=src,
            tok_s_best=max(float(r["tok_s"]) for r in rows),
            accept_len=statistics.fmean(float(r["accept_len"]) for r in same),
            drafter=drafter,
        )
        rel_spread = (est.round_hi - est.round_lo) / est.round_ms if est.round_ms else 1.0
        if est.n_runs >= 3 and rel_spread <= 0.05:
            est.confidence = "good"
        elif est.n_runs >= 2 and rel_spread <= 0.10:
            est.confidence = "fair"
        else:
            est.confidence = "low"
        if baseline is not None:
            est.accept_needed = est.round_ms / baseline.ms_per_token
            est.gap = est.accept_len / est.accept_needed - 1.0
            est.round_needed_ms = est.accept_len * baseline.ms_per_token
            est.beats = est.gap >= 0
        est.text = family_sentence(est, baseline)
        fams.append(est)
    return fams


def family_sentence(f: FamilyEstimate, baseline: Baseline | None) -> str:
    """'cg/5dt/topk4/3step: a round costs 28.9 ms, so beating 90 tok/s needs ...'."""
    spread = f"{f.round_lo:.1f}–{f.round_hi:.1f} ms"
    backing = (
        f"{f.n_runs} run{'s' if f.n_runs != 1 else ''}, {spread} across "
        f"{'runs' if f.spread_source == 'runs' else f'{f.decode_lines} decode lines'}"
    )
    if baseline is None or f.accept_needed is None or f.gap is None:
        return (
            f"{f.family}: a round costs {f.round_ms:.1f} ms ({backing}); accept len "
            f"{f.accept_len:.2f}. No baseline to compare with."
        )
    head = (
        f"{f.family}: a round costs {f.round_ms:.1f} ms ({backing}), so beating "
        f"{baseline.tok_s:.1f} tok/s needs accept len ≥ {f.accept_needed:.2f}; "
        f"your drafter gives {f.accept_len:.2f} ({_pct(f.gap)})."
    )
    if f.beats:
        return head + (
            f" Speculation wins here: {f.tok_s_best:.1f} tok/s vs {baseline.tok_s:.1f}; a round "
            f"may cost up to {f.round_needed_ms:.1f} ms before it stops paying."
        )
    if f.cuda_graph is False:
        return head + (
            " CUDA graphs are off: turning them on is the first cut in round cost (it must reach "
            f"{f.round_needed_ms:.1f} ms)."
        )
    return head + (
        " Tuning has reached its limit here: improve the drafter (more training data) or cut "
        f"round cost to {f.round_needed_ms:.1f} ms."
    )


def _pct(x: float) -> str:
    sign = "+" if x >= 0 else "−"
    return f"{sign}{abs(x) * 100:.1f} %"


def advise(
    store: Store,
    match: str | None = None,
    baseline: str | float | None = None,
    *,
    group_by: str | list[str] | None = None,
    points: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> dict:
    """The advisor's data, per experiment: baseline, family estimates, verdict, what next.

    Every experiment (:mod:`forensics.experiment`) is judged on its own runs against its own
    baseline; ``experiments`` lists them, biggest first. With one experiment its fields are
    also the top-level ones; with several the top level says so and lists every family.
    ``points``: (the runs MATCH names, every run) when the caller has them (the report).
    """
    from forensics.experiment import order

    if points is not None:
        points, all_points = points
    else:
        all_points = run_points(store, group_by=group_by)
        points = run_points(store, match, group_by=group_by) if match else all_points
    if points.is_empty():
        raise RunNotFound(
            f"{match}: no run matches" if match else f"no runs in the store {store.root}",
            hint="forensics runs" if match else "forensics ingest /path/to/*.log",
        )
    n_all = len(order(all_points))
    sections = [
        _advise_experiment(store, points, all_points, exp, baseline, n_all) for exp in order(points)
    ]
    if len(sections) == 1:
        return {**sections[0], "experiments": sections}
    rules = "; ".join(
        f"{s['experiment']}: {s['verdict']['rule'].replace('_', ' ')}" for s in sections[:6]
    )
    return {
        "experiment": None,
        "baseline": None,
        "baseline_note": None,
        "families": [f for s in sections for f in s["families"]],
        "verdict": {
            "rule": "several_experiments",
            "text": (
                f"{len(sections)} experiments (model, layout, hardware or benchmark shape "
                f"differ): each is judged against its own baseline: {rules}"
                + (" ..." if len(sections) > 6 else "")
            ),
        },
        "next_steps": [],
        "runs": len(points),
        "runs_speculative": sum(s["runs_speculative"] for s in sections),
        "runs_failed": sum(s["runs_failed"] for s in sections),
        "experiments": sections,
    }


def _advise_experiment(
    store: Store,
    points: pl.DataFrame,
    all_points: pl.DataFrame,
    exp: str,
    baseline: str | float | None,
    n_experiments: int,
) -> dict:
    import polars as pl

    mine = points.filter(pl.col("experiment") == exp)
    base = resolve(store, all_points, exp, baseline, n_experiments=n_experiments)
    fams = estimate_families(mine, base)
    spec = mine.filter(pl.col("spec"))
    failed = mine.filter(pl.col("failed"))
    next_steps: list[str] = []
    base_note = (
        missing_note(all_points, exp if n_experiments > 1 else None) if base is None else None
    )
    if base_note:
        next_steps.append(base_note)
    if spec.is_empty():
        next_steps.append("Run a speculative configuration (e.g. EAGLE-3 with CUDA graphs on).")
    elif not fams:
        next_steps.append(
            "No speculative run has both tok/s and accept length yet: benchmark a running "
            "speculative server (forensics bench) or ingest its log with Decode batch lines."
        )
    for f in fams:
        if f.n_runs == 1:
            next_steps.append(
                f"Repeat {f.runs[0]} ({f.family}): one run backs this estimate, a second one "
                "shows whether the figure holds."
            )
        elif f.confidence == "low":
            next_steps.append(
                f"{f.family}: runs disagree ({f.round_lo:.1f}–{f.round_hi:.1f} ms per round); "
                "repeat it on a quiet host."
            )
    if fams and not any(f.cuda_graph for f in fams):
        next_steps.append(
            "Every speculative run had CUDA graphs off: turn them on first (they cut round cost)."
        )
    if not failed.is_empty():
        first = failed["name"].to_list()[0]
        next_steps.append(f"Diagnose the failed run(s): forensics diagnose {first}")
    return {
        "experiment": exp,
        "baseline": base.as_dict() if base else None,
        "baseline_note": base_note,
        "families": [{**asdict(f), "experiment": exp} for f in fams],
        "verdict": _verdict(fams, base, base_note),
        "next_steps": next_steps,
        "runs": len(mine),
        "runs_speculative": len(spec),
        "runs_failed": len(failed),
    }


# Verdict rules as data: (name, predicate(ctx), sentence(ctx)); the first match wins.
def _verdict_rules() -> list[tuple[str, Any, Any]]:
    return [
        (
            "no_baseline",
            lambda c: c["base"] is None,
            lambda c: (
                "No baseline yet: the break-even cannot be computed. "
                + (
                    c["base_note"]
                    or f"Run the plain server first, or set one: {SET_BASELINE_HINT}."
                )
            ),
        ),
        (
            "no_data",
            lambda c: not c["fams"],
            lambda c: "No speculative run with both tok/s and accept length: nothing to judge yet.",
        ),
        (
            "speculation_wins",
            lambda c: c["best"].beats,
            lambda c: (
                f"Speculation wins: {c['best'].family} gives {c['best'].tok_s_best:.1f} "
                f"tok/s vs the baseline's {c['base'].tok_s:.1f} "
                f"({_pct(c['best'].tok_s_best / c['base'].tok_s - 1)}). Keep it; further tuning is "
                "optional."
            ),
        ),
        (
            "tuning_close",
            lambda c: c["cheap"].gap is not None and c["cheap"].gap > -CLOSE_GAP,
            lambda c: (
                f"Close: {c['cheap'].family} is {_pct(c['cheap'].gap)} short in accept "
                f"length. Tuning is still worth it: cut round cost below "
                f"{c['cheap'].round_needed_ms:.1f} ms (fewer draft tokens or steps), and repeat "
                "the best run to confirm the figure."
            ),
        ),
        (
            "nocg_only",
            lambda c: not any(f.cuda_graph for f in c["fams"]),
            lambda c: (
                "Tuning is still worth it: no run had CUDA graphs on, and they cut round cost most."
            ),
        ),
        (
            "drafter_limit",
            lambda c: True,
            lambda c: (
                "Tuning has reached its limit: even the configuration closest to winning "
                f"({c['cheap'].family}, {c['cheap'].round_ms:.1f} ms a round) needs accept len ≥ "
                f"{c['cheap'].accept_needed:.2f} and the drafter gives {c['cheap'].accept_len:.2f} "
                f"({_pct(c['cheap'].gap)}). The drafter needs more training data (accept len "
                f"+{(-c['cheap'].gap / (1 + c['cheap'].gap)) * 100:.1f} % at this round cost), or "
                f"a round must cost ≤ {c['cheap'].round_needed_ms:.1f} ms."
            ),
        ),
    ]


def _verdict(
    fams: list[FamilyEstimate], base: Baseline | None, base_note: str | None = None
) -> dict:
    ctx: dict[str, Any] = {
        "fams": fams,
        "base": base,
        "base_note": base_note,
        "best": None,
        "cheap": None,
    }
    if fams:
        ctx["best"] = max(fams, key=lambda f: f.tok_s_best)
        # "cheapest" relative to what the drafter gives there: the family closest to winning
        ctx["cheap"] = max(fams, key=lambda f: f.gap if f.gap is not None else -math.inf)
    for name, pred, sentence in _verdict_rules():
        if pred(ctx):
            return {
                "rule": name,
                "text": sentence(ctx),
                "best_family": ctx["best"].family if ctx["best"] else None,
                "closest_family": ctx["cheap"].family if ctx["cheap"] else None,
            }
    return {"rule": "none", "text": ""}


def render_advice(data: dict) -> str:
    """The advice as plain text for a terminal: one section per experiment when several."""
    sections = data.get("experiments") or [data]
    if len(sections) == 1:
        return _render_section(sections[0])
    out = [f"Verdict: {data['verdict']['text']}"]
    for s in sections:
        out += ["", f"== {s['experiment']} ({s['runs']} runs) ==", _render_section(s)]
    return "\n".join(out)


def _render_section(data: dict) -> str:
    lines = []
    base = data.get("baseline")
    if base:
        lines.append(f"Baseline: {base['text']} = {base['ms_per_token']:.2f} ms per token.")
    else:
        lines.append(f"Baseline: none. {data.get('baseline_note') or ''}".rstrip())
    for f in data["families"]:
        lines.append(f"- {f['text']} [confidence: {f['confidence']}]")
    lines.append("")
    lines.append(f"Verdict: {data['verdict']['text']}")
    if data["next_steps"]:
        lines.append("")
        lines.append("Next:")
        lines.extend(f"- {s}" for s in data["next_steps"])
    return "\n".join(lines)
