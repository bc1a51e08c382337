"""A benchmark in the store: its ``bench`` / ``bench_requests`` / ``bench_health`` rows
(schemas declared in forensics/tables.py), the accept length of its window from the run's
log, and the baseline it is compared with."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from forensics.bench.health import HEALTH_FIELDS
from forensics.bench.stats import percentile

if TYPE_CHECKING:
    import polars as pl

    from forensics.bench.report import BenchReport
    from forensics.store import Store


# The report's summary figures stored as they are, in the table's column order.
_SUMMARY_COLUMNS = (
    "completed",
    "failed",
    "output_tokens",
    "output_tok_s",
    "req_tok_s_median",
    "req_tok_s_p10",
    "req_tok_s_p90",
    "decode_tok_s_median",
    "tokens_estimated",
    *(
        f"{k}_{st}"
        for k in ("ttft_s", "itl_s", "tpot_s", "e2e_s")
        for st in ("mean", "p50", "p90", "p99")
    ),
    "accept_len_client",
)


def _bench_row(rep: BenchReport) -> dict[str, Any]:
    """The `bench` row of a report (its columns: tables.BENCH_SCHEMA)."""
    cfg, s = rep.config, rep.summary
    prompts = [r.prompt_tokens for r in rep.results if r.ok and r.prompt_tokens]
    input_len = percentile(prompts, 50)
    row: dict[str, Any] = {
        "bench_id": rep.bench_id,
        "run_id": rep.run_id,
        "url": cfg.url,
        "via": rep.via,
        "api": cfg.api,
        "mode": cfg.mode,
        "concurrency": cfg.concurrency,
        "rate": cfg.rate,
        "num_prompts": len(rep.results),
        "max_new_tokens": cfg.max_new_tokens,
        # the benchmark's shape, as imported results have it (forensics/bench_results.py):
        # tokens per prompt the server counted (median), tokens per answer asked for
        "input_len": None if input_len is None else int(round(input_len)),
        "output_len": cfg.max_new_tokens,
        **{k: s[k] for k in _SUMMARY_COLUMNS},
        "accept_len_server": rep.accept_len_server,
        "accept_len_server_scope": rep.accept_len_server_scope,
        "accept_len_log": rep.accept_len_log,
        "accept_len_log_lines": rep.accept_len_log_lines,
        "server_version": rep.server_version,
        "flush_cache": rep.flush,
        "started_at": rep.started_at,
        "duration_s": rep.duration_s,
        "interrupted": rep.interrupted,
        "deadline_hit": rep.deadline_hit,
        "server_dead": rep.server_dead,
        "death": rep.death,
        "failures": json.dumps(s["failures"], ensure_ascii=False),
    }
    # H06: the /health summary; parts written before these columns existed read as nulls
    row.update({f"health_{k}": rep.health.get(k) for k in HEALTH_FIELDS})
    return row


def bench_frames(rep: BenchReport) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The report's `bench` row and its `bench_requests` rows (one per measured request)."""
    import polars as pl

    from forensics.tables import BENCH_REQUEST_SCHEMA, BENCH_SCHEMA

    row = _bench_row(rep)
    bench = pl.DataFrame([row], schema={k: BENCH_SCHEMA[k] for k in row})
    fields = [k for k in BENCH_REQUEST_SCHEMA if k != "bench_id"]
    reqs = pl.DataFrame(
        [{"bench_id": rep.bench_id, **{k: getattr(r, k) for k in fields}} for r in rep.results],
        schema=BENCH_REQUEST_SCHEMA,
    )
    return bench, reqs


def health_frame(rep: BenchReport) -> pl.DataFrame:
    """The `bench_health` rows: one per /health sample of the benchmark."""
    import polars as pl

    from forensics.tables import BENCH_HEALTH_SCHEMA

    return pl.DataFrame(
        [{"bench_id": rep.bench_id, **asdict(h)} for h in rep.health_samples],
        schema=BENCH_HEALTH_SCHEMA,
    )


def _location(source: dict[str, Any]) -> str:
    """How to name a stored source for `ingest`: a local path, NAME:/path or ssh://."""
    host, path = source.get("host") or "local", source["path"]
    if host == "local":
        return path
    if "@" in host:
        return f"ssh://{host}{path}"
    return f"{host}:{path}"


def accept_len_from_log(store: Store, rep: BenchReport) -> None:
    """The server's own accept length for the benchmark's window, from its log.

    Re-ingests the attached run's log (incremental: only the new bytes) and averages the
    ``accept len`` of its Decode batch lines stamped inside the benchmark (log clock = this
    machine's clock for a local run; for a remote host the two clocks must agree).
    """
    from forensics.ingest import ingest

    if not rep.run_id or ":" not in rep.run_id:
        return
    sid = rep.run_id.rpartition(":")[0]
    source = store.sources().get(sid)
    if source is None:
        return
    ingest(store, [_location(source)])
    rep.accept_len_log, rep.accept_len_log_lines = log_accept_len(
        store, rep.run_id, rep.started_at, rep.duration_s
    )


LOG_ACCEPT_COLUMNS = ("source_id", "run_index", "ts", "accept_len")  # what log_accept_len reads


def log_accept_len(
    store: Store, run_id: str, started_at: dt.datetime, duration_s: float, decode: Any = None
) -> tuple[float | None, int | None]:
    """Mean ``accept len`` of the run's Decode batch lines stamped inside a benchmark's
    window (whole seconds, as the log prints them), and how many there were.
    ``decode``: the decode table when the caller already read it."""
    import polars as pl

    sid, _, idx = run_id.rpartition(":")
    if not sid:
        return None, None
    this_run = (pl.col("source_id") == sid) & (pl.col("run_index") == int(idx))
    # else this run's rows only, four columns, part by part (never the decode table whole)
    dec = decode if decode is not None else store.columns("decode", [*LOG_ACCEPT_COLUMNS], this_run)
    if dec.is_empty():
        return None, None
    t0 = started_at.replace(microsecond=0)
    t1 = started_at + dt.timedelta(seconds=duration_s + 1)
    win = dec.filter(
        this_run & pl.col("ts").is_between(t0, t1) & pl.col("accept_len").is_not_null()
    )
    if win.is_empty():
        return None, None
    return float(win["accept_len"].cast(pl.Float64).mean()), len(win)


def save_bench(store: Store, rep: BenchReport) -> str:
    """Store the benchmark: one `bench` row, one `bench_requests` row per request and one
    `bench_health` row per /health sample, in one transaction."""
    bench, reqs = bench_frames(rep)
    with store.transaction() as tx:
        tx.append("bench", bench)
        tx.append("bench_requests", reqs)
        tx.append("bench_health", health_frame(rep))
    return rep.bench_id


def get_baseline(store: Store, run_id: str | None = None) -> dict[str, Any] | None:
    """The baseline a benchmark of ``run_id`` is compared with: its experiment's
    (:func:`forensics.baseline.for_run`). Without a run, the stored baseline when there is
    exactly one (a benchmark attached to no run belongs to no experiment)."""
    from forensics import baseline

    if run_id:
        b = baseline.for_run(store, run_id)
        return b.as_dict() if b else None
    values = baseline.stored(store)
    return values[0] if len(values) == 1 else None


def baseline_text(tok_s: float | None, baseline: dict[str, Any] | None) -> str:
    """'82.3 tok/s, 0.91× baseline' (or without the ratio when there is no baseline)."""
    if tok_s is None:
        return "— tok/s"
    text = f"{tok_s:.1f} tok/s"
    if baseline and baseline.get("tok_s"):
        text += f", {tok_s / float(baseline['tok_s']):.2f}× baseline"
    return text
