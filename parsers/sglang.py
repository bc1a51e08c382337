"""SGLang server logs -> polars frames.

Pure: bytes in, frames out. ``LogParser`` is a streaming parser: ``feed()`` takes any chunk
of bytes (it keeps an unfinished last line for the next call), ``finish()`` flushes it, and
``state()`` / ``LogParser(state=...)`` let an ingest resume a grown file where it stopped.

Two paths share the work:

* ``Prefill batch`` / ``Decode batch`` lines (the bulk of a long log) are parsed vectorised
  with polars string kernels, one pass per field;
* every other line goes through ``RULES`` (a table of named patterns) in Python: startup
  stages, the server_args line, tracebacks and error lines, warnings, uvicorn lines.

Every physical line is counted exactly once in ``Frames.counts`` (by kind), so nothing is
dropped silently: see ``Frames.counts`` and the property tests.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
import re
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics_parsers import wrappers as W
from forensics_parsers.names import config_from_name
from forensics_parsers.prefixes import PrefixFinder
from forensics_parsers.secrets import SECRET_KEYS, redact_lines, redact_value

MAX_LINE = 1 << 20  # longer lines are cut to this (P11) and counted
MAX_TEXT = 4000  # text kept per line in the `lines` frame
MAX_TRACEBACK = 64_000

# --------------------------------------------------------------------------------------
# SGLang's own prefixes, at the start of a line once a transport prefix (kubectl, docker
# compose, Ray, an aggregator, ...) is stripped: see parsers/prefixes.py.
# --------------------------------------------------------------------------------------
_TAGS = r"(?P<tags>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)"
PREFIX_RX = re.compile(
    r"^(?:"
    # SGLang: [2025-04-28 10:00:00(.123)( TP0 ...)] msg   (also [04:40:55 TP0] and [04-28 10:00:00])
    r"\[(?P<d1>\d{4}-\d{2}-\d{2} |\d{2}-\d{2} )?(?P<t1>\d{2}:\d{2}:\d{2})(?:[.,](?P<f1>\d+))?"
    + _TAGS
    + r"\] "
    # Python logging fork: 2026-06-07 10:59:31,659 [INFO] name: msg
    r"|(?P<d2>\d{4}-\d{2}-\d{2})[ T](?P<t2>\d{2}:\d{2}:\d{2})(?:[.,](?P<f2>\d+))? \[(?P<lv2>[A-Z]+)\] (?P<logger>[\w.\-]+): "
    # glog-ish fork: 2026-06-07 10:59:31 INFO 1234 [file.py:12] msg
    r"|(?P<d3>\d{4}-\d{2}-\d{2})[ T](?P<t3>\d{2}:\d{2}:\d{2})(?:[.,](?P<f3>\d+))? (?P<lv3>INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL) (?P<pid3>\d+) \[(?P<src>[\w./\-]+):\d+\] "
    r")"
)
_RANK_TAG_RX = re.compile(r"(DP|PP|ATTN_CP|MOE_DP|TP|EP)(\d+)")
ANSI_RX = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
ANSI_PATTERN = r"\x1b\[[0-9;?]*[ -/]*[@-~]"

# --------------------------------------------------------------------------------------
# Rules for non-metrics lines: (name, regex on the message, stage, kind).
# kind: stage | config | error | traceback | warning | info | access | progress | noise
# The first matching rule wins; order matters only where patterns overlap.
# --------------------------------------------------------------------------------------
RULES: list[tuple[str, str, str | None, str]] = [
    ("server_args", r"^server_args=(?P<args>ServerArgs\(.*|\{.*)$", "server_args", "config"),
    ("dist_init_begin", r"^Init torch distributed begin\.", "dist_init_begin", "stage"),
    ("dist_init_end", r"^Init torch distributed ends\.", "dist_init_end", "stage"),
    ("nccl_version", r"^sglang is using nccl==", None, "info"),
    ("load_begin", r"^Load weight begin\.", "load_begin", "stage"),
    ("load_end", r"^Load weight end\.", "load_end", "stage"),
    ("kv_pool", r"^(?:\w+ )?KV Cache (?:is allocated|VA upper bound)\.", "kv_pool", "stage"),
    ("post_capture_kv", r"^Post-capture KV sizing:", "kv_pool", "stage"),
    ("mamba_pool", r"^Mamba Cache is allocated\.", "kv_pool", "stage"),
    ("pool_end", r"^Memory pool end\.", "pool_end", "stage"),
    (
        "capture_edge",
        r"^Capture (?P<scope>(?:target verify|target decode|target prefill|draft decode|draft extend|draft verify|draft prefill|draft|piecewise|UNO tree draft|Frozen-KV MTP draft) )?(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU|musa) graph (?:begin|end)\b",
        "capture",
        "stage",
    ),
    ("capture_bs_list", r"^Capture (?:cuda|cpu) graph bs \[", None, "info"),
    (
        "capture_failed",
        r"Capture (?:cuda|CUDA|CPU|cpu|prefill CUDA) graph failed: ",
        None,
        "error",
    ),
    (
        "capture_progress",
        r"^Capturing (?:batches|prefill shape|num tokens)\b",
        "capture_progress",
        "progress",
    ),
    (
        "shard_progress",
        r"^(?:Loading (?:safetensors|pt|np_cache) checkpoint shards|Multi-thread loading shards|Loading safetensors using)",
        None,
        "progress",
    ),
    ("bare_progress", r"^\s*\d+%\|", None, "progress"),
    ("capacity", r"^max_total_num_tokens=\d+", "capacity", "stage"),
    ("uvicorn_started", r"^INFO: +Uvicorn running on ", "uvicorn_started", "stage"),
    (
        "uvicorn_startup",
        r"^INFO: +(?:Started server process|Waiting for application startup|Application startup complete)",
        None,
        "info",
    ),
    ("uvicorn_shutdown_begin", r"^INFO: +Shutting down", "shutdown_begin", "stage"),
    (
        "uvicorn_shutdown_end",
        r"^INFO: +(?:Finished server process|Application shutdown complete)",
        "shutdown_end",
        "stage",
    ),
    ("uvicorn_shutdown_wait", r"^INFO: +Waiting for application shutdown", None, "info"),
    ("uvicorn_access", r"^INFO: +\S+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}", None, "access"),
    (
        "bind_error",
        r"^ERROR: +\[Errno \d+\] error while attempting to bind on address",
        None,
        "error",
    ),
    ("uvicorn_error", r"^ERROR: +", None, "error"),
    ("uvicorn_warning", r"^WARNING: +", None, "warning"),
    ("ready", r"^The server is fired up and ready to roll!", "ready", "stage"),
    (
        "warmup",
        r"^(?:Start of (?:prefill|pd disaggregation) warmup|End of (?:prefill warmup|disaggregation warmup))",
        "warmup",
        "stage",
    ),
    ("weights_ready", r"^Weights are ready after ", None, "info"),
    (
        "sigterm",
        r"^SIGTERM received\. .*Draining requests and shutting down",
        "shutdown_begin",
        "stage",
    ),
    ("graceful_exit", r"^Gracefully exiting\.\.\. ", "shutdown_end", "stage"),
    ("child_exception", r"^(?P<component>\w+) hit an exception: ?(?P<rest>.*)$", None, "traceback"),
    ("traceback_start", r"^Traceback \(most recent call last\):\s*$", None, "traceback"),
    (
        "sigquit",
        r"^(?:Received sigquit from a child proc(?:es|ess)\.|SIGQUIT received\. )",
        None,
        "error",
    ),
    ("scheduler_dead", r"Rank \d+ scheduler (?:is dead|died during initialization)", None, "error"),
    ("exit_code", r"^Exit code: -?\d+", None, "error"),
    ("init_failed", r"^Initialization failed\. ", None, "error"),
    (
        "subprocess_crash",
        r"^(?:Subprocess .+ \(pid=\d+\) crashed with exit code -?\d+|Child process unexpectedly failed with)",
        None,
        "error",
    ),
    (
        "watchdog",
        r"^(?:\w+ watchdog timeout|Watchdog timeout) \(self\.watchdog_timeout=",
        None,
        "error",
    ),
    ("health_failed", r"^Health check failed\. ", None, "error"),
    (
        "nccl_watchdog",
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*(?:timeout|Timeout)",
        None,
        "error",
    ),
    (
        "cuda_error",
        r"CUDA error: |CUDA out of memory|illegal memory access|device-side assert",
        None,
        "error",
    ),
    (
        "oom_error",
        r"(?:OutOfMemoryError|Not enough memory\. Please try to increase --mem-fraction-static)",
        None,
        "error",
    ),
    ("nccl_error", r"NCCL error", None, "error"),
    ("port_wait", r"^port \d+ is in use\. Waiting|^Port is already in use\.", None, "error"),
    # `usage: launch_server.py [-h] ...` (not a wrapped `token usage: 0.37` piece)
    ("argparse_usage", r"^usage: [\w./-]+(?: [\w./-]+)? [\[-]", None, "usage"),
    ("argparse_error", r"^[\w./ -]+: error: ", None, "error"),
    ("fatal_python", r"^Fatal Python error: ", None, "error"),
    ("flush_cache", r"^Cache (?:flushed successfully|not flushed)", None, "info"),
    ("health_shutdown", r"^Health check request received during shutdown", None, "info"),
    ("state_deleted", r"but the state was deleted in TokenizerManager", None, "noise"),
    ("deprecated", r"(?i)\bdeprecat", None, "noise"),
    ("triton_diag", r"^(?:[\w/.\-]+:\d+:\d+: )?error: .*(?:triton|tt\.|ttg\.|mlir)", None, "noise"),
    (
        "args_warning",
        r"^(?:speculative_\w+ is (?:adjusted|set)|Overlap scheduler is disabled|Overlap spec v2|Non-overlap|Spec v[12] |Beta spec is enabled|Max running requests is reset|Mixed chunked prefill is disabled|Speculative token map specified|The overlap scheduler and mixed chunked prefill|DeepSeek MTP does not require)",
        None,
        "warning",
    ),
    ("generic_error", r"(?i)^(?:error|fatal|critical)\b|\b(?:Error|Exception): ", None, "error"),
    ("generic_warning", r"(?i)^warn(?:ing)?\b|Warning: ", None, "warning"),
]
_RULES = [(n, re.compile(p), s, k) for n, p, s, k in RULES]


def _top_alternatives(pattern: str) -> list[str]:
    """Split a regex on its top-level ``|`` (outside groups and classes)."""
    out, buf, depth, cls, esc = [], [], 0, False, False
    for ch in pattern:
        if esc:
            buf.append(ch)
            esc = False
            continue
        if ch == "\\":
            esc = True
        elif cls:
            cls = ch != "]"
        elif ch == "[":
            cls = True
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "|" and depth == 0:
            out.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    out.append("".join(buf))
    return out


def _scoped(pattern: str) -> str:
    """A leading ``(?i)`` becomes a scoped ``(?i:...)`` so patterns can be combined."""
    if pattern.startswith("(?i)"):
        return "(?i:" + pattern[4:] + ")"
    return "(?:" + pattern + ")"


# One combined regex per line instead of one search per rule: the first alternative that
# matches wins, which is the table's order. Rules anchored at ``^`` are tried with one
# ``match``; the others with one ``search`` that only says whether any of them can match.
_ANCHORED = [
    i
    for i, (_, p, _, _) in enumerate(RULES)
    if all(a.lstrip("(?i)").startswith("^") for a in _top_alternatives(p.removeprefix("(?i)")))
]
_FLOATING = [i for i in range(len(RULES)) if i not in _ANCHORED]
_ANCHORED_RX = re.compile("|".join(f"(?P<r{i}>{_scoped(RULES[i][1])})" for i in _ANCHORED))
_FLOATING_RX = re.compile("|".join(_scoped(RULES[i][1]) for i in _FLOATING))


def match_rule(msg: str) -> tuple[str, re.Match[str], str | None, str] | None:
    """The first rule of RULES (in table order) that matches a message, or None."""
    first = len(RULES)
    am = _ANCHORED_RX.match(msg)
    if am is not None:
        first = int(am.lastgroup[1:])
    if _FLOATING_RX.search(msg) is not None:
        for i in _FLOATING:
            if i > first:
                break
            mm = _RULES[i][1].search(msg)
            if mm:
                name, _, stage, kind = _RULES[i]
                return name, mm, stage, kind
    if first < len(RULES):
        name, rx, stage, kind = _RULES[first]
        return name, rx.match(msg), stage, kind
    return None


def _capture_edge(msg: str) -> str:
    """``begin`` or ``end`` for a ``Capture ... graph begin|end`` line."""
    return "begin" if " begin" in msg[: msg.find("graph") + 12] else "end"


def stage_of(line: str) -> str | None:
    """The startup stage a raw log line marks (the ``stage`` names of the events frame), or
    None: the same rules as the parser, for code that follows a log live."""
    line = PrefixFinder().strip(line, PREFIX_RX)
    m = PREFIX_RX.match(line)
    msg = line[m.end() :] if m is not None and m.end() else line
    rule = match_rule(msg)
    if rule is None or rule[2] is None:
        return None
    if rule[2] == "capture":
        return "capture_" + _capture_edge(msg)
    return rule[2]


# A traceback frame line with no open traceback: the header was lost.
ORPHAN_FRAME_RX = re.compile(r'^\s+File "[^"]+", line \d+, in \S|^\s+File "/')
# After a frame line, a flush-left piece that is no exception line: the rest of the frame line,
# hard-wrapped at the screen width (a copy from a terminal, a mail).
WRAP_PIECE_RX = re.compile(r'^[\w<>.,/" -]+$')
# Traceback continuation lines (unprefixed) and the final exception line.
TB_CONT_RX = re.compile(
    r'^(?:\s+\S|File "[^"]+", line \d+, in |'
    r"\s*$|Traceback \(most recent call last\)|During handling of the above|The above exception was|\s*\^+\s*$|Possible solutions:|\d+\. |Open an issue on GitHub|Search for `|CUDA kernel errors might|For debugging consider|Compile with `TORCH_USE_CUDA_DSA`|Exception raised from|frame #\d+|[\w.]*(?:Error|Exception|Exit|Interrupt|Fault)\b)"
)
EXC_LINE_RX = re.compile(
    r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|Warning)|Exception|KeyboardInterrupt)(?::\s?(?P<msg>.*))?$"
)

# Key/value fields of Prefill/Decode batch lines that get their own column.
DECODE_FIELDS: list[tuple[str, str, type]] = [
    ("running_req", "#running-req", int),
    ("token", "#token", int),
    ("token_usage", "token usage", float),
    ("accept_len", "accept len", float),
    ("accept_rate", "accept rate", float),
    ("gen_throughput", "gen throughput (token/s)", float),
    ("queue_req", "#queue-req", int),
]
PREFILL_FIELDS: list[tuple[str, str, type]] = [
    ("new_seq", "#new-seq", int),
    ("new_token", "#new-token", int),
    ("cached_token", "#cached-token", int),
    ("token_usage", "token usage", float),
    ("running_req", "#running-req", int),
    ("queue_req", "#queue-req", int),
    ("input_throughput", "input throughput (token/s)", float),
]
GRAPH_KEY = r"(?:cuda|cpu|npu|musa|xpu) graph"

# Secrets: one choke point, ``redact_lines`` in ``LogParser._parse_split`` (parsers/secrets.py).


# --------------------------------------------------------------------------------------
# server_args: ServerArgs(...) repr or dict repr -> dict
# --------------------------------------------------------------------------------------
def _split_top(s: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside quotes and brackets."""
    out, depth, buf, quote, esc = [], 0, [], "", False
    for ch in s:
        if quote:
            buf.append(ch)
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>" and depth > 0:
            depth -= 1
        elif ch == sep and depth == 0:
            out.append("".join(buf))
            buf = []
            continue
        buf.append(ch)
    if buf:
        out.append("".join(buf))
    return out


