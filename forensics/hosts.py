"""Hosts: where commands run and files are read. ``LocalHost``, ``SSHHost`` (paramiko), config.

Everything that touches a machine goes through the small ``Host`` interface below, so the same
code (ingest, launcher, evidence) runs on this machine and on a GPU host over SSH, and tests run
it against a real sshd on 127.0.0.1.

Contract (the same for every host):

* ``run(script, timeout=...)`` runs ``sh -c script`` with stdin closed (or fed from ``stdin``),
  no pty, both output streams drained concurrently and capped in memory (the *last*
  ``max_output`` bytes of each are kept; ``CmdResult.*_truncated`` says when). Past ``timeout``
  seconds the command's process group is killed and ``DeadlineExceeded`` is raised (or, with
  ``allow_timeout=True``, a ``CmdResult`` with ``timed_out=True`` is returned). ``rc`` follows the
  shell convention: a command killed by signal N has ``rc == 128 + N`` and ``signal == N``.
  With ``spill_dir`` (a directory on *this* machine, created when needed), a stream that outgrows
  ``max_output`` is also written whole to a new file there (S06): created only once the cap is
  exceeded, mode 0600, named ``<spill_name, else the command's first words>.<random>.stdout``
  (or ``.stderr``); its path is in ``CmdResult.stdout_spill`` / ``stderr_spill`` (None when the
  stream fit in memory). Memory stays capped either way. A spill that cannot be written (no
  space, no permission) never fails the command: the partial file is removed, the path is None
  and ``spill_error`` says why.
  SSH: a connection that drops mid-command raises ``RemoteError`` (the remote outcome is
  unknown; S07), so does one that went silent (found at the deadline by a channel-open probe);
  the dead connection is dropped and the next call on the same host object opens a new one.
* ``spawn(script)`` starts ``sh -c script`` detached: new session (``setsid``, so its pid is its
  process-group id), stdin from /dev/null, stdout/stderr appended to ``log`` (or /dev/null);
  returns the pid at once (S17).
* ``glob(pattern)`` expands ``*?[]`` per path component *on the host* without a shell (names may
  hold spaces or newlines); ``*`` skips dot-files; the result is sorted; no match raises
  ``InputNotFound``.
* ``read``/``iter_chunks`` read up to the size the file had when opened (S09). A file that
  shrinks or vanishes mid-read raises ``ReadIncomplete`` after the bytes read so far were
  returned/yielded (S08).

Remote commands are always built as ``sh -c <one shlex-quoted script>`` (S11, bad-inputs §3.1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fnmatch
import getpass
import math
import os
import posixpath
import queue
import re
import select
import shlex
import signal as _signal
import socket
import stat as _stat
import subprocess
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.errors import (
    AuthFailed,
    BadPath,
    ConfigError,
    DeadlineExceeded,
    FileMissing,
    HostKeyError,
    HostUnreachable,
    InputNotFound,
    NotRegularFile,
    PartialFailure,
    PermissionDenied,
    RemoteError,
    UsageError,
)

if TYPE_CHECKING:
    import paramiko

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
)
KIND_TEXT = {name: text for name, _, text in FILE_KINDS}


def file_kind(mode: int) -> str:
    return next((name for name, test, _ in FILE_KINDS if test(mode)), "other")


def require_regular(st: FileStat, where: str) -> None:
    """NotRegularFile (exit 2) unless ``st`` is a regular file."""
    if st.kind == "file":
        return
    what = KIND_TEXT.get(st.kind, "not a regular file")
    raise NotRegularFile(
        f"{where}: is {what}, not a regular file" if st.kind != "other" else f"{where}: {what}",
        hint="give the log file itself (copy a stream to a file first: cat PIPE > x.log)"
        if st.kind != "dir"
        else f"name the logs inside it, e.g. {where.rstrip('/')}/*.log",
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
        self._fd, self.spill_path = fd, path
        self._write(bytes(self.buf))

    def _write(self, data: bytes) -> None:
        assert self._fd is not None
        view = memoryview(data)
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


class PortForward:
    """``ssh -L 127.0.0.1:<free port>:REMOTE_HOST:REMOTE_PORT`` over an ``SSHHost``'s transport.

    One thread moves bytes both ways for every connection (a selector over the accepted
    sockets and their channels). ``channels`` counts the connections forwarded; ``errors``
    holds why a channel could not be opened (the remote port closed, say), and such a client
    sees its connection closed at once, as with ``ssh -L``.
    """

    def __init__(self, host: SSHHost, remote_host: str, remote_port: int):
        self.host, self.remote = host, (remote_host, remote_port)
        self.channels = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(256)
        self._listener.setblocking(False)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(
            target=self._loop, name=f"forensics-forward-{self.port}", daemon=True
        )

    def __enter__(self) -> PortForward:
        self.host._transport()  # connect now: a refused login fails here, not per request
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(OSError):
            self._listener.close()

    def _open(self, client: socket.socket) -> Any:
        try:
            chan = self.host._transport().open_channel(
                "direct-tcpip", self.remote, client.getpeername(), timeout=DEFAULT_CONNECT_TIMEOUT
            )
        except Exception as exc:  # noqa: BLE001 - refused, transport gone: this client only
            self.errors.append(f"{self.host.name}: {self.remote[0]}:{self.remote[1]}: {exc}")
            return None
        self.channels += 1
        return chan

    def _loop(self) -> None:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, None)
        peers: dict[Any, Any] = {}

        def drop(end: Any) -> None:
            other = peers.pop(end, None)
            for x in (end, other):
                if x is None:
                    continue
                peers.pop(x, None)
                with contextlib.suppress(Exception):
                    sel.unregister(x)
                with contextlib.suppress(Exception):
                    x.close()

        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    if key.data is None:
                        try:
                            client, _ = self._listener.accept()
                        except (BlockingIOError, OSError):
                            continue
                        client.setblocking(True)
                        chan = self._open(client)
                        if chan is None:
                            client.close()
                            continue
                        peers[client], peers[chan] = chan, client
                        sel.register(client, selectors.EVENT_READ, "end")
                        sel.register(chan, selectors.EVENT_READ, "end")
                        continue
                    src = key.fileobj
                    dst = peers.get(src)
                    if dst is None:
                        continue
                    try:
                        data = src.recv(1 << 16)
                        if data:
                            dst.sendall(data)
                    except Exception:  # noqa: BLE001 - a reset end closes its pair
                        data = b""
                    if not data:
                        drop(src)
        finally:
            for end in list(peers):
                drop(end)
            sel.close()


# --------------------------------------------------------------------------------------------
# Glob shared by both hosts: per-component fnmatch over a listdir function


_MAGIC = re.compile(r"[*?\[]")


def _glob_with(
    pattern: str,
    listdir: Callable[[str], list[tuple[str, bool]]],
    exists: Callable[[str], bool],
) -> list[str]:
    """Expand ``pattern`` with ``listdir(dir) -> [(name, is_dir)]`` (no shell involved).
    ``**`` as a whole part matches zero or more folders (every depth, hidden ones skipped)."""
    absolute = pattern.startswith("/")
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    current = ["/" if absolute else ""]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt: list[str] = []
        if part == "**" and not last:
            current = _descendants(current, listdir)
            continue
        for base in current:
            if not _MAGIC.search(part):
                cand = posixpath.join(base, part) if base else part
                if exists(cand):
                    nxt.append(cand)
                continue
            try:
                entries = listdir(base or ".")
            except (OSError, InputNotFound):
                continue
            for name, is_dir in entries:
                if name.startswith(".") and not part.startswith("."):
                    continue
                if not last and not is_dir:
                    continue
                if fnmatch.fnmatchcase(name, part):
                    nxt.append(posixpath.join(base, name) if base else name)
        current = nxt
        if not current:
            break
    return sorted(set(current)) if parts else []


GLOB_MAX_DEPTH = 32  # `**` goes no deeper (a symlink loop ends here)
GLOB_MAX_DIRS = 100_000  # nor through more folders than this


def _descendants(bases: list[str], listdir: Callable[[str], list[tuple[str, bool]]]) -> list[str]:
    """``bases`` and every folder below them, breadth first, bounded (GLOB_MAX_*)."""
    out, level, depth = list(bases), list(bases), 0
    while level and depth < GLOB_MAX_DEPTH and len(out) < GLOB_MAX_DIRS:
        nxt = []
        for base in level:
            try:
                entries = listdir(base or ".")
            except (OSError, InputNotFound):
                continue
            nxt.extend(
                posixpath.join(base, name) if base else name
                for name, is_dir in entries
                if is_dir and not name.startswith(".")
            )
        out.extend(nxt[: GLOB_MAX_DIRS - len(out)])
        level, depth = nxt, depth + 1
    return out


def _no_match(host: str, pattern: str) -> InputNotFound:
    where = "" if host == "local" else f"{host}:"
    return InputNotFound(
        f"{where}{pattern}: no such file (nothing matched)",
        hint="check the path and the glob; quote it so your local shell does not expand it",
    )


# --------------------------------------------------------------------------------------------
# LocalHost


class LocalHost(Host):
    """This machine. Commands run under ``sh -c`` in their own process group."""

    name = "local"

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
        start = time.monotonic()
        proc = subprocess.Popen(
            ["sh", "-c", script],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        out, err = _captures(max_output, spill_dir, spill_name or script)
        threads = [
            threading.Thread(target=_drain, args=(proc.stdout, out), daemon=True),
            threading.Thread(target=_drain, args=(proc.stderr, err), daemon=True),
        ]
        if stdin is not None:
            threads.append(threading.Thread(target=_feed, args=(proc.stdin, stdin), daemon=True))
        for t in threads:
            t.start()
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc, KILL_GRACE_S)
        # the group is dead or the command exited; grandchildren holding the pipes may remain
        end = time.monotonic() + KILL_GRACE_S  # one grace for all readers, not one each
        for t in threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        rc = proc.returncode
        if rc is not None and rc < 0:
            rc = 128 - rc
        res = CmdResult(
            rc=rc,
            timed_out=timed_out,
            signal=_signal_of(rc),
            elapsed_s=time.monotonic() - start,
            **_result_streams(out, err, (threads[0].is_alive(), threads[1].is_alive())),
        )
        if timed_out and not allow_timeout:
            raise _deadline(self.name, script, timeout, res)
        return res

    def glob(self, pattern: str) -> list[str]:
        pat = os.path.expanduser(pattern)

        def listdir(d: str) -> list[tuple[str, bool]]:
            with os.scandir(d) as it:
                return [(e.name, e.is_dir()) for e in it]

        found = _glob_with(pat, listdir, os.path.lexists)
        if not found:
            raise _no_match(self.name, pattern)
        return found

    def stat(self, path: str) -> FileStat:
        p = os.path.expanduser(path)
        try:
            st = os.stat(p)
        except OSError as exc:
            raise path_error(path, exc) from None
        return _file_stat(path, st)

    def iter_chunks(
        self, path: str, offset: int = 0, chunk: int = CHUNK, limit: int | None = None
    ) -> Iterator[bytes]:
        p = os.path.expanduser(path)
        try:
            # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below refuses
            # it (and sockets, devices) before a read could block or never end
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise path_error(path, exc) from None
        f = os.fdopen(fd, "rb", buffering=0)  # unbuffered: S08
        with f:
            st = os.fstat(fd)
            require_regular(_file_stat(path, st), path)
            os.set_blocking(fd, True)
            yield from _read_upto(path, f.read, f.seek, offset, st.st_size, chunk, limit)

    def write(self, path: str, data: bytes, mode: int = 0o600) -> None:
        p = os.path.expanduser(path)
        tmp = f"{p}.tmp-{os.getpid()}-{threading.get_ident()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, p)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def makedirs(self, path: str) -> None:
        os.makedirs(os.path.expanduser(path), exist_ok=True)


def _file_stat(path: str, st: os.stat_result) -> FileStat:
    kind = file_kind(st.st_mode)
    return FileStat(path, st.st_size, st.st_mtime, st.st_ino, kind == "dir", kind)


def _drain(pipe: Any, sink: _Capped) -> None:
    with contextlib.suppress(OSError, ValueError):
        while True:
            data = pipe.read1(65536)
            if not data:
                break
            sink.add(data)


def _feed(pipe: Any, data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        pipe.write(data)
        pipe.close()


def _kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group we created, then SIGKILL it after ``grace`` seconds."""
    for sig in (_signal.SIGTERM, _signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
            if sig == _signal.SIGTERM:
                # the leader exited; make sure no member of the group outlives it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, _signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue


def _deadline(host: str, script: str, timeout: float, res: CmdResult) -> DeadlineExceeded:
    shown = script.strip().splitlines()[0][:80] if script.strip() else ""
    exc = DeadlineExceeded(
        f"{host}: command did not finish within {timeout:g} s: {shown}",
        hint="raise the deadline, or check what the command waits on",
    )
    exc.result = res  # type: ignore[attr-defined]
    return exc


def _lost(transport: Any, chan: Any) -> bool:
    """Whether a channel that ended without an exit status did so because the link died."""
    if not chan.eof_received:
        return True  # sshd always sends EOF before closing a session it ended itself
    if transport.is_active():
        # the transport thread unlinks the channels a moment before it marks itself dead
        with contextlib.suppress(RuntimeError):
            transport.join(0.5)
    return not transport.is_active()


def _connection_lost(host: str, script: str, out: _Capped, err: _Capped, what: str) -> RemoteError:
    shown = script.strip().splitlines()[0][:80] if script.strip() else ""
    got = f"; {out.total} bytes of stdout and {err.total} of stderr came back"
    return RemoteError(
        f"{host}: {what} during a command (its outcome is unknown{got}): {shown}",
        hint="check on the host whether it ran (pid file, log) before re-running; "
        "the next command reconnects",
    )


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


# --------------------------------------------------------------------------------------------
# Config


@dataclasses.dataclass
class HostConfig:
    """One ``[hosts.NAME]`` table."""

    name: str
    user: str
    host: str
    port: int = 22
    identity_file: str | None = None
    known_hosts: str | None = None
    jump: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    source: str = ""

    @property
    def address(self) -> str:
        h = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{h}:{self.port}"


HOST_KEYS = {"address", "identity_file", "known_hosts", "jump", "connect_timeout"}
_ADDRESS = re.compile(
    r"^(?:(?P<user>[^@\s/]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[^@\s:/\[\]]+)(?::(?P<port>\d+))?$"
)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


def forensics_home() -> Path:
    """Where forensics writes its state (forensics.home: honours --store)."""
    from forensics.home import home

    return home()


def config_paths() -> list[Path]:
    """Config files in precedence order (first wins per host name); --store does not move
    them (forensics.home)."""
    from forensics.home import default_home

    return [Path("forensics.toml"), default_home() / "config.toml"]


def parse_address(text: str, *, where: str = "address") -> tuple[str, str, int]:
    """``user@host[:port]`` -> (user, host, port); user defaults to the local user."""
    m = _ADDRESS.match(text.strip())
    if not m:
        raise ConfigError(
            f"{where}: {text!r} is not an address",
            hint="write it as user@host or user@host:port",
        )
    host = m["host"].strip("[]")
    port = int(m["port"] or 22)
    if not 0 < port < 65536:
        raise ConfigError(f"{where}: port {port} out of range", hint="use a port 1-65535")
    return m["user"] or getpass.getuser(), host, port


# The top-level tables of forensics.toml / config.toml, and who reads them.
CONFIG_SECTIONS = (
    "hosts",  # forensics.hosts: [hosts.NAME]
    "recipes",  # forensics.recipe: [recipes.NAME]
)


def load_config(paths: list[Path] | None = None) -> dict[str, Any]:
    """The merged config: ``{"hosts": {NAME: HostConfig}, "raw": [(path, dict)]}``.

    Other sections (recipes, ...) are left in ``raw`` for their owners.
    """
    hosts: dict[str, HostConfig] = {}
    raw: list[tuple[str, dict]] = []
    for path in paths if paths is not None else config_paths():
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the file") from None
        unknown = sorted(set(data) - set(CONFIG_SECTIONS))
        if unknown:  # a typo ([host.gpu8], [recipe.x]) would otherwise be silently ignored
            import difflib

            near = difflib.get_close_matches(unknown[0], CONFIG_SECTIONS, n=1)
            raise ConfigError(
                f"{path}: [{unknown[0]}]: not a section forensics reads"
                + (f" (did you mean [{near[0]}]?)" if near else ""),
                hint=f"the sections are {', '.join(f'[{s}]' for s in CONFIG_SECTIONS)}",
            )
        raw.append((str(path), data))
        section = data.get("hosts", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [hosts] must be a table", hint="use [hosts.NAME]")
        for name, table in section.items():
            if name in hosts:
                continue
            hosts[name] = _host_config(path, name, table)
    _check_jumps(hosts)
    return {"hosts": hosts, "raw": raw}


def _check_jumps(hosts: dict[str, HostConfig]) -> None:
    """Every ``jump`` names a configured host (or is a ``user@host`` address) and the chain of
    jumps ends: a host that jumps to itself, or A -> B -> A, would connect for ever."""
    for name, cfg in hosts.items():
        chain = [name]
        nxt = cfg.jump
        while nxt:
            if nxt not in hosts:
                if "@" not in nxt:
                    raise ConfigError(
                        f"{hosts[chain[-1]].source}: hosts.{chain[-1]}.jump = {nxt!r}: "
                        "no such host",
                        hint=f"add [hosts.{nxt}] or give an address (user@host[:port])",
                    )
                break
            if nxt in chain:
                cycle = " -> ".join([*chain[chain.index(nxt) :], nxt])
                raise ConfigError(
                    f"{hosts[chain[-1]].source}: hosts.{chain[-1]}.jump: the jumps go round "
                    f"in a circle ({cycle})",
                    hint="the last host of a jump chain must be reachable directly: "
                    "remove one of these jump keys",
                )
            chain.append(nxt)
            nxt = hosts[nxt].jump


def _host_config(path: Path, name: str, table: Any) -> HostConfig:
    where = f"{path}: hosts.{name}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: bad host name", hint="use letters, digits, '.', '_', '-'")
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table", hint=f"write [hosts.{name}]")
    unknown = sorted(set(table) - HOST_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: unknown key", hint=f"known keys: {', '.join(sorted(HOST_KEYS))}"
        )
    if "address" not in table:
        raise ConfigError(f"{where}.address: missing", hint='add address = "user@host:port"')
    for key in ("address", "identity_file", "known_hosts", "jump"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{where}.{key}: must be a string", hint="quote the value")
    user, host, port = parse_address(table["address"], where=f"{where}.address")
    timeout = table.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or not 0 < timeout <= MAX_CONNECT_TIMEOUT
    ):
        raise ConfigError(
            f"{where}.connect_timeout = {timeout!r}: must be a number of seconds, "
            f"more than 0 and at most {MAX_CONNECT_TIMEOUT:g}",
            hint="e.g. connect_timeout = 10",
        )
    return HostConfig(
        name=name,
        user=user,
        host=host,
        port=port,
        identity_file=table.get("identity_file"),
        known_hosts=table.get("known_hosts"),
        jump=table.get("jump"),
        connect_timeout=float(timeout),
        source=str(path),
    )


# --------------------------------------------------------------------------------------------
# Host lookup, connection cache and locations

_CACHE: dict[tuple, Host] = {}
_CACHE_LOCK = threading.RLock()  # re-entered when a jump host connects
_LOCAL = LocalHost()


def get_host(name: str | None, *, trust_new_host: bool = False) -> Host:
    """The host for a config name (or ``user@host[:port]``, or ``local``), connected and cached.

    Connections are reused for the life of the process; a dropped one is reopened.
    """
    if name in (None, "", "local", "localhost-local"):
        return _LOCAL
    cfg = load_config()["hosts"].get(name)
    if cfg is None:
        if "@" not in name:
            known = ", ".join(sorted(load_config()["hosts"])) or "none"
            raise ConfigError(
                f"unknown host {name!r} (configured: {known})",
                hint=f'add [hosts.{name}] address = "user@host" to forensics.toml',
            )
        user, host, port = parse_address(name)
        cfg = HostConfig(name=f"{user}@{host}:{port}", user=user, host=host, port=port)
    return _host_for(cfg, trust_new_host=trust_new_host)


def _host_for(cfg: HostConfig, *, trust_new_host: bool = False) -> Host:
    key = (cfg.user, cfg.host, cfg.port, cfg.identity_file, cfg.known_hosts, cfg.jump)
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if isinstance(cached, SSHHost) and cached.alive():
            return cached
        host = SSHHost(cfg, trust_new_host=trust_new_host)
        host.connect()
        _CACHE[key] = host
        return host


def close_all() -> None:
    """Close every cached connection (the CLI calls this at exit; tests between cases)."""
    with _CACHE_LOCK:
        for host in _CACHE.values():
            with contextlib.suppress(Exception):
                host.close()
        _CACHE.clear()


_SSH_URL = re.compile(r"^ssh://(?P<addr>[^/]+)(?P<path>/.*)?$")
_NAMED = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]{0,63}|[^@\s:/]+@[^@\s:/]+):(?P<path>.*)$")


