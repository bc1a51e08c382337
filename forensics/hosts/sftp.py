"""Files of an SSH host over SFTP: glob, stat, chunked reads with pipelined requests, writes.

A mixin of ``SSHHost`` (it uses the host's client, locks and timeouts)."""

from __future__ import annotations

import contextlib
import os
import stat as _stat
import threading
from collections.abc import Callable, Iterator
from typing import Any

from forensics.errors import DeadlineExceeded, InputNotFound, RemoteError
from forensics.hosts.base import (
    CHUNK,
    MAX_SFTP_REQUESTS,
    PATH_ERRORS,
    FileStat,
    _read_upto,
    file_kind,
    path_error,
)
from forensics.hosts.globbing import _glob_with, _no_match


class SFTPFiles:
    """The file methods of ``SSHHost``: one SFTP session per connection, reused."""

    name: str
    address: str
    op_timeout: float
    _client: Any
    _sftp: Any
    _lock: threading.RLock
    _sftp_lock: threading.RLock
    alive: Callable[[], bool]
    connect: Callable[[], None]

    def sftp(self):  # noqa: ANN201 - paramiko.SFTPClient
        with self._lock:
            if self._sftp is None or not self.alive():
                try:
                    self._sftp = self._client.open_sftp() if self.alive() else None
                    if self._sftp is None:
                        self.connect()
                        self._sftp = self._client.open_sftp()  # type: ignore[union-attr]
                except Exception as exc:
                    raise RemoteError(
                        f"{self.address}: cannot open SFTP: {exc}",
                        hint="check that the server enables the sftp subsystem",
                    ) from None
                self._sftp.get_channel().settimeout(self.op_timeout)
            return self._sftp

    def _sftp_path(self, path: str) -> str:
        if path == "~":
            return "."
        if path.startswith("~/"):
            return path[2:] or "."
        return path

    def _sftp_call(self, what: str, path: str, fn: Callable[[], Any]) -> Any:
        try:
            # one SFTP request at a time per connection: paramiko's client is not safe for
            # concurrent requests (ingest opens the next logs from other threads)
            with self._sftp_lock:
                return fn()
        except (FileNotFoundError, PermissionError) as exc:
            raise path_error(f"{self.name}:{path}", exc) from None
        except TimeoutError:
            raise DeadlineExceeded(
                f"{self.name}:{path}: SFTP {what} did not answer within {self.op_timeout:g} s",
                hint="the server or link is stalled; re-run later",
            ) from None
        except OSError as exc:
            if exc.errno in PATH_ERRORS:
                raise path_error(f"{self.name}:{path}", exc) from None
            raise RemoteError(
                f"{self.name}:{path}: SFTP {what} failed: {exc}", hint="re-run"
            ) from None
        except EOFError:
            self._drop_sftp()
            raise RemoteError(
                f"{self.name}:{path}: connection lost during SFTP {what}",
                hint="re-run; the bytes read so far were kept",
            ) from None
        except Exception as exc:
            import paramiko

            if not isinstance(exc, paramiko.SSHException):
                raise
            # "Server connection dropped", a closed channel: the session is gone (S07); the
            # next call opens a new one
            self._drop_sftp()
            raise RemoteError(
                f"{self.name}:{path}: connection lost during SFTP {what} ({exc})",
                hint="re-run once the host answers; the bytes read so far were kept",
            ) from None

    def _drop_sftp(self) -> None:
        """Close the SFTP session (if any); the next ``sftp()`` opens a new one."""
        with self._lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None

    def glob(self, pattern: str) -> list[str]:
        sftp = self.sftp()
        home_rel = pattern.startswith("~")
        pat = self._sftp_path(pattern)

        def listdir(d: str) -> list[tuple[str, bool]]:
            entries = self._sftp_call("listdir", d, lambda: sftp.listdir_attr(d))
            return [(e.filename, _stat.S_ISDIR(e.st_mode or 0)) for e in entries]

        def exists(p: str) -> bool:
            try:
                self._sftp_call("stat", p, lambda: sftp.lstat(p))
            except InputNotFound:
                return False
            return True

        found = _glob_with(pat, listdir, exists)
        if not found:
            raise _no_match(self.name, pattern)
        if home_rel:
            found = ["~/" + f for f in found]
        return found

    def stat(self, path: str) -> FileStat:
        sftp = self.sftp()
        p = self._sftp_path(path)
        st = self._sftp_call("stat", path, lambda: sftp.stat(p))
        # an SFTP server that sends no permissions is taken to mean a regular file
        kind = file_kind(st.st_mode) if st.st_mode else "file"
        return FileStat(path, st.st_size or 0, float(st.st_mtime or 0), None, kind == "dir", kind)

    def peek(self, path: str, n: int = 1) -> bytes:
        sftp = self.sftp()
        p = self._sftp_path(path)

        f = self._sftp_call("open", path, lambda: sftp.open(p, "rb"))

        def get() -> bytes | OSError:
            try:
                return f.read(n)
            except EOFError:
                return b""
            except OSError as exc:  # the server's read failed (/proc/self/mem): hosts.base's
                if isinstance(exc, TimeoutError) or exc.errno in PATH_ERRORS:
                    raise
                return exc

        try:
            got = self._sftp_call("read", path, get)
        finally:
            with contextlib.suppress(Exception):
                self._sftp_call("close", path, f.close)
        if isinstance(got, OSError):
            raise got
        return got

    def iter_chunks(
        self, path: str, offset: int = 0, chunk: int = CHUNK, limit: int | None = None
    ) -> Iterator[bytes]:
        sftp = self.sftp()
        p = self._sftp_path(path)
        f = self._sftp_call("open", path, lambda: sftp.open(p, "rb"))
        try:
            size = self._sftp_call("stat", path, lambda: f.stat()).st_size or 0

            def read(n: int) -> bytes:
                # S13: each chunk is fetched with a bounded number of pipelined requests in
                # flight, every answer bounded by the channel timeout; prefetching chunk by
                # chunk (not the whole file) also notices a file that shrinks (S08). A window
                # of MAX_SFTP_REQUESTS requests is sent at once: paramiko's read-ahead thread
                # then never waits for answers (made to wait, it waited for ever on a file
                # that shrank, whose answers do not count: until the connection closed)
                window = MAX_SFTP_REQUESTS * f.MAX_REQUEST_SIZE

                def get() -> bytes:
                    got: list[bytes] = []
                    try:
                        for at in range(0, n, window):
                            f.prefetch(f.tell() + min(window, n - at))
                            got.append(f.read(min(window, n - at)))
                    except EOFError:  # the file shrank under us
                        pass
                    return got[0] if len(got) == 1 else b"".join(got)

                return self._sftp_call("read", path, get)

            yield from _read_upto(path, read, f.seek, offset, size, min(chunk, 4 << 20), limit)
        finally:
            _requests_sent(f, self.op_timeout)
            with contextlib.suppress(Exception):
                self._sftp_call("close", path, f.close)

    def write(self, path: str, data: bytes, mode: int = 0o600) -> None:
        sftp = self.sftp()
        p = self._sftp_path(path)
        tmp = f"{p}.tmp-{os.getpid()}-{threading.get_ident()}"

        def put() -> None:
            with sftp.open(tmp, "wb") as f:
                f.set_pipelined(True)
                f.write(data)
            sftp.chmod(tmp, mode)
            sftp.posix_rename(tmp, p)

        try:
            self._sftp_call("write", path, put)
        except BaseException:
            with contextlib.suppress(Exception):
                sftp.remove(tmp)
            raise


def _requests_sent(f: Any, timeout: float) -> None:
    """Wait (``timeout`` at most) for paramiko's read-ahead thread of ``f`` to have sent its
    requests: after a short read (the file shrank) the read ends while it may still send,
    and a connection closed meanwhile ended it with "Socket is closed" (a traceback on
    stderr from a thread: seen in the suite under load)."""
    for t in threading.enumerate():
        if getattr(getattr(t, "_target", None), "__self__", None) is f:
            t.join(timeout)
