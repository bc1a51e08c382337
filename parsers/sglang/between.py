"""The Python path between the bulk lines (parsers/sglang/bulk.py): ``LogParser``'s rare lines,
in file order, and what the bulk lines between them do to its sequential state (an open
traceback, the prefix finder's learning). A part of ``LogParser`` (parser.py), which it
extends."""

from __future__ import annotations

import polars as pl

from forensics_parsers.sglang import bulk as bulk_
from forensics_parsers.sglang import native
from forensics_parsers.sglang.chunk import Chunk as _Chunk


class Between:
    """``LogParser``'s walk of the rare lines and the gaps of bulk lines between them (it
    reads the parser's ``_tb``, ``_bulk_ok``, ``_physical_line``, ``_closed_by_prefixed``)."""

    def _python_lines(self, ck: _Chunk, lines: pl.DataFrame) -> None:
        for line_no, raw in lines.iter_rows():
            self._physical_line(ck, line_no, raw)

    def _python_lines_between(
        self,
        ck: _Chunk,
        other: pl.DataFrame,
        quick: pl.DataFrame,
        rare: pl.DataFrame,
        typed: pl.DataFrame | None = None,
    ) -> pl.DataFrame:
        """The rare lines in Python, in file order, with what the bulk lines between them do
        to the sequential state: a prefixed bulk line closes an open traceback, unprefixed
        ones may continue it (``_gap``); if the prefix finder learns a transport prefix on the
        way, the lines after go through Python too (``typed``: the bulk lines of ``quick``
        that are not in ``other``, the compiled reader's). -> the bulk lines that stayed bulk."""
        if rare.is_empty() and self._tb is None:  # (a busy server's usual chunk: no walk)
            return quick
        gaps = bulk_.gaps(quick, rare)
        done = 0  # the last line handled
        taken: list[int] = []  # bulk lines the Python path read instead (``_gap``)
        rows: list[tuple] = []  # quick's rows as tuples, once a gap is walked (``_gap``)
        for line_no, raw in rare.iter_rows():
            if line_no in gaps:
                if not self._bulk_ok():
                    return self._fall_back(ck, other, quick, taken, done, typed)
                self._gap(ck, quick, rows, gaps[line_no], line_no, taken)
            self._physical_line(ck, line_no, raw)
            done = line_no
        if gaps.get(None) is not None:
            if not self._bulk_ok():
                return self._fall_back(ck, other, quick, taken, done, typed)
            self._gap(ck, quick, rows, gaps[None], None, taken)
        return quick.filter(~pl.col("line").is_in(taken)) if taken else quick

    def _gap(
        self,
        ck: _Chunk,
        quick: pl.DataFrame,
        rows: list[tuple],
        gap: tuple[int, str | None],
        end: int | None,
        taken: list[int],
    ) -> None:
        """The bulk lines of a gap (``bulk.gaps``: its first row in ``quick``, that line's rank
        or None when unprefixed; ``end``: the rare line after it) and an open traceback: a
        prefixed line closes it; unprefixed lines go through the Python path (into ``taken``),
        in order, while it is open (they may continue it). ``rows``: ``quick``'s rows, filled
        at the first walk (a log of many tracebacks walks thousands of gaps a chunk)."""
        start, rank = gap
        if self._tb is None:
            return
        if rank is not None:
            self._closed_by_prefixed(rank)
            return
        if not rows:
            rows.extend(quick.select(bulk_.GAP_COLUMNS).rows())
        for i in range(start, len(rows)):
            line_no, ts, rank, msg = rows[i]
            if (end is not None and line_no >= end) or self._tb is None:
                return
            if ts is not None:
                self._closed_by_prefixed(rank)
                return
            self._physical_line(ck, line_no, msg)
            taken.append(line_no)

    def _fall_back(
        self,
        ck: _Chunk,
        other: pl.DataFrame,
        quick: pl.DataFrame,
        taken: list[int],
        done: int,
        typed: pl.DataFrame | None,
    ) -> pl.DataFrame:
        after = other.filter(pl.col("line") > done)
        if typed is not None:
            after = pl.concat([after, native.texts(typed.filter(pl.col("line") > done))])
        self._python_lines(ck, after.sort("line"))
        return quick.filter((pl.col("line") < done) & ~pl.col("line").is_in(taken))
