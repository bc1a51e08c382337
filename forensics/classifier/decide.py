"""The rules' verdict of one analysed run: cause, phase, basis, signature."""

from __future__ import annotations

import time

from forensics import signatures as sigs
from forensics.classifier.cite import _evidence
from forensics.classifier.phases import (
    ACCESS_KINDS,
    CONSEQUENCE_KINDS,
    LIFE,
    STAGE_FLOOR,
    STAGE_KEEPS,
    STAGE_PHASE,
    STALE_S,
    _later,
)
from forensics.classifier.records import Analysis, ErrorRec, _frame_phase
from forensics.classifier.routine import _consequences, _is_fatal


def _stage_at(a: Analysis, line: int | None) -> str | None:
    """The stage in force at ``line`` (the whole log if None): the last one printed, unless it
    is one the stage before it outlives (STAGE_KEEPS), or "serving" once it served."""
    last = None
    for st, _, li in a.stages:
        if line is not None and li > line:
            break
        if st in STAGE_PHASE and st not in STAGE_KEEPS.get(last or "", ()):
            last = st
    if a.served and (line is None or a.ready_line is not None):
        if line is None or (a.ready_line is not None and line > a.ready_line):
            last = "serving"
    return last


def _floor(a: Analysis, line: int | None, rank: str = "") -> str | None:
    """The phase the log proves was reached before ``line`` (the whole log if None).

    A rank's failure is placed by that rank's own stages when the log has them (one rank can
    be capturing while another still loads)."""
    ranked = rank and any(a.stage_ranks.get(li) for _, _, li in a.stages)
    stages = [
        (st, li)
        for st, _, li in a.stages
        if (line is None or li < line) and (not ranked or a.stage_ranks.get(li, "") in ("", rank))
    ]
    # the stage in force (the last one), not the furthest: an EAGLE/MTP draft model loads
    # after the target's graphs were captured, and that is loading again
    placed = [STAGE_FLOOR[st] for st, _ in stages if st in STAGE_FLOOR]
    out = placed[-1] if placed else None
    served = [li for li, r in a.served_lines if a.served and (line is None or li < line)]
    if served or (a.ready_line is not None and (line is None or a.ready_line < line)):
        out = "runtime"
    return out


def _find_cause(a: Analysis) -> tuple[ErrorRec | None, sigs.Hit | None]:
    """The error that decides (the best-signed fatal one, else the first traceback), and its
    best signature hit."""
    fatal = [e for e in a.errors if _is_fatal(a, e)]
    if fatal:
        hitters = [e for e in fatal if e.hits]
        if hitters:
            best = max(hitters, key=lambda e: (sigs.best(e.hits).signature.priority, -e.line))
            return best, sigs.best(best.hits)
        tbs = [e for e in fatal if e.kind == "traceback" or e.exc_type]
        # the first that says what was raised (a piece of a broken-up traceback may not)
        tbs.sort(key=lambda e: (not e.exc_type, e.line))
        return (tbs[0] if tbs else fatal[0]), None
    # a scheduler that died without a Python error: the consequences are the only evidence
    cons = [e for e in _consequences(a) if e.hits]
    if cons:
        return cons[0], sigs.best(cons[0].hits)
    return None, None


def _place_without_cause(a: Analysis) -> tuple[str | None, bool, str]:
    """(phase, hung, basis) of a run with no deciding error: served, or the stage in force."""
    if a.served or a.ready_line is not None:
        return "ok", False, "served_end" if _served_to_the_end(a) else "served_open"
    if not a.stages:
        return None, False, ""
    phase = _later(STAGE_PHASE.get(_stage_at(a, None) or ""), a.floor)
    hung = not a.shutdown and not a.ended and _stale(a)
    if a.other_tail:
        # the server's lines stop, then another program's text follows (a shell, a harness):
        # what stopped the server is not in this log
        return phase, hung, "stopped_then_text"
    return phase, hung, "stage" if a.floor else "weak"