def is_remote(text: str) -> bool:
    return bool(_SSH_URL.match(text)) or (_named_prefix(text) is not None)


def _named_prefix(text: str) -> str | None:
    m = _NAMED.match(text)
    if not m or os.path.exists(text):
        return None
    return m["name"]


def resolve_location(text: str, *, trust_new_host: bool = False) -> tuple[Host, str]:
    """``ssh://user@host[:port]/path``, ``NAME:/path``, ``user@host:/path`` or a local path.

    Returns (host, path-or-pattern). A ``NAME:`` that is not configured is a ConfigError.
    """
    m = _SSH_URL.match(text)
    if m:
        addr = m["addr"]
        path = m["path"] or "."
        hosts = load_config()["hosts"]
        if addr in hosts:
            return _host_for(hosts[addr], trust_new_host=trust_new_host), path
        user, host, port = parse_address(addr, where=text)
        cfg = HostConfig(name=f"{user}@{host}:{port}", user=user, host=host, port=port)
        # an ssh:// URL to a configured address reuses that entry's keys
        for known in hosts.values():
            if (known.host, known.port) == (host, port) and known.user == user:
                cfg = known
        return _host_for(cfg, trust_new_host=trust_new_host), path
    name = _named_prefix(text)
    if name is not None:
        path = text[len(name) + 1 :]
        if not path:
            raise UsageError(f"{text}: no path after the host", hint=f"{name}:/path/to/*.log")
        return get_host(name, trust_new_host=trust_new_host), path
    return _LOCAL, text


