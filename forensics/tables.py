"""Every table of the store and its schema: the one declaration (issue 12, item 5).

``Transaction.append`` checks each frame against ``TABLES`` (an undeclared table, a column
not declared or of another type is a ``StoreSchemaError``, exit 7, naming table and column);
``forensics store repair`` uses ``per_source`` to tell a log's rows (rebuilt by re-ingesting
the log) from rows no log can rebuild (labels, benchmarks, launches).

The per-source tables are the parser's frames (``forensics_parsers.sglang.SCHEMAS``, their
contract) plus the columns ingest adds; the journal is ``forensics_parsers.journal.SCHEMA``.
A column that is all null in one frame may arrive typed ``Null``: it is cast to the
declared type. A frame may leave declared columns out (older parts do too; a read fills them
with nulls).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from forensics.errors import StoreError
from forensics_parsers.benchresults import BENCH_SCHEMA as IMPORTED_BENCH_SCHEMA
from forensics_parsers.benchresults import REQUEST_SCHEMA as IMPORTED_REQUEST_SCHEMA
from forensics_parsers.journal import SCHEMA as JOURNAL_SCHEMA
from forensics_parsers.sglang import SCHEMAS as PARSER_SCHEMAS


class StoreSchemaError(StoreError):
    """A frame does not match its table's declared schema (a bug in the writer)."""


@dataclass(frozen=True)
class Table:
    name: str
    schema: dict[str, Any]
    per_source: bool  # rows come from one log (part source = its source id) and are rebuilt
    written_by: str  # the module that appends it
    # its text did not come through the parser (which redacts once, parsers/secrets.py): every
    # String column is redacted here, on append (a chain's `--api-key X` in the journal, a
    # recipe's in launches, a results file's URL in bench)
    redact: bool = False


SOURCE_COLUMNS = {"source_id": pl.String}
RUN_SOURCE_COLUMNS = {"source_id": pl.String, "path": pl.String, "host_name": pl.String}

# a log's parser resume state after its last complete line (JSON), where ingest resumes
STATE_SCHEMA: dict[str, Any] = {"source_id": pl.String, "state": pl.String}

VERDICT_SCHEMA: dict[str, Any] = {
    "run_id": pl.String,
    "key": pl.String,
    "phase": pl.String,
    "hung": pl.Boolean,
    "signature": pl.String,
    "confidence": pl.Float64,
    "verdict": pl.String,
}

LABEL_SCHEMA: dict[str, Any] = {
    "run_id": pl.String,
    "source_id": pl.String,
    "run_index": pl.Int32,
    "name": pl.String,
    "phase": pl.String,
    "labeled_at": pl.Datetime("us"),
}

LAUNCH_SCHEMA: dict[str, Any] = {
    "launch_id": pl.String,
    "name": pl.String,
    "host": pl.String,
    "mode": pl.String,  # launch | replay
    "log_path": pl.String,
    "journal_path": pl.String,
    "pid_path": pl.String,
    "recipe": pl.String,  # Recipe JSON
    "started_at": pl.Datetime("us"),
    "updated_at": pl.Datetime("us"),
    "pid": pl.Int64,
    "pgid": pl.Int64,
    "pid_start": pl.Int64,  # /proc/PID/stat field 22 (clock ticks since boot), for S16
    "status": pl.String,  # registered|running|ready|failed|timeout|stopped|interrupted|unknown|exited
    "port": pl.Int64,
    "health_url": pl.String,
    "cause": pl.String,
    "token": pl.String,
    "diagnosis": pl.String,  # JSON
}

SWEEP_JOURNAL_SCHEMA: dict[str, Any] = {  # forensics/sweep/journal.py: one row per event
    "sweep": pl.String,
    "seq": pl.Int64,
    "at": pl.Datetime("us"),
    "event": pl.String,
    "key": pl.String,
    "data": pl.String,
}

_F, _I, _S, _B = pl.Float64, pl.Int64, pl.String, pl.Boolean
BENCH_SCHEMA: dict[str, Any] = {
    "bench_id": _S, "run_id": _S, "url": _S, "via": _S, "api": _S, "mode": _S,
    "concurrency": _I, "rate": _F, "num_prompts": _I, "max_new_tokens": _I, "completed": _I,
    "failed": _I, "output_tokens": _I, "output_tok_s": _F, "req_tok_s_median": _F,
    "req_tok_s_p10": _F, "req_tok_s_p90": _F, "decode_tok_s_median": _F,
    "tokens_estimated": _I, "ttft_s_mean": _F, "ttft_s_p50": _F, "ttft_s_p90": _F,
    "ttft_s_p99": _F, "itl_s_mean": _F, "itl_s_p50": _F, "itl_s_p90": _F, "itl_s_p99": _F,
    "tpot_s_mean": _F, "tpot_s_p50": _F, "tpot_s_p90": _F, "tpot_s_p99": _F,
    "e2e_s_mean": _F, "e2e_s_p50": _F, "e2e_s_p90": _F, "e2e_s_p99": _F,
    "accept_len_client": _F, "accept_len_server": _F, "accept_len_server_scope": _S,
    "accept_len_log": _F, "accept_len_log_lines": _I, "server_version": _S,
    "flush_cache": _S, "started_at": pl.Datetime("us"), "duration_s": _F, "interrupted": _B,
    "input_len": _I, "output_len": _I,
    "deadline_hit": _B, "server_dead": _B, "death": _S, "failures": _S,
    "health_every_s": _F, "health_probe_timeout_s": _F, "health_count": _I,
    "health_non_200": _I, "health_timeouts": _I, "health_errors": _I,
    "health_latency_ms_p50": _F, "health_latency_ms_max": _F, "health_longest_non_200_s": _F,
}  # fmt: skip
BENCH_REQUEST_SCHEMA: dict[str, Any] = {
    "bench_id": _S, "index": _I, "ok": _B, "reason": _S, "detail": _S, "status": _I,
    "prompt_tokens": _I, "output_tokens": _I, "tokens_estimated": _B, "chunks": _I,
    "start_s": _F, "ttft_s": _F, "e2e_s": _F, "tpot_s": _F, "itl_mean_s": _F, "tok_s": _F,
    "accept_len": _F, "verify_ct": _F, "finish_reason": _S,
}  # fmt: skip
BENCH_HEALTH_SCHEMA: dict[str, Any] = {
    "bench_id": _S, "t_s": _F, "status": _I, "latency_ms": _F, "error": _S,
}  # fmt: skip


