"""Result files of the benchmark tools people already run -> ``bench`` rows (pure).

Bytes in, polars frames out; no I/O, no click. A file is one JSON document or JSON lines (one
object per line: SGLang's ``--output-file`` appends a line per run, vLLM's ``--append-result``
too). Each object is matched against ``FORMATS``, a table of the known tools, each recognised by
the keys it always writes; its ``fields`` table maps the tool's keys onto the columns of the
``bench`` table (docs/bench.md, "Importing results"), and a few derived figures (benchmark
mode, requested input/output lengths, start time) come from the format's ``derive`` function.

=====================  =====================================================================
format                 written by
=====================  =====================================================================
sglang.bench_serving   ``python -m sglang.bench_serving --output-file F.jsonl`` (with or
                       without ``--output-details``: then per-request rows too)
vllm.bench_serve       ``vllm bench serve --save-result`` (``--save-detailed``: per request)
aiperf                 AIPerf's ``profile_export_aiperf.json``
=====================  =====================================================================

Times are the tools' own: milliseconds become seconds; timestamps are naive local time, like
the server log (SGLang's JSONL has none: its records are attached by the server they name).
Anything else raises ``NotBenchResult`` naming the cause and the fix.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

MAX_BYTES = 256 << 20  # a results file above this is refused (a details file of ~1M requests)

# The columns an imported benchmark fills in the `bench` table (the others read as null).
BENCH_SCHEMA: dict[str, Any] = {
    "bench_id": pl.String,
    "tool": pl.String,
    "tool_version": pl.String,
    "record": pl.Int64,  # 0-based index of the result object in its file
    "url": pl.String,
    "api": pl.String,
    "model": pl.String,
    "mode": pl.String,  # single | concurrency | rate (as forensics bench)
    "concurrency": pl.Int64,  # the requests in flight the tool allowed (null: unbounded)
    "rate": pl.Float64,  # requests/s of the arrivals (null: all at once)
    "input_len": pl.Int64,  # tokens per prompt the tool was asked for, else the mean sent
    "output_len": pl.Int64,  # tokens per answer the tool was asked for, else the mean received
    "num_prompts": pl.Int64,
    "max_new_tokens": pl.Int64,
    "completed": pl.Int64,
    "failed": pl.Int64,
    "input_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "output_tok_s": pl.Float64,
    "concurrency_measured": pl.Float64,
    "req_tok_s_median": pl.Float64,
    "decode_tok_s_median": pl.Float64,
    **{
        f"{m}_s_{s}": pl.Float64
        for m in ("ttft", "itl", "tpot", "e2e")
        for s in ("mean", "p50", "p90", "p99")
    },
    "accept_len_client": pl.Float64,  # none of the tools measures it per request
    "accept_len_server": pl.Float64,
    "accept_len_server_scope": pl.String,
    "accept_len_log": pl.Float64,  # filled when attached by time (the log's own figure)
    "accept_len_log_lines": pl.Int64,
    "server_version": pl.String,
    "server": pl.String,  # JSON: the server settings the tool recorded (attach hints)
    "started_at": pl.Datetime("us"),
    "duration_s": pl.Float64,
    "interrupted": pl.Boolean,
}

REQUEST_SCHEMA: dict[str, Any] = {
    "bench_id": pl.String,
    "index": pl.Int64,
    "ok": pl.Boolean,
    "reason": pl.String,
    "detail": pl.String,
    "prompt_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "chunks": pl.Int64,
    "start_s": pl.Float64,
    "ttft_s": pl.Float64,
    "e2e_s": pl.Float64,
    "tpot_s": pl.Float64,
    "itl_mean_s": pl.Float64,
    "tok_s": pl.Float64,
}

# The server settings kept from SGLang's `server_info` (what a run is recognised by).
SERVER_KEYS = (
    "model_path",
    "host",
    "port",
    "tp_size",
    "dp_size",
    "ep_size",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
    "disable_cuda_graph",
    "version",
)


class NotBenchResult(ValueError):
    """Not a result file of a known tool; ``cause`` and ``fix`` say why and what to do."""

    def __init__(self, cause: str, fix: str):
        self.cause = cause
        self.fix = fix
        super().__init__(cause)


# --------------------------------------------------------------------------------------
# Converters: a tool's value -> the column's value (None when absent or not a number)
# --------------------------------------------------------------------------------------
INT64_MAX = 2**63 - 1


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    try:
        f = float(v)  # an int of 400 digits is valid JSON and overflows a float
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _num(v)
    return int(round(f)) if f is not None and abs(f) <= INT64_MAX / 2 else None


def _ms(v: Any) -> float | None:
    f = _num(v)
    return f / 1000.0 if f is not None else None


def _str(v: Any) -> str | None:
    return str(v) if isinstance(v, str | int | float) and not isinstance(v, bool) else None


def _rate(v: Any) -> float | None:
    """Arrival rate: ``inf`` (all at once), "inf" or "trace" -> None."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    return _num(v)


