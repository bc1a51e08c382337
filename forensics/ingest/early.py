"""A parallel ingest's logs given to their workers while the other inputs are still listed
(issue 15, "8 hosts ≈ the slowest host"; docs/performance.md, "A slow host's parse,
thirteenth stop").

Each remote input is looked up in a thread of its own and its logs opened as soon as they are
listed (forensics/ingest/inputs.py, ahead.py), but the main thread took the files in input
order only once every input was listed: a host that connects slowly held back every parse.
Now, while the main thread waits for an input's lookup (``EarlyFeed.wait``), it takes each
log opened so far, decides what to parse of it (``_prepare``, as in its turn) and gives it
to a free worker. What the user sees stays that of an ingest that lists first:

* **In its turn.** Each log still has its turn, in input order, once every input is listed
  (forensics/ingest/batch.py): what ``_prepare`` added to the summary (its warnings, a skip)
  is added then, the store's records it changes (a rewritten log's old rows dropped, an old
  digest upgraded) are changed then, the worker's file is adopted then. A log of a remote
  input is the same file whichever input names it (a remote host has no inodes to compare):
  an earlier input listed later that names it too only moves its turn.
* **Nothing stored before the list is whole.** The transaction is opened (the store's lock,
  when it is free at once; else every log waits for its turn, as before) but commits only
  after the listing; an error at any input (an unreachable host, a bad ``NAME:``, ``--run``'s
  check) or an interrupt aborts it: the workers are stopped, their parts removed.
* **--jobs.** The workers are the early pool's (``--jobs``, by default the cores); a log is
  fed once two logs are known, so that one log alone is parsed here as before (``_jobs_for``).
* **Remote shells.** A host is told how many of its logs are known (``expect_streams``) before
  its first log is fed, then, after the listing, how many are left (``_expect_streams``).
* **Progress.** A log fed early shows its place among the logs known so far.

With a remote input, the parser is imported in a thread while the hosts connect
(``_import_parser_ahead``)."""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forensics.ingest.outcome import IngestSummary

WAIT_S = 1.0  # a waiter's bound when nothing changed (a lookup's end, each opening wake it)
POLL_S = 0.05  # ... when a log waits for a worker (a worker's reply wakes nothing)


@dataclass
class _Early:
    """A log taken out of turn: what ``_prepare`` gave (an ``_Opened``, a ``FileOutcome``:
    nothing to parse, or the exception it raised, raised in the log's turn), what it added to
    a summary of its own, the transaction's changes it held (``_Deferring``), its worker's
    job once fed."""

    got: Any
    summary: IngestSummary
    held: Any
    job: Any = None


class EarlyFeed:
    """The logs of a parallel ingest's remote inputs prepared and fed to free workers while
    the inputs are listed, each one's outcome given in its turn (``turn``)."""

    def __init__(self, batch: Any, name_pattern: str | None, progress: Callable | None):
        self.batch, self.ahead = batch, batch.ahead
        self.name_pattern, self.progress = name_pattern, progress
        self.early: dict[tuple[str, str], _Early] = {}
        self.listed: dict[int, list[tuple[Any, str]]] = {}  # input -> its logs
        self.told: set[str] = set()  # hosts told how many of their logs are known
        self.off = False  # the transaction could not begin early: every log in its turn

    @property
    def started(self) -> bool:
        return bool(self.early)

    def fed(self, host: Any, path: str) -> bool:
        e = self.early.get((host.name, path))
        return e is not None and e.job is not None

    def read(self, host: Any, path: str) -> bool:
        """Was the log read while the inputs were listed (fed to a worker, found unchanged,
        skipped): its turn reads nothing of it?"""
        from forensics.ingest.file import _Opened

        e = self.early.get((host.name, path))
        return e is not None and (e.job is not None or not isinstance(e.got, _Opened))

    def found(self, k: int, logs: list[tuple[Any, str]] | None) -> None:
        """(a lookup thread) Input ``k``'s logs, looked up (None: the lookup failed)."""
        if logs is not None:
            self.listed[k] = logs
            self.ahead.add(k, logs)
        self.ahead.poke()

    def wait(self, lookup: Any) -> None:
        """(the main thread, while it waits for ``lookup``) The logs opened meanwhile fed,
        until ``lookup.over``."""
        cond = self.ahead.cond
        while True:
            seen = self.ahead.version
            for_a_worker = self.feed()
            with cond:
                if lookup.over:
                    return
                if self.ahead.version == seen:
                    cond.wait(POLL_S if for_a_worker else WAIT_S)

    def feed(self) -> bool:
        """Each log opened and not taken, in order, prepared and, with POOL_MIN_BYTES to
        parse, given to a worker, while one is free (-> whether a log waits for one) and
        fewer than the window of logs wait for their turn without a worker."""
        if self.off or self.ahead.known() < 2:  # a log alone is parsed here (_jobs_for)
            return False
        for host, path in self.ahead.ready():
            if host.name == "local":  # ``local:PATH``: its inode may be an earlier input's
                continue
            if sum(e.job is None for e in self.early.values()) >= self.batch.jobs:
                return False
            if not self.batch.pool.free():
                return True
            if not self._take(host, path):
                return False
        return False

    def _take(self, host: Any, path: str) -> bool:
        """One log out of turn (False: the store's transaction cannot begin now)."""
        from forensics.ingest.file import _Opened, _prepare
        from forensics.ingest.pool import POOL_MIN_BYTES, Job, _Deferring

        batch = self.batch
        if batch.tx is None:
            try:
                batch._open(wait=False)
            except Exception:  # noqa: BLE001 - locked by another process (the first turn
                self.off = True  # waits --lock-timeout, as before), or an error that turn
                return False  # reports, after every input is listed, as before
        held, mine = _Deferring(batch.tx, hold_digests=True), IngestSummary()
        try:
            got: Any = _prepare(held, host, path, mine, batch)
        except Exception as exc:  # noqa: BLE001 - raised in its turn, as it was
            got = exc
        e = self.early[(host.name, path)] = _Early(got, mine, held)
        if isinstance(got, _Opened) and got.src.stat.size - got.resume[0] >= POOL_MIN_BYTES:
            self._tell(host)
            e.job = Job(got, list(held.drops), self._report(host, path))
            batch.pool.submit(e.job, self.name_pattern)
        return True

    def _tell(self, host: Any) -> None:
        """Before a host's first log is fed: how many of its logs are known."""
        expect = getattr(host, "expect_streams", None)
        if expect is None or host.name in self.told:
            return
        self.told.add(host.name)
        logs = {p for files in list(self.listed.values()) for h, p in files if h.name == host.name}
        expect(len(logs), at_once=self.batch.jobs)

    def _report(self, host: Any, path: str) -> Callable[[int, int], None] | None:
        """The progress of a log fed out of turn: its place among the logs known so far."""
        if self.progress is None:
            return None
        i, n = self.ahead.place_of(host, path)
        progress = self.progress

        def report(done: int, total: int) -> None:
            progress(path, i, n, done, total)

        report(0, 0)
        return report

    def turn(self, host: Any, path: str, summary: IngestSummary, tx: Any) -> tuple | None:
        """(a log's turn) What was done with it out of turn: (its ``_Opened`` or outcome, the
        drops held for its adoption, its job or None), what ``_prepare`` added now added to
        ``summary`` and the digests it held set in ``tx``; None: nothing was."""
        e = self.early.pop((host.name, path), None)
        if e is None:
            return None
        summary.warnings.extend(e.summary.warnings)
        summary.refused.extend(e.summary.refused)
        summary.add(e.summary.counts, e.summary.stats)
        if isinstance(e.got, BaseException):
            raise e.got
        for sid, digest in e.held.digests:
            tx.set_digest(sid, digest)
        return e.got, e.held.drops, e.job


