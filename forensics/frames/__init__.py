"""Where in an SGLang server's life a traceback happened: frames -> phase (a table).

Each row names a function (``func``: ``def NAME(`` in SGLang's source) or a source file
(``file``: a path suffix) that a stack passes through only in one part of the server's life,
the phase that part belongs to, what SGLang does there, and the SGLang releases whose wheels
define it (``seen``). The rows were read from the release wheels of SGLang 0.1.14 to 0.5.23
(``pip download --no-deps sglang==X``); ``scripts/check_frames_table.py`` re-checks every
``seen`` against downloaded wheels. Facts only: names and where they run, no code.

Phases, in the order they are tried (the first phase with a matching frame wins, since the
later ones' frames also appear inside the earlier ones' stacks: a capture stack passes through
model init, a serving stack through the model's forward):

* ``teardown``: signal handlers and process-tree kills: a stack that passes through them was
  raised while the server went down (a signal handler runs on top of whatever frame was
  running), so it comes first and never places a failure;
* ``runtime``: the scheduler's event loops and what they call per batch, the detokenizer and
  tokenizer-manager loops, CUDA-graph replay, the watchdog;
* ``capture``: CUDA/NPU/CPU-graph capture, torch.compile, the warm-up request;
* ``load``: distributed init, weight loading, the KV/memory pool, the attention backend's
  buffers, worker and model-runner construction;
* ``forward``: the model's own forward pass (model files, layers, kernels) with nothing above
  it that says who called it: a forward pass runs after loading (capture, warm-up or serving),
  so it places the failure at capture or later but does not decide which;
* ``pre-exec``: argument parsing and validation, config/tokenizer lookup, the launcher itself.
"""

from __future__ import annotations

import re
from typing import Any

from forensics.frames.capture import CAPTURE
from forensics.frames.forward import FORWARD
from forensics.frames.load import LOAD
from forensics.frames.preexec import PRE_EXEC
from forensics.frames.runtime import RUNTIME
from forensics.frames.teardown import TEARDOWN

VERSIONS = ("0.1.14", "0.1.24", "0.2.15", "0.3.6", "0.4.0", "0.4.6", "0.5.2", "0.5.9", "0.5.23")
ORDER = ("teardown", "runtime", "capture", "load", "forward", "pre-exec")

# The rows, phase by phase (one module each): func or file, phase, where, seen.
FRAMES: list[dict[str, Any]] = [*TEARDOWN, *RUNTIME, *CAPTURE, *LOAD, *FORWARD, *PRE_EXEC]

# Function-name patterns (families whose members are named by a prefix): same fields.
FAMILIES: list[dict[str, Any]] = [
    {
        "func": r"event_loop\w*",
        "phase": "runtime",
        "where": "any event loop (scheduler, detokenizer, DP controller)",
    },
    {"func": r"process_batch_result\w*", "phase": "runtime", "where": "batch-output handlers"},
    {"func": r"load_weights\w*|weight_loader\w*", "phase": "load", "where": "weight loaders"},
    {"func": r"init_kv_cache\w*", "phase": "load", "where": "KV cache init"},
    {"func": r"warmup\w*", "phase": "capture", "where": "warm-up of kernels or the server"},
    {
        "func": r"_handle_\w+",
        "phase": "pre-exec",
        "where": "ServerArgs' per-feature argument handling",
    },
    {
        "func": r"_compile\w*",
        "phase": "capture",
        "where": "torch.compile / kernel compile at capture",
    },
]


def _compile() -> list[tuple[str, str, re.Pattern[str]]]:
    out = []
    for row in FRAMES:
        if "func" in row:
            out.append((row["phase"], "func", re.compile(rf"^{re.escape(row['func'])}$")))
        else:
            out.append((row["phase"], "file", re.compile(re.escape(row["file"]))))
    for row in FAMILIES:
        out.append((row["phase"], "func", re.compile(rf"^(?:{row['func']})$")))
    return sorted(out, key=lambda t: (ORDER.index(t[0]), t[1] != "func"))


_RULES = _compile()


def phase_of(frames: list[tuple[str, str]]) -> str | None:
    """The phase of a stack (``(file, function)`` pairs): the first phase of ``ORDER`` with a
    matching frame (function rules before file rules); None when no frame is known."""
    for phase, kind, rx in _RULES:
        for f, fn in frames:
            if rx.search(fn if kind == "func" else f.replace("\\", "/")):
                return phase
    return None


def phase_of_frame(file: str, func: str) -> str | None:
    return phase_of([(file, func)])
