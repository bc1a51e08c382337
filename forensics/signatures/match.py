"""The catalog compiled, and matching a text against it (frames included)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forensics.signatures.catalog import CATALOG
from forensics.signatures.causes import CAPTURE_CAUSES


@dataclass(frozen=True)
class Signature:
    id: str
    patterns: tuple[re.Pattern[str], ...]
    phase: str | None
    explanation: str
    remedies: tuple[str, ...]
    priority: int = 50
    hung: bool = False
    frames: re.Pattern[str] | None = None
    frames_optional: bool = False
    phase_from: str = "frames"  # "stage": the frames are the reporter's, not the failure's
    # patterns that count only when the traceback's frames match ``frames`` (optional or not)
    framed: tuple[re.Pattern[str], ...] = ()
    config_matters: bool = True  # False: configuration differences do not explain it
    config_keys: tuple[str, ...] | None = None  # the config columns that can explain it (None: all)
    host_evidence: bool = False  # the signature GPU-holder evidence (nvidia-smi, fuser, ps) gives
    holders_explain: bool = False  # GPU holders shown by host evidence explain it
    refine: tuple[tuple[str, str], ...] = ()  # (settled phase, finer signature)
    refine_frames: tuple[tuple[re.Pattern[str], str], ...] = ()  # frames -> finer signature
    inside_capture: bool = False  # a refinement to it holds only inside a graph capture
    causes: bool = False  # its text names a cause inside (CAPTURE_CAUSES)
    raised_not_hung: bool = False  # hung, unless a traceback shows it raised
    reads_exit_code: bool = False  # the log's exit code says what killed it

    def explaining(self, keys: list[str]) -> list[str]:
        """Of the configuration columns ``keys``, those whose difference can explain it."""
        if not self.config_matters:
            return []
        return [k for k in keys if self.config_keys is None or k in self.config_keys]


@dataclass
class Hit:
    signature: Signature
    text: str
    line: int | None
    groups: dict[str, str] = field(default_factory=dict)
    cause: dict[str, Any] | None = None  # capture_failed: the cause inside


def _compile() -> list[Signature]:
    out = []
    for e in CATALOG:
        out.append(
            Signature(
                id=e["id"],
                patterns=tuple(re.compile(p, re.M) for p in e["patterns"]),
                phase=e.get("phase"),
                explanation=e["explanation"],
                remedies=tuple(e["remedies"]),
                priority=e.get("priority", 50),
                hung=e.get("hung", False),
                frames=re.compile(e["frames"]) if e.get("frames") else None,
                frames_optional=e.get("frames_optional", False),
                phase_from=e.get("phase_from", "frames"),
                framed=tuple(re.compile(p, re.M) for p in e.get("framed_patterns", ())),
                config_matters=e.get("config_matters", True),
                config_keys=tuple(e["config_keys"]) if "config_keys" in e else None,
                host_evidence=e.get("host_evidence", False),
                holders_explain=e.get("holders_explain", False),
                refine=tuple(e.get("refine", {}).items()),
                refine_frames=tuple((re.compile(p), t) for p, t in e.get("refine_frames", ())),
                inside_capture=e.get("inside_capture", False),
                causes=e.get("causes", False),
                raised_not_hung=e.get("raised_not_hung", False),
                reads_exit_code=e.get("reads_exit_code", False),
            )
        )
    return out


SIGNATURES: list[Signature] = _compile()


BY_ID: dict[str, Signature] = {s.id: s for s in SIGNATURES}


# the signature of GPU-holder evidence (a paste of nvidia-smi / fuser / ps), by its column
HOST_EVIDENCE: Signature = next(s for s in SIGNATURES if s.host_evidence)


_CAUSES = [(c, [re.compile(p) for p in c["patterns"]]) for c in CAPTURE_CAUSES]


# a traceback's frame, or a faulthandler dump's (`File "x.py", line 12 in f`, no comma)
FRAME_RX = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>[\w<>.]+)')


_FRAME_START = re.compile(r'^\s*File "')


_FRAME_END = re.compile(r'", line \d+,? in [\w<>.]+\s*$')


_WRAP_PIECE = re.compile(r'^[\w<>.,/" -]+$')


_EXC_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Exit|Interrupt|Fault|Warning)\b")


def unwrap_frames(text: str) -> str:
    """Rejoin frame lines a terminal or a mail client hard-wrapped at the screen width."""
    if "File " not in (text or ""):
        return text or ""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        j = i + 1
        if _FRAME_START.match(ln):
            # the pieces that follow it flush left (no exception line) belong to it
            while (
                j < len(lines)
                and j - i <= 3
                and _WRAP_PIECE.match(lines[j])
                and not _EXC_LINE.match(lines[j])
            ):
                ln += lines[j]
                j += 1
        out.append(ln)
        i = j
    return "\n".join(out)


def frames_of(text: str) -> list[tuple[str, str]]:
    """(file, function) of every frame in a traceback text, outermost first."""
    return [(m.group("file"), m.group("func")) for m in FRAME_RX.finditer(unwrap_frames(text))]


def capture_cause(text: str) -> dict[str, Any] | None:
    for c, rxs in _CAUSES:
        for rx in rxs:
            if rx.search(text):
                return c
    return None


# Every pattern of the catalog (framed ones too) as one regex polars runs: a text it does not
# match hits no signature. Group names dropped (an alternation may not repeat one); polars'
# engine and ``re`` agree on plain printable ASCII (``_PLAIN``), the only texts it decides.
ANY_PATTERN = "|".join(
    "(?m:" + re.sub(r"\(\?P<\w+>", "(?:", rx.pattern) + ")"
    for s in SIGNATURES
    for rx in s.patterns + s.framed
)
_PLAIN = r"^[\t\x20-\x7e]*$"


def may_match(text: Any) -> Any:
    """A polars expression over texts (``text``: an expression): False where ``match`` finds
    no signature in the text, True where it may (every text that is not plain ASCII: the
    prefilter that spares ``match``, ~20 us, on each of a log's ordinary lines)."""
    t = text.fill_null("")
    return ~t.str.contains(_PLAIN) | t.str.contains(ANY_PATTERN)


def match(text: str, *, line: int | None = None, frames: str = "") -> list[Hit]:
    """Every catalog entry whose patterns hit ``text`` (and whose frame condition holds)."""
    hits: list[Hit] = []
    if not text:
        return hits
    frame_blob = frames or " ".join(f"{f} {fn}" for f, fn in frames_of(text))
    for sig in SIGNATURES:
        for rx in sig.patterns + sig.framed:
            m = rx.search(text)
            if not m:
                continue
            if sig.frames is not None and (not sig.frames_optional or rx in sig.framed):
                if not sig.frames.search(frame_blob):
                    if rx in sig.framed:
                        continue
                    break
            hit = Hit(sig, text, line, {k: v for k, v in m.groupdict().items() if v})
            if sig.causes:
                hit.cause = capture_cause(text)
            hits.append(hit)
            break
    return hits


def best(hits: list[Hit]) -> Hit | None:
    if not hits:
        return None
    return max(hits, key=lambda h: h.signature.priority)
