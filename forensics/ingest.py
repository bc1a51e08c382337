"""Inputs (local paths, globs, directories, ssh:// and NAME:/path) -> parser -> store.

Idempotent and incremental. Each log file is a *source* with a stable id (sha1 of host and
real path). The manifest keeps, per source, its size, mtime, a hash of its first bytes, the
offset of the last complete line parsed and the parser's state at that point:

* unchanged (same size, mtime, head and content hash) -> not parsed (read once to hash it);
* grown (its first bytes hash as the whole file did) -> only the new bytes are parsed, from
  the saved state;
* rewritten or truncated (anything else)  -> its rows are dropped and it is re-parsed.

The content hash (sha1 of the file's bytes) is the one cache key of a source: the verdict
cache of ``runs`` is keyed on it too, so every view agrees after a rewrite that kept the size
and mtime. The same file reached twice (a hard link: same device and inode) is ingested once;
the store's own files are never ingested as logs.

Rows of complete lines are immutable parts of the source. The run summaries (``runs``) and the
records of an unfinished last line (``<sid>~tail``) are replaced at every ingest. Files are
committed in batches (``BATCH_FILES`` files or ``BATCH_SECONDS`` seconds, whichever first,
spaced so that commits take at most ``COMMIT_SHARE`` of the time on a large store): a
crash or ``kill -9`` loses at most the batch being built, never duplicates, and the next
ingest picks up from the last commit; Ctrl-C or an error commits the files finished before it
(each file is in the store fully or not at all).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
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
    from concurrent.futures import Future

    from forensics.bench_results import RunIndex
    from forensics_parsers.sglang import Frames

READ_CHUNK = 4 << 20
BATCH_FILES = 500  # files per store commit ...
BATCH_SECONDS = 5.0  # ... or seconds of work, whichever comes first ...
COMMIT_SHARE = 0.1  # ... but commits (a manifest rewrite, O(sources)) take at most ~10 %
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
    batch = _Batch(store, lock_timeout)
    try:
        for i, (host, path) in enumerate(files):
            report = None
            if progress:

                def report(done: int, total: int, _p=path, _i=i) -> None:
                    progress(_p, _i, len(files), done, total)

                report(0, 0)
            if is_results_file(path):
                batch.commit()  # it takes the store lock itself: the batch is committed first
                if index is None:  # the runs are read once, after the logs of this call
                    index = RunIndex(store, run)
                outcome, err = _ingest_results(store, host, path, summary, index, lock_timeout)
                outcome.committed = outcome.status not in ("skipped", "failed")  # its own commit
                results_error = results_error or err
            else:
                outcome = batch.run(host, path, summary, name_pattern, report)
            summary.files.append(outcome)
        batch.commit()
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
        batch.commit()  # the files finished before Ctrl-C; the one being read is not kept
    except BaseException:
        batch.close_after_error()
        raise
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


class _Batch:
    """One store transaction over many files, committed every BATCH_FILES files or
    BATCH_SECONDS seconds; each file has a savepoint, so a file that fails leaves nothing
    and the files before it are still committed."""

    def __init__(self, store: Store, lock_timeout: float | None):
        self.store = store
        self.lock_timeout = lock_timeout
        self._cm: Any = None
        self.tx: Any = None
        self.files: list[FileOutcome] = []
        self.started = 0.0
        self.last_commit_s = 0.0  # how long the last commit took
        # (host, dev, inode) -> (source id, path) of the files of this ingest
        self.seen: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._inodes: tuple[Any, dict] | None = None  # (transaction, its inode index)

    def stored_inodes(self, tx: Any) -> dict:
        """The inode index of the sources committed before this batch (built once)."""
        if self._inodes is None or self._inodes[0] is not tx:
            self._inodes = (tx, _inode_index(tx))
        return self._inodes[1]

    def _open(self) -> None:
        if self.tx is None:
            self._cm = self.store.transaction(self.lock_timeout)
            self.tx = self._cm.__enter__()
            self.started = time.monotonic()

    def run(
        self, host: Any, path: str, summary: IngestSummary, name_pattern, report
    ) -> FileOutcome:
        self._open()
        sid = source_id(host.name, path)
        point = self.tx.savepoint(sid)
        try:
            out = _ingest_one(self.tx, host, path, summary, name_pattern, report, self)
        except BaseException:
            self.tx.rollback(point)
            raise
        self.files.append(out)
        busy = time.monotonic() - self.started
        due = len(self.files) >= BATCH_FILES or busy >= BATCH_SECONDS
        if due and busy * COMMIT_SHARE >= self.last_commit_s:
            self.commit()
        return out

    def commit(self) -> None:
        if self.tx is None:
            return
        cm, self._cm, self.tx = self._cm, None, None
        files, self.files = self.files, []
        t0 = time.monotonic()
        try:
            cm.__exit__(None, None, None)
            self.last_commit_s = time.monotonic() - t0
        except BaseException:
            for f in files:
                f.committed = False
            raise
        for f in files:
            f.committed = f.status not in ("skipped", "failed")

    def close_after_error(self) -> None:
        """An error in one file: keep the files finished before it, if the store lets us."""
        try:
            self.commit()
        except Exception:  # noqa: BLE001 - the first error is the one to report
            pass


# Why a file was skipped -> the warning shown (the other inputs are still ingested).
SKIP_REASONS = {
    "vanished": "vanished before it could be read",
    "permission": "permission denied (skipped)",
    "unreadable": "unreadable ({detail}), skipped",
    "binary": "{detail} (skipped)",
    "not-regular": "{detail} (skipped)",
    "bad-path": "{detail} (skipped)",
    "duplicate": "the same file as {detail} (a hard link): ingested once",
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
    tx: Any,
    host: Any,
    path: str,
    summary: IngestSummary,
    name_pattern: str | None,
    report: Callable[[int, int], None] | None = None,
    batch: _Batch | None = None,
) -> FileOutcome:
    """Ingest one file into ``tx``; ``report(done_bytes, total_bytes)`` per chunk."""
    from forensics.hosts import ReadIncomplete

    hname = host.name
    sid = source_id(hname, path)
    out = FileOutcome(path=path, host=hname, status="new", source_id=sid)
    if hname == "local" and _inside(path, tx.store.root):
        return _skip(out, summary, "store")
    hasher = _Hasher()
    try:
        src = open_log(hasher.tap(host), path, where=path)  # its reads feed the hash
    except (FileMissing, PermissionDenied, NotRegularFile, BadPath, NotALog) as exc:
        return _skip(out, summary, SKIP_FOR[type(exc)], exc.message.split(": ", 1)[-1], exc)
    except OSError as exc:
        return _skip(out, summary, "unreadable", exc.strerror or str(exc))
    st, head = src.stat, src.head
    dev = _device(host, path)
    same = _same_file(tx, batch, hname, dev, st.inode, sid, path)
    if same:
        return _skip(out, summary, "duplicate", same)
    head_hash = hashlib.sha1(head[: min(len(head), HEAD_BYTES)]).hexdigest()
    compressed = src.transformed

    prev = tx.man.sources.get(sid)
    state = None
    offset = 0
    if prev is not None:
        same_head = prev.get("head_hash") == hashlib.sha1(
            head[: prev.get("head_len", 0)]
        ).hexdigest() and prev.get("head_len", 0) <= len(head)
        known = prev.get("content_hash")
        if (
            known
            and prev.get("size") == st.size
            and prev.get("mtime") == st.mtime
            and prev.get("head_hash_full") == head_hash
            and hasher.of_file(host, path, st.size) == known
        ):
            out.status = "unchanged"
            out.runs = prev.get("runs", 0)
            return out
        hasher.reset()
        if (
            known
            and not compressed
            and same_head
            and st.size >= (prev.get("size") or 0)
            and prev.get("state") is not None
            and hasher.of_file(host, path, prev["size"]) == known
        ):
            out.status = "grown"
            offset = prev["offset"]
            state = prev["state"]
            # records of a previously unfinished last line, and the run summaries,
            # are replaced below
            tx.drop_source(sid + "~tail")
            tx.drop_source(sid + "~runs")
        else:
            hasher.reset()
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
            summary.stats["compressed_truncated"] = summary.stats.get("compressed_truncated", 0) + 1
            summary.warnings.append(exc.message)
        if pending is not None:
            pending.result()
    buf.flush()
    complete_state = parser.state()
    complete_offset = consumed - parser.pending_bytes if not compressed else consumed
    tail = parser.finish()
    _account(summary, out, tail)
    buf.add(tail, part_sid=sid + "~tail", path=path, host=hname)
    runs = tail.runs if not tail.runs.is_empty() else (last_frames.runs if last_frames else None)
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
            "size": hasher.size if not compressed else st.size,
            "mtime": st.mtime,
            "inode": st.inode,
            "dev": dev,
            "content_hash": hasher.hexdigest(),
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


# The store's own files, relative to its folder (logs a launch or a sweep writes under
# $FORENSICS_HOME/sweeps/..., evidence dumps, are not the store's: they may be ingested).
STORE_FILES = ("manifest.json*", "store.lock", "tables/**", "models/**")


def _inside(path: str, root: Path) -> bool:
    """Is ``path`` one of the store's own files (STORE_FILES under its folder)?"""
    import fnmatch

    try:
        rel = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return False
    if rel.startswith(".."):
        return False
    return any(fnmatch.fnmatch(rel, pat) or rel.startswith(pat.split("/")[0] + "/")
               for pat in STORE_FILES)  # fmt: skip


