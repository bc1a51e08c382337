"""The Host interface every host implements, its result types and the errors of a read.

See the package docstring (``forensics.hosts``) for the contract of each method.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shlex
import stat as _stat
from collections.abc import Callable, Iterator
from typing import Any

from forensics.errors import (
    BadPath,
    DeadlineExceeded,
    FileMissing,
    InputNotFound,
    NotRegularFile,
    PartialFailure,
    PermissionDenied,
    RemoteError,
    UsageError,
)

DEFAULT_CONNECT_TIMEOUT = 10.0  # S01: TCP connect, SSH banner and auth each get this long
MAX_CONNECT_TIMEOUT = 600.0  # a connect_timeout past this (inf, 1e308) would wait for ever
DEFAULT_OP_TIMEOUT = 30.0  # S13: one SFTP operation (stat, listdir, one read request)
KEEPALIVE_S = 15  # S07: a dead connection is noticed by keepalive plus the deadlines
KILL_GRACE_S = 2  # SIGTERM -> SIGKILL grace for a command past its deadline
CHUNK = 8 << 20
MAX_SFTP_REQUESTS = 64  # S13: SFTP read requests in flight per file
STREAM_WINDOW = 8 << 20  # SSH channel window of SSHHost.stream (bytes in flight)
STREAM_AHEAD = 16  # pieces (<= 1 MiB each) read ahead by SSHHost.stream


# --------------------------------------------------------------------------------------------
# Results and errors


@dataclasses.dataclass
class CmdResult:
    """Outcome of ``Host.run``. Output is bytes; ``text``/``err`` decode it leniently."""

    rc: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    signal: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    elapsed_s: float = 0.0
    stdout_spill: str | None = None  # the whole stream, when it outgrew max_output (S06)
    stderr_spill: str | None = None
    spill_error: str | None = None  # why a spill was dropped (no space, no permission)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err(self) -> str:
        return self.stderr.decode("utf-8", "replace")


@dataclasses.dataclass
class FileStat:
    """``inode`` is None over SFTP (the protocol does not carry it); ``kind`` is a FILE_KINDS
    name (``file``, ``dir``, ``fifo``, ...)."""

    path: str
    size: int
    mtime: float
    inode: int | None = None
    is_dir: bool = False
    kind: str = "file"


# What a stat mode is: (name, test, how a message says it). Only "file" is a log; "dir" is
# accepted where a folder is (ingest), the rest are refused before they are opened (a FIFO
# would block the read forever, a device stream without end).
FILE_KINDS: tuple[tuple[str, Callable[[int], bool], str], ...] = (
    ("file", _stat.S_ISREG, "a regular file"),
    ("dir", _stat.S_ISDIR, "a directory"),
    ("fifo", _stat.S_ISFIFO, "a FIFO (named pipe)"),
    ("socket", _stat.S_ISSOCK, "a socket"),
    ("chardev", _stat.S_ISCHR, "a character device"),
    ("blockdev", _stat.S_ISBLK, "a block device"),
    ("symlink", _stat.S_ISLNK, "a symbolic link"),
    # a regular file of /proc, /sys, ...: made by the kernel when read (hosts.local.PSEUDO_FS)
    ("pseudo", lambda mode: False, "a file the kernel makes when it is read (/proc, /sys)"),
)
KIND_TEXT = {name: text for name, _, text in FILE_KINDS}
KIND_HINT = {  # the fix a refusal suggests, where it is not "give the log file itself"
    "dir": "name the logs inside it, e.g. {where}/*.log",
    "pseudo": "copy what it shows into a file first: cat {where} > x.txt",
}


def made_when_read(host: Any, path: str) -> bool:
    """Whether a regular file whose size says 0 is made when it is read (FILE_KINDS "pseudo"):
    its first byte reads, or the read fails where an empty file's could not (/proc/self/mem:
    EIO). Catches what no table of filesystems names: lxcfs' /proc files, a remote host's
    /proc and /sys, filesystems not in hosts.local.PSEUDO_FS."""
    try:
        return bool(host.peek(path, 1))
    except (PermissionError, FileNotFoundError, IsADirectoryError):
        return False  # the read of the log says it, as for any file
    except OSError:
        return True


def file_kind(mode: int) -> str:
    return next((name for name, test, _ in FILE_KINDS if test(mode)), "other")


def require_regular(st: FileStat, where: str, expected: str = "log") -> None:
    """NotRegularFile (exit 2) unless ``st`` is a regular file (``expected``: what the file
    should have been, for the hint: a log, a sweep file, a config file)."""
    if st.kind == "file":
        return
    what = KIND_TEXT.get(st.kind, "not a regular file")
    hint = KIND_HINT.get(
        st.kind, "give the log file itself (copy a stream to a file first: cat PIPE > x.log)"
    ).format(where=where.rstrip("/"))
    if expected != "log":
        hint = f"give the {expected} as a regular file"
    raise NotRegularFile(
        f"{where}: is {what}, not a regular file" if st.kind != "other" else f"{where}: {what}",
        hint=hint,
    )


# errno of a failed stat/open -> (exception, cause, fix). One table for this machine and SFTP.
PATH_ERRORS: dict[int, tuple[type[InputNotFound] | type[UsageError], str, str]] = {
    errno.ENOENT: (FileMissing, "no such file", "check the path"),
    errno.EACCES: (PermissionDenied, "permission denied", "check its mode and owner"),
    errno.EPERM: (PermissionDenied, "permission denied", "check its mode and owner"),
    errno.ELOOP: (BadPath, "symbolic link loop", "fix the link: ls -l shows where it points"),
    errno.ENAMETOOLONG: (BadPath, "name too long", "a path component is over NAME_MAX (255)"),
    errno.ENOTDIR: (
        BadPath,
        "a component of the path is a file, not a directory",
        "drop the trailing / or fix the folder part",
    ),
}


def path_error(where: str, exc: OSError) -> Exception:
    """The typed error for an OSError of stat/open on ``where`` (or ``exc`` itself)."""
    row = PATH_ERRORS.get(exc.errno or 0)
    if row is None:
        return exc
    cls, cause, fix = row
    return cls(f"{where}: {cause}", hint=fix)


class ReadIncomplete(PartialFailure):
    """The file shrank or vanished while being read; ``data``/``bytes_read`` were kept (S08)."""

    def __init__(self, message: str, *, path: str, bytes_read: int, data: bytes = b""):
        super().__init__(message, hint="re-run later; the bytes read so far were kept")
        self.path = path
        self.bytes_read = bytes_read
        self.data = data


def _signal_of(rc: int | None) -> int | None:
    if rc is not None and 128 < rc <= 128 + 64:
        return rc - 128
    return None


# --------------------------------------------------------------------------------------------
# The interface


class Host:
    """Base of all hosts; see the module docstring for the contract of each method."""

    name: str = "host"

    def run(
        self,
        script: str,
        *,
        timeout: float,
        stdin: bytes | None = None,
        max_output: int = 1 << 20,
        allow_timeout: bool = False,
        spill_dir: str | os.PathLike | None = None,
        spill_name: str | None = None,
    ) -> CmdResult:
        raise NotImplementedError

    def run_argv(self, argv: list[str], **kwargs: Any) -> CmdResult:
        """Run one command given as argv (quoted with ``shlex.join``; no shell expansion)."""
        return self.run(shlex.join(argv), **kwargs)

    def spawn(
        self, script: str, *, cwd: str | None = None, log: str | None = None, timeout: float = 30
    ) -> int:
        inner = script if cwd is None else f"cd {shlex.quote(cwd)} || exit 97\n{script}"
        out = shlex.quote(log) if log else "/dev/null"
        wrapper = (
            "if command -v setsid >/dev/null 2>&1; then s=setsid; else s=; fi\n"
            f'$s nohup sh -c "$1" </dev/null >>{out} 2>&1 &\n'
            # return once setsid took effect, so the caller can signal the group -pid at once
            "p=$!; n=0\n"
            'while [ "$n" -lt 200 ]; do\n'
            '  g=$(ps -o pgid= -p "$p" 2>/dev/null | tr -d " ")\n'
            '  if [ -z "$g" ] || [ "$g" = "$p" ] || [ -z "$s" ]; then break; fi\n'
            "  n=$((n + 1)); sleep 0.01\n"
            "done\n"
            'echo "$p"\n'
        )
        res = self.run(shlex.join(["sh", "-c", wrapper, "forensics-spawn", inner]), timeout=timeout)
        try:
            return int(res.text.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteError(
                f"{self.name}: could not start a detached command: {res.err.strip()[:200]}",
                hint="check that sh and nohup exist on the host",
            ) from None

    def glob(self, pattern: str) -> list[str]:
        raise NotImplementedError

    def stat(self, path: str) -> FileStat:
        raise NotImplementedError

    def peek(self, path: str, n: int = 1) -> bytes:
        """Up to ``n`` bytes from the start of ``path``, whatever its size says (a file of a
        pseudo filesystem stats as 0 bytes and has text: ``made_when_read``)."""
        return b""

    def read(self, path: str, offset: int = 0, length: int | None = None) -> bytes:
        parts: list[bytes] = []
        try:
            for chunk in self.iter_chunks(path, offset, limit=length):
                parts.append(chunk)
        except ReadIncomplete as exc:
            exc.data = b"".join(parts)
            raise
        return b"".join(parts)

    def iter_chunks(
        self, path: str, offset: int = 0, chunk: int = CHUNK, limit: int | None = None
    ) -> Iterator[bytes]:
        raise NotImplementedError

    def write(self, path: str, data: bytes, mode: int = 0o600) -> None:
        raise NotImplementedError

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
        except InputNotFound:
            return False
        return True

    def is_dir(self, path: str) -> bool:
        try:
            return self.stat(path).is_dir
        except (InputNotFound, BadPath):
            return False

    def makedirs(self, path: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


def _deadline(host: str, script: str, timeout: float, res: CmdResult) -> DeadlineExceeded:
    shown = script.strip().splitlines()[0][:80] if script.strip() else ""
    exc = DeadlineExceeded(
        f"{host}: command did not finish within {timeout:g} s: {shown}",
        hint="raise the deadline, or check what the command waits on",
    )
    exc.result = res  # type: ignore[attr-defined]
    return exc


def _read_upto(
    path: str,
    read: Callable[[int], bytes],
    seek: Callable[[int], Any],
    offset: int,
    size: int,
    chunk: int,
    limit: int | None,
) -> Iterator[bytes]:
    """Yield the bytes [offset, size) (or ``limit`` of them); short file -> ReadIncomplete."""
    end = size if limit is None else min(size, offset + limit)
    if offset >= end:
        return
    seek(offset)
    pos = offset
    while pos < end:
        data = read(min(chunk, end - pos))
        if not data:
            raise ReadIncomplete(
                f"{path}: file shrank or vanished while reading ({pos - offset} of "
                f"{end - offset} bytes read)",
                path=path,
                bytes_read=pos - offset,
            )
        pos += len(data)
        yield data
