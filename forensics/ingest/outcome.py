"""What ingest did with each file (FileOutcome) and in all (IngestSummary), and why a file
was skipped (SKIP_REASONS: the warning shown; SKIP_FOR: the log source's refusals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forensics.errors import (
    EXIT_PARTIAL,
    BadPath,
    FileMissing,
    ForensicsError,
    NotALog,
    NotRegularFile,
    PermissionDenied,
)

if TYPE_CHECKING:
    from forensics_parsers.sglang import Frames

CHANGED = ("new", "grown", "rewritten")  # outcomes whose runs get new verdicts
# manifest meta key: set by the commit of a batch with CHANGED files, cleared by the verdict
# step (in the ingest's last commit, or in one after it); still set at the next ingest, that
# ingest's verdict step first stores the verdicts an interrupted one left out
# (forensics.verdicts.unverdicted). Kept here, not in forensics.verdicts, so an unchanged
# re-ingest imports no polars to check it.
VERDICTS_PENDING = "verdicts_pending"


@dataclass
class FileOutcome:
    path: str
    host: str
    status: str  # new | grown | rewritten | unchanged | skipped | failed
    reason: str = ""
    source_id: str = ""
    runs: int = 0
    lines: int = 0
    decode_lines: int = 0
    bytes_parsed: int = 0
    results: int = 0  # benchmark results of a results file (forensics/bench_results.py)
    attached: int = 0  # ... of them attached to a run
    committed: bool = False  # in the store (its batch was committed)


@dataclass
class IngestSummary:
    files: list[FileOutcome] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False
    refused: list[ForensicsError] = field(default_factory=list)  # the log source's refusals

    def add(self, counts: dict[str, int], stats: dict[str, int]) -> None:
        """Line counts and reader statistics of a part of the ingest (a parse's frames, a
        worker's file, a log prepared out of turn) added to this summary's."""
        for mine, theirs in ((self.counts, counts), (self.stats, stats)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v

    def as_dict(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        skipped: dict[str, int] = {}
        for f in self.files:
            by_status[f.status] = by_status.get(f.status, 0) + 1
            if f.status in ("skipped", "failed"):
                skipped[f.reason] = skipped.get(f.reason, 0) + 1
        unparsed = {k: v for k, v in self.counts.items() if k.startswith("unknown")}
        return {
            "files": len(self.files),
            "files_by_status": by_status,
            "files_skipped": skipped,
            "runs": sum(f.runs for f in self.files if f.status not in ("unchanged",)),
            "lines_total": self.stats.get("lines_total", 0),
            "records": sum(v for k, v in self.counts.items() if not k.startswith("unknown")),
            "decode_lines": self.counts.get("decode", 0),
            "prefill_lines": self.counts.get("prefill", 0),
            "lines_unparsed": sum(unparsed.values()),
            "lines_by_kind": dict(sorted(self.counts.items())),
            "bytes_parsed": sum(f.bytes_parsed for f in self.files),
            **{
                k: self.stats.get(k, 0)
                for k in (
                    "decode_errors",
                    "nul_bytes",
                    "long_lines_truncated",
                    "progress_frames_collapsed",
                    "ansi_stripped",
                    "ts_out_of_order",
                    "partial_lines",
                    "compressed_truncated",
                )
            },
            "segments_detected": sum(f.runs for f in self.files),
            "results": sum(f.results for f in self.files),
            "results_attached": sum(f.attached for f in self.files),
            "seconds": round(self.seconds, 3),
            "interrupted": self.interrupted,
            "warnings": self.warnings,
            "file_details": [f.__dict__ for f in self.files],
        }


# Why a file was skipped -> the warning shown (the other inputs are still ingested).
SKIP_REASONS = {
    "vanished": "vanished before it could be read",
    "permission": "permission denied (skipped)",
    "unreadable": "unreadable ({detail}), skipped",
    "binary": "{detail} (skipped)",
    "not-regular": "{detail} (skipped)",
    "bad-path": "{detail} (skipped)",
    "duplicate": "the same file as {detail} (a hard link): ingested once",
    "renamed": "the same file as {detail}, ingested under that name before it was renamed "
    "(same inode, size, mtime and head): ingested once",
    "store": "a file of the forensics store itself, not a log (skipped)",
}
# The log source's refusals (forensics.logsource.open_log) -> the skip reason.
SKIP_FOR: dict[type, str] = {
    FileMissing: "vanished",
    PermissionDenied: "permission",
    NotRegularFile: "not-regular",
    BadPath: "bad-path",
    NotALog: "binary",
}


def _skip(
    out: FileOutcome,
    summary: IngestSummary,
    reason: str,
    detail: str = "",
    error: ForensicsError | None = None,
) -> FileOutcome:
    out.status, out.reason = "skipped", reason
    if error is not None:
        summary.refused.append(error)
    from forensics.ingest.identity import shown_path

    summary.warnings.append(
        f"{shown_path(out.path)}: " + SKIP_REASONS[reason].format(detail=detail)
    )
    return out


def _account(summary: IngestSummary, out: FileOutcome, frames: Frames) -> None:
    summary.add(frames.counts, frames.stats)
    out.lines += frames.stats.get("lines_total", 0)
    out.decode_lines += frames.counts.get("decode", 0)


def exit_code_for(summary: IngestSummary) -> int:
    """0, or 4 (partial) when some files failed or were skipped for a reason other than empty."""
    bad = [f for f in summary.files if f.status in ("failed",)]
    return EXIT_PARTIAL if bad else 0


def raise_if_nothing(summary: IngestSummary, results_error: ForensicsError | None) -> None:
    """Nothing could be ingested at all: the one-line error, not a summary."""
    if results_error is not None and all(f.status == "failed" for f in summary.files):
        raise results_error
    if summary.refused and len(summary.refused) == len(summary.files) and not summary.interrupted:
        # P19: nothing could be read at all -> that file's own error (missing or unreadable
        # exit 3; not a regular file, a bad path or not a log exit 2), as for a single input
        first = summary.refused[0]
        more = f" (and {len(summary.refused) - 1} more)" if len(summary.refused) > 1 else ""
        raise type(first)(first.message + more, hint=first.hint)
