"""The content hash of a source (the one cache key, see forensics/ingest/__init__.py): a sha1
fed by the very reads the parse makes (_TappedHost), or by reading the file (_Hasher.of_file)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from forensics.errors import InputNotFound

READ_CHUNK = 4 << 20


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

    def of_file(self, host: Any, path: str, upto: int) -> str | None:
        """Hash the first ``upto`` bytes; None if the file is shorter or cannot be read."""
        from forensics.hosts import ReadIncomplete

        try:
            for chunk in host.iter_chunks(path, self.size, READ_CHUNK, limit=upto - self.size):
                self.feed(self.size, chunk)
        except (ReadIncomplete, InputNotFound, OSError):
            return None
        return self.hexdigest() if self.size == upto else None

    def tap(self, host: Any) -> _TappedHost:
        return _TappedHost(host, self)


class _TappedHost:
    """``host`` whose reads also feed a _Hasher (the parse reads each byte once)."""

    def __init__(self, host: Any, hasher: _Hasher):
        self._host, self._hasher = host, hasher

    # no exec-channel stream: its wire bytes would pass the hash by; SFTP reads feed it
    stream = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._host, name)

    def iter_chunks(self, path: str, offset: int = 0, *args: Any, **kw: Any) -> Iterator[bytes]:
        pos = offset
        for chunk in self._host.iter_chunks(path, offset, *args, **kw):
            self._hasher.feed(pos, chunk)
            pos += len(chunk)
            yield chunk

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        from forensics.hosts import ReadIncomplete

        parts: list[bytes] = []
        try:
            for chunk in self.iter_chunks(path, offset, limit=length):
                parts.append(chunk)
        except ReadIncomplete as exc:  # what was read is kept, as Host.read does
            exc.data = b"".join(parts)
            raise
        return b"".join(parts)
