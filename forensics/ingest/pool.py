"""Files parsed in parallel: worker processes (``--jobs``) parse logs and write their rows as
staged parts; the ingest's transaction adopts them (forensics/ingest/batch.py).

The parse holds the GIL, so N files parse at once only in N processes. The division of work:

* **The main process** opens each file, decides what to parse (unchanged, grown, rewritten:
  ``_prepare``), parses it itself when it is small, else gives it to one of N workers
  (``--jobs N``), waiting for a free one when all are busy (a big log parsed here, with
  polars' whole thread pool beside the feeds and the adoptions, was the ingest's peak RSS:
  docs/performance.md, tenth stop). For a worker's file it reads the bytes through the log
  source, local or over SSH (one connection per host lives here), feeding the content hash as
  the serial path does (a remote log streamed compressed: the wire's bytes, which its worker
  decompresses and hashes, forensics/ingest/wire.py). A
  feeder thread per file sends the chunks down a pipe to the file's worker; a worker that
  falls behind blocks its feeder, so memory stays bounded: a chunk in the pipe, one being
  parsed, STAGE_BYTES staged per table and kind (forensics/store/transaction.py).
* **A worker** (forked by the pool's zygote, which imported the parse once: forensics/ingest/
  zygote.py; else a fresh interpreter) parses the chunks with the same code as the serial
  path (``_parse_file``) into a transaction over the ingest's staging folder
  (forensics/store/staging.py), writes its parts there and sends back
  what the source record needs (``_Parsed``), its counts and warnings; for a log it parsed
  from byte 0, the verdicts of its runs too (forensics.verdicts.computed: the main process
  stores them where they are the ones it would compute).
* **Adoption** is in input order: the file's deferred drops (a rewritten file's old rows), its
  parts and its source record enter the open batch together, under one savepoint. So a
  ``kill -9`` loses at most the open batch, and the store ends with the rows, run ids and
  source records of a serial ingest (only the parts are cut differently).

A worker that raises or dies fails its file alone (status ``failed``, reason ``worker``, one
warning line, exit 4); the others are still ingested. Workers ignore SIGINT, SIGTERM and
SIGHUP: the main process handles them as a Ctrl-C (forensics/entry.py) and stops its workers
(kill, join) before it commits what was adopted. A worker whose main process is killed reads
the end of its pipe and exits (a zygote, the end of its control socket: it kills its workers).
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.errors import StreamDamaged
from forensics.ingest.heap import POLARS_THREADS, default_jobs
from forensics.ingest.outcome import FileOutcome, IngestSummary
from forensics.ingest.wire import Rerun, RoutedSource, forward, routes

POOL_MIN_BYTES = 16 << 20  # a file parsed by a worker: this many bytes to parse or more (a
# pool costs ~0.3 s of CPU to start, polars' import in its zygote: smaller files parse here)
STOP = None  # the message that ends a worker
PIPE_BYTES = 8 << 20  # socket buffer asked for (the system caps it: net.core.wmem_max)
# what a worker ignores (forensics.entry.INTERRUPT_SIGNALS: the main process handles them and
# stops its workers); a worker still ends at the end of its pipe (its main process is gone)
_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def worker_threads(jobs: int) -> int:
    """Polars' threads in each of ``jobs`` workers: their share of the cores less the one
    its own threads keep busy (reading, the rule table, staging), POLARS_THREADS at most (as
    in the main process, forensics/ingest/heap.py), one at least."""
    return max(1, min(POLARS_THREADS, default_jobs() // jobs - 1))


# -- the worker process ------------------------------------------------------------------------
class _PipedSource:
    """The worker's side of a log source: the chunks the main process sends, then how the
    read ended (a ReadIncomplete or StreamDamaged raised here, as the log source would)."""

    def __init__(self, conn: Any, stat: Any, transformed: bool, path: str):
        self.conn, self.stat, self.transformed, self.path = conn, stat, transformed, path

    def chunks(self, offset: int = 0) -> Any:
        from forensics.hosts import ReadIncomplete

        while True:
            chunk = self.conn.recv_bytes()
            if not chunk:
                break
            yield chunk
        end = self.conn.recv()  # (kind, message) or None
        if end is None:
            return
        kind, message = end
        if kind == "incomplete":
            raise ReadIncomplete(message, path=self.path, bytes_read=0)
        if kind == "damaged":
            raise StreamDamaged(message, truncated=True, kept=0)
        raise _Aborted(message)


class _Aborted(Exception):
    """The main process could not read the file: it reports the error itself."""


def _worker_entry() -> None:
    """A spawned worker process's main (``_Worker``): its pipe is the fd in argv[1]."""
    import sys
    from multiprocessing.connection import Connection

    from forensics.collector import resume

    _prepare()
    resume()
    _worker_main(Connection(int(sys.argv[1])))