def _frames_or_stage(a: Analysis, sig: sigs.Signature | None) -> tuple[str | None, str]:
    """(phase, basis) from the cause's frames, else the stage in force, else the signature's
    usual phase."""
    fp = a.frame_phase
    if sig is not None and sig.phase_from == "stage" and a.stages:
        fp = None
    if fp == "runtime" and _started(a) and a.ready_line is None:
        fp = "capture"  # the warm-up request ran the model before "ready"
    if fp == "forward":
        fp = "capture"  # a forward pass before serving: capture or warm-up
    phase = fp or a.stage_phase
    basis = "frames" if fp and a.frame_phase != "forward" else ""
    if a.frame_phase == "forward":
        basis = "forward"
    if phase is None and sig is not None and sig.phase:
        phase, basis = sig.phase, "signature_weak"
    if phase is None and a.stages and not a.ready_line:
        phase = "load"
    if not basis and a.stage_phase:
        basis = "stage"
    return phase, basis


def _place_cause(
    a: Analysis, cause: ErrorRec, sig: sigs.Signature | None
) -> tuple[str | None, bool, str]:
    """(phase, hung, basis) of a run whose ``cause`` decides, never earlier than its floor."""
    if sig is not None and sig.phase == "cleanup":
        phase, basis = "cleanup", "signature"
    elif a.ready_line is not None and cause.line > a.ready_line:
        phase, basis = "runtime", "served"
    elif sig is not None and sig.phase in ("pre-exec", "load", "capture"):
        phase, basis = sig.phase, "signature"
    else:
        phase, basis = _frames_or_stage(a, sig)
    if phase in LIFE and a.floor and _later(phase, a.floor) != phase:
        phase, basis = a.floor, "stage"
    elif phase in LIFE and a.floor == phase and basis in ("forward", "signature_weak", ""):
        basis = "stage"
    hung = bool(sig and sig.hung) and not (sig.raised_not_hung and cause.kind == "traceback")
    return phase, hung, basis


def _signature(
    a: Analysis, sig, cause: ErrorRec | None, phase: str | None, hung: bool
) -> str | None:
    """The verdict's signature: the hit's, refined by the phase and the frames (the catalog's
    ``refine`` / ``refine_frames``), else an unknown template or a stall."""
    sid = sig.id if sig else None
    if sid and phase:
        sid = _refine(a, sid, phase)
    now = sigs.BY_ID.get(sid or "")
    if now is not None and cause is not None:
        fns = [fn for _, fn in cause.frames]
        sid = next((to for rx, to in now.refine_frames if any(map(rx.search, fns))), sid)
    if sid in sigs.BY_ID and sigs.BY_ID[sid].causes and cause is not None:
        c = sigs.capture_cause(cause.text + "\n" + cause.message)
        a.capture_cause = c["id"] if c else "other"
    if sid is None and cause is not None and phase != "ok":
        sid = sigs.unknown_id(_unknown_text(cause))
    if sid is None and phase in ("load", "capture", "pre-exec") and hung:
        sid = f"stalled_{phase.replace('-', '_')}"
    return sid


def _decide(a: Analysis) -> None:
    """The rules' verdict of ``a``: cause, phase, hung, basis, signature and evidence."""
    cause, hit = _find_cause(a)
    a.cause, a.hit = cause, hit
    sig = hit.signature if hit else None
    a.frame_phase = _frame_phase(cause.frames) if cause else None
    a.stage_phase = STAGE_PHASE.get(_stage_at(a, cause.line if cause else None) or "")
    a.floor = _floor(a, cause.line if cause else None, cause.rank if cause else "")
    a.ended = a.shutdown or any(
        e.noise in sigs.PROVES_EXIT or e.kind in CONSEQUENCE_KINDS for e in a.errors
    )
    if a.host_findings and (cause is None or sig is None or sig.holders_explain):
        # a paste of nvidia-smi / fuser / ps: GPUs held by processes, not a server's log
        a.cause, a.hit, a.rule_phase, a.rule_hung = None, None, "cleanup", False
        a.basis = sigs.FOREIGN_BASIS[a.foreign] if a.foreign else "evidence"
        a.decided, a.signature = True, sigs.HOST_EVIDENCE.id
        a.evidence = [
            {"line": f["line"], "text": f["text"].strip()[:300], "pid": f["pid"]}
            for f in a.host_findings[:6]
        ]
        return
    phase, hung, basis = _place_without_cause(a) if cause is None else _place_cause(a, cause, sig)
    a.rule_phase, a.rule_hung = phase, hung
    # another server's log, or no log at all (signatures.NOT_SGLANG's basis): none places it
    a.basis = sigs.FOREIGN_BASIS[a.foreign] if a.foreign else (basis or "none")
    a.decided = a.basis in DECIDING
    a.signature = _signature(a, sig, cause, phase, hung)
    a.evidence = _evidence(a)


