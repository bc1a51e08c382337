"""The content hash of a source (the one cache key, see forensics/ingest/__init__.py): a sha1
fed by the very reads the parse makes (the log source feeds it every byte it reads, streamed or
not: ``forensics.logsource.LogSource.raw``), or by reading the file (_Hasher.of_file)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
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
        self._pool: Any = None  # the executor of ``beside``
        self._last: Any = None  # the update in flight there (one at most)

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
            if self._pool is not None and isinstance(chunk, bytes):  # immutable: safe later
                self._last = self._pool.submit(self.h.update, part)
            else:
                self.h.update(part)
            self.size = end

    def _wait(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last.result()

    @contextmanager
    def beside(self) -> Iterator[_Hasher]:
        """Hash in a thread while the block reads; the thread ends with the block, which
        waits for the last update (enter it before, and leave it after, the threads that
        read: every feed happens inside it)."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1, thread_name_prefix="forensics-hash") as pool:
            self._pool = pool
            try:
                yield self
            finally:
                self._pool = None
        self._wait()

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
