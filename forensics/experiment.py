"""Experiments: which runs may be compared with which.

Two runs are comparable only when they measure the same thing: the same target model on the
same layout (TP/DP/EP), on the same hardware, under the same benchmark shape (how many
requests in flight, and the input/output lengths when a benchmark says them). That tuple is
the run's *experiment*; every comparison (baseline, advise, trend, report, diagnose's closest
good run) is made inside one experiment, and one across experiments is refused or warned
about.

The key is declared once, in :data:`KEY_FIELDS` (name, what it reads, how it is written).
``--group-by`` picks a subset of the fields (``--group-by model,layout``); a run the user
labelled (``forensics experiment RUN... --label NAME``) belongs to that experiment whatever
its fields say.

A run that was never measured (it failed before serving) has no benchmark shape of its own:
it belongs to its deployment's (model, layout, hardware) experiment with the most measured
runs, single-stream first, so a crashed launch sits beside the runs it was tried among.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from forensics.errors import UsageError

if TYPE_CHECKING:
    import polars as pl

# meta key: {run_id: label} set by `forensics experiment RUN --label NAME`
LABELS_META = "experiment.labels"
SEP = " · "
UNMEASURED = "unmeasured"


def _model() -> pl.Expr:
    import polars as pl

    # the last path component: /models/Kimi-K2.5 and moonshotai/Kimi-K2.5 are one model
    return (
        pl.col("model_path")
        .cast(pl.String)
        .str.strip_chars_end("/")
        .str.split("/")
        .list.last()
        .fill_null("model ?")
    )


def _layout() -> pl.Expr:
    import polars as pl

    def part(col: str, tag: str, always: bool = False) -> pl.Expr:
        v = pl.col(col).cast(pl.Int64, strict=False)
        shown = pl.lit(tag) + v.cast(pl.String)
        if always:
            return shown.fill_null(f"{tag}?")
        return pl.when(v > 1).then(pl.lit(" ") + shown).otherwise(pl.lit(""))

    return part("tp_size", "tp", always=True) + part("dp_size", "dp") + part("ep_size", "ep")


# Where a log names its GPU model. SGLang prints it only inside the name of the kernel-config
# file it looks up for fused MoE and FP8/INT8 block kernels (``E=384,N=256,device_name=
# NVIDIA_H200,dtype=fp8_w8a8.json`` in "Using default MoE kernel config ..." / "Using MoE kernel
# config from ..." / "Using configuration from ... for W8A8 Block FP8 kernel."): the name is
# ``torch.cuda.get_device_name()`` with spaces as underscores. (pattern, literal prefilter).
# A new source of the GPU name is a new row.
GPU_PATTERNS: list[tuple[str, str]] = [
    (r"\bN=\d+,(?:K=\d+,)?device_name=([A-Za-z0-9][\w\-]*)(?:,|\.json)", "device_name="),
]
# Vendor prefixes dropped from a GPU name (NVIDIA_H200 -> H200); the rest is kept as printed.
GPU_VENDOR_PREFIXES = ("NVIDIA_",)


def gpu_name(raw: str | None) -> str | None:
    """``NVIDIA_H100_80GB_HBM3`` -> ``H100 80GB HBM3``; ``AMD_Instinct_MI300X`` kept whole."""
    if not raw:
        return None
    for prefix in GPU_VENDOR_PREFIXES:
        if raw.startswith(prefix) and len(raw) > len(prefix):
            raw = raw[len(prefix) :]
    return raw.replace("_", " ")


def gpu_lines(lf: pl.LazyFrame) -> pl.LazyFrame:
    """The stored lines that may name a GPU (GPU_PATTERNS' literals): a reduce for
    ``Store.reduced``, so ``runs`` never reads the lines table whole (1.7 M warnings)."""
    import polars as pl

    hit = pl.any_horizontal(
        pl.col("text").str.contains(literal, literal=True) for _, literal in GPU_PATTERNS
    )
    return lf.select("source_id", "run_index", "line", "text").filter(hit)


def gpu_models(lines: pl.DataFrame) -> pl.DataFrame:
    """(source_id, run_index, gpu_model) of every run whose stored lines name its GPU
    (``GPU_PATTERNS``; the first line that does)."""
    import polars as pl

    schema = {"source_id": pl.String, "run_index": pl.Int32, "gpu_model": pl.String}
    if lines.is_empty() or "text" not in lines.columns:
        return pl.DataFrame(schema=schema)
    found = []
    for pattern, literal in GPU_PATTERNS:
        hit = lines.filter(pl.col("text").str.contains(literal, literal=True))
        if hit.is_empty():
            continue
        found.append(
            hit.select(
                "source_id",
                pl.col("run_index").cast(pl.Int32),
                "line",
                pl.col("text").str.extract(pattern, 1).alias("gpu_model"),
            ).drop_nulls("gpu_model")
        )
    if not found:
        return pl.DataFrame(schema=schema)
    return (
        pl.concat(found)
        .sort("line")
        .group_by(["source_id", "run_index"])
        .agg(pl.col("gpu_model").first())
        .with_columns(pl.col("gpu_model").map_elements(gpu_name, return_dtype=pl.String))
    )


def _hardware() -> pl.Expr:
    """``H200@gpu-host`` when the run's log (or, failing that, every other run of its host
    that names one) names a single GPU model; else the host. The GPU count is the layout's."""
    import polars as pl

    host = pl.col("host").cast(pl.String).fill_null("host ?")
    gpu = pl.col("gpu_model").cast(pl.String)
    # a run that died before the kernel lookup (its log names no GPU) runs on its host's GPUs
    per_host = (
        pl.when(gpu.drop_nulls().n_unique().over(host) == 1)
        .then(gpu.drop_nulls().first().over(host))
        .otherwise(None)
    )
    gpu = pl.coalesce(gpu, per_host)
    return pl.when(gpu.is_not_null()).then(gpu + pl.lit("@") + host).otherwise(host)


