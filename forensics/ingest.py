"""Inputs (local paths, globs, directories, ssh:// and NAME:/path) -> parser -> store.

Idempotent and incremental. Each log file is a *source* with a stable id (sha1 of host and
real path). The manifest keeps, per source, its size, mtime, a hash of its first bytes, the
offset of the last complete line parsed and the parser's state at that point:

* unchanged (same size, mtime and head)  -> skipped without reading;
* grown (same head, larger)              -> only the new bytes are parsed, from the saved state;
* rewritten or truncated (head differs, or smaller) -> its rows are dropped and it is re-parsed.

Rows of complete lines are immutable parts of the source. The run summaries (``runs``) and the
records of an unfinished last line (``<sid>~tail``) are replaced at every ingest. One store
transaction per file: a crash or Ctrl-C leaves each file either fully ingested or as it was.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from forensics.errors import (
    EXIT_PARTIAL,
    BadPath,
    FileMissing,
    ForensicsError,
    InputNotFound,
    NotALog,
    NotRegularFile,
    PermissionDenied,
    StreamDamaged,
    UsageError,
)
from forensics.logsource import HEAD_BYTES, open_log
from forensics.store import Store

if TYPE_CHECKING:  # polars and the parser load only when a file has new bytes to parse
    from concurrent.futures import Future, ThreadPoolExecutor

    from forensics.bench_results import RunIndex
    from forensics_parsers.sglang import Frames

READ_AHEAD = 4  # remote logs opened and streaming while an earlier file is parsed
FLUSH_ROWS = 400_000  # rows buffered per table before a part is written
# What a folder given to ingest contributes (files named one by one, or by a glob of your own,
# are read whatever their suffix): server logs, not forensics' own evidence/*.txt dumps.
DIR_PATTERNS = ("*.log", "*.log.gz", "*.out", "*.err")
DIR_SKIP = ("evidence",)  # folders never descended into: $FORENSICS_HOME/evidence/LAUNCH/...
PER_SOURCE_TABLES = ("events", "decode", "prefill", "errors", "lines")
CHANGED = ("new", "grown", "rewritten")  # outcomes whose runs get new verdicts


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


@dataclass
class IngestSummary:
    files: list[FileOutcome] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    interrupted: bool = False
    refused: list[ForensicsError] = field(default_factory=list)  # the log source's refusals

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


def source_id(host: str, path: str) -> str:
    return hashlib.sha1(f"{host}:{path}".encode()).hexdigest()[:12]


# --------------------------------------------------------------------------------------
# Expanding inputs
# --------------------------------------------------------------------------------------
def _has_magic(s: str) -> bool:
    return any(c in s for c in "*?[")


def expand_inputs(
    inputs: list[str],
    *,
    recursive: bool = False,
    warn: Callable[[str], None],
    trust_new_host: bool = False,
) -> list[tuple[Any, str]]:
    """-> [(host, path)] of files, deduplicated, in the order given."""
    from forensics.hosts import resolve_location

    out: list[tuple[Any, str]] = []
    seen: set[tuple[str, str]] = set()
    missing: list[ForensicsError] = []
    empty_dirs: list[str] = []
    for text in inputs:
        host, path = resolve_location(text, trust_new_host=trust_new_host)
        local = host.name == "local"
        if local:
            path = os.path.expanduser(path)
        candidates: list[str]
        if _has_magic(path):
            try:
                candidates = host.glob(path)
            except InputNotFound as exc:
                missing.append(
                    InputNotFound(
                        f"{text}: no files matched",
                        hint="check the pattern; quote it so your shell does not expand it",
                    )
                )
                del exc
                continue
        else:
            try:
                host.stat(path)
            except FileMissing:
                missing.append(
                    InputNotFound(
                        f"{text}: no such file",
                        hint="the launch may never have written its log; "
                        f"try: forensics diagnose {PurePosixPath(path).stem} --relaunch",
                    )
                )
                continue
            except (PermissionDenied, BadPath) as exc:
                missing.append(exc)
                continue
            candidates = [path]
        for cand in candidates:
            if host.is_dir(cand):
                candidates_ = _logs_in(host, cand, recursive)
                if not candidates_:
                    empty_dirs.append(cand)
            else:
                candidates_ = [cand]
            for p in candidates_:
                real = os.path.realpath(p) if local else p
                key = (host.name, real)
                if key in seen:
                    continue
                seen.add(key)
                out.append((host, real))
    patterns = ", ".join(DIR_PATTERNS)
    quiet: list[ForensicsError] = []  # warned about without their hint
    for d in empty_dirs:
        quiet.append(
            InputNotFound(
                f"{d}: directory holds no {patterns} files"
                + (" at any depth" if recursive else " (sub-folders not searched)"),
                hint="name the files or a quoted glob"
                + ("" if recursive else "; -r searches sub-folders at every depth"),
            )
        )
    missing.extend(quiet)
    if missing and not out:
        if len(missing) == 1:
            raise missing[0]
        raise InputNotFound("; ".join(str(m) for m in missing))
    for m in missing:
        warn(m.message if m in quiet else str(m))
    return out


def _logs_in(host: Any, folder: str, recursive: bool) -> list[str]:
    """The files of ``folder`` matching DIR_PATTERNS (with ``recursive``, at every depth,
    outside DIR_SKIP folders), sorted."""
    base = folder.rstrip("/") or "/"
    found: set[str] = set()
    for pattern in DIR_PATTERNS:
        try:
            hits = host.glob(posixpath.join(base, "**" if recursive else "", pattern))
        except InputNotFound:
            continue
        found.update(hits)
    skip = set(DIR_SKIP)
    return sorted(
        p
        for p in found
        if not skip.intersection(PurePosixPath(p[len(base) :]).parts[:-1]) and not host.is_dir(p)
    )


# --------------------------------------------------------------------------------------
# Ingesting
# --------------------------------------------------------------------------------------
class _Buffer:
    """Frames accumulated for one source, written as parts every FLUSH_ROWS rows."""

    def __init__(self, tx: Any, sid: str):
        import polars as pl

        self.pl = pl
        self.tx = tx
        self.sid = sid
        self.pending: dict[str, list[Any]] = {t: [] for t in PER_SOURCE_TABLES}
        self.rows: dict[str, int] = dict.fromkeys(PER_SOURCE_TABLES, 0)

    def add(self, frames: Frames, *, part_sid: str | None = None, path: str, host: str) -> None:
        for t in PER_SOURCE_TABLES:
            df = getattr(frames, t)
            if df.is_empty():
                continue
            df = df.with_columns(self.pl.lit(self.sid).alias("source_id"))
            if part_sid is not None:
                self.tx.append(t, df, source_id=part_sid)
                continue
            self.pending[t].append(df)
            self.rows[t] += len(df)
            if self.rows[t] >= FLUSH_ROWS:
                self.flush(t)

    def flush(self, table: str | None = None) -> None:
        for t in [table] if table else PER_SOURCE_TABLES:
            if self.pending[t]:
                self.tx.append(
                    t,
                    self.pl.concat(self.pending[t], how="vertical_relaxed"),
                    source_id=self.sid,
                )
                self.pending[t] = []
                self.rows[t] = 0


class _Ahead:
    """Remote logs read in parallel with the parse: while file i is parsed, the next
    ``READ_AHEAD`` remote logs new to the store are opened and their transfer started
    (``LogSource.prefetch``), each from its own thread; the parse and
    the store commits stay one file at a time, in the order given. A file the store already
    knows is opened when its turn comes (its offset is decided inside its transaction)."""

    def __init__(self, store: Store, files: list[tuple[Any, str]]):
        from forensics.bench_results import is_results_file

        known = store.manifest().sources if any(h.name != "local" for h, _ in files) else {}
        self.todo = [
            i
            for i, (h, p) in enumerate(files)
            if h.name != "local" and not is_results_file(p) and source_id(h.name, p) not in known
        ]
        self.files = files
        self.futures: dict[int, Future] = {}
        self.pool: ThreadPoolExecutor | None = None

    @staticmethod
    def _open(host: Any, path: str) -> Any:
        src = open_log(host, path, where=path)
        src.prefetch(0)
        return src

    def advance(self, i: int) -> None:
        """File ``i`` is next: close what earlier files left, start the ones after it."""
        for j in [j for j in self.futures if j < i]:
            self._close(self.futures.pop(j))
        self.todo = [j for j in self.todo if j >= i]
        while self.todo and len(self.futures) <= READ_AHEAD:  # this one and READ_AHEAD more
            if self.pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self.pool = ThreadPoolExecutor(READ_AHEAD + 1, thread_name_prefix="forensics-open")
            j = self.todo.pop(0)
            host, path = self.files[j]
            self.futures[j] = self.pool.submit(self._open, host, path)

    def take(self, i: int) -> Future | None:
        return self.futures.get(i)

    @staticmethod
    def _close(fut: Future) -> None:
        if fut.cancel():
            return
        try:
            fut.result().close()
        except BaseException:  # noqa: BLE001 - its error was reported (or nobody asked)
            pass

    def close(self) -> None:
        for fut in self.futures.values():
            self._close(fut)
        self.futures.clear()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def ingest(
    store: Store,
    inputs: list[str],
    *,
    recursive: bool = False,
    name_pattern: str | None = None,
    progress: Callable[[str, int, int, int, int], None] | None = None,
    lock_timeout: float | None = None,
    trust_new_host: bool = False,
    run: str | None = None,
) -> IngestSummary:
    """Ingest every log and benchmark results file the inputs name. Raises InputNotFound
    when none exists. ``run``: attach the results files to this run (else by time/server)."""
    from forensics.bench_results import RunIndex, is_results_file

    t0 = time.monotonic()
    summary = IngestSummary()
    if name_pattern:
        import re

        try:
            re.compile(name_pattern)
        except re.error as exc:
            raise UsageError(
                f"--name-pattern {name_pattern!r}: not a regular expression ({exc})",
                hint="e.g. '(?P<num_steps>\\d+)step'",
            ) from exc
    files = expand_inputs(
        inputs, recursive=recursive, warn=summary.warnings.append, trust_new_host=trust_new_host
    )
    # results files after the logs: a benchmark attaches to a run ingested in the same call
    files.sort(key=lambda hp: is_results_file(hp[1]))
    if run is not None and not any(is_results_file(p) for _, p in files):
        raise UsageError(
            f"--run {run}: no benchmark results file among the inputs",
            hint="--run attaches *.json / *.jsonl results of bench_serving, vllm bench serve "
            "or AIPerf to a run",
        )
    results_error: ForensicsError | None = None
    index: RunIndex | None = None
    ahead = _Ahead(store, files)
    try:
        for i, (host, path) in enumerate(files):
            ahead.advance(i)
            report = None
            if progress:

                def report(done: int, total: int, _p=path, _i=i) -> None:
                    progress(_p, _i, len(files), done, total)

                report(0, 0)
            if is_results_file(path):
                if index is None:  # the runs are read once, after the logs of this call
                    index = RunIndex(store, run)
                outcome, err = _ingest_results(store, host, path, summary, index, lock_timeout)
                results_error = results_error or err
            else:
                outcome = _ingest_one(
                    store, host, path, summary, name_pattern, lock_timeout, report, ahead.take(i)
                )
            summary.files.append(outcome)
        # the verdict of a run changes with its log: classify what changed, once, here, so
        # reading commands only read (forensics.verdicts)
        changed = {f.source_id for f in summary.files if f.status in CHANGED}
        if changed:
            from forensics.verdicts import refresh

            refresh(store, changed)
    except KeyboardInterrupt:
        summary.interrupted = True
        # the same Ctrl-C may raise twice ("One Ctrl-C, two KeyboardInterrupts" in
        # forensics/errors.py): a pending second one fires and is absorbed here
        try:
            time.sleep(0)
        except KeyboardInterrupt:
            pass
    finally:
        ahead.close()
    summary.seconds = time.monotonic() - t0
    if results_error is not None and all(f.status == "failed" for f in summary.files):
        raise results_error  # nothing was ingested: the one-line error, not a summary
    if summary.refused and len(summary.refused) == len(summary.files) and not summary.interrupted:
        # P19: nothing could be read at all -> that file's own error (missing or unreadable
        # exit 3; not a regular file, a bad path or not a log exit 2), as for a single input
        first = summary.refused[0]
        more = f" (and {len(summary.refused) - 1} more)" if len(summary.refused) > 1 else ""
        raise type(first)(first.message + more, hint=first.hint)
    return summary


# Why a file was skipped -> the warning shown (the other inputs are still ingested).
SKIP_REASONS = {
    "vanished": "vanished before it could be read",
    "permission": "permission denied (skipped)",
    "unreadable": "unreadable ({detail}), skipped",
    "binary": "{detail} (skipped)",
    "not-regular": "{detail} (skipped)",
    "bad-path": "{detail} (skipped)",
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
    summary.warnings.append(f"{out.path}: " + SKIP_REASONS[reason].format(detail=detail))
    return out


def _ingest_results(
    store: Store,
    host: Any,
    path: str,
    summary: IngestSummary,
    index: RunIndex,
    lock_timeout: float | None,
) -> tuple[FileOutcome, ForensicsError | None]:
    """A benchmark results file (forensics/bench_results.py); a bad one is a failed file."""
    from forensics.bench_results import ingest_results
    from forensics.errors import ParseError

    out = FileOutcome(path=path, host=host.name, status="new", source_id=source_id(host.name, path))
    try:
        return ingest_results(
            store, host, path, out, summary, run=index.run, lock_timeout=lock_timeout, index=index
        ), None
    except InputNotFound as exc:
        return _skip(
            out, summary, "permission" if "permission" in exc.message else "vanished"
        ), None
    except PermissionError:
        return _skip(out, summary, "permission"), None
    except OSError as exc:
        return _skip(out, summary, "unreadable", exc.strerror or str(exc)), None
    except ParseError as exc:
        out.status, out.reason = "failed", "not-a-result"
        summary.warnings.append(str(exc))
        return out, exc


def _ingest_one(
    store: Store,
    host: Any,
    path: str,
    summary: IngestSummary,
    name_pattern: str | None,
    lock_timeout: float | None,
    report: Callable[[int, int], None] | None = None,
    opened: Future | None = None,
) -> FileOutcome:
    """Ingest one file in one transaction; ``report(done_bytes, total_bytes)`` per chunk.
    ``opened``: its log source, opened (and its transfer started) ahead by ``_Ahead``."""
    from forensics.hosts import ReadIncomplete

    hname = host.name
    sid = source_id(hname, path)
    out = FileOutcome(path=path, host=hname, status="new", source_id=sid)
    try:
        src = opened.result() if opened is not None else open_log(host, path, where=path)
    except (FileMissing, PermissionDenied, NotRegularFile, BadPath, NotALog) as exc:
        return _skip(out, summary, SKIP_FOR[type(exc)], exc.message.split(": ", 1)[-1], exc)
    except OSError as exc:
        return _skip(out, summary, "unreadable", exc.strerror or str(exc))
    st, head = src.stat, src.head
    head_hash = hashlib.sha1(head[: min(len(head), HEAD_BYTES)]).hexdigest()
    compressed = src.transformed

    with store.transaction(lock_timeout) as tx:
        prev = tx.man.sources.get(sid)
        state = None
        offset = 0
        if prev is not None:
            same_head = prev.get("head_hash") == hashlib.sha1(
                head[: prev.get("head_len", 0)]
            ).hexdigest() and prev.get("head_len", 0) <= len(head)
            if (
                prev.get("size") == st.size
                and prev.get("mtime") == st.mtime
                and prev.get("head_hash_full") == head_hash
            ):
                out.status = "unchanged"
                out.runs = prev.get("runs", 0)
                return out
            if (
                not compressed
                and same_head
                and st.size >= prev.get("size", 0)
                and prev.get("state") is not None
            ):
                out.status = "grown"
                offset = prev["offset"]
                state = prev["state"]
                # records of a previously unfinished last line, and the run summaries,
                # are replaced below
                tx.drop_source(sid + "~tail")
                tx.drop_source(sid + "~runs")
            else:
                out.status = "rewritten"
                tx.drop_source(sid)
        if st.size == 0:
            summary.warnings.append(f"{path}: empty file (0 bytes)")
        date_hint = time.strftime("%Y-%m-%d", time.localtime(st.mtime))
        from concurrent.futures import ThreadPoolExecutor

        import polars as pl

        from forensics_parsers.sglang import LogParser, extract_batch

        parser = LogParser(path, state=state, name_pattern=name_pattern, date_hint=date_hint)
        buf = _Buffer(tx, sid)
        consumed = offset
        last_frames: Frames | None = None

        def finish_chunk(frames: Frames, prepared: pl.DataFrame | None) -> None:
            if prepared is not None:
                frames.decode, frames.prefill = extract_batch(prepared)
            buf.add(frames, path=path, host=hname)

        # Two stages on two cores: this thread splits chunk k+1 and runs the rule table
        # over it while the worker extracts the metrics fields of chunk k and buffers and
        # writes its rows (polars releases the GIL). One worker takes the chunks in order,
        # so the parts are those of a plain loop. Leaving the `with` waits for the worker:
        # no thread outlives the file, and the transaction aborts or commits after it.
        with ThreadPoolExecutor(1, thread_name_prefix="forensics-ingest") as pool:
            pending: Future | None = None
            try:
                for chunk in src.chunks(offset):
                    consumed += len(chunk)
                    frames, prepared = parser.feed_split(chunk)
                    _account(summary, out, frames)
                    job = pool.submit(finish_chunk, frames, prepared)
                    if pending is not None:
                        pending.result()  # at most one chunk waits: memory stays bounded
                    pending = job
                    last_frames = frames
                    if report:
                        report(consumed - offset, max(0, st.size - offset))
            except ReadIncomplete as exc:
                summary.warnings.append(f"{path}: {exc.message}; kept what was read")
                out.reason = "incomplete"
            except StreamDamaged as exc:
                summary.stats["compressed_truncated"] = (
                    summary.stats.get("compressed_truncated", 0) + 1
                )
                summary.warnings.append(exc.message)
            if pending is not None:
                pending.result()
        buf.flush()
        complete_state = parser.state()
        complete_offset = consumed - parser.pending_bytes if not compressed else consumed
        tail = parser.finish()
        _account(summary, out, tail)
        buf.add(tail, part_sid=sid + "~tail", path=path, host=hname)
        runs = (
            tail.runs if not tail.runs.is_empty() else (last_frames.runs if last_frames else None)
        )
        if runs is not None and not runs.is_empty():
            runs = runs.with_columns(
                pl.lit(sid).alias("source_id"),
                pl.lit(path).alias("path"),
                pl.lit(hname).alias("host_name"),
            )
            tx.append("runs", runs, source_id=sid + "~runs")
            out.runs = len(runs)
        tx.set_source(
            sid,
            {
                "path": path,
                "host": hname,
                "size": st.size,
                "mtime": st.mtime,
                "inode": st.inode,
                "head_len": min(len(head), HEAD_BYTES),
                "head_hash": head_hash,
                "head_hash_full": head_hash,
                "offset": complete_offset,
                "state": None if compressed else complete_state,
                "runs": out.runs,
                "ingested_at": time.time(),
            },
        )
    out.bytes_parsed = consumed - offset
    return out


def _account(summary: IngestSummary, out: FileOutcome, frames: Frames) -> None:
    for k, v in frames.counts.items():
        summary.counts[k] = summary.counts.get(k, 0) + v
    for k, v in frames.stats.items():
        summary.stats[k] = summary.stats.get(k, 0) + v
    out.lines += frames.stats.get("lines_total", 0)
    out.decode_lines += frames.counts.get("decode", 0)


def exit_code_for(summary: IngestSummary) -> int:
    """0, or 4 (partial) when some files failed or were skipped for a reason other than empty."""
    bad = [f for f in summary.files if f.status in ("failed",)]
    return EXIT_PARTIAL if bad else 0


__all__ = ["ingest", "IngestSummary", "FileOutcome", "expand_inputs", "source_id"]
