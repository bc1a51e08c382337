"""Every file forensics writes outside its store's own parts goes through this module.

Two entry points, one writer underneath:

* ``write_output`` — a file the user named (``report -o``, ``plot -o``). What the target is
  decides how it is written (the table below, ``TARGET_KINDS``):

  - a regular file, or nothing yet: written to a temporary file beside it, fsynced and renamed
    over it, so a crash or a full disk leaves the old file (or none), never half of one;
  - this process's own stdout or stderr (``-o -``, ``-o /dev/stdout``, or any path that is the
    same file as fd 1 / fd 2, e.g. ``-o out.html > out.html``): written through that fd at
    its position, never renamed over (``report -o /dev/stdout >> app.log`` replaced app.log);
  - a character device or a FIFO (``/dev/null``, a named pipe): written in place, never
    renamed over (as root, a rename would replace ``/dev/full`` with a file); a FIFO nobody
    reads is refused at once, and one whose reader stops reading for ``STALL_S`` seconds is
    an error, never a hang;
  - anything else (a folder, a socket, a block device): refused.

  A symlink is followed: its target is what gets written (a device or FIFO through the link
  itself, so ``/dev/stdout`` works when it is a pipe). Nothing inside forensics' home (the
  store folder) is ever an output: that would replace the manifest or a part. Errors are
  ``UsageError`` (exit 2) naming the path, the cause and a fix.

* ``write_home_file`` — a file forensics keeps under its home beside the store (known_hosts,
  a retrained model, a sweep job's spec and result, the demo's config) or a launch's own
  files on this machine (``LocalHost.write``). Atomic the same way, or appended (known_hosts)
  with the file cut back to its old size when the append fails; never through a symlink, never
  over a file that is not regular. Errors are ``StoreError`` (exit 7): the state could not be
  written, the old one stands.

What does not come here, and why: the store's parts and manifest (forensics.store: its own
transaction), evidence spill files (forensics.hosts.capture: a stream of unknown length,
written as it arrives into a new O_EXCL file and removed when it cannot be finished), files on
a remote host (forensics.hosts.sftp), the throwaway sshd/slurm of tests (their own temp dirs).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import select
import stat
import sys
import time
from pathlib import Path

from forensics.errors import StoreError, UsageError

# file type -> how a file of that type is written (None: refused, with the reason)
TARGET_KINDS: dict[str, str | None] = {
    "absent": "atomic",
    "regular": "atomic",
    "standard stream": "stream",
    "character device": "in_place",
    "fifo": "in_place",
    "directory": None,
    "symbolic link": None,  # only where forensics' own file should be (write_home_file)
    "socket": None,
    "block device": None,
}

# a FIFO (or device) whose reader takes no byte for this long is an error, not a hang
STALL_S = 30.0

# the key a command sets in its click context's obj (``ctx.obj[EXIT_AT_ONCE] = True``) when
# every file it writes is closed as it returns (ingest): forensics.cli.main then ends that one
# call with ExitAtOnce, and the entry point ends the process at once, without the
# interpreter's teardown (forensics.entry._exit_at_once). The obj is the call's own: a second
# call in the same process (tests) starts without it.
EXIT_AT_ONCE = "exit_at_once"


class ExitAtOnce(SystemExit):
    """The exit of a call whose command asked for EXIT_AT_ONCE: a SystemExit to every caller,
    one that the entry point may end the process on with ``os._exit``."""


STD_FDS = {1: "stdout", 2: "stderr"}  # written through the fd, never renamed over

_MODE_KINDS = (
    (stat.S_ISREG, "regular"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISBLK, "block device"),
)

# errno of a write -> the cause the error line names (else the OS's strerror)
WRITE_CAUSES = {
    errno.ENXIO: "a FIFO that no process is reading",
    errno.EPIPE: "the reader closed it before the end",
    errno.ENAMETOOLONG: "name too long: a path component is over NAME_MAX (255)",
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
}


def std_fd(path: str | Path) -> int | None:
    """The standard stream (1 or 2) ``path`` is, else None: ``-`` is stdout; any path that is
    the same file as fd 1 or 2 (``/dev/stdout``, ``/proc/self/fd/1``, the file stdout was
    redirected to) is that stream."""
    if str(path) == "-":
        return 1
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    for fd in STD_FDS:
        with contextlib.suppress(OSError):
            o = os.fstat(fd)
            if (o.st_dev, o.st_ino) == (st.st_dev, st.st_ino):
                return fd
    return None


def target_kind(path: Path) -> str:
    """What ``path`` is (following symlinks): a key of ``TARGET_KINDS``."""
    if std_fd(path) is not None:
        return "standard stream"
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a file in the way: the parent says so
        return "absent"
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot look at the output path ({_cause(exc)})",
            hint="pick another --out",
        ) from exc
    for test, kind in _MODE_KINDS:
        if test(mode):
            return kind
    return "socket"  # an unknown type is refused like a socket


def out_path(typed: str | Path) -> Path:
    """The Path of an output the user named, as typed: ``Path()`` drops a trailing slash, so
    ``-o out.html/`` (a folder's name) wrote the file ``out.html``. A trailing slash where no
    folder is is a UsageError; a folder is left to check_out_path ("is a folder")."""
    text = os.fspath(typed)
    path = Path(typed)
    if isinstance(typed, str) and text.endswith("/") and not path.is_dir():
        raise UsageError(
            f"{text}: ends with '/', the name of a folder, and there is no folder there",
            hint=f"drop the trailing /: --out {text.rstrip('/')}",
        )
    return path


def check_out_path(path: str | Path) -> Path:
    """--out must name a file in an existing folder (not a folder, not under a file), a
    standard stream, or a character device / FIFO. Returns the path to write (a symlink's
    target)."""
    path = out_path(path)
    kind = target_kind(path)  # what the path leads to (symlinks followed)
    if TARGET_KINDS[kind] == "stream":
        return path  # stdout/stderr: where they go is the shell's choice (`-o -` in any cwd)
    if TARGET_KINDS[kind] == "in_place":
        # opened through the link itself (``/dev/stdout`` resolves to ``pipe:[…]``)
        _outside_home(path)
        return path
    if path.is_symlink():
        # a file is replaced at its real place, never the link
        path = Path(os.path.realpath(path))
        kind = target_kind(path)
    _outside_home(path)
    if kind == "directory":
        raise UsageError(f"{path}: is a folder", hint=f"name a file inside it: --out {path}/FILE")
    if TARGET_KINDS[kind] is None:
        raise UsageError(
            f"{path}: is a {kind}, not a file",
            hint="pick a file path, a character device or a FIFO for --out",
        )
    if kind != "absent":
        return path
    if len(path.name.encode("utf-8", "surrogateescape")) > 255:
        raise UsageError(f"{path}: {WRITE_CAUSES[errno.ENAMETOOLONG]}", hint="a shorter --out")
    parent = path.parent
    if not parent.exists():
        # the nearest existing ancestor tells a missing folder from a file in the way
        up = parent
        while not up.exists() and up != up.parent:
            up = up.parent
        if up.exists() and not up.is_dir():
            raise UsageError(f"{up}: is a file, not a folder", hint="pick another --out")
        raise UsageError(f"{parent}: no such folder", hint="create it or pick another --out")
    if not parent.is_dir():
        raise UsageError(f"{parent}: is a file, not a folder", hint="pick another --out")
    return path


def _outside_home(path: Path) -> None:
    """forensics' home (the store: manifest.json, tables/, models/, known_hosts …) is written
    only by forensics: an output there could replace the manifest or a part (``report -o
    $FORENSICS_HOME/manifest.json`` turned the store into an HTML page)."""
    from forensics.home import home

    try:
        real = Path(os.path.realpath(path))
        root = Path(os.path.realpath(home()))
    except (OSError, ValueError):
        return  # the path's own checks say what is wrong with it
    if real == root or root in real.parents:
        raise UsageError(
            f"{path}: is inside forensics' store folder {root} (its files are the store's)",
            hint="write the output somewhere else",
        )


def _cause(exc: OSError) -> str:
    return WRITE_CAUSES.get(exc.errno or 0) or exc.strerror or str(exc)


def write_output(path: str | Path, data: bytes | str, *, what: str = "the output") -> Path:
    """Write ``data`` to the user-named ``path`` as TARGET_KINDS says. Returns the path."""
    target = check_out_path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    how = TARGET_KINDS[target_kind(target)]
    try:
        if how == "stream":
            _write_stream(std_fd(target) or 1, data)
        elif how == "in_place":
            _write_in_place(target, data)
        else:
            _write_atomic(target, data)
    except BrokenPipeError:
        if how == "stream":
            raise  # any output cut by `| head` (the CLI exits 0 quietly)
        raise UsageError(
            f"{target}: cannot write {what} ({WRITE_CAUSES[errno.EPIPE]})",
            hint="keep the reader open until the end",
        ) from None
    except OSError as exc:
        shown = STD_FDS[std_fd(target) or 1] if how == "stream" else target
        raise UsageError(
            f"{shown}: cannot write {what} ({_cause(exc)})", hint="pick a writable --out"
        ) from exc
    return target


def status_to_stderr(path: str | Path) -> bool:
    """True when the output ``path`` is (or was written through) stdout: the command's own
    status line ("wrote PATH", its --json summary) then goes to stderr, never after the
    bytes of the output."""
    return std_fd(path) == 1


class _GuardedFd(io.RawIOBase):
    """fd 1 under ``guard_stdout``: a write that fails raises ``UsageError`` once (naming
    stdout and the cause); what is written after that is dropped, so the interpreter's last
    flush cannot fail again. A closed pipe stays ``BrokenPipeError`` (the CLI's quiet exit)."""

    def __init__(self, fd: int):
        super().__init__()
        self._fd = fd
        self.failed = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:  # noqa: ANN001 - a bytes-like object
        if self.failed:
            return len(data)
        try:
            return os.write(self._fd, data)
        except BrokenPipeError:
            raise
        except OSError as exc:
            self.failed = True
            raise UsageError(
                f"stdout: cannot write the output ({_cause(exc)})",
                hint="redirect it to a file on a disk with space, or to a pipe",
            ) from None


@contextlib.contextmanager
def guard_stdout():  # noqa: ANN201 - a context manager
    """While a command runs, ``sys.stdout`` writes to fd 1 through ``_GuardedFd``: a full
    disk or ``> /dev/full`` under any output (a table, --json, --csv) is one ``Error: stdout:
    …`` line and exit 2, not an internal error. Left as it is when stdout is not fd 1 (a test's
    capture)."""
    old = sys.stdout
    try:
        is_fd1 = old is not None and old.fileno() == 1
    except (AttributeError, OSError, ValueError):
        is_fd1 = False
    if not is_fd1:
        yield
        return
    with contextlib.suppress(Exception):
        old.flush()
    raw = _GuardedFd(1)
    new = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
    )
    sys.stdout = new
    try:
        yield
        new.flush()  # inside the contract: what is left in the buffer is written now
    finally:
        sys.stdout = old
        raw.failed = True  # the wrapper's own last flush (when it is collected) drops
        with contextlib.suppress(Exception):
            new.detach()


def write_home_file(
    path: str | Path, data: bytes | str, *, what: str, mode: int = 0o600, append: bool = False
) -> Path:
    """Write (or ``append`` to) a file forensics keeps for itself; ``StoreError`` (exit 7)
    when it cannot, with the old file as it was."""
    target = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if append:
            _append(target, data, mode)
        else:
            _write_atomic(target, data, mode=mode, follow=False)
    except OSError as exc:
        raise StoreError(
            f"{target}: cannot write {what} ({_cause(exc)})",
            hint="free space or fix the folder's permissions, then run the command again",
        ) from exc
    return target


def replace_file(path: str | Path, data: bytes | str, *, mode: int = 0o600) -> Path:
    """The atomic write underneath both entry points, for a caller that maps ``OSError``
    itself (``LocalHost.write``, the demo): temp file beside it, fsync, rename; never through
    a symlink, never over a file that is not regular; nothing left behind on failure."""
    target = Path(path)
    _write_atomic(target, data.encode("utf-8") if isinstance(data, str) else data, mode=mode,
                  follow=False)  # fmt: skip
    return target


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_stream(fd: int, data: bytes) -> None:
    """stdout/stderr: at the fd's own position (a `>>` log keeps what it held), blocking like
    any output of the command (the stream is shared: its flags are not ours to change)."""
    stream = sys.stdout if fd == 1 else sys.stderr
    with contextlib.suppress(Exception):
        stream.flush()
    _write_all(fd, data)


def _write_in_place(target: Path, data: bytes) -> None:
    # O_NONBLOCK: opening a FIFO with no reader fails (ENXIO) instead of waiting forever; the
    # fd stays non-blocking so a reader that stops reading ends the write after STALL_S
    fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                _, ready, _ = select.select([], [fd], [], STALL_S)
                if not ready:
                    raise OSError(
                        errno.ETIMEDOUT, f"its reader took nothing for {STALL_S:g} s"
                    ) from None
    finally:
        os.close(fd)


def _write_atomic(target: Path, data: bytes, *, mode: int = 0o666, follow: bool = True) -> None:
    tmp = target.with_name(f".{target.name[:200]}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    try:
        if not follow and os.path.islink(target):
            raise OSError(errno.ELOOP, "is a symbolic link (forensics' own files never are)")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            if follow:  # a user's file keeps its mode when it is replaced
                with contextlib.suppress(OSError):
                    os.fchmod(fd, stat.S_IMODE(os.stat(target).st_mode))
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        # re-checked just before the rename: never rename over something that is not a file
        kind = _kind_now(target)
        if TARGET_KINDS[kind] != "atomic":
            raise OSError(errno.EEXIST, f"became a {kind} while being written")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _kind_now(target: Path) -> str:
    try:
        mode = os.lstat(target).st_mode if os.path.islink(target) else os.stat(target).st_mode
    except FileNotFoundError:
        return "absent"
    if stat.S_ISLNK(mode):
        return "symbolic link"  # appeared where none was: refused
    return next((kind for test, kind in _MODE_KINDS if test(mode)), "socket")


def _append(target: Path, data: bytes, mode: int) -> None:
    """One append (known_hosts): a regular file only, cut back to its old size on failure."""
    if os.path.islink(target):
        raise OSError(errno.ELOOP, "is a symbolic link (forensics' own files never are)")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "is not a regular file")
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, st.st_size)
            raise
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


__all__ = [
    "STALL_S",
    "guard_stdout",
    "TARGET_KINDS",
    "check_out_path",
    "replace_file",
    "status_to_stderr",
    "std_fd",
    "target_kind",
    "write_home_file",
    "write_output",
]