def _literal(v: str) -> Any:
    v = v.strip()
    try:
        return ast.literal_eval(v)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return v


def parse_server_args(text: str) -> dict[str, Any]:
    """``ServerArgs(a=1, b='x', ...)`` or ``{'a': 1, ...}`` -> dict (tolerant of cut lines)."""
    text = text.strip()
    out: dict[str, Any] = {}
    if text.startswith("{"):
        body = text[1:-1] if text.endswith("}") else text[1:]
        for item in _split_top(body):
            k, sep, v = item.partition(":")
            if not sep:
                continue
            key = _literal(k)
            if isinstance(key, str):
                out[key] = _literal(v)
    else:
        body = text[len("ServerArgs(") :]
        if body.endswith(")"):
            body = body[:-1]
        for item in _split_top(body):
            k, sep, v = item.partition("=")
            if sep and re.fullmatch(r"\s*\w+\s*", k):
                out[k.strip()] = _literal(v)
    for k in list(out):
        if SECRET_KEYS.match(k) and out[k] not in (None, "", False):
            out[k] = redact_value(str(out[k]))  # (idempotent: the text is redacted already)
    return out


def config_from_server_args(args: dict[str, Any]) -> dict[str, Any]:
    def num(key: str, *alts: str) -> Any:
        for k in (key, *alts):
            v = args.get(k)
            if isinstance(v, bool):
                continue
            if isinstance(v, int | float):
                return v
        return None

    algo = args.get("speculative_algorithm")
    cg = args.get("disable_cuda_graph")
    backend = args.get("cuda_graph_backend_decode")
    cuda_graph = None
    if isinstance(cg, bool):
        cuda_graph = not cg
    if backend == "disabled":
        cuda_graph = False
    return {
        "model_path": args.get("model_path"),
        "draft_model_path": args.get("speculative_draft_model_path"),
        "spec_algorithm": algo if isinstance(algo, str) else None,
        "num_steps": num("speculative_num_steps"),
        "topk": num("speculative_eagle_topk"),
        "num_draft_tokens": num("speculative_num_draft_tokens"),
        "cuda_graph": cuda_graph,
        "cuda_graph_max_bs": num("cuda_graph_max_bs", "cuda_graph_max_bs_decode"),
        "tp_size": num("tp_size"),
        "dp_size": num("dp_size"),
        "port": num("port"),
        "host": args.get("host") if isinstance(args.get("host"), str) else None,
        "mem_fraction": num("mem_fraction_static"),
        "decode_log_interval": num("decode_log_interval"),
    }


