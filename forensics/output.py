"""Writing a file the user named (``report -o``, ``plot -o``): one way, for every command.

What the target is decides how it is written (the table below, ``TARGET_KINDS``):

* a regular file, or nothing yet: written to a temporary file beside it, flushed and renamed
  over it, so a crash or a full disk leaves the old file (or none), never half of one;
* a character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe): written in
  place, never renamed over (as root, a rename would replace ``/dev/full`` with a file);
  a FIFO nobody reads is refused at once instead of blocking;
* anything else (a folder, a socket, a block device): refused.

A symlink is followed: its target is what gets written (a device or FIFO through the link
itself, so ``/dev/stdout`` works when it is a pipe). Nothing inside forensics' home (the store
folder) is ever an output: that would replace the manifest or a part. Errors are
``UsageError`` (exit 2) naming the path, the cause and a fix.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from forensics.errors import UsageError

# file type -> how a file of that type is written (None: refused, with the reason)
TARGET_KINDS: dict[str, str | None] = {
    "absent": "atomic",
    "regular": "atomic",
    "character device": "in_place",
    "fifo": "in_place",
    "directory": None,
    "socket": None,
    "block device": None,
}

_MODE_KINDS = (
    (stat.S_ISREG, "regular"),
    (stat.S_ISCHR, "character device"),
    (stat.S_ISFIFO, "fifo"),
    (stat.S_ISDIR, "directory"),
    (stat.S_ISSOCK, "socket"),
    (stat.S_ISBLK, "block device"),
)


def target_kind(path: Path) -> str:
    """What ``path`` is (following symlinks): a key of ``TARGET_KINDS``."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a file in the way: the parent says so
        return "absent"
    except OSError as exc:
        raise UsageError(
            f"{path}: cannot look at the output path ({exc.strerror or exc})",
            hint="pick another --out",
        ) from exc
    for test, kind in _MODE_KINDS:
        if test(mode):
            return kind
    return "socket"  # an unknown type is refused like a socket


def check_out_path(path: str | Path) -> Path:
    """--out must name a file in an existing folder (not a folder, not under a file), or a
    character device / FIFO. Returns the path to write (a symlink's target)."""
    path = Path(path)
    kind = target_kind(path)  # what the path leads to (symlinks followed)
    if path.is_symlink() and TARGET_KINDS[kind] != "in_place":
        # a file is replaced at its real place, never the link; a device or FIFO is opened
        # through the link itself (``/dev/stdout`` resolves to ``pipe:[…]``, not a path)
        path = Path(os.path.realpath(path))
        kind = target_kind(path)
    _outside_home(path)
    if kind == "directory":
        raise UsageError(f"{path}: is a folder", hint=f"--out {path / 'forensics.html'}")
    if TARGET_KINDS[kind] is None:
        raise UsageError(
            f"{path}: is a {kind}, not a file",
            hint="pick a file path, a character device or a FIFO for --out",
        )
    if kind != "absent":
        return path
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


def write_output(path: str | Path, data: bytes | str, *, what: str = "the output") -> Path:
    """Write ``data`` to the user-named ``path`` as TARGET_KINDS says. Returns the path."""
    target = check_out_path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    how = TARGET_KINDS[target_kind(target)]
    try:
        if how == "in_place":
            _write_in_place(target, data)
        else:
            _write_atomic(target, data)
    except OSError as exc:
        cause = exc.strerror or str(exc)
        if exc.errno == errno.ENXIO:
            cause = "a FIFO that no process is reading"
        raise UsageError(
            f"{target}: cannot write {what} ({cause})", hint="pick a writable --out"
        ) from exc
    return target


def _write_in_place(target: Path, data: bytes) -> None:
    # O_NONBLOCK: opening a FIFO with no reader fails (ENXIO) instead of waiting forever
    fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        # re-checked just before the rename: never rename over something that is not a file
        if TARGET_KINDS[target_kind(target)] != "atomic":
            raise UsageError(
                f"{target}: became a {target_kind(target)} while being written",
                hint="pick another --out",
            )
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


__all__ = ["TARGET_KINDS", "check_out_path", "target_kind", "write_output"]
