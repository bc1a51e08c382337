"""The content hash of a source (the one cache key, see forensics/ingest/__init__.py): fed by
the very reads the parse makes (the log source feeds it every byte it reads, streamed or not:
``forensics.logsource.LogSource.raw``), or by reading the file (_Hasher.of_file).

A digest names its algorithm (``HASHES``): ``xxh3_128:<32 hex>`` is written; a bare 40-hex
digest is the sha1 that stores written before it hold. A stored digest is compared with the
file's digest of the same algorithm (``_Hasher(like=...)``, ``of_file(..., like=...)``), so an
old store's unchanged log is still unchanged and a changed one still changed. A record is
rewritten with the current algorithm when its log is parsed again (grown or rewritten), or
verified unchanged: the current digest comes from the same read (twelfth stop), so sha1 is
computed once, not at every re-ingest.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from forensics.errors import InputNotFound

# bytes to hash from which of_file hashes in a thread beside its reads (two chunks of
# forensics.logsource.READ_CHUNK: below, nothing to overlap)
BESIDE_MIN_BYTES = 8 << 20


def _xxh3_128() -> Any:
    import xxhash

    return xxhash.xxh3_128()


@dataclass(frozen=True)
class Hash:
    """A content hash's algorithm: ``new()`` a hash object (``update``, ``hexdigest``); its
    digests are ``prefix`` + hex; ``beside``: slow enough that its updates run in a thread of
    their own beside the reads (``_Hasher.beside``), where the handover costs less than the
    hashing (xxh3 hashes 100 MB in ~4 ms of CPU, sha1 in ~52: docs/performance.md, "The
    content hash and the wire, eleventh stop")."""

    name: str
    new: Callable[[], Any]
    prefix: str
    beside: bool


HASHES: dict[str, Hash] = {
    h.name: h
    for h in (
        Hash("xxh3_128", _xxh3_128, "xxh3_128:", beside=False),  # written
        Hash("sha1", hashlib.sha1, "", beside=True),  # stores written before xxh3 (bare hex)
    )
}
CURRENT = HASHES["xxh3_128"]


def algorithm(digest: str | None) -> Hash | None:
    """The algorithm of a stored digest (None: no digest, or one this version does not
    know)."""
    if not digest:
        return None
    name, sep, _ = digest.rpartition(":")
    return HASHES.get(name) if sep else HASHES["sha1"]


def outdated(digest: str) -> bool:
    """Whether a stored digest is of another algorithm than the one written (an older
    store's sha1: rewritten where its log is verified unchanged, ``_compare``)."""
    return algorithm(digest) is not CURRENT


class _Hasher:
    """The content hash of a file's bytes from 0, fed in order; ``size`` = the bytes hashed
    so far. CURRENT's, and also that of the stored digest ``like`` when it is another (an
    old store's record to compare with). Inside ``beside`` the updates of a slow algorithm
    run in a thread of their own (hashlib leaves the GIL), so the reading thread goes on to
    its next read (and the parse's thread to its split)."""

    def __init__(self, like: str | None = None) -> None:
        self._beside: _Updates | None = None  # the thread of ``beside``
        self._start(like)

    def _start(self, like: str | None) -> None:
        also = algorithm(like)
        self.algs = (CURRENT,) if also in (None, CURRENT) else (CURRENT, also)
        self.hs = [a.new() for a in self.algs]
        self.size = 0
        self._adopted: str | None = None  # ``adopt``'s digest

    def computes(self, like: str | None) -> bool:
        """Whether this hasher computes the algorithm of the stored digest ``like`` (True for
        None, or for an algorithm this version does not know: compared unequal anyway)."""
        also = algorithm(like)
        return also is None or also in self.algs

    def digest(self, alg: Hash | None = None) -> str:
        """The digest of the bytes hashed, as stored (``alg``: one this hasher computes;
        CURRENT if None)."""
        self._wait()
        alg = alg or CURRENT
        if self._adopted is not None and alg is CURRENT:
            return self._adopted
        return alg.prefix + self.hs[self.algs.index(alg)].hexdigest()

    def reset(self, like: str | None = None) -> None:
        """From byte 0 again (CURRENT, and ``like``'s algorithm when it is another)."""
        self._wait()
        self._start(like)

    def adopt(self, digest: str, size: int) -> None:
        """The CURRENT ``digest`` of the file's first ``size`` bytes, hashed elsewhere: the
        worker that decompressed the log's wire (forensics/ingest/wire.py). This hasher's
        digest and size from now on, as if it had been fed those bytes."""
        self.reset()
        self._adopted, self.size = digest, size

    def _update(self, data: Any) -> None:
        for h in self.hs:
            h.update(data)

    def feed(self, pos: int, chunk: bytes) -> None:
        """``chunk`` read at offset ``pos``: hash the part past what is hashed already."""
        end = pos + len(chunk)
        if pos <= self.size < end:
            part = memoryview(chunk)[self.size - pos :]
            self._wait()  # in order, and one chunk held at most
            if self._beside is not None and isinstance(chunk, bytes):  # immutable: safe later
                self._beside.put(self._update, part)
            else:
                self._update(part)
            self.size = end

    def _wait(self) -> None:
        if self._beside is not None:
            self._beside.wait()

    @contextmanager
    def beside(self) -> Iterator[_Hasher]:
        """Hash in a thread while the block reads; the thread ends with the block, which
        waits for the last update (enter it before, and leave it after, the threads that
        read: every feed happens inside it). No thread where every algorithm is fast."""
        if not any(a.beside for a in self.algs):
            yield self
            return
        self._beside = updates = _Updates()
        try:
            yield self
        except BaseException:
            self._beside = None
            updates.close(raising=False)  # (the block's error, not an update's)
            raise
        self._beside = None
        updates.close()  # after the last update (raises what an update raised)

    def of_file(self, src: Any, upto: int, like: str) -> str | None:
        """The digest of the first ``upto`` bytes of the log source ``src`` (opened with this
        hasher, so its reads feed it) in the algorithm of the stored digest ``like``, to
        compare with it; None if the file is shorter or cannot be read, or the algorithm is
        unknown. Hashed from byte 0 again if this hasher does not compute that algorithm.
        After it the hasher computes CURRENT alone (a grown log's record is written so)."""
        from forensics.hosts import ReadIncomplete

        alg = algorithm(like)
        if alg is None:
            return None
        if alg not in self.algs:
            self.reset(like)
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
        digest = self.digest(alg) if self.size == upto else None
        self.hs, self.algs = [self.hs[self.algs.index(CURRENT)]], (CURRENT,)
        return digest


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
