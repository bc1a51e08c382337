"""Getting a transaction's files to the disk (issue 15, the costs outside the parse).

A commit makes every new part durable before a manifest lists it, then their names in
``tables/``, then the manifest (tests/test_store_durable.py checks the order). An ``fsync`` on
this kind of disk costs a device flush, 3-30 ms whatever the file's size, and a 100 MB log's
commit made ~20 of them one after the other. Here a part written beside the main thread (by
ingest's staging thread while the parse goes on, by a commit's flush threads) is fsynced as
soon as it is written, in a thread of its own, and the fsyncs a commit waits for (the parts
not synced yet, their folders) are issued at once: the file system completes concurrent ones
in one journal commit. A single one runs in the caller's thread (a small commit pays no
thread). The order the commit needs is kept: it waits for every part before it renames one,
and for every folder before it writes the manifest."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported with the first fsync's threads (an unchanged re-ingest has none)
    from concurrent.futures import Future, ThreadPoolExecutor

SYNC_THREADS = 8  # fsyncs in flight at once (they wait for the device, not for a core)


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Syncer:
    """The fsyncs of one transaction: started as its parts are written, awaited at commit.
    Its threads start with the first fsync and end at ``close`` (commit and abort call it):
    none outlives the transaction."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._jobs: dict[Path, Future | None] = {}  # part -> its fsync (None: synced already)
        self._lock = threading.Lock()  # parts are written by the staging thread and the flush

    def _submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        with self._lock:
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="forensics-fsync")
            return self._pool.submit(fn, *args)

    def written(self, path: Path) -> None:
        """A part's bytes are written: written beside the main thread, its fsync starts now,
        in a thread of its own (the main thread's parts are fsynced at commit)."""
        if threading.current_thread() is not threading.main_thread():
            self._jobs[Path(path)] = self._submit(fsync_path, Path(path))

    def synced(self, path: Path) -> None:
        """A part another process wrote and fsynced (an ingest worker's)."""
        self._jobs[Path(path)] = None

    def start(self, paths: Iterable[Path]) -> None:
        """The fsync of each of ``paths`` not started yet started now, in a thread (the caller
        does something else meanwhile; ``files`` waits for them)."""
        for p in map(Path, paths):
            if p not in self._jobs:
                self._jobs[p] = self._submit(fsync_path, p)

    def files(self, paths: Iterable[Path]) -> None:
        """Every one of ``paths`` on the disk (those not started yet are started now);
        raises the first OSError once all are done."""
        started, todo = [], []
        for p in map(Path, paths):
            job = self._jobs.pop(p, False)
            if job is False:
                todo.append(p)
            elif job is not None:
                started.append(job)
        self._all(started, todo, os.O_RDONLY)

    def folders(self, paths: Iterable[Path]) -> None:
        """The entries of these folders (names renamed into them) on the disk, at once."""
        self._all([], [Path(p) for p in paths], os.O_RDONLY | os.O_DIRECTORY)

    def _all(self, started: list[Future], todo: list[Path], flags: int) -> None:
        """``todo`` fsynced, all but the last in threads, the last here; then ``started``."""
        jobs = started + [self._submit(fsync_path, p, flags) for p in todo[:-1]]
        try:
            if todo:
                fsync_path(todo[-1], flags)
        finally:
            _wait(jobs)

    def close(self) -> None:
        """Wait for what is in flight (an aborted transaction's parts: errors ignored) and
        stop the threads."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._jobs.clear()


def _wait(jobs: list[Future]) -> None:
    first: BaseException | None = None
    for job in jobs:  # every one waited for before an error is raised
        exc = job.exception()
        first = first or exc
    if first is not None:
        raise first