def _iso(v: Any) -> dt.datetime | None:
    if not isinstance(v, str):
        return None
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        return None
    return t.astimezone().replace(tzinfo=None) if t.tzinfo else t


def _vllm_date(v: Any) -> dt.datetime | None:
    if not isinstance(v, str):
        return None
    try:
        return dt.datetime.strptime(v, "%Y%m%d-%H%M%S")
    except ValueError:
        return None


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


# --------------------------------------------------------------------------------------
# Per-tool derived figures
# --------------------------------------------------------------------------------------
def _mode(concurrency: int | None, rate: float | None) -> str:
    if rate is not None:
        return "rate"
    return "single" if concurrency == 1 else "concurrency"


def _mean_len(total: Any, n: Any) -> int | None:
    t, c = _num(total), _num(n)
    return _int(t / c) if t is not None and c else None


def _derive_sglang(rec: dict[str, Any], row: dict[str, Any]) -> None:
    info = rec.get("server_info") if isinstance(rec.get("server_info"), dict) else {}
    state = info.get("internal_states")
    state = state[0] if isinstance(state, list) and state and isinstance(state[0], dict) else {}
    server = {k: info.get(k, state.get(k)) for k in SERVER_KEYS if k in info or k in state}
    row["server"] = json.dumps(server, sort_keys=True) if server else None
    row["server_version"] = _str(info.get("version"))
    row["model"] = _str(info.get("served_model_name") or info.get("model_path"))
    port, host = _int(server.get("port")), _str(server.get("host"))
    if port is not None:
        row["url"] = f"http://{host or '127.0.0.1'}:{port}"
    random = str(rec.get("dataset_name") or "").startswith("random")
    ilen = _int(rec.get("random_input_len")) if random else None
    olen = _int(rec.get("random_output_len")) if random else _int(rec.get("sharegpt_output_len"))
    row["input_len"] = ilen or _mean_len(rec.get("total_input_tokens"), rec.get("completed"))
    row["output_len"] = olen or _mean_len(rec.get("total_output_tokens"), rec.get("completed"))
    row["max_new_tokens"] = olen
    row["accept_len_server_scope"] = "lifetime" if row.get("accept_len_server") else None


def _derive_vllm(rec: dict[str, Any], row: dict[str, Any]) -> None:
    end = _vllm_date(rec.get("date"))  # written when the benchmark ended
    if end is not None and row.get("duration_s") is not None:
        row["started_at"] = end - dt.timedelta(seconds=row["duration_s"])
    row["input_len"] = _mean_len(rec.get("total_input_tokens"), rec.get("completed"))
    row["output_len"] = _mean_len(rec.get("total_output_tokens"), rec.get("completed"))
    if rec.get("num_prompts") is None and row.get("completed") is not None:
        row["num_prompts"] = _int((row["completed"] or 0) + (row.get("failed") or 0))
    row["accept_len_server_scope"] = "window" if row.get("accept_len_server") else None