# --------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------
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


# --------------------------------------------------------------------------------------
# The parser
# --------------------------------------------------------------------------------------
_MEM_RX = {
    "elapsed_s": re.compile(r"(?:Time elapsed: |elapsed=)([\d.]+) ?s"),
    "avail_mem_gb": re.compile(r"avail(?:able)?[ _](?:gpu_)?mem=([\d.]+) ?GB"),
    "mem_usage_gb": re.compile(r"mem usage=([\d.]+) ?GB"),
}
_TYPE_RX = re.compile(r"type=(\w+)")
_DRAFT_CLASS_RX = re.compile(r"(?:Eagle3?|NextN|MTP|Draft)\b", re.I)
_TS_FMT = "%Y-%m-%d %H:%M:%S"


class LogParser:
    """Streaming SGLang-log parser. Feed bytes; collect frames; save ``state()`` to resume."""

    def __init__(
        self,
        source: str = "",
        *,
        state: dict[str, Any] | None = None,
        name_pattern: str | None = None,
        date_hint: str | None = None,
    ):
        self.source = source
        self.name_pattern = name_pattern
        st = state or {}
        self.line_no: int = st.get("line_no", 0)  # physical lines consumed so far
        self.run_index: int = st.get("run_index", 0)
        self.runs: dict[int, dict[str, Any]] = {int(k): v for k, v in st.get("runs", {}).items()}
        self.last_ts: str | None = st.get("last_ts")
        self.date_hint: str = st.get("date_hint") or date_hint or "1970-01-01"
        self._pending = b""
        self._skip_to_newline = st.get("skip_to_newline", False)
        self._tb: dict[str, Any] | None = st.get("traceback")  # open traceback
        # how the file is stored (line endings, wrapper), decided from its first bytes
        self._sniff: dict[str, Any] | None = st.get("sniff")
        self._finder = PrefixFinder(st.get("prefixes"))
        self._json_carry: str = st.get("json_carry", "")
        self._closed_tbs: list[dict[str, Any]] = []
        if not self.runs:
            self.runs[0] = self._new_run(1)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON-serialisable state for resuming after the bytes fed so far (complete lines)."""
        return {
            "line_no": self.line_no,
            "run_index": self.run_index,
            "runs": {str(k): v for k, v in self.runs.items()},
            "last_ts": self.last_ts,
            "date_hint": self.date_hint,
            "skip_to_newline": self._skip_to_newline,
            "traceback": self._tb,
            "sniff": self._sniff,
            "prefixes": self._finder.state(),
            "json_carry": self._json_carry,
        }

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    def _new_run(self, first_line: int) -> dict[str, Any]:
        return {
            "first_line": first_line,
            "last_line": first_line,
            "started_at": None,
            "ended_at": None,
            "has_args": False,
            "has_content": False,
            "stages": [],
            "loads": 0,
            "kv_pools": 0,
            "plain_captures": 0,
            "style": [],
            "config": {},
            "config_source": None,
            "server_args": None,
        }

    # -- feeding -------------------------------------------------------------------------
    def feed(self, data: bytes) -> Frames:
        frames, prepared = self.feed_split(data)
        if prepared is not None:
            frames.decode, frames.prefill = extract_batch(prepared)
        return frames

    def feed_split(self, data: bytes) -> tuple[Frames, pl.DataFrame | None]:
        """``feed`` without the field extraction of the metrics lines.

        The frames come with empty ``decode`` / ``prefill``: ``extract_batch(prepared)``
        makes them (it is pure, so it may run in another thread while this parser is fed
        the next chunk). Everything else, counts, runs and ``state()`` included, already
        covers the lines fed.
        """
        buf = self._pending + data
        if self._sniff is None:
            head = W.sniff_window(buf, final=False)
            if head is None:
                self._pending = buf
                return Frames(), None
            self._do_sniff(head, whole=head.endswith((b"\n", b"\r")))
        cr = self._sniff["cr"]
        if self._skip_to_newline:
            nl = _find_eol(buf, cr)
            if nl < 0:
                self._pending = b""
                return Frames(), None
            buf = buf[nl + 1 :]
            self._skip_to_newline = False
            self.line_no += 1  # the cut line was already counted when cut
        cut = _rfind_eol(buf, cr)
        if cut < 0:
            if len(buf) > MAX_LINE:
                # P11: a huge line without newline yet: keep its head, skip the rest
                self._pending = b""
                self._skip_to_newline = True
                frames, prepared = self._parse_split(buf[:MAX_LINE], partial=False)
                frames.stats["long_lines_truncated"] = (
                    frames.stats.get("long_lines_truncated", 0) + 1
                )
                self.line_no -= 1  # the line continues; it is counted once, when it ends
                return frames, prepared
            self._pending = buf
            return Frames(), None
        self._pending = buf[cut + 1 :]
        complete = buf[: cut + 1]
        return self._parse_split(W.cr_to_lf(complete) if cr else complete, partial=False)

    def _do_sniff(self, head: bytes, *, whole: bool) -> None:
        """Decide line endings, wrapper and the first transport prefixes from the file's
        first bytes (the same bytes whatever the chunking: streaming == one pass)."""
        cr = W.lone_cr(head)
        if cr:
            head = W.cr_to_lf(head)
        sample = W.sniff_lines(head, whole)
        name, params = W.detect(sample)
        self._sniff = {"cr": cr, "wrapper": name, "params": params}
        if sample:
            lines = pl.Series("text", sample, dtype=pl.String)
            if name is not None:
                lines = W.BY_NAME[name].unwrap(lines, params)
                if not W.BY_NAME[name].keeps_lines:
                    lines = pl.Series("text", "\n".join(lines.to_list()).split("\n"))
            lines, _ = redact_lines(lines)
            for line in lines.to_list()[: W.SNIFF_LINES]:
                self._finder.strip(ANSI_RX.sub("", line), PREFIX_RX)

    def finish(self) -> Frames:
        """Flush a last line that has no newline (P04: kept, counted as partial)."""
        first = None
        if self._sniff is None:  # a file shorter than the sniff window
            self._do_sniff(W.sniff_window(self._pending, final=True) or b"", whole=True)
            first = self.feed(b"")
        rest = self._finish()
        return Frames.concat([first, rest]) if first is not None else rest

    def _finish(self) -> Frames:
        self._close_traceback()
        if self._skip_to_newline:
            self._skip_to_newline = False
            self.line_no += 1
            self._pending = b""
        if not self._pending and not self._json_carry:
            return self._flush_tb_only()
        data, self._pending = self._pending, b""
        if self._sniff["cr"]:
            data = W.cr_to_lf(data)
        frames = self._parse(data, partial=True)
        self._close_traceback()
        tail = self._flush_tb_only()
        return Frames.concat([frames, tail])

    def _flush_tb_only(self) -> Frames:
        out = Frames()
        if self._closed_tbs:
            out.errors = pl.DataFrame(self._closed_tbs, schema=ERROR_SCHEMA)
            self._closed_tbs = []
        out.runs = self._runs_frame()
        return out

    # -- the work ------------------------------------------------------------------------
    def _parse(self, data: bytes, *, partial: bool) -> Frames:
        frames, prepared = self._parse_split(data, partial=partial)
        if prepared is not None:
            frames.decode, frames.prefill = extract_batch(prepared)
        return frames

    def _parse_split(self, data: bytes, *, partial: bool) -> tuple[Frames, pl.DataFrame | None]:
        counts: dict[str, int] = {}
        stats: dict[str, int] = {}
        nul = data.count(b"\x00") if b"\x00" in data else 0  # (`in` stops at the first)
        if nul:
            stats["nul_bytes"] = nul
            data = data.replace(b"\x00", b"")
        text = data.decode("utf-8", errors="replace")
        bad = text.count("\ufffd")
        if bad:
            stats["decode_errors"] = bad
        if text.endswith("\n"):
            text = text[:-1]
        sniff = self._sniff or {}
        wrapper = W.BY_NAME.get(sniff.get("wrapper") or "")
        if wrapper is not None and not wrapper.keeps_lines:
            # JSON lines: the text of each record; Docker's split records joined again
            params = sniff["params"]
            raw = pl.Series("text", text.split("\n") if data else [], dtype=pl.String)
            text, self._json_carry = W.join_json(
                wrapper.unwrap(raw, params) if len(raw) else raw,
                self._json_carry,
                params["terminated"],
                final=partial,
            )
            if text is None:
                return Frames(stats=stats), None  # only an unfinished piece so far
        if "\x1b" in text:
            n0 = len(text)
            text = ANSI_RX.sub("", text)
            stats["ansi_stripped"] = n0 - len(text)
        base = self.line_no
        lines_s = pl.Series("text", [text], dtype=pl.String).str.split("\n").explode()
        if wrapper is not None and wrapper.keeps_lines:
            lines_s = wrapper.unwrap(lines_s, sniff["params"])
        # the one place secrets are removed: every table, and the state, reads these lines
        lines_s, n_secret = redact_lines(lines_s)
        if n_secret:
            stats["lines_redacted"] = n_secret
        n = len(lines_s)
        self.line_no += n
        stats["lines_total"] = n
        if partial:
            stats["partial_lines"] = 1
        df = pl.DataFrame({"text": lines_s}).with_columns(
            (pl.int_range(1, n + 1, dtype=pl.Int64) + base).alias("line")
        )
        has_cr = "\r" in text
        if has_cr:
            df = df.with_columns(pl.col("text").str.strip_chars_end("\r"))
        is_batch = pl.col("text").str.contains(r"(?:Decode|Prefill) batch(?: \[\d+\])?[.,] ")
        df = df.with_columns(is_batch.alias("batch"))
        batch = df.filter(pl.col("batch"))
        other = df.filter(~pl.col("batch"))

        # 1) the Python path, in file order: runs, stages, errors, other lines
        events: list[dict[str, Any]] = []
        lines: list[dict[str, Any]] = []
        boundaries: list[tuple[int, int]] = []  # (line, run_index) where a run starts
        start_run = self.run_index
        for line_no, raw in other.select("line", "text").iter_rows():
            if len(raw) > MAX_LINE:
                raw = raw[:MAX_LINE]
                stats["long_lines_truncated"] = stats.get("long_lines_truncated", 0) + 1
            if "\r" in raw:
                frames_ = [f for f in raw.split("\r") if f.strip()]
                if len(frames_) > 1:
                    stats["progress_frames_collapsed"] = (
                        stats.get("progress_frames_collapsed", 0) + len(frames_) - 1
                    )
                    # a log line glued after a bar's frames is its own record
                    logs = [f for f in frames_ if PREFIX_RX.match(f)]
                    bars = [f for f in frames_ if not PREFIX_RX.match(f)]
                    raw = bars[-1] if bars else frames_[-1]
                    for extra in logs if bars else logs[:-1]:
                        self._handle_line(
                            line_no, extra, events, lines, boundaries, counts, stats, False
                        )
                elif frames_:
                    raw = frames_[0]
                else:
                    raw = ""
            self._handle_line(line_no, raw, events, lines, boundaries, counts, stats, True)

        # 2) the vectorised path: Prefill / Decode batch lines
        # (runs and counts now; the fields by extract_batch, see feed_split)
        prepared, n_decode, n_prefill = self._batch_prepare(batch, boundaries, start_run)
        counts["decode"] = counts.get("decode", 0) + n_decode
        counts["prefill"] = counts.get("prefill", 0) + n_prefill

        counts = {k: v for k, v in counts.items() if v}
        out = Frames(counts=counts, stats=stats)
        if events:
            out.events = pl.DataFrame(events, schema=EVENT_SCHEMA)
        if lines:
            out.lines = pl.DataFrame(lines, schema=LINE_SCHEMA)
        if self._closed_tbs:
            out.errors = pl.DataFrame(self._closed_tbs, schema=ERROR_SCHEMA)
            self._closed_tbs = []
        out.runs = self._runs_frame()
        return out, prepared

    def _touch_run_lines(self, df: pl.DataFrame, kind: str) -> None:
        agg = df.group_by("run_index").agg(
            pl.col("line").max().alias("last"),
            pl.col("ts").min().alias("t0"),
            pl.col("ts").max().alias("t1"),
        )
        for ri, last, t0, t1 in agg.iter_rows():
            run = self.runs.get(ri)
            if run is None:
                continue
            run["last_line"] = max(run["last_line"], last)
            run["has_content"] = True
            if kind == "decode" and "serving" not in run["stages"]:
                run["stages"].append("serving")
            if t0 is not None:
                s0 = t0.strftime(_TS_FMT + ".%f")
                if run["started_at"] is None or s0 < run["started_at"]:
                    run["started_at"] = s0
            if t1 is not None:
                s = t1.strftime(_TS_FMT + ".%f")
                if run["ended_at"] is None or s > run["ended_at"]:
                    run["ended_at"] = s

    # -- one non-metrics line ------------------------------------------------------------
    def _ts(self, m: re.Match[str]) -> str | None:
        d = m.group("d1") or m.group("d2") or m.group("d3")
        t = m.group("t1") or m.group("t2") or m.group("t3")
        f = m.group("f1") or m.group("f2") or m.group("f3")
        if not t:
            return None
        if d is None:
            d = self.date_hint
        else:
            d = d.strip()
            if len(d) == 5:  # %m-%d: year from the hint
                d = self.date_hint[:4] + "-" + d
        return f"{d} {t}" + (f".{f[:6]}" if f else "")

    def _handle_line(
        self,
        line_no: int,
        raw: str,
        events: list,
        lines: list,
        boundaries: list,
        counts: dict,
        stats: dict,
        count: bool,
    ) -> None:
        def bump(kind: str) -> None:
            if count:
                counts[kind] = counts.get(kind, 0) + 1

        # whatever a collector put before SGLang's line (kubectl, docker compose, an
        # aggregator, torchrun, ...): found by SGLang's own shapes (parsers/prefixes.py)
        raw = self._finder.strip(raw, PREFIX_RX)
        m = PREFIX_RX.match(raw)
        if m and m.end() > 0:
            msg = raw[m.end() :]
            ts = self._ts(m)
            tags = (m.group("tags") or "").strip()
            rank = tags
            prefixed = ts is not None
        else:
            m = None
            msg = raw
            ts = None
            rank = ""
            prefixed = False
        if ts is not None:
            if self.last_ts and ts < self.last_ts:
                stats["ts_out_of_order"] = stats.get("ts_out_of_order", 0) + 1
            self.last_ts = ts

        stripped = msg.strip()
        # an open traceback takes unprefixed continuation lines
        if self._tb is not None:
            if not prefixed and (
                TB_CONT_RX.match(msg)
                or self._tb["in_message"]
                or self._tb.get("code_next")
                or (self._tb.get("wrap", 0) and WRAP_PIECE_RX.match(msg))
            ):
                if stripped or self._tb["lines"] < 400:
                    self._tb_add(line_no, msg)
                    bump("traceback")
                    return
            else:
                if prefixed and rank != self._tb["rank"] and not self._tb["exc_type"]:
                    self._tb["ambiguous"] = True  # P08: ranks interleaved mid-traceback
                self._close_traceback()

        if not stripped:
            bump("blank")
            return
        self.runs[self.run_index]["has_content"] = True

        if not prefixed and ORPHAN_FRAME_RX.match(msg):
            # a traceback whose header is not in the log (a pasted fragment, the last screen,
            # another rank's line in between): its frames still say where it happened
            self._open_traceback(line_no, ts, rank, "")
            self._tb_add(line_no, msg)
            bump("traceback")
            self._touch(line_no, ts)
            self._emit_line(lines, line_no, ts, rank, "traceback_start", msg)
            return
        rule = match_rule(msg)
        if rule is None:
            bump("unknown_prefixed" if prefixed else "unknown_bare")
            self._emit_line(lines, line_no, ts, rank, "unknown", msg)
            self._touch(line_no, ts)
            return
        name, mm, stage, kind = rule
        bump(name)

        # run boundaries: a new launch appended to the same file
        if name in ("server_args", "argparse_usage"):
            run = self.runs[self.run_index]
            if run["has_args"] or (run["has_content"] and run["stages"]):
                self._start_run(line_no)
                boundaries.append((line_no, self.run_index))
        run = self.runs[self.run_index]
        if kind not in ("noise", "access", "progress") or name == "capture_progress":
            run["has_content"] = True
        self._touch(line_no, ts)

        if name == "server_args":
            args = parse_server_args(mm.group("args"))
            run["has_args"] = True
            run["config"] = config_from_server_args(args)
            run["config_source"] = "server_args"
            run["server_args"] = json.dumps(args, default=str, sort_keys=True, ensure_ascii=False)[
                :200_000
            ]
            if mm.group("args").startswith("{"):
                self._style(run, ">=0.5.19")
        if name in ("child_exception", "traceback_start"):
            component = mm.group("component") if name == "child_exception" else ""
            self._open_traceback(line_no, ts, rank, component)
            rest = mm.group("rest") if name == "child_exception" else ""
            if rest and not rest.startswith("Traceback"):
                self._tb_add(line_no, rest)
            self._emit_line(lines, line_no, ts, rank, name, msg)
            return
        if kind == "error":
            exc = EXC_LINE_RX.match(stripped)
            self._closed_tbs.append(
                {
                    "run_index": self.run_index,
                    "line": line_no,
                    "last_line": line_no,
                    "ts": _to_dt(ts),
                    "rank": rank,
                    "kind": name,
                    "component": "",
                    "exc_type": exc.group("type") if exc else None,
                    "message": stripped[:2000],
                    "text": stripped[:MAX_TEXT],
                    "ambiguous": False,
                }
            )
        if stage is not None:
            self._event(events, run, line_no, ts, rank, name, stage, msg, mm)
        if kind != "access" or len(lines) < 100_000:
            self._emit_line(lines, line_no, ts, rank, name, msg)

    def _emit_line(self, lines, line_no, ts, rank, kind, msg) -> None:
        lines.append(
            {
                "run_index": self.run_index,
                "line": line_no,
                "ts": _to_dt(ts),
                "rank": rank,
                "kind": kind,
                "text": msg[:MAX_TEXT],
            }
        )

    def _touch(self, line_no: int, ts: str | None) -> None:
        run = self.runs[self.run_index]
        run["last_line"] = max(run["last_line"], line_no)
        if ts is not None:
            if run["started_at"] is None:
                run["started_at"] = ts
            if run["ended_at"] is None or ts > run["ended_at"]:
                run["ended_at"] = ts

    def _start_run(self, line_no: int) -> None:
        self._close_traceback()
        self.run_index += 1
        self.runs[self.run_index] = self._new_run(line_no)

    def _style(self, run: dict, tag: str) -> None:
        if tag not in run["style"]:
            run["style"].append(tag)

    def _event(self, events, run, line_no, ts, rank, name, stage, msg, mm) -> None:
        scope = ""
        detail = ""
        if name == "load_begin" or name == "load_end":
            tm = _TYPE_RX.search(msg)
            cls = tm.group(1) if tm else ""
            detail = cls
            if name == "load_begin":
                # first load of each rank is the target; later ones the draft
                run["loads"] += 1
            is_draft = bool(cls and _DRAFT_CLASS_RX.search(cls))
            if not cls:
                per_rank = run.setdefault("load_begins", {})
                if name == "load_begin":
                    per_rank[rank] = per_rank.get(rank, 0) + 1
                is_draft = per_rank.get(rank, 1) > 1
            else:
                per_rank = run.setdefault("load_begins", {})
                is_draft = is_draft or per_rank.get(rank, 1) > 1
            scope = "draft" if is_draft else "target"
            if "elapsed=" in msg:
                self._style(run, ">=0.5.9")
        elif name == "kv_pool" or stage == "pool_end":
            key = "kv_seen" if stage == "kv_pool" else "pool_seen"
            seen = run.setdefault(key, {})
            seen[rank] = seen.get(rank, 0) + 1
            scope = "target" if seen[rank] == 1 else "draft"
        elif name == "capture_edge":
            raw_scope = (mm.group("scope") or "").strip()
            edge = _capture_edge(msg)
            stage = f"capture_{edge}"
            if raw_scope.startswith("target") or not raw_scope:
                scope = "target"
                if not raw_scope:
                    # 0.4.3 reuses the target text for the draft: the second pair is the draft
                    seen = run.setdefault("plain_capture", {})
                    if edge == "begin":
                        seen[rank] = seen.get(rank, 0) + 1
                    if seen.get(rank, 1) > 1:
                        scope = "draft"
            elif raw_scope == "draft extend":
                scope = "draft_extend"
            elif raw_scope.startswith("draft"):
                scope = "draft"
            else:
                scope = raw_scope.replace(" ", "_")
            detail = raw_scope
            if "CUDA graph" in msg and raw_scope:
                self._style(run, ">=0.5.14")
        elif name == "capture_progress":
            bm = re.search(r"bs=(\d+)", msg)
            pm = re.search(r"(\d+)/(\d+)", msg)
            detail = (f"bs={bm.group(1)} " if bm else "") + (pm.group(0) if pm else "")
        elif name == "capacity":
            detail = msg[:200]
        if stage and stage not in run["stages"]:
            run["stages"].append(stage)
        vals = {k: None for k in _MEM_RX}
        for k, rx in _MEM_RX.items():
            vm = rx.search(msg)
            if vm:
                try:
                    vals[k] = float(vm.group(1))
                except ValueError:
                    pass
        events.append(
            {
                "run_index": self.run_index,
                "line": line_no,
                "ts": _to_dt(ts),
                "rank": rank,
                "stage": stage,
                "scope": scope,
                "elapsed_s": vals["elapsed_s"],
                "avail_mem_gb": vals["avail_mem_gb"],
                "mem_usage_gb": vals["mem_usage_gb"],
                "detail": detail,
            }
        )

    # -- tracebacks ----------------------------------------------------------------------
    def _open_traceback(self, line_no: int, ts: str | None, rank: str, component: str) -> None:
        if self._tb is not None:
            self._close_traceback()
        self._tb = {
            "run_index": self.run_index,
            "line": line_no,
            "last_line": line_no,
            "ts": ts,
            "rank": rank,
            "component": component,
            "text": [],
            "exc_type": None,
            "message": None,
            "lines": 0,
            "in_message": False,
            "ambiguous": False,
            "size": 0,
        }

    def _tb_add(self, line_no: int, msg: str) -> None:
        tb = self._tb
        assert tb is not None
        tb["last_line"] = line_no
        tb["lines"] += 1
        self._touch(line_no, None)
        if tb["size"] < MAX_TRACEBACK:
            tb["text"].append(msg)
            tb["size"] += len(msg) + 1
        s = msg.rstrip()
        # a frame line that lost its indentation (a paste, some collectors): the next
        # line is its code line, flush left too
        code_line = tb.get("code_next", False)
        tb["code_next"] = s.startswith('File "')
        if code_line and not tb["code_next"]:
            tb["wrap"] = 0
            return
        if s.lstrip().startswith('File "') or (s.startswith((" ", "\t")) and tb.get("wrap")):
            # pieces of a hard-wrapped frame or code line may follow, flush left (frames_of
            # rejoins a frame line's pieces)
            tb["wrap"] = 3
        elif tb.get("wrap") and WRAP_PIECE_RX.match(s) and not EXC_LINE_RX.match(s):
            tb["wrap"] -= 1
            return
        else:
            tb["wrap"] = 0
        if not s.startswith((" ", "\t")):
            em = EXC_LINE_RX.match(s)
            if em:
                tb["exc_type"] = em.group("type")
                tb["message"] = em.group("msg") or ""
                tb["in_message"] = True
                return
            if s.startswith(("Traceback", "During handling", "The above exception")):
                tb["in_message"] = False

    def _close_traceback(self) -> None:
        tb = self._tb
        if tb is None:
            return
        self._tb = None
        text = "\n".join(tb["text"])
        self._closed_tbs.append(
            {
                "run_index": tb["run_index"],
                "line": tb["line"],
                "last_line": tb["last_line"],
                "ts": _to_dt(tb["ts"]),
                "rank": tb["rank"],
                "kind": "traceback",
                "component": tb["component"],
                "exc_type": tb["exc_type"],
                "message": (tb["message"] or "")[:2000],
                "text": text,
                "ambiguous": tb["ambiguous"],
            }
        )

    # -- metrics lines, vectorised -------------------------------------------------------
    # Two steps. ``_batch_prepare`` gives each metrics line its run, kind and timestamp and
    # updates the runs (the lines after depend on them); ``extract_batch`` (pure, module
    # level) turns the prepared lines into the decode/prefill frames. The second step reads
    # nothing else, so an ingest runs it in a worker thread (polars releases the GIL) while
    # this parser goes on with the next chunk: see ``feed_split``.
    def _batch_prepare(
        self, batch: pl.DataFrame, boundaries: list[tuple[int, int]], start_run: int
    ) -> tuple[pl.DataFrame | None, int, int]:
        """-> (prepared lines or None, decode lines, prefill lines); touches the runs."""
        if batch.is_empty():
            return None, 0, 0
        batch = batch.select("line", "text")
        # run index: the run in force at each line
        if boundaries:
            b = pl.DataFrame(
                {"line": [x[0] for x in boundaries], "run_index": [x[1] for x in boundaries]},
                schema={"line": pl.Int64, "run_index": pl.Int32},
            )
            batch = batch.sort("line").join_asof(b, on="line", strategy="backward")
            batch = batch.with_columns(pl.col("run_index").fill_null(start_run))
        else:
            batch = batch.with_columns(pl.lit(start_run, dtype=pl.Int32).alias("run_index"))
        t = pl.col("text")
        if batch["text"].str.contains("\r", literal=True).any():
            batch = batch.with_columns(t.str.split("\r").list.last().alias("text"))
        # Split each line at its "Decode batch" / "Prefill batch" head with literal finds
        # (regex-free: this runs on millions of lines).
        # (each find once, as a column: far cheaper than repeating them in the expressions)
        pos_d, pos_p = pl.col("_d"), pl.col("_p")
        is_dec = pos_d.is_not_null() & (pos_p.is_null() | (pos_d < pos_p.fill_null(1 << 30)))
        parts = (
            batch.with_columns(
                t.str.find("Decode batch", literal=True).alias("_d"),
                t.str.find("Prefill batch", literal=True).alias("_p"),
            )
            .with_columns(is_dec.alias("_dec"))
            .with_columns(
                pl.when(pl.col("_dec")).then(pos_d).otherwise(pos_p).alias("_pos"),
                pl.when(pl.col("_dec"))
                .then(pl.lit("Decode"))
                .otherwise(pl.lit("Prefill"))
                .alias("which"),
            )
            .drop("_d", "_p", "_dec")
            .with_columns(t.str.slice(0, pl.col("_pos")).alias("prefix"))
        )
        p = pl.col("prefix")
        # fast path: SGLang's own `[YYYY-MM-DD HH:MM:SS...` prefix; other layouts by regex
        std = p.str.starts_with("[") & (p.str.slice(5, 1) == "-") & (p.str.slice(11, 1) == " ")
        has_frac = p.str.slice(20, 1) == "."
        all_std, any_frac, n_dec = parts.select(
            std.all().alias("a"), has_frac.any().alias("f"), (pl.col("which") == "Decode").sum()
        ).row(0)
        if any_frac:
            fast_ts = (
                pl.when(has_frac)
                .then(p.str.extract(r"^\[([\d-]+ [\d:]+\.\d+)", 1))
                .otherwise(p.str.slice(1, 19))
                .str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
            )
        else:  # no fraction anywhere: the same instants, and a format polars parses fastest
            fast_ts = p.str.slice(1, 19).str.to_datetime(
                "%Y-%m-%d %H:%M:%S", strict=False, time_unit="us"
            )
        if all_std:
            ts = fast_ts
        else:
            # a transport prefix may come before SGLang's own (kubectl, an aggregator):
            # SGLang's timestamp is the last one before the head
            p = p.str.extract_all(
                r"(?:\d{4}-\d{2}-\d{2}[ T]|\[\d{2}-\d{2} |\[)?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?"
            ).list.last()
            date = p.str.extract(r"(\d{4}-\d{2}-\d{2})[ T]\d{2}:\d{2}:\d{2}", 1)
            date_md = p.str.extract(r"\[(\d{2}-\d{2}) \d{2}:\d{2}:\d{2}", 1)
            clock = p.str.extract(r"(\d{2}:\d{2}:\d{2}(?:[.,]\d+)?)", 1).str.replace(",", ".")
            hint = self.date_hint
            date = pl.coalesce(date, pl.lit(hint[:4] + "-") + date_md, pl.lit(hint))
            slow_ts = (
                pl.when(clock.is_not_null())
                .then(
                    (date + pl.lit(" ") + clock).str.to_datetime(
                        "%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us"
                    )
                )
                .otherwise(None)
            )
            ts = pl.when(std).then(fast_ts).otherwise(slow_ts)
        parts = parts.with_columns(ts.alias("ts"))
        n_dec = int(n_dec or 0)
        touch = parts.select("run_index", "line", "ts", "which")
        if n_dec:
            self._touch_run_lines(touch.filter(pl.col("which") == "Decode"), "decode")
        if n_dec < len(parts):
            self._touch_run_lines(touch.filter(pl.col("which") == "Prefill"), "prefill")
        return parts, n_dec, len(parts) - n_dec

    def _runs_frame(self) -> pl.DataFrame:
        rows = []
        for ri, run in sorted(self.runs.items()):
            if not run["has_content"]:
                continue
            cfg = dict(run["config"])
            source = run["config_source"]
            named = config_from_name(self.source, self.name_pattern) if self.source else {}
            filled = False
            for k, v in named.items():
                if k in RUN_SCHEMA and v is not None and cfg.get(k) is None:
                    cfg[k] = v
                    filled = True
            if named.get("no_spec") and source is None:
                cfg["spec_algorithm"] = None
            if filled:
                source = f"{source}+filename" if source else "filename"
            rows.append(
                {
                    "run_index": ri,
                    "first_line": run["first_line"],
                    "last_line": run["last_line"],
                    "started_at": _to_dt(run["started_at"]),
                    "ended_at": _to_dt(run["ended_at"]),
                    "style": ",".join(run["style"]) or None,
                    "config_source": source,
                    "server_args": run["server_args"],
                    **{k: cfg.get(k) for k in RUN_SCHEMA if k in cfg},
                }
            )
        if not rows:
            return empty("runs")
        return pl.DataFrame(rows, schema=RUN_SCHEMA, strict=False)


def extract_batch(parts: pl.DataFrame | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Prepared metrics lines (``LogParser._batch_prepare``) -> (decode, prefill) frames.

    Pure: reads only its argument, so it may run in another thread than the parser's.
    """
    if parts is None:
        return empty("decode"), empty("prefill")
    t = pl.col("text")
    parts = parts.with_columns(
        t.str.slice(
            pl.col("_pos") + pl.when(pl.col("which") == "Decode").then(12).otherwise(13)
        ).alias("_after"),
    )
    a = pl.col("_after")
    tagged = parts["_after"].str.starts_with(" [").any()
    if tagged:  # `[N]` iteration tags (SGLANG_LOG_FORWARD_ITERS, 0.5.4)
        parts = parts.with_columns(
            a.str.extract(r"^ \[(\d+)\]", 1).cast(pl.Int64, strict=False).alias("iter"),
            a.str.replace(r"^(?: \[\d+\])?[.,] ", "").alias("rest"),
        )
    else:
        parts = parts.with_columns(
            pl.lit(None, dtype=pl.Int64).alias("iter"), a.str.slice(2).alias("rest")
        )
    parts = parts.drop("text", "_after", "_pos").with_columns(
        pl.col("prefix")
        .str.extract(r"((?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)+)\]", 1)
        .str.strip_chars()
        .fill_null("")
        .alias("rank"),
    )
    out = []
    for which, fields, schema in (
        ("Decode", DECODE_FIELDS, DECODE_SCHEMA),
        ("Prefill", PREFILL_FIELDS, PREFILL_SCHEMA),
    ):
        sub = parts.filter(pl.col("which") == which)
        if sub.is_empty():
            out.append(empty(which.lower()))
            continue
        done, rest = _fields_fast(sub, fields, schema)
        frames_ = [done] if done is not None and not done.is_empty() else []
        if not rest.is_empty():
            frames_.append(_fields_general(rest, fields, schema))
        res = pl.concat(frames_, how="vertical_relaxed") if len(frames_) > 1 else frames_[0]
        out.append(res.sort("line") if len(frames_) > 1 else res)
    return out[0], out[1]


