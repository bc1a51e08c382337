"""What the model reads of a run: structural tokens and the masked error text."""

from __future__ import annotations

import re

from forensics import signatures as sigs
from forensics.classifier.decide import _stage_at
from forensics.classifier.phases import ACCESS_KINDS
from forensics.classifier.records import Analysis


def _stem(path: str) -> str:
    return re.sub(r"\W", "_", path.rsplit("/", 1)[-1].rsplit(".", 1)[0])[:40]


def features(a: Analysis) -> tuple[str, str]:
    """(structural tokens, error text) of one run."""
    tok: list[str] = []
    seen = []
    for st, sc, _ in a.stages:
        t = f"stage_{st}" + (f"_{sc}" if sc else "")
        if t not in seen:
            seen.append(t)
    tok += seen
    if a.stages:
        tok.append(f"last_{a.stages[-1][0]}")
    else:
        tok.append("nostages")
    at = _stage_at(a, a.cause.line if a.cause else None)
    tok.append(f"at_{at}")
    tok += ["ready"] if a.ready_line is not None else ["notready"]
    tok += ["served"] if a.served else []
    tok += ["shutdown"] if a.shutdown else []
    tok.append(f"rule_{a.rule_phase}")
    tok.append(f"framephase_{a.frame_phase}")
    tok.append(f"stagephase_{a.stage_phase}")
    if a.rule_hung:
        tok.append("rulehung")
    if a.hit:
        tok.append(f"sig_{a.hit.signature.id}")
    if a.capture_cause:
        tok.append(f"cause_{a.capture_cause}")
    for e in a.errors:
        if e.noise:
            tok.append(f"noise_{e.noise}")
            continue
        if e.exc_type:
            tok.append("exc_" + e.exc_type.rsplit(".", 1)[-1])
        if e.component:
            tok.append(f"comp_{e.component}")
        tok.append(f"ekind_{e.kind}")
    if a.cause is not None:
        tok.append("cause_after_ready" if a.ready_line and a.cause.line > a.ready_line else "cause")
        for f, fn in a.cause.frames:
            tok.append(f"fn_{fn}")
            tok.append(f"file_{_stem(f)}")
    else:
        tok.append("nocause")
    for _, k, _ in a.lines[-8:]:
        tok.append(f"tail_{k}")
    text_parts = []
    if a.cause is not None:
        text_parts.append(f"{a.cause.exc_type}: {a.cause.message}")
        text_parts.append(a.cause.text[-1500:])
    tail = [t for _, k, t in a.lines[-6:] if k not in ACCESS_KINDS]
    text_parts += tail
    return " ".join(tok), sigs.template("\n".join(text_parts))[:3000] if text_parts else ""