# --------------------------------------------------------------------------------------------
# Host keys


def project_known_hosts() -> Path:
    """Keys accepted with ``--trust-new-host`` are recorded here."""
    return forensics_home() / "known_hosts"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style ``SHA256:...`` fingerprint."""
    import base64
    import hashlib

    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


_fingerprint = fingerprint  # for functions whose `fingerprint` parameter shadows it


def _known_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _record_host_key(host: str, port: int, key: paramiko.PKey) -> Path:
    path = project_known_hosts()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f"{_known_name(host, port)} {key.get_name()} {key.get_base64()}\n"
    with open(path, "a", encoding="utf-8") as f:
        f.write(line)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o600)
    return path


def _policy(address: str, trust: bool, port: int):  # -> paramiko.MissingHostKeyPolicy
    import paramiko

    class _Policy(paramiko.MissingHostKeyPolicy):
        """Unknown key: refuse naming its fingerprint, or record it when the user trusts it."""

        def missing_host_key(self, client, hostname, key):  # noqa: ANN001
            host = hostname.split("]")[0].lstrip("[") if hostname.startswith("[") else hostname
            if trust:
                _record_host_key(host, port, key)
                client.get_host_keys().add(hostname, key.get_name(), key)
                return
            raise HostKeyError(
                f"{address}: unknown host key {key.get_name()} {fingerprint(key)}",
                hint="check the fingerprint with the host's admin, then re-run with "
                "--trust-new-host to record it",
            )

    return _Policy()


# --------------------------------------------------------------------------------------------
# SSHHost


def _quiet_paramiko() -> None:
    """paramiko logs tracebacks at ERROR for failures we already report in one line."""
    import logging

    log = logging.getLogger("paramiko")
    if log.level == logging.NOTSET and not os.environ.get("FORENSICS_DEBUG"):
        log.setLevel(logging.CRITICAL)


_REMOTE_WRAPPER = (
    # $1 = deadline seconds, $2 = script. GNU/busybox timeout kills the whole process group
    # it leads; without timeout the client deadline still holds.
    'if command -v timeout >/dev/null 2>&1; then timeout -k {grace} "$1" sh -c "$2"; '
    'else sh -c "$2"; fi\nexit $?'
)


class SSHHost(Host):
    """A host over SSH (paramiko): one transport, one SFTP session, reused."""

    def __init__(self, cfg: HostConfig, *, trust_new_host: bool = False):
        self.cfg = cfg
        self.name = cfg.name
        self.address = cfg.address
        self.trust_new_host = trust_new_host
        self.op_timeout = DEFAULT_OP_TIMEOUT
        self._client: paramiko.SSHClient | None = None
        self._jump: Host | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._lock = threading.RLock()
        self._sftp_lock = threading.RLock()

    # -- connection -----------------------------------------------------------------------

    def connect(self) -> None:
        import paramiko

        cfg = self.cfg
        _quiet_paramiko()
        client = paramiko.SSHClient()
        for path in self._known_hosts_files():
            try:
                client.load_system_host_keys(str(path))
            except (OSError, paramiko.SSHException) as exc:
                raise ConfigError(
                    f"{path}: unreadable known_hosts: {exc}", hint="fix or remove the file"
                ) from None
        client.set_missing_host_key_policy(_policy(self.address, self.trust_new_host, cfg.port))
        sock = self._jump_channel() if cfg.jump else self._socket()
        identity = os.path.expanduser(cfg.identity_file) if cfg.identity_file else None
        if identity and not os.path.isfile(identity):
            raise ConfigError(
                f"{cfg.source or self.address}: identity_file {cfg.identity_file}: no such file",
                hint="point identity_file at a private key",
            )
        tried = []
        if identity:
            tried.append(f"publickey ({cfg.identity_file})")
        if os.environ.get("SSH_AUTH_SOCK"):
            tried.append("agent")
        if not identity:
            tried.append("default keys in ~/.ssh")
        t = cfg.connect_timeout
        try:
            client.connect(
                cfg.host,
                port=cfg.port,
                username=cfg.user,
                key_filename=identity,
                look_for_keys=identity is None,
                allow_agent=True,
                timeout=2 * t + 1,  # with sock given: the negotiation deadline, > banner
                banner_timeout=t,
                auth_timeout=t,
                channel_timeout=t,
                sock=sock,
                passphrase=None,
                password=None,
            )
        except HostKeyError:
            client.close()
            raise
        except paramiko.BadHostKeyException as exc:
            client.close()
            raise HostKeyError(
                f"{self.address}: HOST KEY CHANGED: got {exc.key.get_name()} "
                f"{fingerprint(exc.key)}, expected {fingerprint(exc.expected_key)}",
                hint="this may be an attack; if the host was reinstalled, remove its old line "
                "from known_hosts yourself",
            ) from None
        except paramiko.PasswordRequiredException:
            client.close()
            raise AuthFailed(
                f"{self.address}: the private key is encrypted and no agent holds it",
                hint="ssh-add the key to an agent (no password prompts here)",
            ) from None
        except paramiko.BadAuthenticationType as exc:
            client.close()
            raise AuthFailed(
                f"{self.address}: authentication failed; the server allows only "
                f"{', '.join(exc.allowed_types)} (tried: {', '.join(tried) or 'none'})",
                hint="set identity_file for this host or load a key into ssh-agent",
            ) from None
        except paramiko.AuthenticationException:
            client.close()
            raise AuthFailed(
                f"{self.address}: authentication failed (tried: {', '.join(tried) or 'none'})",
                hint="check the user and that the key is in the server's authorized_keys",
            ) from None
        except TimeoutError:
            client.close()
            raise HostUnreachable(
                f"{self.address}: connection timed out after {t:g} s",
                hint="check the address, VPN or firewall",
            ) from None
        except socket.gaierror as exc:
            client.close()
            raise HostUnreachable(
                f"{self.address}: cannot resolve host: {exc.strerror}",
                hint="check the host name",
            ) from None
        except paramiko.SSHException as exc:
            client.close()
            msg = str(exc)
            if "banner" in msg.lower():
                raise HostUnreachable(
                    f"{self.address}: no SSH banner within {t:g} s (something listens there, "
                    "but it is not answering as an SSH server)",
                    hint="check the port; the server may be overloaded",
                ) from None
            raise HostUnreachable(
                f"{self.address}: SSH negotiation failed: {msg}", hint="check the server"
            ) from None
        except OSError as exc:
            client.close()
            raise HostUnreachable(
                f"{self.address}: {exc.strerror or exc}",
                hint="check that sshd runs there and the port is right",
            ) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(KEEPALIVE_S)
        self._client = client

    def _socket(self) -> socket.socket:
        """The TCP connection, opened here so that S01 errors carry the errno text."""
        t = self.cfg.connect_timeout
        try:
            return socket.create_connection((self.cfg.host, self.cfg.port), timeout=t)
        except TimeoutError:
            raise HostUnreachable(
                f"{self.address}: connection timed out after {t:g} s",
                hint="check the address, VPN or firewall",
            ) from None
        except socket.gaierror as exc:
            raise HostUnreachable(
                f"{self.address}: cannot resolve host: {exc.strerror}", hint="check the host name"
            ) from None
        except OSError as exc:
            cause = (exc.strerror or str(exc)).lower()
            raise HostUnreachable(
                f"{self.address}: {cause}",
                hint="check that sshd runs there and the port is right",
            ) from None

    def _known_hosts_files(self) -> list[Path]:
        files = []
        if self.cfg.known_hosts:
            p = Path(os.path.expanduser(self.cfg.known_hosts))
            if not p.is_file():
                raise ConfigError(
                    f"{self.cfg.source or self.address}: known_hosts {self.cfg.known_hosts}: "
                    "no such file",
                    hint="create it (ssh-keyscan, checked) or use --trust-new-host",
                )
            files.append(p)
        else:
            p = Path(os.path.expanduser("~/.ssh/known_hosts"))
            if p.is_file():
                files.append(p)
        from forensics.home import default_home

        # keys accepted under the default home stay trusted under --store DIR
        for p in dict.fromkeys([project_known_hosts(), default_home() / "known_hosts"]):
            if p.is_file():
                files.append(p)
        return files

    def _jump_channel(self):  # noqa: ANN202 - paramiko.Channel
        jump = get_host(self.cfg.jump, trust_new_host=self.trust_new_host)
        if not isinstance(jump, SSHHost) or jump._client is None:
            raise ConfigError(
                f"{self.cfg.source}: hosts.{self.cfg.name}.jump = {self.cfg.jump!r} is not an "
                "SSH host",
                hint="name another [hosts.X] entry",
            )
        self._jump = jump
        transport = jump._client.get_transport()
        try:
            return transport.open_channel(
                "direct-tcpip",
                (self.cfg.host, self.cfg.port),
                ("127.0.0.1", 0),
                timeout=self.cfg.connect_timeout,
            )
        except Exception as exc:  # paramiko raises ChannelException / SSHException
            raise HostUnreachable(
                f"{self.address}: jump host {jump.name} could not reach it: {exc}",
                hint="check the address as seen from the jump host",
            ) from None

    def alive(self) -> bool:
        if self._client is None:
            return False
        t = self._client.get_transport()
        return bool(t and t.is_active())

    def _transport(self):  # noqa: ANN202
        if not self.alive():
            self.connect()
        assert self._client is not None
        return self._client.get_transport()

    def close(self) -> None:
        with self._lock:
            self._drop_sftp()
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- commands -------------------------------------------------------------------------

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
        import paramiko

        wrapper = _REMOTE_WRAPPER.format(grace=KILL_GRACE_S)
        command = shlex.join(["sh", "-c", wrapper, "forensics", f"{timeout:g}", script])
        start = time.monotonic()
        # the remote `timeout` fires first; the client deadline is the backstop (S07: a link
        # that dies silently is noticed here at the latest)
        client_deadline = start + timeout + KILL_GRACE_S + 5
        transport = self._transport()
        try:
            chan = transport.open_session(timeout=self.cfg.connect_timeout)
            chan.exec_command(command)
            if stdin:
                chan.settimeout(max(1.0, timeout))
                chan.sendall(stdin)
            chan.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if not isinstance(exc, paramiko.ChannelException):  # not a refusal: a dead link
                self._discard(transport)
            raise RemoteError(
                f"{self.address}: could not start a command: {exc}",
                hint="the connection may have dropped; re-run",
            ) from None
        out, err = _captures(max_output, spill_dir, spill_name or script)
        timed_out = False
        try:
            rc, timed_out = self._pump(chan, out, err, client_deadline)
            if rc is None and not timed_out and _lost(transport, chan):
                raise _connection_lost(self.address, script, out, err, "connection lost")
            if timed_out and not self._answers(transport):
                # not even the remote `timeout` answered: the link died silently (S07)
                self._discard(transport)
                raise _connection_lost(
                    self.address, script, out, err, "connection stopped answering"
                )
        except (OSError, EOFError, paramiko.SSHException):
            raise _connection_lost(self.address, script, out, err, "connection lost") from None
        finally:
            chan.close()
            out.close()
            err.close()
        elapsed = time.monotonic() - start
        if rc == 124 and elapsed >= timeout * 0.9:
            timed_out = True
        res = CmdResult(
            rc=rc,
            timed_out=timed_out,
            signal=_signal_of(rc),
            elapsed_s=elapsed,
            **_result_streams(out, err),
        )
        if timed_out and not allow_timeout:
            raise _deadline(self.address, script, timeout, res)
        return res

    def stream(self, script: str, *, window: int = STREAM_WINDOW) -> Iterator[bytes]:
        """The standard output of ``script`` (run by the remote ``sh``) as it arrives, in
        pieces; a read-ahead thread keeps at most ``window`` bytes waiting, so the transfer
        goes on while the caller works on what came. Every wait is bounded by the op timeout
        (S13). Raises RemoteError when it cannot start, the link drops, or the command exits
        non-zero (its stderr in the message)."""
        import paramiko

        transport = self._transport()
        try:
            chan = transport.open_session(
                window_size=window, max_packet_size=1 << 15, timeout=self.cfg.connect_timeout
            )
            chan.exec_command(shlex.join(["sh", "-c", script]))
            chan.shutdown_write()
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise RemoteError(
                f"{self.address}: could not start a command: {exc}",
                hint="the connection may have dropped; re-run",
            ) from None
        chan.settimeout(self.op_timeout)
        ahead: queue.Queue[bytes | BaseException | None] = queue.Queue(STREAM_AHEAD)
        stop = threading.Event()

        def pull() -> None:
            try:
                while not stop.is_set():
                    data = chan.recv(1 << 20)
                    if not data:
                        break
                    ahead.put(data)
                ahead.put(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
                ahead.put(exc)

        reader = threading.Thread(target=pull, name="forensics-stream", daemon=True)
        reader.start()
        try:
            while True:
                try:
                    item = ahead.get(timeout=self.op_timeout + 5)
                except queue.Empty:
                    raise RemoteError(
                        f"{self.address}: no data for {self.op_timeout:g} s",
                        hint="the connection may have dropped; re-run",
                    ) from None
                if item is None:
                    break
                if isinstance(item, BaseException):
                    raise RemoteError(
                        f"{self.address}: connection lost while reading ({item})",
                        hint="re-run; the bytes read so far were kept",
                    )
                yield item
            rc = chan.recv_exit_status()
            if rc != 0:
                err = b""
                with contextlib.suppress(Exception):
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 12)
                raise RemoteError(
                    f"{self.address}: exit {rc}: {err.decode(errors='replace').strip()[:200]}",
                    hint="check the path and that the command exists on the host",
                )
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                chan.close()
            with contextlib.suppress(queue.Empty):  # unblock a reader waiting to put
                while True:
                    ahead.get_nowait()
            reader.join(timeout=5)

    def _answers(self, transport: Any) -> bool:
        """Whether the server still opens a channel on ``transport`` (a liveness probe)."""
        try:
            transport.open_session(timeout=self.cfg.connect_timeout).close()
        except Exception:  # noqa: BLE001 - any failure means no answer
            return False
        return True

    def _discard(self, transport: Any) -> None:
        """Drop a dead connection so that the next call opens a new one (S07)."""
        with self._lock:
            if self._client is None or self._client.get_transport() is not transport:
                return  # already replaced
            self._drop_sftp()
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None

    @staticmethod
    def _pump(chan: Any, out: _Capped, err: _Capped, deadline: float) -> tuple[int | None, bool]:
        """Drain both streams of ``chan`` until it ends: (exit status or None, timed out)."""
        chan.setblocking(False)
        fd = chan.fileno()
        while True:
            drained = False
            while chan.recv_ready():
                out.add(chan.recv(1 << 16))
                drained = True
            while chan.recv_stderr_ready():
                err.add(chan.recv_stderr(1 << 16))
                drained = True
            if chan.exit_status_ready() and not chan.recv_ready():
                if not chan.recv_stderr_ready() and (chan.eof_received or chan.closed):
                    break
            if chan.closed and not drained:
                break
            now = time.monotonic()
            if now > deadline:
                return None, True
            if not drained:
                # short waits: the exit status arrives without waking the data pipe
                select.select([fd], [], [], min(0.01, deadline - now))
        rc = chan.recv_exit_status()
        return (None if rc == -1 else rc), False  # -1: the server sent no exit status

    # -- files (SFTP) ---------------------------------------------------------------------

    def forward(self, remote_port: int, remote_host: str = "127.0.0.1") -> PortForward:
        """A local TCP port that reaches ``remote_host:remote_port`` as seen from this host
        (``ssh -L``): for servers that listen on the host's loopback only, as SGLang does by
        default. Use as a context manager; each connection is one ``direct-tcpip`` channel."""
        return PortForward(self, remote_host, int(remote_port))

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
                # chunk (not the whole file) also notices a file that shrinks (S08)
                def get() -> bytes:
                    try:
                        f.prefetch(f.tell() + n, max_concurrent_requests=MAX_SFTP_REQUESTS)
                        return f.read(n)
                    except EOFError:  # the file shrank under us
                        return b""

                return self._sftp_call("read", path, get)

            yield from _read_upto(path, read, f.seek, offset, size, min(chunk, 4 << 20), limit)
        finally:
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

    def makedirs(self, path: str) -> None:
        res = self.run_argv(["mkdir", "-p", "--", self._sftp_path(path)], timeout=self.op_timeout)
        if not res.ok:
            raise RemoteError(
                f"{self.name}:{path}: cannot create directory: {res.err.strip()[:200]}",
                hint="check permissions and free space",
            )


# --------------------------------------------------------------------------------------------
# `forensics hosts trust` / `hosts check`


def _config_for(name: str) -> HostConfig:
    cfg = load_config()["hosts"].get(name)
    if cfg is not None:
        return cfg
    if "@" not in name:
        known = ", ".join(sorted(load_config()["hosts"])) or "none"
        raise ConfigError(
            f"unknown host {name!r} (configured: {known})",
            hint=f'add [hosts.{name}] address = "user@host" to forensics.toml',
        )
    user, host, port = parse_address(name)
    return HostConfig(name=f"{user}@{host}:{port}", user=user, host=host, port=port)


_FINGERPRINT = re.compile(r"^SHA256:[A-Za-z0-9+/]{43}=?\Z")


def trust_host(name: str, *, fingerprint: str | None = None) -> dict[str, Any]:
    """Fetch a host's key (no login) and record it in the project known_hosts.

    Without ``fingerprint`` nothing is written: the fingerprint is returned for the user to
    check and pass back. A key that differs from a recorded one is a HostKeyError (never
    replaced).
    """
    import paramiko

    if fingerprint is not None and not _FINGERPRINT.match(fingerprint.strip()):
        raise UsageError(
            f"--fingerprint {fingerprint!r}: not a SHA256 key fingerprint",
            hint=f"SHA256: and 43 base64 characters, as `forensics hosts trust {name}` prints",
        )
    _quiet_paramiko()
    cfg = _config_for(name)
    probe = SSHHost(cfg)
    sock = probe._jump_channel() if cfg.jump else probe._socket()
    transport = paramiko.Transport(sock)
    try:
        transport.banner_timeout = cfg.connect_timeout
        transport.start_client(timeout=2 * cfg.connect_timeout + 1)
        key = transport.get_remote_server_key()
    except paramiko.SSHException as exc:
        raise HostUnreachable(
            f"{cfg.address}: SSH negotiation failed: {exc}", hint="check the port"
        ) from None
    finally:
        transport.close()
    fp = _fingerprint(key)
    out = {"host": cfg.name, "address": cfg.address, "key_type": key.get_name(), "fingerprint": fp}
    keys = paramiko.HostKeys()
    for path in probe._known_hosts_files():
        with contextlib.suppress(OSError):
            keys.load(str(path))
    entry = keys.lookup(_known_name(cfg.host, cfg.port)) or {}
    recorded = entry.get(key.get_name())
    if recorded is not None:
        if recorded.asbytes() != key.asbytes():
            raise HostKeyError(
                f"{cfg.address}: HOST KEY CHANGED: got {key.get_name()} {fp}, expected "
                f"{_fingerprint(recorded)}",
                hint="this may be an attack; if the host was reinstalled, remove its old line "
                "from known_hosts yourself",
            )
        return {**out, "recorded": True, "already_known": True}
    if fingerprint is None:
        return {
            **out,
            "recorded": False,
            "hint": f"check it with the host's admin, then: forensics hosts trust {name} "
            f"--fingerprint {fp}",
        }
    if fingerprint.strip() != fp:
        raise HostKeyError(
            f"{cfg.address}: fingerprint mismatch: the host offers {fp}, you gave {fingerprint}",
            hint="do not trust this key; check the address and ask the host's admin",
        )
    path = _record_host_key(cfg.host, cfg.port, key)
    return {**out, "recorded": True, "already_known": False, "known_hosts": str(path)}