def _fields_general(sub: pl.DataFrame, fields: list, schema: dict) -> pl.DataFrame:
    """Key/value fields of metrics lines in any layout: one literal find per known key."""
    r = pl.col("rest")
    cols = []
    known = []
    found = []
    for col, key, _typ in fields:
        known.append(re.escape(key) + r": (?:-?[\d.]+|nan|inf)%?")
        # literal find + short slice: far cheaper than a capture regex per field
        pos = (
            pl.when(r.str.starts_with(key + ": "))
            .then(pl.lit(-2, dtype=pl.Int64))
            .otherwise(r.str.find(", " + key + ": ", literal=True).cast(pl.Int64))
        )
        raw = (
            r.str.slice(pos + len(key) + 4, 32)
            .str.split_exact(",", 0)
            .struct.field("field_0")
            .str.strip_chars(" %")
        )
        dtype = schema[col]
        cols.append(raw.cast(pl.Float64, strict=False).cast(dtype, strict=False).alias(col))
        found.append(pos.is_not_null().cast(pl.Int32))
    graph = r.str.extract(r"(?:^|, )" + GRAPH_KEY + r": (True|False)", 1)
    known.append(GRAPH_KEY + r": (?:True|False)")
    cols.append((graph == "True").alias("cuda_graph"))
    found.append(graph.is_not_null().cast(pl.Int32))
    # segments not matched by a known key go to `extra` (kept, never dropped)
    nseg = r.str.strip_chars_end(", ").str.count_matches(", ", literal=True) + 1
    cols.append((nseg - pl.sum_horizontal(found)).alias("_unknown"))
    sub = sub.with_columns(cols)
    if (sub["_unknown"].max() or 0) > 0:  # all-null when no line kept its head
        leftover = r.str.replace_all(r"(?:^|, )(?:" + "|".join(known) + r")", "").str.strip_chars(
            ", "
        )
        sub = sub.with_columns(
            pl.when(pl.col("_unknown") > 0)
            .then(leftover)
            .otherwise(None)
            .map_elements(_extra_json, return_dtype=pl.String)
            .alias("extra")
        )
    else:
        sub = sub.with_columns(pl.lit(None, dtype=pl.String).alias("extra"))
    return sub.select([pl.col(c).cast(dt_) for c, dt_ in schema.items()])


