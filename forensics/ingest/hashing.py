"""The content hash of a source (the one cache key, see forensics/ingest/__init__.py): a sha1
fed by the very reads the parse makes (the log source feeds it every byte it reads, streamed or
not: ``forensics.logsource.LogSource.raw``), or by reading the file (_Hasher.of_file)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from forensics.errors import InputNotFound

# bytes to hash from which of_file hashes in a thread beside its reads (two chunks of
# forensics.logsource.READ_CHUNK: below, nothing to overlap)
BESIDE_MIN_BYTES = 8 << 20


class _Hasher:
    """sha1 of a file's bytes from 0, fed in order; ``size`` = the bytes hashed so far.
    Inside ``beside`` the updates run in a thread of their own (hashlib leaves the GIL), so
    the reading thread goes on to its next read (and the parse's thread to its split)."""

    def __init__(self) -> None:
        self.h = hashlib.sha1()
        self.size = 0
        self._beside: _Updates | None = None  # the thread of ``beside``

    def hexdigest(self) -> str:
        self._wait()
        return self.h.hexdigest()

    def reset(self) -> None:
        self._wait()
        self.h, self.size = hashlib.sha1(), 0

    def feed(self, pos: int, chunk: bytes) -> None:
        """``chunk`` read at offset ``pos``: hash the part past what is hashed already."""
        end = pos + len(chunk)
        if pos <= self.size < end:
            part = memoryview(chunk)[self.size - pos :]
            self._wait()  # in order, and one chunk held at most
            if self._beside is not None and isinstance(chunk, bytes):  # immutable: safe later
                self._beside.put(self.h.update, part)
            else:
                self.h.update(part)
            self.size = end

    def _wait(self) -> None:
        if self._beside is not None:
            self._beside.wait()

    @contextmanager
    def beside(self) -> Iterator[_Hasher]:
        """Hash in a thread while the block reads; the thread ends with the block, which
        waits for the last update (enter it before, and leave it after, the threads that
        read: every feed happens inside it)."""
        self._beside = updates = _Updates()
        try:
            yield self
        except BaseException:
            self._beside = None
            updates.close(raising=False)  # (the block's error, not an update's)
            raise
        self._beside = None
        updates.close()  # after the last update (raises what an update raised)

    def of_file(self, src: Any, upto: int) -> str | None:
        """Hash the first ``upto`` bytes of the log source ``src`` (opened with this hasher,
        so its reads feed it); None if the file is shorter or cannot be read."""
        from forensics.hosts import ReadIncomplete

        # the next read while this chunk is hashed, when there are chunks to overlap: a
        # thread per file cost more than it overlapped (1,000 unchanged small logs: a
        # thread started and joined for each)
        ahead = upto - self.size >= BESIDE_MIN_BYTES
        try:
            with self.beside() if ahead else nullcontext():
                for _ in src.raw(self.size, upto - self.size):
                    pass
        except (ReadIncomplete, InputNotFound, OSError):
            return None
        return self.hexdigest() if self.size == upto else None


class _Updates:
    """A thread of its own that runs each call handed to it (``put``), in order, one in
    flight at most (``wait`` for it; what it raised is raised there): a one-worker
    ThreadPoolExecutor without concurrent.futures' import (logging with it: ~6 ms of an
    unchanged re-ingest's CPU)."""

    def __init__(self) -> None:
        self._call: tuple[Callable[[Any], Any], Any] | None = None  # None: end the thread
        self._ready = threading.Semaphore(0)  # a call is handed over
        self._done = threading.Semaphore(0)  # ... and has returned
        self._busy = False
        self._error: BaseException | None = None
        # a daemon, and ended when its start is interrupted: a Ctrl-C in ``start`` (it waits
        # for the thread to run) left it waiting for a call, and the interpreter's exit
        # waited for it forever (an interrupted ingest hung after "Interrupted:")
        self._thread = threading.Thread(target=self._work, name="forensics-hash", daemon=True)
        try:
            self._thread.start()
        except BaseException:
            self._ready.release()  # no call: the thread, if it started, returns
            raise

    def _work(self) -> None:
        while True:
            self._ready.acquire()
            call, self._call = self._call, None
            if call is None:
                return
            try:
                call[0](call[1])
            except BaseException as exc:  # noqa: BLE001 - raised in the caller's ``wait``
                self._error = exc
            finally:
                del call  # the chunk is not held while the next is read
                self._done.release()

    def put(self, fn: Callable[[Any], Any], arg: Any) -> None:
        self.wait()
        self._call, self._busy = (fn, arg), True
        self._ready.release()

    def wait(self) -> None:
        if self._busy:
            self._done.acquire()
            self._busy = False
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self, raising: bool = True) -> None:
        """Wait for the call in flight, then end the thread (joined: none outlives it)."""
        try:
            if raising:
                self.wait()
            elif self._busy:
                self._done.acquire()
                self._busy = False
        finally:
            self._call = None
            self._ready.release()
            self._thread.join()
