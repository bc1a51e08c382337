"""Texts that look like errors but never explain a failure (data), and their matcher."""

from __future__ import annotations

import re

# Routine lines: error-looking texts SGLang and its environment print in healthy runs. They
# never explain a failure, wherever they appear ("why" says what they are). A `whole_line`
# entry is routine even when the line also holds a signature's words ("Ignore import error when
# loading x: No module named y" is not an import error of the server).
NOISE: list[dict[str, str]] = [
    {
        "id": "triton_diagnostic",
        "pattern": r"^(?:[\w/.\-]+:\d+:\d+: )?error: .*(?:triton|tt\.|ttg\.|mlir|"
        r"operation scheduled before its operands|failed to legalize)",
        "why": "a Triton/MLIR compiler diagnostic; the exception that follows (if any) decides",
    },
    {
        "id": "triton_note",
        "pattern": r"^[\w/.\-]+\.py:\d+:\d+: (?:error|note|remark): ",
        "why": "a compiler note pointing into a kernel's source",
    },
    {
        "id": "deprecation",
        "pattern": r"(?i)\bdeprecat|FutureWarning|UserWarning",
        "why": "a deprecation or user warning",
    },
    {
        "id": "tokenizer_state_deleted",
        "pattern": r"but the state was deleted in TokenizerManager",
        "why": "a request finished after its client went away",
    },
    {
        "id": "request_error",
        "pattern": r"^\[http_server\] Error: |^Abort(?:ed)? request",
        "why": "one request failed or was aborted; the server went on",
    },
    {
        "id": "crash_dump_skip",
        "pattern": r"crash dump already performed, skipping",
        "why": "the crash dump of an earlier failure",
    },
    {
        "id": "ignored_import",
        "whole_line": True,
        "pattern": r"Ignore import error when loading ",
        "why": "SGLang imports every model file at start and logs those whose optional "
        "dependency is missing (ModelRegistry); the server goes on",
    },
    {
        "id": "driver_version",
        "whole_line": True,
        "pattern": r"Warning: Driver Version: ",
        "why": "torch_npu's driver-version warning on Ascend hosts",
    },
    {
        "id": "resource_tracker",
        "whole_line": True,
        "proves_exit": True,  # the process tree exited (the run ended, not hung)
        "pattern": r"resource_tracker(?:\.py:\d+: UserWarning)?: There appear to be \d+ leaked|"
        r"resource_tracker: \S+: (?:FileNotFoundError|UserWarning)",
        "why": "multiprocessing's leak report when a process tree exits: it says the run "
        "ended, not why",
    },
    {
        "id": "tbe_subprocess",
        "whole_line": True,
        "pattern": r"TBE Subprocess\[\w+\] raise error",
        "why": "Ascend CANN's kernel-compiler workers reporting that their parent exited",
    },
    {
        "id": "http2_preface",
        "whole_line": True,
        "pattern": r'"PRI \* HTTP/2\.0" \d{3}',
        "why": "an HTTP/2 client probing the HTTP/1.1 server (404)",
    },
]


_NOISE = [(n["id"], re.compile(n["pattern"])) for n in NOISE]


WHOLE_LINE = frozenset(n["id"] for n in NOISE if n.get("whole_line"))


PROVES_EXIT = frozenset(n["id"] for n in NOISE if n.get("proves_exit"))


def noise_kind(text: str) -> str | None:
    """The NOISE id of an error-looking text that never explains a failure, else None."""
    for nid, rx in _NOISE:
        if rx.search(text):
            return nid
    return None
