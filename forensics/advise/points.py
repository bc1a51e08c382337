"""Runs as points: configuration label, family, tok/s, accept length, outcome (one per run).

What the plots, the advisor, the baseline rule and the report read (``run_points``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from forensics.baseline import as_float as _num

if TYPE_CHECKING:
    import polars as pl

    from forensics.store import Store


def is_spec(row: dict[str, Any]) -> bool:
    algo = row.get("spec_algorithm")
    return bool(algo) and str(algo).lower() not in ("none", "null", "")


def short_config(row: dict[str, Any]) -> str:
    """'cg 5dt topk4 3step' (speculative) or 'baseline cg' (plain)."""
    cg = row.get("cuda_graph")
    cg_txt = "" if cg is None else ("cg" if cg else "nocg")
    if not is_spec(row):
        return " ".join(p for p in ("baseline", cg_txt) if p)
    parts = [cg_txt]
    if row.get("num_draft_tokens") is not None:
        parts.append(f"{row['num_draft_tokens']}dt")
    if row.get("topk") is not None:
        parts.append(f"topk{row['topk']}")
    if row.get("num_steps") is not None:
        parts.append(f"{row['num_steps']}step")
    algo = str(row.get("spec_algorithm") or "")
    if algo.upper() not in ("EAGLE3", "EAGLE"):
        parts.insert(0, algo.lower())
    return " ".join(p for p in parts if p) or "spec"


def family_of(row: dict[str, Any]) -> str:
    """The configuration family of a speculative run: 'cg/5dt/topk4/3step'."""
    return short_config(row).replace(" ", "/")


def _single_stream_stats(store: Store) -> pl.DataFrame:
    """Per run: tok/s and accept length from single-stream decode lines (all lines if none)."""
    import polars as pl

    dec = store.table("decode")
    key = ["source_id", "run_index"]
    schema = {
        "source_id": pl.String,
        "run_index": pl.Int32,
        "ss_tok_s": pl.Float64,
        "ss_accept": pl.Float64,
        "ss_lines": pl.Int64,
        "ss_round_lo": pl.Float64,
        "ss_round_hi": pl.Float64,
        "ss_batched": pl.Boolean,
    }
    if dec.is_empty() or "gen_throughput" not in dec.columns:
        return pl.DataFrame(schema=schema)
    dec = dec.filter(pl.col("gen_throughput").is_not_null() & (pl.col("gen_throughput") > 0))
    if dec.is_empty():
        return pl.DataFrame(schema=schema)
    rr = pl.col("running_req").cast(pl.Int64, strict=False)
    dec = dec.with_columns(
        pl.col("gen_throughput").cast(pl.Float64),
        pl.col("accept_len").cast(pl.Float64),
        (rr == 1).fill_null(False).alias("_single"),
        (rr > 1).fill_null(False).alias("_multi"),
    )
    has_single = dec.group_by(key).agg(
        pl.col("_single").any().alias("_has_single"), pl.col("_multi").any().alias("_has_multi")
    )
    dec = dec.join(has_single, on=key).filter(pl.col("_single") | ~pl.col("_has_single"))
    round_ms = 1000.0 * pl.col("accept_len") / pl.col("gen_throughput")
    return dec.group_by(key).agg(
        pl.col("gen_throughput").median().alias("ss_tok_s"),
        pl.col("accept_len").mean().alias("ss_accept"),
        pl.len().cast(pl.Int64).alias("ss_lines"),
        round_ms.quantile(0.1).alias("ss_round_lo"),
        round_ms.quantile(0.9).alias("ss_round_hi"),
        # batched: measured with several requests in flight, never with one (a line without
        # #running-req proves nothing either way)
        (~pl.col("_has_single").first() & pl.col("_has_multi").first()).alias("ss_batched"),
    )


def run_points(
    store: Store, match: str | None = None, *, group_by: str | list[str] | None = None
) -> pl.DataFrame:
    """One row per run, in launch order, with what the plots and the advisor need.

    Columns: the runs table's (``experiment`` included), plus ``order`` (1-based launch
    order), ``label`` (short config), ``family``, ``spec``, ``failed`` and ``died_in`` (the
    classifier's stored verdict: a phase other than ok, or hung), ``drafter`` (D1, D2, ... when
    an experiment has several draft models, else empty), ``tok_s_server`` (median gen
    throughput over single-stream decode lines), ``tok_s_bench``, ``tok_s`` (bench, else
    server), ``tok_s_source``, ``accept_len``, ``round_ms``, ``decode_n``,
    ``round_lo``/``round_hi`` (10th/90th percentile of the per-line round cost), ``batched``
    (``tok_s`` was measured with several requests in flight: a benchmark at
    ``--concurrency N``/``--rate``, or decode lines that never show one request alone). A
    batched figure is not what one user sees, so it is never the default baseline.
    """
    import polars as pl

    from forensics.runs import runs_table

    df = runs_table(store, match, group_by=group_by)
    if df.is_empty() or "run_id" not in df.columns:
        return pl.DataFrame()
    ss = _single_stream_stats(store)
    df = df.with_columns(pl.col("run_index").cast(pl.Int32)).join(
        ss, on=["source_id", "run_index"], how="left"
    )
    rows = df.to_dicts()
    drafters: dict[str, list[str]] = {}
    for r in rows:
        d = r.get("draft_model_path")
        seen = drafters.setdefault(r["experiment"], [])
        if is_spec(r) and d and d not in seen:
            seen.append(d)
    columns = [k for k in df.columns if not k.startswith("ss_")]
    out = [_point(r, i, drafters[r["experiment"]], columns) for i, r in enumerate(rows, 1)]
    out.extend(_logless_launches(store, rows, match))
    if any(o.get("launch_id") for o in out):
        out.sort(key=lambda o: (o.get("started_at") is None, o.get("started_at") or 0))
        for i, o in enumerate(out, 1):
            o["order"] = i
    return pl.DataFrame(out, infer_schema_length=None)


def _point(r: dict[str, Any], order: int, drafters: list[str], columns: list[str]) -> dict:
    """One ingested run as a point: its figures (bench, else server), outcome, drafter tag."""
    spec = is_spec(r)
    failed, died = verdict_outcome(r.get("phase"), r.get("hung"))
    server = _num(r.get("ss_tok_s")) or _num(r.get("gen_throughput_median"))
    bench = _num(r.get("bench_tok_s"))
    accept = _num(r.get("ss_accept")) or _num(r.get("accept_len_mean"))
    if accept is None:
        accept = _num(r.get("bench_accept_len"))
    tok = bench if bench is not None else server
    d = r.get("draft_model_path")
    tag = f"D{drafters.index(d) + 1}" if (len(drafters) > 1 and spec and d) else ""
    streams = r.get("streams")
    return {
        **{k: r.get(k) for k in columns},
        "order": order,
        "label": f"{short_config(r)} {tag}".strip(),
        "family": family_of(r) if spec else "baseline",
        "spec": spec,
        "failed": failed,
        "crashed": failed,
        "died_in": died,
        "drafter": tag,
        "tok_s_server": server,
        "tok_s_bench": bench,
        "tok_s": tok,
        "tok_s_source": "bench" if bench is not None else ("server" if tok else None),
        "accept_len": accept,
        "round_ms": (1000.0 * accept / tok) if (spec and accept and tok) else None,
        "decode_n": int(r.get("ss_lines") or r.get("decode_lines") or 0),
        "round_lo": _num(r.get("ss_round_lo")),
        "round_hi": _num(r.get("ss_round_hi")),
        "batched": bool(
            (streams is not None and streams > 1)
            or (bench is not None and r.get("bench_rate") is not None)
        ),
    }


def verdict_outcome(phase: str | None, hung: bool | None) -> tuple[bool, str | None]:
    """(failed, died_in) from the classifier's verdict, the one rule every view uses: a run
    failed when its phase is not ``ok`` (or it hung); it died in that phase."""
    if hung:
        return True, f"hung in {phase}" if phase and phase not in ("ok", "hang") else "hung"
    if phase in (None, "", "ok"):
        return False, None
    return True, str(phase)


def _logless_launches(store: Store, rows: list[dict], match: str | None) -> list[dict]:
    """Failed launches (launcher's ``launches`` table) whose log never made it into the store:
    the seed session's 2step run. They appear as failed points, configuration from the name."""
    import json
    from pathlib import PurePosixPath

    if store.table("launches").is_empty():
        return []  # (the launcher, a heavy import, only when there are launches)
    try:
        from forensics.launcher import launches_frame

        launches = launches_frame(store)
    except Exception:  # noqa: BLE001 - the launcher is optional here
        return []
    if launches.is_empty() or "status" not in launches.columns:
        return []
    from forensics_parsers.names import config_from_name

    known = {PurePosixPath(str(r.get("path") or "")).name for r in rows}
    known |= {str(r.get("name")) for r in rows}
    out = []
    for la in launches.iter_rows(named=True):
        if la.get("status") not in ("failed", "timeout", "killed", "terminated"):
            continue
        log = str(la.get("log_path") or "")
        name = str(la.get("name") or PurePosixPath(log).stem or la.get("launch_id"))
        if PurePosixPath(log).name in known or name in known:
            continue
        if match and match.lower() not in name.lower() and match != la.get("launch_id"):
            continue
        cfg = config_from_name(log or name)
        cfg.setdefault("spec_algorithm", None)
        try:
            diag = json.loads(la.get("diagnosis") or "null")
        except ValueError:
            diag = None
        phase = (diag or {}).get("phase") if isinstance(diag, dict) else None
        row = {
            **cfg,
            "experiment": _launch_experiment(rows, la.get("host")),
            "run_id": f"launch:{la.get('launch_id')}",
            "name": name,
            "path": log or None,
            "host": la.get("host"),
            "started_at": la.get("started_at"),
            "phase_reached": "none",
            "decode_lines": 0,
            "error": la.get("cause"),
        }
        spec = is_spec(row)
        out.append(
            {
                **row,
                "launch_id": la.get("launch_id"),
                "launch_diagnosis": json.dumps(diag) if isinstance(diag, dict) else None,
                "order": 0,
                "label": short_config(row),
                "family": family_of(row) if spec else "baseline",
                "spec": spec,
                "failed": True,
                "crashed": True,
                "died_in": phase or (f"{la['cause']}" if la.get("cause") else "pre-exec (no log)"),
                "drafter": "",
                "tok_s_server": None,
                "tok_s_bench": None,
                "tok_s": None,
                "tok_s_source": None,
                "accept_len": None,
                "round_ms": None,
                "decode_n": 0,
                "round_lo": None,
                "round_hi": None,
                "batched": False,
            }
        )
    return out


def _launch_experiment(rows: list[dict], host: str | None) -> str:
    """A launch that never wrote a log: the experiment of the latest run on its host (its
    model and layout are unknown), else of the latest run."""
    same = [r for r in rows if host and r.get("host") == host] or rows
    return str(same[-1]["experiment"]) if same else "unknown"


def drafter_legend(store: Store, match: str | None = None) -> dict[str, str]:
    """{'D1': '/data/eagle3/output_10k_sglang/4', ...} when several draft models appear."""
    pts = run_points(store, match)
    if pts.is_empty():
        return {}
    legend: dict[str, str] = {}
    for r in pts.iter_rows(named=True):
        if r["drafter"] and r["drafter"] not in legend:
            legend[r["drafter"]] = str(r.get("draft_model_path"))
    return legend
