"""``forensics signatures``: every failure signature in the store with its count."""

from __future__ import annotations

import polars as pl

from forensics.runs import runs_table


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
