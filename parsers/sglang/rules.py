"""The rule table of the SGLang parser: every non-metrics line kind, as data.

``RULES`` is a list of ``Rule`` rows (name, pattern on the message, stage, kind) that also carry
what the parser does with a line of theirs: ``starts_run`` (a new launch appended to the file),
``event`` (the scope and detail of a stage event: parsers/sglang/stages.py), ``edged`` (the stage
gets the ``_begin`` / ``_end`` of the line), ``style`` (a version tag the line proves) and
``content`` (whether the line alone makes a run worth a row). The kind decides the rest:
``config`` lines carry the server arguments, ``traceback`` lines open one, ``error`` lines are
error rows. A new SGLang line is a new row (and a fixture), not new code.

``match_rule`` finds a message's rule (the first in table order); ``stage_of`` the stage a raw
line marks, for code that follows a log live.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics_parsers.prefixes import PrefixFinder
from forensics_parsers.secret_search import LazyRegex
from forensics_parsers.sglang import stages as E

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
# Rules for non-metrics lines. kind: stage | config | error | traceback | warning | info |
# access | progress | usage | noise. The first matching rule wins; order matters only where
# patterns overlap.
# --------------------------------------------------------------------------------------
QUIET_KINDS = frozenset({"noise", "access", "progress"})  # lines that alone make no run
ACTIVE_KINDS = frozenset({"config", "traceback", "error"})  # lines the parser acts on


@dataclass(frozen=True)
class Rule:
    name: str
    pattern: str
    stage: str | None
    kind: str
    event: Callable[[dict[str, Any], str, str, re.Match[str]], E.Event] | None = None
    edged: bool = False  # the stage is `<stage>_begin` / `<stage>_end` after the line's edge
    starts_run: bool = False  # in a run that has begun, this line begins the next launch
    style: tuple[str, str] | None = None  # (version tag, regex searched on the message)
    content: bool | None = None  # None: every kind but QUIET_KINDS
    # what the line means to a reader of a failure (forensics.classifier): "exit" a process of
    # the tree exited; "consequence" a child failed (says that, not why); "fatal" an error
    # line that ends a launch by itself; "error" an error line that decides only when an exit
    # follows; "hint" a kept line that may carry a catalog signature
    role: str | None = None
    cited_by: str | None = None  # the rule whose line cites instead (a usage dump: its error)
    # the compiled reader reads this rule's lines by the shape of its pattern (native.SHAPES)
    compiled: bool = False

    @property
    def inert(self) -> bool:
        """A line of this rule does nothing but be counted, extend its run and be kept in
        ``lines``: no stage, event, run start, style, configuration, traceback or error row
        (such lines may be read in bulk: parsers/sglang/bulk.py)."""
        return (
            self.stage is None
            and self.event is None
            and not self.starts_run
            and self.style is None
            and self.kind not in ACTIVE_KINDS
        )

    @property
    def marks_content(self) -> bool:
        return self.kind not in QUIET_KINDS if self.content is None else self.content

    def line_stage(self, msg: str) -> str | None:
        """The stage a message of this rule marks."""
        if self.edged and self.stage is not None:
            return f"{self.stage}_{E.capture_edge(msg)}"
        return self.stage


RULES: list[Rule] = [
    Rule(
        "server_args",
        r"^server_args=(?P<args>ServerArgs\(.*|\{.*)$",
        "server_args",
        "config",
        starts_run=True,
        style=(">=0.5.19", r"^server_args=\{"),  # the dict form
    ),
    Rule("dist_init_begin", r"^Init torch distributed begin\.", "dist_init_begin", "stage"),
    Rule("dist_init_end", r"^Init torch distributed ends\.", "dist_init_end", "stage"),
    Rule("nccl_version", r"^sglang is using nccl==", None, "info"),
    Rule(
        "load_begin",
        r"^Load weight begin\.",
        "load_begin",
        "stage",
        event=E.load_begin,
        style=(">=0.5.9", r"elapsed="),
    ),
    Rule(
        "load_end",
        r"^Load weight end\.",
        "load_end",
        "stage",
        event=E.load_end,
        style=(">=0.5.9", r"elapsed="),
    ),
    Rule(
        "kv_pool",
        r"^(?:\w+ )?KV Cache (?:is allocated|VA upper bound)\.",
        "kv_pool",
        "stage",
        event=E.kv_pool,
    ),
    Rule("post_capture_kv", r"^Post-capture KV sizing:", "kv_pool", "stage"),
    Rule("mamba_pool", r"^Mamba Cache is allocated\.", "kv_pool", "stage"),
    Rule("pool_end", r"^Memory pool end\.", "pool_end", "stage", event=E.pool_end),
    Rule(
        "capture_edge",
        r"^Capture (?P<scope>(?:target verify|target decode|target prefill|draft decode|draft extend|draft verify|draft prefill|draft|piecewise|UNO tree draft|Frozen-KV MTP draft) )?(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU|musa) graph (?:begin|end)\b",
        "capture",
        "stage",
        event=E.capture,
        edged=True,
        # a scope named, and `CUDA graph` capitalised: 0.5.14 and later
        style=(
            ">=0.5.14",
            r"^Capture (?!(?:cuda|CUDA|cpu|CPU|npu|NPU|xpu|XPU|musa) graph )(?=.*CUDA graph)",
        ),
    ),
    Rule("capture_bs_list", r"^Capture (?:cuda|cpu) graph bs \[", None, "info"),
    Rule(
        "capture_failed",
        r"Capture (?:cuda|CUDA|CPU|cpu|prefill CUDA) graph failed: ",
        None,
        "error",
    ),
    Rule(
        "capture_progress",
        r"^Capturing (?:batches|prefill shape|num tokens)\b",
        "capture_progress",
        "progress",
        event=E.capture_progress,
        content=True,  # a capture that stalls shows only these
    ),
    Rule(
        "shard_progress",
        r"^(?:Loading (?:safetensors|pt|np_cache) checkpoint shards|Multi-thread loading shards|Loading safetensors using)",
        None,
        "progress",
    ),
    Rule("bare_progress", r"^\s*\d+%\|", None, "progress"),
    Rule("capacity", r"^max_total_num_tokens=\d+", "capacity", "stage", event=E.capacity),
    Rule("uvicorn_started", r"^INFO: +Uvicorn running on ", "uvicorn_started", "stage"),
    Rule(
        "uvicorn_startup",
        r"^INFO: +(?:Started server process|Waiting for application startup|Application startup complete)",
        None,
        "info",
    ),
    Rule("uvicorn_shutdown_begin", r"^INFO: +Shutting down", "shutdown_begin", "stage"),
    Rule(
        "uvicorn_shutdown_end",
        r"^INFO: +(?:Finished server process|Application shutdown complete)",
        "shutdown_end",
        "stage",
    ),
    Rule("uvicorn_shutdown_wait", r"^INFO: +Waiting for application shutdown", None, "info"),
    Rule(
        "uvicorn_access",
        r"^INFO: +\S+ - \"[A-Z]+ \S+ HTTP/[\d.]+\" \d{3}",
        None,
        "access",
        compiled=True,
    ),
    Rule(
        "bind_error",
        r"^ERROR: +\[Errno \d+\] error while attempting to bind on address",
        None,
        "error",
        role="fatal",
    ),
    Rule("uvicorn_error", r"^ERROR: +", None, "error"),
    Rule("uvicorn_warning", r"^WARNING: +", None, "warning", role="hint", compiled=True),
    Rule("ready", r"^The server is fired up and ready to roll!", "ready", "stage"),
    Rule(
        "warmup",
        r"^(?:Start of (?:prefill|pd disaggregation) warmup|End of (?:prefill warmup|disaggregation warmup))",
        "warmup",
        "stage",
    ),
    Rule("weights_ready", r"^Weights are ready after ", None, "info"),
    Rule(
        "sigterm",
        r"^SIGTERM received\. .*Draining requests and shutting down",
        "shutdown_begin",
        "stage",
    ),
    Rule("graceful_exit", r"^Gracefully exiting\.\.\. ", "shutdown_end", "stage"),
    Rule(
        "child_exception",
        r"^(?P<component>\w+) hit an exception: ?(?P<rest>.*)$",
        None,
        "traceback",
    ),
    Rule("traceback_start", r"^Traceback \(most recent call last\):\s*$", None, "traceback"),
    Rule(
        "sigquit",
        r"^(?:Received sigquit from a child proc(?:es|ess)\.|SIGQUIT received\. )",
        None,
        "error",
        role="exit",
    ),
    Rule(
        "scheduler_dead",
        r"Rank \d+ scheduler (?:is dead|died during initialization)",
        None,
        "error",
        role="consequence",
    ),
    Rule("exit_code", r"^Exit code: -?\d+", None, "error", role="exit"),
    Rule("init_failed", r"^Initialization failed\. ", None, "error", role="consequence"),
    Rule(
        "subprocess_crash",
        r"^(?:Subprocess .+ \(pid=\d+\) crashed with exit code -?\d+|Child process unexpectedly failed with)",
        None,
        "error",
        role="exit",
    ),
    Rule(
        "watchdog",
        r"^(?:\w+ watchdog timeout|Watchdog timeout) \(self\.watchdog_timeout=",
        None,
        "error",
    ),
    Rule("health_failed", r"^Health check failed\. ", None, "error"),
    Rule(
        "nccl_watchdog",
        r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*(?:timeout|Timeout)",
        None,
        "error",
    ),
    Rule(
        "cuda_error",
        r"CUDA error: |CUDA out of memory|illegal memory access|device-side assert",
        None,
        "error",
    ),
    Rule(
        "oom_error",
        r"(?:OutOfMemoryError|Not enough memory\. Please try to increase --mem-fraction-static)",
        None,
        "error",
    ),
    Rule("nccl_error", r"NCCL error", None, "error"),
    Rule(
        "port_wait",
        r"^port \d+ is in use\. Waiting|^Port is already in use\.",
        None,
        "error",
        role="hint",
    ),
    # `usage: launch_server.py [-h] ...` (not a wrapped `token usage: 0.37` piece)
    Rule(
        "argparse_usage",
        r"^usage: [\w./-]+(?: [\w./-]+)? [\[-]",
        None,
        "usage",
        starts_run=True,
        role="hint",
        cited_by="argparse_error",
    ),
    Rule("argparse_error", r"^[\w./ -]+: error: ", None, "error", role="fatal"),
    Rule("fatal_python", r"^Fatal Python error: ", None, "error", role="fatal"),
    Rule("flush_cache", r"^Cache (?:flushed successfully|not flushed)", None, "info"),
    Rule("health_shutdown", r"^Health check request received during shutdown", None, "info"),
    Rule("state_deleted", r"but the state was deleted in TokenizerManager", None, "noise"),
    Rule("deprecated", r"(?i)\bdeprecat", None, "noise"),
    Rule(
        "triton_diag",
        r"^(?:[\w/.\-]+:\d+:\d+: )?error: .*(?:triton|tt\.|ttg\.|mlir)",
        None,
        "noise",
    ),
    Rule(
        "args_warning",
        r"^(?:speculative_\w+ is (?:adjusted|set)|Overlap scheduler is disabled|Overlap spec v2|Non-overlap|Spec v[12] |Beta spec is enabled|Max running requests is reset|Mixed chunked prefill is disabled|Speculative token map specified|The overlap scheduler and mixed chunked prefill|DeepSeek MTP does not require)",
        None,
        "warning",
    ),
    Rule(
        "generic_error",
        r"(?i)^(?:error|fatal|critical)\b|\b(?:Error|Exception): ",
        None,
        "error",
        role="error",
    ),
    Rule("generic_warning", r"(?i)^warn(?:ing)?\b|Warning: ", None, "warning", role="hint"),
]
BY_NAME = {r.name: r for r in RULES}
# each rule's own pattern, compiled when find_rule first needs it (a log's lines call for a
# few of them; all 56 took ~2 ms of every process that imports the parser)
_RX = [LazyRegex(r.pattern) for r in RULES]


_STYLE_RX = {r.name: (r.style[0], re.compile(r.style[1])) for r in RULES if r.style}
# A traceback frame line with no open traceback is recorded as the header's line would be.
ORPHAN_FRAME_KIND = BY_NAME["traceback_start"].name


def style_of(rule: Rule, msg: str) -> str | None:
    """The version tag a message of this rule proves, or None."""
    st = _STYLE_RX.get(rule.name)
    return st[0] if st is not None and st[1].search(msg) else None


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


def scoped(pattern: str) -> str:
    """A leading ``(?i)`` becomes a scoped ``(?i:...)`` so patterns can be combined."""
    if pattern.startswith("(?i)"):
        return "(?i:" + pattern[4:] + ")"
    return "(?:" + pattern + ")"


# One combined regex per line instead of one search per rule: the first alternative that
# matches wins, which is the table's order. Rules anchored at ``^`` are tried with one
# ``match``; the others with one ``search`` that only says whether any of them can match.
_ANCHORED = [
    i
    for i, r in enumerate(RULES)
    if all(
        a.lstrip("(?i)").startswith("^") for a in _top_alternatives(r.pattern.removeprefix("(?i)"))
    )
]
_FLOATING = [i for i in range(len(RULES)) if i not in _ANCHORED]
_ANCHORED_RX = re.compile("|".join(f"(?P<r{i}>{scoped(RULES[i].pattern)})" for i in _ANCHORED))
_FLOATING_RX = re.compile("|".join(scoped(RULES[i].pattern) for i in _FLOATING))


def find_rule(msg: str) -> tuple[Rule, re.Match[str]] | None:
    """The first row of RULES (in table order) whose pattern matches a message, and its match."""
    first = len(RULES)
    am = _ANCHORED_RX.match(msg)
    if am is not None:
        first = int(am.lastgroup[1:])
    if _FLOATING_RX.search(msg) is not None:
        for i in _FLOATING:
            if i > first:
                break
            mm = _RX[i].rx.search(msg)
            if mm:
                return RULES[i], mm
    if first < len(RULES):
        return RULES[first], _RX[first].rx.match(msg)
    return None


def match_rule(msg: str) -> tuple[str, re.Match[str], str | None, str] | None:
    """(name, match, stage, kind) of the first rule of RULES that matches a message, or None."""
    found = find_rule(msg)
    if found is None:
        return None
    rule, mm = found
    return rule.name, mm, rule.stage, rule.kind


def stage_of(line: str) -> str | None:
    """The startup stage a raw log line marks (the ``stage`` names of the events frame), or
    None: the same rules as the parser, for code that follows a log live."""
    line = PrefixFinder().strip(line, PREFIX_RX)
    m = PREFIX_RX.match(line)
    msg = line[m.end() :] if m is not None and m.end() else line
    found = find_rule(msg)
    return None if found is None else found[0].line_stage(msg)
