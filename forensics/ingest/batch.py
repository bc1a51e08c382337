"""Ingest of many files: one store transaction committed in batches (``ingest``, ``_Batch``),
benchmark results files beside the logs."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.collector import resume as resume_collector
from forensics.errors import (
    ForensicsError,
    InputNotFound,
    UsageError,
    interrupt_inside,
    release_interrupted,
)
from forensics.ingest.ahead import OpenAhead, close_ahead, drop_pool, early_pool
from forensics.ingest.early import (
    EarlyFeed,
    _expect_streams,
    _import_parser,
    _import_parser_ahead,
    _jobs_for,
    _shell_ahead,
)
from forensics.ingest.file import _ingest_one, _parse_file, _prepare, _record
from forensics.ingest.identity import _inode_index, inode_sources, source_id
from forensics.ingest.inputs import check_pattern, expand_inputs
from forensics.ingest.outcome import (
    CHANGED,
    VERDICTS_PENDING,
    FileOutcome,
    IngestSummary,
    _skip,
    raise_if_nothing,
)
from forensics.ingest.verdict_step import verdict_step
from forensics.store import Store

if TYPE_CHECKING:
    from forensics.bench_results import RunIndex

BATCH_FILES = 500  # files per store commit ...
BATCH_SECONDS = 5.0  # ... or seconds of work, whichever comes first ...
COMMIT_SHARE = 0.1  # ... but commits (a manifest rewrite, O(sources)) take at most ~10 %


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
    jobs: int | None = None,
) -> IngestSummary:
    """Ingest every log and benchmark results file the inputs name. Raises InputNotFound
    when none exists. ``run``: attach the results files to this run (else by time/server).
    ``jobs``: worker processes parsing files at once (default: the cores; 1: none)."""
    from forensics.ingest.heap import cap_polars_threads, one_arena

    one_arena()  # before the ingest's threads start (forensics/ingest/heap.py)
    cap_polars_threads()  # before the parser's import
    t0 = time.monotonic()
    summary = IngestSummary()
    check_pattern(name_pattern)
    importing = _import_parser_ahead(inputs)  # joined at the end: no thread outlives ingest
    batch = _Batch(store, lock_timeout)
    feed = batch.early(early_pool(store.root, inputs, jobs), name_pattern, progress)
    try:  # a parallel ingest's logs opened and fed to workers as soon as they are looked up
        files = _files(inputs, recursive, trust_new_host, run, summary, feed)
    except BaseException as exc:
        importing.join()
        batch.abort(exc)
        raise
    batch.set_jobs(_jobs_for(files, jobs))
    _expect_streams(files, batch.jobs, feed)
    # set before: an earlier ingest stopped before its verdict step (read before this one sets it)
    left_unverdicted = bool(store.get_meta(VERDICTS_PENDING))
    results_errors: list[ForensicsError] = []  # of results files (kept across a Ctrl-C)
    try:
        _ingest_files(store, files, batch, summary, name_pattern, progress, run, results_errors)
        batch.drain(summary, last=True)
        # the verdict of a run changes with its log: classify what changed, once, here, so
        # reading commands only read (forensics.verdicts); in the last commit, with the rows
        due = functools.partial(verdict_step, store, summary, batch, left_unverdicted)
        batch.commit(verdicts=due)
        if store.get_meta(VERDICTS_PENDING):  # not in that commit (none was open, an error)
            batch.join_warming()
            due()
    except KeyboardInterrupt as exc:
        summary.interrupted = True
        # the same Ctrl-C may raise twice ("One Ctrl-C, two KeyboardInterrupts" in
        # forensics/errors.py): a pending second one fires and is absorbed here
        try:
            time.sleep(0)
        except KeyboardInterrupt:
            pass
        release_interrupted(exc)  # a store lock it stopped half-way: the commit needs it
        unadopted = batch.stop_pool()  # files in workers: not kept
        summary.files = [f for f in summary.files if f not in unadopted]
        batch.commit()  # the files finished before Ctrl-C; the ones being read are not kept
    except BaseException:
        batch.stop_pool()
        batch.close_after_error()
        raise
    finally:  # after the commits (adopted parts are renamed from the staging folder)
        steps = (batch.stop_pool, batch.remove_staging, batch.join_warming, importing.join)
        _to_the_end(summary, (*steps, resume_collector))  # (the collector: where no parse did)
    summary.seconds = time.monotonic() - t0
    raise_if_nothing(summary, results_errors[0] if results_errors else None)
    return summary


def _to_the_end(summary: IngestSummary, steps: tuple[Callable[[], Any], ...]) -> None:
    """The end of an ingest, whatever ended it: no worker, thread or staging folder outlives
    it. A Ctrl-C here (one just after the last commit) cuts no step short: the step is run
    again (each can be) and the summary says it was interrupted (exit 130, what was
    committed), where it escaped as a bare "Interrupted." and could leave the steps after."""
    for step in steps:
        while True:
            try:
                step()
                break
            except KeyboardInterrupt:
                summary.interrupted = True


def _warm_adoption() -> None:
    """``forensics.verdicts.warm`` after the parser's import: a parallel ingest's main process
    parses nothing, but adopting its workers' parts records them with the parser's code and
    the classifier's (~0.06 s of CPU here, ~0.1 s on a 16-core host, on the critical path
    after the last worker ended: issue 15, thirteenth stop)."""
    from forensics.verdicts import warm

    _import_parser()
    warm()


def _files(
    inputs: list[str],
    recursive: bool,
    trust_new_host: bool,
    run: str | None,
    summary: IngestSummary,
    feed: EarlyFeed | None = None,
) -> list[tuple[Any, str]]:
    """The (host, path) to ingest: logs first, then benchmark results files (a benchmark
    attaches to a run ingested in the same call). ``feed``: where each remote input's logs
    go as soon as they are looked up, to be opened and fed to workers meanwhile."""
    from forensics.bench_results import is_results_file

    def found(k: int, files: list[tuple[Any, str]] | None) -> None:
        if feed is not None:
            feed.found(k, files and [f for f in files if not is_results_file(f[1])])

    files = expand_inputs(
        inputs,
        recursive=recursive,
        warn=summary.warnings.append,
        trust_new_host=trust_new_host,
        connected=_shell_ahead,
        found=found,
        waiting=feed.wait if feed is not None else None,
    )
    files.sort(key=lambda hp: is_results_file(hp[1]))
    if run is not None and not any(is_results_file(p) for _, p in files):
        raise UsageError(
            f"--run {run}: no benchmark results file among the inputs",
            hint="--run attaches *.json / *.jsonl results of bench_serving, vllm bench serve "
            "or AIPerf to a run",
        )
    return files


def _ingest_files(
    store: Store,
    files: list[tuple[Any, str]],
    batch: _Batch,
    summary: IngestSummary,
    name_pattern: str | None,
    progress: Callable[[str, int, int, int, int], None] | None,
    run: str | None,
    results_errors: list[ForensicsError],
) -> None:
    """Each file in turn (logs into the batch, results files in their own commit); the
    errors of results files go to ``results_errors``."""
    from forensics.bench_results import RunIndex, is_results_file

    index: RunIndex | None = None
    if batch.jobs > 1:  # the logs opened ahead of their turn, a thread per host
        batch.ahead = batch.ahead or OpenAhead(batch.jobs)
        batch.ahead.place([f for f in files if not is_results_file(f[1])], batch)
    for i, (host, path) in enumerate(files):
        report = None
        if progress:

            def report(done: int, total: int, _p=path, _i=i) -> None:
                progress(_p, _i, len(files), done, total)

            if batch.feed is None or not batch.feed.fed(host, path):  # its bar shown then
                report(0, 0)
        if is_results_file(path):
            batch.drain(summary)  # the logs' files in workers are adopted and committed ...
            batch.commit()  # ... first: it takes the store lock itself
            if index is None:  # the runs are read once, after the logs of this call
                index = RunIndex(store, run)
            outcome, err = _ingest_results(store, host, path, summary, index, batch.lock_timeout)
            outcome.committed = outcome.status not in ("skipped", "failed")  # its own commit
            summary.files.append(outcome)
            if err is not None:
                results_errors.append(err)
        else:  # a log: listed by the batch itself, as soon as it is in the transaction
            batch.run(host, path, summary, name_pattern, report)


class _Batch:
    """One store transaction over many files, committed every BATCH_FILES files or
    BATCH_SECONDS seconds; each file has a savepoint, so a file that fails leaves nothing
    and the files before it are still committed. With ``jobs`` > 1, ``jobs`` files of
    POOL_MIN_BYTES or more to parse are parsed at once by up to ``jobs`` worker processes
    (forensics/ingest/pool.py) that this process feeds; a worker's file is adopted into the
    batch, in input order, when the worker is done."""

    def __init__(self, store: Store, lock_timeout: float | None, jobs: int = 1):
        self.store = store
        self.lock_timeout = lock_timeout
        self._cm: Any = None
        self.tx: Any = None
        self.files: list[FileOutcome] = []
        self.started = 0.0
        self.last_commit_s = 0.0  # how long the last commit took
        # (host, dev, inode) -> (source id, path) of this ingest's files
        self.seen: dict[tuple[str, int, int], tuple[str, str]] = {}
        self._inodes: tuple[Any, dict] | None = None  # (transaction, its inode index)
        self.jobs = jobs
        self.pool: Any = None  # forensics.ingest.pool.Pool, started for the first big file
        self.pending: list[Any] = []  # pool.Job in input order, not yet adopted
        self._deferring: Any = None  # forensics.ingest.pool._Deferring
        self.ahead: Any = None  # forensics.ingest.ahead.OpenAhead: the logs opened ahead
        self.feed: EarlyFeed | None = None  # the logs fed while the inputs are listed
        self.staging: Path | None = None  # the pool's staging folder, once it is stopped
        self.warming: threading.Thread | None = None  # forensics.verdicts.warm, beside a parse
        # what the verdict step reads of the parts written, kept as they are written (set
        # with the first parse: the classifier imports beside it)
        self.written: Any = None
        # source id -> the verdicts its worker computed (refresh's ``ready``)
        self.verdicts: dict[str, Any] = {}
        self._written_lock = threading.Lock()
        # the savepoint of the file being added (run, _adopt), until it is in whole: a commit
        # rolls it back first (``_roll_back_cut``)
        self._cut: tuple[Any, Any] | None = None

    def early(self, pool: Any, name_pattern: str | None, progress: Any) -> EarlyFeed | None:
        """With ``early_pool``'s pool (two remote inputs or more, a parallel ingest): each
        host's logs opened as soon as they are looked up, and fed to its workers (a host
        that connects late holds back no other host's parse), ``pool.jobs`` at once."""
        if pool is not None:
            self.jobs, self.pool, self.ahead = pool.jobs, pool, OpenAhead(pool.jobs)
            self.feed = EarlyFeed(self, name_pattern, progress)
        return self.feed

    def set_jobs(self, jobs: int) -> None:
        """The inputs listed: ``jobs`` (``_jobs_for``), unless logs were fed meanwhile (then
        the pool's: ``--jobs`` or the cores; ``jobs`` corrects its guess of those at once)."""
        if self.feed is None or not self.feed.started:
            self.jobs = jobs
        if self.pool is not None:
            self.pool.expected = jobs
        if self.jobs == 1:
            self.pool, self.ahead = drop_pool(self.pool), close_ahead(self.ahead)

    def abort(self, exc: BaseException) -> None:
        """An error or an interrupt while the inputs are listed: nothing of this ingest is
        stored (what was fed to workers meanwhile is dropped, the transaction aborted)."""
        self.stop_pool()
        cm, self._cm, self.tx = self._cm, None, None
        if cm is not None:
            with contextlib.suppress(Exception):
                cm.__exit__(type(exc), exc, exc.__traceback__)
        self.remove_staging()

    def warm_verdicts(self, adoption: bool = False) -> None:
        """A parse begins here (or, ``adoption``, the workers': ``adopt`` waits for them): the
        verdict step's imports and model load start beside it, in a thread (once per ingest)."""
        if self.warming is None:
            from forensics.verdicts import warm

            how = _warm_adoption if adoption else warm
            self.warming = threading.Thread(target=how, name="forensics-verdicts-warm")
            self.warming.start()

    def join_warming(self) -> None:
        if self.warming is not None:
            self.warming.join()

    def _written(self, table: str, name: str, df: Any, reduced: bool = False) -> None:
        """A part written by the batch's transaction, or adopted with what its worker kept
        of it (``reduced``): what the verdict step reads of it is kept
        (forensics.classifier.stored.Written; imported here, once the warming did).
        Called from the threads that write parts, several at once at a commit."""
        with self._written_lock:
            if self.written is None:
                from forensics.classifier.stored import Written

                self.written = Written()
        if reduced:
            self.written.keep(table, name, df)
        else:
            self.written(table, name, df)

    def stored_inodes(self, tx: Any) -> dict:
        """The inode index of the sources committed before this batch (built once: ``tx``
        may be the transaction or its ``_Deferring`` view, one index for both; rebuilt per
        file, it cost O(sources) each, ~5 ms a file at 1,000 unchanged files)."""
        tx = getattr(tx, "tx", tx)  # the transaction of its ``_Deferring`` view
        if self._inodes is None or self._inodes[0] is not tx:
            self._inodes = (tx, _inode_index(tx))
        return self._inodes[1]

    def _open(self, wait: bool = True) -> None:
        if self.tx is None:
            self._cm = self.store.transaction(self.lock_timeout if wait else 0)
            self.tx = self._cm.__enter__()
            self.tx.on_write = self._written
            self.started = time.monotonic()

    def run(
        self, host: Any, path: str, summary: IngestSummary, name_pattern, report
    ) -> FileOutcome:
        self._open()
        sid = source_id(host.name, path)
        # with the sources of its inode: a log renamed and grown continues one of them
        self._cut = (
            self.tx,
            self.tx.savepoint(sid, *inode_sources(self.tx, self, host.name, path)),
        )
        try:
            if self.jobs > 1:
                out, later = self._dispatch(host, path, summary, name_pattern, report)
            else:
                out, later = (
                    _ingest_one(self.tx, host, path, summary, name_pattern, report, self),
                    False,
                )
        except BaseException:
            self._roll_back_cut()
            raise
        # the first file is in: the start is over, whether a parse resumed the collector
        # or not (unchanged, given to a worker)
        resume_collector()
        self._cut = None
        # listed before anything below may raise: a Ctrl-C in the adoption of an earlier
        # file's worker must not leave this file committed but missing from the summary
        summary.files.append(out)
        if not later:  # else in a worker: adopted when it is done (``adopt``)
            self._done(out)
        self.adopt(summary, block=False)
        return out

    def _done(self, out: FileOutcome) -> None:
        self.files.append(out)
        busy = time.monotonic() - self.started
        due = len(self.files) >= BATCH_FILES or busy >= BATCH_SECONDS
        if due and busy * COMMIT_SHARE >= self.last_commit_s:
            self.commit()

    def _dispatch(
        self, host: Any, path: str, summary: IngestSummary, name_pattern, report
    ) -> tuple[FileOutcome, bool]:
        """A file of a parallel ingest: parsed here when small, else given to a worker, waiting
        for a free one (-> its outcome, True); what _prepare drops is deferred to the file's
        adoption. A big log parsed here (the cores' polars threads) beside the feeds and the
        adoptions was this process's peak RSS (docs/performance.md, tenth stop)."""
        from forensics.ingest.pool import POOL_MIN_BYTES, Job, Pool, _Deferring

        fed = self.feed.turn(host, path, summary, self.tx) if self.feed is not None else None
        if fed is None:  # not taken while the inputs were listed (forensics/ingest/early.py)
            if self._deferring is None or self._deferring.tx is not self.tx:
                self._deferring = _Deferring(self.tx)
            defer = self._deferring
            defer.drops = []
            fed = (_prepare(defer, host, path, summary, self), defer.drops, None)
        opened, drops, job = fed
        if isinstance(opened, FileOutcome):
            return opened, False
        big = opened.src.stat.size - opened.resume[0] >= POOL_MIN_BYTES
        if big and self.pool is None:  # ``jobs`` workers; this process feeds them
            self.pool = Pool.of_store(self.store.root, self.jobs)
        if not big:
            for key in drops:
                self.tx.drop_source(key)
            _record(self.tx, opened, _parse_file(self.tx, opened, summary, name_pattern, report))
            return opened.out, False
        if job is None:  # else fed already, while the inputs were listed
            job = Job(opened, list(drops), report)
            self.pool.submit(job, name_pattern)
        self.pending.append(job)
        return opened.out, True

    def adopt(self, summary: IngestSummary, block: bool) -> None:
        """Adopt the files whose workers are done, in input order (with ``block``, all)."""
        if block and self.pending:  # files in workers: what adopting them needs, warmed now
            self.warm_verdicts(adoption=True)  # (sooner, it took the GIL from their spawning)
        while self.pending:
            head = self.pending[0]
            if not head.done:
                self.pool.wait(block=block)
                if not head.done:
                    if not block:
                        return
                    continue
            self.pending.pop(0)
            self._adopt(head, summary)

    def _adopt(self, job: Any, summary: IngestSummary) -> None:
        if job.read_error is not None:  # as in the serial path: the error ends the ingest
            raise job.read_error
        self._open()
        out, r = job.out, job.result
        if r is None:
            out.status, out.reason = "failed", "worker"
            summary.warnings.append(
                f"{out.path}: not ingested: {job.error or 'its worker stopped'} "
                "(the other files were; run the same command again to retry it)"
            )
            self._done(out)
            return
        self._cut = (self.tx, self.tx.savepoint(out.source_id))
        try:
            for key in job.drops:
                self.tx.drop_source(key)
            for table, tmp, keys, name in r["parts"]:
                adopted = self.tx.adopt(table, Path(tmp), keys)
                if r["kept"].get(name) is not None:  # the worker's Written of the part
                    self._written(table, adopted, r["kept"][name], reduced=True)
            _record(self.tx, job.opened, r["parsed"])
        except BaseException:
            self._roll_back_cut()
            raise
        self._cut = None
        if r.get("verdicts") is not None:  # computed by the worker (forensics.verdicts.computed)
            self.verdicts[out.source_id] = r["verdicts"]
        out.lines, out.decode_lines = out.lines + r["lines"], out.decode_lines + r["decode_lines"]
        out.reason = out.reason or r["reason"]
        summary.add(r["counts"], r["stats"])
        summary.warnings.extend(r["warnings"])
        self._done(out)

    def drain(self, summary: IngestSummary, last: bool = False) -> None:
        """Wait for every file given to a worker and adopt it (``last``: no file comes after,
        so the workers are told to stop now: they exit while the batch commits)."""
        self.adopt(summary, block=True)
        if last and self.pool is not None:
            self.pool.stop_idle()

    def stop_pool(self) -> list[FileOutcome]:
        """Stop the workers (none outlives the ingest); -> the outcomes of files not adopted
        (their parts stay in the staging folder until ``remove_staging``)."""
        if self.ahead is not None:  # each one dropped once closed: run again, it goes on
            self.ahead.close()
            self.ahead = None
        if self.pool is None:
            return []
        pending, self.pending = self.pending, []
        self.staging = self.pool.staging
        self.pool.close()
        self.pool = None
        return [j.out for j in pending]

    def remove_staging(self) -> None:
        """The staging folder, once the parts adopted from it are committed (or aborted)."""
        if self.staging is not None:
            from forensics.store.staging import remove_staging

            remove_staging(self.staging)
            self.staging = None

    def _roll_back_cut(self) -> None:
        """Undo what was added of a file an exception cut short (its savepoint). Called where
        that exception is caught, and again by the commit that follows it: one Ctrl-C may
        raise twice (polars' KeyboardInterrupt, then Python's handler's at the next check:
        forensics/errors.py), and the second one fired at the rollback's first instruction,
        so an adopted file's parts were committed without its source record and the same
        command stored its rows again (tests/test_ingest_parallel.py). A rollback cut short
        is run again from the start: it restores what the savepoint saved."""
        cut = self._cut
        if cut is not None and cut[0] is self.tx:
            cut[0].rollback(cut[1])
        self._cut = None

    def commit(self, verdicts: Callable[[Any], None] | None = None) -> None:
        """Commit the open transaction. ``verdicts``: the ingest's verdict step, given the
        transaction, for its last commit: the verdicts due (VERDICTS_PENDING) are added to it
        (``_add_verdicts``) and committed with the rows."""
        self._roll_back_cut()  # a file cut short, whose rollback a second interrupt stopped
        if self.tx is None:
            return
        if any(f.status in CHANGED for f in self.files):
            self.tx.set_meta(VERDICTS_PENDING, True)
        if verdicts is not None and self.tx.man.meta.get(VERDICTS_PENDING):
            self._add_verdicts(verdicts)
        cm, tx, self._cm, self.tx = self._cm, self.tx, None, None
        files, self.files = self.files, []
        t0 = time.monotonic()
        try:
            cm.__exit__(None, None, None)
            self.last_commit_s = time.monotonic() - t0
        except BaseException:
            # a Ctrl-C after the manifest was replaced (its fsync, the lock's release): the
            # files are in the store, and said so ("Interrupted: N file(s) committed")
            for f in files:
                f.committed = tx.committed and f.status not in ("skipped", "failed")
            raise
        for f in files:
            f.committed = f.status not in ("skipped", "failed")

    def _add_verdicts(self, verdicts: Callable[[Any], None]) -> None:
        """The transaction settled (its last parts written: a failure aborts it, as the
        commit's own settle does), then ``verdicts`` adds to it what it reads through its
        view, under a savepoint: interrupted (Ctrl-C, SIGTERM), the commit of ingest's
        handler rolls them back and keeps the rows with the marker; an error (a part it
        cannot read inside the write: the store's own reads set a bad one aside) rolls them
        back here, and ingest's verdict step runs after the commit, as without a batch."""
        tx = self.tx
        try:
            tx.settle()
        except BaseException as exc:
            cm, self._cm, self.tx, self.files = self._cm, None, None, []
            cm.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self.join_warming()
        self._cut = (tx, tx.savepoint())
        try:
            verdicts(tx)
        except Exception as exc:  # noqa: BLE001 - the verdict step after the commit reports it
            if interrupt_inside(exc):  # an interrupt Python wrapped: as an interrupt
                raise
            self._roll_back_cut()
        self._cut = None

    def close_after_error(self) -> None:
        """An error in one file: keep the files finished before it, if the store lets us."""
        try:
            self.commit()
        except Exception:  # noqa: BLE001 - the first error is the one to report
            pass


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