def _derive_aiperf(rec: dict[str, Any], row: dict[str, Any]) -> None:
    cfg = rec.get("input_config") if isinstance(rec.get("input_config"), dict) else {}
    phases = [p for p in _list(cfg.get("phases")) if isinstance(p, dict)]
    prof = next((p for p in phases if p.get("kind") == "profiling"), phases[0] if phases else {})
    row["concurrency"] = _int(prof.get("concurrency"))
    row["rate"] = _rate(prof.get("rate") or prof.get("request_rate"))
    urls = _list(_get(cfg, "endpoint.urls"))
    row["url"] = _str(urls[0]) if urls else None
    row["api"] = _str(_get(cfg, "endpoint.type"))
    models = _list(_get(cfg, "models.items"))
    row["model"] = _str(_get(models[0], "name")) if models else None
    sets = _list(cfg.get("datasets"))
    prompts = _get(sets[0], "prompts") if sets else None
    ilen = _int(_get(prompts, "isl.mean"))
    olen = _int(_get(prompts, "osl.mean"))
    row["input_len"] = ilen or _int(_get(rec, "input_sequence_length.avg"))
    row["output_len"] = olen or _int(_get(rec, "output_sequence_length.avg"))
    row["max_new_tokens"] = olen
    done = row.get("completed")
    errors = rec.get("error_summary")
    if isinstance(errors, list):  # [{error_details, count}]
        row["failed"] = _int(sum(_int(_get(e, "count")) or 0 for e in errors))
    if done is not None:
        row["num_prompts"] = _int(done + (row.get("failed") or 0))
    row["interrupted"] = bool(rec.get("was_cancelled"))


def _stats(metric: str, keys: dict[str, str], conv: Callable[[Any], Any] = _ms) -> list:
    """Rows of a fields table for one latency: column stat -> the tool's key."""
    return [(f"{metric}_s_{stat}", key, conv) for stat, key in keys.items()]


def _sglang_latency(name: str, metric: str) -> list:
    return _stats(
        metric,
        {
            "mean": f"mean_{name}_ms",
            "p50": f"median_{name}_ms",
            "p90": f"p90_{name}_ms",
            "p99": f"p99_{name}_ms",
        },
    )


