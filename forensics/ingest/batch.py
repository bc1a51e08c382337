"""Ingest of many files: one store transaction committed in batches (``ingest``, ``_Batch``),
benchmark results files beside the logs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from forensics.errors import ForensicsError, InputNotFound, UsageError
from forensics.ingest.file import _ingest_one
from forensics.ingest.identity import _inode_index, source_id
from forensics.ingest.inputs import expand_inputs
from forensics.ingest.outcome import CHANGED, FileOutcome, IngestSummary, _skip
from forensics.store import Store

if TYPE_CHECKING:
    from forensics.bench_results import RunIndex

BATCH_FILES = 500  # files per store commit ...
BATCH_SECONDS = 5.0  # ... or seconds of work, whichever comes first ...
COMMIT_SHARE = 0.1  # ... but commits (a manifest rewrite, O(sources)) take at most ~10 %


# A file with no line of SGLang's nor of a launch (signatures.NOT_SGLANG's ``every`` row) is
# stored (a launch's log it may still be, and the user asked for it) and named in a warning.
NOT_SGLANG_WARNING = (
    "no line of SGLang's nor of a launch (not an SGLang server log): stored as an "
    "unrecognised run, with no phase (`forensics runs` shows —, signature not_sglang)"
)


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
    t0 = time.monotonic()
    summary = IngestSummary()
    _check_pattern(name_pattern)
    files = _files(inputs, recursive, trust_new_host, run, summary)
    batch = _Batch(store, lock_timeout)
    results_errors: list[ForensicsError] = []  # of results files (kept across a Ctrl-C)
    try:
        _ingest_files(store, files, batch, summary, name_pattern, progress, run, results_errors)
        batch.commit()
        # the verdict of a run changes with its log: classify what changed, once, here, so
        # reading commands only read (forensics.verdicts)
        changed = {f.source_id for f in summary.files if f.status in CHANGED}
        if changed:
            from forensics.verdicts import refresh

            unplaced: set[str] = set()
            refresh(store, changed, unplaced=unplaced)
            summary.warnings += [
                f"{f.path}: {NOT_SGLANG_WARNING}" for f in summary.files if f.source_id in unplaced
            ]
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
    _raise_if_nothing(summary, results_errors[0] if results_errors else None)
    return summary


def _check_pattern(name_pattern: str | None) -> None:
    if not name_pattern:
        return
    import re

    try:
        re.compile(name_pattern)
    except re.error as exc:
        raise UsageError(
            f"--name-pattern {name_pattern!r}: not a regular expression ({exc})",
            hint="e.g. '(?P<num_steps>\\d+)step'",
        ) from exc


def _files(
    inputs: list[str],
    recursive: bool,
    trust_new_host: bool,
    run: str | None,
    summary: IngestSummary,
) -> list[tuple[Any, str]]:
    """The (host, path) to ingest: logs first, then benchmark results files (a benchmark
    attaches to a run ingested in the same call)."""
    from forensics.bench_results import is_results_file

    files = expand_inputs(
        inputs, recursive=recursive, warn=summary.warnings.append, trust_new_host=trust_new_host
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
            outcome, err = _ingest_results(store, host, path, summary, index, batch.lock_timeout)
            outcome.committed = outcome.status not in ("skipped", "failed")  # its own commit
            if err is not None:
                results_errors.append(err)
        else:
            outcome = batch.run(host, path, summary, name_pattern, report)
        summary.files.append(outcome)


def _raise_if_nothing(summary: IngestSummary, results_error: ForensicsError | None) -> None:
    """Nothing could be ingested at all: the one-line error, not a summary."""
    if results_error is not None and all(f.status == "failed" for f in summary.files):
        raise results_error
    if summary.refused and len(summary.refused) == len(summary.files) and not summary.interrupted:
        # P19: nothing could be read at all -> that file's own error (missing or unreadable
        # exit 3; not a regular file, a bad path or not a log exit 2), as for a single input
        first = summary.refused[0]
        more = f" (and {len(summary.refused) - 1} more)" if len(summary.refused) > 1 else ""
        raise type(first)(first.message + more, hint=first.hint)


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
