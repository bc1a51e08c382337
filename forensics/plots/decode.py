"""The decode plot: gen throughput, accept length and batch size over time for one run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from forensics.errors import RunNotFound, UsageError
from forensics.plots.layout import COLORS, _finish, new_figure, safe_text

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from forensics.store import Store


def plot_decode(
    store: Store, run: str, *, out: str | Path | None = None, row: dict | None = None
) -> Figure:
    """Gen throughput, accept length and batch size over time for one run (``row``: its
    runs-table row when the caller has it, else RUN is looked up by the one name rule)."""
    import polars as pl

    from forensics.advise import short_config
    from forensics.runs import find_run

    if not run:
        raise UsageError("plot decode needs a run", hint="forensics plot decode RUN")
    row = row if row is not None else find_run(store, run, classify=False)
    # this run's rows only, read part by part (never the decode table whole)
    where = pl.col("run_index") == row["run_index"]
    dec = store.source_rows("decode", row["source_id"], where=where)
    if dec.is_empty() or dec["ts"].null_count() == len(dec):
        raise RunNotFound(
            f"{row['name']}: no Decode batch lines (the server never decoded, or the log has "
            "no timestamps)",
            hint=f"forensics plot startup {row['name']}",
        )
    if "rank" in dec.columns and dec["rank"].n_unique() > 1:
        first_rank = dec.sort("line")["rank"][0]
        dec = dec.filter(pl.col("rank").eq_missing(first_rank))
    dec = dec.filter(pl.col("ts").is_not_null()).sort("ts")
    t0 = dec["ts"][0]
    t = [(ts - t0).total_seconds() for ts in dec["ts"].to_list()]
    has_accept = dec["accept_len"].null_count() < len(dec)
    panels = 3 if has_accept else 2
    fig = new_figure(11.0, 2.0 * panels + 1.0)
    axes = fig.subplots(panels, 1, sharex=True)
    thr = dec["gen_throughput"].cast(pl.Float64).to_list()
    ax = axes[0]
    ax.plot(t, thr, marker=".", color=COLORS["server"], label="gen throughput", gid="throughput")
    med = dec["gen_throughput"].cast(pl.Float64).median()
    if med is not None:
        ax.axhline(med, color="#555555", linestyle="--", linewidth=1, label=f"median {med:.1f}")
    ax.set_ylabel("gen throughput\n(tok/s)")
    ax.set_ylim(0, max([v for v in thr if v is not None] or [1.0]) * 1.15)
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    i = 1
    if has_accept:
        ax = axes[1]
        acc = dec["accept_len"].cast(pl.Float64).to_list()
        ax.plot(t, acc, marker=".", color="#9467bd", label="accept len", gid="accept")
        mean = dec["accept_len"].cast(pl.Float64).mean()
        ax.axhline(mean, color="#555555", linestyle="--", linewidth=1, label=f"mean {mean:.2f}")
        ax.set_ylabel("accept len\n(tokens/round)")
        ax.set_ylim(bottom=1.0 if min(a for a in acc if a is not None) >= 1 else 0)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
        i = 2
    ax = axes[i]
    bs = dec["running_req"].cast(pl.Float64).to_list()
    ax.step(t, bs, where="post", color="#8c564b", label="running requests", gid="batch")
    ax.set_ylabel("batch size\n(running req)")
    ax.set_ylim(0, max([v for v in bs if v is not None] or [1.0]) + 1)
    from matplotlib.ticker import MaxNLocator

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("seconds since the first Decode batch line")
    ax.grid(alpha=0.3)
    fig.suptitle(
        f"Decode of {safe_text(row['name'], 50)} ({safe_text(short_config(row), 30)}): "
        f"{len(dec)} Decode batch lines",
        fontsize=11,
    )
    return _finish(fig, out)
