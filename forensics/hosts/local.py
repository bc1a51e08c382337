"""``LocalHost``: this machine. Commands run under ``sh -c`` in their own process group."""

from __future__ import annotations

import contextlib
import os
import signal as _signal
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from forensics.hosts.base import (
    CHUNK,
    KILL_GRACE_S,
    CmdResult,
    FileStat,
    Host,
    _deadline,
    _read_upto,
    _signal_of,
    file_kind,
    path_error,
    require_regular,
)
from forensics.hosts.capture import _Capped, _captures, _result_streams
from forensics.hosts.globbing import _glob_with, _no_match

if TYPE_CHECKING:  # imported by the commands that run one: reading files needs none
    import subprocess


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
        import subprocess

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
                return [(e.name, _entry_is_dir(e)) for e in it]

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

    def peek(self, path: str, n: int = 1) -> bytes:
        fd = os.open(os.path.expanduser(path), os.O_RDONLY | os.O_NONBLOCK)
        try:
            return os.read(fd, n)
        finally:
            os.close(fd)

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
        from forensics.output import replace_file

        # the one atomic writer (forensics.output): never through a symlink or over a
        # non-regular file, nothing half-written; OSError as the Host interface raises it
        replace_file(os.path.expanduser(path), data, mode=mode)

    def makedirs(self, path: str) -> None:
        os.makedirs(os.path.expanduser(path), exist_ok=True)


def _file_stat(path: str, st: os.stat_result) -> FileStat:
    kind = file_kind(st.st_mode)
    if kind == "file" and _pseudo_fs(st.st_dev):
        # /proc/self/status: its text is made when read, its size says 0; a /sys attribute
        # says 4096 whatever it holds (a size-0 file of any other filesystem that has bytes
        # is caught by hosts.base.made_when_read)
        kind = "pseudo"
    return FileStat(path, st.st_size, st.st_mtime, st.st_ino, kind == "dir", kind)


# Filesystems whose files the kernel generates when they are read (their size reads 0 or a
# placeholder such as 4096; some, such as /proc/kmsg, block): never a log (FILE_KINDS "pseudo").
PSEUDO_FS = frozenset(
    {"proc", "sysfs", "debugfs", "tracefs", "securityfs", "configfs", "cgroup", "cgroup2"}
    | {"efivarfs", "bpf", "pstore", "fusectl", "binfmt_misc", "hugetlbfs", "mqueue"}
)


_MOUNTS: dict[str, str] = {}  # "major:minor" -> filesystem type, read once (again on a miss)


def _pseudo_fs(dev: int) -> bool:
    """Whether device ``dev`` is a mount of a PSEUDO_FS filesystem (/proc/self/mountinfo)."""
    want = f"{os.major(dev)}:{os.minor(dev)}"
    if want not in _MOUNTS:  # a mount made since it was read (every stat used to read it)
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
                for line in f:
                    fields = line.split()
                    if len(fields) > 2 and " - " in line:
                        _MOUNTS[fields[2]] = line.split(" - ", 1)[1].split()[0]
        except OSError:  # no /proc (not Linux): nothing is known to be a pseudo file
            return False
    return _MOUNTS.get(want) in PSEUDO_FS


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
    import subprocess

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


def _entry_is_dir(entry: os.DirEntry[str]) -> bool:
    """One unreadable entry (a symlink loop, a link into a folder we may not read) is not a
    folder: it must not hide its siblings from the glob."""
    try:
        return entry.is_dir()
    except OSError:
        return False