def _union(*schemas: dict[str, Any]) -> dict[str, Any]:
    """One table written by several modules: their columns, which must agree on types."""
    out: dict[str, Any] = {}
    for schema in schemas:
        for col, dtype in schema.items():
            if out.setdefault(col, dtype) != dtype:
                raise TypeError(f"column {col!r} declared {out[col]} and {dtype}")
    return out


def _per_source(name: str, extra: dict[str, Any], redact: bool = False) -> Table:
    return Table(name, {**PARSER_SCHEMAS[name], **extra}, True, "forensics.ingest", redact=redact)


TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        # (a run's name and path come from the file's name, which the parser does not read:
        # `…api_key=X.log` is redacted here, issue 14 seventh round)
        _per_source("runs", RUN_SOURCE_COLUMNS, redact=True),
        _per_source("events", SOURCE_COLUMNS),
        _per_source("decode", SOURCE_COLUMNS),
        _per_source("prefill", SOURCE_COLUMNS),
        _per_source("errors", SOURCE_COLUMNS),
        _per_source("lines", SOURCE_COLUMNS),
        Table("states", STATE_SCHEMA, True, "forensics.ingest (read only by ingest)"),
        Table("verdicts", VERDICT_SCHEMA, False, "forensics.classifier (a cache)", redact=True),
        Table("labels", LABEL_SCHEMA, False, "forensics.classifier (forensics label)"),
        Table("launches", LAUNCH_SCHEMA, False, "forensics.launcher", redact=True),
        Table("journal", dict(JOURNAL_SCHEMA), False, "forensics.launcher", redact=True),
        Table("sweep_journal", SWEEP_JOURNAL_SCHEMA, False, "forensics.sweep.journal", redact=True),
        Table(
            "bench",
            _union(
                BENCH_SCHEMA,
                IMPORTED_BENCH_SCHEMA,
                {"run_id": pl.String, "attached_by": pl.String},
            ),
            False,
            "forensics.bench.storage, forensics.bench_results (imported results files)",
            redact=True,
        ),
        Table(
            "bench_requests",
            _union(BENCH_REQUEST_SCHEMA, IMPORTED_REQUEST_SCHEMA),
            False,
            "forensics.bench.storage, forensics.bench_results",
            redact=True,
        ),
        Table("bench_health", BENCH_HEALTH_SCHEMA, False, "forensics.bench.storage", redact=True),
    )
}


def conform(table: str, df: pl.DataFrame) -> pl.DataFrame:
    """``df`` checked against the declared schema of ``table`` (Null columns cast to it)."""
    spec = TABLES.get(table)
    if spec is None:
        raise StoreSchemaError(
            f"table {table!r}: not declared in forensics/tables.py",
            hint="declare its schema in forensics.tables.TABLES",
        )
    casts = []
    for col, dtype in df.schema.items():
        want = spec.schema.get(col)
        if want is None:
            raise StoreSchemaError(
                f"table {table!r}: column {col!r} is not in its declared schema",
                hint="add it to forensics.tables.TABLES (and a migration if old parts lack it)",
            )
        if dtype == want:
            continue
        if dtype == pl.Null:
            casts.append(pl.col(col).cast(want))
            continue
        raise StoreSchemaError(
            f"table {table!r}: column {col!r} is {dtype}, its declared type is {want}",
            hint="cast it in the writer, or change the declaration with a migration",
        )
    df = df.with_columns(casts) if casts else df
    return _redacted(df) if spec.redact else df


def _redacted(df: pl.DataFrame) -> pl.DataFrame:
    """Every String column through the parser's one redaction (parsers/secrets.py)."""
    from forensics_parsers.secrets import redact_lines

    texts = [c for c, t in df.schema.items() if t == pl.String]
    return df.with_columns(redact_lines(df[c])[0].alias(c) for c in texts) if texts else df


__all__ = ["TABLES", "Table", "StoreSchemaError", "conform"]
