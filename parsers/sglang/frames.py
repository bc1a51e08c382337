"""The parser's output: one polars frame per table (``SCHEMAS``, their contract) in ``Frames``,
with the physical lines counted by kind (``counts``) and other counters (``stats``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

RUN_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "first_line": pl.Int64,
    "last_line": pl.Int64,
    "started_at": pl.Datetime("us"),
    "ended_at": pl.Datetime("us"),
    "style": pl.String,
    "config_source": pl.String,
    "model_path": pl.String,
    "draft_model_path": pl.String,
    "spec_algorithm": pl.String,
    "num_steps": pl.Int32,
    "topk": pl.Int32,
    "num_draft_tokens": pl.Int32,
    "cuda_graph": pl.Boolean,
    "cuda_graph_max_bs": pl.Int32,
    "tp_size": pl.Int32,
    "dp_size": pl.Int32,
    "port": pl.Int32,
    "host": pl.String,
    "mem_fraction": pl.Float64,
    "decode_log_interval": pl.Int32,
    "server_args": pl.String,
}
EVENT_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "line": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.String,
    "stage": pl.String,
    "scope": pl.String,
    "elapsed_s": pl.Float64,
    "avail_mem_gb": pl.Float64,
    "mem_usage_gb": pl.Float64,
    "detail": pl.String,
}
DECODE_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "line": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.String,
    "iter": pl.Int64,
    "running_req": pl.Int32,
    "token": pl.Int64,
    "token_usage": pl.Float32,
    "accept_len": pl.Float32,
    "accept_rate": pl.Float32,
    "cuda_graph": pl.Boolean,
    "gen_throughput": pl.Float32,
    "queue_req": pl.Int32,
    "extra": pl.String,
}
PREFILL_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "line": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.String,
    "iter": pl.Int64,
    "new_seq": pl.Int32,
    "new_token": pl.Int64,
    "cached_token": pl.Int64,
    "token_usage": pl.Float32,
    "running_req": pl.Int32,
    "queue_req": pl.Int32,
    "input_throughput": pl.Float32,
    "cuda_graph": pl.Boolean,
    "extra": pl.String,
}
ERROR_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "line": pl.Int64,
    "last_line": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.String,
    "kind": pl.String,
    "component": pl.String,
    "exc_type": pl.String,
    "message": pl.String,
    "text": pl.String,
    "ambiguous": pl.Boolean,
}
LINE_SCHEMA: dict[str, Any] = {
    "run_index": pl.Int32,
    "line": pl.Int64,
    "ts": pl.Datetime("us"),
    "rank": pl.String,
    "kind": pl.String,
    "text": pl.String,
}
SCHEMAS = {
    "runs": RUN_SCHEMA,
    "events": EVENT_SCHEMA,
    "decode": DECODE_SCHEMA,
    "prefill": PREFILL_SCHEMA,
    "errors": ERROR_SCHEMA,
    "lines": LINE_SCHEMA,
}


_EMPTY = {name: pl.DataFrame(schema=schema) for name, schema in SCHEMAS.items()}


def empty(name: str) -> pl.DataFrame:
    return _EMPTY[name].clear()  # a new frame each time; ~50x cheaper than from the schema


@dataclass
class Frames:
    runs: pl.DataFrame = field(default_factory=lambda: empty("runs"))
    events: pl.DataFrame = field(default_factory=lambda: empty("events"))
    decode: pl.DataFrame = field(default_factory=lambda: empty("decode"))
    prefill: pl.DataFrame = field(default_factory=lambda: empty("prefill"))
    errors: pl.DataFrame = field(default_factory=lambda: empty("errors"))
    lines: pl.DataFrame = field(default_factory=lambda: empty("lines"))
    counts: dict[str, int] = field(default_factory=dict)  # physical lines by kind
    stats: dict[str, int] = field(default_factory=dict)  # other counters (bad-inputs §2.0)

    def tables(self) -> dict[str, pl.DataFrame]:
        return {
            "runs": self.runs,
            "events": self.events,
            "decode": self.decode,
            "prefill": self.prefill,
            "errors": self.errors,
            "lines": self.lines,
        }

    @staticmethod
    def concat(parts: list[Frames]) -> Frames:
        out = Frames()
        for name in SCHEMAS:
            dfs = [getattr(p, name) for p in parts if not getattr(p, name).is_empty()]
            if dfs:
                setattr(out, name, pl.concat(dfs, how="vertical_relaxed"))
        for p in parts:
            for k, v in p.counts.items():
                out.counts[k] = out.counts.get(k, 0) + v
            for k, v in p.stats.items():
                out.stats[k] = out.stats.get(k, 0) + v
        if not out.runs.is_empty():
            # later snapshots of a run replace earlier ones
            out.runs = out.runs.unique("run_index", keep="last", maintain_order=True)
        return out
