"""The streaming SGLang-log parser: ``LogParser``, and ``parse_bytes`` / ``parse_text``.

``feed()`` takes any chunk of bytes (it keeps an unfinished last line for the next call),
``finish()`` flushes it, and ``state()`` / ``LogParser(state=...)`` let an ingest resume a grown
file where it stopped. Metrics lines go to parsers/sglang/metrics.py (vectorised); every other
line, in file order, through the rule table (parsers/sglang/rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from forensics_parsers import wrappers as W
from forensics_parsers.prefixes import PrefixFinder
from forensics_parsers.secrets import redact_lines
from forensics_parsers.sglang import bulk as bulk_
from forensics_parsers.sglang import metrics, native
from forensics_parsers.sglang import runs as runs_
from forensics_parsers.sglang import traceback as tb_
from forensics_parsers.sglang.between import Between
from forensics_parsers.sglang.chunk import Chunk as _Chunk
from forensics_parsers.sglang.chunk import Lines
from forensics_parsers.sglang.frames import (
    ERROR_SCHEMA,
    EVENT_SCHEMA,
    LINE_SCHEMA,
    Frames,
    empty,
)
from forensics_parsers.sglang.metrics import extract_batch
from forensics_parsers.sglang.rules import (
    ANSI_RX,
    ORPHAN_FRAME_KIND,
    PREFIX_RX,
    Rule,
    find_rule,
    style_of,
)
from forensics_parsers.sglang.server_args import configure
from forensics_parsers.sglang.stages import mem_figures
from forensics_parsers.sglang.text import chunk_lines, find_eol, rfind_eol, to_dt, ts_of

MAX_LINE = 1 << 20  # longer lines are cut to this (P11) and counted
assert native.BULK_MAX_LINE <= MAX_LINE  # (the compiled reader's bulk lines are never cut)
MAX_TEXT = 4000  # text kept per line in the `lines` frame
# A chunk of fewer non-metrics lines goes through the Python path whole: the bulk path's
# dozen polars calls cost ~3 ms whatever their size, more than Python takes for ~150 lines (a
# 2 KB log: 6.7 -> 3.6 ms of parse). The same rows (tests/test_parser_bulk.py, golden digests
# of both paths: tests/test_parser_golden.py)
BULK_MIN_LINES = 128
_IS_BATCH = pl.col("text").str.contains(metrics.BATCH_HEAD)
_NO_LINES = pl.DataFrame(schema={"text": pl.String, "line": pl.Int64, "batch": pl.Boolean})
# Secrets: one choke point, ``redact_lines`` in ``LogParser._lines_of`` (parsers/secrets.py).


@dataclass
class _Line:
    """One non-metrics line once its prefix is read."""

    no: int
    msg: str
    ts: str | None
    rank: str
    prefixed: bool


class LogParser(Between):
    """Streaming SGLang-log parser. Feed bytes; collect frames; save ``state()`` to resume."""

    def __init__(
        self,
        source: str = "",
        *,
        state: dict[str, Any] | None = None,
        name_pattern: str | None = None,
        date_hint: str | None = None,
        bulk: bool = True,
        bulk_min_lines: int | None = None,
    ):
        self.source = source
        # common lines read in polars (parsers/sglang/bulk.py); False: all in Python
        self.bulk = bulk
        # ... in a chunk of at least this many lines (None: BULK_MIN_LINES)
        self.bulk_min_lines = BULK_MIN_LINES if bulk_min_lines is None else bulk_min_lines
        self.name_pattern = name_pattern
        st = state or {}
        self.line_no: int = st.get("line_no", 0)  # physical lines consumed so far
        self.run_index: int = st.get("run_index", 0)
        self.runs: dict[int, dict[str, Any]] = {int(k): v for k, v in st.get("runs", {}).items()}
        self.last_ts: str | None = st.get("last_ts")
        self.date_hint: str = st.get("date_hint") or date_hint or "1970-01-01"
        self._pending = b""
        self._skip_to_newline = st.get("skip_to_newline", False)
        self._tb: dict[str, Any] | None = st.get("traceback")  # open traceback
        # how the file is stored (line endings, wrapper), decided from its first bytes
        self._sniff: dict[str, Any] | None = st.get("sniff")
        self._finder = PrefixFinder(st.get("prefixes"))
        self._json_carry: str = st.get("json_carry", "")
        self._pem_open: bool = st.get("pem_open", False)  # a PEM key block open (secrets)
        self._closed_tbs: list[dict[str, Any]] = []
        self._started: dict[int, int] = {}  # run -> the line that set its started_at, this chunk
        if not self.runs:
            self.runs[0] = runs_.new_run(1)

    # -- state ---------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON-serialisable state for resuming after the bytes fed so far (complete lines)."""
        return {
            "line_no": self.line_no,
            "run_index": self.run_index,
            "runs": {str(k): v for k, v in self.runs.items()},
            "last_ts": self.last_ts,
            "date_hint": self.date_hint,
            "skip_to_newline": self._skip_to_newline,
            "traceback": self._tb,
            "sniff": self._sniff,
            "prefixes": self._finder.state(),
            "json_carry": self._json_carry,
            "pem_open": self._pem_open,
        }

    @property
    def pending_bytes(self) -> int:
        return len(self._pending)

    # -- feeding -------------------------------------------------------------------------
    def feed(self, data: bytes) -> Frames:
        frames, prepared = self.feed_split(data)
        if prepared is not None:
            frames.decode, frames.prefill = extract_batch(prepared)
        return frames

    def feed_split(self, data: bytes) -> tuple[Frames, pl.DataFrame | None]:
        """``feed`` without the field extraction of the metrics lines.

        The frames come with empty ``decode`` / ``prefill``: ``extract_batch(prepared)``
        makes them (it is pure, so it may run in another thread while this parser is fed
        the next chunk). Everything else, counts, runs and ``state()`` included, already
        covers the lines fed.
        """
        return self.feed_lines(self.split_lines(data))

    def split_lines(self, data: bytes) -> Lines:
        """The first half of ``feed_split``: the chunk's lines, decoded, unwrapped, redacted,
        and the metrics lines' heads and timestamps. It reads and moves only the parser's
        byte-level state (the unfinished line, the line count, a JSON record's carry), so it
        may split chunk k+1 in another thread while ``feed_lines`` parses chunk k (chunks in
        order, one ``split_lines`` at a time)."""
        buf = self._pending + data
        if self._sniff is None:
            head = W.sniff_window(buf, final=False)
            if head is None:
                self._pending = buf
                return Lines(_Chunk(), done=(Frames(), None))
            self._do_sniff(head, whole=head.endswith((b"\n", b"\r")))
        cr = self._sniff["cr"]
        if self._skip_to_newline:
            nl = find_eol(buf, cr)
            if nl < 0:
                self._pending = b""
                return Lines(_Chunk(), done=(Frames(), None))
            buf = buf[nl + 1 :]
            self._skip_to_newline = False
            self.line_no += 1  # the cut line was already counted when cut
        cut = rfind_eol(buf, cr)
        if cut < 0:
            if len(buf) > MAX_LINE:
                # P11: a huge line without newline yet: keep its head, skip the rest
                self._pending = b""
                self._skip_to_newline = True
                lines = self._split(buf[:MAX_LINE], partial=False)
                lines.ck.stat("long_lines_truncated")
                self.line_no -= 1  # the line continues; it is counted once, when it ends
                return lines
            self._pending = buf
            return Lines(_Chunk(), done=(Frames(), None))
        self._pending = buf[cut + 1 :]
        # the complete lines: a view of ``buf``, not a copy (a fresh 4 MB the reading thread
        # faulted in per chunk; the compiled reader copies what it keeps)
        complete = W.cr_to_lf(buf[: cut + 1]) if cr else memoryview(buf)[: cut + 1]
        return self._split(complete, partial=False)

    def _do_sniff(self, head: bytes, *, whole: bool) -> None:
        """Decide line endings, wrapper and the first transport prefixes from the file's
        first bytes (the same bytes whatever the chunking: streaming == one pass)."""
        cr = W.lone_cr(head)
        if cr:
            head = W.cr_to_lf(head)
        sample = W.sniff_lines(head, whole)
        name, params = W.detect(sample)
        self._sniff = {"cr": cr, "wrapper": name, "params": params}
        if sample:
            lines = pl.Series("text", sample, dtype=pl.String)
            if name is not None:
                lines = W.BY_NAME[name].unwrap(lines, params)
                if not W.BY_NAME[name].keeps_lines:
                    lines = pl.Series("text", "\n".join(lines.to_list()).split("\n"))
            lines = redact_lines(lines, self._pem_open).lines
            for line in lines.to_list()[: W.SNIFF_LINES]:
                self._finder.strip(ANSI_RX.sub("", line), PREFIX_RX)

    def finish(self) -> Frames:
        """Flush a last line that has no newline (P04: kept, counted as partial)."""
        first = None
        if self._sniff is None:  # a file shorter than the sniff window
            self._do_sniff(W.sniff_window(self._pending, final=True) or b"", whole=True)
            first = self.feed(b"")
        rest = self._finish()
        return Frames.concat([first, rest]) if first is not None else rest

    def _finish(self) -> Frames:
        self._close_traceback()
        if self._skip_to_newline:
            self._skip_to_newline = False
            self.line_no += 1
            self._pending = b""
        if not self._pending and not self._json_carry:
            return self._flush_tb_only()
        data, self._pending = self._pending, b""
        if self._sniff["cr"]:
            data = W.cr_to_lf(data)
        frames = self._parse(data, partial=True)
        self._close_traceback()
        tail = self._flush_tb_only()
        return Frames.concat([frames, tail])

    def _flush_tb_only(self) -> Frames:
        out = Frames()
        if self._closed_tbs:
            out.errors = pl.DataFrame(self._closed_tbs, schema=ERROR_SCHEMA)
            self._closed_tbs = []
        out.runs = runs_.runs_frame(self.runs, self.source, self.name_pattern)
        return out

    # -- the work ------------------------------------------------------------------------
    def _parse(self, data: bytes, *, partial: bool) -> Frames:
        frames, prepared = self.feed_lines(self._split(data, partial=partial))
        if prepared is not None:
            frames.decode, frames.prefill = extract_batch(prepared)
        return frames

    def _split(self, data: bytes | memoryview, *, partial: bool, compiled: bool = True) -> Lines:
        """Complete lines (or the partial last one) -> ``Lines`` (see ``split_lines``)."""
        ck = _Chunk()
        sniff = self._sniff or {}
        # the compiled reader (native.py) where it applies: the lines it types skip the rest
        fast = native.scan(data, self.line_no + 1, sniff) if compiled else None
        if fast is not None:
            ck.stats.update(fast.stats)
            df = self._lines_of(fast.other["text"], ck, partial, fast.cr, fast)
        else:
            lines_s, cr, self._json_carry = chunk_lines(
                bytes(data), sniff, self._json_carry, partial, ck.stats
            )
            if lines_s is None:
                return Lines(ck, done=(Frames(stats=ck.stats), None))  # an unfinished record
            df = self._lines_of(lines_s, ck, partial, cr)
        is_batch = df.get_column("batch")
        if is_batch.any() or is_batch.null_count():
            batch = df.filter(is_batch).select("line", "text")
            other = df.filter(~is_batch).select("line", "text")
        else:  # (the compiled reader's usual chunk: no metrics line left, no filter)
            batch, other = None, df[["line", "text"]]
        if fast is not None and batch is not None:
            # it handed back a metrics line: the polars path reads odd ones by the layout of
            # the chunk's first (metrics.py), so it reads the chunk's metrics lines whole
            self.line_no -= fast.n
            return self._split(data, partial=partial, compiled=False)
        out = Lines(ck, other=other)
        if fast is not None:
            out.typed = (fast.decode, fast.prefill)
            out.quick = fast.bulk if not fast.bulk.is_empty() else None
        if batch is not None:
            out.batch, _ = metrics.read_heads(batch, self.date_hint)
        return out

    def feed_lines(self, lines: Lines) -> tuple[Frames, pl.DataFrame | None]:
        """The second half of ``feed_split``: the lines of ``split_lines`` through the rule
        table and into the runs, in file order."""
        if lines.done is not None:
            return lines.done
        ck, other = lines.ck, lines.other
        self._started = {}

        # 1) the Python path, in file order: runs, stages, errors, the rare lines; the common
        # ones (bulk) in polars, their effect on the runs after. (The bulk lines are split
        # here, not with the lines: an ingest's reading thread, which also reads, hashes and
        # scans the bytes, is the busier of the two.)
        start_run = self.run_index
        typed = lines.quick  # (the compiled reader's bulk lines: not in ``other``)
        n_typed = 0 if typed is None else typed.height
        if self._bulk_ok() and other.height + n_typed >= self.bulk_min_lines:
            quick, rare = (
                bulk_.split(other, self.date_hint, MAX_LINE)
                if other.height
                else (bulk_.empty(), other)
            )
            if typed is not None:
                quick = bulk_.merged(quick, typed)
            quick = self._python_lines_between(ck, other, quick, rare, typed)
        else:
            if typed is not None:
                other = pl.concat([other, native.texts(typed)]).sort("line")
            self._python_lines(ck, other)
            quick = bulk_.empty()
        quick = self._after_python(ck, quick, start_run)

        # 2) the vectorised path: Prefill / Decode batch lines
        # (runs and counts now; the fields by extract_batch, see feed_split)
        prepared, n_decode, n_prefill = metrics.prepare(
            self.runs, lines.batch, lines.typed, ck.boundaries, start_run
        )
        ck.bump("decode", n_decode)
        ck.bump("prefill", n_prefill)

        out = Frames(counts={k: v for k, v in ck.counts.items() if v}, stats=ck.stats)
        out.events = ck.frame("events", EVENT_SCHEMA)
        out.lines = bulk_.lines_frame(ck.frame("lines", LINE_SCHEMA), quick, MAX_TEXT)
        if self._closed_tbs:
            out.errors = pl.DataFrame(self._closed_tbs, schema=ERROR_SCHEMA)
            self._closed_tbs = []
        out.runs = self._close_runs()
        return out, prepared

    def _close_runs(self) -> pl.DataFrame:
        """The rows of the runs that ended (a later one began: nothing after this chunk
        changes them), dropped from the parser: it holds, and its state saves, the open run
        only, so a log of 100,000 launches costs the memory of one. The open run's row comes
        with ``finish()``; ``Frames.concat`` of every chunk's frames is the file's runs."""
        closed = {ri: run for ri, run in self.runs.items() if ri < self.run_index}
        if not closed:
            return empty("runs")
        for ri in closed:
            del self.runs[ri]
        return runs_.runs_frame(closed, self.source, self.name_pattern)

    def _lines_of(
        self, lines_s: pl.Series, ck: _Chunk, partial: bool, cr: bool, fast: Any = None
    ) -> pl.DataFrame:
        """The chunk's lines split at LF -> (``line``, ``text``, ``batch``: a metrics line),
        secrets removed (``cr``: some line has a CR, stripped at its end). ``fast``: the chunk
        as the compiled reader read it (``lines_s``: the lines it left; its own hold no secret)."""
        base = self.line_no
        sniff = self._sniff or {}
        wrapper = W.BY_NAME.get(sniff.get("wrapper") or "")
        if wrapper is not None and wrapper.keeps_lines:
            lines_s = wrapper.unwrap(lines_s, sniff["params"])
        # the one place secrets are removed: every table, and the state, reads these lines
        # (none where the reader typed every line: a regex costs ~0.15 ms on no rows)
        typed_all = fast is not None and not len(lines_s) and not self._pem_open
        if not typed_all:
            done = redact_lines(lines_s, self._pem_open, *native.gaps(fast, base))
            lines_s, self._pem_open = done.lines, done.pem_open
            if done.changed:
                ck.stats["lines_redacted"] = done.changed
        n = len(lines_s) if fast is None else fast.n
        self.line_no += n
        ck.stats["lines_total"] = n
        if partial:
            ck.stats["partial_lines"] = 1
        if typed_all:
            return _NO_LINES.clear()
        nos = pl.int_range(1, n + 1, dtype=pl.Int64) + base if fast is None else fast.other["line"]
        df = pl.DataFrame({"text": lines_s}).with_columns(nos.alias("line"))
        if cr:
            df = df.with_columns(pl.col("text").str.strip_chars_end("\r"))
        return df.with_columns(_IS_BATCH.alias("batch"))

    def _bulk_ok(self) -> bool:
        return self.bulk and not self._finder.live

    def _after_python(self, ck: _Chunk, quick: pl.DataFrame, start_run: int) -> pl.DataFrame:
        """The bulk lines' effect: their runs (the run in force at each), counts, extents,
        and the timestamp order over every non-metrics line of the chunk."""
        if not quick.is_empty():
            quick = metrics.run_of_lines(quick, ck.boundaries, start_run)
            for kind, n in bulk_.counts(quick).items():
                ck.bump(kind, n)
            bulk_.touch_runs(self.runs, quick, self._started)
        n, self.last_ts = bulk_.disorder(ck.stamps, quick, self.last_ts)
        if n:
            ck.stat("ts_out_of_order", n)
        return quick

    def _physical_line(self, ck: _Chunk, line_no: int, raw: str) -> None:
        """One physical non-metrics line: cut if huge; progress-bar frames (``\\r``) collapsed
        to the last, a log line glued after them handled as its own record."""
        if len(raw) > MAX_LINE:
            raw = raw[:MAX_LINE]
            ck.stat("long_lines_truncated")
        if "\r" in raw:
            frames_ = [f for f in raw.split("\r") if f.strip()]
            if len(frames_) > 1:
                ck.stat("progress_frames_collapsed", len(frames_) - 1)
                logs = [f for f in frames_ if PREFIX_RX.match(f)]
                bars = [f for f in frames_ if not PREFIX_RX.match(f)]
                raw = bars[-1] if bars else frames_[-1]
                for extra in logs if bars else logs[:-1]:
                    self._handle_line(ck, line_no, extra, count=False)
            else:
                raw = frames_[0] if frames_ else ""
        self._handle_line(ck, line_no, raw, count=True)

    # -- one non-metrics line ------------------------------------------------------------
    def _read_prefix(self, line_no: int, raw: str, ck: _Chunk) -> _Line:
        # whatever a collector put before SGLang's line (kubectl, docker compose, an
        # aggregator, torchrun, ...): found by SGLang's own shapes (parsers/prefixes.py)
        raw = self._finder.strip(raw, PREFIX_RX)
        m = PREFIX_RX.match(raw)
        if not (m and m.end() > 0):
            return _Line(line_no, raw, None, "", False)
        ts = ts_of(m, self.date_hint)
        if ts is not None:
            ck.stamps.append((line_no, ts))  # their order is checked with the bulk lines'
        return _Line(line_no, raw[m.end() :], ts, (m.group("tags") or "").strip(), ts is not None)

    def _handle_line(self, ck: _Chunk, line_no: int, raw: str, *, count: bool) -> None:
        ln = self._read_prefix(line_no, raw, ck)
        stripped = ln.msg.strip()
        if self._tb is not None and self._in_traceback(ln, stripped):
            if count:
                ck.bump("traceback")
            return
        if not stripped:
            if count:
                ck.bump("blank")
            return
        self.runs[self.run_index]["has_content"] = True
        if not ln.prefixed and tb_.ORPHAN_FRAME_RX.match(ln.msg):
            # a traceback whose header is not in the log (a pasted fragment, the last screen,
            # another rank's line in between): its frames still say where it happened
            self._open_traceback(ln, "")
            self._tb_add(line_no, ln.msg)
            if count:
                ck.bump("traceback")
            self._touch(line_no, ln.ts)
            self._emit_line(ck, ln, ORPHAN_FRAME_KIND)
            return
        found = find_rule(ln.msg)
        if found is None:
            if count:
                ck.bump("unknown_prefixed" if ln.prefixed else "unknown_bare")
            self._emit_line(ck, ln, "unknown")
            self._touch(line_no, ln.ts)
            return
        if count:
            ck.bump(found[0].name)
        self._ruled_line(ck, ln, stripped, *found)

    def _in_traceback(self, ln: _Line, stripped: str) -> bool:
        """An open traceback takes unprefixed continuation lines (True: this one was taken);
        any other line closes it."""
        tb = self._tb
        assert tb is not None
        if not ln.prefixed and tb_.continues(tb, ln.msg):
            if stripped or tb["lines"] < 400:
                self._tb_add(ln.no, ln.msg)
                return True
            return False
        if ln.prefixed:
            self._closed_by_prefixed(ln.rank)
        else:
            self._close_traceback()
        return False

    def _closed_by_prefixed(self, rank: str) -> None:
        """A prefixed line closes an open traceback; one of another rank before the exception
        line marks it ambiguous (P08: ranks interleaved mid-traceback)."""
        tb = self._tb
        if tb is not None:
            if rank != tb["rank"] and not tb["exc_type"]:
                tb["ambiguous"] = True
            self._close_traceback()

    def _ruled_line(self, ck: _Chunk, ln: _Line, stripped: str, rule: Rule, mm: Any) -> None:
        """A line some rule of RULES matched: what its row says to do."""
        run = self.runs[self.run_index]
        if rule.starts_run and (run["has_args"] or (run["has_content"] and run["stages"])):
            # a new launch appended to the same file
            self._start_run(ln.no)
            ck.boundaries.append((ln.no, self.run_index))
            run = self.runs[self.run_index]
        if rule.marks_content:
            run["has_content"] = True
        self._touch(ln.no, ln.ts)
        tag = style_of(rule, ln.msg) if rule.style else None
        if tag is not None and tag not in run["style"]:
            run["style"].append(tag)
        if rule.kind == "config":
            configure(run, mm.group("args"))
        if rule.kind == "traceback":
            groups = mm.groupdict()
            self._open_traceback(ln, groups.get("component") or "")
            rest = groups.get("rest") or ""
            if rest and not rest.startswith("Traceback"):
                self._tb_add(ln.no, rest)
            self._emit_line(ck, ln, rule.name)
            return
        if rule.kind == "error":
            self._closed_tbs.append(self._error_row(ln, stripped, rule.name))
        if rule.stage is not None:
            self._event(ck, run, ln, rule, mm)
        self._emit_line(ck, ln, rule.name)  # (access lines past a cap: bulk.lines_frame)

    def _error_row(self, ln: _Line, stripped: str, kind: str) -> dict[str, Any]:
        exc = tb_.EXC_LINE_RX.match(stripped)
        return {
            "run_index": self.run_index,
            "line": ln.no,
            "last_line": ln.no,
            "ts": to_dt(ln.ts),
            "rank": ln.rank,
            "kind": kind,
            "component": "",
            "exc_type": exc.group("type") if exc else None,
            "message": stripped[:2000],
            "text": stripped[:MAX_TEXT],
            "ambiguous": False,
        }

    def _emit_line(self, ck: _Chunk, ln: _Line, kind: str) -> None:
        ck.add(
            "lines",
            {
                "run_index": self.run_index,
                "line": ln.no,
                "ts": to_dt(ln.ts),
                "rank": ln.rank,
                "kind": kind,
                "text": ln.msg[:MAX_TEXT],
            },
            LINE_SCHEMA,
        )

    def _touch(self, line_no: int, ts: str | None) -> None:
        run = self.runs[self.run_index]
        run["last_line"] = max(run["last_line"], line_no)
        if ts is not None:
            if run["started_at"] is None:
                run["started_at"] = ts
                self._started[self.run_index] = line_no  # (bulk lines before it win)
            if run["ended_at"] is None or ts > run["ended_at"]:
                run["ended_at"] = ts

    def _start_run(self, line_no: int) -> None:
        self._close_traceback()
        self.run_index += 1
        self.runs[self.run_index] = runs_.new_run(line_no)

    def _event(self, ck: _Chunk, run: dict, ln: _Line, rule: Rule, mm: Any) -> None:
        scope, detail = rule.event(run, ln.rank, ln.msg, mm) if rule.event else ("", "")
        stage = rule.line_stage(ln.msg)
        if stage and stage not in run["stages"]:
            run["stages"].append(stage)
        ck.add(
            "events",
            {
                "run_index": self.run_index,
                "line": ln.no,
                "ts": to_dt(ln.ts),
                "rank": ln.rank,
                "stage": stage,
                "scope": scope,
                **mem_figures(ln.msg),
                "detail": detail,
            },
            EVENT_SCHEMA,
        )

    # -- tracebacks ----------------------------------------------------------------------
    def _open_traceback(self, ln: _Line, component: str) -> None:
        if self._tb is not None:
            self._close_traceback()
        self._tb = tb_.new(self.run_index, ln.no, ln.ts, ln.rank, component)

    def _tb_add(self, line_no: int, msg: str) -> None:
        assert self._tb is not None
        tb_.add(self._tb, line_no, msg)
        self._touch(line_no, None)

    def _close_traceback(self) -> None:
        if self._tb is not None:
            self._closed_tbs.append(tb_.closed_row(self._tb))
            self._tb = None


def parse_bytes(data: bytes, source: str = "", *, name_pattern: str | None = None) -> Frames:
    """Parse a whole log held in memory."""
    p = LogParser(source, name_pattern=name_pattern)
    return Frames.concat([p.feed(data), p.finish()])


def parse_text(text: str, source: str = "", *, name_pattern: str | None = None) -> Frames:
    return parse_bytes(
        text.encode("utf-8", errors="surrogateescape"), source, name_pattern=name_pattern
    )
