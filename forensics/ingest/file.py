"""Ingest of one log file into a transaction: decide what changed (unchanged, grown,
rewritten), parse the new bytes from the saved state, buffer its rows as parts."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forensics.errors import (
    BadPath,
    FileMissing,
    InputNotFound,
    NotALog,
    NotRegularFile,
    PermissionDenied,
    StreamDamaged,
)
from forensics.ingest.hashing import _Hasher, outdated
from forensics.ingest.identity import (
    _device,
    _inside,
    _same_file,
    continues,
    shown_path,
    source_id,
)
from forensics.ingest.outcome import SKIP_FOR, FileOutcome, IngestSummary, _account, _skip
from forensics.logsource import HEAD_BYTES, open_log

if TYPE_CHECKING:  # polars and the parser load only when a file has new bytes to parse
    from concurrent.futures import Future

    from forensics.ingest.batch import _Batch
    from forensics_parsers.sglang import Frames

PER_SOURCE_TABLES = ("events", "decode", "prefill", "errors", "lines")


def _stage(tx: Any, sid: str, frames: Frames, key: str) -> None:
    """The rows of ``frames`` into the transaction's shared parts, as rows of ``key``
    (``sid`` for complete lines, ``sid~tail`` for an unfinished last line)."""
    import polars as pl

    for t in PER_SOURCE_TABLES:
        df = getattr(frames, t)
        if not df.is_empty():
            tx.stage(t, df.with_columns(pl.lit(sid).alias("source_id")), key)


def _run_rows(runs: Any, out: FileOutcome) -> Any:
    """Run summaries as rows of the runs table: with their source, path and host."""
    import polars as pl

    return runs.with_columns(
        pl.lit(out.source_id).alias("source_id"),
        pl.lit(out.path).alias("path"),
        pl.lit(out.host).alias("host_name"),
    )


@dataclass
class _Opened:
    """A log opened for ingest: what is known of it before its bytes are parsed."""

    out: FileOutcome
    src: Any  # forensics.logsource's opened log
    hasher: _Hasher
    dev: int | None
    head_hash: str
    resume: tuple[int, dict[str, Any] | None] = (0, None)  # (offset, parser state) to parse from
    # called as the parse begins: the verdict step's imports beside the parse (the batch of
    # the main process: _Batch.warm_verdicts; a pool worker's: pool._warm_verdicts)
    on_parse: Callable[[], None] | None = None

    @property
    def compressed(self) -> bool:
        return bool(self.src.transformed)


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
    opened = _prepare(tx, host, path, summary, batch)
    if isinstance(opened, FileOutcome):
        return opened
    parsed = _parse_file(tx, opened, summary, name_pattern, report)
    if opened.out.reason != "undecodable":  # no record: the next ingest tries it again
        _record(tx, opened, parsed)
    return opened.out


def _prepare(
    tx: Any, host: Any, path: str, summary: IngestSummary, batch: _Batch | None
) -> _Opened | FileOutcome:
    """Open ``path`` and decide what to parse (``resume``), or its outcome when there is
    nothing to parse (skipped, unchanged)."""
    opened = _open(tx, host, path, summary, batch)
    if isinstance(opened, FileOutcome):
        return opened
    resume = _compare(tx, host, path, opened)
    if resume is None:
        return opened.out
    opened.resume = resume
    opened.on_parse = batch.warm_verdicts if batch is not None else None
    if opened.src.stat.size == 0:
        summary.warnings.append(f"{path}: empty file (0 bytes)")
    return opened


@dataclass
class _Parsed:
    """What the parse of one file leaves for its source record (picklable: an ingest worker,
    forensics/ingest/pool.py, sends it back)."""

    consumed: int  # bytes read up to
    offset: int  # the end of the last complete line (the resume point)
    state: dict[str, Any]  # the parser's state there
    runs: Any  # the summaries of the runs still open at the end (a polars frame) or None
    bytes_parsed: int
    runs_closed: int = 0  # runs that ended before, staged with the log's rows as they ended


def _parse_file(
    tx: Any,
    opened: _Opened,
    summary: IngestSummary,
    name_pattern: str | None,
    report: Callable[[int, int], None] | None,
) -> _Parsed:
    """Parse the bytes ``opened.resume`` names, its rows staged into ``tx``."""
    from forensics_parsers.sglang import LogParser

    _freeze_long_lived()
    if opened.on_parse is not None:
        opened.on_parse()
    offset, state = opened.resume
    date_hint = time.strftime("%Y-%m-%d", time.localtime(opened.src.stat.mtime))
    path = opened.out.path
    parser = LogParser(path, state=state, name_pattern=name_pattern, date_hint=date_hint)
    consumed, closed = _parse(tx, opened, parser, summary, offset, report)
    complete_offset = consumed - parser.pending_bytes if not opened.compressed else consumed
    # the state at the resume point, copied now: finish() below parses the pending bytes and
    # mutates the parser's run records. Nothing complete yet (a small file still inside the
    # parser's sniff window, a first line not ended): no state, so a grown file is parsed
    # again from its start, its rows replaced (it used to resume at 0 with a state that had
    # seen the run: a second run of the same launch)
    complete_state = (
        json.loads(json.dumps(parser.state(), default=str)) if complete_offset else None
    )
    tail = parser.finish()
    _account(summary, opened.out, tail)
    _stage(tx, opened.out.source_id, tail, opened.out.source_id + "~tail")
    runs = tail.runs if not tail.runs.is_empty() else None
    return _Parsed(consumed, complete_offset, complete_state, runs, consumed - offset, closed)


@functools.cache
def _freeze_long_lived() -> None:
    """Once per process, the parser imported: what is alive now (modules, polars, the rule
    tables: objects that live as long as the process) moves to the garbage collector's
    permanent generation, so the full collections the parse of a big file triggers do not
    walk it again (~0.04 s of a 100 MB ingest). Only the cycles already garbage now are
    never freed: a few, once. The collector, paused through the start by the entry point,
    runs again from here (forensics/collector.py)."""
    import gc

    from forensics.collector import resume

    gc.freeze()
    resume()


def _open(
    tx: Any, host: Any, path: str, summary: IngestSummary, batch: _Batch | None
) -> _Opened | FileOutcome:
    """Open ``path`` through the log source (its reads feed the content hash), or the
    outcome of a file skipped (the store's own, refused by the log source, a hard link)."""
    hname = host.name
    sid = source_id(hname, path)
    out = FileOutcome(path=path, host=hname, status="new", source_id=sid)
    if hname == "local" and _inside(path, tx.store.root):
        return _skip(out, summary, "store")
    if shown_path(path) != path:  # the store holds names as text (UTF-8)
        exc = BadPath(
            f"{shown_path(path)}: its name is not valid UTF-8, which the store cannot hold",
            hint="rename the file (forensics classify reads it as it is)",
        )
        return _skip(out, summary, "bad-path", exc.message.split(": ", 1)[-1], exc)
    # fed from the first read: also in the algorithm of the stored digest, where an older
    # store's record holds another (compared like with like, ``_compare``)
    like = (tx.man.sources.get(sid) or {}).get("content_hash")
    ahead = batch.ahead if batch is not None else None  # a parallel ingest's (ingest/ahead.py)
    try:
        if ahead is not None:
            src, hasher = ahead.take(host, path, like)
        else:
            src, hasher = _log_source(host, path, like)
    except (FileMissing, PermissionDenied, NotRegularFile, BadPath, NotALog) as exc:
        return _skip(out, summary, SKIP_FOR[type(exc)], exc.message.split(": ", 1)[-1], exc)
    except OSError as exc:
        return _skip(out, summary, "unreadable", exc.strerror or str(exc))
    dev = _device(host, path)
    head_hash = hashlib.sha1(src.head[: min(len(src.head), HEAD_BYTES)]).hexdigest()
    unchanged = {"size": src.stat.size, "mtime": src.stat.mtime, "head_hash_full": head_hash}
    same = _same_file(tx, batch, hname, dev, src.stat.inode, sid, path, unchanged)
    if same and same[0] == "continued":  # renamed, then grown: the stored log continued
        rec = tx.man.sources.get(same[1]) or {}
        if continues(rec, src, hasher, head_hash):
            out.source_id, out.path = same[1], rec["path"]  # under the name it was stored by
            summary.warnings.append(
                f"{path}: the log ingested as {rec['path']}, renamed and grown since: "
                "its new lines are added to it"
            )
        same = None
    if same:
        return _skip(out, summary, *same)
    return _Opened(out, src, hasher, dev, head_hash)


def _log_source(host: Any, path: str, like: str | None = None) -> tuple[Any, _Hasher]:
    """``path`` opened through the log source, its reads feeding a new content hash."""
    hasher = _Hasher(like=like)
    return open_log(host, path, where=path, hasher=hasher), hasher


def _compare(tx: Any, host: Any, path: str, o: _Opened) -> tuple[int, dict[str, Any] | None] | None:
    """What changed since the last ingest: None when nothing did (``o.out`` says unchanged),
    else (offset, parser state) to parse from: (0, None) for a new or rewritten file (whose
    rows are dropped), the saved point of a grown one (its tail and run summaries dropped)."""
    sid, st, head = o.out.source_id, o.src.stat, o.src.head
    prev = tx.man.sources.get(sid)
    if prev is None:
        return 0, None
    known = prev.get("content_hash")
    if (
        known
        and prev.get("size") == st.size
        and prev.get("mtime") == st.mtime
        and prev.get("head_hash_full") == o.head_hash
        and o.hasher.of_file(o.src, st.size, like=known) == known
    ):
        o.out.status = "unchanged"
        o.out.runs = prev.get("runs", 0)
        if outdated(known):  # an older store's sha1, verified: the current digest of the
            # same bytes, from the same read (_Hasher computes both), is stored with the
            # ingest's commit; the next ingest verifies the log at xxh3's cost
            tx.set_digest(sid, o.hasher.digest())
        return None
    o.hasher.reset()
    head_len = prev.get("head_len", 0)
    same_head = (
        head_len <= len(head) and prev.get("head_hash") == hashlib.sha1(head[:head_len]).hexdigest()
    )
    if (
        known
        and not o.compressed
        and same_head
        and st.size >= (prev.get("size") or 0)
        and prev.get("resume")
        and o.hasher.of_file(o.src, prev["size"], like=known) == known
    ):
        state = _saved_state(tx, sid)
        o.out.status = "grown"
        if state is None:  # no line was complete at the last ingest: read it whole again
            tx.drop_source(sid)
            return 0, None
        # records of a previously unfinished last line, the run summaries and the
        # resume state are replaced
        for kind in ("~tail", "~runs", "~state"):
            tx.drop_source(sid + kind)
        return prev["offset"], state
    o.hasher.reset()
    o.out.status = "rewritten"
    tx.drop_source(sid)
    return 0, None


def _saved_state(tx: Any, sid: str) -> dict[str, Any] | None:
    """The parser's state after the last complete line ingested (the states table; a
    schema-3 manifest's own until its first write moves it there)."""
    import json

    if sid in tx.man.legacy_states:
        return tx.man.legacy_states[sid]
    rows = tx.rows_of("states", sid + "~state")
    if rows is None or rows.is_empty():
        return None
    return json.loads(rows["state"][-1])


def _parse(
    tx: Any,
    o: _Opened,
    parser: Any,
    summary: IngestSummary,
    offset: int,
    report: Callable[[int, int], None] | None,
) -> tuple[int, Frames | None]:
    """Feed the bytes from ``offset`` to ``parser``, its rows into ``tx``; -> (bytes consumed
    up to, the number of runs that ended: their rows are staged with the log's own, final
    like them, so no run is held for the whole file)."""
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import nullcontext

    from forensics.hosts import ReadIncomplete
    from forensics_parsers.sglang import extract_batch

    size, sid = o.src.stat.size, o.out.source_id
    path = o.out.path
    consumed = offset
    closed = 0

    def finish_chunk(frames: Frames, prepared: Any) -> None:
        if prepared is not None:
            frames.decode, frames.prefill = extract_batch(prepared)
        _stage(tx, sid, frames, sid)
        if not frames.runs.is_empty():
            tx.stage("runs", _run_rows(frames.runs, o.out), sid)

    # Three stages on two cores (polars releases the GIL): one thread reads chunk k+1 and
    # splits it into lines (parser.split_lines), this one runs the rule table over chunk k
    # (parser.feed_lines), the worker extracts the metrics fields of chunk k-1 and stages
    # its rows (and writes a part every STAGE_ROWS rows). Each stage takes the chunks in
    # order, so the rows and parts are those of a plain loop. Leaving the `with` waits for
    # both threads: none outlives the file, and the transaction aborts or commits after it.
    # The content hash of the bytes read is computed by the reads (xxh3: ~4 ms per 100 MB),
    # an old store's sha1 in a third thread (hasher.beside), entered first and left last:
    # every read that feeds it happens inside.
    # A small file is read, parsed and staged in this thread alone, in the same order: three
    # threads started and joined cost more than they overlap (~1 ms of a 2 KB log's ~10)
    threads = o.compressed or not 0 < size - offset <= SERIAL_BYTES

    def executor(name: str) -> Any:
        return ThreadPoolExecutor(1, thread_name_prefix=name) if threads else _Inline()

    with (
        o.hasher.beside() if o.hasher is not None and threads else nullcontext(),  # None: a worker
        executor("forensics-ingest") as pool,
        executor("forensics-split") as ahead,
    ):
        _start_threads(pool, ahead)
        pending: Future | None = None
        try:
            for n, lines in _split_ahead(parser, o.src.chunks(offset), ahead):
                consumed += n
                frames, prepared = parser.feed_lines(lines)
                _account(summary, o.out, frames)
                job = pool.submit(finish_chunk, frames, prepared)
                if pending is not None:
                    pending.result()  # at most one chunk waits: memory stays bounded
                pending = job
                closed += len(frames.runs)
                if report:
                    report(consumed - offset, max(0, size - offset))
        except ReadIncomplete as exc:
            summary.warnings.append(f"{path}: {exc.message}; kept what was read")
            o.out.reason = "incomplete"
        except StreamDamaged as exc:
            summary.stats["compressed_truncated"] = summary.stats.get("compressed_truncated", 0) + 1
            summary.warnings.append(exc.message)
            if consumed == offset == 0:  # nothing decoded: not read, as classify says (exit 3)
                summary.refused.append(InputNotFound(exc.message, hint=exc.hint))
                o.out.status, o.out.reason = "skipped", "undecodable"
        if pending is not None:
            pending.result()
    return consumed, closed


SERIAL_BYTES = 1 << 20  # bytes to parse up to which a file is parsed without threads (_parse)


def _start_threads(*executors: Any) -> None:
    """Each one-thread executor's thread started now, by a job that does nothing, before any
    job that stages rows. ``submit`` starts the thread for its first job, and a Ctrl-C (or
    SIGTERM) in ``Thread.start``, which waits for the new thread to run, left that thread out
    of the executor's list: leaving the ``with`` did not wait for it, and it ran its job. That
    job staged the file's rows after the file was rolled back, the interrupt's commit held
    them without the file's source record, and the same command stored them again (a log
    parsed here twice: docs/performance.md, "An interrupted parallel ingest, tenth stop").
    Started so, a thread the interrupt leaves out runs nothing, and the next jobs start none."""
    for executor in executors:
        executor.submit(_nothing)


def _nothing() -> None:
    return None


class _Inline:
    """A ThreadPoolExecutor's ``submit`` run at once in the caller's thread (_parse of a small
    file): the job's error comes out of ``result()``, as from a thread."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        from concurrent.futures import Future

        done: Future = Future()
        try:
            done.set_result(fn(*args))
        except Exception as exc:  # noqa: BLE001 - raised by result(), as a thread's is
            done.set_exception(exc)
        return done


def _split_ahead(parser: Any, chunks: Any, pool: Any) -> Any:
    """(bytes, ``parser.split_lines(chunk)``) of each chunk, the next one read and split in
    ``pool``'s thread while the caller parses this one. A read error comes out here, in
    order, after the chunks before it."""
    it = iter(chunks)

    def step() -> tuple[int, Any] | None:
        chunk = next(it, None)
        return None if chunk is None else (len(chunk), parser.split_lines(chunk))

    job = pool.submit(step)
    while (got := job.result()) is not None:
        job = pool.submit(step)
        yield got


def _record(tx: Any, o: _Opened, parsed: _Parsed) -> None:
    """The run summaries of the file, its resume state and its source record."""
    import json

    import polars as pl

    runs, offset, state = parsed.runs, parsed.offset, parsed.state
    o.out.bytes_parsed = parsed.bytes_parsed
    sid, path, hname = o.out.source_id, o.out.path, o.out.host
    # a grown log's runs that ended before its last ingest stay stored (rows of the log)
    prev = (tx.man.sources.get(sid) or {}) if o.out.status == "grown" else {}
    closed = prev.get("runs_closed", 0) + parsed.runs_closed
    o.out.runs = closed
    if runs is not None and not runs.is_empty():
        tx.stage("runs", _run_rows(runs, o.out), sid + "~runs")
        o.out.runs += len(runs)
    if not o.compressed:  # a decompressed stream is read again from its start
        text = json.dumps(state, default=str)
        tx.stage("states", pl.DataFrame({"source_id": [sid], "state": [text]}), sid + "~state")
    st, head = o.src.stat, o.src.head
    tx.set_source(
        sid,
        {
            "path": path,
            "host": hname,
            "size": o.hasher.size if not o.compressed else st.size,
            "mtime": st.mtime,
            "inode": st.inode,
            "dev": o.dev,
            "content_hash": o.hasher.digest(),
            "head_len": min(len(head), HEAD_BYTES),
            "head_hash": o.head_hash,
            "head_hash_full": o.head_hash,
            "offset": offset,
            "resume": not o.compressed,
            "runs": o.out.runs,
            "runs_closed": closed,
            "ingested_at": time.time(),
        },
    )
