"""The baseline: what a speculative configuration must beat, one rule for every view.

For each experiment (:mod:`forensics.experiment`), in order:

1. ``--baseline TOK_S`` or ``--baseline RUN`` given for this view (a run of another experiment
   is used with an explicit cross-experiment warning);
2. the stored baseline of that experiment (``forensics baseline RUN`` / ``--tok-s X``);
3. the best single-stream, non-speculative run of that experiment that did not fail: what one
   user sees from the plain server;
4. none, with why and how to set one (:func:`missing_note`).

bench, advise, the plots and the report all call :func:`resolve` (or :func:`for_run`), so they
name the same baseline. Stored baselines live in the store's meta under ``baselines``
(``{experiment: {tok_s, run_id, name, experiment, set_at}}``); a value stored without an
experiment (older stores: ``bench.baseline``) holds for every experiment, with a warning when
the store has several.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.errors import RunNotFound, UsageError

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store

META_KEY = "baselines"
# Older single-value keys (bench.py's first): a baseline for the whole store.
LEGACY_META_KEYS = ("bench.baseline", "baseline")

# How to set a baseline by hand (named in every "no baseline" sentence).
SET_BASELINE_HINT = (
    "forensics baseline --tok-s X (or forensics baseline RUN for a run measured "
    "single-stream), or --baseline TOK_S"
)
SOURCES = {
    "option": "--baseline",
    "meta": "the stored baseline",
    "run": "best single-stream plain run",
}


@dataclass
class Baseline:
    tok_s: float
    source: str  # "option", "meta", "run"
    name: str | None = None
    runs: int = 0  # plain single-stream runs it was chosen among
    batched: bool = False  # measured with several requests in flight (only when asked for)
    experiment: str | None = None  # the experiment it belongs to (None: a bare figure)
    run_id: str | None = None
    warning: str | None = None  # a cross-experiment comparison, said out loud

    @property
    def ms_per_token(self) -> float:
        return 1000.0 / self.tok_s

    def describe(self) -> str:
        txt = f"{self.tok_s:.1f} tok/s"
        if self.name:
            txt += f" ({self.name})"
        txt += f" from {SOURCES.get(self.source, self.source)}"
        if self.batched:
            txt += " (measured with several requests in flight, not single-stream)"
        if self.warning:
            txt += f". Warning: {self.warning}"
        return txt

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {**asdict(self), "ms_per_token": self.ms_per_token, "text": self.describe()}


def as_float(v: Any) -> float | None:
    """A stored figure as a float; None for null, NaN or what is not a number."""
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


# The largest baseline figure taken (tok/s): past it the ratios and plots divide by zero.
MAX_TOK_S = 1e7


def valid_tok_s(f: float) -> bool:
    """A baseline figure: finite, more than 0, at most MAX_TOK_S (--baseline, --tok-s)."""
    return math.isfinite(f) and 0 < f <= MAX_TOK_S


def parse_tok_s(value: str) -> float | None:
    """'90', '90 tok/s' -> 90.0; a run name -> None; a figure outside valid_tok_s is refused."""
    text = value.strip().lower().removesuffix("tok/s").strip()
    try:
        f = float(text)
    except ValueError:
        return None
    if not valid_tok_s(f):
        raise UsageError(
            f"--baseline {value}: tok/s must be a positive number, at most {MAX_TOK_S:g}",
            hint="e.g. --baseline 90",
        )
    return f


def plain_runs(points: pl.DataFrame, *, batched: bool) -> pl.DataFrame:
    """Plain (non-speculative) runs that did not fail and have a tok/s, single-stream or not."""
    import polars as pl

    if points.is_empty() or "spec" not in points.columns:
        return pl.DataFrame()
    flag = pl.col("batched").fill_null(False) if "batched" in points.columns else pl.lit(False)
    ok = ~pl.col("failed").fill_null(False) if "failed" in points.columns else pl.lit(True)
    return points.filter(~pl.col("spec") & pl.col("tok_s").is_not_null() & (flag == batched) & ok)


def _stored_values(store: Store) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    per = store.get_meta(META_KEY)
    if isinstance(per, dict):
        out.extend(v for v in per.values() if isinstance(v, dict))
    for key in LEGACY_META_KEYS:
        value = store.get_meta(key)
        if isinstance(value, dict):
            out.append({**value, "experiment": value.get("experiment")})
        elif isinstance(value, int | float) and value > 0:
            out.append({"tok_s": float(value), "experiment": None})
        elif isinstance(value, str) and value.strip():
            tok = parse_tok_s(value)
            out.append({"tok_s": tok, "experiment": None} if tok else {"name": value})
    return out


def _from_row(row: dict[str, Any], source: str, exp: str) -> Baseline:
    if row.get("tok_s") is None:
        raise RunNotFound(
            f"--baseline {row['name']}: this run has no tok/s (no decode lines, no benchmark)",
            hint="benchmark it (forensics bench) or pass --baseline TOK_S",
        )
    from forensics.experiment import cross_warning

    return Baseline(
        float(row["tok_s"]),
        source,
        row["name"],
        runs=1,
        batched=bool(row.get("batched")),
        experiment=row.get("experiment"),
        run_id=row.get("run_id"),
        warning=cross_warning(f"the baseline {row['name']}", row.get("experiment"), exp),
    )


def find_run(points: pl.DataFrame, ref: str, what: str = "--baseline") -> dict[str, Any]:
    """The run ``ref`` means (the one name rule, :func:`forensics.runs.filter_match`), newest."""
    from forensics.runs import filter_match, only_one

    if points.is_empty():
        raise RunNotFound(f"{what} {ref}: no runs in the store", hint="forensics ingest LOGS")
    hit = filter_match(points, ref)
    if hit.is_empty():
        names = ", ".join(points["name"].head(10).to_list())
        raise RunNotFound(
            f"{what} {ref}: no run matches (runs: {names})",
            hint="--baseline NAME or --baseline TOK_S (e.g. --baseline 90)",
        )
    return only_one(hit.sort("order", descending=True), ref, f"{what} {ref}")


def resolve(
    store: Store,
    points: pl.DataFrame,
    experiment: str,
    override: str | float | None = None,
    *,
    n_experiments: int = 1,
) -> Baseline | None:
    """The baseline of ``experiment`` (rules 1-4 above); ``points`` holds every run."""
    import polars as pl

    if override is not None and str(override).strip():
        tok = parse_tok_s(str(override))
        if tok is not None:
            return Baseline(tok, "option", experiment=experiment)
        return _from_row(find_run(points, str(override)), "option", experiment)
    mine = points.filter(pl.col("experiment") == experiment) if not points.is_empty() else points
    ids = set(mine["run_id"].to_list()) if not mine.is_empty() else set()
    glob: dict[str, Any] | None = None
    for value in _stored_values(store):
        exp = value.get("experiment")
        if exp == experiment or (value.get("run_id") and value["run_id"] in ids):
            return _stored(store, points, value, experiment)
        if exp is None and glob is None and not value.get("run_id"):
            glob = value
    if glob is not None:
        b = _stored(store, points, glob, experiment)
        if b is not None and n_experiments > 1:
            b.warning = (
                "set for the whole store, not for this experiment: a cross-experiment figure; "
                "set one per experiment with forensics baseline RUN"
            )
        return b
    single = plain_runs(mine, batched=False)
    if single.is_empty():
        return None
    best = single.sort(["tok_s", "order"], descending=[True, False]).row(0, named=True)
    return Baseline(
        float(best["tok_s"]),
        "run",
        best["name"],
        runs=len(single),
        experiment=experiment,
        run_id=best["run_id"],
    )


def _stored(store: Store, points: pl.DataFrame, value: dict[str, Any], exp: str) -> Baseline | None:
    tok = as_float(value.get("tok_s"))
    if tok:
        return Baseline(
            tok,
            "meta",
            value.get("name") or value.get("run_id"),
            experiment=value.get("experiment"),
            run_id=value.get("run_id"),
        )
    ref = value.get("run_id") or value.get("name")
    return _from_row(find_run(points, str(ref)), "meta", exp) if ref else None


def missing_note(points: pl.DataFrame, experiment: str | None = None) -> str:
    """Why an experiment has no baseline, and how to set one."""
    import polars as pl

    if experiment is not None and not points.is_empty():
        points = points.filter(pl.col("experiment") == experiment)
    where = f" in {experiment}" if experiment else ""
    hint = SET_BASELINE_HINT
    batched = plain_runs(points, batched=True)
    if batched.is_empty():
        return (
            f"No baseline{where}: no plain (non-speculative) run with a tok/s. Run the baseline "
            "(the same model without speculative decoding) and benchmark it, or set one: "
            f"{hint}."
        )
    names = ", ".join(batched.sort("order")["name"].head(3).to_list())
    more = f" and {len(batched) - 3} more" if len(batched) > 3 else ""
    return (
        f"No single-stream baseline{where}: the plain run(s) {names}{more} were measured with "
        "several requests in flight, which is not what one user sees. Benchmark the plain "
        f"server single-stream (forensics bench URL --run RUN), or set one: {hint}."
    )


def for_run(store: Store, run_id: str | None) -> Baseline | None:
    """The baseline of the experiment ``run_id`` belongs to (bench's ratio)."""
    from forensics.advise import run_points

    if not run_id:
        return None
    points = run_points(store)
    if points.is_empty():
        return None
    hit = points.filter(points["run_id"] == run_id)
    if hit.is_empty():
        return None
    exp = hit["experiment"][0]
    return resolve(store, points, exp, n_experiments=points["experiment"].n_unique())


def set_baseline(
    store: Store,
    *,
    run: str | None = None,
    tok_s: float | None = None,
    experiment: str | None = None,
) -> dict[str, Any]:
    """Store the baseline of an experiment: a run (the tok/s the advisor uses for it: its
    latest single-stream benchmark, else its single-stream decode lines) or a figure.

    With ``tok_s``, the experiment is ``experiment``, else the store's only one; a store of
    several experiments needs ``experiment`` (UsageError naming them).
    """
    from forensics.advise import run_points

    if (run is None) == (tok_s is None):
        raise UsageError("give a run or --tok-s X (one of them)", hint="forensics baseline RUN")
    points = run_points(store)
    exps = [] if points.is_empty() else points["experiment"].unique(maintain_order=True).to_list()
    if tok_s is not None:
        if not valid_tok_s(tok_s):
            raise UsageError(
                f"--tok-s {tok_s:g}: must be a positive number, at most {MAX_TOK_S:g}",
                hint="--tok-s 90",
            )
        if experiment is None and len(exps) > 1:
            raise UsageError(
                f"--tok-s {tok_s}: the store holds {len(exps)} experiments; a baseline belongs "
                "to one",
                hint="add --experiment EXP (one of: " + "; ".join(exps[:6]) + ")",
            )
        if experiment is not None and exps and experiment not in exps:
            raise UsageError(
                f"--experiment {experiment}: no such experiment",
                hint="one of: " + "; ".join(exps[:6]),
            )
        exp = experiment if experiment is not None else (exps[0] if exps else None)
        value: dict[str, Any] = {"tok_s": float(tok_s), "run_id": None, "name": None}
    else:
        assert run is not None
        row = find_run(points, run, "baseline")
        name = row["name"]
        if row.get("tok_s") is None:
            raise RunNotFound(
                f"{name}: this run has no tok/s to use as the baseline (no benchmark, no "
                "decode lines)",
                hint=f"forensics bench URL --run {name}, or forensics baseline --tok-s X",
            )
        if row.get("batched"):
            if row.get("tok_s_source") != "bench":
                how = "decode lines that never show one request alone"
            elif row.get("bench_rate") is not None:
                how = f"a benchmark at {row['bench_rate']:g} req/s"
            else:
                how = f"a benchmark with {row.get('streams')} requests in flight"
            raise UsageError(
                f"{name}: its tok/s comes from {how}; a baseline is the single-stream "
                "speed a person sees",
                hint=f"forensics bench URL --run {name} (single stream), then forensics "
                f"baseline {name}; or forensics baseline --tok-s X",
            )
        exp = row["experiment"]
        value = {"tok_s": float(row["tok_s"]), "run_id": row["run_id"], "name": name}
    value["experiment"] = exp
    value["set_at"] = dt.datetime.now().isoformat(timespec="seconds")
    per = store.get_meta(META_KEY)
    per = dict(per) if isinstance(per, dict) else {}
    per[str(exp)] = value
    store.set_meta(META_KEY, per)
    for key in LEGACY_META_KEYS:  # an older whole-store value would shadow nothing now
        if store.get_meta(key) is not None:
            store.set_meta(key, None)
    return value


def clear(store: Store, experiment: str | None = None) -> None:
    """Forget the stored baseline of ``experiment`` (None: every stored baseline)."""
    per = store.get_meta(META_KEY)
    per = dict(per) if isinstance(per, dict) else {}
    if experiment is None:
        per = {}
        for key in LEGACY_META_KEYS:
            if store.get_meta(key) is not None:
                store.set_meta(key, None)
    else:
        per.pop(experiment, None)
    store.set_meta(META_KEY, per)


def stored(store: Store) -> list[dict[str, Any]]:
    """Every stored baseline (for ``forensics baseline`` without arguments)."""
    return [v for v in _stored_values(store) if as_float(v.get("tok_s"))]