def _json_value(v: pl.Expr) -> pl.Expr:
    numeric = v.str.contains(r"^-?\d+(?:\.\d+)?(?:e[-+]?\d+)?$")
    quoted = (
        pl.lit('"')
        + v.str.replace_all("\\", "\\\\", literal=True).str.replace_all('"', '\\"', literal=True)
        + pl.lit('"')
    )
    return pl.when(numeric).then(v).otherwise(quoted)


def _fields_fast(
    sub: pl.DataFrame, fields: list, schema: dict
) -> tuple[pl.DataFrame | None, pl.DataFrame]:
    """The common case: every line has the key layout of the first one (one run, one version).

    One ``splitn`` per line and a prefix check per key, instead of a search per key. Lines
    that do not fit the layout are returned for the general path.
    """
    first = sub["rest"].drop_nulls().head(1).to_list()
    if not first:
        return None, sub
    segs = [x for x in first[0].rstrip().rstrip(",").split(", ") if x]
    keys = [seg.partition(": ")[0] for seg in segs]
    if not keys or any(not k or ": " not in seg for k, seg in zip(keys, segs)):
        return None, sub
    n = len(keys)
    split = sub.with_columns(
        pl.col("rest").str.strip_chars_end(", ").str.splitn(", ", n).alias("_s")
    ).unnest("_s")
    names = [f"field_{i}" for i in range(n)]
    ok = pl.all_horizontal(
        [pl.col(c).str.starts_with(k + ": ").fill_null(False) for c, k in zip(names, keys)]
        + [~pl.col(names[-1]).str.contains(", ", literal=True).fill_null(True)]
    )
    split = split.with_columns(ok.alias("_ok"))
    good = split.filter(pl.col("_ok"))
    bad = sub.filter(split["_ok"].not_())
    if good.is_empty():
        return None, sub
    by_key = {k: (c, len(k) + 2) for c, k in zip(names, keys)}
    cols = []
    for col, key, _typ in fields:
        if key in by_key:
            c, off = by_key[key]
            v = pl.col(c).str.slice(off).str.strip_chars(" %")
            cols.append(v.cast(pl.Float64, strict=False).cast(schema[col], strict=False).alias(col))
        else:
            cols.append(pl.lit(None, dtype=schema[col]).alias(col))
    graph = [k for k in keys if re.fullmatch(GRAPH_KEY, k)]
    if graph:
        c, off = by_key[graph[0]]
        cols.append((pl.col(c).str.slice(off) == "True").alias("cuda_graph"))
    else:
        cols.append(pl.lit(None, dtype=pl.Boolean).alias("cuda_graph"))
    known = {key for _, key, _ in fields} | set(graph)
    unknown = [k for k in keys if k not in known]
    if unknown:
        parts_ = []
        for i, k in enumerate(unknown):
            c, off = by_key[k]
            parts_ += [
                pl.lit(("{" if i == 0 else ", ") + json.dumps(k) + ": "),
                _json_value(pl.col(c).str.slice(off).str.strip_chars_end("%")),
            ]
        parts_.append(pl.lit("}"))
        cols.append(pl.concat_str(parts_).alias("extra"))
    else:
        cols.append(pl.lit(None, dtype=pl.String).alias("extra"))
    done = good.with_columns(cols).select([pl.col(c).cast(dt_) for c, dt_ in schema.items()])
    return done, bad