def _prepare() -> None:
    """A worker's process before its first file (a spawned worker's, a zygote's: forensics/
    ingest/zygote.py): one arena, signals ignored, the parse imported, the collector paused."""
    from forensics.collector import pause
    from forensics.ingest.heap import one_arena
    from forensics.unread import install

    one_arena()  # before the parse's threads start (forensics/ingest/heap.py)
    install()  # before polars: what it imports and a parse never reads (forensics/unread.py)
    for sig in _SIGNALS:  # Ctrl-C, kill, hang-up: the main process's to handle (it stops us)
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)  # blocked from its start
    pause()  # no garbage collection through the imports (forensics/collector.py)
    _import_parse()


def _import_parse() -> None:
    """What a job runs, imported before the first job comes (~0.3 s of CPU, polars and the
    rule tables): a worker started ahead (forensics/ingest/ahead.py) imports it while the
    main process opens the logs. An import that fails raises again in the job, its error."""
    try:
        import forensics.classifier.stored  # noqa: F401
        import forensics.ingest.file  # noqa: F401
        import forensics.store.transaction  # noqa: F401
        import forensics_parsers.sglang  # noqa: F401
    except Exception:  # noqa: BLE001 - reported by the job that needs it
        pass


def _worker_main(conn: Any) -> None:
    """A worker's loop: one job (a file) after another until STOP or the pipe's end."""
    while True:
        try:
            spec = conn.recv()
        except (EOFError, OSError):
            return  # the main process is gone
        if spec is STOP:
            return
        try:
            reply = ("ok", _run_job(conn, spec))
        except _Aborted:
            reply = ("aborted", None)
        except Rerun:  # its routed wire failed, read to its end: the main feeds it again
            reply = ("rerun", None)
        except Exception as exc:  # noqa: BLE001 - the file's outcome, never the ingest's
            text = str(exc).splitlines()[0][:300] if str(exc) else ""
            reply = ("error", f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
        try:
            conn.send(reply)
        except OSError:
            return
        if reply[0] not in ("ok", "rerun"):
            return  # its pipe may hold the rest of the file: this worker is done


def _run_job(conn: Any, spec: dict[str, Any]) -> dict[str, Any]:
    """Parse one file's bytes from the pipe into parts of the staging folder."""
    from types import SimpleNamespace

    from forensics.classifier.stored import Written
    from forensics.ingest.file import _Opened, _parse_file
    from forensics.store.manifest import Manifest
    from forensics.store.transaction import Transaction

    out = FileOutcome(path=spec["path"], host=spec["host"], status="new", source_id=spec["sid"])
    routed = spec.get("routed", False)  # the wire's bytes (forensics/ingest/wire.py)
    source = RoutedSource if routed else _PipedSource
    src = source(conn, spec["stat"], spec["transformed"], spec["path"])
    opened = _Opened(out, src, None, None, "", resume=spec["resume"])
    # parsed from byte 0, the log's rows are all here: its verdicts are computed here too
    # (a grown log's earlier rows are in the store: the main process classifies it)
    whole = spec["resume"][0] == 0 and spec.get("store") is not None
    if whole:  # the classifier's imports and model beside the parse (once per worker)
        opened.on_parse = functools.partial(_warm_verdicts, spec["store"])
    tx = Transaction(SimpleNamespace(root=Path(spec["staging"])), Manifest())
    # what the verdict step reads of each part, kept here where the rows are: the main
    # process reading 8 x 100 MB of parts back was ~1.6 s of CPU on its one core (issue 15)
    tx.on_write = written = Written()
    summary = IngestSummary()
    try:
        parsed = _parse_file(tx, opened, summary, spec["name_pattern"], None)
        parts = tx.write_staged()  # the last parts written, every fsync in flight
        # the verdicts need only what the worker kept of its parts: computed while the
        # fsyncs run (the tail of a worker was parse, write, fsync, verdicts: issue 15)
        verdicts = _verdicts(spec, parts, written, parsed, out) if whole else None
        tx.staged_durable()  # the main process adopts only parts on the disk
    except BaseException:
        tx.abort()
        raise
    return {
        "parsed": parsed,
        "parts": parts,
        "kept": {name: written.get(table, name) for table, _, _, name in parts},
        "verdicts": verdicts,
        "lines": out.lines,
        "decode_lines": out.decode_lines,
        "reason": out.reason,
        "counts": summary.counts,
        "stats": summary.stats,
        "warnings": summary.warnings,
        "hashed": src.hashed if routed else None,
    }


_warming: list[threading.Thread] = []  # a worker's forensics.verdicts.warm, once


def _warm_verdicts(store: str) -> None:
    """A parse begins: the verdict step's imports and model load beside it, in a thread."""
    if not _warming:
        from forensics.verdicts import warm

        thread = threading.Thread(target=warm, args=(store,), name="forensics-verdicts-warm")
        thread.start()
        _warming.append(thread)


def _verdicts(spec: dict[str, Any], parts: list, written: Any, parsed: Any, out: Any) -> Any:
    """The verdict rows of the log this worker parsed whole (forensics.verdicts.computed),
    sent with its parts: the main process stores them (it classified every run of the 8
    logs of a parallel ingest after their commit, ~1 s of its one core, issue 15). None
    where they cannot be computed here: the main process computes them, as for any log."""
    from forensics.ingest.file import _run_rows
    from forensics.verdicts import computed

    for thread in _warming:
        thread.join()
    source = {"id": spec["sid"], "store": spec["store"], "path": spec["path"]}
    source["mtime"] = spec["stat"].mtime
    try:
        open_runs = _run_rows(parsed.runs, out) if parsed.runs is not None else None
        return computed(written, [(t, n, keys) for t, _, keys, n in parts], open_runs, source)
    except Exception:  # noqa: BLE001 - the main process computes them, as for any log
        return None


# -- the main process's side -------------------------------------------------------------------
@dataclass
class Job:
    """One file given to a worker: what the main process keeps of it until adoption."""

    opened: Any  # forensics.ingest.file._Opened
    drops: list[str]  # source keys to drop at adoption (_compare's, deferred)
    report: Any = None
    result: dict[str, Any] | None = None
    error: str = ""  # the worker's error, or that it died
    read_error: BaseException | None = None  # the main process's read of the file failed
    done: bool = False
    feeder: threading.Thread | None = None
    worker: Any = None
    spec: dict[str, Any] | None = None  # what its worker was sent (Pool.submit)

    @property
    def out(self) -> FileOutcome:
        return self.opened.out


class _Worker:
    """A worker process, joined to this process by a socket pair: forked by the pool's zygote
    (forensics/ingest/zygote.py), else a fresh interpreter running ``_worker_entry`` (not
    multiprocessing's spawn, which imports the caller's main module again)."""

    def __init__(self, threads: int, zygote: Any = None):
        import socket
        from multiprocessing.connection import Connection

        from forensics.ingest.zygote import interpreter

        ours, theirs = socket.socketpair()
        for sock, opt in ((ours, socket.SO_SNDBUF), (theirs, socket.SO_RCVBUF)):
            # a chunk (READ_CHUNK) in one write where the system allows it: fewer wake-ups
            # of the worker per chunk (the default buffer, ~200 KB, is 20 per chunk)
            sock.setsockopt(socket.SOL_SOCKET, opt, PIPE_BYTES)
        code = "from forensics.ingest.pool import _worker_entry; _worker_entry()"

        def spawn(fd: int) -> Any:
            return interpreter(code, fd, threads)

        if zygote is not None:  # it closes theirs
            self.proc = zygote.worker(theirs, spawn, threads)
        else:
            try:
                self.proc = spawn(theirs.fileno())
            finally:
                theirs.close()
        self.conn = Connection(ours.detach())
        self.job: Job | None = None
        self.used = False  # given a file (else, started ahead, it only imported: killed)
        self.stopping = False  # told to stop (``Pool.stop_idle``)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def idle(self) -> bool:
        """Alive and waiting for a file."""
        return self.job is None and self.alive()


class Pool:
    """Up to ``jobs`` worker processes, started when a file needs one (each with its share
    of polars' threads: ``share``)."""

    def __init__(
        self, jobs: int, staging: Path, store: Path | None = None, expected: int | None = None
    ):
        self.jobs = jobs
        self.staging = staging
        self.store = store  # the store's folder: a worker's verdicts use its model
        # the files it is likely to parse at once (the logs listed, or the remote inputs
        # before): a worker's share of the cores is of those, not of ``jobs`` (``share``)
        self.expected = expected
        self.workers: list[_Worker] = []
        self._spawning: threading.Thread | None = None  # prestart_beside's
        self._zygote: Any = None  # forensics.ingest.zygote.Zygote, started with the first worker

    @classmethod
    def of_store(cls, root: Path, jobs: int, expected: int | None = None) -> Pool:
        """The pool of an ingest into the store at ``root``: its staging folder made, the
        cores shared among the workers' polars threads (``share``)."""
        from forensics.store.staging import new_staging

        return cls(jobs, new_staging(root), store=root, expected=expected)

    def share(self) -> int:
        """Polars' threads of the next worker: the cores shared among the workers that will
        parse at once, those started and this one or ``expected`` if more, ``jobs`` at most
        (2 hosts' logs on 16 cores: 4 threads each, where 16 jobs' share was 1)."""
        at_once = max(len(self.workers) + 1, self.expected or self.jobs)
        return worker_threads(min(self.jobs, at_once))

    def prestart(self, idle: int) -> None:
        """Workers started now, ``jobs`` at most, until ``idle`` of them wait for a file."""
        self._joined()
        self.workers = [w for w in self.workers if w.job is not None or w.alive()]
        while len(self.workers) < self.jobs and sum(w.job is None for w in self.workers) < idle:
            self.workers.append(self._start())

    def prestart_beside(self, idle: int) -> None:
        """``prestart`` in a thread: the caller goes on (connects its hosts) while the
        workers are spawned (~5 ms each, more on a busy machine). Every other method
        waits for that thread first (``submit``: for one idle worker it started)."""

        def spawn() -> None:
            with contextlib.suppress(Exception):  # a worker it could not start: on demand
                self.prestart(idle)

        self._spawning = threading.Thread(target=spawn, name="forensics-spawn", daemon=True)
        self._spawning.start()

    def _joined(self, idle: bool = False) -> None:
        """Wait for ``prestart_beside``'s thread to end (``idle``: or to have started a worker
        that waits for a file: a file fed while the inputs are listed, forensics/ingest/
        early.py, waited for all of them, ~0.4 s on 2 loaded cores)."""
        spawning = self._spawning
        if spawning is None or spawning is threading.current_thread():
            return
        while idle and spawning.is_alive():
            if any(w.idle() for w in list(self.workers)):
                return
            spawning.join(0.01)
        spawning.join()
        self._spawning = None

    def submit(self, job: Job, name_pattern: str | None) -> None:
        """Give ``job`` to an idle worker (started if fewer than ``jobs`` run), waiting for one
        to finish its file when all are busy; a feeder thread sends it the file's bytes."""
        w = self._idle()
        o = job.opened
        job.spec = {
            "path": o.out.path,
            "host": o.out.host,
            "sid": o.out.source_id,
            "stat": o.src.stat,
            "transformed": o.compressed,
            "resume": o.resume,
            "name_pattern": name_pattern,
            "staging": str(self.staging),
            "store": str(self.store) if self.store is not None else None,
            "routed": routes(o),  # the wire's bytes, decompressed by the worker
        }
        w.job, job.worker, w.used = job, w, True
        _start_feed(w, job)

    def free(self) -> bool:
        """Would ``submit`` give a file at once (an idle worker, or room for one)? The replies
        of workers done meanwhile are collected first."""
        self.wait(block=False)
        self._joined(idle=True)
        workers = list(self.workers)
        if any(w.idle() for w in workers):
            return True
        return (
            self._spawning is None
            and sum(w.job is not None or w.alive() for w in workers) < self.jobs
        )

    def _idle(self) -> _Worker:
        self._joined(idle=True)  # the first idle worker prestart_beside starts will do
        while True:
            for w in list(self.workers):
                if w.idle():
                    return w
            if self._spawning is not None:  # it may start one yet; the list is ours after it
                self._joined()
                continue
            self.workers = [w for w in self.workers if w.job is not None or w.alive()]
            if len(self.workers) < self.jobs:
                w = self._start()
                self.workers.append(w)
                return w
            self.wait(block=True)

    def _start(self) -> _Worker:
        """A new worker, forked by the pool's zygote (started now if it is the first one)."""
        if self._zygote is None:
            from forensics.ingest.zygote import Zygote

            self._zygote = Zygote.start() or False  # False: none (spawned)
        return _Worker(self.share(), self._zygote or None)

    def wait(self, block: bool) -> None:
        """Collect the replies of workers that finished a file (at least one if ``block``):
        of workers given a file, which ``prestart_beside``'s thread leaves alone."""
        from multiprocessing.connection import wait

        busy = {w.conn: w for w in self.workers if w.job is not None}
        if not busy:
            return
        ready = wait(list(busy), timeout=None if block else 0)
        for conn in ready:
            w = busy[conn]
            job = w.job
            assert job is not None
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                kind, payload = "error", f"its worker process died (exit {_exitcode(w)})"
            if job.feeder is not None:
                job.feeder.join()  # it sent the end (the worker replied after reading it)
            if kind == "rerun":  # once, as plain bytes (forensics/ingest/wire.py)
                assert job.spec is not None
                job.spec["routed"] = False
                _start_feed(w, job)
                continue
            if kind == "ok":
                job.result = payload
                if payload["hashed"] is not None:  # the worker hashed the wire's log
                    job.opened.hasher.adopt(*payload["hashed"])
            elif kind == "error":
                job.error = payload
            job.done, w.job = True, None
            if kind != "ok":
                _stop(w)

    def stop_idle(self) -> None:
        """Tell each idle worker that was given a file to stop (no file comes after): they
        exit while the caller goes on, and ``close`` waits for them."""
        self._joined()
        for w in self.workers:
            if w.job is None and w.used and not w.stopping:
                w.stopping = True
                with contextlib.suppress(OSError):
                    w.conn.send(STOP)

    def close(self) -> None:
        """Stop every worker: idle ones are told to, busy ones and those never given a file
        killed; none outlives the ingest."""
        self.stop_idle()
        for w in self.workers:
            if not (w.job is None and w.used):  # busy, or started ahead and never given a
                w.proc.kill()  # file (no part of it anywhere); it ignores SIGTERM
        for w in self.workers:
            _stop(w)
        self.workers = []
        if self._zygote:
            self._zygote.close()  # after its workers: it kills those it still has
        self._zygote = None


def _exitcode(w: _Worker) -> Any:
    import subprocess

    try:
        return w.proc.wait(5)
    except subprocess.TimeoutExpired:
        return None


def _stop(w: _Worker) -> None:
    import subprocess

    try:
        w.proc.wait(5)
    except subprocess.TimeoutExpired:
        w.proc.kill()
        w.proc.wait()
    if w.job is not None and w.job.feeder is not None:
        w.job.feeder.join(5)  # its writes fail now; a remote read it waits on is bounded too
    w.conn.close()


def _start_feed(w: _Worker, job: Job) -> None:
    """Send ``w`` the job's spec, and start the feeder thread that sends it the file."""
    try:
        w.conn.send(job.spec)
    except OSError:  # it died before its first file: the feeder sees it too
        pass
    job.feeder = threading.Thread(
        target=_feed, args=(w.conn, job), daemon=True, name="forensics-ingest-feed"
    )
    job.feeder.start()


def _feed(conn: Any, job: Job) -> None:
    """The feeder thread: the file's chunks down the worker's pipe, then how the read ended
    (a routed log: its wire's bytes, forensics/ingest/wire.py). A write that fails means the
    worker is gone (Pool.wait reports it)."""
    from forensics.hosts import ReadIncomplete

    if job.spec is not None and job.spec["routed"]:
        forward(conn, job, _send)
        return
    o = job.opened
    o.src.decode_ahead = False  # this thread only sends: a remote stream decoded here
    offset = o.resume[0]
    total = max(0, o.src.stat.size - offset)
    done = 0
    end: Any = None
    try:
        for chunk in o.src.chunks(offset):
            if not _send(conn.send_bytes, chunk):
                return
            done += len(chunk)
            if job.report:
                job.report(done, total)
    except ReadIncomplete as exc:
        end = ("incomplete", exc.message)
    except StreamDamaged as exc:
        end = ("damaged", exc.message)
    except Exception as exc:  # noqa: BLE001 - re-raised by the main thread at adoption
        job.read_error, end = exc, ("abort", str(exc))
    if _send(conn.send_bytes, b""):
        _send(conn.send, end)


def _send(how: Any, what: Any) -> bool:
    try:
        how(what)
    except OSError:
        return False
    return True


class _Deferring:
    """The transaction as ``_prepare`` sees it in a parallel ingest: what it drops (a rewritten
    file's rows, a grown file's tail) is kept for the file's adoption, so the drop and the new
    rows enter the same commit. ``hold_digests``: the digests it sets are kept too (a log
    prepared out of turn, forensics/ingest/early.py: set in its turn)."""

    def __init__(self, tx: Any, hold_digests: bool = False):
        self.tx = tx
        self.drops: list[str] = []
        self.digests: list[tuple[str, str]] | None = [] if hold_digests else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tx, name)

    def drop_source(self, key: str) -> None:
        self.drops.append(key)

    def set_digest(self, sid: str, digest: str) -> None:
        if self.digests is None:
            self.tx.set_digest(sid, digest)
        else:
            self.digests.append((sid, digest))
