"""Lines that never decide, by where they are (the NOISE table says which texts never do), and which errors are fatal."""

from __future__ import annotations

from typing import Any

from forensics.classifier.phases import (
    CONSEQUENCE_KINDS,
    ERROR_KINDS,
    EXIT_KINDS,
    FATAL_KINDS,
    HARNESS_FRAME,
    SHUTDOWN_STAGES,
    TEARDOWN,
)
from forensics.classifier.records import Analysis, ErrorRec, _frame_phase


def _server_frames(e: ErrorRec) -> bool:
    return any(not HARNESS_FRAME.search(f) for f, _ in e.frames)


def _before_server(a: Analysis, e: ErrorRec) -> bool:
    return (
        a.first_server_line is not None
        and e.ts is None
        and e.last_line < a.first_server_line
        and not (e.frames and _server_frames(e))
    )


def _after_shutdown(a: Analysis, e: ErrorRec) -> bool:
    return any(st in SHUTDOWN_STAGES and li < e.line for st, _, li in a.stages)


def _harness(a: Analysis, e: ErrorRec) -> bool:
    return bool(e.frames) and not _server_frames(e)


def _client_after_serving(a: Analysis, e: ErrorRec) -> bool:
    return (
        bool(a.served_lines)
        and e.line > a.served_lines[0][0]
        and e.ts is None
        and not e.frames
        and not e.hits
        and e.kind not in CONSEQUENCE_KINDS
    )


def _teardown(a: Analysis, e: ErrorRec) -> bool:
    return bool(e.frames) and _frame_phase(e.frames) == TEARDOWN


def _after_harness(a: Analysis, e: ErrorRec) -> bool:
    return a.harness_end is not None and e.line > a.harness_end


def _harness_after_proof(a: Analysis, e: ErrorRec) -> bool:
    return (
        bool(a.proof_lines)
        and e.line > a.proof_lines[0][0]
        and any(HARNESS_FRAME.search(f) for f, _ in e.frames)
    )


def _kept_serving(a: Analysis, e: ErrorRec) -> bool:
    return any(li > e.last_line and (not e.rank or r == e.rank) for li, r in a.served_lines)


# Where an error-looking line never decides, whatever it says: (id, why, test), in order.
ROUTINE_CONTEXT: list[tuple[str, str, Any]] = [
    (
        "before_server",
        "printed before the server's own output (a harness, pip, a shell)",
        _before_server,
    ),
    ("after_shutdown", "printed after the server was asked to shut down", _after_shutdown),
    ("harness", "a test harness's or client's traceback (no frame of the server)", _harness),
    (
        "teardown",
        "raised while the server tore itself down (a signal handler, kill_process_tree)",
        _teardown,
    ),
    (
        "client_after_serving",
        "an untagged error after the server served: its client's or harness's",
        _client_after_serving,
    ),
    ("kept_serving", "the server went on serving after it (one request failed)", _kept_serving),
    ("after_harness", "printed after the test harness finished (kubectl, a shell)", _after_harness),
    (
        "harness_after_serving",
        "a traceback through a test harness after a client's results proved serving",
        _harness_after_proof,
    ),
]


def _routine(a: Analysis, e: ErrorRec) -> str | None:
    """Why ``e`` never decides the verdict (a NOISE id or a ROUTINE_CONTEXT id), else None."""
    if e.noise:
        return e.noise
    for rid, _, test in ROUTINE_CONTEXT:
        if test(a, e):
            return rid
    return None


def _is_fatal(a: Analysis, e: ErrorRec) -> bool:
    """An error decides only if fatal: a traceback's exception, a fatal signature, an exit."""
    if e.routine:
        return False
    if e.kind in CONSEQUENCE_KINDS:
        return False  # consequences: they say a child failed, not why
    if e.hits:
        return True
    if a.ready_line is not None and e.line > a.ready_line:
        # after ready, an error matters when the server stopped afterwards
        followed = any(x.line > e.line and x.kind in EXIT_KINDS for x in a.errors)
        return followed or e.component != "" or e.line >= a.last_line - 40
    if e.kind in ERROR_KINDS and not e.exc_type:
        # an error line no entry knows (`error: ...` of any tool) decides only if the
        # process then exited
        return any(x.line > e.line and x.kind in EXIT_KINDS for x in a.errors)
    return e.kind in FATAL_KINDS or bool(e.exc_type)


def _consequences(a: Analysis) -> list[ErrorRec]:
    return [e for e in a.errors if e.kind in CONSEQUENCE_KINDS and not e.routine]
