"""What the parser carries over one chunk: its lines once split (``Lines``, the half of
``LogParser.feed_split`` that depends only on the bytes before it) and what the Python path
collects over them (``Chunk``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics_parsers.sglang.frames import Frames, empty

# rows of events / lines the Python path holds as dicts before it turns them into a frame: a
# 4 MB chunk of a server restarted in a loop is 100,000 of them (~50 MB as dicts)
SPILL_ROWS = 8_192


@dataclass
class Chunk:
    """What the Python path collects over one chunk's lines, in file order."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    spilled: dict[str, list[pl.DataFrame]] = field(default_factory=dict)  # earlier rows
    boundaries: list[tuple[int, int]] = field(default_factory=list)  # (line, run) a run starts
    stamps: list[tuple[int, str]] = field(default_factory=list)  # (line, ts) in file order
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, row: dict[str, Any], schema: dict[str, Any]) -> None:
        """A row of ``events`` or ``lines``; every SPILL_ROWS of them become a frame."""
        rows = getattr(self, kind)
        rows.append(row)
        if len(rows) >= SPILL_ROWS:
            self.spilled.setdefault(kind, []).append(pl.DataFrame(rows, schema=schema))
            rows.clear()

    def frame(self, kind: str, schema: dict[str, Any]) -> pl.DataFrame:
        """Every row of ``kind`` collected over the chunk, in order."""
        parts = list(self.spilled.get(kind, []))
        rows = getattr(self, kind)
        if rows:
            parts.append(pl.DataFrame(rows, schema=schema))
        if not parts:
            return empty(kind)
        return parts[0] if len(parts) == 1 else pl.concat(parts)

    def bump(self, kind: str, n: int = 1) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    def stat(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n


@dataclass
class Lines:
    """A chunk split into lines by ``LogParser.split_lines``, for ``LogParser.feed_lines``.

    ``done``: the result when there is nothing to parse yet (an unfinished line, a JSON
    record). Else ``other``: the non-metrics lines (``line``, ``text``); ``batch``: the
    metrics lines with their kind, head and timestamp read (``metrics.read_heads``), or None;
    ``typed``: the decode and prefill rows the compiled reader filled (native.py), or None;
    ``quick``: the access and warning lines it read as bulk.py's rows (not in ``other``)."""

    ck: Chunk
    done: tuple[Frames, pl.DataFrame | None] | None = None
    other: pl.DataFrame | None = None
    batch: pl.DataFrame | None = None
    typed: tuple[pl.DataFrame, pl.DataFrame] | None = None
    quick: pl.DataFrame | None = None