def _shape() -> pl.Expr:
    import polars as pl

    conc = pl.col("streams").cast(pl.Int64, strict=False)
    c = pl.when(pl.col("bench_rate").is_not_null()).then(
        pl.lit("rate ") + pl.col("bench_rate").cast(pl.String) + pl.lit("/s")
    )
    c = c.when(conc.is_not_null()).then(pl.lit("c=") + conc.cast(pl.String)).otherwise(None)

    def length(col: str, tag: str) -> pl.Expr:  # what is known, nothing for what is not
        v = pl.col(col).cast(pl.Int64, strict=False).cast(pl.String)
        return pl.when(v.is_not_null()).then(pl.lit(tag) + v).otherwise(pl.lit(""))

    return c + length("bench_in_len", " in=") + length("bench_out_len", " out=")


@dataclass(frozen=True)
class KeyField:
    name: str
    reads: str  # what it is made of (docs, --group-by help)
    expr: Callable[[], pl.Expr]
    deployment: bool  # part of the deployment (model, layout, hardware), not the bench shape


# The experiment key, in display order. A new dimension is a new row here.
KEY_FIELDS: list[KeyField] = [
    KeyField("model", "target model (last component of model_path)", _model, True),
    KeyField("layout", "tp_size, dp_size and ep_size (dp/ep shown when > 1)", _layout, True),
    KeyField(
        "hardware",
        "GPU model@host when the log names the GPU (H200@gpu-host), else the host",
        _hardware,
        True,
    ),
    KeyField(
        "shape",
        "requests in flight (c=N, or rate R/s) and the benchmark's input/output lengths",
        _shape,
        False,
    ),
]
FIELD_NAMES = [f.name for f in KEY_FIELDS]
# Columns the key reads; runs_table provides them (null where unknown).
INPUT_COLUMNS = (
    "model_path",
    "tp_size",
    "dp_size",
    "ep_size",
    "gpu_model",
    "host",
    "streams",
    "bench_rate",
    "bench_in_len",
    "bench_out_len",
)


def parse_group_by(value: str | list[str] | tuple[str, ...] | None) -> list[str]:
    """``"model,layout"`` -> ["model", "layout"]; None -> every field. Unknown names refused."""
    if value is None:
        return list(FIELD_NAMES)
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [s.strip().lower() for s in items if s and s.strip()]
    if not names:
        raise UsageError(
            f"--group-by {value!r}: names no field",
            hint=f"pick from {','.join(FIELD_NAMES)} (or none: one experiment for all runs)",
        )
    if names == ["none"]:
        return []
    bad = [n for n in names if n not in FIELD_NAMES]
    if bad:
        raise UsageError(
            f"--group-by {','.join(bad)}: no such experiment field",
            hint=f"pick from {','.join(FIELD_NAMES)} (or none: one experiment for all runs)",
        )
    return [f for f in FIELD_NAMES if f in names]


