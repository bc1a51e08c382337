"""What the parser carries over one chunk: its lines once split (``Lines``, the half of
``LogParser.feed_split`` that depends only on the bytes before it) and what the Python path
collects over them (``Chunk``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from forensics_parsers.sglang.frames import Frames


@dataclass
class Chunk:
    """What the Python path collects over one chunk's lines, in file order."""

    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[dict[str, Any]] = field(default_factory=list)
    boundaries: list[tuple[int, int]] = field(default_factory=list)  # (line, run) a run starts
    stamps: list[tuple[int, str]] = field(default_factory=list)  # (line, ts) in file order
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

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
    ``quick``: ``bulk.split(other)`` when the bulk path was open as the chunk was split, else
    None (``feed_lines`` decides again: the prefix finder may have learned since)."""

    ck: Chunk
    done: tuple[Frames, pl.DataFrame | None] | None = None
    other: pl.DataFrame | None = None
    batch: pl.DataFrame | None = None
    n_decode: int = 0
    quick: tuple[pl.DataFrame, pl.DataFrame] | None = None