def _shell_ahead(host: Any) -> None:
    """A remote host of the inputs just connected: the remote shell of its first stream
    starts now (forensics/hosts/streams.py), while its paths are looked up and the parser
    imports; a session's start on the host (the login shell, its rc files) is what a
    stream waits for first."""
    coming = getattr(host, "stream_coming", None)
    if coming is not None:
        coming()


def _jobs_for(files: list[tuple[Any, str]], jobs: int | None) -> int:
    """The worker processes for ``files``: ``jobs``, by default the cores, no more than the
    logs (the workers' share of the cores is of those: forensics/ingest/pool.py ``share``);
    1 for one log (it is parsed here: no worker, no pool imported)."""
    from forensics.bench_results import is_results_file

    logs = sum(1 for _, p in files if not is_results_file(p))
    if logs <= 1:
        return 1
    if jobs:
        return min(jobs, logs)
    from forensics.ingest.heap import default_jobs

    return min(default_jobs(), logs)


def _expect_streams(files: list[tuple[Any, str]], jobs: int, feed: EarlyFeed | None) -> None:
    """Tell each remote host how many of its logs this ingest reads, ``jobs`` at once: it
    starts the remote shells of the next streams ahead (forensics/hosts/streams.py), while
    this process opens the files and imports the parser, or parses the files before. The
    logs read while the inputs were listed are not counted (``EarlyFeed.read``)."""
    from forensics.bench_results import is_results_file

    per_host = Counter(
        host
        for host, path in files
        if not is_results_file(path) and not (feed is not None and feed.read(host, path))
    )
    for host, n in per_host.items():
        expect = getattr(host, "expect_streams", None)
        if expect is not None:
            expect(n, at_once=jobs)


def _import_parser_ahead(inputs: list[str]) -> threading.Thread | _NoThread:
    """With a remote input, the parser (polars, the rule tables: ~0.2 s of CPU, ~0.4 s at
    a cold start) imports in a thread while the hosts connect: paramiko's handshake mostly
    waits for the host, and the parse needed the import after it (issue 15, remote). A
    stand-in whose join does nothing otherwise (a thread started and joined for nothing: its
    start waits for it to run, milliseconds on a busy machine, an unchanged re-ingest's).

    paramiko is imported first, here, alone: imported beside the parser, both held the GIL
    by turns and the connection (then the remote shell it starts, the first bytes) came
    ~0.1-0.2 s later, the import done no sooner (issue 15, remote, tenth stop)."""
    from forensics.hosts import is_remote

    if not any(is_remote(text) for text in inputs):
        return _NoThread()
    from forensics.hosts.ssh import import_paramiko

    with contextlib.suppress(Exception):  # the connection reports what fails
        import_paramiko()
    thread = threading.Thread(target=_import_parser, name="forensics-parser-import")
    thread.start()
    return thread


class _NoThread:
    def join(self) -> None:
        pass


def _import_parser() -> None:
    try:
        import forensics_parsers.sglang  # noqa: F401 - imported ahead of the parse
    except Exception:  # noqa: BLE001 - the parse imports it again and reports what fails
        pass
