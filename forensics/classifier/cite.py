"""The evidence a verdict cites: file lines of the cause, its signature's line, its frame."""

from __future__ import annotations

from typing import Any

from forensics import signatures as sigs
from forensics.classifier.records import Analysis, ErrorRec, _frame_phase
from forensics.classifier.routine import _consequences


def _text_lines(e: ErrorRec) -> list[tuple[int, str]]:
    """(file line, text) of each line of an error's text.

    A traceback's text is consecutive lines of the log ending at ``last_line``; the header line
    is in it or not, depending on how the traceback began. A text cut at the parser's size
    limit is counted from the line after the header.
    """
    tl = e.text.split("\n")
    span = e.last_line - e.line + 1
    if len(tl) == span:
        start = e.line
    elif len(tl) == span - 1:
        start = e.line + 1
    else:
        start = e.line + 1 if e.kind == "traceback" and e.last_line > e.line else e.line
    return [(start + i, t) for i, t in enumerate(tl)]


def _frame_cite(a: Analysis) -> dict[str, Any] | None:
    """The innermost frame of the cause that placed it in its phase (the stack is evidence)."""
    e = a.cause
    if e is None or not a.frame_phase or a.rule_phase != a.frame_phase:
        return None
    for li, t in reversed(_text_lines(e)):
        m = sigs.FRAME_RX.search(t)
        if m and _frame_phase([(m["file"], m["func"])]) == a.frame_phase:
            return {"line": li, "text": t.strip()[:300]}
    return None


def _evidence(a: Analysis) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if a.cause is not None:
        e = a.cause
        first = next((t for li, _, t in a.lines if li == e.line), None)
        tls = _text_lines(e)
        if first is None:
            first = next((t for li, t in tls if li == e.line), None) or (tls[0][1] if tls else "")
        out.append({"line": e.line, "text": first[:300]})
        # the line whose text the signature matched (else the exception line)
        pats = list(e.hits[0].signature.patterns + e.hits[0].signature.framed) if e.hits else []
        cite = None
        if a.hit is not None and a.hit in e.hits:
            pats = list(a.hit.signature.patterns + a.hit.signature.framed)
        if pats:
            cite = next(((li, t) for li, t in tls if any(rx.search(t) for rx in pats)), None)
        if cite is None and e.exc_type:
            cite = next(
                ((li, t) for li, t in reversed(tls) if t.startswith(e.exc_type)),
                None,
            )
        if cite is not None and cite[0] != e.line:
            out.append({"line": cite[0], "text": cite[1].strip()[:300]})
        fc = _frame_cite(a)
        if fc is not None and all(o["line"] != fc["line"] for o in out):
            out.append(fc)
        for c in _consequences(a):
            if c.line > e.line and len(out) < 5:
                out.append({"line": c.line, "text": c.text.splitlines()[0][:300]})
    elif a.stages:
        st, _, li = a.stages[-1]
        text = next((t for li2, _, t in a.lines if li2 == li), st)
        out.append({"line": li, "text": text[:300]})
    real_ready = any(st == "ready" and li == a.ready_line for st, _, li in a.stages)
    if real_ready and not any(o["line"] == a.ready_line for o in out):
        out.append({"line": a.ready_line, "text": "The server is fired up and ready to roll!"})
    return sorted(out, key=lambda o: o["line"])[:6]