_JSON_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def _extra_json(s: str | None) -> str | None:
    """Unknown ``key: value`` segments as a JSON object, numbers kept as the log wrote them
    (the same text ``_fields_fast`` builds, so both paths store identical rows)."""
    if not s:
        return None
    items: list[str] = []
    unparsed: list[str] = []
    for seg in s.split(", "):
        k, sep, v = seg.partition(": ")
        if not sep:
            unparsed.append(seg)
            continue
        v = v.rstrip("%")
        value = v if _JSON_NUMBER.fullmatch(v) else json.dumps(v, ensure_ascii=False)
        items.append(f"{json.dumps(k, ensure_ascii=False)}: {value}")
    if unparsed:
        items.append('"_unparsed": ' + json.dumps(unparsed, ensure_ascii=False))
    return "{" + ", ".join(items) + "}"


def _find_eol(buf: bytes, cr: bool) -> int:
    """The first line end (``\\n``; with lone-CR endings ``\\r`` too), or -1."""
    nl = buf.find(b"\n")
    if cr:
        r = buf.find(b"\r")
        if r >= 0 and (nl < 0 or r < nl):
            return r + 1 if buf[r + 1 : r + 2] == b"\n" else r
    return nl


def _rfind_eol(buf: bytes, cr: bool) -> int:
    """The last line end, or -1. With lone-CR endings a ``\\r`` at the very end of the bytes
    may be the first half of ``\\r\\n``: it waits for the next byte."""
    nl = buf.rfind(b"\n")
    if not cr:
        return nl
    r = buf.rfind(b"\r", 0, len(buf) - 1)
    return max(nl, r)


def _to_dt(ts: str | None) -> dt.datetime | None:
    if ts is None:
        return None
    try:
        return dt.datetime.fromisoformat(ts)
    except ValueError:
        return None


def parse_bytes(data: bytes, source: str = "", *, name_pattern: str | None = None) -> Frames:
    """Parse a whole log held in memory."""
    p = LogParser(source, name_pattern=name_pattern)
    return Frames.concat([p.feed(data), p.finish()])


def parse_text(text: str, source: str = "", *, name_pattern: str | None = None) -> Frames:
    return parse_bytes(
        text.encode("utf-8", errors="surrogateescape"), source, name_pattern=name_pattern
    )
