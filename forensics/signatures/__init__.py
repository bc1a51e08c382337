"""The error-signature catalog (data) and its matcher.

Each entry names one way an SGLang launch fails: the patterns that recognise it (regexes on
log lines, exception text and traceback text), where on the stack it must have happened
(``frames``, optional), the phase it usually belongs to, a one-line explanation and remedies
in the user's terms (the flag to change and to what). A new failure is a new row here plus a
fixture, never new code.

``NOISE`` lists texts that look like errors but never explain a failure (Triton compiler
diagnostics, deprecation warnings, benign TokenizerManager warnings).

Errors no entry recognises are grouped by ``template()`` (numbers, hex, paths and ids masked)
so that a repeated unknown failure shows up as one new signature ``unknown:<hash>`` with a count.
"""

from __future__ import annotations

from forensics.signatures.catalog import CATALOG, PHASES
from forensics.signatures.causes import CAPTURE_CAUSES
from forensics.signatures.foreign import (
    BASIS as FOREIGN_BASIS,
)
from forensics.signatures.foreign import (
    LAUNCH_TEXT,
    NOT_SGLANG,
    foreign_log,
    other_program,
)
from forensics.signatures.match import (
    BY_ID,
    FRAME_RX,
    HOST_EVIDENCE,
    SIGNATURES,
    Hit,
    Signature,
    best,
    capture_cause,
    frames_of,
    match,
    may_match,
    unwrap_frames,
)
from forensics.signatures.noise import NOISE, PROVES_EXIT, WHOLE_LINE, noise_kind
from forensics.signatures.proof import (
    CONSEQUENCES,
    HARNESS_END,
    SERVING_PROOF,
    harness_end,
    may_prove,
    serving_proof,
)
from forensics.signatures.remedies import (
    SETTINGS,
    catalog_rows,
    fit,
    render,
    run_settings,
    settings_from_text,
)
from forensics.signatures.template import template, unknown_id

__all__ = [
    "PHASES",
    "CATALOG",
    "CAPTURE_CAUSES",
    "NOISE",
    "WHOLE_LINE",
    "PROVES_EXIT",
    "noise_kind",
    "SERVING_PROOF",
    "HARNESS_END",
    "harness_end",
    "serving_proof",
    "may_prove",
    "CONSEQUENCES",
    "NOT_SGLANG",
    "FOREIGN_BASIS",
    "LAUNCH_TEXT",
    "foreign_log",
    "other_program",
    "Signature",
    "Hit",
    "SIGNATURES",
    "BY_ID",
    "HOST_EVIDENCE",
    "FRAME_RX",
    "unwrap_frames",
    "frames_of",
    "capture_cause",
    "match",
    "may_match",
    "best",
    "template",
    "unknown_id",
    "SETTINGS",
    "run_settings",
    "settings_from_text",
    "fit",
    "render",
    "catalog_rows",
]