def _device(host: Any, path: str) -> int | None:
    if host.name != "local":
        return None  # SFTP carries no device or inode
    try:
        return os.stat(os.path.expanduser(path)).st_dev
    except OSError:
        return None


def _same_file(
    tx: Any,
    batch: _Batch | None,
    hname: str,
    dev: int | None,
    inode: int | None,
    sid: str,
    path: str,
) -> str | None:
    """The path under which this very file (same device and inode) is already ingested."""
    if dev is None or inode is None:
        return None
    key = (hname, dev, inode)
    seen = batch.seen if batch is not None else {}
    if key in seen and seen[key][0] != sid:
        return seen[key][1]
    index = batch.stored_inodes(tx) if batch is not None else _inode_index(tx)
    for osid, opath in index.get(key, ()):
        if osid == sid:
            continue
        try:
            st = os.stat(opath)
        except (OSError, TypeError):
            continue
        if (st.st_dev, st.st_ino) == (dev, inode):
            return opath
    seen[key] = (sid, path)
    return None


def _inode_index(tx: Any) -> dict[tuple[str, int, int], list[tuple[str, str]]]:
    """(host, dev, inode) -> [(source id, path)] of the stored sources that record them."""
    index: dict[tuple[str, int, int], list[tuple[str, str]]] = {}
    for osid, rec in tx.man.sources.items():
        if rec.get("dev") is not None and rec.get("inode") is not None:
            key = (rec.get("host"), rec["dev"], rec["inode"])
            index.setdefault(key, []).append((osid, rec.get("path")))
    return index