def _aiperf_latency(name: str, metric: str) -> list:
    return _stats(
        metric,
        {
            s: f"{name}.{k}"
            for s, k in (("mean", "avg"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"))
        },
    )


@dataclass(frozen=True)
class Format:
    name: str  # the `tool` column
    keys: tuple[str, ...]  # all present at the top level -> this format
    fields: tuple[tuple[str, str, Callable[[Any], Any]], ...]  # column, tool's key, converter
    derive: Callable[[dict[str, Any], dict[str, Any]], None]
    version_key: str | None = None
    # per-request lists (--output-details / --save-detailed): column -> the tool's key
    details: dict[str, str] = field(default_factory=dict)


_SGLANG_DETAILS = {
    "prompt_tokens": "input_lens",
    "output_tokens": "output_lens",
    "ttft_s": "ttfts",
    "itls": "itls",
    "error": "errors",
}

FORMATS: tuple[Format, ...] = (
    Format(
        name="sglang.bench_serving",
        keys=("backend", "random_input_len", "output_throughput", "median_ttft_ms"),
        fields=(
            ("api", "backend", _str),
            ("concurrency", "max_concurrency", _int),
            ("rate", "request_rate", _rate),
            ("completed", "completed", _int),
            ("input_tokens", "total_input_tokens", _int),
            ("output_tokens", "total_output_tokens", _int),
            ("output_tok_s", "output_throughput", _num),
            ("concurrency_measured", "concurrency", _num),
            ("duration_s", "duration", _num),
            ("accept_len_server", "accept_length", _num),
            *_sglang_latency("ttft", "ttft"),
            *_sglang_latency("tpot", "tpot"),
            *_sglang_latency("itl", "itl"),
            *_sglang_latency("e2e_latency", "e2e"),
        ),
        derive=_derive_sglang,
        details=_SGLANG_DETAILS,
    ),
    Format(
        name="vllm.bench_serve",
        keys=("date", "endpoint_type", "output_throughput", "completed"),
        fields=(
            ("api", "backend", _str),
            ("model", "model_id", _str),
            ("concurrency", "max_concurrency", _int),
            ("rate", "request_rate", _rate),
            ("num_prompts", "num_prompts", _int),
            ("completed", "completed", _int),
            ("failed", "failed", _int),
            ("input_tokens", "total_input_tokens", _int),
            ("output_tokens", "total_output_tokens", _int),
            ("output_tok_s", "output_throughput", _num),
            ("duration_s", "duration", _num),
            ("accept_len_server", "spec_decode_acceptance_length", _num),
            *_sglang_latency("ttft", "ttft"),
            *_sglang_latency("tpot", "tpot"),
            *_sglang_latency("itl", "itl"),
            *_sglang_latency("e2el", "e2e"),
        ),
        derive=_derive_vllm,
        details={**_SGLANG_DETAILS, "e2e_s": "latencies", "start_s": "start_times"},
    ),
    Format(
        name="aiperf",
        keys=("aiperf_version", "output_token_throughput", "input_config"),
        fields=(
            ("completed", "request_count.avg", _int),
            ("output_tokens", "total_output_tokens.avg", _int),
            ("input_tokens", "total_isl.avg", _int),
            ("output_tok_s", "output_token_throughput.avg", _num),
            ("req_tok_s_median", "output_token_throughput_per_user.p50", _num),
            ("concurrency_measured", "effective_concurrency.avg", _num),
            ("duration_s", "benchmark_duration.avg", _num),
            ("started_at", "start_time", _iso),
            *_aiperf_latency("time_to_first_token", "ttft"),
            # AIPerf's inter_token_latency is (latency - TTFT) / (tokens - 1): TPOT
            *_aiperf_latency("inter_token_latency", "tpot"),
            *_aiperf_latency("inter_chunk_latency", "itl"),
            *_aiperf_latency("request_latency", "e2e"),
        ),
        derive=_derive_aiperf,
        version_key="aiperf_version",
    ),
)


def detect(rec: dict[str, Any]) -> Format | None:
    """The format whose keys the object holds (the first of FORMATS that fits)."""
    return next((f for f in FORMATS if all(k in rec for k in f.keys)), None)


# --------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------
@dataclass
class Results:
    bench: pl.DataFrame
    requests: pl.DataFrame
    tools: list[str]
    warnings: list[str] = field(default_factory=list)


_FIX = "give the result file a tool wrote: bench_serving --output-file, vllm bench serve --save-result, or AIPerf's profile_export_aiperf.json"


def _objects(data: bytes) -> tuple[list[tuple[str, Any]], list[str]]:
    """[(where, object)] of a JSON document or JSON lines, and warnings for bad lines."""
    if len(data) > MAX_BYTES:
        raise NotBenchResult(
            f"{len(data) >> 20} MiB, more than the {MAX_BYTES >> 20} MiB a results file may hold",
            "split it, or re-run the tool without per-request details",
        )
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotBenchResult(f"not UTF-8 text (byte {exc.start})", _FIX) from None
    if not text.strip():
        raise NotBenchResult("empty file", _FIX)
    try:
        doc = json.loads(text)  # Python's json reads the Infinity bench_serving writes
    except (ValueError, RecursionError):
        doc = None
    else:
        if isinstance(doc, list) and doc and all(isinstance(o, dict) for o in doc):
            return [(f"item {i}: ", o) for i, o in enumerate(doc, 1)], []
        return [("", doc)], []
    out: list[tuple[str, Any]] = []
    warnings: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}: ", json.loads(line)))
        except (ValueError, RecursionError) as exc:
            warnings.append(f"line {n}: not JSON ({str(exc).split(':')[0]}), skipped")
    if not out:
        raise NotBenchResult("not JSON (neither one document nor JSON lines)", _FIX)
    if warnings and len(warnings) * 2 > len(out) + len(warnings):
        raise NotBenchResult(f"not JSON lines ({warnings[0]})", _FIX)
    return out, warnings


def _details(fmt: Format, rec: dict[str, Any], bench_id: str) -> list[dict[str, Any]]:
    cols = {c: rec.get(k) for c, k in fmt.details.items()}
    lists = [v for v in cols.values() if isinstance(v, list)]
    if not fmt.details or not lists:
        return []
    n = max(len(v) for v in lists)

    def at(col: str, i: int) -> Any:
        v = cols.get(col)
        return v[i] if isinstance(v, list) and i < len(v) else None

    rows = []
    for i in range(n):
        err = at("error", i)
        out_tok = _int(at("output_tokens", i))
        ttft = _num(at("ttft_s", i))
        itls = at("itls", i)
        gaps = [g for g in itls if _num(g) is not None] if isinstance(itls, list) else []
        e2e = _num(at("e2e_s", i))
        if e2e is None and ttft is not None and isinstance(itls, list):
            e2e = ttft + sum(gaps)
        ok = not err and (ttft is not None or (out_tok or 0) > 0)
        tpot = (
            (e2e - ttft) / (out_tok - 1)
            if ok and e2e and ttft and out_tok and out_tok > 1
            else None
        )
        rows.append(
            {
                "bench_id": bench_id,
                "index": i,
                "ok": ok,
                "reason": None if ok else "error",
                "detail": str(err)[:4096] if err else None,
                "prompt_tokens": _int(at("prompt_tokens", i)),
                "output_tokens": out_tok,
                "chunks": len(gaps) + 1 if ok and isinstance(itls, list) else None,
                "start_s": _num(at("start_s", i)),
                "ttft_s": ttft,
                "e2e_s": e2e,
                "tpot_s": tpot,
                "itl_mean_s": sum(gaps) / len(gaps) if gaps else None,
                "tok_s": out_tok / e2e if ok and out_tok and e2e else None,
            }
        )
    return rows


def parse(data: bytes, *, source: str = "") -> Results:
    """Parse a results file; ``source`` prefixes the bench ids (``<source>:<record>``).
    Raises NotBenchResult."""
    objects, warnings = _objects(data)
    rows: list[dict[str, Any]] = []
    reqs: list[dict[str, Any]] = []
    tools: list[str] = []
    unknown: list[str] = []
    for i, (where, rec) in enumerate(objects):
        if not isinstance(rec, dict):
            unknown.append(f"{where}a JSON {type(rec).__name__}, not an object")
            continue
        fmt = detect(rec)
        if fmt is None:
            keys = ", ".join(sorted(rec)[:6]) or "none"
            unknown.append(f"{where}keys ({keys}) match no known tool")
            continue
        row: dict[str, Any] = dict.fromkeys(BENCH_SCHEMA)
        for col, key, conv in fmt.fields:
            row[col] = conv(_get(rec, key))
        fmt.derive(rec, row)
        row["mode"] = _mode(row["concurrency"], row["rate"])
        row["tool"] = fmt.name
        row["tool_version"] = _str(rec.get(fmt.version_key)) if fmt.version_key else None
        row["record"] = i
        row["bench_id"] = f"{source}:{i}" if source else str(i)
        if row["interrupted"] is None:
            row["interrupted"] = False
        tpot = row.get("tpot_s_p50")
        row["decode_tok_s_median"] = 1.0 / tpot if tpot else None
        detail_rows = _details(fmt, rec, row["bench_id"])
        if detail_rows and row["failed"] is None:
            row["failed"] = sum(1 for r in detail_rows if not r["ok"])
        if row["num_prompts"] is None and detail_rows:
            row["num_prompts"] = len(detail_rows)
        rows.append(row)
        reqs.extend(detail_rows)
        if fmt.name not in tools:
            tools.append(fmt.name)
    if not rows:
        raise NotBenchResult(unknown[0] if len(unknown) == 1 else "; ".join(unknown[:3]), _FIX)
    warnings.extend(f"{u}, skipped" for u in unknown)
    return Results(
        bench=pl.DataFrame(rows, schema=BENCH_SCHEMA),
        requests=pl.DataFrame(reqs, schema=REQUEST_SCHEMA),
        tools=tools,
        warnings=warnings,
    )


__all__ = ["FORMATS", "Format", "NotBenchResult", "Results", "detect", "parse"]
