"""A log given as bytes (a paste on stdin) read as a file is: ``open_bytes`` opens it through
the one log source (forensics.logsource: the same FORMATS, ENCODINGS and damage rules)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from forensics.logsource import READ_CHUNK, LogSource, open_log


class BytesHost:
    """Bytes already in memory (a paste on stdin) as a one-file host, so that they are read
    as a file is: the same FORMATS, ENCODINGS and damage rules (``open_bytes``)."""

    def __init__(self, data: bytes, path: str = "<stdin>"):
        self.name, self.path, self._data = "local", path, data

    def stat(self, path: str) -> Any:
        from forensics.hosts import FileStat

        return FileStat(path, len(self._data), 0.0)

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        end = len(self._data) if length is None else offset + length
        return self._data[offset:end]

    def iter_chunks(
        self, path: str, offset: int = 0, chunk: int = READ_CHUNK, limit: int | None = None
    ) -> Iterator[bytes]:
        end = len(self._data) if limit is None else min(len(self._data), offset + limit)
        for at in range(offset, end, chunk):
            yield self._data[at : min(at + chunk, end)]


def open_bytes(data: bytes, where: str = "<stdin>") -> LogSource:
    """A log given as bytes (``forensics classify -``), opened as ``open_log`` opens a file:
    compressed, re-encoded and refused by the same tables. Its age is unknown (mtime 0)."""
    return open_log(BytesHost(data, where), where, where=where)
