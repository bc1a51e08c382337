"""The server's life as the classifier reads it: phases, stages, and what each proves."""

from __future__ import annotations

import re

from forensics import frames as frames_table
from forensics import signatures as sigs
from forensics_parsers.sglang import RULES

PHASES = sigs.PHASES


STALE_S = 300.0  # a log untouched this long while mid-stage counts as hung


# Where on the stack a traceback happened -> phase: the table of forensics/frames.py, read from
# SGLang's own source (every release wheel 0.1.14 .. 0.5.23).
FRAME_PHASES = frames_table.FRAMES
TEARDOWN = "teardown"  # the frames phase of a server going down (forensics/frames/teardown.py)


# Stage in force -> phase (the last stage line seen before the failure).
STAGE_PHASE: dict[str, str] = {
    "server_args": "load",
    "dist_init_begin": "load",
    "dist_init_end": "load",
    "load_begin": "load",
    "load_end": "load",
    "kv_pool": "load",
    "pool_end": "load",
    "capture_begin": "capture",
    "capture_progress": "capture",
    "capture_end": "capture",
    "capacity": "capture",
    "uvicorn_started": "capture",
    "warmup": "capture",
    "ready": "runtime",
    "serving": "runtime",
}


STAGE_ORDER = list(STAGE_PHASE)
# Stage in force -> later stage lines that do not replace it: a PD-disaggregation server prints
# "End of prefill disaggregation mode warmup" after "The server is fired up and ready to roll!"
# (its warm-up requests finish after ready); the server is serving, not back in warm-up.
STAGE_KEEPS: dict[str, frozenset[str]] = {"ready": frozenset({"warmup"})}


# The server's life, in order: a failure is never earlier than the furthest stage the log
# proves was reached (a decode/prefill line proves serving, a capture line that loading ended).
LIFE = ("pre-exec", "load", "capture", "runtime")


# Stage reached -> the earliest phase a later failure can be in. The `server_args` line proves
# nothing more than pre-exec: some argument checks run after it is printed.
STAGE_FLOOR = {st: ph for st, ph in STAGE_PHASE.items() if st != "server_args"}


SHUTDOWN_STAGES = ("shutdown_begin", "shutdown_end")


# stages printed at the end of startup: metrics lines after them but before "ready" are the
# warm-up request's
WARMUP_AFTER = ("capture_end", "capacity", "uvicorn_started", "warmup")


# What a line kind (the parser's rule name, the ``kind`` of errors and lines) means here, from
# the rule table's ``role`` column (forensics_parsers.sglang.RULES): "exit" a process of the
# tree exited (SIGQUIT chain, an exit code, a crashed subprocess); "consequence" a child
# failed; "fatal" an error line that ends a launch by itself; "hint" a kept line that may
# carry a catalog signature; "error" an error line that decides only when an exit follows it. ``cited_by``: the error line that cites for a line (argparse's
# error, not its usage dump).
_ROLE = {r.name: r.role for r in RULES if r.role}
EXIT_KINDS = frozenset(k for k, role in _ROLE.items() if role == "exit")
# lines that only follow a failure: they say a child failed, not why
CONSEQUENCE_KINDS = EXIT_KINDS | {k for k, role in _ROLE.items() if role == "consequence"}
FATAL_KINDS = frozenset({"traceback"} | {k for k, role in _ROLE.items() if role == "fatal"})
# error lines no catalog entry knows that decide only when the process then exited
ERROR_KINDS = frozenset(k for k, role in _ROLE.items() if role == "error")
HINT_KINDS = frozenset({"unknown", "usage"} | {k for k, role in _ROLE.items() if role == "hint"})
ACCESS_KINDS = frozenset(r.name for r in RULES if r.kind == "access")  # HTTP access lines
CITED_BY = {r.name: r.cited_by for r in RULES if r.cited_by}


# frames of a test harness or an HTTP client, never of the server
HARNESS_FRAME = re.compile(
    r"(?:^|/)(?:unittest|_pytest|pytest|requests|urllib3|aiohttp|httpx|openai)/|/sglang/test/|"
    r"(?:^|/)test_\w*\.py$|(?:^|/)bench_serving\.py$"
)


def _later(a: str | None, b: str | None) -> str | None:
    """The later of two phases of the server's life (None counts as no constraint)."""
    if a not in LIFE:
        return b if b in LIFE else a
    if b not in LIFE:
        return a
    return a if LIFE.index(a) >= LIFE.index(b) else b