class _Hasher:
    """sha1 of a file's bytes from 0, fed in order; ``size`` = the bytes hashed so far."""

    def __init__(self) -> None:
        self.h = hashlib.sha1()
        self.size = 0

    def hexdigest(self) -> str:
        return self.h.hexdigest()

    def reset(self) -> None:
        self.h, self.size = hashlib.sha1(), 0

    def feed(self, pos: int, chunk: bytes) -> None:
        """``chunk`` read at offset ``pos``: hash the part past what is hashed already."""
        end = pos + len(chunk)
        if pos <= self.size < end:
            self.h.update(memoryview(chunk)[self.size - pos :])
            self.size = end

    def of_file(self, host: Any, path: str, upto: int) -> str | None:
        """Hash the first ``upto`` bytes; None if the file is shorter or cannot be read."""
        from forensics.hosts import ReadIncomplete

        try:
            for chunk in host.iter_chunks(path, self.size, READ_CHUNK, limit=upto - self.size):
                self.feed(self.size, chunk)
        except (ReadIncomplete, InputNotFound, OSError):
            return None
        return self.hexdigest() if self.size == upto else None

    def tap(self, host: Any) -> _TappedHost:
        return _TappedHost(host, self)


class _TappedHost:
    """``host`` whose reads also feed a _Hasher (the parse reads each byte once)."""

    def __init__(self, host: Any, hasher: _Hasher):
        self._host, self._hasher = host, hasher

    # no exec-channel stream: its wire bytes would pass the hash by; SFTP reads feed it
    stream = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def iter_chunks(self, path: str, offset: int = 0, *args: Any, **kw: Any) -> Iterator[bytes]:
        pos = offset
        for chunk in self._host.iter_chunks(path, offset, *args, **kw):
            self._hasher.feed(pos, chunk)
            pos += len(chunk)
            yield chunk

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        from forensics.hosts import ReadIncomplete

        parts: list[bytes] = []
        try:
            for chunk in self.iter_chunks(path, offset, limit=length):
                parts.append(chunk)
        except ReadIncomplete as exc:  # what was read is kept, as Host.read does
            exc.data = b"".join(parts)
            raise
        return b"".join(parts)


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
