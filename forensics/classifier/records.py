"""One run's evidence: an error record and the analysis of a run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics import frames as frames_table
from forensics import signatures as sigs


@dataclass
class ErrorRec:
    line: int
    last_line: int
    kind: str
    component: str
    exc_type: str
    message: str
    text: str
    frames: list[tuple[str, str]]
    hits: list[sigs.Hit]
    noise: str | None
    ts: Any = None
    rank: str = ""
    routine: str | None = None  # why this line never decides (NOISE id or ROUTINE_CONTEXT id)


@dataclass
class Analysis:
    path: str
    run_index: int
    stages: list[tuple[str, str, int]]  # (stage, scope, line)
    ready_line: int | None
    served: bool
    decode_lines: int
    shutdown: bool
    errors: list[ErrorRec]
    lines: list[tuple[int, str, str]]  # (line, kind, text): the non-metrics lines
    last_line: int
    last_ts: Any
    mtime: float | None
    cause: ErrorRec | None = None
    hit: sigs.Hit | None = None
    frame_phase: str | None = None
    stage_phase: str | None = None
    rule_phase: str | None = None
    rule_hung: bool = False
    signature: str | None = None
    capture_cause: str | None = None
    evidence: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # signatures.run_settings: remedies
    served_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, rank), sorted
    stage_ranks: dict[int, str] = field(default_factory=dict)  # stage line -> rank tag
    first_server_line: int | None = None  # the server's first own (tagged) line
    floor: str | None = None  # the furthest phase the log proves was reached before the cause
    decided: bool = False  # the text places the phase (else the phase is the likeliest guess)
    basis: str = ""  # what placed it (BASIS_CONFIDENCE key)
    ended: bool = False  # a line proves the process tree exited (not hung)
    proof_lines: list[tuple[int, str]] = field(default_factory=list)  # (line, SERVING_PROOF id)
    harness_end: int | None = None  # a test harness's closing line (HARNESS_END)
    foreign: str | None = None  # a NOT_SGLANG id: the log is another server's
    host_findings: list[dict[str, Any]] = field(default_factory=list)  # cleanup evidence
    other_tail: int = 0  # lines of other programs' text after the server's last own line


def _frame_phase(frames: list[tuple[str, str]]) -> str | None:
    return frames_table.phase_of(frames)
