"""Capture of a command's output: the last ``max_output`` bytes kept in memory, the whole
stream spilled to a file once it outgrows that (S06). The spill is redacted as it is written
(the parser's one redaction, ``StreamRedactor``): a ``ps`` line's ``--api-key X`` or an
environment dump's ``HF_TOKEN=…`` never reaches the disk; the in-memory tail is the command's
own output (parsed by the evidence tables, redacted where it is recorded or printed)."""

from __future__ import annotations

import contextlib
import os
import re
import threading
from typing import Any


class _Capped:
    """Keeps the last ``cap`` bytes written, counting everything; spills the whole stream.

    With ``spill_dir``, the first write that takes the stream past ``cap`` opens a file there,
    writes the bytes kept so far (all of them: nothing was dropped yet), and every later chunk
    goes to the file too. A failing spill write closes and removes the file and records
    ``spill_error``; the in-memory tail is kept either way. Thread-safe (LocalHost drains each
    stream in its own thread and closes from the caller's).
    """

    def __init__(self, cap: int, spill_dir: str | os.PathLike | None = None, label: str = ""):
        self.cap = max(0, cap)
        self.buf = bytearray()
        self.total = 0
        self.spill_dir = spill_dir
        self.label = label or "cmd"
        self.spill_path: str | None = None
        self.spill_error: str | None = None
        self._fd: int | None = None
        self._redactor: Any = None  # a StreamRedactor while the spill is open
        self._closed = False
        self._lock = threading.Lock()

    def add(self, data: bytes) -> None:
        with self._lock:
            self.total += len(data)
            if (
                self._fd is None
                and self.total > self.cap
                and self.spill_dir is not None
                and self.spill_error is None
                and not self._closed
            ):
                self._open_spill()
            if self._fd is not None:
                self._write(data)
            # never hold more than cap bytes, even for a moment
            if len(data) >= self.cap:
                self.buf[:] = data[len(data) - self.cap :] if self.cap else b""
            else:
                over = len(self.buf) + len(data) - self.cap
                if over > 0:
                    del self.buf[:over]
                self.buf += data

    @property
    def truncated(self) -> bool:
        return self.total > self.cap

    def _open_spill(self) -> None:
        assert self.spill_dir is not None
        d = os.fspath(self.spill_dir)
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            fd, path = _open_spill(d, self.label)
        except OSError as exc:
            self.spill_error = f"{self.label}: cannot spill to {d}: {exc.strerror or exc}"
            return
        from forensics_parsers.secrets import StreamRedactor

        self._fd, self.spill_path = fd, path
        self._redactor = StreamRedactor()
        self._write(bytes(self.buf))

    def _write(self, data: bytes, *, last: bool = False) -> None:
        assert self._fd is not None
        view = memoryview(self._redactor.finish() if last else self._redactor.feed(data))
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self.spill_error = (
                f"{self.label}: spill to {self.spill_path} stopped: {exc.strerror or exc}"
            )
            self._drop()

    def _drop(self) -> None:
        """Close and remove a spill that could not be written whole."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self.spill_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.spill_path)
            self.spill_path = None

    def close(self, *, still_open: bool = False) -> None:
        """Finish the spill; later ``add`` calls (a straggling reader) keep only the tail.

        ``still_open``: a background process still holds the stream, so the spill (kept) ends
        where the command did, not where the stream will.
        """
        with self._lock:
            self._closed = True
            if self._fd is None:
                return
            if still_open:
                self.spill_error = (
                    f"{self.label}: {self.spill_path} holds the output up to the command's end; "
                    "a background process still writes to the stream"
                )
            self._write(b"", last=True)  # the last partial line, redacted
            if self._fd is None:
                return  # that write failed: the spill is dropped, spill_error says why
            try:
                os.close(self._fd)
            except OSError as exc:
                self._fd = None
                self.spill_error = f"{self.label}: spill to {self.spill_path}: {exc.strerror}"
                self._drop()
            self._fd = None


_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


def _spill_label(script: str, stream: str) -> str:
    """``nvidia-smi_-q.stdout``-like stem: the script's first words, filename-safe."""
    first = script.strip().splitlines()[0] if script.strip() else "cmd"
    return f"{_SLUG.sub('_', first)[:40].strip('_.') or 'cmd'}.{stream}"


def _open_spill(directory: str, label: str) -> tuple[int, str]:
    """A new file (O_EXCL, mode 0600, unique name) for a spilled stream: (fd, path)."""
    import tempfile

    stem, _, stream = label.rpartition(".")
    return tempfile.mkstemp(prefix=f"{stem}.", suffix=f".{stream}", dir=directory)


def _captures(max_output: int, spill_dir: Any, name: str) -> tuple[_Capped, _Capped]:
    """The capped (and, with ``spill_dir``, spilled) stdout and stderr of one command."""
    return (
        _Capped(max_output, spill_dir, _spill_label(name, "stdout")),
        _Capped(max_output, spill_dir, _spill_label(name, "stderr")),
    )


def _result_streams(out: _Capped, err: _Capped, open_: tuple[bool, bool] = (False, False)) -> dict:
    """The ``CmdResult`` fields that come from the two captured streams."""
    out.close(still_open=open_[0])
    err.close(still_open=open_[1])
    errors = [e for e in (out.spill_error, err.spill_error) if e]
    return {
        "stdout": bytes(out.buf),
        "stderr": bytes(err.buf),
        "stdout_truncated": out.truncated,
        "stderr_truncated": err.truncated,
        "stdout_spill": out.spill_path,
        "stderr_spill": err.spill_path,
        "spill_error": "; ".join(errors) or None,
    }