# What placed a verdict -> whether it is decided and how sure it is. The confidences are
# measured (docs/diagnose.md: the real corpus and our own sets), not fitted per file.
BASIS_CONFIDENCE: dict[str, float] = {
    "served_end": 0.96,  # served, then the log shows its end (shutdown, exit, the client's result)
    "served": 0.94,  # a fatal error after the server served
    "signature": 0.92,  # a catalog signature with a fixed phase
    "frames": 0.92,  # the traceback's frames place it (forensics/frames.py)
    "stage": 0.92,  # the stages the log proves were reached place it
    "evidence": 0.9,  # nvidia-smi / fuser / ps show the GPUs held by other processes
    "signature_weak": 0.7,  # a signature's usual phase (a watchdog: serving), no stage or frame
    "forward": 0.65,  # a forward pass with nothing above it: capture or later
    "served_open": 0.6,  # served and no error, but the log stops while serving
    "stopped_then_text": 0.5,  # the server's lines stop mid-stage, other text follows
    "weak": 0.45,
    "none": 0.35,  # nothing places it: the likeliest phase
    "foreign": 0.3,  # not an SGLang server log (signatures.NOT_SGLANG)
    "not_sglang": 0.9,  # no line of SGLang's nor of a launch: sure it is no log, no phase
}
# Bases that place no phase at all: the verdict's phase is None (no model guess).
UNPLACED = ("not_sglang",)


DECIDING = ("served_end", "served", "signature", "frames", "stage", "evidence")


def _started(a: Analysis) -> bool:
    """The log shows the server's startup (a load or capture stage), not only its tail."""
    return any(STAGE_FLOOR.get(st) in ("load", "capture") for st, _, _ in a.stages)


def _served_to_the_end(a: Analysis) -> bool:
    """Served, and the log shows the run's end: a shutdown, an exit, or more of the log
    (its client's or harness's output) after the server's last metrics line."""
    if a.ended:
        return True
    last = a.served_lines[-1][0] if a.served_lines else (a.ready_line or 0)
    after = [li for li, k, _ in a.lines if li > last and k not in ACCESS_KINDS]
    return len(after) >= 3


def _in_capture(a: Analysis) -> bool:
    """The failure happened inside a CUDA-graph capture (not the warm-up request)."""
    at = _stage_at(a, a.cause.line if a.cause else None)
    return a.frame_phase == "capture" or at in ("capture_begin", "capture_progress")


def _refine(a: Analysis, sid: str | None, phase: str) -> str | None:
    """The finer signature the settled phase makes of ``sid`` (the catalog's ``refine``)."""
    sig = sigs.BY_ID.get(sid or "")
    to = dict(sig.refine).get(phase) if sig is not None else None
    if to is None or (sigs.BY_ID[to].inside_capture and not _in_capture(a)):
        return sid
    return to


def _unknown_text(e: ErrorRec) -> str:
    if e.exc_type:
        return f"{e.exc_type}: {e.message}"
    return e.message or e.text.splitlines()[0] if e.text else ""


def _stale(a: Analysis) -> bool:
    if a.mtime is None:
        return True
    return (time.time() - a.mtime) > STALE_S