def assign(
    df: pl.DataFrame,
    group_by: str | list[str] | None = None,
    labels: dict[str, str] | None = None,
) -> pl.DataFrame:
    """``df`` with an ``experiment`` column (the key as text) and ``experiment_fields`` (JSON-
    free struct-less copies of each field: ``exp_model``, ``exp_layout`` ...)."""
    import polars as pl

    fields = parse_group_by(group_by)
    for col in INPUT_COLUMNS:
        if col not in df.columns:
            df = df.with_columns(pl.lit(None).alias(col))
    df = df.with_columns([f.expr().alias(f"exp_{f.name}") for f in KEY_FIELDS])
    # an unmeasured run takes its deployment's main shape (most measured runs, c=1 first)
    dep = [f"exp_{f.name}" for f in KEY_FIELDS if f.deployment]
    measured = df.filter(pl.col("exp_shape").is_not_null())
    if not measured.is_empty():
        main = (
            measured.group_by([*dep, "exp_shape"])
            .agg(pl.len().alias("_n"))
            .with_columns(pl.col("exp_shape").str.starts_with("c=1").alias("_single"))
            .sort(["_n", "_single", "exp_shape"], descending=[True, True, False])
            .group_by(dep, maintain_order=True)
            .first()
            .select([*dep, pl.col("exp_shape").alias("_main_shape")])
        )
        df = df.join(main, on=dep, how="left", nulls_equal=True)
    else:
        df = df.with_columns(pl.lit(None, dtype=pl.String).alias("_main_shape"))
    df = df.with_columns(
        pl.coalesce("exp_shape", "_main_shape", pl.lit(UNMEASURED)).alias("exp_shape")
    ).drop("_main_shape")
    if fields:
        key = pl.concat_str([pl.col(f"exp_{f}") for f in fields], separator=SEP)
    else:
        key = pl.lit("all runs")
    df = df.with_columns(key.alias("experiment"))
    if labels:
        df = df.with_columns(
            pl.col("run_id")
            .replace_strict(labels, default=None, return_dtype=pl.String)
            .fill_null(pl.col("experiment"))
            .alias("experiment")
        )
    return df


def summary(df: pl.DataFrame) -> pl.DataFrame:
    """One row per experiment: experiment, runs, first/last start, in order of first start."""
    import polars as pl

    if df.is_empty() or "experiment" not in df.columns:
        return pl.DataFrame(schema={"experiment": pl.String, "runs": pl.UInt32})
    return (
        df.group_by("experiment", maintain_order=True)
        .agg(
            pl.len().alias("runs"),
            pl.col("started_at").min().alias("first_at"),
            pl.col("started_at").max().alias("last_at"),
        )
        .sort(["runs", "experiment"], descending=[True, False])
    )


def order(df: pl.DataFrame) -> list[str]:
    """The experiments of ``df``, biggest first (ties by name): the order every view uses."""
    s = summary(df)
    return [] if s.is_empty() else s["experiment"].to_list()


def cross_warning(what: str, ref_exp: str | None, exp: str) -> str | None:
    """The warning for comparing ``exp`` with something of another experiment (or None)."""
    if ref_exp is None or ref_exp == exp:
        return None
    return (
        f"{what} is from another experiment ({ref_exp}), not {exp}: this comparison "
        "crosses experiments (model, layout, hardware or benchmark shape differ)"
    )


# An experiment name the user chooses is shown in every table and report: printable text of
# at most this many characters (issue 14 sixth round: a line break printed raw split the
# `experiments` listing; 5,000 characters were taken).
LABEL_MAX = 120


def _check_label(label: str) -> None:
    from forensics.terminal import visible

    if visible(label) != label:  # a control, bidi or zero-width character (the one table)
        raise UsageError(
            f"--label {visible(label)}: an experiment name holds a character a terminal "
            "does not show as text",
            hint="use letters, digits, spaces and punctuation",
        )
    if len(label) > LABEL_MAX:
        raise UsageError(
            f"--label: an experiment name of {len(label):,} characters (at most {LABEL_MAX})",
            hint="a shorter name, e.g. --label 'kimi tuning'",
        )


def set_label(store, match: str, label: str | None) -> list[dict[str, str]]:
    """Put the runs MATCH names (the one name rule) into experiment ``label`` (None: back to
    their key). Returns [{run_id, name, experiment}] of the runs changed."""
    from forensics.runs import find_runs

    if label is not None and not label.strip():
        raise UsageError("--label: an empty experiment name", hint="--label 'kimi tuning'")
    if label is not None:
        _check_label(label)
    hits = find_runs(store, match, classify=False)
    labels = dict(store.get_meta(LABELS_META) or {})
    out = []
    for rid, name in hits.select("run_id", "name").iter_rows():
        if label is None:
            labels.pop(rid, None)
        else:
            labels[rid] = label.strip()
        out.append({"run_id": rid, "name": name, "experiment": label})
    store.set_meta(LABELS_META, labels)
    return out


def experiments_table(store, group_by: str | list[str] | None = None) -> list[dict]:
    """Every experiment: its runs, failed runs, speculative runs and baseline (biggest first)."""
    import polars as pl

    from forensics.advise import run_points
    from forensics.baseline import resolve

    pts = run_points(store, group_by=group_by)
    if pts.is_empty():
        return []
    exps = order(pts)
    out = []
    for exp in exps:
        mine = pts.filter(pl.col("experiment") == exp)
        base = resolve(store, pts, exp, n_experiments=len(exps))
        out.append(
            {
                "experiment": exp,
                "runs": mine.height,
                "failed": int(mine["failed"].sum()),
                "speculative": int(mine["spec"].sum()),
                "baseline": base.describe() if base else None,
                "baseline_tok_s": base.tok_s if base else None,
            }
        )
    return out
