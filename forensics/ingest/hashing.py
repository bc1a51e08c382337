"""The content hash of a source (the one cache key, see forensics/ingest/__init__.py): a sha1
fed by the very reads the parse makes (the log source feeds it every byte it reads, streamed or
not: ``forensics.logsource.LogSource.raw``), or by reading the file (_Hasher.of_file)."""

from __future__ import annotations

import hashlib
from typing import Any

from forensics.errors import InputNotFound


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

    def of_file(self, src: Any, upto: int) -> str | None:
        """Hash the first ``upto`` bytes of the log source ``src`` (opened with this hasher,
        so its reads feed it); None if the file is shorter or cannot be read."""
        from forensics.hosts import ReadIncomplete

        try:
            for _ in src.raw(self.size, upto - self.size):
                pass
        except (ReadIncomplete, InputNotFound, OSError):
            return None
        return self.hexdigest() if self.size == upto else None
